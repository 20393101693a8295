package pgcluster_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/testwait"
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

// longCluster skips under -short a test that starts several clusters, or
// kills and recovers one: seconds each on an idle machine.
func longCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("recovers or promotes clusters, seconds each: runs without -short")
	}
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

// The library directory holds the libraries every server has, such as
// plpgsql's.
func TestLibraryDir(t *testing.T) {
	needBinaries(t)
	dir, err := pgcluster.LibraryDir()
	if err != nil {
		t.Fatal(err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "plpgsql.*")); len(matches) == 0 {
		t.Fatalf("no plpgsql library in %s", dir)
	}
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
	longCluster(t)
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
	longCluster(t)
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

// freePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestStandbyPromoteCrash makes a streaming standby of a primary listening
// on TCP, reaches the primary through a multi-host URL that keeps the
// read-write host, crashes the primary while its WAL sender is stopped
// (the sender must die with it), promotes the standby and reaches it
// through the same URL.
func TestStandbyPromoteCrash(t *testing.T) {
	longCluster(t)
	needBinaries(t)
	dir := tempDir(t)
	primary := start(t, pgcluster.Options{DataDir: filepath.Join(dir, "primary"), Port: freePort(t), Logger: testLogger(t),
		Settings: []string{"wal_sender_timeout=0"}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	standby, err := pgcluster.StartStandby(ctx, primary, "replica", pgcluster.Options{DataDir: filepath.Join(dir, "standby"),
		Port: freePort(t), Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("StartStandby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })
	if !strings.HasPrefix(primary.URL("postgres"), "postgres://postgres@127.0.0.1:") {
		t.Fatalf("URL of a TCP cluster: %s", primary.URL("postgres"))
	}
	if got := query(t, primary.URL("postgres"), "select current_setting('wal_sender_timeout')"); got != "0" {
		t.Errorf("wal_sender_timeout of the primary = %q, want Settings' 0", got)
	}
	if got := query(t, standby.URL("postgres"), "select pg_is_in_recovery()::text"); got != "true" {
		t.Fatalf("standby in recovery = %s", got)
	}
	// The standby's WAL receiver connects once the standby is up: on a
	// busy machine a moment after it accepts sessions.
	var got string
	if !testwait.Within(testwait.Slack*10*time.Second, func() bool {
		got = query(t, primary.URL("postgres"), "select coalesce(string_agg(application_name || ' ' || state, ','), '') from pg_stat_replication")
		return got == "replica streaming"
	}) {
		t.Fatalf("pg_stat_replication of the primary: %q, want the standby streaming", got)
	}
	url := pgcluster.MultiHostURL("postgres", "read-write", primary, standby)
	want := "127.0.0.1:" + strconv.Itoa(primary.Port()) + ",127.0.0.1:" + strconv.Itoa(standby.Port())
	if !strings.Contains(url, "@"+want+"/postgres?") || !strings.Contains(url, "target_session_attrs=read-write") {
		t.Fatalf("multi-host URL %s, want hosts %s and target_session_attrs", url, want)
	}
	if got := query(t, url, "select current_setting('port')"); got != strconv.Itoa(primary.Port()) {
		t.Fatalf("the multi-host URL reached port %s, want the primary's %d", got, primary.Port())
	}
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "create table t as select 1 as x"); err != nil {
		t.Fatal(err)
	}
	var sender int
	if err := conn.QueryRow(ctx, "select pid from pg_stat_replication").Scan(&sender); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	for deadline := time.Now().Add(10 * time.Second); query(t, standby.URL("postgres"), "select count(*)::text from pg_class where relname = 't'") != "1"; {
		if time.Now().After(deadline) {
			t.Fatal("the table never reached the standby")
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := syscall.Kill(sender, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(sender, syscall.SIGCONT) })
	pid, err := primary.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := primary.Crash(ctx); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	t.Logf("Crash took %v", time.Since(began).Round(time.Millisecond))
	if syscall.Kill(pid, 0) == nil && processState(pid) != 'Z' {
		t.Fatalf("postmaster %d still there after Crash", pid)
	}
	if syscall.Kill(sender, 0) == nil && processState(sender) != 'Z' {
		t.Fatalf("the stopped WAL sender %d outlived the crash", sender)
	}
	if _, err := pgx.Connect(ctx, url); err == nil {
		t.Fatal("the multi-host URL connected read-write with the primary down and the standby not promoted")
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	if got := query(t, url, "select current_setting('port') || ' ' || (select count(*) from t)"); got != strconv.Itoa(standby.Port())+" 1" {
		t.Fatalf("after the promotion the multi-host URL reached %q, want the standby's port %d and the table", got, standby.Port())
	}
	if err := primary.Stop(ctx); err != nil {
		t.Fatalf("Stop after Crash: %v", err)
	}
}

// processState is the state letter of pid in /proc, 0 when unknown.
func processState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) == 0 {
		return 0
	}
	return f[0][0]
}
