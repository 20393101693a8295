package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// The tests of the TimescaleDB layout run on pgtest's TimescaleDB cluster
// (a private server preloading the extension); without TimescaleDB
// installed they skip, or fail under CI=true or FLEET_TEST_REQUIRE=all.

// poolAt opens a pool on url, closed when the test ends.
func poolAt(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// chunkSpans returns, per hypertable, the distinct spans of its chunks.
func chunkSpans(t testing.TB, pool *pgxpool.Pool) map[string][]time.Duration {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT hypertable_name::text, EXTRACT(EPOCH FROM range_end - range_start)::bigint
		FROM timescaledb_information.chunks GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]time.Duration{}
	var name string
	var secs int64
	_, err = pgx.ForEachRow(rows, []any{&name, &secs}, func() error {
		out[name] = append(out[name], time.Duration(secs)*time.Second)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTimescaleMigrateMakesHypertables(t *testing.T) {
	t.Parallel()
	pool := poolAt(t, pgtest.TimescaleURL(t))
	st := store.New(pool)
	ctx := t.Context()
	rows, err := pool.Query(ctx, `
		SELECT hypertable_name::text || ' ' || column_name::text || ' ' || time_interval::text
		FROM timescaledb_information.dimensions ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	dims, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fleet_jobs_completed finished_at 01:00:00", "fleet_jobs_failed finished_at 1 day", "fleet_metrics taken_at 1 day"}
	if !slices.Equal(dims, want) {
		t.Fatalf("hypertables %q, want %q", dims, want)
	}
	if l, err := st.HistoryLayout(ctx); err != nil || l.Kind != store.LayoutHypertables || l.Timescale == "" {
		t.Fatalf("layout %+v, %v", l, err)
	}
	if kind := scalar[string](t, pool, `SELECT relkind::text FROM pg_class WHERE oid = 'fleet_jobs'::regclass`); kind != "v" {
		t.Fatalf("fleet_jobs has relkind %s, want a view", kind)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM pg_class WHERE relname ~ '^fleet_(jobs|metrics).*_(p[0-9]+|default)$'`); n != 0 {
		t.Fatalf("%d native partitions beside the hypertables", n)
	}

	// Rows inserted into the view go to the table of their class, into
	// chunks of an hour (completed) or a day (the others, snapshots).
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'q', 'n', 1, s, now(), now() - g * interval '1 hour', 1
		FROM generate_series(1, 3) g, unnest(ARRAY['completed', 'failed', 'lost', 'cancelled', 'interrupted']) s`)
	exec(t, pool, `INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES (date_trunc('minute', now()), 'queue', 'q')`)
	if c, f := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs_completed`), scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs_failed`); c != 3 || f != 12 {
		t.Fatalf("%d completed and %d other rows, want 3 and 12", c, f)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`); n != 3 {
		t.Fatalf("the view shows %d completed attempts, want 3", n)
	}
	spans := chunkSpans(t, pool)
	if !slices.Equal(spans["fleet_jobs_completed"], []time.Duration{time.Hour}) ||
		!slices.Equal(spans["fleet_jobs_failed"], []time.Duration{24 * time.Hour}) ||
		!slices.Equal(spans["fleet_metrics"], []time.Duration{24 * time.Hour}) {
		t.Fatalf("chunk spans %v", spans)
	}
	// Each table keeps to its class.
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (9, 'q', 'n', 1, 'failed', now(), now(), 1)`); err == nil || !strings.Contains(err.Error(), "fleet_jobs_completed_status_check") {
		t.Fatalf("a failed attempt into fleet_jobs_completed: %v", err)
	}
	// Chunks are made as rows arrive: there is nothing to create ahead.
	if n, err := st.PartitionsEnsure(ctx, 48, 8); err != nil || n != 0 {
		t.Fatalf("ensure on hypertables = %d, %v; want 0", n, err)
	}
}

// TestTimescaleInterruptedStatus: on hypertables, migration 11's status
// check holds on both tables: an interrupted attempt is written to
// fleet_jobs_failed, an unknown status is refused; rolled back, the
// interrupted rows go and the status is refused; migrated again, it is
// taken.
func TestTimescaleInterruptedStatus(t *testing.T) {
	t.Parallel()
	url := pgtest.TimescaleURL(t)
	pool := poolAt(t, url)
	ctx := t.Context()
	insert := func(status string) error {
		_, err := pool.Exec(ctx, `INSERT INTO fleet_jobs_failed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
			VALUES (1, 'q', 'n', 1, $1, now(), now(), 1)`, status)
		return err
	}
	if err := insert("interrupted"); err != nil {
		t.Fatalf("an interrupted attempt: %v", err)
	}
	if err := insert("bogus"); err == nil || !strings.Contains(err.Error(), "fleet_jobs_status_check") {
		t.Fatalf("an unknown status: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (1, 'q', 'n', 1, 'interrupted', now(), now(), 1)`); err == nil {
		t.Fatal("an interrupted attempt went into fleet_jobs_completed")
	}
	pool.Reset() // the migration locks the tables: no idle session may hold them
	if err := migrations.Down(ctx, url, "fleet", 1); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); n != 0 {
		t.Fatalf("%d history rows after the rollback, want the interrupted one gone", n)
	}
	if err := insert("interrupted"); err == nil {
		t.Fatal("an interrupted attempt was taken after the rollback")
	}
	pool.Reset()
	if _, err := migrations.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := insert("interrupted"); err != nil {
		t.Fatalf("an interrupted attempt after migrating again: %v", err)
	}
	if l := scalar[string](t, pool, `SELECT fleet_history_layout()`); l != store.LayoutHypertables {
		t.Fatalf("layout %s after the round trip", l)
	}
}

