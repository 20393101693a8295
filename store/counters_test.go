package store_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

// TestOutcomeCounters: every way an attempt ends bumps its outcome's
// counter and its job's, beside processed and failed, in the statements
// that end it.
func TestOutcomeCounters(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	ins := func(n, tries int) {
		t.Helper()
		jobs := make([]store.JobInsertParams, n)
		for i := range jobs {
			jobs[i] = store.JobInsertParams{Queue: "q", Name: "n", Payload: []byte(`{}`), MaxTries: tries}
		}
		if _, err := b.st.JobInsertMany(ctx, b.pool, jobs); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(j store.ClaimedJob, kind store.OutcomeKind, status string) {
		t.Helper()
		now := time.Now()
		o := store.JobOutcome{Lease: j.Lease(), Kind: kind, Status: status, Error: "e", Delay: time.Hour, MaxTries: 3,
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now}
		if res, err := b.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: []store.JobOutcome{o}}); err != nil || res.Written != 1 {
			t.Fatalf("finish %s/%s: %+v, %v", kind, status, res, err)
		}
	}
	ins(6, 3)
	jobs := b.claim(t, "q", 6)
	if len(jobs) != 6 {
		t.Fatalf("claimed %d", len(jobs))
	}
	finish(jobs[0], store.OutcomeCompleted, "completed")
	finish(jobs[1], store.OutcomeRetried, "failed")
	finish(jobs[2], store.OutcomeRetried, "timed_out")
	finish(jobs[3], store.OutcomeFailed, "failed")
	finish(jobs[4], store.OutcomeCancelled, "cancelled")
	// The last one's worker dies with tries left: released again, lost.
	if lost, err := b.st.JobReleaseWorker(ctx, "w", 3, "killed"); err != nil || lost.Released != 1 {
		t.Fatalf("release worker: %+v, %v", lost, err)
	}
	// Its second attempt is lost too, with tries left; a job with one try
	// whose worker dies is moved to failed jobs.
	ins(1, 1)
	if got := b.claim(t, "q", 5); len(got) != 2 { // the lost one, due again, and the new one
		t.Fatalf("claimed %d again, want 2", len(got))
	}
	if lost, err := b.st.JobReleaseWorker(ctx, "w", 3, "killed"); err != nil || lost.Released != 1 || lost.Failed != 1 {
		t.Fatalf("release worker: %+v, %v", lost, err)
	}

	sc, err := b.st.ScrapeRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := store.ScrapeCounter{Queue: "q", Processed: 8, Failed: 6,
		Completed: 1, AttemptFailed: 2, TimedOut: 1, Lost: 3, Cancelled: 1,
		Retried: 2, FailedFinal: 2, Requeued: 2}
	if len(sc.Counters) != 1 || sc.Counters[0] != want {
		t.Fatalf("counters:\n got %+v\nwant %+v", sc.Counters, want)
	}
	// The five attempts a worker timed (0 ms each) are in the runtime
	// histogram's first bucket; lost ones are not.
	wantRT := []store.ScrapeRuntime{{Queue: "q", Name: "n", Bucket: 0, N: 5}}
	if !reflect.DeepEqual(sc.Runtimes, wantRT) {
		t.Fatalf("runtimes:\n got %+v\nwant %+v", sc.Runtimes, wantRT)
	}
}
