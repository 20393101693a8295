package cmd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
)

func query(t *testing.T, url, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// dispatchSleeps dispatches n test.sleep jobs and returns the file their
// runs are recorded in.
func dispatchSleeps(t *testing.T, url, dir string, n, ms int) string {
	t.Helper()
	file := filepath.Join(dir, "runs.txt")
	payload, _ := json.Marshal(map[string]any{"ms": ms, "file": file})
	r := run(t, dir, dbEnv(url), "dispatch", "--name", "test.sleep", "--count", strconv.Itoa(n), "--payload", string(payload))
	if r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	return file
}

// runsOnce checks that each of n jobs completed exactly once.
func runsOnce(t *testing.T, file string, n int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range strings.Fields(string(b)) {
		seen[id]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct jobs completed, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("job %s completed %d times", id, c)
		}
	}
}

func TestFleetReplacesKilledWorker(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	file := dispatchSleeps(t, url, dir, 8, 1500)
	master := startApp(t, dir, fleetEnv(url), "fleet")
	pid := master.Cmd.Process.Pid
	eventually(t, 10*time.Second, "two workers running jobs", func() bool {
		return len(children(pid)) == 2 && query(t, url, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 4
	})
	before := children(pid)
	if err := syscall.Kill(before[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The restart backoff is 1 s plus up to a quarter of jitter; a loaded
	// machine adds the time to start a process.
	eventually(t, 30*time.Second, "a replacement worker", func() bool {
		now := children(pid)
		return len(now) == 2 && !slices.Contains(now, before[0])
	})
	// The backoff's length is the supervisor's unit tests' business; here
	// the replacement must only not wait for the next crash window.
	if d := time.Since(killed); d > 20*time.Second {
		t.Errorf("replacement took %s, want about the 1 s backoff", d)
	}
	eventually(t, 30*time.Second, "every job done", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0
	})
	runsOnce(t, file, 8)
	if err := master.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-master.Done
	if code := master.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	if !strings.Contains(master.Output(), "1 crashed") {
		t.Errorf("summary does not count the crash:\n%s", master.Output())
	}
}

func TestFleetSurvivesKilledMaster(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	file := dispatchSleeps(t, url, dir, 6, 3000)
	first := startApp(t, dir, fleetEnv(url), "fleet")
	pid := first.Cmd.Process.Pid
	eventually(t, 10*time.Second, "workers running jobs", func() bool {
		return len(children(pid)) == 2 && query(t, url, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 4
	})
	workers := children(pid)
	if err := first.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the dead master's workers to die with it", func() bool {
		return !alive(workers[0]) && !alive(workers[1])
	})
	restarted := time.Now()
	second := startApp(t, dir, fleetEnv(url), "fleet")
	// The first master's row expires after its ttl (3 s); then the new
	// master releases its jobs and runs them (3 s each, two rounds).
	eventually(t, 20*time.Second, "every job done", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0
	})
	t.Logf("all jobs done %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	runsOnce(t, file, 6)
	_ = second.Cmd.Process.Signal(syscall.SIGTERM)
	<-second.Done
}

func TestFleetOperatorCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	env := fleetEnv(url)
	r := run(t, dir, env, "fleet:status")
	if r.code != 1 || !strings.Contains(r.stdout, "Inactive") {
		t.Fatalf("status without a master: %+v", r)
	}
	master := startApp(t, dir, env, "fleet")
	eventually(t, 10*time.Second, "the master to report Running", func() bool {
		r := run(t, dir, env, "fleet:status")
		return r.code == 0 && strings.HasPrefix(r.stdout, "Running")
	})
	if r := run(t, dir, env, "fleet:pause"); r.code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	eventually(t, 5*time.Second, "Paused", func() bool {
		return strings.HasPrefix(run(t, dir, env, "fleet:status").stdout, "Paused")
	})
	// Paused has its own exit status, and no error line.
	if r := run(t, dir, env, "fleet:status"); r.code != 6 || !strings.HasPrefix(r.stdout, "Paused") || r.stderr != "" {
		t.Fatalf("status while paused: %+v, want exit 6", r)
	}
	dispatchSleeps(t, url, dir, 3, 10)
	time.Sleep(1500 * time.Millisecond) // a paused fleet must leave them alone this long
	if n := query(t, url, `SELECT count(*) FROM queue_jobs WHERE attempts = 0`); n != 3 {
		t.Fatalf("%d untouched jobs while paused, want 3", n)
	}
	if r := run(t, dir, env, "fleet:continue"); r.code != 0 {
		t.Fatalf("continue: %+v", r)
	}
	eventually(t, 10*time.Second, "the jobs to run after continue", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0
	})
	if r := run(t, dir, env, "fleet:pause", "nope"); r.code != 3 || !strings.Contains(r.stderr, `no supervisor named "nope"`) {
		t.Fatalf("pause of an unknown supervisor: %+v", r)
	}
	if r := run(t, dir, env, "fleet:terminate"); r.code != 0 || !strings.Contains(r.stdout, "asked 1 running master") {
		t.Fatalf("terminate: %+v", r)
	}
	select {
	case <-master.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not terminate")
	}
	if code := master.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("terminated master exited %d", code)
	}
	// A master started after the request keeps running.
	later := startApp(t, dir, env, "fleet")
	eventually(t, 10*time.Second, "the new master to report Running", func() bool {
		return run(t, dir, env, "fleet:status").code == 0
	})
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-later.Done:
		t.Fatalf("a master started after fleet:terminate stopped:\n%s", later.Output())
	default:
	}
}

