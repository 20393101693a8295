package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// These tests check plans, not timings: they run the store's statements on
// sessions that plan every prepared statement generically
// (plan_cache_mode = force_generic_plan, what PostgreSQL may switch a
// statement cached by pgx to after five executions), then explain the very
// statement text the store sent, prepared in such a session, with EXPLAIN
// (ANALYZE, FORMAT JSON), and count the rows its scans read.

// statement is one statement a pool ran.
type statement struct {
	sql  string
	args []any
}

// recorder is a pgx tracer keeping the statements run through a pool.
type recorder struct {
	mu   sync.Mutex
	sent []statement
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, statement{sql: d.SQL, args: d.Args})
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The statements of a batch (those run with JIT off, see store/jit.go)
// are recorded as each one's result is read: the batch's last statement
// is recorded last.
func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, statement{sql: d.SQL, args: d.Args})
}

func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// last returns the statement run last.
func (r *recorder) last(t testing.TB) statement {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		t.Fatal("no statement was run")
	}
	return r.sent[len(r.sent)-1]
}

// genericDB is a test database with a plain pool for setup, and a store
// whose sessions plan generically and whose statements are recorded.
type genericDB struct {
	pool    *pgxpool.Pool // plain, for setup
	generic *pgxpool.Pool // plan_cache_mode = force_generic_plan, recorded
	st      *store.Store  // on generic
	rec     *recorder
}

func newGenericDB(t *testing.T) *genericDB {
	t.Helper()
	return newGenericDBAt(t, pgtest.URL(t))
}

// newGenericDBAt is newGenericDB on the database of url.
func newGenericDBAt(t *testing.T, url string) *genericDB {
	t.Helper()
	plain, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	cfg.ConnConfig.Tracer = rec
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	cfg.MaxConns = 2
	generic, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(generic.Close)
	return &genericDB{pool: plain, generic: generic, st: store.New(generic), rec: rec}
}

// scans is what the scans of an explained statement read, by table (a
// partition counts for its partitioned table; a TimescaleDB chunk counts
// under its own name, see hypertableScans).
type scans map[string]int64

// of adds up the rows read from the tables named prefix or starting with
// prefix + "_".
func (s scans) of(prefix string) int64 {
	var n int64
	for rel, rows := range s {
		if rel == prefix || strings.HasPrefix(rel, prefix+"_") {
			n += rows
		}
	}
	return n
}

func (s scans) String() string {
	rels := make([]string, 0, len(s))
	for r := range s {
		rels = append(rels, r)
	}
	sort.Strings(rels)
	var b strings.Builder
	for _, r := range rels {
		fmt.Fprintf(&b, "%s=%d ", r, s[r])
	}
	return strings.TrimSpace(b.String())
}

// partitionSuffix names a partition after its table: _pYYYYMMDD[HH], _default.
var partitionSuffix = regexp.MustCompile(`_(p[0-9]{8,10}|default)$`)

// planNode is the part of an EXPLAIN (ANALYZE, FORMAT JSON) node read here.
type planNode struct {
	NodeType       string     `json:"Node Type"`
	Relation       string     `json:"Relation Name"`
	ActualRows     float64    `json:"Actual Rows"`
	ActualLoops    float64    `json:"Actual Loops"`
	RemovedFilter  float64    `json:"Rows Removed by Filter"`
	RemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans          []planNode `json:"Plans"`
}

