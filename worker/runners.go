package worker

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/fleet-go/fleet/internal/lifecycle"
)

// runners is the service that runs the jobs the claimer starts: a fixed
// pool of Concurrency goroutines for the worker's life, not a goroutine
// per job, so a job starts on a goroutine whose stack has already grown
// to what handlers need, which a drain of no-op jobs feels. The claimer
// sends each started job on tasks (which holds Concurrency, so a send
// never blocks) and receives each attempt's end on done.
//
// It stops after the claimer, which has waited for every job it started
// but those it gave up on (a handler that ignored its timeout or cancel
// past the grace period, and the jobs it interrupted after it): Stop closes
// tasks and waits for every runner but the ones still in such a handler,
// which end when their handler returns. Their late ends go to done, which
// has room for all of them.
type runners struct {
	n    int
	exec *executor // runs each task's handler
	log  *slog.Logger

	tasks chan task
	done  chan finished
	// exited receives one value per runner that has ended.
	exited chan struct{}
	// givenUp is how many jobs the claimer gave up on whose end it has
	// not received (see giveUp and returned).
	givenUp atomic.Int64

	lc  lifecycle.Lifecycle
	sig struct {
		left lifecycle.Signal[int] // Stop returned, leaving this many runners in handlers given up on
	}
}

func newRunners(cfg Config, log *slog.Logger, exec *executor) *runners {
	return &runners{
		n: cfg.Concurrency, exec: exec, log: log,
		tasks:  make(chan task, cfg.Concurrency),
		done:   make(chan finished, cfg.Concurrency),
		exited: make(chan struct{}, cfg.Concurrency),
	}
}

func (r *runners) Name() string { return "runners" }

// Start starts the runners.
func (r *runners) Start(ctx context.Context) error {
	sctx, end, err := r.lc.Begin(ctx, r.Name())
	if err != nil {
		return err
	}
	for range r.n {
		go r.runner()
	}
	go func() {
		defer end()
		<-sctx.Done()
		close(r.tasks)
		r.wait()
	}()
	return nil
}

// Stop closes tasks and waits for the runners but those in a handler the
// claimer gave up on. Call it once the claimer has ended.
func (r *runners) Stop() { r.lc.Halt() }

// giveUp tells the runners that the claimer waits no longer for n jobs
// still running.
func (r *runners) giveUp(n int) { r.givenUp.Add(int64(n)) }

// returned tells the runners that the claimer received the end of a job
// it had given up on.
func (r *runners) returned() { r.givenUp.Add(-1) }

// wait waits, once tasks is closed, until every runner has ended but the
// ones in a handler given up on.
func (r *runners) wait() {
	live := r.n
	for {
		// A runner sends its job's end before it ends: once it is seen to
		// have ended, that end is here to be counted.
		for drained := false; !drained; {
			select {
			case <-r.done:
				r.returned()
			default:
				drained = true
			}
		}
		if stuck := int(r.givenUp.Load()); live <= max(stuck, 0) {
			if live > 0 {
				r.log.Warn("left runners in handlers that ignored their timeout or cancel; they end when their handlers return", "runners", live)
			}
			r.sig.left.Send(live)
			return
		}
		select {
		case <-r.exited:
			live--
		case <-r.done:
			r.returned()
		}
	}
}

// runner runs the jobs the claimer starts, one at a time, until tasks is
// closed.
func (r *runners) runner() {
	defer func() { r.exited <- struct{}{} }()
	for t := range r.tasks {
		r.done <- r.exec.run(t)
	}
}
