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
	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/pgcluster"
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
		"explore what happened:",
		"  export APP_DATABASE__URL='" + url + "'\n",
		"  app fleet:failed ",
		"app fleet:metrics",
		"app fleet:job ",
		"kept the private PostgreSQL running",
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

	var stopOut, stopErr syncBuffer
	if code := runContext(context.Background(), dir, env, &stopOut, &stopErr, "demo", "--stop"); code != 0 ||
		!strings.Contains(stopOut.String(), "stopped the demo's private PostgreSQL") {
		t.Fatalf("demo --stop: exit %d\n%s\n%s", code, stopOut.String(), stopErr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, ".fleet", "demo.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("state file left after --stop: %v", err)
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
