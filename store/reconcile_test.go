package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// claimAs claims up to n jobs of queue for worker and fails the test
// unless it got n.
func claimAs(t *testing.T, st *store.Store, queue, worker string, n int) []store.ClaimedJob {
	t.Helper()
	jobs, err := st.JobClaim(context.Background(), store.JobClaimParams{Queue: queue, Limit: n, Worker: worker})
	if err != nil || len(jobs) != n {
		t.Fatalf("claim %d of %s for %s: %d, %v", n, queue, worker, len(jobs), err)
	}
	return jobs
}

func leasesOf(jobs []store.ClaimedJob) []store.Lease {
	out := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		out[i] = j.Lease()
	}
	return out
}

func sortLeases(l []store.Lease) []store.Lease {
	slices.SortFunc(l, func(a, b store.Lease) int { return int(a.ID - b.ID) })
	return l
}

// TestJobReservedByReadsOneWorkersLeases: a worker's reservations and
// nobody else's, with their current lease tokens.
func TestJobReservedByReadsOneWorkersLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 10)`)
	mine := claimAs(t, st, "q", "me", 3)
	claimAs(t, st, "q", "other", 2)
	got, err := st.JobReservedBy(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if want := sortLeases(leasesOf(mine)); !slices.Equal(sortLeases(got), want) {
		t.Fatalf("reserved by me: %v, want %v", got, want)
	}
	if got, err := st.JobReservedBy(ctx, "nobody"); err != nil || len(got) != 0 {
		t.Fatalf("reserved by nobody: %v, %v", got, err)
	}
}

// TestJobReleaseUnheld: only a reservation still under the worker with the
// very lease reported is released, with its attempt taken back (a job on
// its last try is ready again, not failed), a 'lost' history row and the
// lost and requeued counters; one with a cancel request ends as cancelled.
func TestJobReleaseUnheld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, max_tries) SELECT 'q', 'n' || g, 1 FROM generate_series(1, 6) g`)
	jobs := claimAs(t, st, "q", "me", 6)
	phantom, reclaimed, finished, cancel, elsewhere, kept := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5]
	// reclaimed was released and claimed again by the same worker: a new
	// lease. finished was completed. elsewhere is now another worker's.
	if _, err := st.JobRelease(ctx, store.JobReleaseParams{Leases: []store.Lease{reclaimed.Lease()}, Uncount: true}); err != nil {
		t.Fatal(err)
	}
	again := claimAs(t, st, "q", "me", 1)[0]
	if again.ID != reclaimed.ID || again.Token == reclaimed.Token {
		t.Fatalf("claimed again %+v, want job %d under a new lease", again.Lease(), reclaimed.ID)
	}
	if res, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: "me", Outcomes: []store.JobOutcome{{
		Lease: finished.Lease(), Kind: store.OutcomeCompleted, Status: "completed", Queue: "q", Name: finished.Name,
		Attempt: 1, StartedAt: time.Now(), FinishedAt: time.Now(),
	}}}); err != nil || res.Written != 1 {
		t.Fatalf("complete: %+v, %v", res, err)
	}
	exec(t, pool, `UPDATE queue_jobs SET reserved_by = 'other' WHERE id = $1`, elsewhere.ID)
	exec(t, pool, `UPDATE queue_jobs SET cancel_requested_at = now(), cancelled_by = 'ops' WHERE id = $1`, cancel.ID)

	lost, err := st.JobReleaseUnheld(ctx, "me", []store.Lease{
		phantom.Lease(), reclaimed.Lease(), finished.Lease(), cancel.Lease(), elsewhere.Lease()})
	if err != nil {
		t.Fatal(err)
	}
	if lost != (store.LostJobs{Released: 1, Cancelled: 1}) {
		t.Fatalf("released %+v, want the phantom released and the cancelled one ended", lost)
	}
	var attempts int
	var reserved *string
	var lastErr string
	if err := pool.QueryRow(ctx, `SELECT attempts, reserved_by, last_error FROM queue_jobs WHERE id = $1`, phantom.ID).
		Scan(&attempts, &reserved, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || reserved != nil || lastErr != store.UnheldError {
		t.Fatalf("the phantom after its release: attempts %d, reserved by %v, last error %q", attempts, reserved, lastErr)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM queue_failed_jobs`); n != 0 {
		t.Fatalf("%d failed jobs, want none: the attempt was taken back", n)
	}
	for _, j := range []store.ClaimedJob{again, elsewhere, kept} {
		if n := scalar[int](t, pool, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND lease = $2`, j.ID, j.Token); n != 1 {
			t.Errorf("job %d's reservation was touched", j.ID)
		}
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM queue_jobs WHERE id = $1`, cancel.ID); n != 0 {
		t.Errorf("the job with a cancel request is still queued")
	}
	type row struct {
		status, err string
		attempt     int
	}
	hist := map[int64]row{}
	rows, err := pool.Query(ctx, `SELECT job_id, status, COALESCE(error, ''), attempt FROM fleet_jobs WHERE job_id <> $1`, finished.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var r row
		if err := rows.Scan(&id, &r.status, &r.err, &r.attempt); err != nil {
			t.Fatal(err)
		}
		hist[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[phantom.ID] != (row{"lost", store.UnheldError, 1}) || hist[cancel.ID].status != "cancelled" {
		t.Fatalf("history %+v, want the phantom's lost attempt 1 and the cancelled one", hist)
	}
	if got := scalar[string](t, pool, `SELECT sum(lost)::text || ' ' || sum(requeued)::text || ' ' || sum(failed_final)::text FROM fleet_counters`); got != "1 1 0" {
		t.Fatalf("counters lost, requeued, failed_final = %s, want 1 1 0", got)
	}
	// The phantom runs again as the same attempt.
	if j := claimAs(t, st, "q", "next", 1)[0]; j.ID != phantom.ID || j.Attempt != 1 {
		t.Fatalf("claimed %d attempt %d, want the phantom's attempt 1 again", j.ID, j.Attempt)
	}
}
