package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// rowsRead is how many rows and index entries statements have read from
// queue_jobs and its indexes so far, by PostgreSQL's own statistics.
func rowsRead(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	// The statistics of the pool's one backend reach the shared counters
	// when it next goes idle.
	if _, err := pool.Exec(context.Background(), `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	return scalar[int64](t, pool, `
		SELECT (SELECT COALESCE(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relname = 'queue_jobs')
		     + (SELECT COALESCE(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'queue_jobs')`)
}

// readsAtMost returns a check that fn, run on pool, reads at most limit
// rows and index entries of queue_jobs (the test fails, naming what, if
// it reads more).
func readsAtMost(t *testing.T, pool *pgxpool.Pool) func(what string, limit int64, fn func() error) {
	return func(what string, limit int64, fn func() error) {
		t.Helper()
		before := rowsRead(t, pool)
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if read := rowsRead(t, pool) - before; read > limit {
			t.Errorf("%s read %d rows of queue_jobs, want at most %d", what, read, limit)
		}
	}
}

// oneGenericSession returns a test database's pool for setup, and a pool
// of one session that plans every statement generically, as PostgreSQL
// may plan a statement pgx cached.
func oneGenericSession(t *testing.T) (setup, generic *pgxpool.Pool) {
	t.Helper()
	url := pgtest.URL(t)
	setup, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(setup.Close)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	generic, err = pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(generic.Close)
	return setup, generic
}

// TestHotPathKeepsItsPlanUnderAGenericPlan runs the worker's statements
// the way pgx does (prepared, cached) on a session forced onto generic
// plans, with 50,000 jobs held and 50,000 ready, and checks by PostgreSQL's
// statistics that each reads rows in proportion to its batch, not to the
// jobs held or queued.
func TestHotPathKeepsItsPlanUnderAGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup, generic := oneGenericSession(t)
	st := store.New(generic)

	if _, err := setup.Exec(ctx, `
		INSERT INTO queue_jobs (queue, name, available_at)
		SELECT 'default', 'n', now() - interval '1 hour' + g * interval '1 microsecond' FROM generate_series(1, 100000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "m", Name: "m", Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
	var held []store.ClaimedJob
	for len(held) < 50000 {
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 1000, Worker: "w", Master: "m"})
		if err != nil || len(jobs) == 0 {
			t.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		held = append(held, jobs...)
	}
	if _, err := setup.Exec(ctx, `VACUUM ANALYZE queue_jobs`); err != nil {
		t.Fatal(err)
	}
	if plan := scalar[string](t, generic, `SHOW plan_cache_mode`); plan != "force_generic_plan" {
		t.Fatalf("plan_cache_mode = %s", plan)
	}

	measure := readsAtMost(t, generic)
	measure("claim of 100", 300, func() error {
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 100, Worker: "w", Master: "m"})
		held = append(held, jobs...)
		return err
	})
	now := time.Now()
	batch := make([]store.JobOutcome, 1000)
	for i, j := range held[:1000] {
		batch[i] = store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now}
	}
	for i := range batch[:100] { // retried and failed outcomes take their own paths
		if i%2 == 0 {
			batch[i].Kind, batch[i].Status, batch[i].Error = store.OutcomeRetried, "failed", "again"
		} else {
			batch[i].Kind, batch[i].Status, batch[i].Error, batch[i].MaxTries = store.OutcomeFailed, "failed", "done", 1
		}
	}
	measure("finishing 1000", 3000, func() error {
		res, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Master: "m", Outcomes: batch})
		if err == nil && res.Written != 1000 {
			t.Errorf("finish wrote %d of 1000 (lost %d)", res.Written, len(res.Lost))
		}
		return err
	})
	// A batch that releases no job (no retry, no snooze) runs the shorter
	// statement: it must keep to its batch too.
	ends := make([]store.JobOutcome, 1000)
	for i, j := range held[2000:3000] {
		ends[i] = store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now}
		if i%10 == 0 {
			ends[i].Kind, ends[i].Status, ends[i].Error, ends[i].MaxTries = store.OutcomeFailed, "failed", "done", 1
		}
	}
	measure("finishing 1000 without releases", 3000, func() error {
		res, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Master: "m", Outcomes: ends})
		if err == nil && res.Written != 1000 {
			t.Errorf("finish wrote %d of 1000 (lost %d)", res.Written, len(res.Lost))
		}
		return err
	})
	leases := make([]store.Lease, 1000)
	for i, j := range held[1000:2000] {
		leases[i] = j.Lease()
	}
	measure("releasing 1000", 3000, func() error {
		n, err := st.JobRelease(ctx, store.JobReleaseParams{Leases: leases, Uncount: true})
		if err == nil && n != 1000 {
			t.Errorf("released %d of 1000", n)
		}
		return err
	})
	// The claim of 100 left 100 dead entries at the head of the ready index
	// for these to step over: bounded by recent claims, not by the backlog.
	measure("next available", 300, func() error {
		_, err := st.JobNext(ctx, []string{"default", "mail"}, "")
		return err
	})
	measure("ready exists", 300, func() error {
		_, err := st.JobReadyExists(ctx, []string{"default", "mail"})
		return err
	})
	measure("queue counts", 300, func() error {
		_, err := st.QueueCounts(ctx)
		return err
	})
	if n := scalar[int64](t, setup, `SELECT count(*) FROM fleet_jobs`); n != 2000 {
		t.Errorf("history rows = %d, want 2000", n)
	}
	// An empty error is stored as NULL, a given one as it is.
	if n := scalar[int64](t, setup, `SELECT count(*) FROM fleet_jobs WHERE (status = 'completed') = (error IS NULL) AND master = 'm' AND worker = 'w'`); n != 2000 {
		t.Errorf("%d history rows with their error, master and worker as given, want 2000", n)
	}
	if n := scalar[int64](t, setup, `SELECT sum(processed) FROM fleet_counters`); n != 2000 {
		t.Errorf("processed = %d, want 2000", n)
	}
	if n := scalar[int64](t, setup, `SELECT count(*) FROM queue_failed_jobs`); n != 150 {
		t.Errorf("failed jobs = %d, want 150", n)
	}
}