// TestTimescaleTrimDropsExpiredChunks: with completed attempts kept 24
// hours, the others 7 days and snapshots 30 days, the trim drops the chunks
// that ended past those, whole, and keeps the recent ones; a dry run lists
// the same chunks and drops nothing.
func TestTimescaleTrimDropsExpiredChunks(t *testing.T) {
	t.Parallel()
	pool := poolAt(t, pgtest.TimescaleURL(t))
	st := store.New(pool)
	ctx := t.Context()
	// Completed: 30 h and 26 h ago (expired), 2 h ago; others: 9 days
	// (expired) and 2 days ago; snapshots: 40 days (expired) and 1 day ago.
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT row_number() OVER (), 'q', 'n', 1, s, ts, ts, 1
		FROM (VALUES ('completed', interval '30 hours'), ('completed', interval '26 hours'), ('completed', interval '2 hours'),
		             ('failed', interval '9 days'), ('timed_out', interval '2 days')) v (s, ago),
		     LATERAL (SELECT now() - ago AS ts) x, generate_series(1, 100)`)
	exec(t, pool, `
		INSERT INTO fleet_metrics (taken_at, kind, subject)
		SELECT date_trunc('minute', now() - ago), 'queue', 'q' FROM unnest(ARRAY[interval '40 days', interval '1 day']) ago`)
	keep := store.TrimParams{CompletedHours: 24, FailedDays: 7, MetricsDays: 30}
	total := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`)

	dry, err := st.HistoryTrim(ctx, keep, true)
	if err != nil {
		t.Fatal(err)
	}
	tables := func(parts []store.TrimmedPart) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p.Table)
		}
		return out
	}
	if got, want := tables(dry), []string{"fleet_jobs_completed", "fleet_jobs_completed", "fleet_jobs_failed", "fleet_metrics"}; !slices.Equal(got, want) {
		t.Fatalf("dry run lists %v (%+v), want %v", got, dry, want)
	}
	now := scalar[time.Time](t, pool, `SELECT now()`)
	for _, p := range dry {
		cutoff := map[string]time.Duration{"fleet_jobs_completed": 24 * time.Hour, "fleet_jobs_failed": 7 * 24 * time.Hour, "fleet_metrics": 30 * 24 * time.Hour}[p.Table]
		if !strings.HasPrefix(p.Name, "_timescaledb_internal._hyper_") || p.From.IsZero() || !p.From.Before(p.To) ||
			p.To.After(now.Add(-cutoff)) || p.Bytes <= 0 {
			t.Errorf("listed %+v: want a chunk that ended at least %v ago, with its size", p, cutoff)
		}
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); n != total {
		t.Fatalf("a dry run left %d of %d rows", n, total)
	}

	// A writer in the middle of its transaction, as workers always are,
	// does not hold the trim up: it locks the recent chunk, not the old
	// ones (on native partitions a drop waits for the writers of the
	// parent, at most a second).
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(context.Background()) }()
	if _, err := writer.Exec(ctx, `INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (0, 'q', 'n', 1, 'completed', now(), now(), 1)`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	dropped, err := st.HistoryTrim(ctx, keep, false)
	if err != nil {
		t.Fatal(err)
	}
	// The writer rolls back only after the trim returned: a trim that
	// waited for its lock would never return, so this bound only catches
	// that hang.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the trim took %v beside a writer", took)
	}
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	names := func(parts []store.TrimmedPart) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p.Name)
		}
		return out
	}
	if !slices.Equal(names(dropped), names(dry)) {
		t.Fatalf("dropped %v, the dry run listed %v", names(dropped), names(dry))
	}
	left := scalar[string](t, pool, `SELECT string_agg(status || ' ' || (now() - finished_at > interval '1 day')::text || ' ' || n, ', ' ORDER BY status)
		FROM (SELECT status, min(finished_at) AS finished_at, count(*) AS n FROM fleet_jobs GROUP BY status) x`)
	if left != "completed false 100, timed_out true 100" {
		t.Fatalf("left %q: want the 100 completed attempts of 2 hours ago and the 100 others of 2 days ago", left)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics WHERE taken_at > now() - interval '2 days'`); n != 1 || scalar[int](t, pool, `SELECT count(*) FROM fleet_metrics`) != 1 {
		t.Fatal("the snapshot of a day ago should be the only one left")
	}
	for _, name := range names(dropped) {
		if scalar[bool](t, pool, `SELECT to_regclass($1) IS NOT NULL`, name) {
			t.Errorf("chunk %s still exists", name)
		}
	}
	if n, err := st.PartitionsTrim(ctx, keep); err != nil || n != 0 {
		t.Fatalf("trim again = %d, %v; want nothing left to drop", n, err)
	}
}

// TestHistoryTrimListsPartitions is the same trim on native partitions: it
// lists the partitions it drops (or would drop), never a default one.
func TestHistoryTrimListsPartitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := t.Context()
	fillOldHistory(t, pool, 1000, 3)
	// A row in a default partition (no partition for 2001) is not trimmed.
	exec(t, pool, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		VALUES (0, 'q', 'n', 1, 'completed', '2001-01-01', '2001-01-01', 1)`)
	keep := store.TrimParams{CompletedHours: 24, FailedDays: 7, MetricsDays: 30}
	dry, err := st.HistoryTrim(ctx, keep, true)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := st.HistoryLayout(ctx); err != nil || l.Kind != store.LayoutPartitions {
		t.Fatalf("layout %+v, %v", l, err)
	}
	start := scalar[time.Time](t, pool, `SELECT date_trunc('hour', now() - interval '3 days')`)
	var want []string
	for h := range 3 {
		want = append(want, hourly(start.Add(time.Duration(h)*time.Hour)))
	}
	var got []string
	for _, p := range dry {
		if p.Table != "fleet_jobs_completed" {
			continue
		}
		if strings.HasSuffix(p.Name, "_default") || p.To.Sub(p.From) != time.Hour || p.Bytes <= 0 {
			t.Errorf("listed %+v", p)
		}
		got = append(got, p.Name)
	}
	// The three hours holding rows, among the empty partitions that ended
	// before the cutoff, oldest first.
	if !slices.IsSorted(got) || len(slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })) != 0 {
		t.Fatalf("dry run lists %v, want %v among them, in order", got, want)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); n != 1001 {
		t.Fatalf("a dry run left %d rows", n)
	}
	dropped, err := st.HistoryTrim(ctx, keep, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != len(dry) {
		t.Fatalf("dropped %d partitions, the dry run listed %d", len(dropped), len(dry))
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM fleet_jobs`); n != 1 {
		t.Fatalf("%d rows left, want the one in the default partition", n)
	}
	if slices.Contains(partitions(t, pool, "fleet_jobs_completed"), want[0]) {
		t.Fatalf("%s still exists", want[0])
	}
}

// TestTimescaleConvertsAnExistingDatabase: a database migrated on native
// partitions (fleet.timescale off, or TimescaleDB installed later) goes onto
// hypertables at the next migrate with auto, its rows moved, not copied
// beside the old tables; migrating again changes nothing; off takes it back
// to partitions, and so does migrating the fleet set down past version 10.
func TestTimescaleConvertsAnExistingDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.TimescaleBareURL(t)
	up := func(setting string) migrations.UpResult {
		t.Helper()
		res, err := migrations.UpWith(ctx, url, migrations.Options{Timescale: setting})
		if err != nil {
			t.Fatalf("migrate with fleet.timescale = %q: %v", setting, err)
		}
		return res
	}
	if res := up("off"); res.Layout != migrations.LayoutPartitions || res.ConvertedFrom != "" || res.Applied == 0 {
		t.Fatalf("first migrate, off: %+v", res)
	}
	pool := poolAt(t, url)
	// A reader role with a grant on the history: the conversion keeps it.
	role := "fleet_reader_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))[:12]
	exec(t, pool, `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '`+role+`') THEN CREATE ROLE `+role+`; END IF; END $$`)
	exec(t, pool, `GRANT SELECT ON fleet_jobs, fleet_metrics TO `+role)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	exec(t, pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms, tags)
		SELECT g, 'q' || (g % 3), 'n', 1, CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'completed' END, ts, ts, g, ARRAY['t:' || g]
		FROM generate_series(1, 5000) g, LATERAL (SELECT now() - (g % 60) * interval '10 minutes' AS ts) x`)
	exec(t, pool, `INSERT INTO fleet_metrics (taken_at, kind, subject, jobs)
		SELECT date_trunc('minute', now()) - g * interval '1 hour', 'queue', 'q', g FROM generate_series(1, 50) g`)
	fingerprint := func() string {
		return scalar[string](t, pool, `SELECT (SELECT count(*) || '/' || sum(job_id) || '/' || sum(runtime_ms) || '/' || count(DISTINCT tags[1]) FROM fleet_jobs)
			|| ' ' || (SELECT count(*) || '/' || sum(jobs) FROM fleet_metrics)`)
	}
	before := fingerprint()
	nativeParts := `SELECT count(*) FROM pg_class WHERE relname ~ '^fleet_(jobs|metrics).*_(p[0-9]+|default)$'`
	granted := func() bool {
		return scalar[bool](t, pool, `SELECT has_table_privilege($1, 'fleet_jobs', 'SELECT') AND has_table_privilege($1, 'fleet_metrics', 'SELECT')`, role)
	}

	if res := up("auto"); res.Layout != migrations.LayoutHypertables || res.ConvertedFrom != migrations.LayoutPartitions || res.Applied != 0 {
		t.Fatalf("migrate with auto after TimescaleDB came: %+v", res)
	}
	if got := fingerprint(); got != before {
		t.Fatalf("after the conversion the rows are %s, were %s", got, before)
	}
	if n := scalar[int](t, pool, nativeParts); n != 0 {
		t.Fatalf("%d native partitions left beside the hypertables", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM timescaledb_information.hypertables`); n != 3 {
		t.Fatalf("%d hypertables, want 3", n)
	}
	if !granted() || !scalar[bool](t, pool, `SELECT has_table_privilege($1, 'fleet_jobs_failed', 'SELECT')`, role) {
		t.Fatal("the reader lost its grant")
	}
	if res := up("auto"); res.ConvertedFrom != "" || res.Applied != 0 || res.Layout != migrations.LayoutHypertables {
		t.Fatalf("migrate again: %+v, want nothing done", res)
	}
	if got := fingerprint(); got != before {
		t.Fatalf("after migrating again the rows are %s, were %s", got, before)
	}

	if res := up("off"); res.Layout != migrations.LayoutPartitions || res.ConvertedFrom != migrations.LayoutHypertables {
		t.Fatalf("migrate with off: %+v", res)
	}
	if got := fingerprint(); got != before {
		t.Fatalf("back on partitions the rows are %s, were %s", got, before)
	}
	if n := scalar[int](t, pool, `SELECT (SELECT count(*) FROM fleet_jobs_completed_default) + (SELECT count(*) FROM fleet_jobs_failed_default) + (SELECT count(*) FROM fleet_metrics_default)`); n != 0 {
		t.Fatalf("%d rows in default partitions: every hour and day with rows should have its partition", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM timescaledb_information.hypertables`); n != 0 || !granted() {
		t.Fatalf("%d hypertables left, grant kept %v", n, granted())
	}
	if n := scalar[int](t, pool, `SELECT count(DISTINCT tableoid) FROM fleet_jobs WHERE status = 'completed'`); n < 10 {
		t.Fatalf("completed attempts of 10 hours in %d partitions", n)
	}

	// A database at version 9 (before this layout existed) with TimescaleDB
	// installed: migration 10 itself converts it, and the later ones apply.
	past9, err := migrations.Count("fleet")
	if err != nil {
		t.Fatal(err)
	}
	past9 -= 9
	if err := migrations.Down(ctx, url, "fleet", past9); err != nil {
		t.Fatal(err)
	}
	if res := up("auto"); res.ConvertedFrom != migrations.LayoutPartitions || res.Applied != past9 || fingerprint() != before {
		t.Fatalf("migrate up from version 9: %+v, rows %s", res, fingerprint())
	}
	// Down from hypertables: back to version 9's partitions, which its
	// upkeep keeps as it always did.
	if err := migrations.Down(ctx, url, "fleet", past9); err != nil {
		t.Fatal(err)
	}
	if l := scalar[string](t, pool, `SELECT relkind::text FROM pg_class WHERE oid = 'fleet_jobs'::regclass`); l != "p" || fingerprint() != before {
		t.Fatalf("after migrating down: fleet_jobs relkind %s, rows %s (were %s)", l, fingerprint(), before)
	}
	if n := scalar[int](t, pool, `SELECT fleet_partitions_ensure(now(), 48, 8)`); n != 0 {
		t.Fatalf("version 9's upkeep created %d partitions after the down migration, want them all there", n)
	}
}

