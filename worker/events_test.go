package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// TestWriterSendsNoEventForALostLease: of two outcomes written together,
// the one whose job was released meanwhile (its lease token changed) is
// not written and sends nothing; the other sends its event.
func TestWriterSendsNoEventForALostLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT 'default', 'n' FROM generate_series(1, 2)`); err != nil {
		t.Fatal(err)
	}
	jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 2, Worker: "w"})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	// As a master releasing the job and another worker claiming it would.
	if _, err := pool.Exec(ctx, `UPDATE queue_jobs SET lease = lease + 1000 WHERE id = $1`, jobs[1].ID); err != nil {
		t.Fatal(err)
	}
	reg := queue.NewRegistry()
	sub := reg.Subscribe()
	w := newWriter(st, "w", "", slog.New(slog.NewTextHandler(io.Discard, nil)), writerHooks{events: reg})
	now := time.Now()
	for _, j := range jobs {
		w.add(store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed", MaxTries: 1,
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now.Add(time.Millisecond), RuntimeMs: 1})
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.run(rctx); close(done) }()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	err = w.drain(dctx)
	cancel()
	<-done
	if err != nil {
		t.Fatalf("writer stalled: %v", err)
	}
	sub.Close()
	var got []queue.Event
	for e := range sub.Events() {
		got = append(got, e)
	}
	if len(got) != 1 || got[0].JobID != jobs[0].ID || got[0].Kind != queue.EventCompleted || got[0].Runtime != time.Millisecond {
		t.Fatalf("events %+v, want one completed event for job %d", got, jobs[0].ID)
	}
}

// TestEventOfMapsStatusAndKind: cancelled and snoozed outcomes (by their
// status) get kinds of their own; the others follow the outcome's kind.
func TestEventOfMapsStatusAndKind(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind     store.OutcomeKind
		status   string
		want     queue.EventKind
		timedOut bool
	}{
		{store.OutcomeCompleted, "completed", queue.EventCompleted, false},
		{store.OutcomeRetried, "failed", queue.EventRetried, false},
		{store.OutcomeRetried, "timed_out", queue.EventRetried, true},
		{store.OutcomeFailed, "failed", queue.EventFailed, false},
		{store.OutcomeFailed, "timed_out", queue.EventFailed, true},
		{store.OutcomeKind("cancelled"), "cancelled", queue.EventCancelled, false},
		{store.OutcomeKind("snoozed"), "snoozed", queue.EventSnoozed, false},
		{store.OutcomeFailed, "cancelled", queue.EventCancelled, false},
		{store.OutcomeRetried, "snoozed", queue.EventSnoozed, false},
	}
	for _, c := range cases {
		e := eventOf(store.JobOutcome{Kind: c.kind, Status: c.status, Delay: time.Minute})
		if e.Kind != c.want || e.TimedOut != c.timedOut {
			t.Errorf("%s/%s: event %s (timed out %v), want %s (%v)", c.kind, c.status, e.Kind, e.TimedOut, c.want, c.timedOut)
		}
		if wantDelay := c.want == queue.EventRetried || c.want == queue.EventSnoozed; (e.RetryIn == time.Minute) != wantDelay {
			t.Errorf("%s/%s: RetryIn %s", c.kind, c.status, e.RetryIn)
		}
	}
}
