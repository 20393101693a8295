package store_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

// TestRecentRuntimesReadSnapshotsNotHistory fills fleet_jobs with 200 000
// attempts of the last 5 minutes and queue_jobs with 50 000 ready jobs, and
// checks that the balancer's runtimes (QueueRuntimes) and Workload come
// from the minute snapshots, read no fleet_jobs row and a bounded number of
// queue_jobs rows.
func TestRecentRuntimesReadSnapshotsNotHistory(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	ctx := t.Context()
	// History the snapshots below do not match: were it read, the figures
	// would be about 5 000 ms and 40 000 a minute.
	exec(t, db.pool, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, CASE WHEN g % 2 = 0 THEN 'mail' ELSE 'bulk' END, 'n', 1, 'completed', ts, ts, 5000
		FROM generate_series(1, 200000) g, LATERAL (SELECT now() - (g % 290) * interval '1 second' AS ts) x`)
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name) SELECT 'bulk', 'n' FROM generate_series(1, 50000)`)
	exec(t, db.pool, `ANALYZE fleet_jobs`)
	exec(t, db.pool, `ANALYZE queue_jobs`)

	// M is the current minute by the store's clock. mail: 10 attempts of
	// 100 ms at M-5, 30 of 200 ms at M-4, 5 lost ones (mean 0) at M-3, 20
	// of 50 ms at M-1, and 1 000 of 9 999 ms at M-6, outside the window.
	// bulk: 7 of 10 ms at M-2 and a backlog row (no attempts) at M-1. idle:
	// a backlog row only. A job row must not count as a queue.
	minute := clockMinute(t, db.pool)
	st, _ := onClock(db.st, minute.Add(30*time.Second))
	exec(t, db.pool, `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, failed, jobs_per_minute, runtime_mean_ms, pending)
		SELECT $1::timestamptz - ago * interval '1 minute', kind, subject, jobs, failed, jobs, mean, pending
		FROM (VALUES (5, 'queue', 'mail', 10, 0, 100.0, 0), (4, 'queue', 'mail', 30, 1, 200, 0),
		             (3, 'queue', 'mail', 5, 5, 0, 0), (1, 'queue', 'mail', 20, 0, 50, 0),
		             (6, 'queue', 'mail', 1000, 0, 9999, 0),
		             (2, 'queue', 'bulk', 7, 0, 10, 0), (1, 'queue', 'bulk', 0, 0, 0, 50000),
		             (2, 'queue', 'idle', 0, 0, 0, 3), (1, 'job', 'send', 500, 0, 7777, 0))
		     AS v (ago, kind, subject, jobs, failed, mean, pending)`, minute)
	runtimes, err := st.QueueRuntimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	loads, err := st.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	mailAvg := (10*100.0 + 30*200 + 20*50) / 60
	if len(runtimes) != 2 || runtimes[0].Queue != "bulk" || runtimes[0].Jobs != 7 || !near(runtimes[0].AvgRuntimeMs, 10) ||
		runtimes[1].Queue != "mail" || runtimes[1].Jobs != 65 || !near(runtimes[1].AvgRuntimeMs, mailAvg) {
		t.Fatalf("runtimes = %+v; want bulk 7 attempts of 10 ms, mail 65 of %.3f ms (lost-only minute out of the mean)", runtimes, mailAvg)
	}
	if len(loads) != 2 {
		t.Fatalf("workload = %+v; want bulk and mail (idle has no attempts, jobs or processes)", loads)
	}
	if b := loads[0]; b.Queue != "bulk" || b.Pending != 50000 || !near(b.AvgRuntimeMs, 10) || b.JobsLastMinute != 0 {
		t.Errorf("bulk = %+v; want 50 000 pending, 10 ms, none in the last minute", b)
	}
	if m := loads[1]; m.Queue != "mail" || m.Pending != 0 || !near(m.AvgRuntimeMs, mailAvg) || m.JobsLastMinute != 20 {
		t.Errorf("mail = %+v; want %.3f ms, 20 in the last minute", m, mailAvg)
	}

	// The plans: no fleet_jobs at all, a few snapshot rows, and queue_jobs
	// only through one index lookup per queue.
	if _, err := st.QueueRuntimes(ctx); err != nil {
		t.Fatal(err)
	}
	read, plan := explainGeneric(t, db, db.rec.last(t))
	if read.of("fleet_jobs") != 0 || read.of("queue_jobs") != 0 || read.of("fleet_metrics") > 20 {
		t.Fatalf("QueueRuntimes read %s; want only the snapshots of 5 minutes\n%s", read, plan)
	}
	if _, err := st.Workload(ctx); err != nil {
		t.Fatal(err)
	}
	read, plan = explainGeneric(t, db, db.rec.last(t))
	if read.of("fleet_jobs") != 0 || read.of("queue_jobs") > 4 || read.of("fleet_metrics") > 20 || read.of("queue_counts") > 40 {
		t.Fatalf("Workload read %s; want no history, a few queue_jobs, snapshot and count rows\n%s", read, plan)
	}
	t.Logf("Workload read %s", read)
}

// TestJobsLastMinuteUntilTheSnapshotIsWritten checks that before the
// snapshot of the minute that just ended is written, the last minute is the
// one before it.
func TestJobsLastMinuteUntilTheSnapshotIsWritten(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	ctx := t.Context()
	minute := clockMinute(t, db.pool)
	st, _ := onClock(db.st, minute.Add(30*time.Second))
	// Snapshots of M-3 and M-2 only: M-1's is not written yet.
	exec(t, db.pool, `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, runtime_mean_ms)
		VALUES ($1::timestamptz - interval '3 minutes', 'queue', 'mail', 4, 10),
		       ($1::timestamptz - interval '2 minutes', 'queue', 'mail', 6, 20)`, minute)
	loads, err := st.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.QueueLoad{{Queue: "mail", AvgRuntimeMs: 16, JobsLastMinute: 6}}
	if !slices.Equal(loads, want) {
		t.Fatalf("workload = %+v, want %+v", loads, want)
	}
}
