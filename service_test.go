package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// failJobs dispatches jobs that fail on their only try and works them, so
// they end in queue_failed_jobs.
func failJobs(t *testing.T, pool *pgxpool.Pool, jobs ...*queue.JobSpec) {
	t.Helper()
	ctx := context.Background()
	reg := queue.NewRegistry()
	reg.Handle("boom", func(_ context.Context, j *queue.Job) error { return errors.New("boom: " + string(j.Payload)) })
	c := queue.NewClient(pool, queue.Defaults{Tries: 1})
	if _, err := c.DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(store.New(pool), reg, worker.Config{Queues: []string{"default", "mail"}, StopWhenEmpty: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFailedJobsRetryForget(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{})
	failJobs(t, pool,
		queue.NewJob("boom", map[string]string{"to": "ann", "password": "hunter2"}),
		queue.NewJob("boom", map[string]string{"to": "bob"}).OnQueue("mail"),
		queue.NewJob("boom", map[string]string{"to": "cyd"}),
	)
	all, err := svc.FailedJobs(ctx, fleet.FailedFilter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("failed jobs = %d, %v", len(all), err)
	}
	for _, j := range all {
		if strings.Contains(string(j.Payload), "hunter2") || strings.Contains(j.Error, "hunter2") {
			t.Fatalf("a secret leaked: %s / %s", j.Payload, j.Error)
		}
	}
	bob, err := svc.FailedJobs(ctx, fleet.FailedFilter{Search: "BOB"})
	if err != nil || len(bob) != 1 || bob[0].Queue != "mail" {
		t.Fatalf("search: %+v, %v", bob, err)
	}
	if mail, _ := svc.FailedJobs(ctx, fleet.FailedFilter{Queue: "mail"}); len(mail) != 1 {
		t.Fatalf("queue filter: %d", len(mail))
	}

	newID, err := svc.Retry(ctx, bob[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var retryOf int64
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT retry_of, attempts FROM queue_jobs WHERE id = $1`, newID).Scan(&retryOf, &attempts); err != nil {
		t.Fatal(err)
	}
	if retryOf != bob[0].JobID || attempts != 0 {
		t.Fatalf("retried job: retry_of %d (want %d), attempts %d", retryOf, bob[0].JobID, attempts)
	}
	if _, err := svc.Retry(ctx, bob[0].ID); !errors.Is(err, fleet.ErrFailedJobNotFound) {
		t.Fatalf("retry of a retried job: %v, want ErrFailedJobNotFound", err)
	}
	if err := svc.Forget(ctx, 999999); !errors.Is(err, fleet.ErrFailedJobNotFound) {
		t.Fatalf("forget unknown: %v", err)
	}
	n, err := svc.RetryAll(ctx, fleet.FailedFilter{Search: "cyd"})
	if err != nil || n != 1 {
		t.Fatalf("retry all cyd: %d, %v", n, err)
	}
	left, _ := svc.FailedJobs(ctx, fleet.FailedFilter{})
	if len(left) != 1 {
		t.Fatalf("%d failed jobs left, want 1", len(left))
	}
	if err := svc.Forget(ctx, left[0].ID); err != nil {
		t.Fatal(err)
	}
	// The retried ones fail again with fresh attempts.
	failJobs(t, pool)
	again, _ := svc.FailedJobs(ctx, fleet.FailedFilter{})
	if len(again) != 2 {
		t.Fatalf("%d failed again, want 2", len(again))
	}
	if n, err := svc.ForgetAll(ctx, fleet.FailedFilter{}); err != nil || n != 2 {
		t.Fatalf("forget all: %d, %v", n, err)
	}
}

func TestWorkloadAndPause(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{LongWait: map[string]int{"default": 1, "mail": 3600}})
	c := queue.NewClient(pool, queue.Defaults{})
	for range 3 {
		if _, err := c.Dispatch(ctx, queue.NewJob("x", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Dispatch(ctx, queue.NewJob("x", nil).OnQueue("mail").Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dispatch(ctx, queue.NewJob("x", nil).OnQueue("mail")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queue_jobs SET available_at = now() - interval '5 seconds' WHERE queue = 'default'`); err != nil {
		t.Fatal(err)
	}
	if err := svc.PauseQueue(ctx, "mail"); err != nil {
		t.Fatal(err)
	}
	loads, err := svc.Workload(ctx)
	if err != nil || len(loads) != 2 {
		t.Fatalf("workload = %+v, %v", loads, err)
	}
	d, m := loads[0], loads[1]
	if d.Queue != "default" || d.Pending != 3 || d.OldestWaitSecs < 5 || d.WorkloadSecs != 3 || d.Paused {
		t.Errorf("default = %+v", d)
	}
	if m.Queue != "mail" || m.Pending != 1 || m.Delayed != 1 || !m.Paused {
		t.Errorf("mail = %+v", m)
	}
	waits, err := svc.LongWaits(ctx)
	if err != nil || len(waits) != 1 || waits[0].Queue != "default" || waits[0].ThresholdSecs != 1 {
		t.Fatalf("long waits = %+v, %v", waits, err)
	}
	if err := svc.Pause(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := svc.Resume(ctx, "default"); !errors.Is(err, fleet.ErrAllPaused) {
		t.Fatalf("resume one while all are paused: %v", err)
	}
	p, err := svc.PausedState(ctx)
	if err != nil || !p.All || len(p.Queues) != 1 {
		t.Fatalf("paused = %+v, %v", p, err)
	}
	if err := svc.Resume(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := svc.ResumeQueue(ctx, "mail"); err != nil {
		t.Fatal(err)
	}
	if p, _ := svc.PausedState(ctx); p.All || len(p.Queues) != 0 {
		t.Fatalf("still paused: %+v", p)
	}
	if st, err := svc.Status(ctx); err != nil || st != fleet.StatusInactive {
		t.Fatalf("status = %s, %v", st, err)
	}
}

func TestPendingJobsRedacted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{Redact: []string{"card"}})
	c := queue.NewClient(pool, queue.Defaults{})
	if _, err := c.Dispatch(ctx, queue.NewJob("pay", map[string]string{"card_number": "4111", "amount": "3"})); err != nil {
		t.Fatal(err)
	}
	jobs, err := svc.PendingJobs(ctx, fleet.Page{})
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	if got := string(jobs[0].Payload); strings.Contains(got, "4111") || !strings.Contains(got, `"amount":"3"`) || jobs[0].State != "pending" {
		t.Fatalf("pending job = %+v (%s)", jobs[0], got)
	}
}

func TestMetricsBuckets(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{})
	// 30 per-minute snapshots of queue mail, 10 attempts each, in the two
	// quarter-hours before the current one.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, jobs_per_minute, runtime_mean_ms, runtime_p95_ms, pending)
		SELECT date_bin(interval '15 minutes', now(), TIMESTAMPTZ '2000-01-01') - interval '30 minutes' + g * interval '1 minute',
		       'queue', 'mail', 10, 10, g, g * 2, g
		FROM generate_series(0, 29) g`); err != nil {
		t.Fatal(err)
	}
	hour, err := svc.Metrics(ctx, fleet.PeriodHour)
	if err != nil || len(hour) != 30 {
		t.Fatalf("hour: %d points, %v; want one per minute", len(hour), err)
	}
	day, err := svc.Metrics(ctx, fleet.PeriodDay)
	if err != nil || len(day) != 2 {
		t.Fatalf("day: %d points, %v; want two quarter-hours", len(day), err)
	}
	first := day[0]
	if first.Jobs != 150 || first.JobsPerMinute != 10 || first.RuntimeMeanMs != 7 || first.RuntimeP95Ms != 28 || first.Pending != 14 {
		t.Fatalf("first quarter-hour = %+v", first)
	}
	if _, err := fleet.ParsePeriod("month"); err == nil {
		t.Fatal("month is not a period")
	}
}

// A queue worked only by a paused supervisor says so in the workload.
func TestWorkloadNamesPausedSupervisors(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{})
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
		('i1', 'm1', 'h', 1, 'running', '{"supervisors":[{"name":"exports","queues":["exports","default"],"paused":true},
		                                                {"name":"web","queues":["default"]}]}', now() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.NewClient(pool, queue.Defaults{}).DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("x", nil).OnQueue("exports"), queue.NewJob("y", nil)}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Pause(ctx, "exports"); err != nil {
		t.Fatal(err)
	}
	loads, err := svc.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, l := range loads {
		got[l.Queue] = l.PausedSupervisors
	}
	if !slices.Equal(got["exports"], []string{"exports"}) || !slices.Equal(got["default"], []string{"exports"}) {
		t.Errorf("paused supervisors per queue = %v, want exports on both queues", got)
	}
}

// Pausing a supervisor nobody knows stores nothing; continuing one while
// every supervisor is paused is refused and changes nothing, its own
// pause included.
func TestRefusedPauseCommandsChangeNoState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	svc := fleet.New(pool, fleet.Options{Supervisors: []string{"exports", "web"}})
	if err := svc.Pause(ctx, "nosuch"); !errors.Is(err, fleet.ErrUnknownSupervisor) || !strings.Contains(err.Error(), "exports, web") {
		t.Fatalf("pause of an unknown supervisor: %v", err)
	}
	if err := svc.Resume(ctx, "nosuch"); !errors.Is(err, fleet.ErrUnknownSupervisor) {
		t.Fatalf("continue of an unknown supervisor: %v", err)
	}
	p, err := svc.PausedState(ctx)
	if err != nil || p.All || len(p.Supervisors) != 0 {
		t.Fatalf("after refused commands: %+v, %v", p, err)
	}
	// A live master's supervisors are known too.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
		('i1', 'm1', 'h', 1, 'running', '{"supervisors":[{"name":"reports","queues":["reports"]}]}', now() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	if err := svc.Pause(ctx, "reports"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Pause(ctx, "exports"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Pause(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := svc.Resume(ctx, "exports"); !errors.Is(err, fleet.ErrAllPaused) {
		t.Fatalf("continue one while all are paused: %v", err)
	}
	p, err = svc.PausedState(ctx)
	if err != nil || !p.All || !slices.Equal(p.Supervisors, []string{"exports", "reports"}) {
		t.Fatalf("after the refused continue: %+v, %v (want all, exports and reports still paused)", p, err)
	}
	// Continuing all, then one, works; a stale pause of a supervisor no
	// longer known can still be lifted.
	if err := svc.Resume(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_state (key) VALUES ('pause:supervisor:gone')`); err != nil {
		t.Fatal(err)
	}
	if err := svc.Resume(ctx, "gone"); err != nil {
		t.Fatalf("lifting a stale pause: %v", err)
	}
}
