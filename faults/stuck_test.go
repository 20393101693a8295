package faults_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/apptest"
)

// TestStuckJobBesideOthers: a handler that ignores its 1 s timeout
// (test.stuck, 1 try) runs in a master's one worker process of 32 slots
// beside 20 jobs of 200 ms that start their sleep as the worker gives up
// on it (they wait for its timed-out history row) and 4 that would sleep a
// minute on their first attempt; the grace period is 3 s
// (queue.timeout_grace_secs). The worker stops claiming, the 20 finish
// within the grace or are recorded as interrupted, the 4 are interrupted,
// and the worker exits with status 8, saying how many it interrupted and
// why; its master replaces it. Every job completes exactly once (one
// completed history row, one recorded run), an interrupted job's completed
// attempt is its interrupted attempt + 1 and runs in the new worker, no
// try is spent (each run sees the tries left it had at dispatch), no
// attempt is lost or failed but the stuck one's, nothing is left reserved,
// and the master keeps running and stops cleanly.
func TestStuckJobBesideOthers(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	srv := newMMServer(t)
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	file := filepath.Join(dir, "attempts.txt")
	dispatch := func(name string, n int, payload map[string]any, extra ...string) {
		t.Helper()
		p, _ := json.Marshal(payload)
		r := apptest.Run(t, dir, apptest.DBEnv(url), append([]string{"dispatch", "--name", name,
			"--count", strconv.Itoa(n), "--payload", string(p)}, extra...)...)
		if r.Code != 0 {
			t.Fatalf("dispatch %s: %+v", name, r)
		}
	}
	const fast, slow, tries = 20, 4, 2
	dispatch("test.stuck", 1, map[string]any{"ms": 600_000}, "--timeout", "1s", "--tries", "1")
	dispatch("test.beside", fast, map[string]any{"ms": 200, "after": "timed_out", "file": file},
		"--timeout", "2m", "--tries", strconv.Itoa(tries))
	dispatch("test.beside", slow, map[string]any{"ms": 200, "first_ms": 60_000, "after": "timed_out", "file": file},
		"--timeout", "2m", "--tries", strconv.Itoa(tries))
	slowIDs := d.ids(`SELECT id FROM queue_jobs WHERE name = 'test.beside' AND payload ? 'first_ms' ORDER BY id`)

	a := apptest.Start(t, dir, mmEnv(url, "a",
		"APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=32", "APP_QUEUE__TIMEOUT_GRACE_SECS=3"), "fleet")
	apptest.Eventually(t, 60*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	// The stuck job failed for good, timed out, once.
	if k := d.count(`SELECT count(*) FROM queue_failed_jobs WHERE name = 'test.stuck'`); k != 1 {
		t.Errorf("%d failed stuck jobs, want 1", k)
	}
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.stuck' AND status = 'timed_out' AND attempt = 1`); k != 1 ||
		d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.stuck'`) != 1 {
		t.Errorf("the stuck job's history is not one timed-out attempt")
	}
	if k := d.count(`SELECT count(*) FROM queue_failed_jobs WHERE name <> 'test.stuck'`); k != 0 {
		t.Errorf("%d other jobs failed", k)
	}

	// Every job beside it: interrupted attempts 1..m, then one completed
	// attempt m+1, in a worker other than the one that interrupted it.
	type row struct {
		status, worker string
		attempt        int
	}
	rows, err := d.pool.Query(context.Background(), `
		SELECT job_id, status, COALESCE(worker, ''), attempt FROM fleet_jobs WHERE name = 'test.beside' ORDER BY job_id, attempt, finished_at`)
	if err != nil {
		t.Fatal(err)
	}
	hist := map[int64][]row{}
	var id int64
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.status, &r.worker, &r.attempt}, func() error {
		hist[id] = append(hist[id], r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(hist) != fast+slow {
		t.Fatalf("%d jobs beside the stuck one have history, want %d", len(hist), fast+slow)
	}
	runs := apptest.ReadAttempts(t, file)
	interrupted, slowInterrupted, finishedWithin := 0, 0, 0
	for id, h := range hist {
		last := h[len(h)-1]
		for i, r := range h[:len(h)-1] {
			if r.status != "interrupted" || r.attempt != i+1 {
				t.Errorf("job %d: history %v: want interrupted attempts, then one completed", id, h)
			}
		}
		if last.status != "completed" || last.attempt != len(h) {
			t.Errorf("job %d: history %v: want it completed at attempt %d", id, h, len(h))
		}
		if len(h) > 1 && h[len(h)-2].worker == last.worker {
			t.Errorf("job %d: history %v: completed by the worker that interrupted it", id, h)
		}
		interrupted += len(h) - 1
		if len(h) == 1 {
			finishedWithin++
		}
		if slices.Contains(slowIDs, id) {
			slowInterrupted += len(h) - 1
			if len(h) < 2 {
				t.Errorf("slow job %d: history %v: want it interrupted", id, h)
			}
		}
		// One recorded run, at the completed attempt, with the tries left at
		// dispatch (tries - 1 after it): no try spent.
		if got := runs[id]; len(got) != 1 || got[0].Attempt != last.attempt || got[0].Tries-got[0].Attempt != tries-1 {
			t.Errorf("job %d: runs %+v, history %v: want one run at attempt %d with %d tries left", id, got, h, last.attempt, tries-1)
		}
	}
	t.Logf("beside the stuck job: %d of %d jobs finished within the grace; %d attempts interrupted, %d of them of the %d slow jobs",
		finishedWithin, fast+slow, interrupted, slowInterrupted, slow)
	if k := d.count(`SELECT count(*) FROM fleet_jobs WHERE status NOT IN ('completed', 'interrupted') AND name <> 'test.stuck'`); k != 0 {
		t.Errorf("%d attempts lost, failed or timed out beside the stuck job", k)
	}
	if k := d.count(`SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`); k != 0 {
		t.Errorf("%d jobs still reserved", k)
	}
	if k := d.count(`SELECT COALESCE(sum(interrupted), 0)::int FROM fleet_counters`); k != interrupted {
		t.Errorf("interrupted counter %d, want %d", k, interrupted)
	}
	if k := d.count(`SELECT COALESCE(sum(failed), 0)::int FROM fleet_counters`); k != 1 {
		t.Errorf("failed counter %d, want the stuck job's 1", k)
	}

	// The worker said what it did, and exited for the timeout.
	if !apptest.Within(5*time.Second, func() bool { return strings.Contains(a.Output(), "worker exiting") }) {
		t.Errorf("no line of the worker's exit")
	}
	out := a.Output()
	said := 0
	for _, m := range regexp.MustCompile(`interrupted the jobs still running after the grace period[^\n]*`).FindAllString(out, -1) {
		n := regexp.MustCompile(`jobs=(\d+)`).FindStringSubmatch(m)
		if n == nil || !strings.Contains(m, "another job ignored its timeout") {
			t.Errorf("the line on the interrupted jobs does not say how many and why: %s", m)
			continue
		}
		k, _ := strconv.Atoi(n[1])
		said += k
		t.Logf("the worker said: %s", m)
	}
	if said != interrupted {
		t.Errorf("the worker's lines say %d jobs were interrupted, the history %d", said, interrupted)
	}
	if !regexp.MustCompile(`worker exiting[^\n]*reason=timeout`).MatchString(out) {
		t.Errorf("no line of the worker exiting for the timeout")
	}
	stopMasters(t, a)
}
