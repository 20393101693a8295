package store_test

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// onClock returns a store on pool whose clocked statements read a clock
// standing at at (see store.Store.WithClock), and that clock, which the test
// moves.
func onClock(st *store.Store, at time.Time) (*store.Store, *testwait.Clock) {
	c := testwait.NewClock(at)
	return st.WithClock(c.Now), c
}

// clockMinute is the minute after the one the database's clock is in: a
// test sets its store's clock within it, ahead of the database's now()
// that the rows it inserts get by default (a job inserted is then ready by
// the store's clock), and near enough for them to be in today's
// partitions.
func clockMinute(t testing.TB, q querier) time.Time {
	t.Helper()
	return scalar[time.Time](t, q, `SELECT date_trunc('minute', now()) + interval '1 minute'`)
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func scalar[T any](t testing.TB, q querier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// partitions returns the names of the partitions of parent, per the
// catalog.
func partitions(t testing.TB, q querier, parent string) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), `
		SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, parent)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func hourly(ts time.Time) string { return "fleet_jobs_completed_p" + ts.UTC().Format("2006010215") }
func daily(ts time.Time) string  { return "fleet_jobs_failed_p" + ts.UTC().Format("20060102") }
func metricsDay(ts time.Time) string {
	return "fleet_metrics_p" + ts.UTC().Format("20060102")
}

// partitionOf returns the partition holding the fleet_jobs rows of job id.
func partitionOf(t testing.TB, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	return scalar[string](t, pool, `SELECT string_agg(DISTINCT tableoid::regclass::text, ',') FROM fleet_jobs WHERE job_id = $1`, id)
}

func TestMigrationCreatesPartitionsAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	// The test database is a copy of a template that may be days old: roll
	// the fleet set back (which must remove all of it) and apply it now.
	steps, err := migrations.Count("fleet")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, url, "fleet", steps); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if n := scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname LIKE 'fleet\_%' AND relname NOT LIKE 'fleet\_schema\_migrations%'`); n != 0 {
		t.Fatalf("%d fleet relations left after down", n)
	}
	// fleet_dispatch is the queue set's (queue migration 6), not the fleet set's.
	if n := scalar[int](t, pool, `SELECT count(*) FROM pg_proc WHERE proname LIKE 'fleet\_%' AND proname <> 'fleet_dispatch'`); n != 0 {
		t.Fatalf("%d fleet functions left after down", n)
	}
	before := scalar[time.Time](t, pool, `SELECT now()`)
	if _, err := migrations.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	completed := partitions(t, pool, "fleet_jobs_completed")
	failed := partitions(t, pool, "fleet_jobs_failed")
	metrics := partitions(t, pool, "fleet_metrics")
	for h := range 49 {
		if ts := before.Add(time.Duration(h) * time.Hour); !slices.Contains(completed, hourly(ts)) {
			t.Errorf("no partition %s after migrate", hourly(ts))
		}
	}
	for d := range 9 {
		ts := before.AddDate(0, 0, d)
		if !slices.Contains(failed, daily(ts)) || !slices.Contains(metrics, metricsDay(ts)) {
			t.Errorf("no partition for day %s after migrate", ts.UTC().Format(time.DateOnly))
		}
	}
	for parent, names := range map[string][]string{"fleet_jobs_completed": completed, "fleet_jobs_failed": failed, "fleet_metrics": metrics} {
		if !slices.Contains(names, parent+"_default") {
			t.Errorf("%s has no default partition", parent)
		}
	}
	if len(completed) != 51 || len(failed) != 11 || len(metrics) != 11 {
		t.Errorf("%d, %d, %d partitions; want the hour and day before, 48 hours and 8 days ahead, and the defaults",
			len(completed), len(failed), len(metrics))
	}
	// Ensuring again for the same instant creates nothing.
	at := scalar[time.Time](t, pool, `SELECT now()`)
	scalar[int](t, pool, `SELECT fleet_partitions_ensure($1, 48, 8)`, at)
	if n := scalar[int](t, pool, `SELECT fleet_partitions_ensure($1, 48, 8)`, at); n != 0 {
		t.Fatalf("a second ensure created %d partitions", n)
	}
}

