package metrics

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func mustExec(t *testing.T, pool *pgxpool.Pool, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// seed fills a fresh database with jobs of every state in two queues, a
// drained queue known from its counters, live and expired masters, pause
// switches and recent attempts.
func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	mustExec(t, pool,
		// fleet_counters, in case the migration does not create it yet.
		`CREATE TABLE IF NOT EXISTS fleet_counters (
			queue      text PRIMARY KEY,
			processed  bigint NOT NULL DEFAULT 0,
			failed     bigint NOT NULL DEFAULT 0,
			updated_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO queue_jobs (queue, name, available_at) VALUES
			('mail', 'm', now() - interval '30 seconds'), ('mail', 'm', now() - interval '5 seconds'),
			('mail', 'm', now()), ('mail', 'm', now() + interval '1 hour'),
			('default', 'd', now() - interval '2 seconds'),
			('default', 'd', now() + interval '1 minute'), ('default', 'd', now() + interval '2 minutes')`,
		`INSERT INTO queue_jobs (queue, name, available_at, reserved_by, reserved_master, reserved_at, attempts) VALUES
			('mail', 'm', now() - interval '1 hour', 'w1', 'm1', now(), 1),
			('mail', 'm', now() - interval '1 hour', 'w2', 'm1', now(), 1),
			('default', 'd', now() - interval '1 hour', 'w3', 'm1', now(), 1)`,
		`INSERT INTO fleet_counters (queue, processed, failed, completed, attempt_failed, timed_out, lost, cancelled, retried, failed_final, requeued, interrupted)
		 VALUES ('mail', 42, 3, 36, 1, 1, 1, 1, 2, 0, 1, 2), ('default', 12, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0), ('drained', 7, 1, 6, 1, 0, 0, 0, 0, 1, 0, 0)`,
		`INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
			('i-m1', 'm1', 'h1', 1, 'running', '{"supervisors":[
				{"name":"default","queues":["default","mail"],"balance":"auto","paused":false,"processes":{"default":1,"mail":3}},
				{"name":"batch","queues":["default","mail"],"balance":"off","paused":true,"processes":{"default,mail":2}}]}',
			 now() + interval '1 minute'),
			('i-m2', 'm2', 'h2', 2, 'draining', '{"supervisors":[{"name":"default","queues":["mail"],"processes":{"mail":1}}]}', now() + interval '1 minute'),
			('i-gone', 'gone', 'h3', 3, 'paused', '{"supervisors":[{"name":"default","processes":{"mail":50}}]}', now() - interval '1 second')`,
		`INSERT INTO fleet_state (key) VALUES ('pause:*'), ('pause:supervisor:batch'), ('pause:queue:mail'), ('terminate')`,
		// mail's job m ran 100..1000 ms: 1 at most 100 ms, 4 more at most
		// 500 ms, 5 more at most 1 s; history is not read for runtimes.
		`INSERT INTO fleet_runtime_counters (queue, name, shard, bucket, n, sum_ms) VALUES
			('mail', 'm', 0, 4, 1, 100), ('mail', 'm', 3, 6, 4, 1400), ('mail', 'm', 0, 7, 2, 1300), ('mail', 'm', 9, 7, 3, 2700)`,
		`INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		 VALUES (11, 'default', 'd', 1, 'completed', now(), now(), 5000)`,
	)
}

// clock is a settable Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// countReads wraps the collector's read and returns the number of reads.
func countReads(c *Collector) *atomic.Int64 {
	var n atomic.Int64
	read := c.read
	c.read = func(ctx context.Context) (store.Scrape, error) {
		n.Add(1)
		return read(ctx)
	}
	return &n
}

type fakeBeat struct{}

func (fakeBeat) BeatErrors() uint64 { return 4 }
func (fakeBeat) BeatDurations() (map[float64]uint64, uint64, float64) {
	return map[float64]uint64{0.01: 1, 0.05: 2}, 2, 0.05
}
func (fakeBeat) ViewAge() time.Duration { return 1500 * time.Millisecond }
func (fakeBeat) Duplicates() uint64     { return 1 }

