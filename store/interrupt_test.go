package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// TestJobInterrupt: only attempts still held under the very lease are
// ended, each with an 'interrupted' history row of its attempt, counted as
// processed and interrupted (no failure); the job is ready again with its
// attempt counted and one more try, so its next claim is the next attempt
// with as many tries left as before. A job with a cancel request is left
// for JobRelease, which ends it cancelled.
func TestJobInterrupt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, max_tries) VALUES ('q', 'own', 1), ('q', 'dflt', NULL),
		('q', 'cancel', 2), ('q', 'stale', 2), ('q', 'kept', 2)`)
	jobs := claimAs(t, st, "q", "me", 5)
	own, dflt, cancel, stale, kept := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4]
	exec(t, pool, `UPDATE queue_jobs SET cancel_requested_at = now(), cancelled_by = 'ops' WHERE id = $1`, cancel.ID)
	exec(t, pool, `UPDATE queue_jobs SET lease = lease + 1000 WHERE id = $1`, stale.ID)
	started := time.Now().Add(-time.Second)
	at := func(j store.ClaimedJob, tries int) store.InterruptedAttempt {
		return store.InterruptedAttempt{Lease: j.Lease(), Tries: tries, StartedAt: started}
	}
	attempts := []store.InterruptedAttempt{at(own, 1), at(dflt, 3), at(cancel, 2), at(stale, 2)}
	n, err := st.JobInterrupt(ctx, store.JobInterruptParams{Attempts: attempts})
	if err != nil || n != 2 {
		t.Fatalf("interrupt = %d, %v; want the two jobs held without a cancel request", n, err)
	}
	for _, c := range []struct {
		j     store.ClaimedJob
		tries int
	}{{own, 2}, {dflt, 4}} {
		var a, tries int
		var reserved *string
		if err := pool.QueryRow(ctx, `SELECT attempts, max_tries, reserved_by FROM queue_jobs WHERE id = $1 AND available_at <= now()`, c.j.ID).
			Scan(&a, &tries, &reserved); err != nil {
			t.Fatalf("job %d: %v", c.j.ID, err)
		}
		if a != 1 || tries != c.tries || reserved != nil {
			t.Errorf("job %d: attempts %d of %d tries, reserved by %v; want ready, attempt 1 counted, %d tries", c.j.ID, a, tries, reserved, c.tries)
		}
	}
	for _, j := range []store.ClaimedJob{cancel, kept} {
		if k := scalar[int](t, pool, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND lease = $2 AND reserved_by = 'me'`, j.ID, j.Token); k != 1 {
			t.Errorf("job %d's reservation was touched", j.ID)
		}
	}
	if k := scalar[int](t, pool, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by = 'me'`, stale.ID); k != 1 {
		t.Errorf("the job under another lease was touched")
	}
	if k := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'interrupted' AND attempt = 1
		AND worker = 'me' AND error = $1 AND runtime_ms >= 1000 AND job_id = ANY($2)`, store.InterruptedError, []int64{own.ID, dflt.ID}); k != 2 {
		t.Errorf("%d interrupted history rows of attempt 1, want 2", k)
	}
	if k := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); k != 2 {
		t.Errorf("%d history rows, want 2", k)
	}
	var processed, failed, interrupted, requeued int
	if err := pool.QueryRow(ctx, `SELECT sum(processed), sum(failed), sum(interrupted), sum(requeued) FROM fleet_counters WHERE queue = 'q'`).
		Scan(&processed, &failed, &interrupted, &requeued); err != nil {
		t.Fatal(err)
	}
	if processed != 2 || failed != 0 || interrupted != 2 || requeued != 0 {
		t.Errorf("counters processed %d, failed %d, interrupted %d, requeued %d; want 2, 0, 2, 0", processed, failed, interrupted, requeued)
	}
	// The job with a cancel request ends cancelled by the release that follows.
	if k, err := st.JobRelease(ctx, store.JobReleaseParams{Leases: []store.Lease{cancel.Lease()}}); err != nil || k != 1 {
		t.Fatalf("release = %d, %v", k, err)
	}
	if k := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'cancelled'`, cancel.ID); k != 1 {
		t.Errorf("the job with a cancel request did not end cancelled")
	}
	// The next claim makes attempt 2 with the tries grown by one: what is left
	// is what was left before the interruption.
	again, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "next"})
	if err != nil || len(again) != 2 {
		t.Fatalf("claim again: %d, %v", len(again), err)
	}
	for _, j := range again {
		if j.Attempt != 2 || (j.ID == own.ID && j.MaxTries != 2) || (j.ID == dflt.ID && j.MaxTries != 4) {
			t.Errorf("claimed again job %d: attempt %d of %d", j.ID, j.Attempt, j.MaxTries)
		}
	}
	if _, err := st.JobInterrupt(ctx, store.JobInterruptParams{Attempts: []store.InterruptedAttempt{{Lease: again[0].Lease()}}}); err == nil {
		t.Errorf("an attempt with no tries was taken")
	}
}
