package faults_test

// A primary and a streaming standby on private clusters, two masters on a
// multi-host URL over both (target_session_attrs=read-write), and the
// primary crashed mid-drain and the standby promoted:
//
//   - with synchronous replication nothing acknowledged is lost: every job
//     runs exactly once, none fails, and work resumes within 5 s of the
//     promotion;
//   - with an asynchronous standby whose WAL sender was stalled (SIGSTOP)
//     for 2 s before the crash, the new primary has claims whose outcomes
//     it lost: jobs reserved under live workers that believe them done.
//     Each worker's reconcile releases those within a beat and a ttl of
//     the promotion, without spending a try, so with one try nothing
//     fails; those jobs, and those whose claims were lost, run again
//     (at least once), and no worker is killed.
//
// Every job dispatches with --tries 1, so a lost attempt counted against
// its tries would fail it.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgcluster"
	"github.com/fleet-go/fleet/store"
)

func TestFailover(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Fatalf("the failover scenarios run a primary and a standby of their own, which needs PostgreSQL's server binaries (apt-get install postgresql): %v", err)
	}
	t.Run("SynchronousStandby", func(t *testing.T) { t.Parallel(); testFailover(t, true) })
	t.Run("AsynchronousStandbyStalled", func(t *testing.T) { t.Parallel(); testFailover(t, false) })
}

// freePort returns a TCP port of 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// failoverPair starts a primary listening on TCP and a streaming standby
// of it named "standby", synchronous when sync, with a migrated database
// fleet, and returns them with the multi-host read-write URL of fleet over
// both.
func failoverPair(t *testing.T, sync bool) (primary, standby *privateCluster, url string) {
	t.Helper()
	settings := []string(nil)
	if sync {
		// Commits wait until the standby has the WAL (pgcluster turns
		// synchronous_commit off by default).
		settings = []string{"synchronous_commit=on", "synchronous_standby_names=standby"}
	}
	port := freePort(t)
	primary, err := startPrivateCluster(func(o *pgcluster.Options) { o.Port, o.Settings = port, settings })
	if err != nil {
		t.Fatalf("primary: %v", err)
	}
	t.Cleanup(primary.remove)
	base, err := os.MkdirTemp("", "fleet-mm-pg-")
	if err != nil {
		t.Fatal(err)
	}
	standby = &privateCluster{base: base, opts: pgcluster.Options{DataDir: filepath.Join(base, "data"), Port: freePort(t)}}
	t.Cleanup(standby.remove)
	// As root the server runs as the postgres user, which must traverse it.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if standby.Cluster, err = pgcluster.StartStandby(ctx, primary.Cluster, "standby", standby.opts); err != nil {
		t.Fatalf("standby: %v", err)
	}
	admin, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	want := "async"
	if sync {
		want = "sync"
	}
	apptest.Eventually(t, 10*time.Second, "the standby streaming, "+want, func() bool {
		var state string
		err := admin.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'`).Scan(&state)
		return err == nil && state == want
	})
	if _, err := admin.Exec(ctx, `CREATE DATABASE fleet`); err != nil {
		t.Fatal(err)
	}
	url = pgcluster.MultiHostURL("fleet", "read-write", primary.Cluster, standby.Cluster)
	if r := apptest.Run(t, t.TempDir(), apptest.DBEnv(url), "migrate"); r.Code != 0 {
		t.Fatalf("migrate through %s: %+v", url, r)
	}
	return primary, standby, url
}

