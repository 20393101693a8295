// Package pgtest gives tests a fresh, migrated PostgreSQL database each.
//
// A package whose tests need PostgreSQL calls Main from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test asks for its own database with URL or Pool; code without a
// testing.TB (an Example function) takes one with NewDatabase and drops it
// itself. The first such call of a test process finds a server, in this
// order:
//
//  1. the server of FLEET_TEST_DATABASE_URL, when that is set (a URL to any
//     database the harness may connect to; its role needs CREATEDB);
//  2. a local server at postgres://postgres@127.0.0.1:5432/postgres that
//     lets the postgres role in without a password (2 s connect timeout),
//     unless FLEET_TEST_NO_LOCAL is set (meant for testing this harness:
//     it forces step 3 while a local server runs);
//  3. a throwaway cluster started with pgcluster in a temporary directory,
//     stopped and removed by Main when the tests are done (and, should the
//     test process die first, by a small watchdog process);
//
// and when none works, every test that needs a database fails, saying how
// to provide one.
//
// Migrations run once per server and migration fingerprint: the first
// process builds a template database named "fleet_tpl_" +
// migrations.Fingerprint() (under an advisory lock, as go test runs packages
// in parallel, and under a temporary name until it is fully migrated), and
// every test database is a copy of it (CREATE DATABASE ... TEMPLATE). The
// template accepts no connections, so copying it never fails for someone
// being connected to it. A copy takes the server a few hundred
// milliseconds, so the harness keeps two copied ahead, in the background,
// from the first database a process asks for: a test takes one at once.
// When a test ends, its database is closed (it takes no new connections,
// and those the test left open are ended) and dropped later, WITH (FORCE),
// in a batch of eight dropped at once: each DROP DATABASE makes the server
// write a checkpoint, which drops under way together share. Main drops
// what is left (the closed databases and the spares no test took) once the
// tests are done. On a shared server the template is kept for later runs;
// Main drops it only from a throwaway cluster.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgcluster"
)

const (
	// EnvDatabaseURL names the environment variable holding the URL of the
	// server to create test databases on.
	EnvDatabaseURL = "FLEET_TEST_DATABASE_URL"
	// EnvNoLocal names an environment variable that, when set to anything
	// but "" or "0", makes the harness skip the local server at
	// 127.0.0.1:5432 and go straight to a throwaway cluster. It exists to
	// test that path on a machine whose local server is running.
	EnvNoLocal = "FLEET_TEST_NO_LOCAL"

	// localURL is the local server tried when EnvDatabaseURL is not set.
	localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	templatePrefix = "fleet_tpl_"
	testDBPrefix   = "fleet_test_"
)

// harness is the state of one test process: the server found by setup and
// what Main must undo. setup runs once, under once; Main reads the rest
// after the tests are done.
type harness struct {
	once    sync.Once
	running bool // Main is running the tests
	err     error
	log     *slog.Logger

	adminURL string
	source   string // where the server came from, for messages
	admin    *pgxpool.Pool
	template string
	strategy string  // CREATE DATABASE's STRATEGY clause for copies of the template, or ""
	spares   *spares // made ahead and dropped behind the tests

	// A throwaway cluster, when the harness started one.
	cluster    *pgcluster.Cluster
	clusterDir string
	watchdog   *exec.Cmd
	watchPipe  *os.File // closing it makes the watchdog clean up
}

var h harness

// Main runs the package's tests, at least two parallel ones at once
// unless -parallel says otherwise (see minParallel), then drops the
// databases the tests left (see URL), stops the throwaway cluster the
// harness started (dropping the template it made there first) and the
// TimescaleDB cluster of TimescaleURL, and checks, when the tests passed,
// that they leaked no goroutines. It exits the process with the tests'
// code, or 1 when teardown fails or goroutines leaked.
func Main(m *testing.M) {
	h.running = true
	raiseParallel()
	code := m.Run()
	if err := errors.Join(h.teardown(), ts.teardown()); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: goroutines leaked by the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// minParallel is the least number of parallel tests (those calling
// t.Parallel) Main runs at once when -parallel is not given. It is 2, no
// more than a 2-core machine's default: at 4 the suite's masters and
// workers took most of a stock server's 100 connections at times, and
// fleet's connection budget then shrank the fleets under test.
const minParallel = 2

// raiseParallel sets -test.parallel to minParallel unless it was given or
// GOMAXPROCS is larger.
func raiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && flag.Lookup("test.parallel") != nil && runtime.GOMAXPROCS(0) < minParallel {
		_ = flag.Set("test.parallel", strconv.Itoa(minParallel)) // a valid int
	}
}