func TestPartitionsAreUTC(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Nepal is 5:45 ahead of UTC; the DateStyle changes how bounds print.
	if _, err := tx.Exec(ctx, `SET LOCAL TimeZone = 'Asia/Kathmandu'; SET LOCAL DateStyle = 'SQL, DMY'`); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, tx, `SELECT fleet_partitions_ensure('2001-03-01 23:30:00+00', 1, 1)`); n != 9 {
		t.Fatalf("created %d partitions, want 3 hours + 3 days + 3 days", n)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms) VALUES
			(1, 'q', 'n', 1, 'completed', '2001-03-01 23:00:00+00', '2001-03-01 23:59:59.999+00', 1),
			(2, 'q', 'n', 1, 'completed', '2001-03-01 23:00:00+00', '2001-03-02 00:00:00+00', 1),
			(3, 'q', 'n', 1, 'failed', '2001-03-01 23:00:00+00', '2001-03-01 23:59:59.999+00', 1),
			(4, 'q', 'n', 1, 'lost', '2001-03-01 23:00:00+00', '2001-03-02 00:00:00+00', 1);
		INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES ('2001-03-01 23:59:00+00', 'queue', 'q')`); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int]string{1: "fleet_jobs_completed_p2001030123", 2: "fleet_jobs_completed_p2001030200",
		3: "fleet_jobs_failed_p20010301", 4: "fleet_jobs_failed_p20010302"} {
		if got := scalar[string](t, tx, `SELECT tableoid::regclass::text FROM fleet_jobs WHERE job_id = $1`, id); got != want {
			t.Errorf("job %d in %s, want %s", id, got, want)
		}
	}
	if got := scalar[string](t, tx, `SELECT tableoid::regclass::text FROM fleet_metrics`); got != "fleet_metrics_p20010301" {
		t.Errorf("metrics row in %s", got)
	}
	// At 01:00 UTC with one hour / one day of retention, the hours ending
	// by 00:00 and the days ending by 1 March 01:00 go.
	if n := scalar[int](t, tx, `SELECT fleet_partitions_trim('2001-03-02 01:00:00+00', 1, 1, 1)`); n != 4 {
		t.Fatalf("trim dropped %d partitions, want 2 hours, 1 failed day, 1 metrics day", n)
	}
	var left []string
	for _, parent := range []string{"fleet_jobs_completed", "fleet_jobs_failed", "fleet_metrics"} {
		for _, name := range partitions(t, tx, parent) {
			if strings.Contains(name, "_p2001") {
				left = append(left, name)
			}
		}
	}
	want := []string{"fleet_jobs_completed_p2001030200", "fleet_jobs_failed_p20010301", "fleet_jobs_failed_p20010302",
		"fleet_metrics_p20010301", "fleet_metrics_p20010302"}
	if !slices.Equal(left, want) {
		t.Fatalf("partitions left %v, want %v", left, want)
	}
	if n := scalar[int](t, tx, `SELECT count(*) FROM fleet_jobs`); n != 3 {
		t.Fatalf("%d history rows left, want 3 (in kept partitions)", n)
	}
}

func TestHistoryLandsInPartitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	st := store.New(pool)
	// The template may predate this hour: make sure partitions are current.
	if _, err := st.PartitionsEnsure(ctx, 48, 8); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	at := map[int64]time.Time{1: now, 2: now.Add(-time.Hour), 3: now.Add(5 * time.Hour), 4: now.Add(47 * time.Hour),
		5: now, 6: now.AddDate(0, 0, 2), 7: now.AddDate(0, 0, -1)}
	status := map[int64]string{1: "completed", 2: "completed", 3: "completed", 4: "completed", 5: "failed", 6: "timed_out", 7: "lost"}
	for id, ts := range at {
		if _, err := pool.Exec(ctx, `
			INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
			VALUES ($1, 'q', 'n', 1, $2, $3::timestamptz - interval '1 second', $3, 1000)`, id, status[id], ts); err != nil {
			t.Fatal(err)
		}
	}
	for id, ts := range at {
		want := daily(ts)
		if id <= 4 {
			want = hourly(ts)
		}
		if got := partitionOf(t, pool, id); got != want {
			t.Errorf("job %d finished %s is in %s, want %s", id, ts.UTC().Format(time.RFC3339), got, want)
		}
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs_completed_default`) + scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs_failed_default`); n != 0 {
		t.Errorf("%d rows in default partitions", n)
	}
}

func TestEnsureMovesDefaultRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	st := store.New(pool)
	if _, err := st.PartitionsEnsure(ctx, 48, 8); err != nil {
		t.Fatal(err)
	}
	// Beyond the partitions made so far: rows wait in the defaults.
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms) VALUES
			(1, 'q', 'n', 1, 'completed', now() + interval '3 days', now() + interval '3 days', 1),
			(2, 'q', 'n', 1, 'failed', now() + interval '10 days', now() + interval '10 days', 1);
		INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES (now() + interval '10 days', 'queue', 'q')`)
	for id, want := range map[int64]string{1: "fleet_jobs_completed_default", 2: "fleet_jobs_failed_default"} {
		if got := partitionOf(t, pool, id); got != want {
			t.Fatalf("job %d in %s before ensure, want %s", id, got, want)
		}
	}
	created, err := st.PartitionsEnsure(ctx, 3*24+1, 10)
	if err != nil || created == 0 {
		t.Fatalf("ensure = %d, %v", created, err)
	}
	in3, in10 := scalar[time.Time](t, pool, `SELECT finished_at FROM fleet_jobs WHERE job_id = 1`), scalar[time.Time](t, pool, `SELECT finished_at FROM fleet_jobs WHERE job_id = 2`)
	if got := partitionOf(t, pool, 1); got != hourly(in3) {
		t.Errorf("completed row in %s, want %s", got, hourly(in3))
	}
	if got := partitionOf(t, pool, 2); got != daily(in10) {
		t.Errorf("failed row in %s, want %s", got, daily(in10))
	}
	if got := scalar[string](t, pool, `SELECT tableoid::regclass::text FROM fleet_metrics`); got != metricsDay(in10) {
		t.Errorf("metrics row in %s, want %s", got, metricsDay(in10))
	}
	if n := scalar[int](t, pool, `SELECT (SELECT count(*) FROM fleet_jobs_completed_default) + (SELECT count(*) FROM fleet_jobs_failed_default) + (SELECT count(*) FROM fleet_metrics_default)`); n != 0 {
		t.Errorf("%d rows left in the defaults", n)
	}
	// The moved-into partitions are full partitions: indexed, constrained.
	if n := scalar[int](t, pool, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, hourly(in3)); n != 3 {
		t.Errorf("%s has %d indexes, want 3", hourly(in3), n)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (3, 'q', 'n', 1, 'bogus', now(), now(), 1)`); err == nil {
		t.Error("a bogus status was accepted")
	}
}

func TestEnsureDrainsOldDefaultRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	st := store.New(pool)
	// Rows written during a long outage, when no partition of their hour or
	// day was made, would sit in the defaults for good, out of reach of
	// trimming. Ensure gives them partitions, and trimming then drops them.
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'q', 'n', 1, CASE WHEN g % 2 = 0 THEN 'completed' ELSE 'failed' END, ts, ts, 1
		FROM generate_series(1, 100) g, LATERAL (SELECT now() - interval '10 days' - g * interval '17 minutes' AS ts) x;
		INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES (now() - interval '40 days', 'queue', 'q')`)
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs WHERE tableoid::regclass::text LIKE '%default'`); n != 100 {
		t.Fatalf("%d rows in the defaults, want 100", n)
	}
	if _, err := st.PartitionsEnsure(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, pool, `SELECT (SELECT count(*) FROM fleet_jobs_completed_default) + (SELECT count(*) FROM fleet_jobs_failed_default) + (SELECT count(*) FROM fleet_metrics_default)`); n != 0 {
		t.Fatalf("%d rows left in the defaults", n)
	}
	if n, err := st.PartitionsEnsure(ctx, 1, 1); err != nil || n != 0 {
		t.Fatalf("second ensure = %d, %v", n, err)
	}
	if _, err := st.PartitionsTrim(ctx, store.TrimParams{CompletedHours: 24, FailedDays: 7, MetricsDays: 30}); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, pool, `SELECT (SELECT count(*) FROM fleet_jobs) + (SELECT count(*) FROM fleet_metrics)`); n != 0 {
		t.Fatalf("%d old rows survived trimming", n)
	}
}

func TestTrimDropsOnlyExpiredPartitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	// Partitions around 2001-01-10 12:00 UTC, one row in each, and one row
	// in each default partition (1990: no partition holds it).
	start := time.Date(2001, 1, 10, 12, 0, 0, 0, time.UTC)
	if n := scalar[int](t, pool, `SELECT fleet_partitions_ensure($1, 24, 3)`, start); n != 26+5+5 {
		t.Fatalf("created %d partitions", n)
	}
	type part struct {
		name   string
		lo, hi time.Time
	}
	var completed, failed, metrics []part
	for h := -1; h <= 24; h++ {
		lo := start.Add(time.Duration(h) * time.Hour)
		completed = append(completed, part{hourly(lo), lo, lo.Add(time.Hour)})
	}
	for d := -1; d <= 3; d++ {
		lo := start.Truncate(24*time.Hour).AddDate(0, 0, d)
		failed = append(failed, part{daily(lo), lo, lo.AddDate(0, 0, 1)})
		metrics = append(metrics, part{metricsDay(lo), lo, lo.AddDate(0, 0, 1)})
	}
	for i, p := range completed {
		exec(t, pool, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
			VALUES ($1, 'q', 'n', 1, 'completed', $2, $2, 1)`, i, p.lo.Add(30*time.Minute))
	}
	for i, p := range failed {
		exec(t, pool, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
			VALUES ($1, 'q', 'n', 1, 'timed_out', $2, $2, 1)`, 100+i, p.lo.Add(12*time.Hour))
		exec(t, pool, `INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES ($1, 'queue', 'q')`, metrics[i].lo.Add(12*time.Hour))
	}
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms) VALUES
			(900, 'q', 'n', 1, 'completed', '1990-01-01', '1990-01-01', 1),
			(901, 'q', 'n', 1, 'failed', '1990-01-01', '1990-01-01', 1);
		INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES ('1990-01-01', 'queue', 'q')`)
	current := func() int {
		return scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname ~ '^fleet_(jobs_completed|jobs_failed|metrics)_p' AND relname !~ '_p2001' AND relkind = 'r'`)
	}
	currentBefore := current()

	at := time.Date(2001, 1, 11, 12, 30, 0, 0, time.UTC)
	retention := map[*[]part]time.Duration{&completed: 6 * time.Hour, &failed: 24 * time.Hour, &metrics: 48 * time.Hour}
	wantDropped, wantRows := 0, 0
	kept := map[string]bool{}
	for parts, keep := range retention {
		for _, p := range *parts {
			if !p.hi.After(at.Add(-keep)) {
				wantDropped++
			} else {
				kept[p.name] = true
				wantRows++
			}
		}
	}
	if n := scalar[int](t, pool, `SELECT fleet_partitions_trim($1, 6, 1, 2)`, at); n != wantDropped {
		t.Fatalf("trim dropped %d partitions, want %d", n, wantDropped)
	}
	for parts := range retention {
		for _, p := range *parts {
			exists := scalar[bool](t, pool, `SELECT to_regclass($1) IS NOT NULL`, p.name)
			if exists != kept[p.name] {
				t.Errorf("partition %s (until %s): exists %v, kept %v", p.name, p.hi.Format(time.RFC3339), exists, kept[p.name])
			}
		}
	}
	if n := scalar[int](t, pool, `SELECT (SELECT count(*) FROM fleet_jobs WHERE finished_at >= '2001-01-01') + (SELECT count(*) FROM fleet_metrics WHERE taken_at >= '2001-01-01')`); n != wantRows {
		t.Errorf("%d rows left in kept partitions, want %d", n, wantRows)
	}
	if n := scalar[int](t, pool, `SELECT (SELECT count(*) FROM fleet_jobs_completed_default) + (SELECT count(*) FROM fleet_jobs_failed_default) + (SELECT count(*) FROM fleet_metrics_default)`); n != 3 {
		t.Errorf("%d rows left in the defaults, want 3", n)
	}
	if n := current(); n != currentBefore {
		t.Errorf("%d current partitions before trimming 2001, %d after", currentBefore, n)
	}
	// Far in the future everything goes but the defaults.
	scalar[int](t, pool, `SELECT fleet_partitions_trim('3000-01-01', 1, 1, 1)`)
	if n := scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname ~ '^fleet_(jobs_completed|jobs_failed|metrics)_p[0-9]+$'`); n != 0 {
		t.Errorf("%d partitions left after trimming everything", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`) + scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics`); n != 3 {
		t.Errorf("%d rows left after trimming everything, want the 3 in the default partitions", n)
	}
	if _, err := store.New(pool).PartitionsTrim(ctx, store.TrimParams{CompletedHours: 0, FailedDays: 7, MetricsDays: 30}); err == nil {
		t.Error("a retention of 0 was accepted")
	}
}

func TestPartitionUpkeepSkipsBusyTables(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	hold := func(table string) pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM `+table); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// Creating completed partitions needs the completed default partition,
	// which a reader holds: ensure makes the others and leaves those.
	tx := hold("fleet_jobs_completed_default")
	began := time.Now()
	n := scalar[int](t, pool, `SELECT fleet_partitions_ensure('2040-06-01 12:00+00', 2, 1)`)
	t.Logf("ensure with a busy default took %s", time.Since(began).Round(time.Millisecond))
	if n != 6 || time.Since(began) > testwait.Hang {
		t.Fatalf("ensure with a busy default created %d partitions in %v, want 6 failed and metrics days", n, time.Since(began))
	}
	_ = tx.Rollback(ctx)
	if n := scalar[int](t, pool, `SELECT fleet_partitions_ensure('2040-06-01 12:00+00', 2, 1)`); n != 4 {
		t.Fatalf("ensure once the default is free created %d partitions, want 4 hours", n)
	}
	// Dropping completed partitions needs their parent, which a reader
	// holds: trim drops the others and leaves those, without failing.
	count := func(re string) int {
		return scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname ~ $1`, re)
	}
	others, completed := count(`^fleet_(jobs_failed|metrics)_p[0-9]+$`), count(`^fleet_jobs_completed_p[0-9]+$`)
	tx = hold("fleet_jobs_completed")
	began = time.Now()
	dropped := scalar[int](t, pool, `SELECT fleet_partitions_trim('2041-01-01', 1, 1, 1)`)
	_ = tx.Rollback(ctx)
	t.Logf("trim with a busy parent took %s", time.Since(began).Round(time.Millisecond))
	if dropped != others || time.Since(began) > testwait.Hang {
		t.Fatalf("trim with a busy parent dropped %d partitions in %v, want the %d failed and metrics ones", dropped, time.Since(began), others)
	}
	if got := count(`^fleet_jobs_completed_p[0-9]+$`); got != completed {
		t.Fatalf("%d completed partitions after a busy trim, want all %d", got, completed)
	}
	if got := scalar[int](t, pool, `SELECT fleet_partitions_trim('2041-01-01', 1, 1, 1)`); got != completed || count(`^fleet_jobs_completed_p[0-9]+$`) != 0 {
		t.Fatalf("trim once free dropped %d partitions, want the %d completed ones", got, completed)
	}
}

