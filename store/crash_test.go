package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// The jobs of a process that died beside each other lose no try: each is
// released at once with one more try, a 'lost' history row for the
// attempt that ran, its crash counted and an error naming how the process
// ended and the jobs beside it; a job on its last try is not failed. One with a cancel request ends as cancelled. Other workers' jobs
// are left alone.
func TestJobReleaseCrashedChargesNoJobOfASharedProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, max_tries) SELECT 'q', 'n' || g, 1 FROM generate_series(1, 8) g`)
	jobs := claimAs(t, st, "q", "w1", 7)
	claimAs(t, st, "q", "w2", 1)
	exec(t, pool, `UPDATE queue_jobs SET cancel_requested_at = now() WHERE id = $1`, jobs[6].ID)
	res, err := st.JobReleaseCrashed(ctx, store.JobReleaseCrashedParams{Worker: "w1", Exit: "exited with status 3", Stderr: "boom", Tries: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.CrashedJobs{Released: 6, Cancelled: 1}); res != want {
		t.Fatalf("released %+v, want %+v", res, want)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs
		WHERE reserved_by IS NULL AND attempts = 1 AND max_tries = 2 AND crashes = 1 AND available_at <= now() AND queue = 'q'`); n != 6 {
		t.Errorf("%d jobs ready again with one more try and one crash, want 6", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs WHERE reserved_by = 'w2'`); n != 1 {
		t.Errorf("the other worker holds %d jobs, want its 1", n)
	}
	first := scalar[string](t, pool, `SELECT last_error FROM queue_jobs WHERE id = $1`, jobs[0].ID)
	if want := "lost: its process exited with status 3 while running it beside 6 other jobs ("; !strings.HasPrefix(first, want) ||
		!strings.Contains(first, ", ...)") || !strings.Contains(first, "spends no try (the job gets one more)") || strings.Contains(first, "boom") {
		t.Errorf("error %q, want it to start %q, name 5 of the others and say no try was spent", first, want)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'lost' AND attempt = 1 AND error LIKE 'lost: its process exited with status 3%'`); n != 6 {
		t.Errorf("%d lost history rows of attempt 1, want 6", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'cancelled'`); n != 1 {
		t.Errorf("%d cancelled rows, want 1", n)
	}
	if lost, requeued := scalar[int64](t, pool, `SELECT sum(lost) FROM fleet_counters`), scalar[int64](t, pool, `SELECT sum(requeued) FROM fleet_counters`); lost != 6 || requeued != 6 {
		t.Errorf("counted %d lost and %d requeued, want 6 each", lost, requeued)
	}
}

// The jobs a crashed process held waiting for a slot, never started, are
// given back as if never claimed: ready at once, their attempt taken
// back, no history row, no crash and no counter; the others are lost
// beside the crash and their errors count only the jobs that ran beside
// them. A never-started job with a cancel request ends as cancelled. An
// id the worker does not hold is ignored.
func TestJobReleaseCrashedGivesBackJobsNeverStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, max_tries) SELECT 'q', 'n' || g, 1 FROM generate_series(1, 8) g`)
	jobs := claimAs(t, st, "q", "w1", 6)
	other := claimAs(t, st, "q", "w2", 1)
	exec(t, pool, `UPDATE queue_jobs SET cancel_requested_at = now() WHERE id = $1`, jobs[5].ID)
	// Jobs 0 and 1 ran; 2 to 5 waited (5 with a cancel request).
	unstarted := []int64{jobs[2].ID, jobs[3].ID, jobs[4].ID, jobs[5].ID, other[0].ID}
	res, err := st.JobReleaseCrashed(ctx, store.JobReleaseCrashedParams{Worker: "w1", Exit: "killed by signal SIGKILL",
		Tries: 3, Unstarted: unstarted})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.CrashedJobs{Released: 2, Cancelled: 1, Unstarted: 3}); res != want {
		t.Fatalf("released %+v, want %+v", res, want)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs
		WHERE id = ANY ($1) AND reserved_by IS NULL AND attempts = 0 AND max_tries = 1 AND crashes = 0
		  AND available_at <= now() AND last_error IS NULL`, unstarted[:3]); n != 3 {
		t.Errorf("%d never-started jobs ready again untouched, want 3", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs WHERE reserved_by = 'w2'`); n != 1 {
		t.Errorf("the other worker holds %d jobs, want its 1 (its id was in the list)", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM fleet_jobs WHERE status = 'lost'`); n != 2 {
		t.Errorf("%d lost history rows, want 2 (the jobs that ran)", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM fleet_jobs WHERE job_id = ANY ($1)`, unstarted[:3]); n != 0 {
		t.Errorf("%d history rows of never-started jobs, want none", n)
	}
	first := scalar[string](t, pool, `SELECT last_error FROM queue_jobs WHERE id = $1`, jobs[0].ID)
	if want := "lost: its process killed by signal SIGKILL while running it beside 1 other job ("; !strings.HasPrefix(first, want) {
		t.Errorf("error %q, want it to start %q: only the job that ran beside it", first, want)
	}
	cancelled := scalar[string](t, pool, `SELECT error FROM fleet_jobs WHERE job_id = $1 AND status = 'cancelled' AND attempt = 0`, jobs[5].ID)
	if !strings.Contains(cancelled, "never started") {
		t.Errorf("the never-started cancelled job's row says %q, want it never started", cancelled)
	}
	if lost := scalar[int64](t, pool, `SELECT sum(lost) FROM fleet_counters`); lost != 2 {
		t.Errorf("counted %d lost, want 2", lost)
	}
}

// A job in two processes that died is a suspect: ordinary claims pass it
// by, and only a claim of suspects takes it, which takes nothing else. A
// crash of an isolation process is its job's: the attempt counts, the
// job waits out its backoff, its error carries the process's stderr, and
// once its tries are spent it fails with that error.
func TestJobReleaseCrashedIsolatesAndChargesASuspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, max_tries, backoff_secs) VALUES ('q', 'crash', 2, '{3600, 3600, 0}')`)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' || g FROM generate_series(1, 3) g`)
	crashID := scalar[int64](t, pool, `SELECT id FROM queue_jobs WHERE name = 'crash'`)
	crash := func(worker string, isolated bool) store.CrashedJobs {
		t.Helper()
		res, err := st.JobReleaseCrashed(ctx, store.JobReleaseCrashedParams{Worker: worker, Isolated: isolated,
			Exit: "exited with status 3", Stderr: "demo.crash: exiting\nsecond line", Tries: 5})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Two crashes with the other jobs beside it, one of them in both.
	claimAs(t, st, "q", "a", 4)
	if res := crash("a", false); res.Released != 4 || res.Suspects != 0 {
		t.Fatalf("first crash: %+v", res)
	}
	exec(t, pool, `UPDATE queue_jobs SET reserved_by = 'b', lease = 7, attempts = attempts + 1 WHERE name IN ('crash', 'n1')`)
	if res := crash("b", false); res.Released != 2 || res.Suspects != 2 {
		t.Fatalf("second crash: %+v, want 2 released, both suspects", res)
	}
	if e := scalar[string](t, pool, `SELECT last_error FROM queue_jobs WHERE id = $1`, crashID); !strings.Contains(e, "beside 1 other job (") ||
		!strings.Contains(e, "in 2 processes that died, so it runs again alone") {
		t.Errorf("a suspect's error %q does not say it runs alone now", e)
	}
	if got, err := st.JobSuspects(ctx, []string{"q", "other"}); err != nil || len(got) != 1 || got["q"] != 2 {
		t.Fatalf("suspects %v, %v; want 2 in q", got, err)
	}
	// Ordinary claims take the two innocents, never the suspects.
	if jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 10, Worker: "c"}); err != nil || len(jobs) != 2 {
		t.Fatalf("an ordinary claim took %d, %v; want the 2 that are no suspects", len(jobs), err)
	}
	if next, err := st.JobNext(ctx, []string{"q"}, ""); err != nil || next.Any {
		t.Errorf("an idle worker's look for work found %+v, %v: suspects are no work of its", next, err)
	}
	if ok, err := st.JobReadyExists(ctx, []string{"q"}); err != nil || ok {
		t.Errorf("ready jobs for an ordinary worker: %v, %v; want none", ok, err)
	}
	if ok, err := st.JobSuspectReadyExists(ctx, []string{"q"}); err != nil || !ok {
		t.Errorf("ready suspects: %v, %v; want some", ok, err)
	}
	// The isolation process claims one suspect, the crash job first (its
	// id is the lowest).
	iso, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 1, Worker: "iso", Suspects: true})
	if err != nil || len(iso) != 1 || iso[0].ID != crashID || iso[0].Attempt != 3 || iso[0].MaxTries != 4 {
		t.Fatalf("isolated claim %+v, %v; want the crash job's third attempt of 4 tries", iso, err)
	}
	if res := crash("iso", true); res.Released != 1 || res.Charged != 1 || res.Failed != 0 || res.Suspects != 1 {
		t.Fatalf("isolated crash: %+v, want it charged and released", res)
	}
	if a, wait := scalar[int](t, pool, `SELECT attempts FROM queue_jobs WHERE id = $1`, crashID),
		scalar[bool](t, pool, `SELECT available_at > now() FROM queue_jobs WHERE id = $1`, crashID); a != 3 || wait {
		t.Errorf("after its first charged crash: attempts %d, waiting %v; want 3, ready at once (its backoff's third entry, 0)", a, wait)
	}
	iso, err = st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 5, Worker: "iso2", Suspects: true})
	if err != nil || len(iso) != 2 {
		t.Fatalf("isolated claim of 5: %d, %v; want both suspects", len(iso), err)
	}
	exec(t, pool, `UPDATE queue_jobs SET reserved_by = 'iso3' WHERE id = $1`, crashID)
	if res := crash("iso3", true); res.Failed != 1 || res.Charged != 1 || res.Released != 0 {
		t.Fatalf("the last try's crash: %+v, want it failed", res)
	}
	e := scalar[string](t, pool, `SELECT error FROM queue_failed_jobs WHERE job_id = $1`, crashID)
	if want := "crashed its process: the process exited with status 3 while running this job alone, in an isolation process (attempt 4 of 4 tries); the end of its stderr:\ndemo.crash: exiting\nsecond line"; e != want {
		t.Errorf("failed with %q, want %q", e, want)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'failed'`, crashID); n != 2 {
		t.Errorf("%d failed history rows of the crash job, want its 2 charged attempts", n)
	}
	if lost, failed := scalar[int64](t, pool, `SELECT sum(lost) FROM fleet_counters`), scalar[int64](t, pool, `SELECT sum(failed_final) FROM fleet_counters`); lost != 6 || failed != 1 {
		t.Errorf("counted %d lost and %d failed for good, want 6 and 1", lost, failed)
	}
}

// A charged crash waits out the job's backoff (the process's default when
// the job sets none) before the next attempt.
func TestJobReleaseCrashedWaitsOutTheBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, crashes) VALUES ('q', 'crash', 2)`)
	iso, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 1, Worker: "iso", Suspects: true})
	if err != nil || len(iso) != 1 {
		t.Fatalf("isolated claim: %d, %v", len(iso), err)
	}
	res, err := st.JobReleaseCrashed(ctx, store.JobReleaseCrashedParams{Worker: "iso", Isolated: true, Exit: "killed by signal SIGSEGV", Tries: 3, Backoff: []int{60}})
	if err != nil || res.Charged != 1 || res.Released != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if wait := scalar[float64](t, pool, `SELECT EXTRACT(EPOCH FROM available_at - now()) FROM queue_jobs`); wait < 50 || wait > 61 {
		t.Errorf("ready in %.0f s, want the default backoff of 60 s", wait)
	}
	if e := scalar[string](t, pool, `SELECT last_error FROM queue_jobs`); !strings.HasSuffix(e, "killed by signal SIGSEGV while running this job alone, in an isolation process (attempt 1 of 3 tries); it wrote nothing on stderr") {
		t.Errorf("error %q", e)
	}
	if ok, err := st.JobSuspectReadyExists(ctx, []string{"q"}); err != nil || ok {
		t.Errorf("a suspect waiting out its backoff is ready: %v, %v", ok, err)
	}
}

