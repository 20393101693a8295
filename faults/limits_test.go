package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
)

// TestLimitHoldsAcrossTwoMasters is the concurrency-limit check with real
// processes: two masters of 4 workers × 4 jobs each (32 slots) work 200
// test.sleep jobs of 300 ms under one limit key at 2, and 200 unlimited
// jobs of the same queue. Sampled every 50 ms, never more than 2 jobs of
// the key are running (nor ready or running); the unlimited jobs drain
// while most limited ones still wait; a kill -9 of a worker holding a
// limited job frees its slot within the release time (its master releases
// the job as soon as the worker exits, and the job, still holding its
// slot, runs again elsewhere); and every job ends completed once.
func TestLimitHoldsAcrossTwoMasters(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	srv := newMMServer(t)
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	env := func(name string) []string {
		return mmEnv(url, name, "APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=4", "APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=4")
	}
	a := apptest.Start(t, dir, env("a"), "fleet")
	b := apptest.Start(t, dir, env("b"), "fleet")
	d.waitMember(a, 10*time.Second, "master a live", member.live)
	d.waitMember(b, 10*time.Second, "master b live", member.live)
	apptest.Eventually(t, 15*time.Second, "8 workers ready", func() bool {
		return len(apptest.Children(a.PID())) == 4 && len(apptest.Children(b.PID())) == 4
	})

	const key, limit, limited, free = "tenant:42", 2, 200, 200
	file := filepath.Join(dir, "runs.txt")
	payload, _ := json.Marshal(map[string]any{"ms": 300, "file": file})
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "dispatch", "--name", "test.sleep", "--count", strconv.Itoa(limited),
		"--payload", string(payload), "--limit-key", key, "--limit", strconv.Itoa(limit)); r.Code != 0 {
		t.Fatalf("dispatch the limited jobs: %+v", r)
	}
	dispatchTo(t, url, dir, "default", free, 100)

	// The sampler: jobs of the key running (reserved), and ready or running
	// (not parked), every 50 ms until the test says stop.
	type sample struct{ running, unparked int }
	var (
		mu      sync.Mutex
		samples []sample
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var s sample
			err := d.pool.QueryRow(context.Background(), `
				SELECT count(*) FILTER (WHERE reserved_by IS NOT NULL), count(*) FILTER (WHERE available_at <> 'infinity')
				FROM queue_jobs WHERE limit_key = $1`, key).Scan(&s.running, &s.unparked)
			if err != nil {
				t.Errorf("sample: %v", err)
				return
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}
	}()
	defer func() { // should the test fail before the end
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-sampled
	}()

	// Other jobs of the queue flow past the blocked key.
	apptest.Eventually(t, 15*time.Second, "the unlimited jobs done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs WHERE limit_key IS NULL`) == 0
	})
	left := d.count(`SELECT count(*) FROM queue_jobs WHERE limit_key = $1`, key)
	t.Logf("the %d unlimited jobs were done with %d of the %d limited ones left", free, left, limited)
	if left < limited*3/4 {
		t.Errorf("only %d of the %d limited jobs were left when the %d others were done: the others did not flow past them", left, limited, free)
	}

	// Kill -9 the worker holding a limited job.
	var jobID int64
	var holder string
	apptest.Eventually(t, 5*time.Second, "a limited job running", func() bool {
		err := d.pool.QueryRow(context.Background(), `
			SELECT id, reserved_by FROM queue_jobs WHERE limit_key = $1 AND reserved_by IS NOT NULL
			ORDER BY reserved_at DESC LIMIT 1`, key).Scan(&jobID, &holder)
		return err == nil
	})
	pid := workerPID(holder, append(apptest.Children(a.PID()), apptest.Children(b.PID())...))
	if pid == 0 {
		t.Fatalf("holder %q is not a worker of a or b", holder)
	}
	held := d.ids(`SELECT id FROM queue_jobs WHERE reserved_by = $1`, holder)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The release time: the master sees its worker exit at once and
	// releases its jobs at its next housekeeping tick (1 s).
	const release = mmTTL
	apptest.Eventually(t, release, "the killed worker's limited job running elsewhere or done", func() bool {
		var by *string
		err := d.pool.QueryRow(context.Background(), `SELECT reserved_by FROM queue_jobs WHERE id = $1`, jobID).Scan(&by)
		return err != nil || (by != nil && *by != holder)
	})
	t.Logf("the slot of job %d was in use again %s after the kill", jobID, time.Since(killed).Round(time.Millisecond))

	apptest.Eventually(t, 45*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	close(stop)
	<-sampled

	mu.Lock()
	maxRunning, maxUnparked, atLimit := 0, 0, 0
	for _, s := range samples {
		maxRunning, maxUnparked = max(maxRunning, s.running), max(maxUnparked, s.unparked)
		if s.running == limit {
			atLimit++
		}
	}
	n := len(samples)
	mu.Unlock()
	t.Logf("%d samples: at most %d running and %d ready or running with key %s; %d samples at the limit",
		n, maxRunning, maxUnparked, key, atLimit)
	if maxRunning > limit || maxUnparked > limit {
		t.Errorf("sampled %d running and %d ready or running with key %s, want at most %d", maxRunning, maxUnparked, key, limit)
	}
	if n < 100 || atLimit < n/2 {
		t.Errorf("%d samples, %d of them at the limit: the key's slots were not kept busy", n, atLimit)
	}
	if a := d.count(`SELECT active FROM queue_limits WHERE key = $1`, key); a != 0 {
		t.Errorf("active = %d after every job was done, want 0", a)
	}
	h := checkOutcomes(t, d, file, limited+free, true)
	for _, id := range h.lost() {
		if !slices.Contains(held, id) {
			t.Errorf("job %d has a lost attempt but the killed worker did not hold it (it held %v)", id, held)
		}
	}
	stopMasters(t, a, b)
}

// workerPID returns which of pids runs as the worker named name (its
// command line's --worker-name), 0 for none.
func workerPID(name string, pids []int) int {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "--worker-name"); i >= 0 && i+1 < len(args) && args[i+1] == name {
			return pid
		}
	}
	return 0
}