// URL returns the URL of a fresh database, already migrated, used by this
// test alone, closed when the test ends (its connections ended) and
// dropped (WITH (FORCE)) with a later batch, at the latest when Main ends.
// It fails the test when no server can be had.
func URL(t testing.TB) string {
	t.Helper()
	ready(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	began := time.Now()
	u, name, err := h.create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, bench := t.(*testing.B); !bench { // benchmarks would print it every time
		t.Logf("pgtest: database %s ready in %v", name, time.Since(began).Round(time.Microsecond))
	}
	t.Cleanup(func() {
		if err := h.close(name); err != nil {
			t.Error(err)
		}
		h.spares.later(name)
	})
	return u
}

// NewDatabase is URL for code that has no testing.TB: an Example
// function, or TestMain itself. It returns the URL of a fresh, migrated
// database and drop, which closes it as the end of a test closes URL's
// (ending its connections) and has it dropped with a later batch, by the
// time Main ends; the caller calls drop once done with it, before Main
// returns. It works only while Main runs the tests (from TestMain or a
// test), and returns an error when no server can be had.
func NewDatabase(ctx context.Context) (url string, drop func() error, err error) {
	if !h.running {
		return "", nil, errors.New("pgtest: call pgtest.Main from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	h.once.Do(h.setup)
	if h.err != nil {
		return "", nil, h.err
	}
	u, name, err := h.create(ctx)
	if err != nil {
		return "", nil, err
	}
	return u, func() error {
		if err := h.close(name); err != nil {
			return err
		}
		h.spares.later(name)
		return nil
	}, nil
}

// create returns the URL and name of a database of its own for a test: a
// spare made ahead when one is ready, else a copy made now.
func (h *harness) create(ctx context.Context) (string, string, error) {
	name := h.spares.take()
	if name == "" {
		var err error
		if name, err = h.copyTemplate(ctx); err != nil {
			return "", "", err
		}
	}
	u, err := withDatabase(h.adminURL, name)
	if err != nil {
		_ = h.drop(name)
		return "", "", fmt.Errorf("pgtest: %w", err)
	}
	return u, name, nil
}

// copyTemplate makes a database from the template and returns its name.
func (h *harness) copyTemplate(ctx context.Context) (string, error) {
	name := testDBPrefix + randomHex(8)
	err := retryInUse(ctx, func() error {
		_, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(h.template)+h.strategy)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("pgtest: create database %s from template %s on %s: %w", name, h.template, h.source, err)
	}
	return name, nil
}

// close closes a database create made to new connections and ends those
// it has, waiting (at most 5 s) for them to go: no one uses it until spares
// drops it with a later batch.
func (h *harness) close(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.admin.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("pgtest: close test database %s: %w", name, err)
	}
	const others = "FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"
	var ended int
	if err := h.admin.QueryRow(ctx, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "+others, name).Scan(&ended); err != nil {
		return fmt.Errorf("pgtest: end the connections to test database %s: %w", name, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ended > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		if err := h.admin.QueryRow(ctx, "SELECT count(*) "+others, name).Scan(&ended); err != nil {
			return fmt.Errorf("pgtest: end the connections to test database %s: %w", name, err)
		}
	}
	return nil
}

// drop drops a database create made.
func (h *harness) drop(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop test database %s: %w", name, err)
	}
	return nil
}

// Pool returns a pool on a fresh database (as URL), closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := URL(t)
	pool, err := pgxpool.New(t.Context(), u)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before URL's cleanup drops the database
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("pgtest: ping test database: %v", err)
	}
	return pool
}

// AdminURL returns the URL of the server's maintenance database: the
// "postgres" database of the local server or throwaway cluster, or
// FLEET_TEST_DATABASE_URL as given. Tests that create databases or roles
// there must remove them themselves.
func AdminURL(t testing.TB) string {
	t.Helper()
	ready(t)
	return h.adminURL
}

