package pgtest_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// connect opens a connection closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func currentDatabase(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var name string
	if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

func hasQueueJobs(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var ok bool
	if err := conn.QueryRow(t.Context(), "SELECT to_regclass('queue_jobs') IS NOT NULL").Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("database %s has no table queue_jobs", currentDatabase(t, conn))
	}
}

// closedOrGone reports whether database name refuses new connections or
// no longer exists.
func closedOrGone(t *testing.T, admin *pgx.Conn, name string) bool {
	t.Helper()
	var open bool
	err := admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1 AND datallowconn)", name).Scan(&open)
	if err != nil {
		t.Fatal(err)
	}
	return !open
}

// dropClosed drops the databases of the tests that have ended now.
func dropClosed(t *testing.T) {
	t.Helper()
	if err := pgtest.DropClosed(); err != nil {
		t.Fatal(err)
	}
}

func databaseExists(t *testing.T, admin *pgx.Conn, name string) bool {
	t.Helper()
	var exists bool
	err := admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

// TestNewDatabase: a database of NewDatabase, for code without a testing.TB,
// is migrated and named like URL's, and drop closes it, ending its
// connections, and has it dropped with a later batch.
func TestNewDatabase(t *testing.T) {
	t.Parallel()
	url, drop, err := pgtest.NewDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		_ = drop()
		t.Fatalf("connect: %v", err)
	}
	hasQueueJobs(t, conn)
	name := currentDatabase(t, conn)
	if !strings.HasPrefix(name, "fleet_test_") {
		t.Errorf("database name %q lacks the fleet_test_ prefix", name)
	}
	if err := drop(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(t.Context()); err == nil {
		t.Errorf("a connection to database %s still works after drop", name)
	}
	_ = conn.Close(t.Context())
	if connectsTo(t, name) {
		t.Errorf("connected to database %s after drop", name)
	}
	dropClosed(t)
	if databaseExists(t, connect(t, pgtest.AdminURL(t)), name) {
		t.Errorf("database %s still exists after its batch was dropped", name)
	}
}

// TestURL checks that two URLs are two migrated databases, that both are
// closed once their tests have ended, and dropped with the next batch.
func TestURL(t *testing.T) {
	var names []string
	for _, sub := range []string{"first", "second"} {
		t.Run(sub, func(t *testing.T) {
			conn := connect(t, pgtest.URL(t))
			hasQueueJobs(t, conn)
			name := currentDatabase(t, conn)
			if !strings.HasPrefix(name, "fleet_test_") {
				t.Errorf("database name %q lacks the fleet_test_ prefix", name)
			}
			var n int
			if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM queue_jobs").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("fresh database has %d queue_jobs, want 0", n)
			}
			// Leave a row behind: the next database must not see it.
			_, err := conn.Exec(t.Context(), "INSERT INTO queue_jobs (queue, name, max_tries) VALUES ('q', $1, 1)", sub)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		})
	}
	if len(names) != 2 {
		t.Fatalf("subtests failed: got databases %v", names)
	}
	if names[0] == names[1] {
		t.Fatalf("both URLs name database %s", names[0])
	}
	admin := connect(t, pgtest.AdminURL(t))
	for _, name := range names {
		if !closedOrGone(t, admin, name) {
			t.Errorf("database %s still takes connections after its test ended", name)
		}
		if connectsTo(t, name) {
			t.Errorf("connected to database %s after its test ended", name)
		}
	}
	dropClosed(t)
	for _, name := range names {
		if databaseExists(t, admin, name) {
			t.Errorf("database %s still exists after its batch was dropped", name)
		}
	}
}

// TestURLTwiceInOneTest checks that one test may ask for two databases.
func TestURLTwiceInOneTest(t *testing.T) {
	a, b := connect(t, pgtest.URL(t)), connect(t, pgtest.URL(t))
	if currentDatabase(t, a) == currentDatabase(t, b) {
		t.Fatal("two URLs name the same database")
	}
	if _, err := a.Exec(t.Context(), "INSERT INTO queue_jobs (queue, name, max_tries) VALUES ('q', 'a', 1)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(t.Context(), "SELECT count(*) FROM queue_jobs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d rows of the first", n)
	}
}

// TestDroppedWhileConnected checks that the end of a test ends the
// connections it left open on its database, which is then dropped.
func TestDroppedWhileConnected(t *testing.T) {
	var name string
	var leftOpen *pgx.Conn
	t.Run("leave a connection open", func(t *testing.T) {
		var err error
		leftOpen, err = pgx.Connect(t.Context(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		name = currentDatabase(t, leftOpen)
	})
	defer leftOpen.Close(context.Background())
	if err := leftOpen.Ping(t.Context()); err == nil {
		t.Errorf("the connection left open on database %s still works after its test ended", name)
	}
	dropClosed(t)
	if databaseExists(t, connect(t, pgtest.AdminURL(t)), name) {
		t.Fatalf("database %s survived its test and its batch", name)
	}
}

// connectsTo reports whether a new connection to database db of the
// server succeeds.
func connectsTo(t *testing.T, db string) bool {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = db
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		return false
	}
	_ = conn.Close(t.Context())
	return true
}

func TestPool(t *testing.T) {
	pool := pgtest.Pool(t)
	var ok bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regclass('queue_jobs') IS NOT NULL").Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("no table queue_jobs")
	}
}

