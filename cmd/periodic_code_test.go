package cmd_test

// Periodic jobs registered in Go (queue.Registry's Periodic) beside the
// [fleet.periodic.NAME] tables: boot rules, fleet:periodic, and a master
// process dispatching one.

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// runWith executes the app's command line in this process, with the test
// app's handlers and the periodic jobs register adds.
func runWith(t *testing.T, dir string, env []string, register func(jobs *queue.Registry), args ...string) result {
	t.Helper()
	jobs := appJobs()
	register(jobs)
	var out, errb bytes.Buffer
	code := cmd.ExecuteContext(context.Background(), cmd.App{Jobs: jobs, Args: args, Environ: env, Dir: dir, Stdout: &out, Stderr: &errb})
	return result{code, out.String(), errb.String()}
}

// A schedule registered in Go is checked at boot as a table is, its
// error naming it as the code does; a name both declare is refused naming
// both. fleet:periodic refuses the same way.
func TestPeriodicCodeBootRules(t *testing.T) {
	t.Parallel()
	nightly := []string{"APP_FLEET__PERIODIC__NIGHTLY__CRON=0 3 * * *", "APP_FLEET__PERIODIC__NIGHTLY__JOB=demo.noop"}
	cases := map[string]struct {
		register func(jobs *queue.Registry)
		want     string
	}{
		"name in both": {func(jobs *queue.Registry) {
			jobs.Periodic("nightly", "@daily", queue.NewJob("demo.noop", nil))
		}, `periodic schedule "nightly" is declared twice, by fleet.periodic.nightly in the configuration and by Periodic("nightly") in the app's code: rename one`},
		"bad expression": {func(jobs *queue.Registry) {
			jobs.Periodic("hourly", "61 * * * *", queue.NewJob("demo.noop", nil))
		}, `Periodic("hourly"): cron: "61 * * * *": end of range (61) above maximum (59)`},
		"bad time zone": {func(jobs *queue.Registry) {
			jobs.Periodic("hourly", "@hourly", queue.NewJob("demo.noop", nil), queue.PeriodicOpts{Timezone: "Europe/Berln"})
		}, `Periodic("hourly"): PeriodicOpts.Timezone: unknown time zone "Europe/Berln"`},
		"unregistered job": {func(jobs *queue.Registry) {
			jobs.Periodic("hourly", "@hourly", queue.NewJob("reports.hourly", nil))
		}, `Periodic("hourly"): no handler is registered for job "reports.hourly"`},
		"unique job": {func(jobs *queue.Registry) {
			jobs.Periodic("hourly", "@hourly", queue.NewJob("demo.noop", nil).Unique(queue.Unique{ByArgs: true}))
		}, `Periodic("hourly"): job "demo.noop" is Unique, which a periodic job cannot be`},
		"payload over the config's bound": {func(jobs *queue.Registry) {
			jobs.Periodic("hourly", "@hourly", queue.NewJob("demo.noop", map[string]string{"pad": strings.Repeat("x", 200)}))
		}, `Periodic("hourly"): invalid job: job "demo.noop": payload is 210 bytes, more than the 128 allowed`},
	}
	env := append(dbEnv("postgres://app:hunter2@127.0.0.1:1/app"), append(slices.Clone(nightly), "APP_QUEUE__MAX_PAYLOAD_BYTES=128")...)
	for name, c := range cases {
		for _, command := range []string{"fleet", "fleet:periodic"} {
			r := runWith(t, t.TempDir(), env, c.register, command)
			if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%s, %s: %+v, want one line holding %q", name, command, r, c.want)
			}
		}
	}
	// Good schedules of both kinds pass the checks: the boot gets as far
	// as the (unreachable) database.
	r := runWith(t, t.TempDir(), env, func(jobs *queue.Registry) {
		jobs.Periodic("hourly", "@hourly", queue.NewJob("demo.noop", nil).Tags("hourly"), queue.PeriodicOpts{Timezone: "Europe/Berlin"})
	}, "fleet")
	if r.code == 0 || !strings.Contains(r.stderr, "cannot reach database") {
		t.Errorf("good schedules: %+v", r)
	}
}