// testFailover crashes the primary under two masters draining jobs and
// promotes the standby; without sync, the primary's WAL sender is stalled
// for 2 s first, while jobs complete.
func testFailover(t *testing.T, sync bool) {
	primary, standby, url := failoverPair(t, sync)
	ctx := context.Background()
	before := openDB(t, url) // on the primary; its sessions die with it
	dir := t.TempDir()
	// Two processes of two jobs each per master, and a short timeout, so
	// that the master's overdue check would find a reservation left
	// behind within the scenario (timeout + grace + 5 s of slack).
	env := []string{"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2", "APP_QUEUE__TIMEOUT_SECS=4", "APP_QUEUE__TIMEOUT_GRACE_SECS=1"}
	a := apptest.Start(t, dir, mmEnv(url, "a", env...), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b", env...), "fleet")
	for _, m := range []*apptest.App{a, b} {
		before.waitMember(m, 15*time.Second, "both masters trusted", member.trusted)
	}
	apptest.Eventually(t, 10*time.Second, "two workers under each master", func() bool {
		return len(apptest.Children(a.PID())) == 2 && len(apptest.Children(b.PID())) == 2
	})
	workers := append(apptest.Children(a.PID()), apptest.Children(b.PID())...)

	const n, ms = 300, 150
	file := dispatchTo(t, url, dir, "default", n, ms, "--tries", "1")
	apptest.Eventually(t, 10*time.Second, "the drain under way", func() bool {
		return before.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`) >= 24
	})
	if !sync {
		var sender int
		if err := before.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_replication`).Scan(&sender); err != nil {
			t.Fatal(err)
		}
		done := before.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`)
		freeze(t, sender)
		// The stall is the fault itself: jobs go on completing on the
		// primary, and none of it reaches the standby.
		time.Sleep(2 * time.Second)
		if k := before.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`) - done; k < 16 {
			t.Fatalf("%d jobs completed during the stall: the test proves nothing", k)
		}
	}
	// A session on the standby, which outlives its promotion, reads the
	// clock the moment it is promoted.
	onStandby, err := pgx.Connect(ctx, standby.URL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	defer onStandby.Close(ctx)
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	var promotedAt time.Time
	if err := onStandby.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&promotedAt); err != nil {
		t.Fatal(err)
	}
	t.Logf("primary crashed; standby promoted %s later", time.Since(crashed).Round(time.Millisecond))
	d := openDB(t, url) // now on the promoted standby

	// What the new primary has reserved at the promotion: claims it kept.
	// A job of 150 ms claimed before the stall was done before the crash,
	// so with the stall each is either a phantom (its worker wrote its
	// outcome to the old primary and believes it done) or one whose
	// outcome write failed at the crash and is being retried. Each must be
	// gone (released, or written) within a beat and a ttl.
	type reservation struct{ id, lease int64 }
	var atPromotion []reservation
	rows, err := d.pool.Query(ctx, `SELECT id, lease FROM queue_jobs WHERE reserved_by IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	var r reservation
	if _, err := pgx.ForEachRow(rows, []any{&r.id, &r.lease}, func() error { atPromotion = append(atPromotion, r); return nil }); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, mmBeat+mmTTL+10*time.Second, "a beat and a ttl past the promotion", func() bool {
		return d.now().Sub(promotedAt) >= mmBeat+mmTTL
	})
	for _, r := range atPromotion {
		if d.count(`SELECT count(*) FROM queue_jobs WHERE id = $1 AND lease = $2`, r.id, r.lease) != 0 {
			t.Errorf("job %d still reserved under the lease it had at the promotion, a beat and a ttl later", r.id)
		}
	}

	apptest.Eventually(t, 40*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	h := readHistory(t, d)
	runs := apptest.ReadRuns(t, file)
	twice := 0
	for id, k := range runs {
		if k > 1 {
			twice++
		}
		if sync && k != 1 {
			t.Errorf("job %d ran %d times with a synchronous standby", id, k)
		}
	}
	for id, st := range h {
		if st["completed"] != 1 {
			t.Errorf("job %d has %d 'completed' history rows: %v", id, st["completed"], st)
		}
		for s := range st {
			if s != "completed" && s != "lost" {
				t.Errorf("job %d has a %q history row: %v", id, s, st)
			}
		}
		if runs[id] < 1 {
			t.Errorf("job %d completed but never ran", id)
		}
	}
	if len(h) != n || len(runs) != n {
		t.Errorf("%d jobs have history and %d ran, want %d", len(h), len(runs), n)
	}
	// Every lost attempt was released by its own live worker's reconcile,
	// none by a master presuming a holder dead or killing it.
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'lost' AND error IS DISTINCT FROM $1`, store.UnheldError); k != 0 {
		t.Errorf("%d lost attempts not released by their worker's reconcile", k)
	}
	released := d.count(`SELECT count(*) FROM fleet_jobs WHERE status = 'lost' AND error = $1`, store.UnheldError)
	if !sync && released == 0 {
		t.Error("no reservation of a job already done was released: the test proves nothing about phantom reservations")
	}
	var lastRelease *time.Time
	if err := d.pool.QueryRow(ctx, `SELECT max(finished_at) FROM fleet_jobs WHERE status = 'lost' AND error = $1`,
		store.UnheldError).Scan(&lastRelease); err != nil {
		t.Fatal(err)
	}
	releasedWithin := time.Duration(0)
	if lastRelease != nil {
		releasedWithin = lastRelease.Sub(promotedAt)
	}
	failed := d.count(`SELECT count(*) FROM queue_failed_jobs`)
	reserved := d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`)
	if failed != 0 || reserved != 0 {
		t.Errorf("%d jobs failed and %d still reserved, want none", failed, reserved)
	}
	var resume time.Duration
	var first *time.Time
	if err := d.pool.QueryRow(ctx, `SELECT min(reserved_at) FROM fleet_jobs WHERE status = 'completed' AND reserved_at >= $1`,
		promotedAt).Scan(&first); err != nil || first == nil {
		t.Fatalf("no job claimed after the promotion: %v", err)
	}
	resume = first.Sub(promotedAt)
	// How soon is logged below; only a new primary that nobody claims
	// from fails (apptest.Slack times an idle machine's 10 s).
	if resume > apptest.Slack*10*time.Second {
		t.Errorf("the first job claimed on the new primary %s after the promotion, more than %s", resume, apptest.Slack*10*time.Second)
	}
	if out := a.Output() + b.Output(); strings.Contains(out, "killing it") {
		t.Errorf("a master killed a worker:\n%s", tail(out, 4000))
	}
	now := append(apptest.Children(a.PID()), apptest.Children(b.PID())...)
	if !slices.Equal(now, workers) {
		t.Errorf("workers %v before the failover, %v after: one was replaced", workers, now)
	}
	mode := "synchronous"
	if !sync {
		mode = "asynchronous, WAL sender stalled 2 s"
	}
	t.Logf("%s: jobs %d, ran twice %d, failed %d, reserved after %d, reserved at the promotion %d, released by their worker's reconcile %d (the last %s after the promotion), first claim %s after the promotion",
		mode, n, twice, failed, reserved, len(atPromotion), released, releasedWithin.Round(time.Millisecond), resume.Round(time.Millisecond))
	stopMasters(t, a, b)
}
