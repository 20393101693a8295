package pgcluster_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/pgcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tempDir returns a fresh directory that the OS user postgres can traverse
// when the tests run as root (t.TempDir is 0700).
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func needBinaries(t *testing.T) {
	t.Helper()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Fatalf("these tests need PostgreSQL installed: %v", err)
	}
}

func start(t *testing.T, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	began := time.Now()
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return c
}

func stop(t *testing.T, c *pgcluster.Cluster) {
	t.Helper()
	began := time.Now()
	if err := c.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop took %v", time.Since(began).Round(time.Millisecond))
}

// query connects to url and returns the result of one single-value query.
func query(t *testing.T, url, sql string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(t.Context(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestFindBinaries(t *testing.T) {
	dir, err := pgcluster.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s in %s: %v", name, dir, err)
		}
	}
	t.Logf("binaries in %s", dir)
}

func TestFindBinariesMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir, err := pgcluster.FindBinaries()
	if _, statErr := os.Stat("/usr/lib/postgresql"); statErr == nil {
		if err != nil || !strings.HasPrefix(dir, "/usr/lib/postgresql/") {
			t.Fatalf("FindBinaries without PATH = %q, %v; want a /usr/lib/postgresql/*/bin directory", dir, err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "install") {
		t.Fatalf("FindBinaries without binaries = %q, %v; want an error explaining how to install PostgreSQL", dir, err)
	}
}

// TestStartStopRestart starts a cluster, uses it, stops it, and starts it
// again on the same data directory, whose data must have been kept.
func TestStartStopRestart(t *testing.T) {
	needBinaries(t)
	dataDir := filepath.Join(tempDir(t), "data")
	opts := pgcluster.Options{DataDir: dataDir, Logger: testLogger(t)}

	c := start(t, opts)
	if got := query(t, c.URL("postgres"), "select 1::text"); got != "1" {
		t.Fatalf("select 1 = %q", got)
	}
	for setting, want := range map[string]string{
		"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
		"max_connections": "300", "listen_addresses": "", "server_encoding": "UTF8",
	} {
		if got := query(t, c.URL("postgres"), "select current_setting('"+setting+"')"); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "create database kept"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(t.Context())
	if _, err := os.Stat(c.LogFile()); err != nil {
		t.Errorf("server log: %v", err)
	}
	stop(t, c)
	if err := c.Stop(t.Context()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(t.Context(), c.URL("postgres")); err == nil {
		t.Fatal("connected after Stop")
	}

	c2 := start(t, opts)
	if got := query(t, c2.URL("kept"), "select current_database()"); got != "kept" {
		t.Fatalf("database after restart = %q", got)
	}
	stop(t, c2)
}

// TestLongDataDir checks that a data directory too long for a socket path
// gets a short temporary socket directory, removed at Stop.
func TestLongDataDir(t *testing.T) {
	needBinaries(t)
	dir := tempDir(t)
	long := filepath.Join(dir, strings.Repeat("a", 60), strings.Repeat("b", 60))
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(long), 0o755); err != nil {
		t.Fatal(err)
	}
	c := start(t, pgcluster.Options{DataDir: filepath.Join(long, "data"), Logger: testLogger(t)})
	if got := query(t, c.URL("postgres"), "select 1::text"); got != "1" {
		t.Fatalf("select 1 = %q", got)
	}
	sock := query(t, c.URL("postgres"), "select current_setting('unix_socket_directories')")
	if strings.HasPrefix(sock, long) {
		t.Fatalf("socket directory %s is under the long data directory", sock)
	}
	stop(t, c)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("temporary socket directory %s still there after Stop: %v", sock, err)
	}
}

// TestSocketDir checks that an explicit socket directory is created and used.
func TestSocketDir(t *testing.T) {
	needBinaries(t)
	dir := tempDir(t)
	sock := filepath.Join(dir, "sock")
	c := start(t, pgcluster.Options{DataDir: filepath.Join(dir, "data"), SocketDir: sock, Logger: testLogger(t)})
	if got := query(t, c.URL("postgres"), "select current_setting('unix_socket_directories')"); got != sock {
		t.Fatalf("unix_socket_directories = %q, want %q", got, sock)
	}
	if _, err := os.Stat(filepath.Join(sock, ".s.PGSQL.5432")); err != nil {
		t.Fatalf("socket: %v", err)
	}
	stop(t, c)
}

// TestRecoverAbandonedServer starts a cluster and abandons it without
// stopping it, as a killed process would; Start on the same data directory
// must stop that server and start a fresh one.
func TestRecoverAbandonedServer(t *testing.T) {
	needBinaries(t)
	dataDir := filepath.Join(tempDir(t), "data")
	opts := pgcluster.Options{DataDir: dataDir, Logger: testLogger(t)}
	old := start(t, opts)
	oldPid := postmasterPid(t, dataDir)

	c := start(t, opts)
	if pid := postmasterPid(t, dataDir); pid == oldPid {
		t.Fatalf("postmaster pid %d unchanged; want a fresh server", pid)
	}
	if got := query(t, c.URL("postgres"), "select 1::text"); got != "1" {
		t.Fatalf("select 1 = %q", got)
	}
	stop(t, c)
	if err := old.Stop(t.Context()); err != nil {
		t.Fatalf("Stop of the abandoned cluster (already stopped): %v", err)
	}
}

// TestRecoverKilledServer kills a postmaster with SIGKILL, leaving a stale
// postmaster.pid; Start must still succeed.
func TestRecoverKilledServer(t *testing.T) {
	needBinaries(t)
	dataDir := filepath.Join(tempDir(t), "data")
	opts := pgcluster.Options{DataDir: dataDir, Logger: testLogger(t)}
	old := start(t, opts)
	pid := postmasterPid(t, dataDir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait for the postmaster and its children to go.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); err != nil {
		t.Fatalf("want a stale postmaster.pid: %v", err)
	}
	c := start(t, opts)
	if got := query(t, c.URL("postgres"), "select 1::text"); got != "1" {
		t.Fatalf("select 1 = %q", got)
	}
	stop(t, c)
	if err := old.Stop(t.Context()); err != nil {
		t.Fatalf("Stop of the killed cluster: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	needBinaries(t)
	if _, err := pgcluster.Start(t.Context(), pgcluster.Options{}); err == nil {
		t.Error("Start without DataDir succeeded")
	}
	dir := tempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "junk"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pgcluster.Start(t.Context(), pgcluster.Options{DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "neither empty nor") {
		t.Errorf("Start on a non-empty, non-cluster directory: %v", err)
	}
}

func postmasterPid(t *testing.T, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