// explainGeneric prepares st in a session planning generically, runs it
// under EXPLAIN (ANALYZE, FORMAT JSON) with its arguments and returns the
// rows every scan read: the rows it returned plus those its filters
// removed, times its loops. The statement runs in a transaction that is
// rolled back.
func explainGeneric(t *testing.T, db *genericDB, st statement) (scans, string) {
	t.Helper()
	ctx := t.Context()
	conn, err := db.generic.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if mode := scalar[string](t, conn, `SHOW plan_cache_mode`); mode != "force_generic_plan" {
		t.Fatalf("plan_cache_mode = %s", mode)
	}
	// In a transaction rolled back, so that explaining a write undoes it.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	}()
	if _, err := tx.Exec(ctx, `PREPARE explained AS `+st.sql); err != nil {
		t.Fatalf("prepare %s: %v", st.sql, err)
	}
	defer func() {
		if _, err := tx.Exec(context.WithoutCancel(ctx), `DEALLOCATE explained`); err != nil {
			t.Error(err)
		}
	}()
	exec := `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained`
	if n := len(st.args); n > 0 {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = fmt.Sprintf("$%d", i+1)
		}
		exec += "(" + strings.Join(ps, ", ") + ")"
	}
	// The simple protocol puts the arguments in the text as literals: this
	// runs the prepared (generic) plan with the store's values.
	args := append([]any{pgx.QueryExecModeSimpleProtocol}, st.args...)
	var out string
	if err := tx.QueryRow(ctx, exec, args...).Scan(&out); err != nil {
		t.Fatalf("explain %s: %v", st.sql, err)
	}
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc) != 1 {
		t.Fatalf("read plan: %v\n%s", err, out)
	}
	read := scans{}
	var walk func(n planNode)
	walk = func(n planNode) {
		// A custom scan (TimescaleDB's ChunkAppend, HypertableModify) names
		// its hypertable but reads nothing itself: its chunks' scans do.
		if n.Relation != "" && n.NodeType != "Custom Scan" {
			rel := n.Relation
			for partitionSuffix.MatchString(rel) {
				rel = partitionSuffix.ReplaceAllString(rel, "")
			}
			read[rel] += int64((n.ActualRows + n.RemovedFilter + n.RemovedRecheck) * n.ActualLoops)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	return read, out
}

func TestJobListPlansPerFilter(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	const total = 60_000
	// Half the jobs on bulk, half on mail, a few on rare at the end.
	exec(t, db.pool, `
		INSERT INTO queue_jobs (queue, name, payload)
		SELECT CASE WHEN g % 2 = 0 THEN 'bulk' ELSE 'mail' END, 'n', jsonb_build_object('g', g)
		FROM generate_series(1, $1) g`, total)
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'rare', 'n' FROM generate_series(1, 10)`)
	exec(t, db.pool, `ANALYZE queue_jobs`)
	for _, p := range []store.JobListParams{
		{Limit: 50, Offset: 100},
		{Queue: "mail", Limit: 50, Offset: 100},
		{Queue: "bulk", Limit: 50},
	} {
		t.Run(fmt.Sprintf("queue=%q", p.Queue), func(t *testing.T) {
			for range 6 { // as a cached statement would have been by now
				jobs, err := db.st.JobList(t.Context(), p)
				if err != nil {
					t.Fatal(err)
				}
				if len(jobs) != p.Limit || !slices.IsSortedFunc(jobs, func(a, b store.QueuedJob) int { return int(a.ID - b.ID) }) {
					t.Fatalf("%d jobs, want %d in id order", len(jobs), p.Limit)
				}
				for _, j := range jobs {
					if p.Queue != "" && j.Queue != p.Queue {
						t.Fatalf("job %d of queue %s", j.ID, j.Queue)
					}
				}
			}
			read, plan := explainGeneric(t, db, db.rec.last(t))
			// A page of a queue holding half the jobs reads about twice the
			// page; the table holds 60 000.
			if n := read.of("queue_jobs"); n > int64(4*(p.Limit+p.Offset)) {
				t.Fatalf("read %d rows of queue_jobs for a page of %d at %d (%s)\n%s", n, p.Limit, p.Offset, read, plan)
			}
		})
	}
	// A queue holding few of the jobs is listed by id through the table:
	// listing is an operator's command, and an index on (queue, id) would
	// cost every claim of every job an index entry more, so there is none.
}

func TestJobHistoryListPlansPerFilter(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	// 60 000 attempts over the last 50 minutes: 1 in 10 failed, 1 in 50 on
	// mail (half of them failed), 10 on rare, the others on bulk.
	exec(t, db.pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, CASE WHEN g % 100 IN (0, 1) THEN 'mail' WHEN g % 6000 = 3 THEN 'rare' ELSE 'bulk' END, 'n', 1,
		       CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'completed' END, ts, ts, 1
		FROM generate_series(1, 60000) g, LATERAL (SELECT now() - g * interval '50 milliseconds' AS ts) x`)
	exec(t, db.pool, `ANALYZE fleet_jobs`)
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
		t.Run(fmt.Sprintf("status=%q,queue=%q", c.status, c.p.Queue), func(t *testing.T) {
			for range 6 {
				jobs, err := db.st.JobHistoryList(t.Context(), c.status, c.p)
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
			read, plan := explainGeneric(t, db, db.rec.last(t))
			// Merge Append takes a row from each partition it did not prune.
			if n := read.of("fleet_jobs"); n > int64(2*(c.p.Limit+c.p.Offset)+100) {
				t.Fatalf("read %d rows of fleet_jobs for a page of %d at %d (%s)\n%s", n, c.p.Limit, c.p.Offset, read, plan)
			}
		})
	}
	// A generic plan guesses each of the three queues holds a third of the
	// rows; rare's ten must still be found through the queue's index.
	t.Run("rare queue", func(t *testing.T) {
		for range 6 {
			jobs, err := db.st.JobHistoryList(t.Context(), "", store.JobListParams{Queue: "rare", Limit: 50})
			if err != nil || len(jobs) != 10 {
				t.Fatalf("%d attempts of rare, %v; want 10", len(jobs), err)
			}
		}
		if read, plan := explainGeneric(t, db, db.rec.last(t)); read.of("fleet_jobs") > 10 {
			t.Fatalf("read %s for the 10 attempts of rare\n%s", read, plan)
		}
	})
}

