package worker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// The tests of the hot path's roles: the executor's decision, and the
// claimer handing outcomes to its completer.

// TestDecide covers every outcome decide gives an attempt.
func TestDecide(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ended := started.Add(1500 * time.Microsecond)
	job := func(attempt, tries, snoozes int) store.ClaimedJob {
		return store.ClaimedJob{ID: 7, Token: 3, Queue: "q", Name: "n", Attempt: attempt, MaxTries: tries,
			BackoffSecs: []int{2, 30}, Snoozes: snoozes, ClockOffset: time.Second}
	}
	end := func(j store.ClaimedJob, err error) attemptEnd {
		return attemptEnd{finished: finished{job: j, err: err, timeout: time.Minute, ended: ended}, started: started}
	}
	cancelled := func(e attemptEnd) attemptEnd { e.cancelAt, e.cancelBy = started.Add(time.Millisecond), "ops"; return e }
	expired := func(e attemptEnd) attemptEnd { e.expired = true; return e }
	inTx := func(e attemptEnd) attemptEnd { e.inTx = true; return e }
	abandoned := func(e attemptEnd) attemptEnd { e.abandoned, e.grace = true, 5*time.Second; return e }
	boom := errors.New("boom")

	type want struct {
		kind   store.OutcomeKind
		status string
		msg    string
		delay  time.Duration
		inTx   bool
		note   note
	}
	for _, tc := range []struct {
		name string
		end  attemptEnd
		want want
	}{
		{"completed", end(job(1, 3, 0), nil), want{store.OutcomeCompleted, "completed", "", 0, false, noteCompleted}},
		{"failed, retried after its backoff", end(job(1, 3, 0), boom),
			want{store.OutcomeRetried, "failed", "boom", 2 * time.Second, false, noteRetry}},
		{"failed on a later try, the backoff's last step", end(job(2, 3, 0), boom),
			want{store.OutcomeRetried, "failed", "boom", 30 * time.Second, false, noteRetry}},
		{"failed for good", end(job(3, 3, 0), boom), want{store.OutcomeFailed, "failed", "boom", 0, false, noteFailed}},
		{"error text made storable", end(job(3, 3, 0), errors.New("a\x00b")),
			want{store.OutcomeFailed, "failed", store.StorableText("a\x00b"), 0, false, noteFailed}},
		{"timed out", expired(end(job(1, 3, 0), context.DeadlineExceeded)),
			want{store.OutcomeRetried, "timed_out", "timed out after 1m0s: context deadline exceeded", 2 * time.Second, false, noteRetry}},
		{"snoozed", end(job(1, 3, 0), queue.Snooze(time.Minute)),
			want{store.OutcomeSnoozed, "snoozed", queue.Snooze(time.Minute).Error(), time.Minute, false, noteNone}},
		{"snoozed too often: failed", end(job(1, 3, queue.MaxSnoozes), queue.Snooze(time.Minute)),
			want{store.OutcomeRetried, "failed", fmt.Sprintf("the job snoozed more than %d times (queue.MaxSnoozes)", queue.MaxSnoozes), 2 * time.Second, false, noteRetry}},
		{"cancelled by its handler", end(job(1, 3, 0), queue.Cancel(boom)),
			want{store.OutcomeCancelled, "cancelled", queue.Cancel(boom).Error(), 0, false, noteCancelledByHandler}},
		{"cancelled by an operator", cancelled(end(job(1, 3, 0), context.Canceled)),
			want{store.OutcomeCancelled, "cancelled", "cancelled by ops: context canceled", 0, false, noteNone}},
		{"cancelled by an operator, yet it completed", cancelled(end(job(1, 3, 0), nil)),
			want{store.OutcomeCompleted, "completed", "", 0, false, noteCompleted}},
		{"cancelled by an operator after completing in its transaction", inTx(cancelled(end(job(1, 3, 0), nil))),
			want{store.OutcomeCancelled, "cancelled", "cancelled by ops", 0, true, noteNone}},
		{"completed in its transaction", inTx(end(job(1, 3, 0), nil)),
			want{store.OutcomeRetried, "failed", "the job was completed in its handler's transaction, which did not commit", 2 * time.Second, true, noteNone}},
		{"completed in its transaction on its last try", inTx(end(job(3, 3, 0), nil)),
			want{store.OutcomeFailed, "failed", "the job was completed in its handler's transaction, which did not commit", 0, true, noteNone}},
		{"failed after completing in its transaction", inTx(end(job(1, 3, 0), boom)),
			want{store.OutcomeRetried, "failed", "boom", 2 * time.Second, true, noteInTxFailed}},
		{"timed out after completing in its transaction", expired(inTx(end(job(1, 3, 0), context.DeadlineExceeded))),
			want{store.OutcomeRetried, "timed_out", "timed out after 1m0s: context deadline exceeded", 2 * time.Second, true, noteInTxFailed}},
		{"snoozed in its transaction", inTx(end(job(1, 3, 0), queue.Snooze(time.Minute))),
			want{store.OutcomeSnoozed, "snoozed", queue.Snooze(time.Minute).Error(), time.Minute, true, noteNone}},
		{"snoozed too often in its transaction", inTx(end(job(1, 3, queue.MaxSnoozes), queue.Snooze(time.Minute))),
			want{store.OutcomeRetried, "failed", queue.Snooze(time.Minute).Error(), 2 * time.Second, true, noteInTxFailed}},
		{"given up on after its timeout", abandoned(end(job(1, 3, 0), nil)),
			want{store.OutcomeRetried, "timed_out", "timed out after 1m0s and did not stop within 5s", 2 * time.Second, false, noteRetry}},
		{"given up on after its timeout, no tries left", abandoned(end(job(3, 3, 0), nil)),
			want{store.OutcomeFailed, "timed_out", "timed out after 1m0s and did not stop within 5s", 0, false, noteFailed}},
		{"given up on after an operator's cancel", abandoned(cancelled(end(job(1, 3, 0), nil))),
			want{store.OutcomeCancelled, "cancelled", "cancelled by ops; the handler did not stop within 5s", 0, false, noteNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decide(tc.end)
			o := v.outcome
			got := want{o.Kind, o.Status, o.Error, o.Delay, o.InTx, v.note}
			if got != tc.want {
				t.Fatalf("decide gave %+v, want %+v", got, tc.want)
			}
			if o.Lease != (store.Lease{ID: 7, Token: 3}) || o.Queue != "q" || o.Name != "n" || o.Attempt != tc.end.job.Attempt ||
				o.MaxTries != 3 || !o.StartedAt.Equal(started.Add(time.Second)) || !o.FinishedAt.Equal(tc.end.ended.Add(time.Second)) ||
				o.RuntimeMs != 1.5 {
				t.Fatalf("the outcome does not describe the attempt: %+v", o)
			}
		})
	}
}