// TestParallel runs many tests at once, as packages with t.Parallel do.
func TestParallel(t *testing.T) {
	for i := range 16 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			pool := pgtest.Pool(t)
			t.Logf("database ready in %v", time.Since(began).Round(time.Microsecond))
			if _, err := pool.Exec(t.Context(), "INSERT INTO queue_jobs (queue, name, max_tries) VALUES ('q', 'x', 1)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestServerSource checks that FLEET_TEST_NO_LOCAL makes the harness start a
// throwaway cluster, which listens on a Unix socket only.
func TestServerSource(t *testing.T) {
	admin := pgtest.AdminURL(t)
	t.Logf("admin URL: %s", admin)
	if os.Getenv(pgtest.EnvDatabaseURL) != "" || os.Getenv(pgtest.EnvNoLocal) == "" {
		return
	}
	if !strings.Contains(admin, "host=%2F") {
		t.Fatalf("with %s set, admin URL %s is not a throwaway cluster's socket", pgtest.EnvNoLocal, admin)
	}
}

// TestUnreachableServerFails runs this test binary against a server that is
// not there: tests needing a database must fail (not skip) and say why.
func TestUnreachableServerFails(t *testing.T) {
	if os.Getenv("PGTEST_EXPECT_FAILURE") == "1" {
		pgtest.URL(t)
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestUnreachableServerFails$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_EXPECT_FAILURE=1",
		pgtest.EnvDatabaseURL+"=postgres://postgres:secret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child test passed without a server:\n%s", out)
	}
	for _, want := range []string{"--- FAIL: TestUnreachableServerFails", pgtest.EnvDatabaseURL + "=postgres://postgres:xxxxx@127.0.0.1:1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "secret") {
		t.Errorf("child output shows the password:\n%s", out)
	}
}

// TestTimescaleMissingSkipsOrFails runs this test binary as if TimescaleDB
// were not installed: a test asking for it skips, saying why, unless CI is
// true or FLEET_TEST_REQUIRE is all, where it fails.
func TestTimescaleMissingSkipsOrFails(t *testing.T) {
	if os.Getenv("PGTEST_TIMESCALE_CHILD") == "1" {
		pgtest.TimescaleURL(t)
		return
	}
	t.Parallel()
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, pgtest.EnvRequire+"=") {
			base = append(base, kv)
		}
	}
	for _, c := range []struct {
		env  []string
		pass bool
		want string
	}{
		{nil, true, "--- SKIP: TestTimescaleMissingSkipsOrFails"},
		{[]string{pgtest.EnvRequire + "=all"}, false, "TimescaleDB is required here"},
		{[]string{"CI=true"}, false, "TimescaleDB is required here"},
	} {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTimescaleMissingSkipsOrFails$", "-test.count=1", "-test.v")
		cmd.Env = append(append(slices.Clone(base), "PGTEST_TIMESCALE_CHILD=1", pgtest.EnvNoTimescale+"=1"), c.env...)
		out, err := cmd.CombinedOutput()
		if (err == nil) != c.pass || !strings.Contains(string(out), c.want) || !strings.Contains(string(out), pgtest.EnvNoTimescale+" is set") {
			t.Errorf("with %v: err %v, want passing %v and %q:\n%s", c.env, err, c.pass, c.want, out)
		}
	}
}

// BenchmarkURL measures how long a test waits for a fresh database. The
// databases are closed when the benchmark ends and dropped by Main.
func BenchmarkURL(b *testing.B) {
	pgtest.AdminURL(b) // set the harness up before b.Loop starts the timer
	for b.Loop() {
		pgtest.URL(b)
	}
}

// TestParallelAtLeastTwo runs this test binary with a GOMAXPROCS and a
// -parallel of its own: Main runs two parallel tests at once unless
// -parallel is given or GOMAXPROCS is larger.
func TestParallelAtLeastTwo(t *testing.T) {
	if os.Getenv("PGTEST_PARALLEL_CHILD") == "1" {
		fmt.Printf("parallel=%s\n", flag.Lookup("test.parallel").Value)
		return
	}
	t.Parallel()
	for _, c := range []struct {
		gomaxprocs string
		args       []string
		want       string
	}{
		{"1", nil, "parallel=2"},
		{"2", nil, "parallel=2"},
		{"2", []string{"-test.parallel=1"}, "parallel=1"},
		{"6", nil, "parallel=6"},
	} {
		args := append([]string{"-test.run=^TestParallelAtLeastTwo$", "-test.count=1"}, c.args...)
		cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
		cmd.Env = append(os.Environ(), "PGTEST_PARALLEL_CHILD=1", "GOMAXPROCS="+c.gomaxprocs)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want+"\n") {
			t.Errorf("GOMAXPROCS=%s %v: err %v, want %q:\n%s", c.gomaxprocs, c.args, err, c.want, out)
		}
	}
}