func TestTrimDropsManyRowsByPartition(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	fillOldHistory(t, pool, 200_000, 24)
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs_completed_default`); n != 0 {
		t.Fatalf("%d rows in the default partition: they would not go by dropping partitions", n)
	}
	if n := scalar[int](t, pool, `SELECT count(DISTINCT tableoid) FROM fleet_jobs`); n != 24 {
		t.Fatalf("rows spread over %d partitions, want 24", n)
	}
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
	exec(t, pool, `SELECT fleet_partitions_ensure(now() - interval '3 days', $1, 1)`, hours)
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'q', 'n', 1, 'completed', ts, ts, 1
		FROM generate_series(1, $1) g,
		     LATERAL (SELECT date_trunc('hour', now() - interval '3 days') + (g % $2) * interval '1 hour' + interval '1 second' AS ts) x`,
		rows, hours)
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

func TestDutyClaimHasOneWinnerPerPeriod(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	// The store's clock stands still unless the test moves it, so the
	// period is checked at its edges, however slow the machine.
	st, clock := onClock(store.New(pool), clockMinute(t, pool))
	ctx := context.Background()
	const every = 200 * time.Millisecond
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			won, err := st.DutyClaim(ctx, "x", every)
			if err != nil {
				t.Error(err)
			}
			if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d winners, want 1", wins.Load())
	}
	if won, err := st.DutyClaim(ctx, "x", every); err != nil || won {
		t.Fatalf("claim within the period = %v, %v; want false", won, err)
	}
	if won, err := st.DutyClaim(ctx, "y", every); err != nil || !won {
		t.Fatalf("another duty = %v, %v; want its own claim", won, err)
	}
	clock.Advance(every - time.Millisecond)
	if won, err := st.DutyClaim(ctx, "x", every); err != nil || won {
		t.Fatalf("claim 1 ms before the period ends = %v, %v; want false", won, err)
	}
	clock.Advance(time.Millisecond)
	if won, err := st.DutyClaim(ctx, "x", every); err != nil || !won {
		t.Fatalf("claim as the period ends = %v, %v; want true", won, err)
	}
	if won, err := st.DutyClaim(ctx, "x", every); err != nil || won {
		t.Fatalf("claim right after winning again = %v, %v; want false", won, err)
	}
}

