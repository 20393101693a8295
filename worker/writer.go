package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

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
	// tries of a batch while the database does not answer.
	writeRetryBase = 50 * time.Millisecond
	writeRetryMax  = 5 * time.Second
	// TransientRetryMax bounds the pause before a write the database
	// answered with a passing refusal (a deadlock, a serialization
	// failure, no connection slot left, the statement timeout of a single
	// outcome) is tried again; the pauses start at transientRetryBase and
	// double. It is also the most a finished job's outcome waits, beyond
	// the statements ahead of it, before its own write begins while the
	// database answers.
	TransientRetryMax  = 100 * time.Millisecond
	transientRetryBase = 5 * time.Millisecond
	// writeTries is how many times a batch the database rejects is tried
	// before it is split in two.
	writeTries = 3
	// pingTimeout bounds the ping that tells a write the client gave up
	// on (no reply within writeTimeout) from a database that is away.
	pingTimeout = 2 * time.Second
)

// writer is the worker's outcome writer: a service with one loop that
// writes finished attempts in batches of at most writeBatch, one statement
// per batch, while the next batch accumulates; under load batches grow and
// the hot path never waits for a write per job. It never waits to fill a
// batch: an outcome's write begins as soon as the statements ahead of it
// are done (see DefaultMaxUnsaved for how many may be ahead).
//
// Outcomes wait in one queue, oldest first; each statement takes the
// oldest, and a statement that fails puts its outcomes back at the head,
// so that the next try also takes the outcomes that finished meanwhile.
// What a failure says about the database decides what comes next (see
// store.ClassifyError):
//   - A statement the server cancelled for its statement timeout (SQLSTATE
//     57014), or that got no reply within writeTimeout from a database
//     that still answers a ping, did nothing: its outcomes are tried again
//     at once in statements of half its size, down to single outcomes, and
//     the size grows back, doubling, over statements that pass (see
//     batchSize). The log says so once per episode, then once a minute
//     with a count.
//   - A passing refusal of a database that answered (a deadlock, a
//     serialization failure, too many connections, a lock not available,
//     the timeout of a single outcome) is tried again after a short
//     pause, at most TransientRetryMax.
//   - A database that does not answer (a connection error, a server
//     shutting down) is waited for with jittered backoff, for as long as
//     it takes: nothing else could be written either, and the worker stops
//     claiming meanwhile (backpressure).
//   - A batch the database rejects (bad data, a constraint) is retried
//     writeTries times, then split in halves until the outcome at fault is
//     alone; that one is written with its error replaced by a plain note,
//     or else its job is released. It never blocks the others.
//
// Retrying is safe: the finish statement matches each job's lease token, so
// an outcome already written by a try whose answer was lost changes
// nothing the second time. None of this stops, fences or slows the
// worker's claims but the backpressure of outcomes not yet written.
type writer struct {
	st        *store.Store
	worker    string
	master    string
	log       *slog.Logger
	logs      ratelog.Log // failing writes and split batches: once per streak, then once a minute
	onWritten func()      // called after every written batch
	onFail    func(error) // called with the error of every failed write; nil: none
	// events receives the events of written outcomes (see publish); nil:
	// none.
	events *queue.Registry
	// onEvent is Config.OnEvent; nil: none.
	onEvent func(queue.Event)

	mu      sync.Mutex
	pending []store.JobOutcome // oldest first
	writing []store.JobOutcome // the batch being written, nil between writes
	unsaved int                // outcomes added but not yet written (pending + in flight)
	failing bool               // the last write failed (see Stalled)
	// retried counts the outcomes at the head of pending that a failed
	// statement tried already.
	retried int
	changed chan struct{} // closed and replaced whenever unsaved drops
	kick    chan struct{}
	// sleep waits between tries (backoff.Sleep); tests shorten it.
	sleep func(ctx context.Context, d time.Duration) error

	// size is the batch size while statements time out; the loop's own.
	size batchSize

	lc  lifecycle.Lifecycle
	sig struct {
		written lifecycle.Signal[int] // a batch written: its size
		split   lifecycle.Signal[int] // a statement of that many outcomes timed out and was split
	}
}

// writerHooks are what a writer calls, and whom it tells of events; any
// may be nil.
type writerHooks struct {
	onWritten func()            // after every written batch
	onFail    func(error)       // after every failed write
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
		size:      batchSize{ceiling: writeBatch},
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

// take takes the oldest pending outcomes for the next statement, as many
// as the batch size allows, and reports whether some of them were tried
// before.
func (w *writer) take() (batch []store.JobOutcome, retry bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(w.pending), w.size.limit(writeBatch))
	batch = w.pending[:n:n]
	w.pending = w.pending[n:]
	if len(w.pending) == 0 {
		w.pending = nil
	}
	if n > 0 {
		w.writing = batch
	}
	return batch, w.retried > 0
}

// putBack returns a batch whose statement failed to the head of the
// queue, so that Unsaved stays true and the next statement takes it first.
func (w *writer) putBack(batch []store.JobOutcome) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(batch, w.pending...) // batch's capacity is its length: a new array
	w.writing = nil
	w.retried = max(w.retried, len(batch))
}