func TestFailedJobListPlansPerFilter(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	// 60 000 failed jobs, one a second: half on bulk, the others over ten
	// queues q1, q3 ... q19, and 10 on rare.
	exec(t, db.pool, `
		INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries, error, created_at, failed_at)
		SELECT g, CASE WHEN g % 6000 = 1 THEN 'rare' WHEN g % 2 = 0 THEN 'bulk' ELSE 'q' || (g % 20) END, 'send',
		       jsonb_build_object('g', g), 3, 3, 'boom ' || g, now(), now() - g * interval '1 second'
		FROM generate_series(1, 60000) g`)
	exec(t, db.pool, `ANALYZE queue_failed_jobs`)
	for _, f := range []store.FailedFilter{
		{Limit: 50, Offset: 100},
		{Queue: "bulk", Limit: 50},
		{Search: "BOOM", Limit: 50},
		{Search: "boom", Queue: "bulk", Limit: 50, Offset: 50},
	} {
		t.Run(fmt.Sprintf("search=%q,queue=%q", f.Search, f.Queue), func(t *testing.T) {
			for range 6 {
				jobs, err := db.st.FailedJobList(t.Context(), f)
				if err != nil {
					t.Fatal(err)
				}
				if len(jobs) != f.Limit || !slices.IsSortedFunc(jobs, func(a, b store.FailedJob) int { return b.FailedAt.Compare(a.FailedAt) }) {
					t.Fatalf("%d failed jobs, want %d newest first", len(jobs), f.Limit)
				}
				for _, j := range jobs {
					if f.Queue != "" && j.Queue != f.Queue {
						t.Fatalf("failed job %d of queue %s", j.ID, j.Queue)
					}
				}
			}
			read, plan := explainGeneric(t, db, db.rec.last(t))
			if n := read.of("queue_failed_jobs"); n > int64(2*(f.Limit+f.Offset)+10) {
				t.Fatalf("read %d rows of queue_failed_jobs for a page of %d at %d (%s)\n%s", n, f.Limit, f.Offset, read, plan)
			}
		})
	}
	t.Run("no limit", func(t *testing.T) {
		jobs, err := db.st.FailedJobList(t.Context(), store.FailedFilter{Queue: "rare"})
		if err != nil || len(jobs) != 10 {
			t.Fatalf("%d failed jobs of rare, %v; want all 10", len(jobs), err)
		}
	})
	// Retrying or forgetting the failed jobs of a queue finds them through
	// queue_failed_jobs_queue_idx (a catch-all filter scans the table).
	t.Run("retry all of a queue", func(t *testing.T) {
		if n, err := db.st.FailedJobRetryAll(t.Context(), store.FailedFilter{Queue: "rare"}); err != nil || n != 10 {
			t.Fatalf("retried %d, %v; want the 10 of rare", n, err)
		}
		if read, plan := explainGeneric(t, db, db.rec.last(t)); read.of("queue_failed_jobs") > 20 {
			t.Fatalf("read %s to retry the failed jobs of rare\n%s", read, plan)
		}
	})
	t.Run("forget all of a queue", func(t *testing.T) {
		if n, err := db.st.FailedJobForgetAll(t.Context(), store.FailedFilter{Queue: "q3"}); err != nil || n != 3000 {
			t.Fatalf("forgot %d, %v; want the 3 000 of q3", n, err)
		}
		if read, plan := explainGeneric(t, db, db.rec.last(t)); read.of("queue_failed_jobs") > 20 {
			t.Fatalf("read %s to forget the failed jobs of q3\n%s", read, plan)
		}
	})
	t.Run("rare queue", func(t *testing.T) {
		if _, err := db.st.FailedJobList(t.Context(), store.FailedFilter{Queue: "rare", Limit: 5}); err != nil {
			t.Fatal(err)
		}
		if read, plan := explainGeneric(t, db, db.rec.last(t)); read.of("queue_failed_jobs") > 10 {
			t.Fatalf("read %s for a page of 5 of rare\n%s", read, plan)
		}
	})
}