func TestMetricsSnapshot(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	// Now is 30 s into a minute, by the store's clock.
	minute := clockMinute(t, pool)
	now := minute.Add(30 * time.Second)
	st, _ := onClock(store.New(pool), now)
	ctx := context.Background()
	tablesCreatedLongAgo(t, pool)
	// mail has two ready jobs (one 5 s old) and a delayed one; slow has a
	// job ready for 90 s and no history.
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, available_at) VALUES
		('mail', 'send', $1), ('mail', 'send', $1::timestamptz - interval '5 seconds'), ('mail', 'send', $1::timestamptz + interval '1 hour'),
		('slow', 'x', $1::timestamptz - interval '90 seconds')`, now)
	// The minute before now: over by the clock, and recent enough for the
	// backlog measured now to count as its own.
	lo := minute.Add(-time.Minute)
	// Ten attempts finished during that minute, runtimes 10..100, the last
	// one failed, plus a lost one; two attempts just outside it.
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', CASE WHEN g <= 5 THEN 'send' ELSE 'bounce' END, 1,
		       CASE WHEN g = 10 THEN 'failed' ELSE 'completed' END, ts, ts, g * 10
		FROM generate_series(1, 10) g, LATERAL (SELECT $1::timestamptz + g * interval '1 second' AS ts) x`, lo)
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms) VALUES
		    (11, 'mail', 'bounce', 1, 'lost', $1::timestamptz, $1::timestamptz + interval '59.999 seconds', 99999),
		    (12, 'mail', 'send', 1, 'completed', $1::timestamptz, $1::timestamptz - interval '1 millisecond', 5000),
		    (13, 'mail', 'send', 1, 'completed', $1::timestamptz, $1::timestamptz + interval '1 minute', 5000)`, lo)
	first, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: lo, Watched: true})
	if err != nil {
		t.Fatal(err)
	}
	// Written again, even with a new queue's backlog since, the minute
	// stays as it was.
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, available_at) VALUES ('late', 'x', $1)`, now)
	second, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: lo, Watched: true})
	if err != nil {
		t.Fatal(err)
	}
	if first != 4 || second != 0 {
		t.Fatalf("snapshots wrote %d then %d rows, want mail, slow, send, bounce then nothing", first, second)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics`); n != 4 {
		t.Fatalf("%d metrics rows, want the minute's 4 only", n)
	}
	rows, err := st.MetricsList(ctx, lo, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]store.MetricsRow{}
	for _, r := range rows {
		if !r.TakenAt.Equal(lo) {
			t.Errorf("row %s:%s taken at %s, want %s", r.Kind, r.Subject, r.TakenAt, lo)
		}
		by[r.Kind+":"+r.Subject] = r
	}
	if len(by) != 4 {
		t.Fatalf("rows %+v", rows)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	mail, slow := by["queue:mail"], by["queue:slow"]
	if mail.Jobs != 11 || mail.Failed != 2 || mail.JobsPerMinute != 11 || !near(mail.RuntimeMeanMs, 55) ||
		!near(mail.RuntimeP50Ms, 55) || !near(mail.RuntimeP95Ms, 95.5) || !near(mail.RuntimeP99Ms, 99.1) {
		t.Errorf("mail = %+v", mail)
	}
	if !mail.BacklogSeen || !slow.BacklogSeen {
		t.Errorf("mail and slow rows of a watched minute: BacklogSeen %v, %v; want true", mail.BacklogSeen, slow.BacklogSeen)
	}
	if mail.Pending != 2 || mail.WaitSecs < 5 || mail.WaitSecs > 60 || mail.ClearSecs == nil || !near(*mail.ClearSecs, 2.0/11*60) {
		t.Errorf("mail backlog = pending %d wait %v clear %v; want 2 ready, the oldest 5 s, cleared in %v s",
			mail.Pending, mail.WaitSecs, mail.ClearSecs, 2.0/11*60)
	}
	if send := by["job:send"]; send.Jobs != 5 || send.Failed != 0 || !near(send.RuntimeMeanMs, 30) || !near(send.RuntimeP50Ms, 30) ||
		send.WaitSecs != 0 || send.Pending != 0 {
		t.Errorf("send = %+v", send)
	}
	if bounce := by["job:bounce"]; bounce.Jobs != 6 || bounce.Failed != 2 || !near(bounce.RuntimeMeanMs, 80) || !near(bounce.RuntimeP50Ms, 80) {
		t.Errorf("bounce = %+v (the lost attempt counts, its runtime does not)", bounce)
	}
	if slow.Jobs != 0 || slow.Pending != 1 || slow.WaitSecs < 90 || slow.ClearSecs != nil || slow.RuntimeP50Ms != 0 {
		t.Errorf("slow = %+v (no throughput: clear time unknown)", slow)
	}
}

func TestMetricsSnapshotTakesWholeMinutesThatAreOver(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	// Now is 30 s into a minute, by the store's clock.
	minute := clockMinute(t, pool)
	now := minute.Add(30 * time.Second)
	st, _ := onClock(store.New(pool), now)
	ctx := context.Background()
	tablesCreatedLongAgo(t, pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, available_at) VALUES ('mail', 'send', $1)`, now)
	ahead := minute.Add(10 * time.Minute)
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: ahead, Watched: true}); err == nil {
		t.Fatalf("a snapshot of a minute not over wrote %d rows", n)
	}
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: ahead, Partial: true, Watched: true}); err == nil {
		t.Fatalf("a partial snapshot of a minute not begun wrote %d rows", n)
	}
	past := minute.Add(-2 * time.Minute)
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: past.Add(time.Second), Watched: true}); err == nil {
		t.Fatalf("a snapshot of a part minute wrote %d rows", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics`); n != 0 {
		t.Fatalf("%d rows written by refused snapshots", n)
	}
	// Each minute is its own: the two before now, written out of order.
	// The minute before now gets the mail backlog; the one before it ended
	// over BacklogFresh ago, so the backlog measured now is not its own
	// and, with no attempt in it, it stays absent.
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: past.Add(time.Minute), Watched: true}); err != nil || n != 1 {
		t.Fatalf("snapshot of %s = %d, %v; want the mail backlog row", past.Add(time.Minute), n, err)
	}
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: past, Watched: true}); err != nil || n != 0 {
		t.Fatalf("late snapshot of %s = %d, %v; want no row", past, n, err)
	}
	if n := scalar[int](t, pool, `SELECT count(DISTINCT taken_at) FROM fleet_metrics WHERE taken_at IN ($1, $2)`, past, past.Add(time.Minute)); n != 1 {
		t.Fatalf("%d minutes written, want 1", n)
	}
}

// tablesCreatedLongAgo dates the fleet tables' creation an hour back, so
// that the minutes a test snapshots are not before it.
func tablesCreatedLongAgo(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	exec(t, pool, `UPDATE fleet_state SET updated_at = now() - interval '1 hour' WHERE key = 'tables:created'`)
}

// TestMetricsSnapshotNoGhosts: a minute that ended before the fleet tables
// were created is never written, even with attempts dated in it; a minute
// whose writer did not see its end gets its attempts but not the backlog
// of now: its rows say backlog_seen false, and a queue with only a
// backlog gets no row.
func TestMetricsSnapshotNoGhosts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	prev := scalar[time.Time](t, pool, `SELECT date_trunc('minute', now()) - interval '1 minute'`)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, available_at) VALUES ('mail', 'send', now() - interval '30 seconds'), ('idle', 'x', now())`)
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', 'send', 1, 'completed', $1::timestamptz + g * interval '1 second', $1::timestamptz + g * interval '1 second', 10
		FROM generate_series(1, 3) g`, prev)

	// Tables created at the minute's end: the minute is before them.
	exec(t, pool, `UPDATE fleet_state SET updated_at = $1 WHERE key = 'tables:created'`, prev.Add(time.Minute))
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: prev, Watched: true}); err != nil || n != 0 {
		t.Fatalf("snapshot of a minute before the tables = %d, %v; want nothing", n, err)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics`); n != 0 {
		t.Fatalf("%d rows of a minute before the tables", n)
	}

	// Created within the minute: it is written, by a writer that did not
	// see its end.
	exec(t, pool, `UPDATE fleet_state SET updated_at = $1 WHERE key = 'tables:created'`, prev.Add(30*time.Second))
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: prev}); err != nil || n != 2 {
		t.Fatalf("unwatched snapshot = %d, %v; want the mail queue and send job rows", n, err)
	}
	type row struct {
		Kind, Subject string
		Jobs, Pending int64
		Wait          float64
		Clear         *float64
		Seen          bool
	}
	rows, err := pool.Query(ctx, `SELECT kind, subject, jobs, pending, wait_secs, clear_secs, backlog_seen
		FROM fleet_metrics ORDER BY kind, subject`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	want := []row{{"job", "send", 3, 0, 0, nil, false}, {"queue", "mail", 3, 0, 0, nil, false}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rows %+v, want %+v", got, want)
	}
	list, err := st.MetricsList(ctx, prev, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].BacklogSeen || list[1].BacklogSeen {
		t.Errorf("MetricsList = %+v, want two rows with BacklogSeen false", list)
	}
}

