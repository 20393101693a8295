package faults_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
)

// TestCancelAcrossTwoMasters: two masters as real processes, each running
// a long job in a child of its own (a works default, b works other). One
// fleet:cancel, run as a process of its own, cancels both: the worker of
// each master hears of it, stops the handler, and each job ends with
// exactly one history row, 'cancelled', never completed, retried or
// failed.
func TestCancelAcrossTwoMasters(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	srv := newMMServer(t)
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a"), "fleet")
	b := apptest.Start(t, dir, mmEnv(url, "b", "APP_FLEET__SUPERVISORS__WORK__QUEUES=other"), "fleet")
	am := d.waitMember(a, 15*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	bm := d.waitMember(b, 15*time.Second, "master b running", func(m member) bool { return m.State == "running" })
	file := dispatchTo(t, url, dir, "default", 1, 60_000)
	dispatchTo(t, url, dir, "other", 1, 60_000)
	apptest.Eventually(t, 20*time.Second, "a job running under each master", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, am.Instance) == 1 &&
			d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_master = $1`, bm.Instance) == 1
	})
	ids := d.ids(`SELECT id FROM queue_jobs`)
	args := []string{"fleet:cancel"}
	for _, id := range ids {
		args = append(args, strconv.FormatInt(id, 10))
	}
	began := time.Now()
	r := apptest.Run(t, dir, apptest.DBEnv(url), args...)
	if r.Code != 0 || strings.Count(r.Stdout, "its worker was asked to stop it") != 2 {
		t.Fatalf("fleet:cancel: %+v", r)
	}
	// The handlers stop at once: well before their 60 s, and within the
	// grace (5 s) that would have had their workers give up on them.
	apptest.Eventually(t, 5*time.Second, "both jobs ended", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	t.Logf("both running jobs ended %s after fleet:cancel started", time.Since(began).Round(time.Millisecond))
	check := func() {
		t.Helper()
		for _, id := range ids {
			if n := d.count(`SELECT count(*) FROM fleet_jobs WHERE job_id = $1`, id); n != 1 {
				t.Errorf("job %d has %d history rows, want 1", id, n)
			}
			if n := d.count(`SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'cancelled'
				AND error LIKE 'cancelled by %(fleet:cancel): context canceled'`, id); n != 1 {
				t.Errorf("job %d was not recorded cancelled by fleet:cancel once", id)
			}
		}
		if n := d.count(`SELECT count(*) FROM queue_failed_jobs`) + d.count(`SELECT count(*) FROM queue_jobs`); n != 0 {
			t.Errorf("%d cancelled jobs are failed or queued again", n)
		}
	}
	check()
	// Both masters live on and stop cleanly; nothing ran the jobs again.
	stopMasters(t, a, b)
	check()
	if runs, err := os.ReadFile(file); err == nil && len(runs) > 0 {
		t.Errorf("a cancelled job ran to its end: %q", runs)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if n := d.count(`SELECT COALESCE(sum(failed), 0)::integer FROM fleet_counters`); n != 0 {
		t.Errorf("failed counter %d, want 0: a cancel is no failure", n)
	}
}