// fleet:periodic lists the schedules of both kinds by name, each with its
// source, then those only the database knows.
func TestPeriodicCommandListsBothKinds(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := append(dbEnv(url), "APP_FLEET__PERIODIC__NIGHTLY__CRON=0 3 * * *", "APP_FLEET__PERIODIC__NIGHTLY__JOB=demo.noop",
		"APP_FLEET__PERIODIC__NIGHTLY__TIMEZONE=Europe/Berlin")
	register := func(jobs *queue.Registry) {
		jobs.Periodic("heartbeat", "@every 30s", queue.NewJob("demo.noop", nil).OnQueue("ops"), queue.PeriodicOpts{CatchUp: queue.CatchUpLast})
	}
	conn := connect(t, url)
	if _, err := conn.Exec(context.Background(), `INSERT INTO fleet_periodic (name, cursor_at) VALUES ('gone', now())`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := runWith(t, dir, env, register, "fleet:periodic")
	if r.code != 0 {
		t.Fatalf("table: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a header and three schedules:\n%s", len(lines), r.stdout)
	}
	for i, want := range [][]string{
		{"NAME", "SOURCE", "CRON"},
		{"heartbeat", "code", "@every 30s", "UTC", "demo.noop", "ops", "last"},
		{"nightly", "config", "0 3 * * *", "Europe/Berlin", "demo.noop", "default", "none"},
		{"gone (not configured)", "-"},
	} {
		at := 0
		for _, w := range want {
			j := strings.Index(lines[i][at:], w)
			if j < 0 {
				t.Errorf("line %d %q: no %q in its place", i+1, lines[i], w)
				break
			}
			at += j + len(w)
		}
	}
	r = runWith(t, dir, env, register, "fleet:periodic", "--json")
	if r.code != 0 {
		t.Fatalf("json: %+v", r)
	}
	var v struct {
		Schedules []struct {
			Name       string `json:"name"`
			Configured bool   `json:"configured"`
			Source     string `json:"source"`
			Queue      string `json:"queue"`
			CatchUp    string `json:"catch_up"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	var got []string
	for _, s := range v.Schedules {
		got = append(got, strings.Join([]string{s.Name, s.Source, s.Queue, s.CatchUp}, "/"))
	}
	want := []string{"heartbeat/code/ops/last", "nightly/config/default/none", "gone///"}
	if !slices.Equal(got, want) || !v.Schedules[0].Configured || !v.Schedules[1].Configured || v.Schedules[2].Configured {
		t.Fatalf("schedules %v, want %v:\n%s", got, want, r.stdout)
	}
	if strings.Contains(r.stdout, `"source": ""`) {
		t.Errorf("a schedule not configured has an empty source instead of none:\n%s", r.stdout)
	}
}

// A master process runs a periodic job its app registers in Go: its
// workers run the job of each tick once, with the spec's tags, and each
// run's job is the one recorded with its tick.
func TestFleetRunsPeriodicJobOfCode(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	master := startApp(t, dir, fleetEnv(url, apptest.EnvPeriodicRuns+"="+runs), "fleet")
	eventually(t, 30*time.Second, "three ticks run", func() bool { return len(apptest.ReadRuns(t, runs)) >= 3 })
	if err := master.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-master.Done
	if code := master.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	ran := apptest.ReadRuns(t, runs)
	conn := connect(t, url)
	rows, err := conn.Query(context.Background(), `SELECT job_id, tick FROM fleet_periodic_ticks WHERE name = 'code-tick' ORDER BY tick`)
	if err != nil {
		t.Fatal(err)
	}
	ticks := map[int64]time.Time{}
	var order []time.Time
	for rows.Next() {
		var id int64
		var tick time.Time
		if err := rows.Scan(&id, &tick); err != nil {
			t.Fatal(err)
		}
		ticks[id] = tick
		order = append(order, tick)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(order); i++ {
		if d := order[i].Sub(order[i-1]); d != time.Second {
			t.Fatalf("ticks %v: %s between two, want each second once", order, d)
		}
	}
	for id, n := range ran {
		if _, ok := ticks[id]; !ok || n != 1 {
			t.Errorf("job %d ran %d times; recorded with a tick: %v", id, n, ok)
		}
	}
	var tagged int
	if err := conn.QueryRow(context.Background(), `
		SELECT count(DISTINCT job_id) FROM fleet_jobs WHERE name = 'test.sleep' AND status = 'completed' AND tags = '{periodic}'`).Scan(&tagged); err != nil {
		t.Fatal(err)
	}
	if tagged != len(ran) {
		t.Errorf("%d completed runs tagged periodic in the history, want %d", tagged, len(ran))
	}
}

// connect opens a connection to url, closed at the test's end.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
