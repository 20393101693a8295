// Package fleettest is the test kit for applications built on fleet: a
// fresh, migrated database per test, assertions on the jobs a test
// dispatched, and jobs worked in-process, synchronously, by the real
// worker with the application's own Registry.
//
// A package whose tests use it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { fleettest.Main(m) }
//
// Each test then takes a database of its own with Pool (or URL), dispatches
// through a queue.Client as the application does, and checks the outcome:
//
//	pool := fleettest.Pool(t)
//	client := queue.NewClient(pool, queue.Defaults{})
//	// ... code under test dispatches ...
//	fleettest.RequireDispatched(t, pool, "mail.send", fleettest.Args(Mail{To: "ann"}))
//	counts := fleettest.Drain(ctx, t, pool, jobs, "default", "mail")
//
// Where the PostgreSQL server comes from is pgtest's business (see
// package pgtest): FLEET_TEST_DATABASE_URL when set, else a local server
// at 127.0.0.1:5432 trusting the postgres role, else a throwaway cluster
// started from the PostgreSQL binaries on the PATH. The databases are
// copies of one template migrated with fleet's migrations, made once per
// server and migration set, so each costs a few milliseconds. Tables of
// the application's own are not there: create them in the test (or run
// the application's migrations on the URL).
//
// Time: fleet decides when a delayed job, a retry waiting out its backoff
// or a snoozed job becomes available by the database's clock (now()), not
// the test process's. MakeDue is the test's hand on that clock: it makes
// every such job of some queues available now, so a test never sleeps for
// a delay. What fleet reports and decides by the time (long waits, the
// workload, the metrics, the masters' once-a-minute duties) reads a clock
// a test may set instead: Clock, given to fleet.Options.Now, shows the
// fleet as it would be at the clock's time, without waiting for it.
package fleettest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
)

// Main runs the tests of a package using the kit and exits: call it from
// TestMain. After the tests it stops the throwaway PostgreSQL cluster the
// kit started, if it started one, and, when the tests passed, fails the
// run if they leaked goroutines (go.uber.org/goleak): close what a test
// opens, stop the workers it starts. It is pgtest.Main.
func Main(m *testing.M) { pgtest.Main(m) }

// URL returns the URL of a fresh database with fleet's tables, used by
// this test alone, closed when the test ends and dropped after it (at the
// latest when Main ends; see docs/testing.md). It fails the test when
// no PostgreSQL server can be had, saying how to provide one, and when
// TestMain does not call Main.
func URL(t testing.TB) string {
	t.Helper()
	return pgtest.URL(t)
}

// Pool returns a connection pool on a fresh database (see URL), closed
// when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t)
}
