package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// limitBundle is a test database with a store and helpers for one key.
type limitBundle struct {
	pool *pgxpool.Pool
	st   *store.Store
}

func newLimitBundle(t *testing.T) *limitBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	return &limitBundle{pool: pool, st: store.New(pool)}
}

// dispatch inserts n jobs of key (limit) on queue, delayed by delay.
func (b *limitBundle) dispatch(t *testing.T, queue, key string, limit, n int, delay time.Duration) []int64 {
	t.Helper()
	jobs := make([]store.JobInsertParams, n)
	for i := range jobs {
		jobs[i] = store.JobInsertParams{Queue: queue, Name: "n", Payload: []byte(`{}`), Delay: delay, LimitKey: key, Limit: limit}
	}
	ids, err := b.st.JobInsertMany(t.Context(), b.pool, jobs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// unparked counts the jobs of key that are not parked; parked those that are.
func (b *limitBundle) unparked(t *testing.T, key string) int64 {
	t.Helper()
	return scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE limit_key = $1 AND available_at <> 'infinity'`, key)
}

func (b *limitBundle) parked(t *testing.T, key string) int64 {
	t.Helper()
	return scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE limit_key = $1 AND available_at = 'infinity'`, key)
}

func (b *limitBundle) active(t *testing.T, key string) int64 {
	t.Helper()
	return scalar[int64](t, b.pool, `SELECT COALESCE((SELECT active FROM queue_limits WHERE key = $1), -1)::bigint`, key)
}

func (b *limitBundle) claim(t *testing.T, queue string, n int) []store.ClaimedJob {
	t.Helper()
	jobs, err := b.st.JobClaim(t.Context(), store.JobClaimParams{Queue: queue, Limit: n, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func (b *limitBundle) finish(t *testing.T, kind store.OutcomeKind, delay time.Duration, jobs ...store.ClaimedJob) {
	t.Helper()
	now := time.Now()
	out := make([]store.JobOutcome, len(jobs))
	for i, j := range jobs {
		status := "completed"
		if kind != store.OutcomeCompleted {
			status = "failed"
		}
		out[i] = store.JobOutcome{Lease: j.Lease(), Kind: kind, Status: status, Error: "e", Delay: delay, MaxTries: 1,
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now}
	}
	res, err := b.st.JobFinishMany(t.Context(), store.JobFinishParams{Worker: "w", Outcomes: out})
	if err != nil || res.Written != len(jobs) {
		t.Fatalf("finish %d: %+v, %v", len(jobs), res, err)
	}
}

func ids(jobs []store.ClaimedJob) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	slices.Sort(out)
	return out
}

func TestLimitDispatchTakesFreeSlotsAndParksTheRest(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	got := b.dispatch(t, "q", "tenant:1", 2, 5, 0)
	if u, p, a := b.unparked(t, "tenant:1"), b.parked(t, "tenant:1"), b.active(t, "tenant:1"); u != 2 || p != 3 || a != 2 {
		t.Fatalf("after 5 dispatched at 2: %d unparked, %d parked, active %d; want 2, 3, 2", u, p, a)
	}
	// The first two of the batch got the slots.
	if ready := scalar[[]int64](t, b.pool, `SELECT array_agg(id ORDER BY id) FROM queue_jobs WHERE available_at <> 'infinity'`); !slices.Equal(ready, got[:2]) {
		t.Fatalf("ready %v, want %v", ready, got[:2])
	}
	// One more dispatch finds no slot; an unlimited job and another key
	// in the same batch are not held up.
	ids, err := b.st.JobInsertMany(t.Context(), b.pool, []store.JobInsertParams{
		{Queue: "q", Name: "n", Payload: []byte(`{}`), LimitKey: "tenant:1", Limit: 2},
		{Queue: "q", Name: "n", Payload: []byte(`{}`)},
		{Queue: "q", Name: "n", Payload: []byte(`{}`), LimitKey: "tenant:2", Limit: 1},
	})
	if err != nil || len(ids) != 3 || ids[0] >= ids[1] || ids[1] >= ids[2] {
		t.Fatalf("mixed batch: %v, %v", ids, err)
	}
	if p := b.parked(t, "tenant:1"); p != 4 {
		t.Fatalf("parked = %d, want 4", p)
	}
	if n := len(b.claim(t, "q", 100)); n != 4 {
		t.Fatalf("claimed %d, want 4 (2 of tenant:1, 1 unlimited, 1 of tenant:2)", n)
	}
	// Parked jobs are neither pending nor delayed, and no claim or next-job
	// lookup trips on them.
	counts, err := b.st.QueueCounts(t.Context())
	if err != nil || len(counts) != 1 || counts[0].Pending != 0 || counts[0].Delayed != 0 || counts[0].Limited != 4 || counts[0].Reserved != 4 {
		t.Fatalf("counts %+v, %v; want 0 pending, 0 delayed, 4 limited, 4 reserved", counts, err)
	}
	next, err := b.st.JobNext(t.Context(), []string{"q"}, "")
	if err != nil || next.Any {
		t.Fatalf("next %+v, %v; want none available", next, err)
	}
	list, err := b.st.JobList(t.Context(), store.JobListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]int{}
	for _, j := range list {
		states[j.State]++
	}
	if states["limited"] != 4 || states["reserved"] != 4 {
		t.Fatalf("listed states %v", states)
	}
}

func TestLimitHandoffOnCompletionInDueOrder(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	all := b.dispatch(t, "q", "k", 2, 6, 0)
	held := b.claim(t, "q", 10)
	if !slices.Equal(ids(held), all[:2]) {
		t.Fatalf("claimed %v, want %v", ids(held), all[:2])
	}
	// One finishes: the oldest parked job takes its slot, in the same
	// statement.
	b.finish(t, store.OutcomeCompleted, 0, held[0])
	next := b.claim(t, "q", 10)
	if !slices.Equal(ids(next), all[2:3]) {
		t.Fatalf("after one completed, claimed %v, want %v", ids(next), all[2:3])
	}
	if a := b.active(t, "k"); a != 2 {
		t.Fatalf("active = %d, want 2", a)
	}
	// Both finish together: the next two, in order.
	b.finish(t, store.OutcomeCompleted, 0, held[1], next[0])
	next = b.claim(t, "q", 10)
	if !slices.Equal(ids(next), all[3:5]) {
		t.Fatalf("claimed %v, want %v", ids(next), all[3:5])
	}
	b.finish(t, store.OutcomeCompleted, 0, next...)
	last := b.claim(t, "q", 10)
	b.finish(t, store.OutcomeCompleted, 0, last...)
	if a, n := b.active(t, "k"), scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs`); a != 0 || n != 0 {
		t.Fatalf("after all: active %d, %d jobs left; want 0, 0", a, n)
	}
}

func TestLimitRetryParksTheJobAndHandsItsSlotOver(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	all := b.dispatch(t, "q", "k", 1, 2, 0)
	held := b.claim(t, "q", 10)
	b.finish(t, store.OutcomeRetried, time.Hour, held[0])
	// The retried job waits out its backoff parked; its slot went to the
	// other job.
	next := b.claim(t, "q", 10)
	if !slices.Equal(ids(next), all[1:2]) {
		t.Fatalf("claimed %v, want %v", ids(next), all[1:2])
	}
	if p, a := b.parked(t, "k"), b.active(t, "k"); p != 1 || a != 1 {
		t.Fatalf("parked %d, active %d; want 1, 1", p, a)
	}
	due := scalar[time.Time](t, b.pool, `SELECT limit_due FROM queue_jobs WHERE id = $1`, all[0])
	if d := time.Until(due); d < 50*time.Minute {
		t.Fatalf("the retried job is due in %s, want about an hour", d)
	}
	// Once due, the next slot freed goes to it.
	exec(t, b.pool, `UPDATE queue_jobs SET limit_due = now() WHERE id = $1`, all[0])
	b.finish(t, store.OutcomeCompleted, 0, next[0])
	if again := b.claim(t, "q", 10); !slices.Equal(ids(again), all[:1]) || again[0].Attempt != 2 {
		t.Fatalf("claimed %v, want %v at its second attempt", ids(again), all[:1])
	}
}

func TestLimitFailedAndLostJobsFreeTheirSlots(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	all := b.dispatch(t, "q", "k", 2, 5, 0)
	held := b.claim(t, "q", 10)
	// Failed for good: moved with its limit, slot handed over.
	b.finish(t, store.OutcomeFailed, 0, held[0])
	if k := scalar[string](t, b.pool, `SELECT limit_key || '/' || limit_n FROM queue_failed_jobs WHERE job_id = $1`, all[0]); k != "k/2" {
		t.Fatalf("failed job's limit %q, want k/2", k)
	}
	held = append(held[1:], b.claim(t, "q", 10)...)
	if !slices.Equal(ids(held), all[1:3]) {
		t.Fatalf("holding %v, want %v", ids(held), all[1:3])
	}
	// The holder dies. A job with tries left is released and keeps its slot;
	// one whose tries are spent moves to failed jobs and hands its slot over.
	exec(t, b.pool, `UPDATE queue_jobs SET max_tries = 1 WHERE id = $1`, all[2])
	lost, err := b.st.JobReleaseWorker(t.Context(), "w", 3, "killed")
	if err != nil || lost.Released != 1 || lost.Failed != 1 {
		t.Fatalf("release: %+v, %v; want 1 released, 1 failed", lost, err)
	}
	if u, a := b.unparked(t, "k"), b.active(t, "k"); u != 2 || a != 2 {
		t.Fatalf("after the release: %d unparked, active %d; want 2, 2", u, a)
	}
	if got := ids(b.claim(t, "q", 10)); !slices.Equal(got, []int64{all[1], all[3]}) {
		t.Fatalf("claimed %v, want the released %d and the handed-over %d", got, all[1], all[3])
	}
	// Retrying the failed job dispatches it under its limit, parked until
	// a slot is free.
	fid := scalar[int64](t, b.pool, `SELECT id FROM queue_failed_jobs WHERE job_id = $1`, all[0])
	if _, err := b.st.FailedJobRetry(t.Context(), fid); err != nil {
		t.Fatal(err)
	}
	if p := b.parked(t, "k"); p != 2 {
		t.Fatalf("parked = %d, want 2 (the last one dispatched and the retry)", p)
	}
}

func TestLimitSweepUnparksDueJobsAndRepairsDrift(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	// Delayed limited jobs are parked until due, whatever the free slots.
	// The delay leaves a busy machine room for the checks and the sweep
	// before it passes.
	const delay = 3 * time.Second
	b.dispatch(t, "q", "k", 3, 5, delay)
	if u, p, a := b.unparked(t, "k"), b.parked(t, "k"), b.active(t, "k"); u != 0 || p != 5 || a != 0 {
		t.Fatalf("delayed: %d unparked, %d parked, active %d; want 0, 5, 0", u, p, a)
	}
	counts, err := b.st.QueueCounts(ctx)
	if err != nil || len(counts) != 1 || counts[0].Delayed != 0 || counts[0].Limited != 5 {
		t.Fatalf("counts %+v, %v; want 5 limited, none delayed", counts, err)
	}
	sweep := func() store.LimitSweepResult {
		t.Helper()
		res, err := b.st.LimitSweep(ctx, store.LimitSweepParams{Keys: 100, PerKey: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sweep(); res.Visited != 1 || res.Due != 0 || res.Unparked != 0 {
		t.Fatalf("sweep before due: %+v", res)
	}
	time.Sleep(delay + 50*time.Millisecond) // the jobs' own delay, on the database clock
	if res := sweep(); res.Due != 1 || res.Unparked != 3 || !slices.Equal(res.Queues, []string{"q"}) {
		t.Fatalf("sweep once due: %+v; want 3 unparked on q", res)
	}
	if u, a := b.unparked(t, "k"), b.active(t, "k"); u != 3 || a != 3 {
		t.Fatalf("%d unparked, active %d; want 3, 3", u, a)
	}
	if res := sweep(); res.Unparked != 0 {
		t.Fatalf("a second sweep unparked %d with no slot free", res.Unparked)
	}
	// A job deleted by another path holds its slot until the sweep counts.
	exec(t, b.pool, `DELETE FROM queue_jobs WHERE id = (SELECT min(id) FROM queue_jobs WHERE available_at <> 'infinity')`)
	if res := sweep(); res.Repaired != 1 || res.Unparked != 1 {
		t.Fatalf("sweep after a deletion: %+v; want 1 key repaired and 1 unparked", res)
	}
	if u, a := b.unparked(t, "k"), b.active(t, "k"); u != 3 || a != 3 {
		t.Fatalf("%d unparked, active %d; want 3, 3", u, a)
	}
	// A key whose row was deleted by hand gets one back.
	exec(t, b.pool, `DELETE FROM queue_jobs WHERE available_at <> 'infinity'`)
	exec(t, b.pool, `DELETE FROM queue_limits`)
	if res := sweep(); res.Unparked != 1 {
		t.Fatalf("sweep with no row: %+v; want the last parked job unparked", res)
	}
	if a := b.active(t, "k"); a != 1 {
		t.Fatalf("active = %d, want 1", a)
	}
}

func TestLimitSweepWalksKeysInBoundedSteps(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	for i := range 5 {
		b.dispatch(t, "q", fmt.Sprintf("k%d", i), 1, 2, 0) // one ready, one parked and due
	}
	// Fill every slot so the walk finds nothing to unpark, then free k3's.
	exec(t, b.pool, `UPDATE queue_limits SET active = 1`)
	exec(t, b.pool, `DELETE FROM queue_jobs WHERE limit_key = 'k3' AND available_at <> 'infinity'`)
	var after string
	var visited []int
	unparked := 0
	for range 3 {
		res, err := b.st.LimitSweep(t.Context(), store.LimitSweepParams{After: after, Keys: 2, PerKey: 10})
		if err != nil {
			t.Fatal(err)
		}
		visited = append(visited, res.Visited)
		unparked += res.Unparked
		after = res.Next
	}
	if !slices.Equal(visited, []int{2, 2, 1}) || after != "" || unparked != 1 {
		t.Fatalf("visited %v, next %q, unparked %d; want [2 2 1], \"\", 1", visited, after, unparked)
	}
	if u := b.unparked(t, "k3"); u != 1 {
		t.Fatalf("k3 has %d unparked, want 1", u)
	}
}

func TestLimitHoldsUnderConcurrentDispatchers(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	const dispatchers, each, limit = 16, 10, 3
	var wg sync.WaitGroup
	errs := make(chan error, dispatchers)
	start := make(chan struct{})
	for range dispatchers {
		wg.Go(func() {
			<-start
			for range each {
				_, err := b.st.JobInsertMany(context.Background(), b.pool, []store.JobInsertParams{
					{Queue: "q", Name: "n", Payload: []byte(`{}`), LimitKey: "race", Limit: limit}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if u := b.unparked(t, "race"); u > limit || u != b.active(t, "race") {
		t.Fatalf("%d unparked with active %d, want at most %d and equal", u, b.active(t, "race"), limit)
	}
	// A dispatcher that lost the race to create the key's row parked its
	// job: the sweep fills the slot.
	if _, err := b.st.LimitSweep(t.Context(), store.LimitSweepParams{Keys: 10, PerKey: 10}); err != nil {
		t.Fatal(err)
	}
	if u := b.unparked(t, "race"); u != limit {
		t.Fatalf("%d unparked after the sweep, want %d", u, limit)
	}
}

func TestLimitHoldsUnderConcurrentClaimsAndFinishes(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	const limit, total, workers = 2, 60, 6
	b.dispatch(t, "q", "k", limit, total, 0)
	exec(t, b.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q', 'free' FROM generate_series(1, 60)`)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var maxSeen atomic.Int64
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the sampler
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int64
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs WHERE limit_key = 'k' AND reserved_by IS NOT NULL`).Scan(&n); err != nil {
				return
			}
			if n > maxSeen.Load() {
				maxSeen.Store(n)
			}
		}
	})
	wg.Go(func() { // the sweep, as the master's housekeeping runs it
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, _ = b.st.LimitSweep(ctx, store.LimitSweepParams{Keys: 10, PerKey: 10})
		}
	})
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Go(func() {
			name := fmt.Sprintf("w%d", w)
			for ctx.Err() == nil && done.Load() < 2*total {
				jobs, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 3, Worker: name})
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				time.Sleep(10 * time.Millisecond) // the jobs run
				out := make([]store.JobOutcome, len(jobs))
				for i, j := range jobs {
					out[i] = store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
						Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: time.Now(), FinishedAt: time.Now()}
				}
				res, err := b.st.JobFinishMany(ctx, store.JobFinishParams{Worker: name, Outcomes: out})
				if err != nil {
					t.Error(err)
					return
				}
				done.Add(int64(res.Written))
			}
		})
	}
	workersWG.Wait()
	close(stop)
	wg.Wait()
	if done.Load() != 2*total {
		t.Fatalf("%d of %d jobs done", done.Load(), 2*total)
	}
	if m := maxSeen.Load(); m > limit || m == 0 {
		t.Fatalf("at most %d jobs of the key were seen running at once, want 1..%d", m, limit)
	}
	if a := b.active(t, "k"); a != 0 {
		t.Fatalf("active = %d after every job finished, want 0", a)
	}
}

// TestLimitStatementsKeepTheirPlanUnderAGenericPlan explains the finish
// and sweep statements generically with 20,000 parked jobs of one key,
// 20,000 unlimited ones queued and 10,000 keys: a batch without limited
// jobs reads nothing for limits, and one with them, like the sweep, reads
// in proportion to its batch.
func TestLimitStatementsKeepTheirPlanUnderAGenericPlan(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	ctx := t.Context()
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 20000)`)
	exec(t, db.pool, `INSERT INTO queue_limits (key, limit_n, active) VALUES ('k', 2, 2)`)
	exec(t, db.pool, `INSERT INTO queue_limits (key, limit_n, active) SELECT 'idle:' || g, 2, 0 FROM generate_series(1, 10000) g`)
	exec(t, db.pool, `
		INSERT INTO queue_jobs (queue, name, limit_key, limit_n, available_at, limit_due)
		SELECT 'q', 'n', 'k', 2, 'infinity', now() - g * interval '1 microsecond' FROM generate_series(1, 20000) g`)
	exec(t, db.pool, `
		INSERT INTO queue_jobs (queue, name, limit_key, limit_n) VALUES ('q', 'n', 'k', 2), ('q', 'n', 'k', 2)`)
	exec(t, db.pool, `ANALYZE queue_jobs`)
	exec(t, db.pool, `ANALYZE queue_limits`)
	finishOf := func(jobs []store.ClaimedJob) []store.JobOutcome {
		out := make([]store.JobOutcome, len(jobs))
		for i, j := range jobs {
			out[i] = store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
				Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: time.Now(), FinishedAt: time.Now()}
		}
		return out
	}
	for range 6 { // as a cached statement would have been by now
		jobs, err := db.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: finishOf(jobs)}); err != nil {
			t.Fatal(err)
		}
	}
	// The last finish was of unlimited jobs only (the limited two are
	// the last ready): explain it again with fresh leases.
	unlimited, err := db.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "w"})
	if err != nil || len(unlimited) != 10 {
		t.Fatalf("claim %d, %v", len(unlimited), err)
	}
	if _, err := db.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: finishOf(unlimited)}); err != nil {
		t.Fatal(err)
	}
	fin := db.rec.last(t)
	// Re-run the same text on ten new leases: ten claimed unlimited jobs.
	again, err := db.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	fin.args[0], fin.args[1] = leaseIDs(again)
	read, plan := explainGeneric(t, db, fin)
	if n := read.of("queue_limits"); n != 0 {
		t.Errorf("a finish without limited jobs read %d rows of queue_limits\n%s", n, plan)
	}
	if n := read.of("queue_jobs"); n > 100 {
		t.Errorf("a finish of 10 read %d rows of queue_jobs (%s)\n%s", n, read, plan)
	}
	// A finish of the two limited jobs hands two slots over.
	exec(t, db.pool, `DELETE FROM queue_jobs WHERE limit_key IS NULL`)
	lim, err := db.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "w"})
	if err != nil || len(lim) != 2 {
		t.Fatalf("claim of the limited: %d, %v", len(lim), err)
	}
	fin.args[0], fin.args[1] = leaseIDs(lim)
	read, plan = explainGeneric(t, db, fin)
	if n := read.of("queue_jobs"); n > 100 {
		t.Errorf("a finish of 2 limited jobs read %d rows of queue_jobs (%s)\n%s", n, read, plan)
	}
	if n := read.of("queue_limits"); n > 10 {
		t.Errorf("a finish of 2 limited jobs read %d rows of queue_limits\n%s", n, plan)
	}
	// A dispatch of limited jobs reads its keys' rows only.
	for range 6 {
		if _, err := db.st.JobInsertMany(ctx, db.generic, []store.JobInsertParams{
			{Queue: "q", Name: "n", Payload: []byte(`{}`), LimitKey: "k", Limit: 2},
			{Queue: "q", Name: "n", Payload: []byte(`{}`), LimitKey: "idle:7", Limit: 2},
			{Queue: "q", Name: "n", Payload: []byte(`{}`)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	read, plan = explainGeneric(t, db, db.rec.last(t))
	if n := read.of("queue_limits"); n > 10 {
		t.Errorf("a dispatch of 2 limited jobs read %d rows of queue_limits\n%s", n, plan)
	}
	if n := read.of("queue_jobs"); n > 10 {
		t.Errorf("a dispatch of 3 jobs read %d rows of queue_jobs\n%s", n, plan)
	}
	// The sweep's walk, with every parked job due and no slot free.
	for range 6 {
		if _, err := db.st.LimitSweep(ctx, store.LimitSweepParams{Keys: 100, PerKey: 100}); err != nil {
			t.Fatal(err)
		}
	}
	db.rec.mu.Lock()
	var walk, fix statement
	for _, s := range db.rec.sent {
		switch {
		case len(s.args) == 2 && firstWords(s.sql) == "WITH RECURSIVE":
			walk = s
		case len(s.args) == 2 && firstWords(s.sql) == "WITH counted":
			fix = s
		}
	}
	db.rec.mu.Unlock()
	if walk.sql == "" || fix.sql == "" {
		t.Fatal("the sweep's statements were not recorded")
	}
	read, plan = explainGeneric(t, db, walk)
	if n := read.of("queue_jobs"); n > 100 {
		t.Errorf("the sweep's walk read %d rows of queue_jobs (%s)\n%s", n, read, plan)
	}
	fix.args[0] = []string{"k"}
	read, plan = explainGeneric(t, db, fix)
	if n := read.of("queue_jobs"); n > 100 {
		t.Errorf("the sweep's fix read %d rows of queue_jobs (%s)\n%s", n, read, plan)
	}
}

func leaseIDs(jobs []store.ClaimedJob) ([]int64, []int64) {
	ids, tokens := make([]int64, len(jobs)), make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i], tokens[i] = j.ID, j.Token
	}
	return ids, tokens
}

// firstWords is the statement's first two words.
func firstWords(sql string) string {
	f := strings.Fields(sql)
	if len(f) < 2 {
		return sql
	}
	return f[0] + " " + f[1]
}

// The rows of keys no job holds are trimmed; a key with a running, ready
// or parked job keeps its row.
func TestLimitKeyTrimKeepsKeysInUse(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	b.dispatch(t, "q", "done", 1, 1, 0)
	b.finish(t, store.OutcomeCompleted, 0, b.claim(t, "q", 10)...)
	b.dispatch(t, "q", "running", 1, 2, 0) // one takes the slot, one is parked
	b.claim(t, "q", 10)
	b.dispatch(t, "r", "ready", 1, 1, 0)
	n, err := b.st.LimitKeyTrim(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || b.active(t, "done") != -1 {
		t.Fatalf("trimmed %d, the unused key's row active %d; want 1 trimmed and no row", n, b.active(t, "done"))
	}
	for _, k := range []string{"running", "ready"} {
		if b.active(t, k) != 1 {
			t.Errorf("key %q in use: active %d, want its row kept with 1", k, b.active(t, k))
		}
	}
	// A key dispatched again after its trim gets a new row.
	b.dispatch(t, "q", "done", 1, 1, 0)
	if b.active(t, "done") != 1 {
		t.Errorf("after a new dispatch, active %d, want 1", b.active(t, "done"))
	}
}
