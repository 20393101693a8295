package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgcluster"
)

// The TimescaleDB harness. TimescaleDB is loaded by a server only when it
// is started with shared_preload_libraries = 'timescaledb', which a shared
// server is not, so its tests run on a private cluster of their own,
// started at the first call of a test process and stopped by Main. Its
// databases are copies of templates made there: one with the extension
// alone, one migrated as well (its history on hypertables).
//
// Without TimescaleDB installed (no timescaledb library in the server's
// library directory) a test that asks for it skips, saying why, unless CI
// is "true" or FLEET_TEST_REQUIRE is "all" (as .ci/run sets, after
// installing it), where it fails.

const (
	// EnvRequire names the variable that, set to "all", makes a test fail
	// rather than skip when what it needs is not installed.
	EnvRequire = "FLEET_TEST_REQUIRE"
	// EnvNoTimescale names a variable that, set to anything but "" or "0",
	// makes the harness act as if TimescaleDB were not installed. It exists
	// to test that path on a machine that has it.
	EnvNoTimescale = "FLEET_TEST_NO_TIMESCALE"
)

// timescaleSettings are the server settings of the TimescaleDB cluster.
// fleet needs none of TimescaleDB's background jobs (it drops chunks
// itself), and a scheduler connected to a template would keep it from
// being copied.
var timescaleSettings = []string{
	"shared_preload_libraries=timescaledb",
	"timescaledb.max_background_workers=0",
}

// The templates of the TimescaleDB cluster.
const (
	timescaleBare     = "fleet_tsdb_bare"
	timescaleTemplate = "fleet_tsdb_tpl"
)

// tsHarness is the TimescaleDB cluster of a test process.
type tsHarness struct {
	once sync.Once
	// missing says why TimescaleDB is not there (the test skips or fails);
	// err is any other failure (the test fails).
	missing string
	err     error

	dir       string
	cluster   *pgcluster.Cluster
	admin     *pgxpool.Pool
	watchdog  *exec.Cmd
	watchPipe *os.File
}

var ts tsHarness

// skipShort skips a TimescaleDB test under -short: its cluster of its own
// takes seconds to start, and its tests run without -short.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("TimescaleDB: starts a cluster of its own; runs without -short")
	}
}

// TimescaleURL returns the URL of a fresh database on the TimescaleDB
// cluster, with the timescaledb extension created and both migration sets
// applied (fleet.timescale auto: the history on hypertables), used by this
// test alone and dropped when it ends.
func TimescaleURL(t testing.TB) string {
	t.Helper()
	skipShort(t)
	return ts.database(t, timescaleTemplate)
}

// TimescaleBareURL returns the URL of a fresh database on the TimescaleDB
// cluster with the timescaledb extension created and nothing migrated, for
// tests of the migrations themselves.
func TimescaleBareURL(t testing.TB) string {
	t.Helper()
	skipShort(t)
	return ts.database(t, timescaleBare)
}

// TimescaleAdminURL returns the URL of the maintenance database of the
// TimescaleDB cluster. Tests that create databases there drop them.
func TimescaleAdminURL(t testing.TB) string {
	t.Helper()
	skipShort(t)
	ts.ready(t)
	return ts.cluster.URL("postgres")
}

// RequireAll reports whether a test must fail, rather than skip, when a
// part it needs is not installed: under CI=true or FLEET_TEST_REQUIRE=all.
func RequireAll() bool {
	return os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "all"
}

// ready starts the cluster on first use, and skips or fails t when it has
// none.
func (x *tsHarness) ready(t testing.TB) {
	t.Helper()
	if !h.running {
		t.Fatal("pgtest: call pgtest.Main from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	x.once.Do(x.setup)
	if x.missing != "" {
		if RequireAll() {
			t.Fatalf("pgtest: TimescaleDB is required here (CI=true or %s=all): %s", EnvRequire, x.missing)
		}
		t.Skipf("pgtest: TimescaleDB is not installed, so this test of the hypertable layout skips: %s", x.missing)
	}
	if x.err != nil {
		t.Fatal(x.err)
	}
}

// database creates a database from template and drops it when t ends.
func (x *tsHarness) database(t testing.TB, template string) string {
	t.Helper()
	x.ready(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	name := "fleet_tsdb_" + randomHex(8)
	err := retryInUse(ctx, func() error {
		_, err := x.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template))
		return err
	})
	if err != nil {
		t.Fatalf("pgtest: create database %s from template %s on the TimescaleDB cluster: %v", name, template, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := x.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop test database %s: %v", name, err)
		}
	})
	return x.cluster.URL(name)
}

