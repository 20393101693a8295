package store_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/store"
)

func TestCancelUnreservedJobsAtOnceAndGiveSlotsBack(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	pending, err := b.st.JobInsertMany(ctx, b.pool, []store.JobInsertParams{
		{Queue: "q", Name: "n", Payload: []byte(`{}`)},
		{Queue: "q", Name: "n", Payload: []byte(`{}`), Delay: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Key k at 1: the first job holds the slot, the second is parked.
	limited := b.dispatch(t, "q", "k", 1, 2, 0)
	if b.active(t, "k") != 1 || b.parked(t, "k") != 1 {
		t.Fatalf("setup: active %d, parked %d", b.active(t, "k"), b.parked(t, "k"))
	}
	// Cancel the delayed job, the limited one holding the slot and one that
	// does not exist; the parked job gets the slot.
	got, err := b.st.JobCancel(ctx, []int64{pending[1], limited[0], 999999, limited[0]}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.JobCancelResult{
		{ID: pending[1], State: store.JobCancelDone},
		{ID: limited[0], State: store.JobCancelDone},
		{ID: 999999, State: store.JobCancelNotFound},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("cancel = %+v, want %+v", got, want)
	}
	if b.active(t, "k") != 1 || b.parked(t, "k") != 0 || b.unparked(t, "k") != 1 {
		t.Fatalf("after cancel: active %d, parked %d, unparked %d; want the slot handed to the parked job",
			b.active(t, "k"), b.parked(t, "k"), b.unparked(t, "k"))
	}
	// The parked job, now unparked, is cancelled too: its slot comes back.
	if _, err := b.st.JobCancel(ctx, []int64{limited[1]}, "alice"); err != nil {
		t.Fatal(err)
	}
	if a := b.active(t, "k"); a != 0 {
		t.Fatalf("active = %d after cancelling every job of the key, want 0", a)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'cancelled'
		AND error = 'cancelled by alice' AND runtime_ms = 0 AND attempt = 0`); n != 3 {
		t.Fatalf("%d cancelled history rows, want 3", n)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs`); n != 1 {
		t.Fatalf("%d jobs left, want the pending one", n)
	}
	if n := scalar[int64](t, b.pool, `SELECT COALESCE(sum(failed), 0)::bigint FROM fleet_counters`); n != 0 {
		t.Fatalf("failed counter = %d, want 0: a cancel is no failure", n)
	}
}

func TestCancelRunningJobRequestsAndNotifies(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	b.dispatch(t, "q", "k", 1, 1, 0)
	job := b.claim(t, "q", 1)[0]

	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+store.CancelChannel); err != nil {
		t.Fatal(err)
	}
	got, err := b.st.JobCancel(ctx, []int64{job.ID}, "bob")
	if err != nil || len(got) != 1 || got[0].State != store.JobCancelRequested {
		t.Fatalf("cancel = %+v, %v; want requested", got, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id" : ` + itoa(job.ID) + `, "lease" : ` + itoa(job.Token) + `, "by" : "bob"}`; n.Payload != want {
		t.Fatalf("payload %s, want %s", n.Payload, want)
	}
	polled, err := b.st.JobCancelPoll(ctx, []int64{job.ID, 424242})
	if err != nil || len(polled) != 1 || polled[0] != (store.CancelNotice{ID: job.ID, Lease: job.Token, By: "bob"}) {
		t.Fatalf("poll = %+v, %v", polled, err)
	}
	// A retry written after the request does not let the job run again: it
	// ends cancelled, and its slot is free.
	b.finish(t, store.OutcomeRetried, 0, job)
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs`); n != 0 {
		t.Fatal("the cancelled job was retried")
	}
	if msg := scalar[string](t, b.pool, `SELECT error FROM fleet_jobs WHERE status = 'cancelled'`); msg != "cancelled by bob: e" {
		t.Fatalf("history error %q", msg)
	}
	if a := b.active(t, "k"); a != 0 {
		t.Fatalf("active = %d, want 0", a)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestReleaseOfACancelRequestedJobEndsItCancelled(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	b.dispatch(t, "q", "k", 2, 3, 0)
	jobs := b.claim(t, "q", 2)
	slices.SortFunc(jobs, func(x, y store.ClaimedJob) int { return int(x.ID - y.ID) })
	if _, err := b.st.JobCancel(ctx, []int64{jobs[0].ID, jobs[1].ID}, "carol"); err != nil {
		t.Fatal(err)
	}
	// One is given back by its worker, the other's worker dies.
	n, err := b.st.JobRelease(ctx, store.JobReleaseParams{Leases: []store.Lease{jobs[0].Lease()}, Uncount: true})
	if err != nil || n != 1 {
		t.Fatalf("release = %d, %v", n, err)
	}
	lost, err := b.st.JobReleaseWorker(ctx, "w", 3, "killed")
	if err != nil || lost.Cancelled != 1 || lost.Released != 0 || lost.Failed != 0 {
		t.Fatalf("release worker = %+v, %v; want 1 cancelled", lost, err)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE id = ANY ($1)`, []int64{jobs[0].ID, jobs[1].ID}); n != 0 {
		t.Fatal("a cancel-requested job was released to run again")
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'cancelled' AND error LIKE 'cancelled by carol%'`); n != 2 {
		t.Fatalf("%d cancelled history rows, want 2", n)
	}
	if n := scalar[int64](t, b.pool, `SELECT COALESCE(sum(failed), 0)::bigint FROM fleet_counters`); n != 0 {
		t.Fatalf("failed counter = %d, want 0", n)
	}
	// Both slots came back; the third job got one.
	if a, u := b.active(t, "k"), b.unparked(t, "k"); a != 1 || u != 1 {
		t.Fatalf("active %d, unparked %d; want 1 and 1", a, u)
	}
}

func TestCancelQueueCancelsPendingAndRequestsRunning(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	jobs := make([]store.JobInsertParams, 25)
	for i := range jobs {
		jobs[i] = store.JobInsertParams{Queue: "q", Name: "n", Payload: []byte(`{}`)}
	}
	if _, err := b.st.JobInsertMany(ctx, b.pool, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.JobInsertMany(ctx, b.pool, jobs[:2:2]); err != nil { // another queue's
		t.Fatal(err)
	}
	exec(t, b.pool, `UPDATE queue_jobs SET queue = 'other' WHERE id IN (SELECT max(id) FROM queue_jobs UNION SELECT max(id) - 1 FROM queue_jobs)`)
	b.claim(t, "q", 3)
	u, r, err := b.st.JobCancelQueueCount(ctx, "q")
	if err != nil || u != 22 || r != 3 {
		t.Fatalf("count = %d, %d, %v; want 22, 3", u, r, err)
	}
	res, err := b.st.JobCancelQueue(ctx, store.JobCancelQueueParams{Queue: "q", By: "ops", Batch: 4})
	if err != nil || res != (store.JobCancelQueueResult{Cancelled: 22, Requested: 3}) {
		t.Fatalf("cancel queue = %+v, %v", res, err)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'q' AND cancel_requested_at IS NOT NULL`); n != 3 {
		t.Fatalf("%d running jobs with a cancel request, want 3", n)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'other'`); n != 2 {
		t.Fatal("another queue's jobs were cancelled")
	}
}

// find returns the last recorded statement whose text starts as prefix
// does, white space aside (a run of it counts as one space).
func (r *recorder) find(t testing.TB, prefix string) statement {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for i := len(r.sent) - 1; i >= 0; i-- {
		if strings.HasPrefix(words(r.sent[i].sql), words(prefix)) {
			return r.sent[i]
		}
	}
	t.Fatalf("no statement starting %q was run", prefix)
	return statement{}
}

func TestCancelAndSnoozeStatementsReadTheirBatchUnderAGenericPlan(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	ctx := t.Context()
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 20000)`)
	exec(t, db.pool, `ANALYZE queue_jobs`)
	outcomes := func(jobs []store.ClaimedJob, kind store.OutcomeKind) []store.JobOutcome {
		out := make([]store.JobOutcome, len(jobs))
		for i, j := range jobs {
			out[i] = store.JobOutcome{Lease: j.Lease(), Kind: kind, Status: string(kind), MaxTries: 3,
				Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: time.Now(), FinishedAt: time.Now()}
		}
		return out
	}
	claim := func() []store.ClaimedJob {
		t.Helper()
		jobs, err := db.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "w"})
		if err != nil || len(jobs) != 10 {
			t.Fatalf("claim %d, %v", len(jobs), err)
		}
		return jobs
	}
	check := func(what string, st statement) {
		t.Helper()
		read, plan := explainGeneric(t, db, st)
		if n := read.of("queue_jobs"); n > 100 {
			t.Errorf("%s of 10 read %d rows of queue_jobs (%s)\n%s", what, n, read, plan)
		}
	}
	for range 6 { // as a cached statement would have been by now
		jobs := claim()
		if _, err := db.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: outcomes(jobs, store.OutcomeSnoozed)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.st.JobCancelPoll(ctx, ids(jobs)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.st.JobCancel(ctx, ids(jobs[:5]), "x"); err != nil {
			t.Fatal(err)
		}
		running := claim()
		if _, err := db.st.JobCancel(ctx, ids(running), "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.st.JobRelease(ctx, store.JobReleaseParams{Leases: []store.Lease{running[0].Lease()}}); err != nil {
			t.Fatal(err)
		}
	}
	fin, poll, cancel, release := db.rec.find(t, "WITH d AS MATERIALIZED (\n\t\tSELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[]"),
		db.rec.find(t, "SELECT id, COALESCE(lease, 0)"), db.rec.find(t, "WITH gone AS"),
		db.rec.find(t, "WITH d AS MATERIALIZED (\n\t\tSELECT * FROM unnest($1::bigint[], $2::bigint[]) AS d(id, lease)")
	jobs := claim()
	fin.args[0], fin.args[1] = leaseIDs(jobs)
	check("a finish of snoozed jobs", fin)
	poll.args[0] = ids(jobs)
	check("a poll for cancel requests", poll)
	cancel.args[0] = ids(jobs)
	check("a cancel", cancel)
	release.args[0], release.args[1] = leaseIDs(jobs)
	check("a release", release)
}