func TestCollectorFamilies(t *testing.T) {
	pool := pgtest.Pool(t)
	seed(t, pool)
	c := NewCollector(pool, Options{Beat: fakeBeat{}, Version: "v1.2.3", LongWait: map[string]int{"mail": 30, "default": 0}})
	reg := prometheus.NewPedanticRegistry() // checks Describe against Collect
	reg.MustRegister(c)

	want := `
# HELP fleet_build_info 1, labelled with the app's version and the Go version it was built with.
# TYPE fleet_build_info gauge
fleet_build_info{go_version="` + runtime.Version() + `",version="v1.2.3"} 1
# HELP fleet_jobs_failed_total Attempts (not jobs) of the queue that failed, timed out or were lost.
# TYPE fleet_jobs_failed_total counter
fleet_jobs_failed_total{queue="default"} 0
fleet_jobs_failed_total{queue="drained"} 1
fleet_jobs_failed_total{queue="mail"} 3
# HELP fleet_jobs_processed_total Attempts (not jobs) of the queue processed: every attempt but snoozed ones. See fleet_attempts_total and fleet_jobs_total.
# TYPE fleet_jobs_processed_total counter
fleet_jobs_processed_total{queue="default"} 12
fleet_jobs_processed_total{queue="drained"} 7
fleet_jobs_processed_total{queue="mail"} 42
# HELP fleet_attempts_total Attempts of the queue by outcome: completed, failed, timed_out, lost (its worker died), cancelled, or interrupted (its worker stopped it as it exited).
# TYPE fleet_attempts_total counter
fleet_attempts_total{outcome="cancelled",queue="default"} 0
fleet_attempts_total{outcome="cancelled",queue="drained"} 0
fleet_attempts_total{outcome="cancelled",queue="mail"} 1
fleet_attempts_total{outcome="completed",queue="default"} 12
fleet_attempts_total{outcome="completed",queue="drained"} 6
fleet_attempts_total{outcome="completed",queue="mail"} 36
fleet_attempts_total{outcome="failed",queue="default"} 0
fleet_attempts_total{outcome="failed",queue="drained"} 1
fleet_attempts_total{outcome="failed",queue="mail"} 1
fleet_attempts_total{outcome="interrupted",queue="default"} 0
fleet_attempts_total{outcome="interrupted",queue="drained"} 0
fleet_attempts_total{outcome="interrupted",queue="mail"} 2
fleet_attempts_total{outcome="lost",queue="default"} 0
fleet_attempts_total{outcome="lost",queue="drained"} 0
fleet_attempts_total{outcome="lost",queue="mail"} 1
fleet_attempts_total{outcome="timed_out",queue="default"} 0
fleet_attempts_total{outcome="timed_out",queue="drained"} 0
fleet_attempts_total{outcome="timed_out",queue="mail"} 1
# HELP fleet_jobs_total Jobs of the queue by what their attempt made of them: completed, failed (for good: moved to failed jobs), retried (to run again after a failed or timed out attempt), cancelled, lost (to run again after its worker died), or interrupted (to run again after its worker stopped it as it exited, no try spent).
# TYPE fleet_jobs_total counter
fleet_jobs_total{outcome="cancelled",queue="default"} 0
fleet_jobs_total{outcome="cancelled",queue="drained"} 0
fleet_jobs_total{outcome="cancelled",queue="mail"} 1
fleet_jobs_total{outcome="completed",queue="default"} 12
fleet_jobs_total{outcome="completed",queue="drained"} 6
fleet_jobs_total{outcome="completed",queue="mail"} 36
fleet_jobs_total{outcome="failed",queue="default"} 0
fleet_jobs_total{outcome="failed",queue="drained"} 1
fleet_jobs_total{outcome="failed",queue="mail"} 0
fleet_jobs_total{outcome="interrupted",queue="default"} 0
fleet_jobs_total{outcome="interrupted",queue="drained"} 0
fleet_jobs_total{outcome="interrupted",queue="mail"} 2
fleet_jobs_total{outcome="lost",queue="default"} 0
fleet_jobs_total{outcome="lost",queue="drained"} 0
fleet_jobs_total{outcome="lost",queue="mail"} 1
fleet_jobs_total{outcome="retried",queue="default"} 0
fleet_jobs_total{outcome="retried",queue="drained"} 0
fleet_jobs_total{outcome="retried",queue="mail"} 2
# HELP fleet_master_beat_duration_seconds How long the beats of this master took.
# TYPE fleet_master_beat_duration_seconds histogram
fleet_master_beat_duration_seconds_bucket{le="0.01"} 1
fleet_master_beat_duration_seconds_bucket{le="0.05"} 2
fleet_master_beat_duration_seconds_bucket{le="+Inf"} 2
fleet_master_beat_duration_seconds_sum 0.05
fleet_master_beat_duration_seconds_count 2
# HELP fleet_master_beat_errors_total Beats of this master that failed.
# TYPE fleet_master_beat_errors_total counter
fleet_master_beat_errors_total 4
# HELP fleet_masters Masters by liveness on the database clock: online, draining, or offline (expired, not yet deleted).
# TYPE fleet_masters gauge
fleet_masters{state="draining"} 1
fleet_masters{state="offline"} 1
fleet_masters{state="online"} 1
# HELP fleet_paused_all 1 when every supervisor is paused, else 0.
# TYPE fleet_paused_all gauge
fleet_paused_all 1
# HELP fleet_processes Worker processes of a supervisor's group (a queue, or queues joined by commas), summed over the live masters.
# TYPE fleet_processes gauge
fleet_processes{group="default",supervisor="default"} 1
fleet_processes{group="default,mail",supervisor="batch"} 2
fleet_processes{group="mail",supervisor="default"} 4
# HELP fleet_queue_jobs Jobs in the queue by state: pending (ready now), delayed (available later), reserved (held by a worker) or limited (waiting for a slot of their concurrency limit).
# TYPE fleet_queue_jobs gauge
fleet_queue_jobs{queue="default",state="delayed"} 2
fleet_queue_jobs{queue="default",state="limited"} 0
fleet_queue_jobs{queue="default",state="pending"} 1
fleet_queue_jobs{queue="default",state="reserved"} 1
fleet_queue_jobs{queue="drained",state="delayed"} 0
fleet_queue_jobs{queue="drained",state="limited"} 0
fleet_queue_jobs{queue="drained",state="pending"} 0
fleet_queue_jobs{queue="drained",state="reserved"} 0
fleet_queue_jobs{queue="mail",state="delayed"} 1
fleet_queue_jobs{queue="mail",state="limited"} 0
fleet_queue_jobs{queue="mail",state="pending"} 3
fleet_queue_jobs{queue="mail",state="reserved"} 2
# HELP fleet_queue_paused 1 for each queue paused in every supervisor, 0 for the other queues.
# TYPE fleet_queue_paused gauge
fleet_queue_paused{queue="default"} 0
fleet_queue_paused{queue="drained"} 0
fleet_queue_paused{queue="mail"} 1
# HELP fleet_queue_long_wait_threshold_seconds The queue's long-wait threshold (fleet.long_wait): an alert is raised when fleet_queue_oldest_wait_seconds reaches it.
# TYPE fleet_queue_long_wait_threshold_seconds gauge
fleet_queue_long_wait_threshold_seconds{queue="mail"} 30
# HELP fleet_scrape_errors_total Reads of fleet state from the database that failed.
# TYPE fleet_scrape_errors_total counter
fleet_scrape_errors_total 0
# HELP fleet_supervisor_paused 1 for each supervisor paused by name, 0 for the others.
# TYPE fleet_supervisor_paused gauge
fleet_supervisor_paused{supervisor="batch"} 1
fleet_supervisor_paused{supervisor="default"} 0
# HELP fleet_queue_unworked 1 for a queue that masters are live but no supervisor of theirs works (its jobs wait for a master that works it), 0 for the other queues; absent while no master is live.
# TYPE fleet_queue_unworked gauge
fleet_queue_unworked{queue="default"} 0
fleet_queue_unworked{queue="drained"} 1
fleet_queue_unworked{queue="mail"} 0
`
	// The two families with measured values are checked below.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleet_jobs_failed_total", "fleet_jobs_processed_total",
		"fleet_master_beat_duration_seconds", "fleet_master_beat_errors_total",
		"fleet_masters", "fleet_paused_all", "fleet_processes", "fleet_queue_jobs",
		"fleet_queue_paused", "fleet_scrape_errors_total", "fleet_supervisor_paused",
		"fleet_build_info", "fleet_queue_long_wait_threshold_seconds", "fleet_attempts_total", "fleet_jobs_total",
		"fleet_queue_unworked",
	); err != nil {
		t.Error(err)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{} // family -> labels -> value
	for _, f := range families {
		got[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			got[f.GetName()][labelString(m)] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if len(got) != 21 {
		t.Errorf("got %d families, want 21", len(got))
	}
	// Nothing holds back cleanup: the oldest hold shows 0, and no holder.
	if held, ok := got["fleet_cleanup_held_seconds"][""]; !ok || held != 0 || got["fleet_cleanup_holder_seconds"] != nil {
		t.Errorf("fleet_cleanup_held_seconds %v (present %v), holders %v; want 0 and none", held, ok, got["fleet_cleanup_holder_seconds"])
	}
	if got["fleet_master_view_age_seconds"][""] != 1.5 || got["fleet_master_duplicate_names_total"][""] != 1 {
		t.Errorf("view age %v, duplicates %v; want 1.5 and 1", got["fleet_master_view_age_seconds"], got["fleet_master_duplicate_names_total"])
	}
	wait := got["fleet_queue_oldest_wait_seconds"]
	if len(wait) != 3 || wait["queue=drained"] != 0 || !between(wait["queue=mail"], 30, 60) ||
		!between(wait["queue=default"], 2, 32) {
		t.Errorf("fleet_queue_oldest_wait_seconds: got %v, want mail ~30 s, default ~2 s, drained 0", wait)
	}
	var hists []*dto.Metric
	for _, f := range families {
		if f.GetName() == "fleet_job_runtime_seconds" {
			hists = f.GetMetric()
		}
	}
	if len(hists) != 1 || labelString(hists[0]) != "name=m,queue=mail" {
		t.Fatalf("fleet_job_runtime_seconds: %v", hists)
	}
	h := hists[0].GetHistogram()
	cum := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		cum[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if h.GetSampleCount() != 10 || math.Abs(h.GetSampleSum()-5.5) > 1e-9 || cum[0.05] != 0 || cum[0.1] != 1 ||
		cum[0.25] != 1 || cum[0.5] != 5 || cum[1] != 10 || cum[1800] != 10 || len(cum) != len(store.RuntimeBoundsMs) {
		t.Errorf("fleet_job_runtime_seconds{queue=mail,name=m}: count %d, sum %v, buckets %v", h.GetSampleCount(), h.GetSampleSum(), cum)
	}

	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}

func between(v, lo, hi float64) bool { return v >= lo && v <= hi }

func TestCollectorCache(t *testing.T) {
	pool := pgtest.Pool(t)
	seed(t, pool)
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := NewCollector(pool, Options{CacheTTL: 5 * time.Second, Now: clk.Now})
	reads := countReads(c)
	mailPending := func() float64 {
		t.Helper()
		reg := prometheus.NewRegistry()
		reg.MustRegister(c)
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "fleet_queue_jobs" {
				continue
			}
			for _, m := range f.GetMetric() {
				if labelString(m) == "queue=mail,state=pending" {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatal("no fleet_queue_jobs{queue=mail,state=pending}")
		return 0
	}

	if got := mailPending(); got != 3 {
		t.Fatalf("mail pending: got %v, want 3", got)
	}
	mustExec(t, pool, `INSERT INTO queue_jobs (queue, name) VALUES ('mail', 'm')`)
	clk.Add(4 * time.Second)
	if got := mailPending(); got != 3 {
		t.Errorf("within the TTL: mail pending %v, want the cached 3", got)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("two scrapes within the TTL made %d reads, want 1", n)
	}

	clk.Add(time.Second) // 5 s: the read is stale
	if got := mailPending(); got != 4 {
		t.Errorf("after the TTL: mail pending %v, want 4", got)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("a scrape after the TTL made %d reads in all, want 2", n)
	}

	// Concurrent scrapes of a stale cache share one read.
	clk.Add(time.Minute)
	read := c.read
	c.read = func(ctx context.Context) (store.Scrape, error) {
		time.Sleep(50 * time.Millisecond) // let the other scrapes arrive
		return read(ctx)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if n := testutil.CollectAndCount(c, "fleet_queue_jobs"); n != 12 {
				t.Errorf("concurrent scrape: %d fleet_queue_jobs series, want 12", n)
			}
		})
	}
	wg.Wait()
	if n := reads.Load(); n != 3 {
		t.Errorf("8 concurrent scrapes made %d reads, want 1 (3 in all)", n-2)
	}
}

func TestHandler(t *testing.T) {
	pool := pgtest.Pool(t)
	seed(t, pool)
	h := Handler(NewCollector(pool, Options{}))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d\n%s", rec.Code, body)
	}
	for _, want := range []string{
		`fleet_queue_jobs{queue="mail",state="pending"} 3`,
		`fleet_masters{state="online"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "fleet_master_beat") {
		t.Error("beat metrics without Options.Beat")
	}
}

func TestCollectorReadError(t *testing.T) {
	pool := pgtest.Pool(t)
	pool.Close() // every read fails
	var logs bytes.Buffer
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := NewCollector(pool, Options{
		Now:    clk.Now,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})

	want := func(errors int) string {
		return `
# HELP fleet_scrape_errors_total Reads of fleet state from the database that failed.
# TYPE fleet_scrape_errors_total counter
fleet_scrape_errors_total ` + strconv.Itoa(errors) + "\n"
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(1)), "fleet_scrape_errors_total"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(1)), "fleet_scrape_errors_total"); err != nil {
		t.Errorf("within the TTL, the failed read stands: %v", err)
	}
	clk.Add(DefaultCacheTTL)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(2)), "fleet_scrape_errors_total"); err != nil {
		t.Errorf("after the TTL: %v", err)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("a streak of 2 failed reads logged %d errors, want 1:\n%s", n, logs.String())
	}

	// The handler keeps serving.
	rec := httptest.NewRecorder()
	Handler(c).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "fleet_scrape_errors_total 2") {
		t.Errorf("GET /metrics after failed reads: status %d\n%s", rec.Code, rec.Body.String())
	}

	// The beat metrics come from the process and survive a failed read.
	b := NewCollector(pool, Options{Beat: fakeBeat{}, Logger: slog.New(slog.DiscardHandler)})
	if n := testutil.CollectAndCount(b); n != 6 {
		t.Errorf("failed read with Beat: %d metrics, want 6 (scrape errors, build info and four beat metrics)", n)
	}
}

// TestCollectorShowsWhoHoldsBackCleanup holds a transaction open on the
// test database: fleet_cleanup_held_seconds shows how long, and
// fleet_cleanup_holder_seconds the session by pid and application_name
// once it is older than Options.HeldAfter.
func TestCollectorShowsWhoHoldsBackCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "nightly export"
	hold, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close(ctx)
	if _, err := hold.Exec(ctx, `BEGIN; SELECT txid_current()`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(int(hold.PgConn().PID()))
	c := NewCollector(pool, Options{CacheTTL: time.Nanosecond, HeldAfter: 50 * time.Millisecond})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	var oldest float64
	holders := map[string]float64{}
	testwait.Eventually(t, testwait.Hang, "a holder shown", func() bool {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		clear(holders)
		for _, f := range families {
			for _, m := range f.GetMetric() {
				switch f.GetName() {
				case "fleet_cleanup_held_seconds":
					oldest = m.GetGauge().GetValue()
				case "fleet_cleanup_holder_seconds":
					holders[labelString(m)] = m.GetGauge().GetValue()
				}
			}
		}
		return len(holders) > 0
	})
	want := "application_name=nightly export,pid=" + pid
	if age, ok := holders[want]; !ok || len(holders) != 1 || age < 0.05 || oldest < age {
		t.Fatalf("holders %v, oldest %v; want one, %s, at least 50 ms old and no older than the oldest", holders, oldest, want)
	}
}