func TestQueueVacuumWhenDeadRowsPileUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one backend, whose statistics pg_stat_force_next_flush sends
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := store.New(pool)
	for _, sql := range []string{
		`INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 30000)`,
		`DELETE FROM queue_jobs WHERE id <= 20000`,
		`SELECT pg_stat_force_next_flush()`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	params := store.QueueVacuumParams{MinDead: 15000, DeadPerLive: 0.2}
	res, err := st.QueueVacuum(ctx, store.QueueVacuumParams{MinDead: 50000, DeadPerLive: 0.2})
	if err != nil || res.Vacuumed || res.Dead < 20000 {
		t.Fatalf("below the threshold: %+v, %v; want 20000 dead found and no vacuum", res, err)
	}
	if res, err = st.QueueVacuum(ctx, params); err != nil || !res.Vacuumed {
		t.Fatalf("over the threshold: %+v, %v; want a vacuum", res, err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	if res, err = st.QueueVacuum(ctx, params); err != nil || res.Vacuumed || res.Dead != 0 || res.Live != 10000 {
		t.Fatalf("after the vacuum: %+v, %v; want no dead rows, 10000 live and no second vacuum", res, err)
	}
	// Dead rows over the threshold again, but a vacuum ended within the
	// gap (whoever ran it): none now. With no gap, one.
	for _, sql := range []string{
		`INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 30000)`,
		`DELETE FROM queue_jobs WHERE id > 30000 AND id <= 50000`,
		`SELECT pg_stat_force_next_flush()`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	gap := params
	gap.MinGap = time.Hour
	if res, err = st.QueueVacuum(ctx, gap); err != nil || res.Vacuumed || !res.Recent || res.Dead < 20000 {
		t.Fatalf("within the gap: %+v, %v; want 20000 dead found, the last vacuum recent and no vacuum", res, err)
	}
	if res, err = st.QueueVacuum(ctx, params); err != nil || !res.Vacuumed || res.Recent {
		t.Fatalf("with no gap: %+v, %v; want a vacuum", res, err)
	}
}

// TestQueueNotifyWakesListeners covers the notification a dispatching
// client sends on its own, outside the inserting transaction.
func TestQueueNotifyWakesListeners(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listening := make(chan struct{})
	got := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- st.Listen(ctx, func() { close(listening) }, func(q string) { got <- q })
	}()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("listen: %v", err)
	}
	if err := st.QueueNotify(ctx, []string{"mail", "default"}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case q := <-got:
			seen[q] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("notifications seen: %v, want mail and default", seen)
		}
	}
	cancel()
	<-done
}

