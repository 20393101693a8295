package cmd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/internal/pgbouncertest"
	"github.com/fleet-go/fleet/pgtest"
)

// poolerEnv is the environment of a command on url with database.pooler
// set to mode, and database.direct_url to direct unless it is empty.
func poolerEnv(url, mode, direct string) []string {
	env := []string{"APP_DATABASE__URL=" + url, "APP_DATABASE__POOLER=" + mode}
	if direct != "" {
		env = append(env, "APP_DATABASE__DIRECT_URL="+direct)
	}
	return env
}

// TestPoolerStockPgBouncerAcceptsFleet: a PgBouncer as installed (no
// ignore_startup_parameters) lets fleet's connections in, whatever
// database.pooler says, in both its pool modes. Each connection is the
// first its bouncer serves: what is checked is the startup, not what a
// wrong database.pooler does to the statements after it.
func TestPoolerStockPgBouncerAcceptsFleet(t *testing.T) {
	t.Parallel()
	direct := pgtest.URL(t)
	for _, mode := range []string{pgbouncertest.Session, pgbouncertest.Transaction} {
		for _, pooler := range []string{"none", "session", "transaction"} {
			b := pgbouncertest.Start(t, direct, pgbouncertest.Options{Mode: mode})
			if r := run(t, t.TempDir(), poolerEnv(b.URL(t, direct), pooler, ""), "fleet:masters", "--json"); r.code != 0 {
				t.Errorf("database.pooler = %s: fleet:masters through a %s-mode PgBouncer: %+v", pooler, mode, r)
			}
		}
	}
}

// TestPoolerCommandsAndWorker: with database.pooler set to the bouncer's
// mode, commands, a worker and its jobs run through PgBouncer, where one
// client's prepared statements or session state would meet the next: in
// transaction mode every client shares a single server connection, in
// session mode each client in turn gets one the last left (a worker
// holds several at once: its pool's and its LISTEN's).
func TestPoolerCommandsAndWorker(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{pgbouncertest.Session, pgbouncertest.Transaction} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			direct := pgtest.URL(t)
			size := 1
			if mode == pgbouncertest.Session {
				size = 6
			}
			b := pgbouncertest.Start(t, direct, pgbouncertest.Options{Mode: mode, PoolSize: size})
			url := b.URL(t, direct)
			dir := t.TempDir()
			env := poolerEnv(url, mode, "")
			for i := range 3 {
				if r := run(t, dir, env, "dispatch", "--name", "demo.noop", "--count", "5"); r.code != 0 {
					t.Fatalf("dispatch %d: %+v", i+1, r)
				}
			}
			for _, args := range [][]string{{"fleet:workload"}, {"fleet:jobs", "--pending"}, {"fleet:status", "--json"}, {"fleet:failed"}} {
				r := run(t, dir, env, args...)
				if args[0] == "fleet:status" && r.code == 1 && strings.Contains(r.stderr, "no fleet master is live") {
					continue
				}
				if r.code != 0 {
					t.Errorf("%v: %+v", args, r)
				}
			}
			r := run(t, dir, env, "fleet:work", "--stop-when-empty", "--concurrency", "2")
			if r.code != 0 {
				t.Fatalf("fleet:work: %+v", r)
			}
			wantWakeUps := "wake_up=LISTEN"
			if mode == pgbouncertest.Transaction {
				wantWakeUps = `wake_up="polled every 1s`
			}
			if !strings.Contains(r.stderr, `msg="database pooler" pooler=`+mode) || !strings.Contains(r.stderr, wantWakeUps) {
				t.Errorf("the worker's start-up line does not say pooler=%s and %s:\n%s", mode, wantWakeUps, r.stderr)
			}
			if n := countJobs(t, direct, "queue_jobs"); n != 0 {
				t.Errorf("%d jobs left after the worker", n)
			}
			if n := countJobs(t, direct, "fleet_jobs WHERE status = 'completed'"); n != 15 {
				t.Errorf("%d completed attempts, want 15", n)
			}
		})
	}
}

// TestPoolerControlPreparedStatementsCollide is the control of the test
// above: through a transaction-mode PgBouncer of one server connection,
// a client that prepares statements (database.pooler = "none") leaves
// them on the server connection, and the next such client fails on
// them. database.pooler = "transaction" is what avoids it.
func TestPoolerControlPreparedStatementsCollide(t *testing.T) {
	t.Parallel()
	direct := pgtest.URL(t)
	b := pgbouncertest.Start(t, direct, pgbouncertest.Options{Mode: pgbouncertest.Transaction, PoolSize: 1})
	env := poolerEnv(b.URL(t, direct), "none", "")
	dir := t.TempDir()
	var failed *result
	for range 3 {
		r := run(t, dir, env, "dispatch", "--name", "demo.noop")
		if r.code != 0 {
			failed = &r
			break
		}
	}
	if failed == nil || !strings.Contains(failed.stderr, "42P05") {
		t.Fatalf("three dispatches preparing statements through one shared server connection, want the second to fail with 42P05: %+v", failed)
	}
}

