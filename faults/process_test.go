package faults_test

// Scenarios of processes that die, hang or kill themselves, and of a
// master started while the database is away; run by TestMultiMaster.

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgcluster"
)

// testKilledChild: kill -9 of one child of master a mid-job, master b
// trusted beside it. a sees its child die and releases what it held (the
// attempts count, as lost), a replacement starts, and every job completes
// exactly once: the killed child's jobs after one lost attempt each.
func testKilledChild(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	am := d.waitMember(a, 10*time.Second, "master a trusted", member.trusted)
	d.waitMember(b, 10*time.Second, "master b trusted", member.trusted)
	const n = 12
	file := dispatchTo(t, url, dir, "default", n, 1500)
	apptest.Eventually(t, 10*time.Second, "a's child running two jobs", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 2
	})
	kids := apptest.Children(a.PID())
	if len(kids) != 1 {
		t.Fatalf("master a has children %v, want one", kids)
	}
	held := d.ids(`SELECT id FROM queue_jobs WHERE reserved_master = $1`, am.Instance)
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 10*time.Second, "a replacement child", func() bool {
		now := apptest.Children(a.PID())
		return len(now) == 1 && now[0] != kids[0]
	})
	apptest.Eventually(t, 30*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	h := checkOutcomes(t, d, file, n, true)
	if lost := h.lost(); !slices.Equal(lost, held) {
		t.Errorf("lost attempts of jobs %v, want those the killed child held: %v", lost, held)
	}
	stopMasters(t, a, b)
}

// testHangingChild: the first worker started hangs before it reports
// ready. Once its master has been trusted for a ttl it kills the worker
// after fleet.start_timeout_secs and starts another, which runs every job.
func testHangingChild(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__START_TIMEOUT_SECS=2",
		apptest.EnvHangOnce+"="+filepath.Join(dir, "hung")), "fleet")
	// The hung child is the one whose line says so: the master prefixes
	// each line of a child's output with "[SUPERVISOR GROUP PID] ". (Its
	// children at the moment the line is seen may already be its
	// replacement on a loaded machine.)
	hungLine := regexp.MustCompile(`\[work default (\d+)\] test: this worker hangs before it reports ready`)
	var hung int
	apptest.Eventually(t, 10*time.Second, "a hung child", func() bool {
		m := hungLine.FindStringSubmatch(a.Output())
		if m == nil {
			return false
		}
		hung, _ = strconv.Atoi(m[1])
		return hung > 0
	})
	const n = 6
	file := dispatchTo(t, url, dir, "default", n, 200)
	// Trusted after a ttl and a beat (4 s), then the start timeout (2 s).
	apptest.Eventually(t, 15*time.Second, "the hung child killed", func() bool { return !apptest.Alive(hung) })
	// The master logs why before it kills; its output reaches the test
	// through a pipe, so the line may arrive just after the child is gone.
	if !apptest.Within(5*time.Second, func() bool {
		return strings.Contains(a.Output(), "did not get ready within the start timeout")
	}) {
		t.Errorf("no line saying why the child was killed")
	}
	apptest.Eventually(t, 20*time.Second, "every job done by the replacement", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, n, false)
	stopMasters(t, a)
}

