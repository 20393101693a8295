package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgcluster"
)

// cappedRole creates a login role with a connection limit on the
// scenario's database and returns the URL that connects as it. The role
// is a member of postgres, so it may use every table fleet made (a
// superuser is exempt from connection limits; a member is not).
func cappedRole(t *testing.T, d *mmDB, dbURL string, limit int) (string, string) {
	t.Helper()
	role := fmt.Sprintf("capped_%d", time.Now().UnixNano())
	d.exec(fmt.Sprintf(`CREATE ROLE %s LOGIN CONNECTION LIMIT %d IN ROLE postgres`, role, limit))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = d.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		_, _ = d.pool.Exec(ctx, `DROP ROLE IF EXISTS `+role)
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String(), role
}

func (d *mmDB) exec(sql string, args ...any) {
	d.t.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

// A master capped by fleet.max_connections never holds more than the cap,
// however many processes its backlog calls for, so the application's own
// dispatch still connects on a role with a connection limit; every job
// runs once. (Uncapped, six workers of four connections would take every
// one of the role's slots.)
func testConnectionCap(t *testing.T, srv *mmServer) {
	dbURL := srv.url(t)
	d := openDB(t, dbURL)
	const limit, capped, procs = 16, 14, 6 // 6 workers × 2 + the master's 2
	appURL, role := cappedRole(t, d, dbURL, limit)
	m := apptest.Start(t, t.TempDir(), mmEnv(appURL, "capped",
		fmt.Sprintf("APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=%d", procs),
		"APP_FLEET__SUPERVISORS__WORK__BALANCE=auto",
		"APP_FLEET__SUPERVISORS__WORK__MIN_PROCESSES=1",
		"APP_FLEET__BALANCE_COOLDOWN_SECS=1",
		"APP_FLEET__BALANCE_MAX_SHIFT=6",
		fmt.Sprintf("APP_FLEET__MAX_CONNECTIONS=%d", capped)), "fleet")
	apptest.Eventually(t, 20*time.Second, "the capped master's first beat", func() bool {
		return d.count(`SELECT count(*) FROM fleet_masters WHERE name = 'capped'`) == 1
	})
	const n = 200
	file := dispatchTo(t, appURL, t.TempDir(), "default", n, 400)

	peak, full := 0, false
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		peak = max(peak, d.count(`SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role))
		if !full {
			v := masters(t, dbURL, false)
			for _, mm := range v.Masters {
				if mm.Name == "capped" && processes(t, mm) == procs {
					full = true
					// At full size the application still gets a connection.
					if r := apptest.Run(t, t.TempDir(), apptest.DBEnv(appURL), "dispatch", "--name", "test.sleep",
						"--payload", fmt.Sprintf(`{"ms":1,"file":%q}`, file)); r.Code != 0 {
						t.Errorf("the application's dispatch beside a capped fleet at full size: %+v", r)
					}
					if mm.Connections == nil || mm.Connections.Total != capped || mm.Connections.Open > capped {
						t.Errorf("fleet:masters shows connections %+v, want a budget of %d and no more open", mm.Connections, capped)
					}
				}
			}
		}
		if d.count(`SELECT count(*) FROM queue_jobs`) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !full {
		t.Errorf("the master never reached its %d processes", procs)
	}
	if peak > capped {
		t.Errorf("the capped fleet held %d connections at its peak, over fleet.max_connections = %d", peak, capped)
	}
	stopMasters(t, m)
	checkOutcomes(t, d, file, n+1, false)
	if out := m.Output(); strings.Contains(out, "53300") || strings.Contains(out, "did not get ready") {
		t.Errorf("the capped fleet ran out of connections or killed a worker:\n%s", tail(out, 3000))
	}
	t.Logf("fleet.max_connections = %d, role limit %d: peak %d connections with %d processes, %d jobs once each", capped, limit, peak, procs, n+1)
}

// TestFewConnections runs a fleet on servers with few connections, as an
// application's role that is no superuser: fleet reads the server's room
// as it starts and leaves database.reserve_connections free.
//
// At max_connections 12 (9 for ordinary roles) the master degrades, with
// a warning naming the numbers and the key, to what leaves the reserve
// free, so that the application's `app dispatch` and `fleet:status` still
// work beside it; a server filled up to the last slot answers them with a
// clear error and exit 4.
//
// At max_connections 7 (4 for ordinary roles) the fleet's workers lose
// their sessions while every slot is taken, for longer than their jobs'
// timeout and grace: the finished jobs' outcomes wait, the master does not
// kill the worker for them, and every job completes once, on its first
// attempt, with no lost or failed attempt.
func TestFewConnections(t *testing.T) {
	faultScenario(t)
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skipf("starts PostgreSQL clusters of its own, which needs PostgreSQL's server binaries: %v", err)
	}
	t.Run("MaxConnections12", testTwelveConnections)
	t.Run("MaxConnections7", testSevenConnections)
}

// fewConnections starts a private cluster of max_connections n with a
// migrated database app, and returns the superuser's URL of it, the URL
// of an ordinary role (a member of postgres, which owns fleet's tables,
// but no superuser: it never gets the reserved slots) and the test's own
// pool, a superuser's, which the test uses one statement at a time (one
// session).
func fewConnections(t *testing.T, n int) (string, string, *mmDB) {
	t.Helper()
	c, err := startPrivateCluster(func(o *pgcluster.Options) {
		o.Settings = append(o.Settings, fmt.Sprintf("max_connections=%d", n))
	})
	if err != nil {
		t.Fatalf("private cluster: %v", err)
	}
	t.Cleanup(c.remove)
	admin, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`CREATE DATABASE app`, `CREATE ROLE app LOGIN IN ROLE postgres`} {
		if _, err := admin.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	_ = admin.Close(context.Background())
	super := c.URL("app")
	if r := apptest.Run(t, t.TempDir(), apptest.DBEnv(super), "migrate"); r.Code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	u, err := url.Parse(super)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("app")
	d := openDB(t, super)
	return super, u.String(), d
}

// fill opens sessions on url until the server refuses one for want of a
// slot (SQLSTATE 53300), and returns them; the test's end closes them.
func fill(t *testing.T, url string) []*pgx.Conn {
	t.Helper()
	var conns []*pgx.Conn
	t.Cleanup(func() { closeAll(conns) })
	for range 300 {
		c, err := pgx.Connect(t.Context(), url)
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "53300" {
			return conns
		}
		if err != nil {
			t.Fatalf("fill the server: %v", err)
		}
		conns = append(conns, c)
	}
	t.Fatal("the server never refused a session")
	return nil
}

func closeAll(conns []*pgx.Conn) {
	for _, c := range conns {
		_ = c.Close(context.Background())
	}
}

// fleetSessions counts the sessions of the fleet's processes.
func fleetSessions(d *mmDB) int {
	return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'fleet master %' OR application_name LIKE 'fleet:work %'`)
}

// checkFirstAttempts checks that every history row of the test.sleep
// jobs is a completion of the job's first attempt.
func checkFirstAttempts(t *testing.T, d *mmDB, n int) {
	t.Helper()
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.sleep' AND (status <> 'completed' OR attempt <> 1)`); k != 0 {
		t.Errorf("%d history rows are not a completed first attempt", k)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.sleep' AND status = 'completed' AND attempt = 1`); k != n {
		t.Errorf("%d completed first attempts, want %d", k, n)
	}
}

func testTwelveConnections(t *testing.T) {
	_, app, d := fewConnections(t, 12)
	d.count(`SELECT 1`) // the test's own session is open before the master reads the room
	m := apptest.Start(t, t.TempDir(), mmEnv(app, "few", "APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2"), "fleet")
	apptest.Eventually(t, 20*time.Second, "the master's worker at work", func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'fleet:work %'`) > 0
	})
	var budget int
	if _, line, ok := strings.Cut(m.Output(), "connections: at most "); !ok {
		t.Fatalf("no budget line:\n%s", m.Output())
	} else if _, err := fmt.Sscan(line, &budget); err != nil {
		t.Fatalf("budget line %q: %v", line, err)
	}
	out := m.Output()
	for _, want := range []string{"level=WARN", "the fleet's connections do not fit in what the server has free",
		"max_connections 12 − 3 reserved − ", "kept free (database.reserve_connections)", "max_processes of supervisor work 1 of 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("the master's log lacks %q:\n%s", want, tail(out, 3000))
		}
	}
	// The reserve: 3 of the 9 ordinary slots, with the test's session
	// and the fleet's budget in the other 6.
	if budget > 5 {
		t.Errorf("a budget of %d on a server with room for 5", budget)
	}

	const n = 40
	dir := t.TempDir()
	file := dispatchTo(t, app, dir, "default", n-1, 100) // the application's dispatch beside the fleet
	peak, statuses := 0, 0
	deadline := time.Now().Add(apptest.Slack * time.Minute)
	for d.count(`SELECT count(*) FROM queue_jobs WHERE name = 'test.sleep'`) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("jobs left after %s", apptest.Slack*time.Minute)
		}
		peak = max(peak, fleetSessions(d))
		if statuses < 5 {
			statuses++
			if r := apptest.Run(t, t.TempDir(), apptest.DBEnv(app), "fleet:status"); r.Code != 0 || !strings.Contains(r.Stdout, "Running") {
				t.Errorf("fleet:status beside the fleet at work: %+v", r)
			}
			if r := apptest.Run(t, dir, apptest.DBEnv(app), "dispatch", "--name", "test.sleep",
				"--payload", fmt.Sprintf(`{"ms":100,"file":%q}`, file)); r.Code != 0 {
				t.Errorf("the application's dispatch beside the fleet at work: %+v", r)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if peak > budget {
		t.Errorf("the fleet held %d sessions at its peak, over its budget of %d", peak, budget)
	}
	if strings.Contains(m.Output(), "53300") {
		t.Errorf("the fleet was refused a connection:\n%s", tail(m.Output(), 3000))
	}

	// A server full to the last ordinary slot: the application's commands
	// say so, and exit 4.
	held := fill(t, app)
	for _, args := range [][]string{{"fleet:status"}, {"dispatch", "--name", "test.sleep", "--payload", `{"ms":1}`}} {
		r := apptest.Run(t, t.TempDir(), apptest.DBEnv(app), args...)
		if r.Code != 4 || !strings.Contains(r.Stderr, "the database refused a connection: too many connections (") ||
			!strings.Contains(r.Stderr, "SQLSTATE 53300") {
			t.Errorf("%v on a full server: %+v, want exit 4 and the refusal", args, r)
		}
	}
	closeAll(held)
	stopMasters(t, m)
	checkOutcomes(t, d, file, n+statuses-1, false)
	checkFirstAttempts(t, d, n+statuses-1)
	t.Logf("max_connections 12: a budget of %d, peak %d fleet sessions, %d jobs once each, %d sessions filled the server",
		budget, peak, n+statuses-1, len(held))
}

func testSevenConnections(t *testing.T) {
	super, app, d := fewConnections(t, 7)
	d.count(`SELECT 1`)
	// One worker of 10 jobs at once; a job's timeout of 3 s and a grace of
	// 1 s: the master's overdue check takes a job reserved 9 s ago for a
	// stuck one (timeout, grace and 5 s).
	m := apptest.Start(t, t.TempDir(), mmEnv(app, "seven",
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=1",
		"APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=10",
		"APP_QUEUE__TIMEOUT_SECS=3", "APP_QUEUE__TIMEOUT_GRACE_SECS=1",
		"APP_FLEET__MASTER_TTL_SECS=10"), "fleet")
	apptest.Eventually(t, 20*time.Second, "the master's worker at work", func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'fleet:work %'`) > 0
	})
	if out := m.Output(); !strings.Contains(out, "kept free for the application") {
		t.Errorf("the master does not say that it takes from the reserve:\n%s", tail(out, 3000))
	}

	// A first wave that fills the worker's slots; then every slot of the
	// server is taken and the worker's sessions are ended, for longer
	// than the overdue check waits.
	dir := t.TempDir()
	const first, second = 10, 20
	file := dispatchTo(t, super, dir, "default", first, 1500)
	apptest.Eventually(t, 20*time.Second, "the worker runs the first wave", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == first
	})
	held := fill(t, super)
	ended := d.count(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'fleet:work %') t`)
	held = append(held, fill(t, super)...)
	starved := time.Now()
	const killed = "past its timeout and grace: killing it"
	apptest.Eventually(t, 30*time.Second, "the master spares the worker whose finished jobs wait", func() bool {
		out := m.Output()
		return strings.Contains(out, "wait for the database to take their outcomes: not killing it") || strings.Contains(out, killed)
	})
	if out := m.Output(); strings.Contains(out, killed) {
		t.Fatalf("the master killed the worker whose finished jobs wait for a connection:\n%s", tail(out, 3000))
	}
	time.Sleep(2 * time.Second) // two more overdue checks
	closeAll(held)
	held = nil
	starvedFor := time.Since(starved)
	if !apptest.Within(30*time.Second, func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE name = 'test.sleep'`) == 0
	}) {
		t.Fatalf("not within %s: the first wave written; the server's sessions:\n%s", apptest.Slack*30*time.Second, sessions(d))
	}
	dispatchTo(t, super, dir, "default", second, 100)
	apptest.Eventually(t, 30*time.Second, "the second wave done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE name = 'test.sleep'`) == 0
	})
	out := m.Output()
	stopMasters(t, m)
	if strings.Contains(out, killed) {
		t.Errorf("the master killed a worker for jobs past their timeout:\n%s", tail(out, 3000))
	}
	checkOutcomes(t, d, file, first+second, false)
	checkFirstAttempts(t, d, first+second)
	t.Logf("max_connections 7: %d worker sessions ended, every slot taken for %s; %d jobs once each, all first attempts",
		ended, starvedFor.Round(100*time.Millisecond), first+second)
}

// sessions lists the server's sessions, for a failure's message.
func sessions(d *mmDB) string {
	rows, err := d.pool.Query(context.Background(), `SELECT pid, coalesce(usename, ''), application_name, coalesce(state, ''), backend_type, left(coalesce(query, ''), 80)
		FROM pg_stat_activity ORDER BY backend_type, pid`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var pid int
		var user, app, state, typ, query string
		if err := rows.Scan(&pid, &user, &app, &state, &typ, &query); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "%d %s %q %s %s %q\n", pid, user, app, state, typ, query)
	}
	return b.String()
}
