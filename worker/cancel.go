package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// Cancels and snoozes.
//
// An operator's cancel of a running job reaches its worker two ways: a
// notification on store.CancelChannel, which the listener (on the
// connection it listens for dispatches on) hands to the loop at once, and
// the cancel poller's poll, every CancelPollInterval while the loop runs
// jobs, of the cancel requests among them (one statement by primary key
// over the running ids: its cost grows with the jobs running here, never
// with the table). Either way the loop cancels the job's context with a cause
// wrapping queue.ErrCancelled. When the handler returns, the attempt is
// written as cancelled (unless it returned nil: then its work is done, and
// it completed). A handler that ignores its context is given up on
// TimeoutGrace after the cancel, as one ignoring its timeout is: the
// attempt is written as cancelled, the worker stops, its other running
// jobs get the grace period to finish (those still running then are
// interrupted, see claimer.giveUp) and Run returns ErrJobIgnoredCancel. Should the process die before the
// outcome is written, the master's release of its jobs ends the job as
// cancelled too (store.JobReleaseWorker).

// DefaultCancelPollInterval is how often a busy worker looks for cancel
// requests a notification did not bring.
const DefaultCancelPollInterval = time.Second

// cancelBacklog bounds the cancel requests waiting for the loop; a request
// that finds it full is dropped, and the next poll finds it.
const cancelBacklog = 256

// cancelPollTimeout bounds one poll for cancel requests.
const cancelPollTimeout = 5 * time.Second

// ErrJobIgnoredCancel is returned by Run when a cancelled job kept running
// past the grace period: the worker recorded the attempt as cancelled,
// gave its other running jobs the grace period to finish, interrupted
// those still running then, and gave up. It wraps ErrJobTimedOut, so the
// process exits as for a job ignoring its timeout and its supervisor
// replaces it.
var ErrJobIgnoredCancel = fmt.Errorf("a cancelled job ignored its cancellation: %w", ErrJobTimedOut)

// askCancels hands the ids of the running jobs to the poller, unless it is
// still busy with the previous ones.
func (c *claimer) askCancels(s *loopState) {
	ids := make([]int64, 0, len(s.running))
	for id := range s.running {
		ids = append(ids, id)
	}
	c.poller.ask(ids)
}

// cancelPoller is the service that asks the database for cancel requests
// among the ids the claimer sends (ask), and hands those it finds to the
// claimer. It runs on its own goroutine so that a slow database never
// holds up the loop.
type cancelPoller struct {
	st  *store.Store
	log *slog.Logger
	// ids brings the running ids from the claimer; found takes the
	// requests to it.
	ids   chan []int64
	found chan<- store.CancelNotice

	lc  lifecycle.Lifecycle
	sig struct {
		round lifecycle.Signal[int] // a poll done: how many requests it found (-1: it failed)
	}
}

func newCancelPoller(st *store.Store, log *slog.Logger, found chan<- store.CancelNotice) *cancelPoller {
	return &cancelPoller{st: st, log: log, ids: make(chan []int64, 1), found: found}
}

func (p *cancelPoller) Name() string { return "cancel poller" }

// Start polls on its own goroutine, whenever asked, until Stop.
func (p *cancelPoller) Start(ctx context.Context) error {
	sctx, end, err := p.lc.Begin(ctx, p.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		p.run(sctx)
	}()
	return nil
}

// Stop cancels the poll in flight and waits.
func (p *cancelPoller) Stop() { p.lc.Halt() }

// ask hands the poller ids to look at, unless it is still busy with the
// previous ones; it never blocks.
func (p *cancelPoller) ask(ids []int64) {
	select {
	case p.ids <- ids:
	default:
	}
}

func (p *cancelPoller) run(ctx context.Context) {
	for {
		var ids []int64
		select {
		case <-ctx.Done():
			return
		case ids = <-p.ids:
		}
		pctx, cancel := context.WithTimeout(ctx, cancelPollTimeout)
		found, err := p.st.JobCancelPoll(pctx, ids)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				p.log.Debug("looking for cancel requests failed; trying again at the next poll", "err", err)
			}
			p.sig.round.Send(-1)
			continue
		}
		for _, n := range found {
			select {
			case <-ctx.Done():
				return
			case p.found <- n:
			}
		}
		p.sig.round.Send(len(found))
	}
}

// cancelHeld applies a cancel request to the job it names, if this worker
// holds it under that lease: a running job's context is cancelled with a
// cause wrapping queue.ErrCancelled; a claimed job not started yet is
// given back, which ends it as cancelled (store.JobRelease).
func (c *claimer) cancelHeld(s *loopState, n store.CancelNotice) {
	if r, ok := s.running[n.ID]; ok {
		if (n.Lease != 0 && n.Lease != r.job.Token) || !r.cancelAt.IsZero() {
			return
		}
		r.cancelAt, r.cancelBy = c.now(), n.By
		c.log.Info("job cancelled by an operator: stopping it", "job_id", n.ID, "job", r.job.Name, "by", n.By)
		r.stop(fmt.Errorf("%w by %s", queue.ErrCancelled, n.By))
		return
	}
	for i, j := range s.buffer {
		if j.ID == n.ID && (n.Lease == 0 || n.Lease == j.Token) {
			s.buffer = append(s.buffer[:i:i], s.buffer[i+1:]...)
			c.release(c.unbuffer(s, []buffered{j}), "")
			return
		}
	}
}
