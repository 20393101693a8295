package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/store"
)

// The dead rows of queue_jobs worth a vacuum: at least vacuumMinDead, and
// a fifth of the live rows.
const (
	vacuumMinDead     = 50_000
	vacuumDeadPerLive = 0.2
)

// vacuumTimeout bounds one look (and the vacuum it may run).
const vacuumTimeout = 10 * time.Minute

// vacuum is the service that keeps queue_jobs vacuumed while the worker
// churns it: at start, then every VacuumEvery if the worker finished jobs
// since its last look, it asks store.QueueVacuum. An idle worker asks
// nothing after its first look. With a negative VacuumEvery it starts and
// does nothing. A look finds the table vacuumed enough when a vacuum of it
// ended less than VacuumEvery ago, whoever ran it: the workers of every
// master on the database look on their own, and N of them would otherwise
// vacuum N times as often as one worker alone (with 8 masters of one
// worker each draining a backlog, 24 vacuums in 16 s, 4.3 s of the
// server's time).
type vacuum struct {
	st    *store.Store
	every time.Duration
	log   *slog.Logger
	now   func() time.Time
	// finished is the count of attempts the worker finished.
	finished func() int64

	lc  lifecycle.Lifecycle
	sig struct {
		// round: a tick handled; true when it looked (asked the
		// database), false when nothing had finished since the last look.
		round lifecycle.Signal[bool]
	}
}

func newVacuum(st *store.Store, every time.Duration, log *slog.Logger, now func() time.Time, finished func() int64) *vacuum {
	return &vacuum{st: st, every: every, log: log, now: now, finished: finished}
}

func (v *vacuum) Name() string { return "vacuum" }

// Start looks at once, then every VacuumEvery, on its own goroutine until
// Stop.
func (v *vacuum) Start(ctx context.Context) error {
	sctx, end, err := v.lc.Begin(ctx, v.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		if v.every > 0 {
			v.run(sctx)
		}
	}()
	return nil
}

// Stop cancels the look in flight and waits.
func (v *vacuum) Stop() { v.lc.Halt() }

func (v *vacuum) run(ctx context.Context) {
	t := time.NewTicker(v.every)
	defer t.Stop()
	// The first look is at start: a table left full of dead rows (a drained
	// backlog, a mass delete) is vacuumed before the claims wade through it.
	seen := int64(-1)
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		n := v.finished()
		if n == seen {
			v.sig.round.Send(false)
			continue
		}
		seen = n
		v.look(ctx)
		v.sig.round.Send(true)
	}
}

// look asks store.QueueVacuum once.
func (v *vacuum) look(ctx context.Context) {
	vctx, cancel := context.WithTimeout(ctx, vacuumTimeout)
	defer cancel()
	began := v.now()
	r, err := v.st.QueueVacuum(vctx, store.QueueVacuumParams{MinDead: vacuumMinDead, DeadPerLive: vacuumDeadPerLive, MinGap: v.every})
	switch {
	case err != nil && ctx.Err() == nil:
		v.log.Warn("vacuum of queue_jobs failed; claims slow down as dead rows pile up", "err", err)
	case r.Vacuumed:
		v.log.Debug("vacuumed queue_jobs", "dead", r.Dead, "live", r.Live, "took", v.now().Sub(began).Round(time.Millisecond))
	}
}