// Jobs of one queue are listed in the order they run: reserved ones first,
// then by priority and availability; a tag filter keeps the tagged ones.
func TestJobListInRunOrder(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	exec(t, db.pool, `
		INSERT INTO queue_jobs (queue, name, priority, available_at, tags) VALUES
		('q', 'late-low', 5, now() - interval '1 hour', NULL),
		('q', 'due-high', -1, now() - interval '1 minute', ARRAY['t:1']),
		('q', 'delayed-high', -1, now() + interval '1 hour', ARRAY['t:1', 'x']),
		('q', 'due-normal', 0, now() - interval '2 hours', NULL),
		('other', 'elsewhere', -9, now(), ARRAY['t:1'])`)
	exec(t, db.pool, `UPDATE queue_jobs SET reserved_by = 'w', lease = 1 WHERE name = 'late-low'`)
	names := func(p store.JobListParams) []string {
		jobs, err := db.st.JobList(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.Name)
		}
		return out
	}
	if got, want := names(store.JobListParams{Queue: "q", Limit: 10}), []string{"late-low", "due-high", "delayed-high", "due-normal"}; !slices.Equal(got, want) {
		t.Errorf("run order %v, want %v", got, want)
	}
	if got, want := names(store.JobListParams{Queue: "q", Limit: 2, Offset: 1}), []string{"due-high", "delayed-high"}; !slices.Equal(got, want) {
		t.Errorf("second page %v, want %v", got, want)
	}
	if got, want := names(store.JobListParams{Queue: "q", Tag: "t:1", Limit: 10}), []string{"due-high", "delayed-high"}; !slices.Equal(got, want) {
		t.Errorf("tagged t:1 in q %v, want %v", got, want)
	}
	if got, want := names(store.JobListParams{Tag: "t:1", Limit: 10}), []string{"due-high", "delayed-high", "elsewhere"}; !slices.Equal(got, want) {
		t.Errorf("tagged t:1 anywhere %v, want %v", got, want)
	}
}

