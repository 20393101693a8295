// Package ratelog keeps a failing operation from flooding the log while
// the database is away, or while it fails and recovers over and over.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Interval is the least time between two lines of one key, but for the
// first recovery line after a failure line, which is never held back.
const Interval = time.Minute

// Log is the limiter. Each key is one kind of operation. A failure after a
// quiet Interval is logged at once, and so is the success that ends it;
// otherwise a key gets at most one line per Interval, which counts the
// failures and recoveries it stands for. An operation that fails and
// recovers 200 times in 30 s logs its first failure and first recovery,
// then one line a minute while it flaps, and a last one, a minute after
// the one before, once it works. Safe for concurrent use; the zero value
// is ready.
type Log struct {
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	failing    bool      // the last call was a failure
	failures   int       // since the last line
	recoveries int       // since the last line
	total      int       // failures of the current streak, for the recovery line
	loggedAt   time.Time // the last line
	owesOK     bool      // the last line was a failure line
}

func (r *Log) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Log) kind(key string) *kind {
	if r.kinds == nil {
		r.kinds = map[string]*kind{}
	}
	k := r.kinds[key]
	if k == nil {
		k = &kind{}
		r.kinds[key] = k
	}
	return k
}

// Fail records a failure of key and logs msg (a warning) when due, with
// the failures (and recoveries, when there were any) since the last line.
func (r *Log) Fail(log *slog.Logger, key, msg string, args ...any) {
	now := r.now()
	r.mu.Lock()
	k := r.kind(key)
	if !k.failing {
		k.total = 0
	}
	k.failing = true
	k.failures++
	k.total++
	due := k.loggedAt.IsZero() || now.Sub(k.loggedAt) >= Interval
	failures, recoveries := k.failures, k.recoveries
	if due {
		// Only the line that opens an episode (nothing held back since
		// the last line) owes a prompt recovery line; a summary of a
		// flapping minute does not.
		k.loggedAt, k.failures, k.recoveries, k.owesOK = now, 0, 0, failures == 1 && recoveries == 0
	}
	r.mu.Unlock()
	if due {
		args = append(args, "failures", failures)
		if recoveries > 0 {
			args = append(args, "recoveries", recoveries)
		}
		log.Warn(msg, args...)
	}
}

// OK records a success of key. It logs msg (info) when it ends an
// episode whose failure line was the last line, or when a line is due and
// failures went unlogged since the last one.
func (r *Log) OK(log *slog.Logger, key, msg string) {
	now := r.now()
	r.mu.Lock()
	k := r.kinds[key]
	if k == nil || (!k.failing && k.failures == 0) {
		r.mu.Unlock()
		return
	}
	if k.failing {
		k.failing = false
		k.recoveries++
	}
	prompt := k.owesOK
	due := prompt || now.Sub(k.loggedAt) >= Interval
	failures, recoveries, total := k.failures, k.recoveries, k.total
	if due {
		k.loggedAt, k.failures, k.recoveries, k.owesOK = now, 0, 0, false
	}
	r.mu.Unlock()
	if !due {
		return
	}
	if prompt {
		// The end of one episode: how many failures it lasted.
		log.Info(msg, "failures", total)
		return
	}
	log.Info(msg, "failures", failures, "recoveries", recoveries)
}
