package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// Limits of the outcome writer.
const (
	// writeBatch is the most outcomes written in one statement.
	writeBatch = 1000
	// writeTimeout bounds one write.
	writeTimeout = 10 * time.Second
	// writeRetryBase and writeRetryMax bound the backoff between the
	// tries of a batch.
	writeRetryBase = 50 * time.Millisecond
	writeRetryMax  = 5 * time.Second
	// writeTries is how many times a batch the database rejects is tried
	// before it is split in two.
	writeTries = 3
)

// writer is the worker's outcome writer: a service with one loop that
// writes finished attempts in batches of at most writeBatch, one statement
// per batch, while the next batch accumulates; under load batches grow and
// the hot path never waits for a write per job.
//
// A write has a timeout. A batch that fails because the database cannot be
// reached (connection errors, timeouts, shutdowns, serialization failures)
// is retried with jittered backoff for as long as it takes: nothing else
// could be written either, and the worker stops claiming meanwhile
// (backpressure). A batch the database rejects is retried writeTries times,
// then split in halves until the outcome at fault is alone; that one is
// written with its error replaced by a plain note, or else its job is
// released. It never blocks the others. Retrying is safe: the finish
// statement matches each job's lease token, so an outcome already written
// by a try whose answer was lost changes nothing the second time.
type writer struct {
	st        *store.Store
	worker    string
	master    string
	log       *slog.Logger
	logs      ratelog.Log // failing writes: once per streak, then once a minute
	onWritten func()      // called after every written batch
	onFail    func()      // called after every failed write; nil: none
	// events receives the events of written outcomes (see publish); nil:
	// none.
	events *queue.Registry
	// onEvent is Config.OnEvent; nil: none.
	onEvent func(queue.Event)

	mu      sync.Mutex
	pending []store.JobOutcome
	writing []store.JobOutcome // the batch being written, nil between writes
	unsaved int                // outcomes added but not yet written (pending + in flight)
	failing bool               // the last write failed (see Stalled)
	changed chan struct{}      // closed and replaced whenever unsaved drops
	kick    chan struct{}
	// sleep waits between tries (backoff.Sleep); tests shorten it.
	sleep func(ctx context.Context, d time.Duration) error

	lc  lifecycle.Lifecycle
	sig struct {
		written lifecycle.Signal[int] // a batch written: its size
	}
}

// writerHooks are what a writer calls, and whom it tells of events; any
// may be nil.
type writerHooks struct {
	onWritten func()            // after every written batch
	onFail    func()            // after every failed write
	events    *queue.Registry   // the events of written outcomes (see publish)
	onEvent   func(queue.Event) // Config.OnEvent
}

func newWriter(st *store.Store, worker, master string, log *slog.Logger, h writerHooks) *writer {
	return &writer{
		st:        st,
		worker:    worker,
		master:    master,
		log:       log,
		onWritten: h.onWritten,
		onFail:    h.onFail,
		events:    h.events,
		onEvent:   h.onEvent,
		changed:   make(chan struct{}),
		kick:      make(chan struct{}, 1),
		sleep:     backoff.Sleep,
	}
}

func (w *writer) Name() string { return "writer" }

// Start writes batches on its own goroutine until Stop.
func (w *writer) Start(ctx context.Context) error {
	sctx, end, err := w.lc.Begin(ctx, w.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		w.run(sctx)
	}()
	return nil
}

// Stop cancels the write in flight and waits. Outcomes not written by
// then stay unsaved (see run); the claimer drains the writer before it
// ends, so a worker's writer stops with nothing left but what a frozen
// database refused.
func (w *writer) Stop() { w.lc.Halt() }

func (w *writer) add(o store.JobOutcome) {
	w.mu.Lock()
	w.pending = append(w.pending, o)
	w.unsaved++
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// holding adds to held the leases of the attempts not written yet, waiting
// or being written: the worker still holds their jobs (see reconcile).
func (w *writer) holding(held map[store.Lease]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.pending {
		held[o.Lease] = true
	}
	for _, o := range w.writing {
		held[o.Lease] = true
	}
}

// Unsaved is how many finished attempts are not written yet.
func (w *writer) Unsaved() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unsaved
}

// Stalled is how many finished attempts wait while writing fails: the
// unsaved ones when the last write failed, else 0.
func (w *writer) Stalled() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.failing {
		return 0
	}
	return w.unsaved
}

// setFailing notes whether the last write failed.
func (w *writer) setFailing(failing bool) {
	w.mu.Lock()
	w.failing = failing
	w.mu.Unlock()
}

// run writes batches until ctx ends (Stop). Outcomes not written by then are only
// lost with the process; their jobs are still reserved and get released by
// a master, never dropped.
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
	for ctx.Err() == nil {
		w.mu.Lock()
		n := min(len(w.pending), writeBatch)
		batch := w.pending[:n:n]
		w.pending = w.pending[n:]
		if len(w.pending) == 0 {
			w.pending = nil
		}
		if n > 0 {
			w.writing = batch
		}
		w.mu.Unlock()
		if n == 0 {
			return
		}
		if !w.write(ctx, batch) {
			// Stopped: put the batch back so that Unsaved stays true.
			w.mu.Lock()
			w.pending = append(batch, w.pending...)
			w.writing = nil
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.writing = nil
		w.unsaved -= n
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
		if w.onWritten != nil {
			w.onWritten()
		}
		w.sig.written.Send(n)
	}
}