// ready sets the harness up on first use and fails t when it has no server.
func ready(t testing.TB) {
	t.Helper()
	if !h.running {
		t.Fatal("pgtest: call pgtest.Main from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	h.once.Do(h.setup)
	if h.err != nil {
		t.Fatal(h.err)
	}
}

// setup finds a server and makes sure the template exists on it.
func (h *harness) setup() {
	h.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if testing.Verbose() {
		h.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := h.findServer(ctx); err != nil {
		h.err = err
		return
	}
	cfg, err := pgxpool.ParseConfig(h.adminURL)
	if err != nil {
		h.err = fmt.Errorf("pgtest: parse admin URL of %s: %w", h.source, err)
		return
	}
	cfg.MaxConns = 2 * dropBatch
	if h.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		h.err = fmt.Errorf("pgtest: open admin pool on %s: %w", h.source, err)
		return
	}
	began := time.Now()
	built, err := h.ensureTemplate(ctx)
	if err != nil {
		h.err = fmt.Errorf("pgtest: template database on %s: %w", h.source, err)
		return
	}
	var version int
	if err := h.admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		h.err = fmt.Errorf("pgtest: read the version of %s: %w", h.source, err)
		return
	}
	if version >= 150000 {
		// PostgreSQL 15 copies a database through the WAL by default,
		// block by block: about 0.22 s of the server's CPU per copy of
		// the template, against 0.07 s for a copy of its files, and the
		// quick tier makes some 400 copies on a machine whose CPU it
		// fills. The two checkpoints of a file copy cost little beside
		// the one every DROP DATABASE makes anyway (see dropBatch).
		h.strategy = " STRATEGY FILE_COPY"
	}
	h.spares = newSpares(h.copyTemplate, h.drop)
	if built {
		h.log.Info("pgtest: built template", "template", h.template, "took", time.Since(began).Round(time.Millisecond))
	}
}

// findServer settles adminURL and source, starting a cluster if need be.
func (h *harness) findServer(ctx context.Context) error {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		if err := probe(ctx, u, 10*time.Second); err != nil {
			return fmt.Errorf("pgtest: %s=%s: %w", EnvDatabaseURL, redact(u), err)
		}
		h.adminURL, h.source = u, EnvDatabaseURL
		h.log.Info("pgtest: using the server of "+EnvDatabaseURL, "url", redact(u))
		return nil
	}
	var reasons []string
	if v := os.Getenv(EnvNoLocal); v == "" || v == "0" {
		err := probe(ctx, localURL, 2*time.Second)
		if err == nil {
			h.adminURL, h.source = localURL, "the local server at 127.0.0.1:5432"
			h.log.Info("pgtest: using the local server", "url", localURL)
			return nil
		}
		reasons = append(reasons, "no local server: "+err.Error())
	} else {
		reasons = append(reasons, "local server skipped: "+EnvNoLocal+" is set")
	}
	err := h.startCluster(ctx)
	if err == nil {
		h.adminURL, h.source = h.cluster.URL("postgres"), "a throwaway cluster in "+h.clusterDir
		return nil
	}
	reasons = append(reasons, "no throwaway cluster: "+err.Error())
	return fmt.Errorf("pgtest: no PostgreSQL server for the tests. Set %s to the URL of a server "+
		"where the harness may create databases, start a local PostgreSQL on 127.0.0.1:5432 that "+
		"trusts the postgres role, or install the PostgreSQL server binaries (initdb, pg_ctl) "+
		"so the harness can start one.\n%s", EnvDatabaseURL, strings.Join(reasons, "\n"))
}

// probe connects to u and checks that its role may create databases. Any
// password is dropped: a server that asks for one does not qualify unless
// the URL came from the user.
func probe(ctx context.Context, u string, timeout time.Duration) error {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return fmt.Errorf("parse URL: %w", err)
	}
	if u == localURL {
		cfg.Password = "" // only trust: not from ~/.pgpass or PGPASSWORD
	}
	cfg.ConnectTimeout = timeout
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var may bool
	err = conn.QueryRow(ctx, "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user").Scan(&may)
	if err != nil {
		return fmt.Errorf("check role: %w", err)
	}
	if !may {
		return fmt.Errorf("role %s may not create databases (needs CREATEDB)", cfg.User)
	}
	return nil
}

// startCluster starts a throwaway cluster in a temporary directory, with a
// watchdog that stops and removes it should this process die before Main
// does.
func (h *harness) startCluster(ctx context.Context) error {
	if _, err := pgcluster.FindBinaries(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fleet-pgtest-")
	if err != nil {
		return fmt.Errorf("create cluster directory: %w", err)
	}
	// As root the server runs as the postgres user, which must traverse it.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("create cluster directory: %w", err)
	}
	h.clusterDir = dir
	data := filepath.Join(dir, "data")
	if err := h.startWatchdog(data, dir); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	began := time.Now()
	c, err := pgcluster.Start(ctx, pgcluster.Options{
		DataDir: data,
		LogFile: filepath.Join(dir, "postgres.log"),
		Logger:  h.log,
	})
	if err != nil {
		h.stopWatchdog()
		return err
	}
	h.cluster = c
	h.log.Info("pgtest: started a throwaway cluster", "dir", dir, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// watchdogScript waits for its stdin to close, which happens when the test
// process exits however it exits, then stops the postmaster of data dir $1
// if one is still running (SIGINT is a fast shutdown; the postmaster removes
// its pid file last), waiting at most 30 s, and removes $2.
const watchdogScript = `read -r _
pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; then
	i=0
	while [ -f "$1/postmaster.pid" ] && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i+1)); done
fi
rm -rf "$2"
`

// startWatchdog starts the watchdog of a throwaway cluster (see
// startWatchdogOf).
func (h *harness) startWatchdog(dataDir, dir string) error {
	cmd, w, err := startWatchdogOf(dataDir, dir)
	if err != nil {
		return err
	}
	h.watchdog, h.watchPipe = cmd, w
	return nil
}

// startWatchdogOf starts a watchdog (watchdogScript) for the cluster of
// dataDir in dir, and returns it with the pipe whose closing makes it
// clean up. It runs in a session of its own, so a Ctrl-C that kills the
// tests does not kill it.
func startWatchdogOf(dataDir, dir string) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start cluster watchdog: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "pgtest-watchdog", dataDir, dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, nil, fmt.Errorf("start cluster watchdog: %w", err)
	}
	return cmd, w, nil
}