// testPoisonJob: a job that kills its child every time (test.exit, 2
// tries) alone in a process of one slot: its first two crashes spend no
// try (recorded as lost: the process might have died of something else);
// then it is a suspect and runs in an isolation process, where each crash
// is its own, and it ends in queue_failed_jobs after its 2 tries there,
// with how its process ended, while the jobs of the other queue keep
// flowing, none lost.
func testPoisonJob(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a",
		"APP_FLEET__SUPERVISORS__POISON__QUEUES=poison",
		"APP_FLEET__SUPERVISORS__POISON__BALANCE=off",
		"APP_FLEET__SUPERVISORS__POISON__MAX_PROCESSES=1",
		"APP_FLEET__SUPERVISORS__POISON__CONCURRENCY=1"), "fleet")
	r := apptest.Run(t, dir, apptest.DBEnv(url), "dispatch", "--name", "test.exit", "--queue", "poison", "--tries", "2")
	if r.Code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	const n = 20
	file := dispatchTo(t, url, dir, "default", n, 300)
	apptest.Eventually(t, 30*time.Second, "the poison job failed", func() bool {
		return d.count(`SELECT count(*) FROM queue_failed_jobs WHERE name = 'test.exit'`) == 1
	})
	if k := d.count(`SELECT count(*) FROM queue_failed_jobs WHERE name = 'test.exit' AND attempts = 4 AND max_tries = 4
		AND error LIKE 'crashed its process: the process exited with status 3 while running this job alone, in an isolation process (attempt 4 of 4 tries)%'`); k != 1 {
		t.Errorf("the poison job's failed row does not say it crashed its isolation process at its last try")
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.exit' AND status = 'lost'
		AND error LIKE 'lost: its process exited with status 3 while running it and no other job;%'`); k != 2 {
		t.Errorf("%d lost attempts of the poison job recorded, want 2", k)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.exit' AND status = 'failed'`); k != 2 {
		t.Errorf("%d failed attempts of the poison job recorded, want its 2 tries in isolation", k)
	}
	apptest.Eventually(t, 30*time.Second, "every other job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, n, false)
	stopMasters(t, a)
}

// testLongJobUnderAMaster: a healthy job three times longer than the ttl,
// run under master a while master b is trusted, completes once with no
// attempt lost: the lease lives as long as its holder's member row beats,
// not for a ttl.
func testLongJobUnderAMaster(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	d.waitMember(a, 10*time.Second, "master a's row", func(member) bool { return true })
	file := dispatchTo(t, url, dir, "default", 1, int(3*mmTTL/time.Millisecond))
	apptest.Eventually(t, 10*time.Second, "a running the job", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 1
	})
	b := apptest.Start(t, dir, mmEnv(url, "b"), "fleet")
	d.waitMember(b, 10*time.Second, "master b trusted", member.trusted)
	apptest.Eventually(t, 3*mmTTL+10*time.Second, "the job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, 1, false)
	stopMasters(t, a, b)
}

// testMasterStartsWhileDatabaseIsDown: a master started while PostgreSQL
// is stopped fails at once with one line naming the database (its
// password hidden; nothing else, so no worker was started) and leaves no
// row; started again
// once PostgreSQL is back (as systemd's Restart=always does), it works
// off the jobs dispatched before the outage, each exactly once.
func testMasterStartsWhileDatabaseIsDown(t *testing.T, _ *mmServer) {
	cluster := ownCluster(t)
	url := cluster.URL("postgres")
	withPassword := strings.Replace(url, "postgres://postgres@", "postgres://postgres:hunter2@", 1)
	if withPassword == url {
		t.Fatalf("cannot add a password to %s", url)
	}
	dir := t.TempDir()
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "migrate"); r.Code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	const n = 10
	file := dispatchTo(t, url, dir, "default", n, 200)
	if err := cluster.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	down := apptest.Start(t, dir, mmEnv(withPassword, "a"), "fleet")
	select {
	case <-down.Done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a master started without its database still runs after 30 s")
	}
	out := strings.TrimSpace(down.Output())
	if code := down.Cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("a master started without its database exited 0")
	}
	if strings.Count(out, "\n") != 0 || !strings.Contains(out, "cannot reach database") || strings.Contains(out, "hunter2") {
		t.Errorf("want one line naming the database without its password, got:\n%s", out)
	}
	if err := cluster.restart(); err != nil {
		t.Fatal(err)
	}
	d := openDB(t, url)
	if k := d.count(`SELECT count(*) FROM fleet_masters`); k != 0 {
		t.Errorf("%d member rows written by a master that could not reach the database", k)
	}
	a := apptest.Start(t, dir, mmEnv(withPassword, "a"), "fleet")
	apptest.Eventually(t, 30*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, n, false)
	stopMasters(t, a)
}

// ownCluster starts a private cluster for one scenario that stops or
// freezes it, and removes it at the test's end.
func ownCluster(t *testing.T) *privateCluster {
	t.Helper()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Fatalf("this scenario stops its own PostgreSQL cluster, which needs PostgreSQL's server binaries (apt-get install postgresql): %v", err)
	}
	cluster, err := startPrivateCluster()
	if err != nil {
		t.Fatal(fmt.Errorf("private cluster: %w", err))
	}
	t.Cleanup(cluster.remove)
	return cluster
}
