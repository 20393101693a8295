package cmd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// trimOutput is the part of fleet:trim --json the tests read.
type trimOutput struct {
	DryRun  bool   `json:"dry_run"`
	Layout  string `json:"layout"`
	Dropped []struct {
		Table string `json:"table"`
		Name  string `json:"name"`
	} `json:"dropped"`
	FailedJobs int64 `json:"failed_jobs"`
}

// oldHistory adds history rows past the default retention (completed
// attempts of 30 hours ago, a failed one of 9 days ago, a snapshot of 40
// days ago) and recent ones, under job ids from 900000 up.
func oldHistory(t *testing.T, url string) {
	t.Helper()
	sqlExec(t, url, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT 900000 + row_number() OVER (), 'default', 'old', 1, s, now() - ago, now() - ago, 1
		FROM (VALUES ('completed', interval '30 hours'), ('failed', interval '9 days'), ('completed', interval '1 hour')) v (s, ago),
		     generate_series(1, 10)`)
	sqlExec(t, url, `INSERT INTO fleet_metrics (taken_at, kind, subject) VALUES (date_trunc('minute', now() - interval '40 days'), 'queue', 'default')`)
}

// trimJSON runs fleet:trim --json with args.
func trimJSON(t *testing.T, dir string, env []string, args ...string) trimOutput {
	t.Helper()
	r := run(t, dir, env, append([]string{"fleet:trim", "--json"}, args...)...)
	var out trimOutput
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("fleet:trim %v: %+v", args, r)
	}
	return out
}

// TestTimescaleFleet is the whole path on TimescaleDB: migrate makes the
// hypertables with their chunk spans; jobs run through a master; fleet:job,
// the dashboard's API, /metrics, fleet:workload and fleet:metrics read what
// they did; fleet:trim drops the chunks past the retention and keeps the
// recent ones, which fleet:job still reads.
func TestTimescaleFleet(t *testing.T) {
	t.Parallel()
	url := pgtest.TimescaleBareURL(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	env := fleetEnv(url, "APP_FLEET__HTTP__ADDR="+addr)

	r := run(t, dir, env, "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, "history: TimescaleDB hypertables") {
		t.Fatalf("migrate: %+v", r)
	}
	spans := query(t, url, `SELECT count(*) FROM timescaledb_information.dimensions
		WHERE (hypertable_name, column_name, time_interval) IN
		      (('fleet_jobs_completed', 'finished_at', interval '1 hour'), ('fleet_jobs_failed', 'finished_at', interval '1 day'),
		       ('fleet_metrics', 'taken_at', interval '1 day'))`)
	if spans != 3 {
		t.Fatalf("%d of the 3 hypertables with their chunk spans", spans)
	}
	if r := run(t, dir, env, "migrate", "status"); r.code != 0 || !strings.Contains(r.stdout, "history: TimescaleDB hypertables") {
		t.Fatalf("migrate status: %+v", r)
	}

	ok := firstID(t, run(t, dir, env, "dispatch", "--name", "demo.noop", "--count", "20"))
	bad := firstID(t, run(t, dir, env, "dispatch", "--name", "test.echo", "--tries", "2", "--backoff", "0", "--payload", `{"x":1}`))
	tok := run(t, dir, env, "fleet:token", "create", "--name", "ops", "--ability", "view")
	if tok.code != 0 {
		t.Fatalf("token: %+v", tok)
	}
	token := strings.TrimSpace(tok.stdout[strings.LastIndex(strings.TrimSpace(tok.stdout), "\n")+1:])
	master := startApp(t, dir, env, "fleet")
	eventually(t, 30*time.Second, "the jobs to run", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0 && query(t, url, `SELECT count(*) FROM queue_failed_jobs`) == 1
	})
	if c, f := query(t, url, `SELECT count(*) FROM fleet_jobs_completed`), query(t, url, `SELECT count(*) FROM fleet_jobs_failed`); c != 20 || f != 2 {
		t.Fatalf("%d completed and %d failed attempts in the hypertables, want 20 and 2", c, f)
	}

	var s story
	if r := run(t, dir, env, "fleet:job", fmt.Sprint(bad), "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
		t.Fatalf("fleet:job %d: %+v", bad, r)
	}
	if s.State != "failed" || len(s.Attempts) != 2 || s.Attempts[0].Status != "failed" || !strings.Contains(s.Attempts[1].Error, "bad input") || s.Failed == nil {
		t.Fatalf("story of the failing job: %+v", s)
	}
	if r := run(t, dir, env, "fleet:job", fmt.Sprint(ok)); r.code != 0 || !strings.Contains(r.stdout, "completed") {
		t.Fatalf("fleet:job %d: %+v", ok, r)
	}
	eventually(t, 20*time.Second, "the dashboard", func() bool {
		code, _ := httpGet(t, "http://"+addr+"/_fleet/api/overview", token)
		return code == http.StatusOK
	})
	if code, body := httpGet(t, fmt.Sprintf("http://%s/_fleet/api/jobs/%d", addr, bad), token); code != http.StatusOK || strings.Count(body, `"failed"`) < 2 {
		t.Fatalf("the dashboard's story of job %d: %d %s", bad, code, body)
	}
	if code, body := httpGet(t, "http://"+addr+"/_fleet/api/jobs?status=completed", token); code != http.StatusOK || !strings.Contains(body, `"demo.noop"`) {
		t.Fatalf("the dashboard's history: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+addr+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, `fleet_jobs_processed_total{queue="default"} 22`) {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	// The minute in progress, snapshotted as a stopping master does: what
	// fleet:metrics and the balancer's workload read.
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	minute := time.Now().Truncate(time.Minute)
	if n, err := store.New(pool).MetricsSnapshot(t.Context(), store.SnapshotParams{Minute: minute, Partial: true, Watched: true}); err != nil || n == 0 {
		t.Fatalf("snapshot: %d rows, %v", n, err)
	}
	if r := run(t, dir, env, "fleet:metrics", "--subject", "default"); r.code != 0 || !strings.Contains(r.stdout, "default") || strings.Contains(r.stdout, "no snapshots") {
		t.Fatalf("fleet:metrics: %+v", r)
	}
	if r := run(t, dir, env, "fleet:workload"); r.code != 0 {
		t.Fatalf("fleet:workload: %+v", r)
	}
	// The master's own upkeep runs on the hypertables, and fails nowhere.
	eventually(t, 20*time.Second, "the master's history upkeep", func() bool {
		return query(t, url, `SELECT count(*) FROM fleet_duties WHERE duty = 'partitions' AND done_at IS NOT NULL`) > 0
	})
	_ = master.Cmd.Process.Signal(syscall.SIGTERM)
	<-master.Done
	if out := master.Output(); strings.Contains(out, "duty failed") || strings.Contains(out, "level=ERROR") {
		t.Fatalf("the master failed a duty on hypertables:\n%s", out)
	}

	oldHistory(t, url)
	total := query(t, url, `SELECT count(*) FROM fleet_jobs`)
	dry := run(t, dir, env, "fleet:trim", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "history on TimescaleDB hypertables") ||
		strings.Count(dry.stdout, "would drop fleet_") != 3 || !strings.Contains(dry.stdout, "_timescaledb_internal._hyper_") ||
		!strings.Contains(dry.stdout, "dry run: nothing was changed") {
		t.Fatalf("fleet:trim --dry-run: %+v", dry)
	}
	if n := query(t, url, `SELECT count(*) FROM fleet_jobs`); n != total {
		t.Fatalf("the dry run left %d of %d rows", n, total)
	}
	out := trimJSON(t, dir, env)
	if out.DryRun || out.Layout != "hypertables" || len(out.Dropped) != 3 ||
		out.Dropped[0].Table != "fleet_jobs_completed" || out.Dropped[1].Table != "fleet_jobs_failed" || out.Dropped[2].Table != "fleet_metrics" {
		t.Fatalf("fleet:trim: %+v", out)
	}
	if n := query(t, url, `SELECT count(*) FROM fleet_jobs`); n != total-20 {
		t.Fatalf("%d rows left of %d, want all but the 20 expired", n, total)
	}
	if n := query(t, url, `SELECT count(*) FROM fleet_jobs WHERE name = 'old' AND finished_at > now() - interval '2 hours'`); n != 10 {
		t.Fatalf("%d of the 10 recent rows kept", n)
	}
	if r := run(t, dir, env, "fleet:job", fmt.Sprint(bad), "--json"); r.code != 0 || !strings.Contains(r.stdout, "bad input") {
		t.Fatalf("fleet:job after the trim: %+v", r)
	}
	if again := trimJSON(t, dir, env); len(again.Dropped) != 0 {
		t.Fatalf("a second trim dropped %+v", again.Dropped)
	}
}

// TestTrimOnPartitions: fleet:trim on native partitions lists and drops
// the partitions past the retention, keeps the rest, creates the ones
// ahead, and deletes the failed jobs past fleet.trim.failed_days.
func TestTrimOnPartitions(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	env := dbEnv(url)
	// Partitions of the hours and days past the retention, as a database
	// that ran for 10 days has them.
	sqlExec(t, url, `SELECT fleet_partitions_ensure(now() - interval '10 days', 1, 1)`)
	sqlExec(t, url, `SELECT fleet_partitions_ensure(now() - interval '40 days', 1, 1)`)
	sqlExec(t, url, `SELECT fleet_partitions_ensure(now() - interval '30 hours', 1, 1)`)
	oldHistory(t, url)
	sqlExec(t, url, `INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries, error, created_at, failed_at)
		VALUES (1, 'default', 'n', '{}', 1, 1, 'x', now(), now() - interval '8 days'), (2, 'default', 'n', '{}', 1, 1, 'x', now(), now())`)
	dry := trimJSON(t, dir, env, "--dry-run")
	if !dry.DryRun || dry.Layout != "partitions" || len(dry.Dropped) == 0 || dry.FailedJobs != 1 {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, d := range dry.Dropped {
		if strings.HasSuffix(d.Name, "_default") || !strings.HasPrefix(d.Name, d.Table+"_p") {
			t.Fatalf("dry run lists %+v", d)
		}
	}
	if n := query(t, url, `SELECT count(*) FROM fleet_jobs WHERE name = 'old'`); n != 30 {
		t.Fatalf("the dry run left %d of 30 rows", n)
	}
	r := run(t, dir, env, "fleet:trim")
	if r.code != 0 || !strings.Contains(r.stdout, "history on native partitions") ||
		!strings.Contains(r.stdout, fmt.Sprintf("dropped %d partition(s)", len(dry.Dropped))) || !strings.Contains(r.stdout, "deleted 1 failed job(s) older than 7 d") {
		t.Fatalf("fleet:trim: %+v", r)
	}
	if n := query(t, url, `SELECT count(*) FROM fleet_jobs WHERE name = 'old'`); n != 10 {
		t.Fatalf("%d rows left, want the 10 recent ones", n)
	}
	if n := query(t, url, `SELECT count(*) FROM fleet_metrics`); n != 0 {
		t.Fatalf("%d snapshots left, want the one of 40 days ago gone", n)
	}
	if n := query(t, url, `SELECT count(*) FROM queue_failed_jobs`); n != 1 {
		t.Fatalf("%d failed jobs left, want 1", n)
	}
	if again := trimJSON(t, dir, env); len(again.Dropped) != 0 || again.FailedJobs != 0 {
		t.Fatalf("a second trim: %+v", again)
	}
}