// stopWatchdog lets the watchdog clean up and waits for it to exit.
func (h *harness) stopWatchdog() {
	if h.watchdog == nil {
		return
	}
	_ = h.watchPipe.Close()
	_ = h.watchdog.Wait()
	h.watchdog = nil
}

// ensureTemplate creates and migrates the template database unless it
// exists, and reports whether it built it. The advisory lock serialises the
// test processes of one go test run; the template is built under a
// temporary name and renamed once migrated, so it is never seen half-built.
func (h *harness) ensureTemplate(ctx context.Context) (bool, error) {
	h.template = templatePrefix + migrations.Fingerprint()
	conn, err := h.admin.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	key := lockKey(h.template)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return false, fmt.Errorf("take advisory lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) // ending the session releases the lock
		}
	}()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", h.template).Scan(&exists); err != nil {
		return false, fmt.Errorf("look for %s: %w", h.template, err)
	}
	if exists {
		return false, nil
	}

	building := h.template + "_building"
	// A process that died while building left this behind; we hold the lock.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(building)+" WITH (FORCE)"); err != nil {
		return false, fmt.Errorf("drop leftover %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(building)); err != nil {
		return false, fmt.Errorf("create %s: %w", building, err)
	}
	u, err := withDatabase(h.adminURL, building)
	if err != nil {
		return false, err
	}
	if _, err := migrations.Up(ctx, u); err != nil {
		return false, fmt.Errorf("migrate %s: %w", building, err)
	}
	// Migration connections may take a moment to go away.
	err = retryInUse(ctx, func() error {
		_, err := conn.Exec(ctx, "ALTER DATABASE "+ident(building)+" RENAME TO "+ident(h.template))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("rename %s to %s: %w", building, h.template, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(h.template)+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return false, fmt.Errorf("close %s to connections: %w", h.template, err)
	}
	return true, nil
}

// teardown undoes setup: it drops the template and stops the cluster when
// the harness started one, and closes the admin pool.
func (h *harness) teardown() error {
	// Wait for a setup still under way, and keep any later one from running.
	h.once.Do(func() { h.err = errors.New("pgtest: the tests are over") })
	var errs []error
	if h.spares != nil {
		if err := h.spares.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.cluster != nil && h.admin != nil && h.template != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(h.template)+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop template %s: %w", h.template, err))
		}
		cancel()
	}
	if h.admin != nil {
		h.admin.Close()
	}
	if h.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := h.cluster.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop throwaway cluster: %w", err))
		}
		cancel()
		if err := os.RemoveAll(h.clusterDir); err != nil {
			errs = append(errs, fmt.Errorf("remove throwaway cluster directory: %w", err))
		}
	}
	h.stopWatchdog()
	return errors.Join(errs...)
}

// retryInUse runs fn again while it fails because someone is connected to a
// database it needs alone (SQLSTATE 55006, "source database is being
// accessed by other users"), backing off from 10 ms to 200 ms, for at most
// about 5 s.
func retryInUse(ctx context.Context, fn func() error) error {
	delay := 10 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := fn()
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up retrying: %w)", err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// withDatabase returns the connection string u pointed at database db. It
// takes URLs (postgres://...) and keyword/value strings (host=... dbname=...).
func withDatabase(u, db string) (string, error) {
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return u + " dbname=" + db, nil // the last dbname wins
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	parsed.Path, parsed.RawPath = "/"+db, ""
	if q := parsed.Query(); q.Has("dbname") || q.Has("database") {
		q.Del("dbname")
		q.Del("database")
		parsed.RawQuery = q.Encode()
	}
	return parsed.String(), nil
}

// redact hides the password of a URL for messages.
func redact(u string) string {
	if parsed, err := url.Parse(u); err == nil && parsed.Scheme != "" {
		return parsed.Redacted()
	}
	return "(connection string)"
}

// ident quotes a database name.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// lockKey is the advisory lock key guarding the template of that name.
func lockKey(template string) int64 {
	f := fnv.New64a()
	f.Write([]byte("fleet-pgtest:" + template))
	return int64(f.Sum64())
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