// TestScrapePlans: the scrape never reads the history, and a master that
// does not hold the exporter lease reads no fleet-wide table at all: its
// statement costs its own row and the lease's.
func TestScrapePlans(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	exec(t, db.pool, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', 'n', 1, 'completed', now(), now() - g * interval '1 second', 10 FROM generate_series(1, 5000) g`)
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q' || (g % 50), 'n' FROM generate_series(1, 2000) g`)
	exec(t, db.pool, `INSERT INTO fleet_counters (queue, shard, processed) SELECT 'q' || g, 0, g FROM generate_series(1, 50) g`)
	exec(t, db.pool, `INSERT INTO fleet_runtime_counters (queue, name, shard, bucket, n, sum_ms)
		SELECT 'q' || (g % 50), 'n', 0, g / 50, 1, 1 FROM generate_series(0, 499) g`)
	exec(t, db.pool, `ANALYZE`)
	as := func(inst string) store.ScrapeAs { return store.ScrapeAs{Instance: inst, Lease: time.Minute} }
	for range 6 { // as a cached statement would have been by now
		if sc, err := db.st.ScrapeReadAs(t.Context(), as("i-holder")); err != nil || !sc.Exporter {
			t.Fatalf("holder: exporter %v, %v", sc.Exporter, err)
		}
	}
	read, plan := explainGeneric(t, db, db.rec.last(t))
	if n := read.of("fleet_jobs"); n != 0 {
		t.Fatalf("the holder's scrape read %d history rows (%s)\n%s", n, read, plan)
	}
	if read.of("fleet_counters") == 0 || read.of("fleet_runtime_counters") == 0 {
		t.Fatalf("the holder's scrape did not read the counters (%s)", read)
	}
	for range 6 {
		if sc, err := db.st.ScrapeReadAs(t.Context(), as("i-other")); err != nil || sc.Exporter {
			t.Fatalf("other: exporter %v, %v", sc.Exporter, err)
		}
	}
	read, plan = explainGeneric(t, db, db.rec.last(t))
	for _, rel := range []string{"fleet_jobs", "fleet_counters", "fleet_runtime_counters", "queue_counts", "queue_jobs"} {
		if n := read.of(rel); n != 0 {
			t.Fatalf("a non-holder's scrape read %d rows of %s (%s)\n%s", n, rel, read, plan)
		}
	}
}

// TestReconcilePlans: a worker's reconcile reads its own reservations and
// releases its phantoms for the cost of its own rows, under a generic
// plan, however long the backlog and however many jobs other workers
// hold: 60,000 ready jobs, 20,000 held by 200 other workers, 8 by this
// one.
func TestReconcilePlans(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 88008)`)
	exec(t, db.pool, `UPDATE queue_jobs SET reserved_by = 'w' || (id % 200), lease = id, reserved_at = now(), attempts = 1
		WHERE id <= 20000`)
	exec(t, db.pool, `UPDATE queue_jobs SET reserved_by = 'me', lease = id, reserved_at = now(), attempts = 1
		WHERE id > 88000`)
	exec(t, db.pool, `ANALYZE queue_jobs`)
	var mine []store.Lease
	for range 6 { // as a cached statement would have been by now
		var err error
		if mine, err = db.st.JobReservedBy(t.Context(), "me"); err != nil || len(mine) != 8 {
			t.Fatalf("reserved by me: %d, %v; want 8", len(mine), err)
		}
	}
	read, plan := explainGeneric(t, db, db.rec.last(t))
	if n := read.of("queue_jobs"); n > 8 {
		t.Fatalf("read %d rows of queue_jobs for a worker's 8 reservations (%s)\n%s", n, read, plan)
	}

	if lost, err := db.st.JobReleaseUnheld(t.Context(), "me", mine[:2]); err != nil || lost.Released != 2 {
		t.Fatalf("release 2 unheld: %+v, %v", lost, err)
	}
	// Explained (and rolled back) on three reservations still there.
	release := db.rec.last(t)
	ids, tokens := make([]int64, 3), make([]int64, 3)
	for i, l := range mine[2:5] {
		ids[i], tokens[i] = l.ID, l.Token
	}
	args := slices.Clone(release.args)
	args[1], args[2] = ids, tokens
	read, plan = explainGeneric(t, db, statement{sql: release.sql, args: args})
	// Each of the statement's steps (lock, release) reads each job once.
	if n := read.of("queue_jobs"); n > 3*4 {
		t.Fatalf("read %d rows of queue_jobs to release 3 unheld jobs (%s)\n%s", n, read, plan)
	}
	if !strings.Contains(plan, `"Actual Rows": 3`) {
		t.Fatalf("the explained release matched no 3 rows: it proves nothing\n%s", plan)
	}
}
