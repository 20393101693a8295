package cmd_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/pgcluster"
	"github.com/fleet-go/fleet/pgtest"
)

// syncBuffer is a log or output sink safe for concurrent writes.
type syncBuffer = syncbuf.Buffer

// runContext executes the app's command line in dir under ctx, with the
// test binary's application handlers, writing to stdout and stderr.
func runContext(ctx context.Context, dir string, env []string, stdout, stderr *syncBuffer, args ...string) int {
	return cmd.ExecuteContext(ctx, cmd.App{
		Jobs: appJobs(), Args: args, Environ: env, Dir: dir, Stdout: stdout, Stderr: stderr,
	})
}

// traversableDir is a fresh directory that the postgres OS user can enter
// (a private server runs as postgres when the tests run as root, and
// t.TempDir is 0700).
func traversableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleet-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var demoURL = regexp.MustCompile(`private PostgreSQL ready: APP_DATABASE__URL='([^']+)'`)

// TestDemoInterruptStopsTheMasterBeforeThePrivateServer runs the demo on a
// private PostgreSQL with --keep, cancels its context once its master has a
// row, and checks that it stopped cleanly: exit 130, no error line, nothing
// reserved, no row left, the commands to explore printed; then demo --stop
// stops the kept server.
func TestDemoInterruptStopsTheMasterBeforeThePrivateServer(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: the demo on a private PostgreSQL server it starts; runs without -short")
	}
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skipf("no PostgreSQL binaries for a private server: %v", err)
	}
	dir := traversableDir(t)
	// One supervisor that works only the default queue: the mail and slow
	// demo jobs never run, so the demo cannot finish before the interrupt.
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "[fleet.supervisors.only]\nqueues = [\"default\"]\nmax_processes = 1\nconcurrency = 4\n"
	if err := os.WriteFile(filepath.Join(dir, "config", "app.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// The children are this test binary acting as the application.
	env := []string{apptest.EnvAppMode + "=1", "PATH=" + os.Getenv("PATH")}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	codec := make(chan int, 1)
	go func() { codec <- runContext(ctx, dir, env, &stdout, &stderr, "demo", "--keep") }()
	t.Cleanup(func() {
		// However the test ends, no server is left behind.
		_, _ = pgcluster.StopDataDir(context.Background(), filepath.Join(dir, ".fleet", "pgdata"), nil)
	})

	// Wait for the URL, then for the master's row.
	var url string
	eventually(t, 2*time.Minute, "the private server's URL", func() bool {
		if m := demoURL.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			return true
		}
		select {
		case code := <-codec:
			t.Fatalf("demo exited %d before its server was ready:\n%s\n%s", code, stdout.String(), stderr.String())
		default:
		}
		return false
	})
	eventually(t, 2*time.Minute, "a master row", func() bool {
		// Only once the demo has migrated and started its master.
		return strings.Contains(stdout.String(), "starting a fleet master") &&
			query(t, url, "SELECT count(*) FROM fleet_masters WHERE kind = 'master'") > 0
	})
	cancel()
	code := <-codec

	out, errs := stdout.String(), stderr.String()
	if code != cmd.ExitInterrupted {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, cmd.ExitInterrupted, out, errs)
	}
	if strings.Contains(errs, "error:") || strings.Contains(out, "error:") {
		t.Fatalf("an error line after an interrupt:\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
	for _, want := range []string{
		"interrupted: stopping the fleet master",
		"stopped in ",
		"explore what happened, in this directory:",
		"  export APP_CONFIG=.fleet/demo.toml ",
		"  go run ./cmd/app fleet:failed ",
		"go run ./cmd/app fleet:metrics",
		"go run ./cmd/app fleet:job ",
		"kept the private PostgreSQL running",
		"stop it with `go run ./cmd/app demo --stop`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// The kept server answers: the master left, and released what its
	// workers held.
	if n := query(t, url, "SELECT count(*) FROM queue_jobs WHERE reserved_at IS NOT NULL"); n != 0 {
		t.Errorf("%d jobs left reserved", n)
	}
	if n := query(t, url, "SELECT count(*) FROM fleet_masters"); n != 0 {
		t.Errorf("%d rows left in fleet_masters", n)
	}
	if n := query(t, url, "SELECT count(*) FROM queue_jobs WHERE queue IN ('mail', 'slow')"); n == 0 {
		t.Errorf("the mail and slow jobs ran: the demo was not interrupted")
	}
	if _, err := os.Stat(filepath.Join(dir, ".fleet", "demo.json")); err != nil {
		t.Errorf("no state file for the kept server: %v", err)
	}
	if cfg, err := config.Load(config.Options{Dir: dir, Environ: []string{"APP_CONFIG=.fleet/demo.toml"}}); err != nil || cfg.Database.URL != url {
		t.Errorf("the demo's configuration does not name the kept server: %v %+v", err, cfg)
	}

	var stopOut, stopErr syncBuffer
	if code := runContext(context.Background(), dir, env, &stopOut, &stopErr, "demo", "--stop"); code != 0 ||
		!strings.Contains(stopOut.String(), "stopped the demo's private PostgreSQL") {
		t.Fatalf("demo --stop: exit %d\n%s\n%s", code, stopOut.String(), stopErr.String())
	}
	for _, f := range []string{"demo.json", "demo.toml"} {
		if _, err := os.Stat(filepath.Join(dir, ".fleet", f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left after --stop: %v", f, err)
		}
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err == nil {
		conn.Close(context.Background())
		t.Fatal("the kept server still answers after demo --stop")
	}
	stopOut, stopErr = syncBuffer{}, syncBuffer{}
	if code := runContext(context.Background(), dir, env, &stopOut, &stopErr, "demo", "--stop"); code != 0 ||
		!strings.Contains(stopOut.String(), "no demo PostgreSQL is running") {
		t.Fatalf("demo --stop again: exit %d\n%s\n%s", code, stopOut.String(), stopErr.String())
	}
}

// TestDemoPrintsCommandsThatRunAsPrinted runs the demo on a configured
// database (interrupted once its master runs, which still prints the
// commands) and runs every command it printed as printed: after the
// printed export, each `go run ./cmd/app ARGS` but the long-running
// `fleet` must exit 0, and the configuration file it names must hold the
// demo's database and supervisors, so that `fleet` works the demo's queues.
func TestDemoPrintsCommandsThatRunAsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: the demo's master and its workers; runs without -short")
	}
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	env := []string{apptest.EnvAppMode + "=1", "PATH=" + os.Getenv("PATH"), "APP_DATABASE__URL=" + url}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	codec := make(chan int, 1)
	go func() { codec <- runContext(ctx, dir, env, &stdout, &stderr, "demo", "--keep") }()
	eventually(t, 2*time.Minute, "a master row", func() bool {
		select {
		case code := <-codec:
			t.Fatalf("demo exited %d before its master ran:\n%s\n%s", code, stdout.String(), stderr.String())
		default:
		}
		return strings.Contains(stdout.String(), "starting a fleet master") &&
			query(t, url, "SELECT count(*) FROM fleet_masters WHERE kind = 'master'") > 0
	})
	cancel()
	if code := <-codec; code != cmd.ExitInterrupted {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "--keep, which keeps a private server running, changes nothing") {
		t.Errorf("the demo does not say what --keep does on a configured database:\n%s", out)
	}

	var exports []string
	var commands [][]string
	for _, line := range strings.Split(out, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if rest, ok := strings.CutPrefix(line, "  export "); ok {
			exports = append(exports, strings.Fields(rest)...)
		}
		if rest, ok := strings.CutPrefix(line, "  go run ./cmd/app "); ok {
			commands = append(commands, strings.Fields(rest))
		}
	}
	if len(exports) != 1 || exports[0] != "APP_CONFIG=.fleet/demo.toml" {
		t.Fatalf("exports %q, want APP_CONFIG=.fleet/demo.toml:\n%s", exports, out)
	}
	if len(commands) < 5 {
		t.Fatalf("%d commands printed:\n%s", len(commands), out)
	}
	sawFleet := false
	for _, args := range commands {
		if args[0] == "fleet" {
			sawFleet = true // runs until stopped
			continue
		}
		// Only the printed environment: the file must supply the database.
		if r := run(t, dir, exports, args...); r.code != 0 {
			t.Errorf("printed command %q: %+v", args, r)
		}
	}
	if !sawFleet {
		t.Errorf("no `fleet` printed:\n%s", out)
	}

	cfg, err := config.Load(config.Options{Dir: dir, Environ: exports})
	if err != nil {
		t.Fatalf("load the printed configuration: %v", err)
	}
	if cfg.Database.URL != url {
		t.Errorf("database.url %q, want the demo's %q", cfg.Database.URL, url)
	}
	var queues []string
	for _, name := range []string{"default", "slow"} {
		queues = append(queues, cfg.Fleet.Supervisors[name].Queues...)
	}
	if strings.Join(queues, ",") != "default,mail,slow" || len(cfg.Fleet.Supervisors) != 2 {
		t.Errorf("supervisors %+v, want the demo's default (default, mail) and slow (slow)", cfg.Fleet.Supervisors)
	}
	if fi, err := os.Stat(filepath.Join(dir, ".fleet", "demo.toml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("demo.toml, which holds the database URL, is not private: %v %v", fi, err)
	}
}