// written notes that batch was written.
func (w *writer) written(batch []store.JobOutcome) {
	n := len(batch)
	w.mu.Lock()
	w.writing = nil
	w.unsaved -= n
	w.retried = max(0, w.retried-n)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	if w.onWritten != nil {
		w.onWritten()
	}
	w.sig.written.Send(n)
}

// writeAll writes every pending outcome, oldest first, until none is left
// or ctx ends (see writer for what a failure leads to).
func (w *writer) writeAll(ctx context.Context) {
	answered := backoff.Exponential{Base: transientRetryBase, Max: TransientRetryMax}
	away := backoff.Exponential{Base: writeRetryBase, Max: writeRetryMax}
	rejected := 0
	for ctx.Err() == nil {
		batch, retry := w.take()
		if len(batch) == 0 {
			return
		}
		err := w.finish(ctx, batch, retry)
		if err == nil {
			w.setFailing(false)
			w.written(batch)
			w.passed(len(batch))
			answered.Reset()
			away.Reset()
			rejected = 0
			continue
		}
		if ctx.Err() != nil {
			w.putBack(batch)
			return
		}
		w.setFailing(true)
		if w.onFail != nil {
			w.onFail(err)
		}
		class, timedOut := w.classify(ctx, err)
		if timedOut && len(batch) > 1 {
			w.putBack(batch)
			w.split(len(batch))
			continue
		}
		if class == store.ErrorRejected {
			if rejected++; rejected >= writeTries {
				// The head batch holds the outcome at fault: isolate it.
				rejected = 0
				if !w.isolate(ctx, batch, err) {
					w.putBack(batch)
					return
				}
				w.written(batch)
				continue
			}
		}
		w.putBack(batch)
		pause := &answered
		if class == store.ErrorUnreachable {
			pause = &away
		}
		d := pause.Next()
		w.logs.Fail(w.log, "write", "write finished jobs failed; retrying", "jobs", len(batch), "err", err,
			"database", class.String(), "retry_in", d)
		// The jitter keeps many workers that lost the database together
		// from coming back in step.
		if w.sleep(ctx, backoff.Between(d/2, d)) != nil {
			return
		}
	}
}

// passed notes a statement of n outcomes that passed.
func (w *writer) passed(n int) {
	w.logs.OK(w.log, "write", "writing finished jobs works again")
	if w.size.ok(n) {
		w.logs.OK(w.log, "split", "finishes pass at their full size again")
	}
}

// split shrinks the batch size after a statement of n outcomes timed out,
// and logs it (once per episode, then once a minute).
func (w *writer) split(n int) {
	half := w.size.timedOut(n)
	how := fmt.Sprintf("split into 2 of %d", half)
	if n%2 == 1 {
		how = fmt.Sprintf("split into 2, of %d and %d", half, n-half)
	}
	w.logs.Fail(w.log, "split", fmt.Sprintf("statement timeout on a finish of %d jobs; %s", n, how), "batch_size", half)
	w.sig.split.Send(n)
}

// classify says what err, a failed write's, tells about the database, and
// whether the statement timed out: cancelled by the server (57014), or
// given up by the client with no reply while the database still answers
// a ping, which only a slow statement explains.
func (w *writer) classify(ctx context.Context, err error) (store.ErrorClass, bool) {
	class := store.ClassifyError(err)
	if store.StatementTimedOut(err) {
		return class, true
	}
	if store.NoReply(err) {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		defer cancel()
		if w.st.Ping(pctx) == nil {
			return store.ErrorTransient, true
		}
	}
	return class, false
}

// write writes batch and nothing else, splitting it when the database
// rejects it or it times out, and reports false only when ctx ended
// first. It is isolate's; the loop (writeAll) writes everything else.
func (w *writer) write(ctx context.Context, batch []store.JobOutcome) bool {
	answered := backoff.Exponential{Base: transientRetryBase, Max: TransientRetryMax}
	away := backoff.Exponential{Base: writeRetryBase, Max: writeRetryMax}
	rejected := 0
	for {
		err := w.finish(ctx, batch, true)
		if err == nil {
			w.setFailing(false)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.setFailing(true)
		if w.onFail != nil {
			w.onFail(err)
		}
		class, timedOut := w.classify(ctx, err)
		if timedOut && len(batch) > 1 {
			half := len(batch) / 2
			return w.write(ctx, batch[:half]) && w.write(ctx, batch[half:])
		}
		if class == store.ErrorRejected {
			if rejected++; rejected >= writeTries {
				return w.isolate(ctx, batch, err)
			}
		}
		retry := &answered
		if class == store.ErrorUnreachable {
			retry = &away
		}
		d := retry.Next()
		w.logs.Fail(w.log, "write", "write finished jobs failed; retrying", "jobs", len(batch), "err", err,
			"database", class.String(), "retry_in", d)
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
		why := "unknown error"
		if code := store.SQLState(err); code != "" {
			why = "SQLSTATE " + code
		}
		plain.Error = "the error text of this attempt could not be stored: " + why
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