// TestMetricsSnapshotPartial: a partial snapshot of the minute in progress
// counts the attempts finished so far and records up to when; a later one
// that covers more replaces it; a whole snapshot is never replaced.
func TestMetricsSnapshotPartial(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	// The store's clock stands 10 s into a minute, and moves a second with
	// each attempt finished: the minute does not end between the two
	// partial snapshots.
	minute := clockMinute(t, pool)
	st, clock := onClock(store.New(pool), minute.Add(10*time.Second))
	ctx := context.Background()
	tablesCreatedLongAgo(t, pool)
	finish := func(id int) {
		exec(t, pool, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
			VALUES ($1, 'mail', 'send', 1, 'completed', $2, $2, 10)`, id, clock.Now())
		clock.Advance(time.Second)
	}
	finish(1)
	partial := store.SnapshotParams{Minute: minute, Partial: true, Watched: true}
	if n, err := st.MetricsSnapshot(ctx, partial); err != nil || n != 2 {
		t.Fatalf("first partial snapshot = %d, %v; want 2 rows", n, err)
	}
	first := scalar[time.Time](t, pool, `SELECT covered_until FROM fleet_metrics WHERE kind = 'queue'`)
	if first.Before(minute) || !first.Before(minute.Add(time.Minute)) {
		t.Fatalf("covered until %s, want within %s's minute", first, minute)
	}
	finish(2)
	finish(3)
	if n, err := st.MetricsSnapshot(ctx, partial); err != nil || n != 2 {
		t.Fatalf("second partial snapshot = %d, %v; want 2 rows", n, err)
	}
	if got := scalar[int](t, pool, `SELECT sum(jobs)::int FROM fleet_metrics WHERE kind = 'queue' AND covered_until > $1`, first); got != 3 {
		t.Fatalf("%d jobs after the second partial snapshot, want 3 (it replaced the first)", got)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics`); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}

	// A minute that is over and written whole is not replaced by a partial
	// snapshot, which is then a whole one that finds it written.
	prev := minute.Add(-time.Minute)
	exec(t, pool, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (9, 'mail', 'send', 1, 'completed', $1, $1, 10)`, prev.Add(time.Second))
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: prev, Watched: true}); err != nil || n != 2 {
		t.Fatalf("whole snapshot = %d, %v; want 2 rows", n, err)
	}
	if n, err := st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: prev, Partial: true, Watched: true}); err != nil || n != 0 {
		t.Fatalf("partial snapshot of a written minute = %d, %v; want nothing", n, err)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics WHERE taken_at = $1 AND covered_until IS NULL`, prev); n != 2 {
		t.Fatalf("%d whole rows of the minute before, want 2", n)
	}
}
