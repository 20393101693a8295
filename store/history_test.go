package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func scalar[T any](t testing.TB, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func TestHistoryLandsInPartitionsAndCounters(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	st := store.New(pool)
	if _, err := st.PartitionsEnsure(ctx, 48, 8); err != nil {
		t.Fatal(err)
	}
	if n, err := st.PartitionsEnsure(ctx, 48, 8); err != nil || n != 0 {
		t.Fatalf("second ensure = %d, %v; want 0", n, err)
	}
	now := time.Now()
	rows := []store.JobHistoryRow{
		{JobID: 1, Queue: "q", Name: "a", Attempt: 1, Status: "completed", StartedAt: now, FinishedAt: now, RuntimeMs: 5},
		{JobID: 2, Queue: "q", Name: "a", Attempt: 1, Status: "failed", StartedAt: now, FinishedAt: now, RuntimeMs: 7, Error: "x"},
		{JobID: 3, Queue: "r", Name: "b", Attempt: 2, Status: "timed_out", StartedAt: now, FinishedAt: now, RuntimeMs: 9},
	}
	for range 2 {
		b := &pgx.Batch{}
		store.QueueHistoryInsert(b, rows)
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	hour := now.UTC().Format("2006010215")
	day := now.UTC().Format("20060102")
	if got := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM fleet_jobs WHERE job_id = 1 LIMIT 1`); got != "fleet_jobs_completed_p"+hour {
		t.Errorf("completed row in %s", got)
	}
	if got := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM fleet_jobs WHERE job_id = 3 LIMIT 1`); got != "fleet_jobs_failed_p"+day {
		t.Errorf("timed-out row in %s", got)
	}
	if got := scalar[int64](t, pool, `SELECT processed * 10 + failed FROM fleet_counters WHERE queue = 'q'`); got != 42 {
		t.Errorf("counters of q = %d, want processed 4 failed 2", got)
	}
	if got := scalar[*string](t, pool, `SELECT error FROM fleet_jobs WHERE job_id = 1 LIMIT 1`); got != nil {
		t.Errorf("empty error stored as %q, want NULL", *got)
	}
}

func TestPartitionsMoveDefaultRowsAndTrim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	st := store.New(pool)
	// A completed attempt five days ahead has no partition yet: it waits in
	// the default partition until one is created, and is moved into it.
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (1, 'q', 'n', 1, 'completed', now() + interval '5 days', now() + interval '5 days', 1)`); err != nil {
		t.Fatal(err)
	}
	if got := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM fleet_jobs`); got != "fleet_jobs_completed_default" {
		t.Fatalf("row in %s", got)
	}
	if n, err := st.PartitionsEnsure(ctx, 24*6, 8); err != nil || n == 0 {
		t.Fatalf("ensure = %d, %v", n, err)
	}
	if got := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM fleet_jobs`); got == "fleet_jobs_completed_default" {
		t.Fatal("the row stayed in the default partition")
	}
	// Trimming as if a week had passed drops the old completed hours and
	// failed days, keeps what is within retention and never the defaults.
	before := scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname LIKE 'fleet_jobs_completed_p%' AND relkind = 'r'`)
	dropped := scalar[int](t, pool, `SELECT fleet_partitions_trim(now() + interval '2 days', 24, 7, 30)`)
	after := scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname LIKE 'fleet_jobs_completed_p%' AND relkind = 'r'`)
	if dropped == 0 || after != before-dropped {
		t.Fatalf("dropped %d: %d completed partitions before, %d after", dropped, before, after)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); n != 1 {
		t.Fatal("a row within retention was trimmed")
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname IN ('fleet_jobs_completed_default', 'fleet_jobs_failed_default', 'fleet_metrics_default')`); n != 3 {
		t.Fatal("a default partition was dropped")
	}
}

func TestTrimDropsManyRowsByPartition(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	fillOldHistory(t, pool, 200_000, 24)
	n, err := store.New(pool).PartitionsTrim(ctx, store.TrimParams{CompletedHours: 24, FailedDays: 7, MetricsDays: 30})
	if err != nil || n < 24 {
		t.Fatalf("trim = %d, %v", n, err)
	}
	if left := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); left != 0 {
		t.Fatalf("%d rows left", left)
	}
}

// fillOldHistory creates hourly partitions from three days ago and fills
// them with rows completed attempts, spread over hours hours.
func fillOldHistory(t testing.TB, pool *pgxpool.Pool, rows, hours int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `SELECT fleet_partitions_ensure(now() - interval '3 days', $1, 1)`, hours); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'q', 'n', 1, 'completed', ts, ts, 1
		FROM generate_series(1, $1) g,
		     LATERAL (SELECT date_trunc('hour', now() - interval '3 days') + (g % $2) * interval '1 hour' + interval '1 second' AS ts) x`,
		rows, hours); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkPartitionsTrim1M(b *testing.B) {
	pool := pgtest.Pool(b)
	st := store.New(pool)
	for b.Loop() {
		b.StopTimer()
		fillOldHistory(b, pool, 1_000_000, 24)
		b.StartTimer()
		n, err := st.PartitionsTrim(context.Background(), store.TrimParams{CompletedHours: 24, FailedDays: 7, MetricsDays: 30})
		if err != nil || n < 24 {
			b.Fatalf("trim = %d, %v", n, err)
		}
	}
}

func TestDutyClaimHasOneWinner(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Go(func() {
			won, err := st.DutyClaim(ctx, "x", time.Hour)
			if err != nil {
				t.Error(err)
			}
			if won {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d winners, want 1", wins)
	}
	if won, _ := st.DutyClaim(ctx, "x", 0); !won {
		t.Fatal("a claim after its period must win again")
	}
}

func TestMetricsSnapshot(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	// Ten attempts finished during the previous minute, one of them failed;
	// one queue has an old pending job and no history.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', CASE WHEN g <= 5 THEN 'send' ELSE 'bounce' END, 1,
		       CASE WHEN g = 10 THEN 'failed' ELSE 'completed' END, ts, ts, g * 10
		FROM generate_series(1, 10) g,
		     LATERAL (SELECT date_trunc('minute', now()) - interval '1 minute' + g * interval '1 second' AS ts) x`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name, available_at) VALUES ('slow', 'x', now() - interval '90 seconds')`); err != nil {
		t.Fatal(err)
	}
	n, err := st.MetricsSnapshot(ctx)
	if err != nil || n != 4 {
		t.Fatalf("snapshot wrote %d rows, %v; want mail, slow, send, bounce", n, err)
	}
	rows, err := st.MetricsList(ctx, time.Now().Add(-time.Hour), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]store.MetricsRow{}
	for _, r := range rows {
		by[r.Kind+":"+r.Subject] = r
	}
	mail := by["queue:mail"]
	if mail.Jobs != 10 || mail.Failed != 1 || mail.JobsPerMinute != 10 || mail.RuntimeMeanMs != 55 || mail.RuntimeP50Ms != 55 || mail.RuntimeP99Ms < 99 {
		t.Errorf("mail = %+v", mail)
	}
	if send := by["job:send"]; send.Jobs != 5 || send.RuntimeMeanMs != 30 {
		t.Errorf("send = %+v", send)
	}
	slow := by["queue:slow"]
	if slow.Pending != 1 || slow.WaitSecs < 90 || slow.ClearSecs != nil {
		t.Errorf("slow = %+v (no throughput: clear time unknown)", slow)
	}
	if n, err := st.MetricsSnapshot(ctx); err != nil || n != 0 {
		t.Fatalf("second snapshot of the same minute wrote %d, %v", n, err)
	}
}