// TestPoolerMigrate: app migrate through a transaction pooler refuses,
// naming database.direct_url, and changes nothing; with
// database.direct_url it migrates on that; through a session pooler it
// migrates through the pooler.
func TestPoolerMigrate(t *testing.T) {
	t.Parallel()
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	empty := func() string {
		name := randomName(t, "fleet_pooler_")
		if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
		return urlWith(t, "", "", name)
	}
	dir := t.TempDir()

	direct := empty()
	tx := pgbouncertest.Start(t, direct, pgbouncertest.Options{Mode: pgbouncertest.Transaction})
	for _, args := range [][]string{{"migrate"}, {"migrate", "status"}, {"migrate", "down", "--set", "fleet"}} {
		r := run(t, dir, poolerEnv(tx.URL(t, direct), "transaction", ""), args...)
		if r.code == 0 || !strings.Contains(r.stderr, "database.direct_url") || !strings.Contains(r.stderr, `database.pooler = "transaction"`) {
			t.Errorf("%v through a transaction pooler without database.direct_url: %+v, want an error naming the keys", args, r)
		}
	}
	if n := countJobs(t, direct, "pg_tables WHERE tablename LIKE 'queue\\_%' OR tablename LIKE 'fleet\\_%'"); n != 0 {
		t.Errorf("the refused migrate created %d tables", n)
	}
	// migrate status exits 7 while a migration is pending.
	r := run(t, dir, poolerEnv(tx.URL(t, direct), "transaction", direct), "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, "applied ") || strings.Contains(r.stdout, "nothing to migrate") {
		t.Fatalf("migrate with database.direct_url: %+v", r)
	}
	if r := run(t, dir, poolerEnv(tx.URL(t, direct), "transaction", direct), "migrate", "status"); r.code != 0 {
		t.Errorf("migrate status with database.direct_url: %+v", r)
	}

	direct = empty()
	session := pgbouncertest.Start(t, direct, pgbouncertest.Options{Mode: pgbouncertest.Session})
	env := poolerEnv(session.URL(t, direct), "session", "")
	r = run(t, dir, env, "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, "applied ") || strings.Contains(r.stdout, "nothing to migrate") {
		t.Fatalf("migrate through a session pooler: %+v", r)
	}
	if r := run(t, dir, env, "migrate", "status"); r.code != 0 {
		t.Errorf("migrate status through a session pooler: %+v", r)
	}
}

// TestPoolerApplicationName: through a stock PgBouncer, a worker's
// sessions carry its application_name to PostgreSQL.
func TestPoolerApplicationName(t *testing.T) {
	t.Parallel()
	direct := pgtest.URL(t)
	b := pgbouncertest.Start(t, direct, pgbouncertest.Options{Mode: pgbouncertest.Session})
	w := apptest.Start(t, t.TempDir(), append(poolerEnv(b.URL(t, direct), "session", ""), "APP_FLEET__MASTER_TTL_SECS=3"),
		"fleet:work", "--queue", "default", "--worker-name", "pooled-1")
	conn, err := pgx.Connect(t.Context(), direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	eventually(t, 15*time.Second, "the worker's sessions named on the server", func() bool {
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'fleet:work pooled-1'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	eventually(t, 10*time.Second, "the worker saying it is behind a session pooler", func() bool {
		return strings.Contains(w.Output(), `msg="database pooler" pooler=session wake_up=LISTEN`)
	})
}

// TestPoolerDirectURLErrors: a database.direct_url that is wrong is an
// error naming the key, and its password never shows, neither in
// migrate's error nor in the master's warning.
func TestPoolerDirectURLErrors(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	missing := urlWith(t, "", "", randomName(t, "fleet_missing_"))
	r := run(t, dir, poolerEnv(url, "none", missing), "migrate")
	if r.code != 4 || !strings.Contains(r.stderr, "does not exist") || !strings.Contains(r.stderr, "fix database.direct_url") {
		t.Errorf("migrate on a database.direct_url naming no database: %+v, want exit 4 naming the key", r)
	}
	r = run(t, dir, poolerEnv(url, "transaction", "postgres://fleet:hunter2@[::1"), "migrate")
	if r.code == 0 || !strings.Contains(r.stderr, "database.direct_url") || strings.Contains(r.stderr, "hunter2") {
		t.Errorf("migrate on an unparseable database.direct_url: %+v, want an error naming the key, without the password", r)
	}
	closed := "postgres://fleet:hunter2@127.0.0.1:1/fleet?connect_timeout=2"
	r = run(t, dir, poolerEnv(url, "transaction", closed), "migrate")
	if r.code != 4 || !strings.Contains(r.stderr, "postgres://fleet:xxxxx@127.0.0.1:1/fleet") || strings.Contains(r.stderr, "hunter2") {
		t.Errorf("migrate on an unreachable database.direct_url: %+v, want exit 4 with the URL redacted", r)
	}
	m := apptest.Start(t, dir, append(fleetEnv(url, "APP_DATABASE__POOLER=transaction", "APP_DATABASE__DIRECT_URL="+closed),
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=1"), "fleet")
	eventually(t, 15*time.Second, "the master's warning about database.direct_url", func() bool {
		return strings.Contains(m.Output(), "database.direct_url cannot be reached: workers poll for jobs until it can")
	})
	eventually(t, 15*time.Second, "the master's worker started", func() bool {
		return strings.Contains(m.Output(), `wake_up="LISTEN on database.direct_url"`)
	})
	if strings.Contains(m.Output(), "hunter2") {
		t.Errorf("the master's output shows database.direct_url's password:\n%s", m.Output())
	}
}
