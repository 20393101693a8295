package store_test

import (
	"context"
	"testing"
	"time"

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

// TestHotPathKeepsItsPlanUnderAGenericPlan runs the worker's statements
// the way pgx does (prepared, cached) on a session forced onto generic
// plans, with 50,000 jobs held and 50,000 ready, and checks by PostgreSQL's
// statistics that each reads rows in proportion to its batch, not to the
// jobs held or queued.
func TestHotPathKeepsItsPlanUnderAGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	setup, err := pgxpool.New(ctx, url)
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
	generic, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(generic.Close)
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

	measure := func(what string, limit int64, fn func() error) {
		t.Helper()
		before := rowsRead(t, generic)
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if read := rowsRead(t, generic) - before; read > limit {
			t.Errorf("%s read %d rows of queue_jobs, want at most %d", what, read, limit)
		}
	}
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
	if n := scalar[int64](t, setup, `SELECT count(*) FROM fleet_jobs`); n != 1000 {
		t.Errorf("history rows = %d, want 1000", n)
	}
	// An empty error is stored as NULL, a given one as it is.
	if n := scalar[int64](t, setup, `SELECT count(*) FROM fleet_jobs WHERE (status = 'completed') = (error IS NULL) AND master = 'm' AND worker = 'w'`); n != 1000 {
		t.Errorf("%d history rows with their error, master and worker as given, want 1000", n)
	}
	if n := scalar[int64](t, setup, `SELECT sum(processed) FROM fleet_counters`); n != 1000 {
		t.Errorf("processed = %d, want 1000", n)
	}
	if n := scalar[int64](t, setup, `SELECT count(*) FROM queue_failed_jobs`); n != 50 {
		t.Errorf("failed jobs = %d, want 50", n)
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
