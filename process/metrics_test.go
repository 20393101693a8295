package process

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/metrics"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// scrapeSums GETs base/metrics and returns, per family, the sum of its
// samples (histogram and summary parts aside).
func scrapeSums(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sums := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			rest = line[strings.LastIndexByte(line, '}')+2:]
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sums[name] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

// dbTotals reads what the fleet-wide families should sum to straight from
// the database: pending jobs, attempts and jobs counted, timed attempts, and
// the processes in the reports of the live masters.
func dbTotals(t *testing.T, pool *pgxpool.Pool) map[string]float64 {
	t.Helper()
	var pending, processed, attempts, jobs, timed, procs float64
	err := pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL AND available_at <= now())::float8,
		       (SELECT COALESCE(sum(processed), 0) FROM fleet_counters)::float8,
		       (SELECT COALESCE(sum(completed + attempt_failed + timed_out + lost + cancelled + interrupted), 0) FROM fleet_counters)::float8,
		       (SELECT COALESCE(sum(completed + failed_final + retried + cancelled + requeued + interrupted), 0) FROM fleet_counters)::float8,
		       (SELECT COALESCE(sum(n), 0) FROM fleet_runtime_counters)::float8,
		       (SELECT COALESCE(sum(p.value::numeric), 0) FROM fleet_masters m
		        CROSS JOIN LATERAL jsonb_array_elements(m.report->'supervisors') s
		        CROSS JOIN LATERAL jsonb_each(s.value->'processes') p
		        WHERE m.kind = 'master' AND m.expires_at >= now())::float8`).Scan(&pending, &processed, &attempts, &jobs, &timed, &procs)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]float64{"pending": pending, "processed": processed, "attempts": attempts, "jobs": jobs,
		"timed": timed, "processes": procs}
}

// TestMetricsSumOverMasters runs two real masters (fake children) on one
// database, each behind its own /metrics, and checks that summing a family
// over both scrapes gives the database's figure: the fleet-wide families
// come from the one master holding the exporter lease, fleet_processes
// from each master's own children. When the holder stops and releases the
// lease, the other master's next scrape carries the fleet-wide families.
func TestMetricsSumOverMasters(t *testing.T) {
	pool := pgtest.Pool(t)
	log := slog.New(slog.DiscardHandler)
	mustExec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Jobs of a queue no supervisor works, so they stay pending, and
	// counters as workers would have left them.
	mustExec(`INSERT INTO queue_jobs (queue, name) SELECT 'idle', 'j' FROM generate_series(1, 5)`)
	mustExec(`INSERT INTO fleet_counters (queue, shard, processed, failed, completed, attempt_failed, retried, failed_final) VALUES
		('idle', 0, 30, 2, 28, 2, 1, 1), ('idle', 3, 12, 1, 11, 1, 1, 0), ('mail', 1, 8, 0, 8, 0, 0, 0)`)
	mustExec(`INSERT INTO fleet_runtime_counters (queue, name, shard, bucket, n, sum_ms) VALUES
		('idle', 'j', 0, 3, 20, 900), ('idle', 'j', 4, 3, 19, 800), ('mail', 'm', 1, 6, 8, 2000)`)

	type running struct {
		m    *master.Master
		fake *spawnertest.FakeSpawner
		col  *metrics.Collector
		srv  *httptest.Server
		stop context.CancelFunc
		done chan error
	}
	start := func(name string, procs int) *running {
		sups, err := supervisor.Resolve(supervisor.Options{
			Supervisors: map[string]supervisor.SupervisorOptions{
				"default": {Queues: []string{"default", "mail"}, Balance: "off", MaxProcesses: new(procs)},
			},
			DefaultConcurrency: 1, DefaultQueue: "default",
		})
		if err != nil {
			t.Fatal(err)
		}
		r := &running{fake: spawnertest.NewFakeSpawner(), done: make(chan error, 1)}
		r.m, err = master.New(store.New(pool), sups, master.WithSpawner(r.fake), master.WithSettings(master.Settings{
			Name: name, Tick: 20 * time.Millisecond, TTL: 10 * time.Second, StopTimeout: 5 * time.Second, Logger: log,
		}))
		if err != nil {
			t.Fatal(err)
		}
		r.col = metrics.NewCollector(pool, metrics.Options{
			Logger: log, CacheTTL: time.Nanosecond, Master: r.m.Name(), Instance: r.m.Instance(),
		})
		r.srv = httptest.NewServer(httpMux(r.col, r.m.Readiness, nil))
		t.Cleanup(r.srv.Close)
		ctx, cancel := context.WithCancel(t.Context())
		r.stop = cancel
		go func() {
			_, err := r.m.Run(ctx)
			r.done <- err
		}()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a := start("alpha", 3)
	b := start("beta", 1)

	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	// Wait until both masters' reports carry their processes.
	for dbTotals(t, pool)["processes"] != 4 {
		select {
		case <-wctx.Done():
			t.Fatalf("masters still starting: %v", dbTotals(t, pool))
		case <-time.After(20 * time.Millisecond):
		}
	}

	check := func(when string, exporter string, rs ...*running) {
		t.Helper()
		total := map[string]float64{}
		for _, r := range rs {
			sums := scrapeSums(t, r.srv.URL)
			for k, v := range sums {
				total[k] += v
			}
			want := 0.0
			if r.m.Name() == exporter {
				want = 1
			}
			if sums["fleet_metrics_exporter"] != want {
				t.Errorf("%s: %s fleet_metrics_exporter = %v, want %v", when, r.m.Name(), sums["fleet_metrics_exporter"], want)
			}
		}
		db := dbTotals(t, pool)
		for family, want := range map[string]float64{
			"fleet_metrics_exporter":          1,
			"fleet_processes":                 db["processes"],
			"fleet_jobs_processed_total":      db["processed"],
			"fleet_jobs_failed_total":         3,
			"fleet_attempts_total":            db["attempts"],
			"fleet_jobs_total":                db["jobs"],
			"fleet_job_runtime_seconds_count": db["timed"],
			"fleet_masters":                   float64(len(rs)),
		} {
			if total[family] != want {
				t.Errorf("%s: sum of %s over the masters = %v, want %v", when, family, total[family], want)
			}
		}
		if got := total["fleet_queue_jobs"]; got != db["pending"] {
			t.Errorf("%s: sum of fleet_queue_jobs = %v, want %v (the idle queue's pending jobs)", when, got, db["pending"])
		}
	}
	// alpha's first read takes the lease; beta's finds it held.
	if sums := scrapeSums(t, a.srv.URL); sums["fleet_metrics_exporter"] != 1 {
		t.Fatalf("first scrape of alpha: exporter %v", sums["fleet_metrics_exporter"])
	}
	check("both running", "alpha", a, b)

	// alpha stops and hands the lease over.
	a.stop()
	if err := <-a.done; err != nil {
		t.Fatalf("alpha: %v", err)
	}
	a.done <- nil // for the cleanup
	a.srv.Close()
	if err := a.col.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// alpha's row leaves the fleet (or lingers as draining): compare with
	// what the database holds now.
	mustExec(fmt.Sprintf(`DELETE FROM fleet_masters WHERE instance = '%s'`, a.m.Instance()))
	check("alpha gone", "beta", b)
}