// setup checks that TimescaleDB is installed, starts the cluster and makes
// its templates.
func (x *tsHarness) setup() {
	if v := os.Getenv(EnvNoTimescale); v != "" && v != "0" {
		x.missing = EnvNoTimescale + " is set"
		return
	}
	lib, err := pgcluster.LibraryDir()
	if err != nil {
		x.missing = err.Error()
		return
	}
	if _, err := os.Stat(filepath.Join(lib, "timescaledb.so")); err != nil {
		x.missing = fmt.Sprintf("no timescaledb library in PostgreSQL's library directory %s (.ci/run installs it when it is missing)", lib)
		return
	}
	x.err = x.start()
}

func (x *tsHarness) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "fleet-pgtest-tsdb-")
	if err != nil {
		return fmt.Errorf("pgtest: create the TimescaleDB cluster's directory: %w", err)
	}
	// As root the server runs as the postgres user, which must traverse it.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("pgtest: create the TimescaleDB cluster's directory: %w", err)
	}
	x.dir = dir
	data := filepath.Join(dir, "data")
	if x.watchdog, x.watchPipe, err = startWatchdogOf(data, dir); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	began := time.Now()
	x.cluster, err = pgcluster.Start(ctx, pgcluster.Options{
		DataDir:  data,
		LogFile:  filepath.Join(dir, "postgres.log"),
		Settings: timescaleSettings,
	})
	if err != nil {
		return fmt.Errorf("pgtest: start the TimescaleDB cluster: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(x.cluster.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: TimescaleDB cluster: %w", err)
	}
	cfg.MaxConns = 8
	if x.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("pgtest: TimescaleDB cluster: %w", err)
	}
	for _, stmt := range []string{
		"CREATE DATABASE " + ident(timescaleBare),
		"CREATE DATABASE " + ident(timescaleTemplate),
	} {
		if _, err := x.admin.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgtest: TimescaleDB cluster: %s: %w", stmt, err)
		}
	}
	for _, db := range []string{timescaleBare, timescaleTemplate} {
		if err := createExtension(ctx, x.cluster.URL(db)); err != nil {
			return err
		}
	}
	if _, err := migrations.Up(ctx, x.cluster.URL(timescaleTemplate)); err != nil {
		return fmt.Errorf("pgtest: migrate the TimescaleDB template: %w", err)
	}
	for _, db := range []string{timescaleBare, timescaleTemplate} {
		err := retryInUse(ctx, func() error {
			_, err := x.admin.Exec(ctx, "ALTER DATABASE "+ident(db)+" WITH ALLOW_CONNECTIONS false")
			return err
		})
		if err != nil {
			return fmt.Errorf("pgtest: close the TimescaleDB template %s: %w", db, err)
		}
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "pgtest: started the TimescaleDB cluster in %s in %v\n", dir, time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// createExtension creates the timescaledb extension in the database of u.
func createExtension(ctx context.Context, u string) error {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return fmt.Errorf("pgtest: TimescaleDB cluster: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS timescaledb"); err != nil {
		return fmt.Errorf("pgtest: create the timescaledb extension: %w", err)
	}
	return nil
}

// teardown stops the cluster and removes its directory.
func (x *tsHarness) teardown() error {
	x.once.Do(func() { x.err = errors.New("pgtest: the tests are over") })
	var errs []error
	if x.admin != nil {
		x.admin.Close()
	}
	if x.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := x.cluster.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop the TimescaleDB cluster: %w", err))
		}
		cancel()
	}
	if x.dir != "" {
		if err := os.RemoveAll(x.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove the TimescaleDB cluster's directory: %w", err))
		}
	}
	if x.watchdog != nil {
		_ = x.watchPipe.Close()
		_ = x.watchdog.Wait()
		x.watchdog = nil
	}
	return errors.Join(errs...)
}