// The suspect statements read the suspects, never the backlog around
// them, under a generic plan: 100,000 ready jobs and 3 suspects, one of
// them waiting out a backoff.
func TestSuspectStatementsReadOnlyTheSuspects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup, generic := oneGenericSession(t)
	st := store.New(generic)
	exec(t, setup, `
		INSERT INTO queue_jobs (queue, name) SELECT 'q', 'n' FROM generate_series(1, 100000);
		INSERT INTO queue_jobs (queue, name, crashes, available_at)
		VALUES ('q', 's1', 2, now()), ('q', 's2', 3, now()), ('q', 's3', 2, now() + interval '1 hour')`)
	exec(t, setup, `VACUUM ANALYZE queue_jobs`)
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "m", Name: "m", Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
	measure := readsAtMost(t, generic)
	for range 6 { // past the five executions after which a plan may go generic
		measure("suspects", 10, func() error {
			got, err := st.JobSuspects(ctx, []string{"q", "other"})
			if err == nil && (len(got) != 1 || got["q"] != 2) {
				t.Errorf("suspects %v, want 2 ready in q", got)
			}
			return err
		})
		measure("ready suspect exists", 10, func() error {
			ok, err := st.JobSuspectReadyExists(ctx, []string{"other", "q"})
			if err == nil && !ok {
				t.Error("no ready suspect found")
			}
			return err
		})
	}
	var names []string
	for range 3 {
		measure("claim of a suspect", 10, func() error {
			jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 1, Worker: "iso", Master: "m", Suspects: true})
			for _, j := range jobs {
				names = append(names, j.Name)
			}
			return err
		})
	}
	if strings.Join(names, ",") != "s1,s2" {
		t.Errorf("isolated claims took %v, want s1 then s2 and nothing else", names)
	}
}