// lastContaining returns the last statement run whose text holds s.
func (r *recorder) lastContaining(t testing.TB, s string) statement {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.sent) - 1; i >= 0; i-- {
		if strings.Contains(r.sent[i].sql, s) {
			return r.sent[i]
		}
	}
	t.Fatalf("no statement holding %q was run", s)
	return statement{}
}

// hypertableScans folds the scans of TimescaleDB chunks into their
// hypertables, so that read.of("fleet_jobs") counts the rows read from the
// chunks of fleet_jobs_completed and fleet_jobs_failed.
func hypertableScans(t *testing.T, pool *pgxpool.Pool, read scans) scans {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT chunk_name::text, hypertable_name::text FROM timescaledb_information.chunks`)
	if err != nil {
		t.Fatal(err)
	}
	of := map[string]string{}
	var chunk, table string
	if _, err := pgx.ForEachRow(rows, []any{&chunk, &table}, func() error { of[chunk] = table; return nil }); err != nil {
		t.Fatal(err)
	}
	out := scans{}
	for rel, n := range read {
		if table, ok := of[rel]; ok {
			rel = table
		}
		out[rel] += n
	}
	return out
}

// smallChunk is the slack the plan bounds allow for a chunk cut short by
// the edge of the generated range: the planner scans a chunk of up to four or
// five whole rather than probe its index, which is cheaper there, and
// is still far from reading one of the full chunks (5 400 to 6 000 rows).
const smallChunk = 250

// TestTimescaleHistoryPlans runs the statements that read the history and
// the snapshots on hypertables under generic plans, as the native plan
// tests do, and checks that each reads about what it returns: the chunks
// outside a statement's time range or status are excluded when it starts.
func TestTimescaleHistoryPlans(t *testing.T) {
	t.Parallel()
	db := newGenericDBAt(t, pgtest.TimescaleURL(t))
	ctx := t.Context()
	// 60 000 attempts over the last 10 hours (11 completed chunks): 1 in 10
	// failed, 1 in 50 on mail (half of them failed), 10 on rare, the others
	// on bulk; and 30 days of snapshots, a queue row a minute (31 chunks).
	exec(t, db.pool, `
		INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, CASE WHEN g % 100 IN (0, 1) THEN 'mail' WHEN g % 6000 = 3 THEN 'rare' ELSE 'bulk' END, 'n', 1, 'completed', ts, ts, 1
		FROM generate_series(1, 60000) g, LATERAL (SELECT now() - g * interval '600 milliseconds' AS ts) x WHERE g % 10 <> 0`)
	exec(t, db.pool, `
		INSERT INTO fleet_jobs_failed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, CASE WHEN g % 100 IN (0, 1) THEN 'mail' ELSE 'bulk' END, 'n', 1, 'failed', ts, ts, 1
		FROM generate_series(1, 60000) g, LATERAL (SELECT now() - g * interval '600 milliseconds' AS ts) x WHERE g % 10 = 0`)
	exec(t, db.pool, `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, runtime_mean_ms)
		SELECT date_trunc('minute', now()) - g * interval '1 minute', 'queue', 'bulk', 10, 5 FROM generate_series(1, 30 * 24 * 60) g`)
	exec(t, db.pool, `ANALYZE fleet_jobs_completed, fleet_jobs_failed, fleet_metrics`)
	explain := func(t *testing.T) (scans, string) {
		t.Helper()
		read, plan := explainGeneric(t, db, db.rec.last(t))
		return hypertableScans(t, db.pool, read), plan
	}

	for _, c := range []struct {
		status string
		p      store.JobListParams
	}{
		{"completed", store.JobListParams{Limit: 50, Offset: 100}},
		{"completed", store.JobListParams{Queue: "mail", Limit: 50}},
		{"failed", store.JobListParams{Queue: "mail", Limit: 50}},
		{"failed", store.JobListParams{Limit: 50}},
		{"", store.JobListParams{Queue: "mail", Limit: 50, Offset: 50}},
		{"", store.JobListParams{Limit: 50, Offset: 100}},
	} {
		t.Run(fmt.Sprintf("history status=%q,queue=%q", c.status, c.p.Queue), func(t *testing.T) {
			for range 6 { // as a cached statement would have been by now
				jobs, err := db.st.JobHistoryList(ctx, c.status, c.p)
				if err != nil {
					t.Fatal(err)
				}
				if len(jobs) != c.p.Limit || !slices.IsSortedFunc(jobs, func(a, b store.FinishedJob) int { return b.FinishedAt.Compare(a.FinishedAt) }) {
					t.Fatalf("%d attempts, want %d newest first", len(jobs), c.p.Limit)
				}
				for _, j := range jobs {
					if (c.status != "" && j.Status != c.status) || (c.p.Queue != "" && j.Queue != c.p.Queue) {
						t.Fatalf("attempt of job %d: %s on %s", j.JobID, j.Status, j.Queue)
					}
				}
			}
			read, plan := explain(t)
			// Merge Append takes a row from each chunk it did not exclude.
			if n := read.of("fleet_jobs"); n > int64(2*(c.p.Limit+c.p.Offset)+100) {
				t.Fatalf("read %d rows of fleet_jobs for a page of %d at %d (%s)\n%s", n, c.p.Limit, c.p.Offset, read, plan)
			}
		})
	}
	t.Run("history of a rare queue", func(t *testing.T) {
		for range 6 {
			jobs, err := db.st.JobHistoryList(ctx, "", store.JobListParams{Queue: "rare", Limit: 50})
			if err != nil || len(jobs) != 10 {
				t.Fatalf("%d attempts of rare, %v; want 10", len(jobs), err)
			}
		}
		if read, plan := explain(t); read.of("fleet_jobs") > 10+smallChunk {
			t.Fatalf("read %s for the 10 attempts of rare\n%s", read, plan)
		}
	})
	t.Run("a job's attempts", func(t *testing.T) {
		for range 6 {
			if jobs, err := db.st.JobHistoryGet(ctx, 12345); err != nil || len(jobs) != 1 {
				t.Fatalf("attempts of job 12345: %d, %v", len(jobs), err)
			}
		}
		if read, plan := explain(t); read.of("fleet_jobs") > 1+smallChunk {
			t.Fatalf("read %s for a job's one attempt\n%s", read, plan)
		}
		for range 6 {
			if s, err := db.st.JobStoryGet(ctx, store.JobStoryParams{JobID: 12340}); err != nil || len(s.Attempts) != 1 {
				t.Fatalf("story of job 12340: %+v, %v", s, err)
			}
		}
		if read, plan := explain(t); read.of("fleet_jobs") > 1+smallChunk {
			t.Fatalf("the story read %s for a job's one attempt\n%s", read, plan)
		}
	})
	t.Run("metrics of the last hour", func(t *testing.T) {
		// The hour before the newest row: the rows were written one a
		// minute up to the minute they were written in, which a busy
		// machine may have left a few minutes behind by now.
		since := scalar[time.Time](t, db.pool, `SELECT max(taken_at) - interval '59 minutes' FROM fleet_metrics`)
		for range 6 {
			rows, err := db.st.MetricsList(ctx, since, time.Minute)
			if err != nil || len(rows) < 59 || len(rows) > 61 {
				t.Fatalf("%d rows of the last hour, %v", len(rows), err)
			}
		}
		// At most the chunks of the range (two days at a day's turn) are
		// read, out of 31 days.
		if read, plan := explain(t); read.of("fleet_metrics") > 2*24*60 {
			t.Fatalf("read %s for an hour of snapshots out of 30 days\n%s", read, plan)
		}
	})
	t.Run("the balancer's runtimes", func(t *testing.T) {
		for range 6 {
			if rt, err := db.st.QueueRuntimes(ctx); err != nil || len(rt) != 1 {
				t.Fatalf("runtimes %+v, %v", rt, err)
			}
		}
		if read, plan := explain(t); read.of("fleet_metrics") > 6 || read.of("fleet_jobs") != 0 {
			t.Fatalf("QueueRuntimes read %s; want 5 minutes of snapshots\n%s", read, plan)
		}
		for range 6 {
			if _, err := db.st.Workload(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if read, plan := explain(t); read.of("fleet_metrics") > 6 || read.of("fleet_jobs") != 0 {
			t.Fatalf("Workload read %s; want 5 minutes of snapshots\n%s", read, plan)
		}
	})
	t.Run("a minute's snapshot", func(t *testing.T) {
		// The minute 30 minutes back holds 100 attempts (one each 600 ms).
		minute := scalar[time.Time](t, db.pool, `SELECT date_trunc('minute', now()) - interval '30 minutes'`)
		exec(t, db.pool, `DELETE FROM fleet_metrics WHERE taken_at = $1`, minute)
		exec(t, db.pool, `UPDATE fleet_state SET updated_at = now() - interval '1 day' WHERE key = 'tables:created'`)
		if n, err := db.st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: minute}); err != nil || n != 3 {
			t.Fatalf("snapshot = %d rows, %v; want bulk's, mail's and the job name's", n, err)
		}
		read, plan := explainGeneric(t, db, db.rec.lastContaining(t, "INSERT INTO fleet_metrics"))
		if read := hypertableScans(t, db.pool, read); read.of("fleet_jobs") > 110 {
			t.Fatalf("the snapshot of a minute read %s\n%s", read, plan)
		}
	})
}

// BenchmarkTrim1M times the trim of 1 000 000 completed attempts spread
// over 24 hours, whole partitions or chunks, on both layouts on one server
// (pgtest's TimescaleDB cluster: a database migrated with fleet.timescale
// off has native partitions, one with auto hypertables), so that the two
// figures compare. BenchmarkPartitionsTrim1M is the native one on the
// server of the other tests. Run them with
//
//	go test -run '^$' -bench 'Trim1M' -benchtime 5x ./store/
func BenchmarkTrim1M(b *testing.B) {
	for _, layout := range []string{migrations.LayoutPartitions, migrations.LayoutHypertables} {
		b.Run(layout, func(b *testing.B) {
			url := pgtest.TimescaleURL(b)
			if layout == migrations.LayoutPartitions {
				url = pgtest.TimescaleBareURL(b)
				if _, err := migrations.UpWith(b.Context(), url, migrations.Options{Timescale: migrations.TimescaleOff}); err != nil {
					b.Fatal(err)
				}
			}
			pool := poolAt(b, url)
			st := store.New(pool)
			for b.Loop() {
				b.StopTimer()
				if layout == migrations.LayoutPartitions {
					fillOldHistory(b, pool, 1_000_000, 24)
				} else {
					exec(b, pool, `
						INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
						SELECT g, 'q', 'n', 1, 'completed', ts, ts, 1
						FROM generate_series(1, 1000000) g,
						     LATERAL (SELECT date_trunc('hour', now() - interval '3 days') + (g % 24) * interval '1 hour' + interval '1 second' AS ts) x`)
				}
				exec(b, pool, `CHECKPOINT`) // the fill's writes are not the trim's
				b.StartTimer()
				n, err := st.PartitionsTrim(context.Background(), store.TrimParams{CompletedHours: 24, FailedDays: 7, MetricsDays: 30})
				if err != nil || n < 24 {
					b.Fatalf("trim = %d, %v; want the 24 partitions or chunks of the rows at least", n, err)
				}
				b.StopTimer()
				if left := scalar[int](b, pool, `SELECT count(*) FROM fleet_jobs`); left != 0 {
					b.Fatalf("%d rows left", left)
				}
				b.StartTimer()
			}
		})
	}
}
