package worker

import (
	"errors"
	"sync/atomic"

	"github.com/fleet-go/fleet/spawner"
)

// Exit is a worker's exit policy: the status a worker process exits with,
// which fleet:work exits with and the in-process spawner reports, so that
// a master counts either exit the same way (spawner.ExitFor). It notes
// what the worker's exiting report says through Reports; Code then gives
// the status. The zero Exit is ready.
type Exit struct {
	unsaved atomic.Int64 // of the exiting report
}

// Reports returns next, noting on the way the outcomes the exiting report
// says were left unwritten.
func (e *Exit) Reports(next func(spawner.Report)) func(spawner.Report) {
	return func(r spawner.Report) {
		if r.Type == spawner.ReportExiting {
			e.unsaved.Store(int64(r.Unsaved))
		}
		next(r)
	}
}

// Code is the exit status of a worker whose run returned err: 0 without an
// error; spawner.ExitCodeJobTimedOut when it gave up on a job that ignored
// its timeout (ErrJobTimedOut); spawner.ExitCodeUnsaved when it failed
// with outcomes left unwritten, so that the master counts the exit by its
// reason rather than as a crash; else 1.
func (e *Exit) Code(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrJobTimedOut):
		return spawner.ExitCodeJobTimedOut
	case e.unsaved.Load() > 0:
		return spawner.ExitCodeUnsaved
	}
	return 1
}
