package faults_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/apptest"
)

// TestCrashingJob: a master runs 2 processes of 16 slots over 3,000 jobs
// of 100 ms with one demo.crash among them (3 tries), which writes a line
// to stderr and exits its whole process with status 3. No innocent job
// fails, spends a try or completes more than once but for those whose
// outcome died with a process (at most 32: the slots of the two processes
// it crashes before it is a suspect); the crash job ends failed, after
// its 3 tries in an isolation process, with exit status 3 and its stderr
// line in its error; the jobs beside its crashes have one 'lost' history
// row each that names the exit; completions never stop for more than
// maxCompletionGap while jobs wait; and the master keeps running and stops
// cleanly.
//
// It runs alone (not in parallel with the other scenarios): the gap
// between completions is the invariant that a crash loop used to break,
// and other scenarios' processes on the same two cores would measure
// themselves.
func TestCrashingJob(t *testing.T) {
	faultScenario(t)
	srv := newMMServer(t)
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	const half, ms, tries = 1500, 100, 3
	file := dispatchTo(t, url, dir, "default", half, ms)
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "dispatch", "--name", "demo.crash", "--tries", "3"); r.Code != 0 {
		t.Fatalf("dispatch demo.crash: %+v", r)
	}
	dispatchTo(t, url, dir, "default", half, ms)
	crashID := d.ids(`SELECT id FROM queue_jobs WHERE name = 'demo.crash'`)[0]

	t.Cleanup(func() {
		if t.Failed() {
			logLeftJobs(t, d)
		}
	})
	a := apptest.Start(t, dir, mmEnv(url, "a",
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2", "APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=16"), "fleet")
	apptest.Eventually(t, 120*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	select {
	case <-a.Done:
		t.Fatalf("the master exited while its jobs ran: %v", a.Cmd.ProcessState)
	default:
	}

	// The crash job: failed for good after its 3 tries, charged in an
	// isolation process, with how the process ended and what it wrote.
	var attempts, maxTries int
	var failedWith string
	if err := d.pool.QueryRow(context.Background(), `SELECT attempts, max_tries, error FROM queue_failed_jobs WHERE job_id = $1`, crashID).
		Scan(&attempts, &maxTries, &failedWith); err != nil {
		t.Fatalf("the crash job is not in queue_failed_jobs: %v", err)
	}
	if !strings.Contains(failedWith, "exited with status 3") || !strings.Contains(failedWith, apptest.CrashLine) ||
		!strings.Contains(failedWith, "alone, in an isolation process") {
		t.Errorf("the crash job failed with %q: want its exit status, alone, and its stderr line", failedWith)
	}
	charged := d.count(`SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'failed'`, crashID)
	besideCrashes := d.count(`SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'lost'`, crashID)
	if charged != tries || attempts != maxTries || besideCrashes < 2 || maxTries != tries+besideCrashes {
		t.Errorf("the crash job: %d charged attempts, %d beside others, attempts %d of %d tries; want %d charged after at least 2 that spent no try",
			charged, besideCrashes, attempts, maxTries, tries)
	}
	if n := d.count(`SELECT count(*) FROM queue_failed_jobs`); n != 1 {
		t.Errorf("%d jobs failed, want the crash job alone", n)
	}

	// Every innocent job: completed once, no try spent, a lost attempt
	// only beside a crash, saying so.
	h := checkOutcomes(t, d, file, 2*half, true)
	if n := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.sleep' AND status = 'lost'
		AND error NOT LIKE 'lost: its process exited with status 3 while running it beside % other job%'`); n != 0 {
		t.Errorf("%d lost attempts of innocent jobs do not say they were beside a crash", n)
	}
	lost := h.lost()
	runs := apptest.ReadRuns(t, file)
	twice := 0
	for _, n := range runs {
		if n > 1 {
			twice++
		}
	}
	if twice > 32 {
		t.Errorf("%d jobs completed twice, want at most 32 (the slots of the two processes that crashed beside others)", twice)
	}
	var spent []int64
	rows, err := d.pool.Query(context.Background(), `
		SELECT job_id FROM fleet_jobs WHERE name = 'test.sleep' AND status = 'completed'
		AND attempt - (SELECT count(*) FROM fleet_jobs l WHERE l.job_id = fleet_jobs.job_id AND l.status = 'lost') <> 1`)
	if err != nil {
		t.Fatal(err)
	}
	if spent, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	if len(spent) != 0 {
		t.Errorf("jobs %v completed at an attempt their lost attempts do not explain", spent)
	}

	// Completions never stop for long while jobs wait: the largest gap
	// between two completions, up to the last one.
	var done []time.Time
	rows, err = d.pool.Query(context.Background(), `SELECT finished_at FROM fleet_jobs WHERE status = 'completed' ORDER BY finished_at`)
	if err != nil {
		t.Fatal(err)
	}
	if done, err = pgx.CollectRows(rows, pgx.RowTo[time.Time]); err != nil {
		t.Fatal(err)
	}
	var gap time.Duration
	var gapAt int
	for i := 1; i < len(done); i++ {
		if g := done[i].Sub(done[i-1]); g > gap {
			gap, gapAt = g, i
		}
	}
	if gap > maxCompletionGap {
		t.Errorf("no job completed for %s (after completion %d of %d), want at most %s while jobs wait", gap, gapAt, len(done), maxCompletionGap)
	}

	out := a.Output()
	isolations := strings.Count(out, "started an isolation process")
	stopMasters(t, a)
	started, _, crashed, _ := masterSummary(t, a)
	if crashed != tries+besideCrashes {
		t.Errorf("the master counted %d crashes, want %d (the crash job's)", crashed, tries+besideCrashes)
	}
	if isolations < 1 {
		t.Errorf("no isolation process started")
	}
	suspects := d.count(`SELECT count(DISTINCT job_id) FROM fleet_jobs WHERE name = 'test.sleep' AND worker LIKE '%-isolation' AND status = 'completed'`)
	t.Logf("3,001 jobs on 2 × 16 slots: the crash job crashed %d processes beside others and %d isolation processes (%d started, %d processes in all); "+
		"%d innocent jobs lost an attempt beside it (%d of them in two crashes, completed in isolation), %d completed twice, none failed; "+
		"longest time without a completion %s",
		besideCrashes, charged, isolations, started, len(lost), suspects, twice, gap.Round(time.Millisecond))
	if slices.Contains(lost, crashID) {
		t.Errorf("the crash job is counted among the innocent")
	}
}

// maxCompletionGap is the longest a run with waiting jobs may go without a
// completion: a crash costs the slots of the process that died, never
// the others', and an isolation process is replaced as soon as the crash
// it died of is charged.
const maxCompletionGap = 2 * time.Second

// logLeftJobs logs the jobs still in queue_jobs (at most 20), so that a
// run that did not drain says which jobs stayed and in what state.
func logLeftJobs(t *testing.T, d *mmDB) {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `
		SELECT format('job %s %s: attempts %s of %s, crashes %s, reserved_by %s, available in %s, error %s',
			id, name, attempts, coalesce(max_tries::text, '-'), crashes, coalesce(reserved_by, '-'),
			available_at - now(), left(coalesce(last_error, '-'), 200))
		FROM queue_jobs ORDER BY id LIMIT 20`)
	if err != nil {
		t.Logf("reading the jobs left: %v", err)
		return
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Logf("reading the jobs left: %v", err)
		return
	}
	t.Logf("%d jobs left in queue_jobs (at most 20 shown):\n%s", d.count(`SELECT count(*) FROM queue_jobs`), strings.Join(left, "\n"))
}