// TestPriorityClaimReadsOnlyWhatItTakes fills a queue so that a naive
// (priority, available_at) scan would wade through the backlog: 50,000
// delayed and 5,000 parked jobs of the most urgent priority sit in the
// ready index before 20,000 ready jobs of priority 0 and 20,000 of
// priority 5. Under a generic plan the claim still reads in proportion to
// its batch, takes priority 0 before 5 and the oldest first, and the
// statements the master and idle workers run stay bounded too.
func TestPriorityClaimReadsOnlyWhatItTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup, generic := oneGenericSession(t)
	st := store.New(generic)
	// "other" has only delayed jobs of -5 before its ready ones of 5.
	if _, err := setup.Exec(ctx, `
		INSERT INTO queue_jobs (queue, name, priority, available_at)
		SELECT q, 'delayed', -5, now() + interval '1 day' + g * interval '1 ms'
		FROM generate_series(1, 50000) g, unnest(ARRAY['default', 'other']) q;
		INSERT INTO queue_jobs (queue, name, priority, available_at, limit_key, limit_n, limit_due)
		SELECT 'default', 'parked', -5, 'infinity', 'k', 1, now() FROM generate_series(1, 5000) g;
		INSERT INTO queue_jobs (queue, name, priority, available_at)
		SELECT q, 'late', 5, now() - interval '2 hours' + g * interval '1 ms'
		FROM generate_series(1, 20000) g, unnest(ARRAY['default', 'other']) q;
		INSERT INTO queue_jobs (queue, name, priority, available_at)
		SELECT 'default', 'first', 0, now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `VACUUM ANALYZE queue_jobs`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "m", Name: "m", Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
	measure := readsAtMost(t, generic)
	// Before any claim leaves dead entries: one or two per priority.
	measure("next available", 20, func() error {
		next, err := st.JobNext(ctx, []string{"default", "other", "mail"}, "m")
		if err == nil && (!next.Any || next.In != 0) {
			t.Errorf("next available: %+v, want a job ready now", next)
		}
		return err
	})
	measure("ready exists", 20, func() error {
		ok, err := st.JobReadyExists(ctx, []string{"other", "mail"})
		if err == nil && !ok {
			t.Error("no ready job found")
		}
		return err
	})
	measure("oldest wait", 20, func() error {
		w, err := st.QueueOldestWait(ctx, []string{"default", "other", "mail"})
		if err == nil && (w["default"] < 7200 || w["other"] < 7200 || len(w) != 2) {
			t.Errorf("oldest waits %v, want default's and other's at least two hours (priority 5's oldest) and no other", w)
		}
		return err
	})
	// Counting reads the delayed and parked entries it counts (105,000),
	// never the 60,000 ready ones.
	measure("queue counts", 105100, func() error {
		counts, err := st.QueueCounts(ctx)
		for _, c := range counts {
			if c.Queue == "default" && (c.Pending != 40000 || c.Delayed != 50000 || c.Limited != 5000) {
				t.Errorf("default counts %+v, want 40000 pending, 50000 delayed, 5000 limited", c)
			}
		}
		return err
	})
	measure("claim of 100 at priority 5", 300, func() error {
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "other", Limit: 100, Worker: "w", Master: "m"})
		if err == nil && (len(jobs) != 100 || jobs[0].Name != "late") {
			t.Errorf("claimed %d jobs; want 100 of priority 5", len(jobs))
		}
		return err
	})
	// Each claim steps over the dead entries the claims before it left at
	// the head of priority 0 (a worker's vacuum clears them): 100 each.
	var claimed []store.ClaimedJob
	for i := range 6 {
		measure("claim of 100", int64(300+100*i), func() error {
			jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 100, Worker: "w", Master: "m"})
			claimed = append(claimed, jobs...)
			return err
		})
	}
	if len(claimed) != 600 {
		t.Fatalf("claimed %d jobs, want 600", len(claimed))
	}
	for i, j := range claimed {
		if j.Name != "first" || j.Priority != 0 {
			t.Fatalf("claim %d took %s of priority %d, want the ready jobs of priority 0 first", i, j.Name, j.Priority)
		}
		if i > 0 && j.ID < claimed[i-1].ID {
			t.Fatalf("claim %d took job %d after job %d: not the oldest first", i, j.ID, claimed[i-1].ID)
		}
	}
}

// TestClaimFromAMarkStepsPastWhatAHeldTransactionKeeps holds a
// transaction open on another connection, so that the entries of claimed
// jobs stay at the head of the ready index, and claims 3,000 jobs in
// batches of 100. Under a generic plan, a claim from the head then steps
// over all 3,000 entries, and a claim past the last job taken (a mark)
// reads in proportion to its batch; both take the jobs in order, and a
// mark on one priority leaves the others read from their head.
func TestClaimFromAMarkStepsPastWhatAHeldTransactionKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup, generic := oneGenericSession(t)
	st := store.New(generic)
	exec(t, setup, `
		INSERT INTO queue_jobs (queue, name, available_at)
		SELECT 'default', 'n', now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 10000) g;
		INSERT INTO queue_jobs (queue, name, priority, available_at)
		SELECT 'default', 'later', 5, now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 1000) g`)
	exec(t, setup, `VACUUM ANALYZE queue_jobs`)
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "m", Name: "m", Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
	hold, err := setup.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	if _, err := hold.Exec(ctx, `BEGIN; SELECT txid_current()`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := hold.Exec(ctx, `ROLLBACK`); err != nil {
			t.Error(err)
		}
	}()
	var last store.ClaimedJob
	claim := func(after []store.ClaimMark) []store.ClaimedJob {
		t.Helper()
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 100, Worker: "w", Master: "m", After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.Priority == 0 && last.ID != 0 && store.ClaimOrder(j, last) <= 0 {
				t.Fatalf("job %d claimed after job %d: not in order", j.ID, last.ID)
			}
			if j.Priority == 0 {
				last = j
			}
		}
		return jobs
	}
	for range 30 {
		jobs := claim([]store.ClaimMark{store.MarkOf(last)})
		if len(jobs) != 100 || jobs[0].Priority != 0 {
			t.Fatalf("claimed %d jobs (first of priority %d), want 100 of priority 0", len(jobs), jobs[0].Priority)
		}
	}
	if n := scalar[int64](t, setup, `SELECT count(*) FROM queue_jobs WHERE reserved_by = 'w'`); n != 3000 {
		t.Fatalf("%d jobs held, want 3000", n)
	}
	measure := readsAtMost(t, generic)
	measure("claim of 100 from a mark", 300, func() error {
		if jobs := claim([]store.ClaimMark{store.MarkOf(last)}); len(jobs) != 100 {
			t.Errorf("claimed %d jobs from a mark, want 100", len(jobs))
		}
		return nil
	})
	// A look for work past the marks reads as little; one from the head
	// steps over the 3,100 entries.
	measure("next available past a mark", 20, func() error {
		next, err := st.JobNextAfter(ctx, []string{"default"}, "m", map[string][]store.ClaimMark{"default": {store.MarkOf(last)}})
		if err == nil && (!next.Any || next.In != 0 || !next.Live) {
			t.Errorf("next past a mark: %+v, want a job ready now and the master live", next)
		}
		return err
	})
	before := rowsRead(t, generic)
	if next, err := st.JobNext(ctx, []string{"default"}, "m"); err != nil || !next.Any || next.In != 0 {
		t.Fatalf("next from the head: %+v, %v; want a job ready now", next, err)
	}
	if read := rowsRead(t, generic) - before; read < 3100 {
		t.Errorf("a look for work from the head read %d rows of queue_jobs; want the 3,100 entries the held transaction keeps and more", read)
	}
	// A mark on priority 5 alone: priority 0 is read from its head, over
	// the 3,100 entries the claims left there.
	before = rowsRead(t, generic)
	if jobs := claim([]store.ClaimMark{{Priority: 5, AvailableAt: time.Now(), ID: 0}}); len(jobs) != 100 || jobs[0].Priority != 0 {
		t.Fatalf("claimed %d jobs from the head, want 100 of priority 0", len(jobs))
	}
	if read := rowsRead(t, generic) - before; read < 3100 {
		t.Errorf("a claim from the head read %d rows of queue_jobs; want the 3,100 entries the held transaction keeps and more", read)
	}
	// Past the last job of priority 0 there is none: priority 5 is next.
	mark := store.MarkOf(last)
	exec(t, setup, `UPDATE queue_jobs SET reserved_by = 'x' WHERE priority = 0 AND reserved_by IS NULL AND id > $1`, mark.ID)
	jobs := claim([]store.ClaimMark{mark})
	if len(jobs) != 100 || jobs[0].Priority != 5 || jobs[0].Name != "later" {
		t.Fatalf("claimed %d jobs past the end of priority 0, want 100 of priority 5", len(jobs))
	}
}
