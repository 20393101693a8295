package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
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