func TestFleetBootRules(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		env  []string
		want string
	}{
		"auto min × queues > max": {[]string{"APP_FLEET__SUPERVISORS__BIG__QUEUES=a,b,c", "APP_FLEET__SUPERVISORS__BIG__MAX_PROCESSES=2"}, "fleet.supervisors.big"},
		"simple max < queues":     {[]string{"APP_FLEET__SUPERVISORS__S__QUEUES=a,b,c", "APP_FLEET__SUPERVISORS__S__BALANCE=simple", "APP_FLEET__SUPERVISORS__S__MAX_PROCESSES=2"}, "fleet.supervisors.s"},
		"empty queues":            {[]string{"APP_FLEET__SUPERVISORS__E__QUEUES="}, "fleet.supervisors.e.queues"},
		"unknown only":            {[]string{"APP_FLEET__ONLY=exports"}, `fleet.only: no supervisor named "exports"`},
		"memory driver":           {[]string{"APP_QUEUE__DRIVER=memory"}, "queue.driver"},
		// PostgreSQL unreachable when the master starts: one line naming
		// the database (its password hidden), nothing started.
		"database unreachable": {nil, "cannot reach database postgres://app:xxxxx@127.0.0.1:1/app"},
		"beat interval vs ttl": {[]string{"APP_FLEET__MASTER_TTL_SECS=2", "APP_FLEET__BEAT_INTERVAL_MS=1000"}, "fleet.beat_interval_ms: must be below half of fleet.master_ttl_secs"},
		"name with a brace":    {[]string{"APP_FLEET__NAME=web{1}"}, "fleet.name"},
	}
	for name, c := range cases {
		r := run(t, t.TempDir(), append(dbEnv("postgres://app:hunter2@127.0.0.1:1/app"), c.env...), "fleet")
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || strings.Contains(r.stderr, "hunter2") {
			t.Errorf("%s: %+v, want one line naming %q", name, r, c.want)
		}
	}
}

// With a master running that works default only, a dispatch to
// exports is stored but warned about, and fleet:workload marks the queue;
// a dispatch to a worked queue says nothing more.
func TestDispatchToAQueueNoMasterWorksWarns(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	env := fleetEnv(url)
	if r := run(t, dir, env, "dispatch", "--name", "demo.noop", "--queue", "exports"); r.code != 0 || r.stderr != "" {
		t.Fatalf("with no master live, a dispatch is not warned about: %+v", r)
	}
	startApp(t, dir, env, "fleet")
	eventually(t, 10*time.Second, "the master to be live", func() bool {
		return strings.HasPrefix(run(t, dir, env, "fleet:status").stdout, "Running")
	})
	r := run(t, dir, env, "dispatch", "--name", "demo.noop", "--queue", "exports")
	if r.code != 0 || !strings.Contains(r.stderr, `warning: no supervisor of a live master works queue "exports"`) ||
		!strings.Contains(r.stdout, `dispatched 1 demo.noop job(s) to queue "exports"`) {
		t.Fatalf("dispatch to an unworked queue: %+v", r)
	}
	if n := query(t, url, `SELECT count(*) FROM queue_jobs WHERE queue = 'exports'`); n != 2 {
		t.Fatalf("%d jobs on exports, want 2 (a warning still inserts)", n)
	}
	if r := run(t, dir, env, "dispatch", "--name", "demo.noop", "--queue", "default"); r.code != 0 || r.stderr != "" {
		t.Fatalf("dispatch to a worked queue: %+v", r)
	}
	w := run(t, dir, env, "fleet:workload")
	if !strings.Contains(w.stdout, "exports (unworked)") || strings.Contains(w.stdout, "default (unworked)") ||
		!strings.Contains(w.stdout, "unworked: no supervisor of a live master works exports") {
		t.Fatalf("workload:\n%s", w.stdout)
	}
	js := run(t, dir, env, "fleet:workload", "--json")
	if !strings.Contains(js.stdout, `"queue": "exports"`) || !strings.Contains(js.stdout, `"unworked": true`) {
		t.Fatalf("workload --json: %s", js.stdout)
	}
}

// A master name taken from the variable fleet.name_env names is checked as
// fleet.name is: too long or with a newline, the master does not start,
// and the error names the key and the variable, with the value cut.
func TestMasterNameFromTheEnvironmentIsChecked(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	for _, c := range []struct{ value, want string }{
		{strings.Repeat("n", 300), "fleet.name_env: $FLEET_HOST_LABEL must be at most 200 bytes, got 300 bytes"},
		{"web\n1", "fleet.name_env: $FLEET_HOST_LABEL must hold no tab, newline or brace"},
	} {
		r := run(t, t.TempDir(), fleetEnv(url, "APP_FLEET__NAME_ENV=FLEET_HOST_LABEL", "FLEET_HOST_LABEL="+c.value), "fleet")
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, strings.Repeat("n", 100)) {
			t.Errorf("name %.20q: %+v, want a failure saying %q with the value cut", c.value, r, c.want)
		}
	}
}

// Every session of a master and its workers says which process holds it:
// application_name "fleet master NAME" and "fleet:work WORKER-NAME".
func TestSessionsNameTheirProcess(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	startApp(t, dir, fleetEnv(url, "APP_FLEET__NAME=web-1"), "fleet")
	eventually(t, 10*time.Second, "the master's and its two workers' sessions", func() bool {
		return query(t, url, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'fleet master web-1'`) >= 1 &&
			query(t, url, `SELECT count(DISTINCT application_name) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'fleet:work %/work/%'`) == 2
	})
	if n := query(t, url, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'
		AND application_name NOT LIKE 'fleet%' AND pid <> pg_backend_pid()`); n != 0 {
		t.Errorf("%d sessions of the fleet without a name", n)
	}
}