// write writes batch, splitting it when the database rejects it, and
// reports false only when ctx ended first.
func (w *writer) write(ctx context.Context, batch []store.JobOutcome) bool {
	retry := backoff.Exponential{Base: writeRetryBase, Max: writeRetryMax}
	rejected := 0
	for try := 0; ; try++ {
		err := w.finish(ctx, batch, try > 0)
		if err == nil {
			w.setFailing(false)
			w.logs.OK(w.log, "write", "writing finished jobs works again")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.setFailing(true)
		if w.onFail != nil {
			w.onFail()
		}
		if rejectedByDatabase(err) {
			rejected++
			if rejected >= writeTries {
				return w.isolate(ctx, batch, err)
			}
		}
		d := retry.Next()
		w.logs.Fail(w.log, "write", "write finished jobs failed; retrying", "jobs", len(batch), "err", err, "retry_in", d)
		// The jitter keeps many workers that lost the database together
		// from coming back in step.
		if w.sleep(ctx, backoff.Between(d/2, d)) != nil {
			return false
		}
	}
}

// isolate splits a rejected batch until the outcome at fault is alone.
func (w *writer) isolate(ctx context.Context, batch []store.JobOutcome, err error) bool {
	if len(batch) > 1 {
		half := len(batch) / 2
		return w.write(ctx, batch[:half]) && w.write(ctx, batch[half:])
	}
	o := batch[0]
	w.log.Error("the database rejects a finished job's outcome; recording it without its error text",
		"job_id", o.ID, "job", o.Name, "attempt", o.Attempt, "err", err)
	plain := o
	if plain.Error != "" {
		plain.Error = fmt.Sprintf("the error text of this attempt could not be stored: %v", sqlState(err))
	}
	if err = w.finish(ctx, []store.JobOutcome{plain}, true); err == nil {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	// Still rejected: give the job back rather than hold it forever.
	rctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, rerr := w.st.JobRelease(rctx, store.JobReleaseParams{Leases: []store.Lease{o.Lease},
		Error: "released: the outcome of its attempt could not be written"})
	w.log.Error("released a job whose outcome could not be written", "job_id", o.ID, "job", o.Name,
		"err", err, "release_err", rerr)
	return ctx.Err() == nil
}

// finish runs one write with its timeout and logs lost leases. A retry
// may find leases gone because the failed try before it was committed
// after all (its reply was lost): those attempts are recorded once, by
// that try, and the log says so.
func (w *writer) finish(ctx context.Context, batch []store.JobOutcome, retry bool) error {
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	res, err := w.st.JobFinishMany(wctx, store.JobFinishParams{Worker: w.worker, Master: w.master, Outcomes: batch})
	if err != nil {
		return err
	}
	w.publish(batch, res.Lost)
	lost := res.Lost
	if slices.ContainsFunc(batch, func(o store.JobOutcome) bool { return o.InTx }) {
		lost = w.sortInTx(batch, lost)
	}
	if len(lost) > 0 {
		ids := make([]int64, 0, min(len(lost), 10))
		for _, l := range lost[:cap(ids)] {
			ids = append(ids, l.ID)
		}
		msg := "lost the lease of jobs: they were released and may have been claimed again; these attempts are not recorded"
		if retry {
			msg = "jobs no longer held when writing their outcomes again: either the earlier try was committed although it reported an error (then they are recorded once), or they were released and may have been claimed again"
		}
		w.log.Warn(msg, "jobs", len(lost), "job_ids", ids)
	}
	return nil
}

// sortInTx takes out of lost the outcomes marked InTx, whose lease is
// expected to be gone (the handler's transaction completed the job), and
// logs those that were written after all: their handler's transaction did
// not commit.
func (w *writer) sortInTx(batch []store.JobOutcome, lost []store.Lease) []store.Lease {
	gone := make(map[store.Lease]bool, len(lost))
	for _, l := range lost {
		gone[l] = true
	}
	var rest []store.Lease
	for _, o := range batch {
		switch {
		case !o.InTx:
			if gone[o.Lease] {
				rest = append(rest, o.Lease)
			}
		case !gone[o.Lease]:
			w.log.Warn("a job completed in its handler's transaction is still queued: that transaction did not commit; the attempt is recorded as failed",
				"job_id", o.ID, "job", o.Name, "attempt", o.Attempt, "outcome", o.Kind)
		}
	}
	return rest
}

// rejectedByDatabase reports whether err is the server refusing the
// statement itself (bad data, a constraint), as opposed to the database
// being unreachable, shutting down, overloaded or timing out, where trying
// the same statement again later is the answer.
func rejectedByDatabase(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", // connection exception
		"25", // invalid transaction state: a read-only primary (failover, recovery)
		"40", // transaction rollback: serialization failure, deadlock
		"53", // insufficient resources
		"55", // object not in prerequisite state: lock not available
		"57", // operator intervention: shutdown, query cancelled
		"58": // system error
		return false
	}
	return true
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "SQLSTATE " + pgErr.Code
	}
	return "unknown error"
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
