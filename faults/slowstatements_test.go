package faults_test

import (
	"context"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
)

// TestSlowStatements: every session of the database has a statement
// timeout of 20 ms (ALTER DATABASE), two goroutines spin on the machine's
// cores, and a master of 2 processes × 64 slots works 20,000 no-op jobs.
// Statements time out all the time, and the database still answers: a
// timed-out finish or claim is retried in smaller batches, and nothing
// treats it as an outage. Every job completes exactly once (one history
// row each, completed, attempt 1), none fails, no attempt is lost,
// nothing is left reserved, and the master is still running at the end.
// The deadline only catches a hang.
func TestSlowStatements(t *testing.T) {
	faultScenario(t)
	cluster := ownCluster(t)
	const db = "slow"
	admin := openDB(t, cluster.URL("postgres"))
	admin.exec(`CREATE DATABASE ` + db)
	url := cluster.URL(db)
	dir := t.TempDir()
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "migrate"); r.Code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	const n = 20000
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "dispatch", "--name", "demo.noop", "--count", strconv.Itoa(n)); r.Code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	// From here on, every new session of the database has the timeout;
	// the test's own pool connects after it, with a timeout of its own
	// turned off.
	admin.exec(`ALTER DATABASE ` + db + ` SET statement_timeout = '20ms'`)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	d := openDB(t, url+sep+"options=-c%20statement_timeout%3D0")
	if got := d.count(`SELECT count(*) FROM queue_jobs`); got != n {
		t.Fatalf("%d jobs queued, want %d", got, n)
	}
	var timeout string
	if err := admin.pool.QueryRow(context.Background(),
		`SELECT setconfig::text FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = $1`, db).
		Scan(&timeout); err != nil || !strings.Contains(timeout, "statement_timeout=20ms") {
		t.Fatalf("the database's settings are %q (%v), want statement_timeout=20ms", timeout, err)
	}

	stopHogs := cpuHogs(2)
	defer stopHogs()

	m := apptest.Start(t, dir, apptest.FleetEnv(url,
		"APP_FLEET__NAME=slow",
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2",
		"APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=64"), "fleet")
	began := time.Now()
	// A drain of 20,000 no-op jobs takes seconds on an idle machine; the
	// deadline only catches a hang.
	apptest.Eventually(t, time.Minute, "every job done", func() bool {
		select {
		case <-m.Done:
			t.Fatalf("the master exited (status %d) with %d jobs left", m.Cmd.ProcessState.ExitCode(),
				d.count(`SELECT count(*) FROM queue_jobs`))
		default:
		}
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	t.Logf("%d jobs drained in %v under a 20 ms statement timeout and two CPU hogs", n, time.Since(began).Round(time.Millisecond))
	stopHogs()

	select {
	case <-m.Done:
		t.Errorf("the master exited (status %d)", m.Cmd.ProcessState.ExitCode())
	default:
	}
	if k := d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`); k != 0 {
		t.Errorf("%d jobs left reserved", k)
	}
	if k := d.count(`SELECT count(*) FROM queue_failed_jobs`); k != 0 {
		t.Errorf("%d jobs failed", k)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'lost'`); k != 0 {
		t.Errorf("%d attempts lost", k)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE status <> 'completed'`); k != 0 {
		t.Errorf("%d history rows not completed", k)
	}
	if k := d.count(`SELECT count(DISTINCT job_id) FROM fleet_jobs WHERE status = 'completed'`); k != n {
		t.Errorf("%d jobs completed, want %d", k, n)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs`); k != n {
		t.Errorf("%d history rows, want one per job: %d", k, n)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE attempt <> 1`); k != 0 {
		t.Errorf("%d history rows of an attempt other than the first", k)
	}
	out := m.Output()
	splits := regexp.MustCompile(`.*statement timeout on a (finish|claim) of \d+ jobs.*`).FindAllString(out, -1)
	t.Logf("%d log lines of timed-out batches:\n%s", len(splits), strings.Join(splits, "\n"))
	for _, bad := range []string{"killing it", "fenced", "unreachable"} {
		if c := strings.Count(out, bad); c > 0 {
			t.Errorf("the log says %q %d times", bad, c)
		}
	}
	if t.Failed() {
		return
	}
	if err := m.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, m, 4*20*time.Second); code != 0 {
		t.Errorf("the master exited %d after SIGTERM", code)
	}
}

// cpuHogs starts k goroutines that spin until the returned stop is
// called (safe twice), which waits for them.
func cpuHogs(k int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for x := 0; ; x++ {
				if x%(1<<16) == 0 {
					select {
					case <-done:
						return
					default:
					}
					runtime.Gosched()
				}
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
