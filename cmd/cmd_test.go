package cmd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgtest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

type result struct {
	code           int
	stdout, stderr string
}

// run executes the app's command line in this process, in dir with only
// env as environment.
func run(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	r := apptest.Run(t, dir, env, args...)
	return result{r.Code, r.Stdout, r.Stderr}
}

func dbEnv(url string) []string { return []string{"APP_DATABASE__URL=" + url} }

func countJobs(t *testing.T, url, table string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t) // already migrated by the harness
	env := dbEnv(url)
	r := run(t, t.TempDir(), env, "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to migrate") {
		t.Fatalf("migrate: %+v", r)
	}
	r = run(t, t.TempDir(), env, "migrate", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "queue  version 10 of 10, clean") || !strings.Contains(r.stdout, "fleet  version 11 of 11, clean") {
		t.Fatalf("status: %+v", r)
	}
	r = run(t, t.TempDir(), env, "migrate", "down", "--set", "fleet", "--steps", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "fleet  version 10 of 11") {
		t.Fatalf("down: %+v", r)
	}
	r = run(t, t.TempDir(), env, "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, "applied 1 migration(s)") {
		t.Fatalf("migrate again: %+v", r)
	}
	r = run(t, t.TempDir(), env, "migrate", "down", "--set", "nope")
	if r.code == 0 || !strings.Contains(r.stderr, `unknown migration set "nope"`) {
		t.Fatalf("bad set: %+v", r)
	}
}

func TestDispatchAndWork(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	r := run(t, dir, env, "dispatch", "--name", "demo.noop", "--count", "2500")
	if r.code != 0 || !strings.Contains(r.stdout, "dispatched 2500 demo.noop job(s)") {
		t.Fatalf("dispatch: %+v", r)
	}
	r = run(t, dir, env, "fleet:work", "--queue", "default", "--concurrency", "16", "--stop-when-empty")
	if r.code != 0 {
		t.Fatalf("work: %+v", r)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Fatalf("%d jobs left", n)
	}
	// Started by hand: no @fleet report lines, whatever stdout is.
	if strings.Contains(r.stdout, "@fleet") {
		t.Fatalf("a hand-run worker wrote report lines:\n%s", r.stdout)
	}
}

func TestHandRunWorkerLogsJobsAtDebugAndReportsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	if r := run(t, dir, dbEnv(url), "dispatch", "--name", "demo.noop", "--count", "4"); r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	r := run(t, dir, append(dbEnv(url), "APP_LOG__LEVEL=debug"), "fleet:work", "--stop-when-empty")
	if r.code != 0 || strings.Contains(r.stdout, "@fleet") {
		t.Fatalf("work: %+v", r)
	}
	if n := strings.Count(r.stderr, `msg="job completed"`); n != 4 {
		t.Fatalf("%d job lines at debug, want 4:\n%s", n, r.stderr)
	}
	// At the default level (info) no line per job.
	if r := run(t, dir, dbEnv(url), "dispatch", "--name", "demo.noop", "--count", "2"); r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	r = run(t, dir, dbEnv(url), "fleet:work", "--stop-when-empty")
	if r.code != 0 || strings.Contains(r.stderr, "job completed") || strings.Contains(r.stdout, "@fleet") {
		t.Fatalf("work at info: %+v", r)
	}
	// --reports (hidden, for tools such as app bench) turns the report
	// lines on without a master.
	if r := run(t, dir, dbEnv(url), "dispatch", "--name", "demo.noop", "--count", "2"); r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	r = run(t, dir, dbEnv(url), "fleet:work", "--stop-when-empty", "--reports")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || !strings.HasPrefix(lines[0], `@fleet {"v":1,"type":"ready"`) ||
		!strings.Contains(lines[len(lines)-1], `"type":"exiting"`) || !strings.Contains(lines[len(lines)-1], `"reason":"empty"`) {
		t.Fatalf("reports: %+v", r)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Fatalf("%d jobs left", n)
	}
}

func TestWorkRefusesBadQueueNames(t *testing.T) {
	t.Parallel()
	env := dbEnv("postgres://postgres@127.0.0.1:1/none") // never reached
	for arg, want := range map[string]string{
		"default,,mail":          "--queue must not be empty",
		"default,ma\til":         "--queue \"ma\\til\" must not contain control characters",
		strings.Repeat("q", 300): "--queue must be at most",
	} {
		r := run(t, t.TempDir(), env, "fleet:work", "--queue", arg)
		if r.code != 2 || !strings.Contains(r.stderr, want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("--queue %q: %+v, want one line with %q", arg, r, want)
		}
	}
}

func TestDispatchRejectsBadInputAndInsertsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	cases := map[string]struct {
		args []string
		want string
	}{
		"bad json":     {[]string{"--name", "x", "--payload", "{nope"}, "--payload is not valid JSON"},
		"unknown flag": {[]string{"--name", "x", "--colour", "red"}, "unknown flag: --colour"},
		"no name":      {[]string{"--count", "3"}, `"name" not set`},
		"bad backoff":  {[]string{"--name", "x", "--backoff", "1,two"}, `--backoff "1,two"`},
		"bad count":    {[]string{"--name", "x", "--count", "0"}, "--count must be at least 1"},
	}
	for name, c := range cases {
		r := run(t, t.TempDir(), env, append([]string{"dispatch"}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: %+v, want one line containing %q", name, r, c.want)
		}
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Fatalf("%d jobs inserted", n)
	}
}

func TestUnreachableDatabaseIsOneLineWithoutPassword(t *testing.T) {
	t.Parallel()
	env := dbEnv("postgres://app:hunter2@127.0.0.1:1/app?connect_timeout=2")
	for _, args := range [][]string{{"migrate"}, {"dispatch", "--name", "x"}, {"fleet:work"}} {
		r := run(t, t.TempDir(), env, args...)
		if r.code == 0 || strings.Contains(r.stderr, "hunter2") || !strings.Contains(r.stderr, "cannot reach database postgres://app:xxxxx@127.0.0.1:1/app") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

func TestBadConfigIsOneClearLine(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ toml, want string }{
		"syntax":      {"[queue]\nworkers = = 3\n", "config/app.toml:2"},
		"unknown key": {"[queue]\nworkrs = 3\n", "workrs"},
		"wrong type":  {"[queue]\nworkers = \"many\"\n", "queue.workers"},
	}
	for name, c := range cases {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config", "app.toml"), []byte(c.toml), 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, dir, dbEnv("postgres://app:hunter2@127.0.0.1:1/app"), "fleet:work")
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "hunter2") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: %+v, want one line containing %q", name, r, c.want)
		}
	}
}

func TestNoDatabaseConfigured(t *testing.T) {
	t.Parallel()
	r := run(t, t.TempDir(), []string{}, "fleet:work")
	if r.code == 0 || !strings.Contains(r.stderr, "database.url is not set") {
		t.Fatalf("%+v", r)
	}
}
