package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet-go/fleet/store"
)

// writer batches finished attempts and writes them in one round trip per
// batch. While a batch is being written the next one accumulates, so under
// load batches grow and the hot path never waits for a write per job.
type writer struct {
	st     *store.Store
	worker string
	log    *slog.Logger

	mu      sync.Mutex
	pending store.JobFinishParams
	unsaved int           // attempts added but not yet written (pending + in flight)
	changed chan struct{} // closed and replaced whenever unsaved drops
	kick    chan struct{}
}

func newWriter(st *store.Store, worker string, log *slog.Logger) *writer {
	return &writer{
		st:      st,
		worker:  worker,
		log:     log,
		pending: store.JobFinishParams{Worker: worker},
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
	}
}

// outcome is one finished attempt as the writer records it: what happens
// to the job, and the attempt's history row.
type outcome struct {
	completed *store.Lease
	retried   *store.JobRetry
	failed    *store.JobFail
	history   store.JobHistoryRow
}

func (w *writer) add(o outcome) {
	w.mu.Lock()
	switch {
	case o.completed != nil:
		w.pending.Completed = append(w.pending.Completed, *o.completed)
	case o.retried != nil:
		w.pending.Retried = append(w.pending.Retried, *o.retried)
	case o.failed != nil:
		w.pending.Failed = append(w.pending.Failed, *o.failed)
	}
	w.pending.History = append(w.pending.History, o.history)
	w.unsaved++
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Unsaved is how many finished attempts are not written yet.
func (w *writer) Unsaved() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unsaved
}

// run writes batches until ctx ends. A failed write is retried with backoff
// and its attempts are kept: they are only lost if the process dies, and then
// the jobs are still reserved and get released, never dropped.
func (w *writer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		w.writeAll(ctx)
	}
}

func (w *writer) writeAll(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = store.JobFinishParams{Worker: w.worker}
		w.mu.Unlock()
		n := len(batch.Completed) + len(batch.Retried) + len(batch.Failed)
		if n == 0 {
			return
		}
		for {
			res, err := w.st.JobFinishMany(ctx, batch)
			if err == nil {
				for _, l := range res.Lost {
					w.log.Warn("lost the lease of a job: it was released and may have been claimed again; this attempt's result is not recorded",
						"job_id", l.ID, "attempt", l.Attempt)
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("write finished jobs failed; retrying", "jobs", n, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
		w.mu.Lock()
		w.unsaved -= n
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	}
}

// drain waits until every attempt added so far is written or ctx ends.
func (w *writer) drain(ctx context.Context) error {
	for {
		w.mu.Lock()
		if w.unsaved == 0 {
			w.mu.Unlock()
			return nil
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case w.kick <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