// decide is pure: the same end gives the same verdict however often it is
// asked, it leaves the end as it was, and it needs nothing but the end (no
// executor, store, logger or completer is there to be used).
func TestDecideIsPure(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, err := range []error{nil, errors.New("boom"), queue.Snooze(time.Second), queue.Cancel(nil)} {
		e := attemptEnd{finished: finished{job: store.ClaimedJob{ID: 1, Attempt: 1, MaxTries: 2, BackoffSecs: []int{1}},
			err: err, ended: started.Add(time.Second)}, started: started}
		before := e
		first := decide(e)
		for range 3 {
			if v := decide(e); !reflect.DeepEqual(v, first) {
				t.Fatalf("decide(%v) gave %+v, then %+v", err, first, v)
			}
		}
		if !reflect.DeepEqual(e, before) {
			t.Fatalf("decide changed its input: %+v, was %+v", e, before)
		}
	}
}

// fakeCompleter records the outcomes it is handed and writes none: each
// is unsaved until the test says otherwise.
type fakeCompleter struct {
	mu    sync.Mutex
	added []store.JobOutcome
}

func (f *fakeCompleter) Name() string                 { return "fake completer" }
func (f *fakeCompleter) Start(context.Context) error  { return nil }
func (f *fakeCompleter) Stop()                        {}
func (f *fakeCompleter) Unsaved() int                 { return 0 }
func (f *fakeCompleter) Stalled() int                 { return 0 }
func (f *fakeCompleter) drain(context.Context) error  { return nil }
func (f *fakeCompleter) holding(map[store.Lease]bool) {}
func (f *fakeCompleter) add(o store.JobOutcome) {
	f.mu.Lock()
	f.added = append(f.added, o)
	f.mu.Unlock()
}
func (f *fakeCompleter) outcomes() []store.JobOutcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.added
}

// The claimer hands the outcome of every attempt it finishes to the
// completer it was built with, and to nothing else: a worker built around a
// fake completer writes no outcome, yet the fake receives each attempt's.
func TestClaimerHandsOutcomesToTheCompleter(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	jobs := queue.NewRegistry()
	jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	jobs.Handle("fail", func(context.Context, *queue.Job) error { return errors.New("boom") })
	jobs.Handle("snooze", func(context.Context, *queue.Job) error { return queue.Snooze(time.Hour) })
	jobs.Handle("cancel", func(context.Context, *queue.Job) error { return queue.Cancel(nil) })
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT 'default', n FROM unnest(ARRAY['ok', 'fail', 'snooze', 'cancel']) AS n`); err != nil {
		t.Fatal(err)
	}
	// New applies the defaults; assemble builds the worker of that
	// config around the fake.
	cfg := newTestWorker(t, st, jobs, Config{Concurrency: 4, StopWhenEmpty: true, Tries: 3}).cfg
	fake := &fakeCompleter{}
	w := assemble(st, jobs, cfg, discardLog(), newNudges(), fake)
	rctx, cancel := context.WithTimeout(ctx, time.Minute) // a hang deadline
	defer cancel()
	res, err := w.Run(rctx)
	if err != nil || res.Reason != spawner.ExitEmpty || res.Jobs != 4 {
		t.Fatalf("worker ended with %+v, %v; want 4 jobs, then empty", res, err)
	}
	got := map[string]store.OutcomeKind{}
	for _, o := range fake.outcomes() {
		got[o.Name] = o.Kind
	}
	want := map[string]store.OutcomeKind{"ok": store.OutcomeCompleted, "fail": store.OutcomeRetried,
		"snooze": store.OutcomeSnoozed, "cancel": store.OutcomeCancelled}
	if !reflect.DeepEqual(got, want) || len(fake.outcomes()) != 4 {
		t.Fatalf("the completer was handed %v (%d outcomes), want %v", got, len(fake.outcomes()), want)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 4 {
		t.Fatalf("%d jobs left in the queue, want all 4: the outcomes go to the completer alone, which wrote none", left)
	}
}
