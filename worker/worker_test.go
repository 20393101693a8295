package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	pool   *pgxpool.Pool
	st     *store.Store
	client *queue.Client
	jobs   *queue.Registry
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	return &bundle{
		pool:   pool,
		st:     store.New(pool),
		client: queue.NewClient(pool, queue.Defaults{Tries: 3}),
		jobs:   queue.NewRegistry(),
	}
}

func (b *bundle) dispatch(t *testing.T, jobs ...*queue.JobSpec) []int64 {
	t.Helper()
	idsRes, err := b.client.DispatchMany(context.Background(), jobs)
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	ids := queue.IDs(idsRes)
	return ids
}

func (b *bundle) worker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Queues == nil {
		cfg.Queues = []string{"default"}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	w, err := worker.New(b.st, b.jobs, cfg)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	return w
}

// member writes a live membership row for instance, so that a worker
// under that master may claim.
func (b *bundle) member(t *testing.T, instance string) {
	t.Helper()
	if _, err := store.New(b.pool).MemberBeat(context.Background(), store.MemberBeatParams{
		Instance: instance, Name: instance, Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitFor polls cond until it holds, with the package's one polling
// helper (worker.Poll).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	worker.Poll(t, what, cond)
}

func TestWorkerRunsJobsUntilEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int64
	b.jobs.Handle("count", func(context.Context, *queue.Job) error { ran.Add(1); return nil })
	jobs := make([]*queue.JobSpec, 250)
	for i := range jobs {
		jobs[i] = queue.NewJob("count", map[string]int{"i": i})
	}
	b.dispatch(t, jobs...)
	// A delayed job must not keep a stop-when-empty worker running.
	b.dispatch(t, queue.NewJob("count", nil).Delay(time.Hour))

	res, err := b.worker(t, worker.Config{Concurrency: 8, StopWhenEmpty: true}).Run(context.Background())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Reason != spawner.ExitEmpty || res.Jobs != 250 || ran.Load() != 250 {
		t.Fatalf("got %+v after %d runs, want empty after 250", res, ran.Load())
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 1 {
		t.Fatalf("queue_jobs has %d rows, want only the delayed job", n)
	}
}

func TestWorkerRetriesThenFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("fail", func(context.Context, *queue.Job) error { return errors.New("always broken") })
	b.jobs.Handle("flaky", func(_ context.Context, j *queue.Job) error {
		if j.Attempt <= 2 {
			return errors.New("not yet")
		}
		return nil
	})
	b.dispatch(t,
		queue.NewJob("fail", nil).Tries(3).Backoff(0),
		queue.NewJob("flaky", nil).Tries(3).Backoff(0),
	)
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var name, msg string
	var attempts int
	err := b.pool.QueryRow(context.Background(),
		`SELECT name, attempts, error FROM queue_failed_jobs`).Scan(&name, &attempts, &msg)
	if err != nil {
		t.Fatalf("read failed job: %v", err)
	}
	if name != "fail" || attempts != 3 || msg != "always broken" {
		t.Fatalf("failed job = %s, %d attempts, %q", name, attempts, msg)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 0 {
		t.Fatalf("%d jobs left, want the flaky one completed", n)
	}
}

func TestWorkerBackoffDelaysRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("fail", func(context.Context, *queue.Job) error { return errors.New("no") })
	b.dispatch(t, queue.NewJob("fail", nil).Tries(2).Backoff(3600))
	res, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background())
	if err != nil || res.Jobs != 1 {
		t.Fatalf("run = %+v, %v; want one attempt", res, err)
	}
	n := b.count(t, `SELECT count(*) FROM queue_jobs
		WHERE attempts = 1 AND reserved_by IS NULL AND available_at > now() + interval '59 minutes' AND last_error = 'no'`)
	if n != 1 {
		t.Fatalf("want the job waiting an hour for its retry, found %d", n)
	}
}

func TestWorkerPanicAndMissingHandlerAreFailedAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("panics", func(context.Context, *queue.Job) error { panic("boom") })
	b.dispatch(t, queue.NewJob("panics", nil).Tries(1), queue.NewJob("nobody.handles", nil).Tries(1))
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(context.Background(), `SELECT name, error FROM queue_failed_jobs ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var n, e string
		if err := rows.Scan(&n, &e); err != nil {
			t.Fatal(err)
		}
		got[n] = e
	}
	if e := got["nobody.handles"]; e != `no handler registered for "nobody.handles"` {
		t.Errorf("missing handler error = %q", e)
	}
	if e := got["panics"]; !strings.HasPrefix(e, "panic: boom") || !strings.Contains(e, "goroutine") {
		t.Errorf("panic error = %q, want the value and the stack", e)
	}
}

func TestWorkerTakesQueuesInPriorityOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var order []string
	b.jobs.Handle("rec", func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		order = append(order, j.Queue)
		mu.Unlock()
		return nil
	})
	for range 5 {
		b.dispatch(t, queue.NewJob("rec", nil).OnQueue("low"), queue.NewJob("rec", nil).OnQueue("high"))
	}
	_, err := b.worker(t, worker.Config{Queues: []string{"high", "low"}, Concurrency: 1, StopWhenEmpty: true}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "high high high high high low low low low low"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("order = %s, want %s", got, want)
	}
}

func TestWorkerLimits(t *testing.T) {
	t.Parallel()
	t.Run("max jobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.jobs.Handle("noop", func(context.Context, *queue.Job) error { return nil })
		for range 10 {
			b.dispatch(t, queue.NewJob("noop", nil))
		}
		res, err := b.worker(t, worker.Config{Concurrency: 4, MaxJobs: 3}).Run(context.Background())
		if err != nil || res.Reason != spawner.ExitMaxJobs || res.Jobs != 3 {
			t.Fatalf("run = %+v, %v; want max_jobs after 3", res, err)
		}
		if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL AND attempts = 0`); n != 7 {
			t.Fatalf("%d untouched jobs left, want 7", n)
		}
	})
	t.Run("max memory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.worker(t, worker.Config{MaxMemoryMB: 10, HeartbeatInterval: 10 * time.Millisecond,
			MemoryMB: func() float64 { return 11 }}).Run(context.Background())
		if err != nil || res.Reason != spawner.ExitMaxMemory {
			t.Fatalf("run = %+v, %v; want max_memory", res, err)
		}
	})
	t.Run("max time", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.worker(t, worker.Config{MaxTime: 50 * time.Millisecond}).Run(context.Background())
		if err != nil || res.Reason != spawner.ExitMaxTime {
			t.Fatalf("run = %+v, %v; want max_time", res, err)
		}
	})
}

func TestWorkerWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := make(chan int64, 1)
	b.jobs.Handle("ping", func(_ context.Context, j *queue.Job) error { done <- j.ID; return nil })
	ready := make(chan struct{})
	var once sync.Once
	w := b.worker(t, worker.Config{PollInterval: time.Hour, Reports: func(r spawner.Report) {
		if r.Type == spawner.ReportReady {
			once.Do(func() { close(ready) })
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := w.Run(ctx); errc <- err }()
	<-ready
	// Give the worker its first (empty) claim and its LISTEN, then dispatch:
	// with an hour-long poll interval only the notification can wake it.
	waitFor(t, "the listener", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`) > 0
	})
	ids := b.dispatch(t, queue.NewJob("ping", nil))
	select {
	case id := <-done:
		if id != ids[0] {
			t.Fatalf("ran job %d, want %d", id, ids[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not wake up on the notification")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestWorkerStopLetsRunningJobsFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	b.jobs.Handle("slow", func(ctx context.Context, _ *queue.Job) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	for range 6 {
		b.dispatch(t, queue.NewJob("slow", nil))
	}
	w := b.worker(t, worker.Config{Concurrency: 2})
	sig := worker.InitSignals(w)
	ctx, cancel := context.WithCancel(context.Background())
	type out struct {
		res worker.Result
		err error
	}
	outc := make(chan out, 1)
	go func() { r, err := w.Run(ctx); outc <- out{r, err} }()
	<-started
	<-started
	cancel() // like SIGTERM: no new jobs, running ones go on
	if reason := sig.Stopping.Wait(t); reason != spawner.ExitStopped {
		t.Fatalf("stopping for %q, want %q", reason, spawner.ExitStopped)
	}
	close(release)
	o := <-outc
	if o.err != nil || o.res.Reason != spawner.ExitStopped || o.res.Jobs != 2 {
		t.Fatalf("run = %+v, %v; want stopped after 2", o.res, o.err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL AND attempts = 0`); n != 4 {
		t.Fatalf("%d untouched jobs, want 4", n)
	}
}

func TestWorkerTimeoutCancelsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("sleepy", func(ctx context.Context, _ *queue.Job) error {
		<-ctx.Done()
		return ctx.Err()
	})
	b.dispatch(t, queue.NewJob("sleepy", nil).Timeout(50*time.Millisecond).Tries(1))
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var msg string
	if err := b.pool.QueryRow(context.Background(), `SELECT error FROM queue_failed_jobs`).Scan(&msg); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg, "timed out after 50ms") {
		t.Fatalf("error = %q", msg)
	}
}

func TestWorkerGivesUpOnJobIgnoringTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	stubbornStarted := make(chan struct{})
	b.jobs.Handle("stubborn", func(context.Context, *queue.Job) error {
		close(stubbornStarted)
		<-unblock // ignores its context
		return nil
	})
	b.jobs.Handle("polite", func(ctx context.Context, _ *queue.Job) error {
		<-ctx.Done()
		<-unblock
		return nil
	})
	ids := b.dispatch(t,
		queue.NewJob("stubborn", nil).Timeout(50*time.Millisecond).Tries(3),
		queue.NewJob("polite", nil).Timeout(time.Hour))
	res, err := b.worker(t, worker.Config{Concurrency: 2, TimeoutGrace: 50 * time.Millisecond}).Run(context.Background())
	if !errors.Is(err, worker.ErrJobTimedOut) || res.Reason != spawner.ExitTimeout {
		t.Fatalf("run = %+v, %v; want ErrJobTimedOut", res, err)
	}
	<-stubbornStarted
	// The stubborn job's attempt counts and it waits for its retry; the other
	// job, still running after the grace period, was interrupted: it is back
	// in the queue, its attempt counted and its tries one more, so that it
	// runs next as attempt 2 with no try spent.
	var attempts int
	var lastErr string
	if err := b.pool.QueryRow(context.Background(),
		`SELECT attempts, last_error FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, ids[0]).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || !strings.Contains(lastErr, "did not stop within") {
		t.Fatalf("stubborn job: %d attempts, %q", attempts, lastErr)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL AND attempts = 1 AND max_tries = 4`, ids[1]); n != 1 {
		t.Fatal("the other job was not released with its attempt counted and a try more")
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'interrupted' AND attempt = 1`, ids[1]); n != 1 {
		t.Fatal("the other job has no interrupted attempt")
	}
}

func TestStaleLeaseChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.dispatch(t, queue.NewJob("x", nil))
	first, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 1, Worker: "a"})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim a: %v %v", first, err)
	}
	// The job is released (its holder was presumed dead) and claimed again.
	if _, err := b.pool.Exec(ctx, `UPDATE queue_jobs SET reserved_by = NULL`); err != nil {
		t.Fatal(err)
	}
	second, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 1, Worker: "b"})
	if err != nil || len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("claim b: %v %v", second, err)
	}
	done := func(j store.ClaimedJob) store.JobOutcome {
		now := time.Now()
		return store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now}
	}
	res, err := b.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "a", Outcomes: []store.JobOutcome{done(first[0])}})
	if err != nil || res.Written != 0 || len(res.Lost) != 1 {
		t.Fatalf("stale completion = %+v, %v; want lost", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by = 'b'`); n != 1 {
		t.Fatal("stale completion removed the job")
	}
	// A lost lease is recorded nowhere: no history row, no counter.
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs`); n != 0 {
		t.Fatalf("stale completion wrote %d history rows, want 0", n)
	}
	if n := b.count(t, `SELECT COALESCE(sum(processed), 0) FROM fleet_counters`); n != 0 {
		t.Fatalf("stale completion counted %d processed, want 0", n)
	}
	res, err = b.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "b", Outcomes: []store.JobOutcome{done(second[0])}})
	if err != nil || res.Written != 1 {
		t.Fatalf("completion = %+v, %v", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND attempt = 2 AND status = 'completed'`, ids[0]); n != 1 {
		t.Fatalf("completion wrote %d history rows, want 1", n)
	}
	res, err = b.st.JobFinishMany(ctx, store.JobFinishParams{Worker: "b", Outcomes: []store.JobOutcome{done(second[0])}})
	if err != nil || res.Written != 0 || len(res.Lost) != 1 {
		t.Fatalf("second completion of the same lease = %+v, %v; want lost", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs`); n != 1 {
		t.Fatalf("history rows = %d after writing the same outcome twice, want 1", n)
	}
	if n := b.count(t, `SELECT sum(processed) FROM fleet_counters`); n != 1 {
		t.Fatalf("processed = %d after writing the same outcome twice, want 1", n)
	}
}

func TestWorkerReports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var types []spawner.ReportType
	_, err := b.worker(t, worker.Config{StopWhenEmpty: true, Reports: func(r spawner.Report) {
		mu.Lock()
		types = append(types, r.Type)
		mu.Unlock()
	}}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(types) < 2 || types[0] != spawner.ReportReady || types[len(types)-1] != spawner.ReportExiting {
		t.Fatalf("reports = %v, want ready first and exiting last", types)
	}
}

func TestWorkerRecordsHistoryAndCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	b.jobs.Handle("bad", func(context.Context, *queue.Job) error { return errors.New("nope") })
	b.dispatch(t, queue.NewJob("ok", nil), queue.NewJob("ok", nil).OnQueue("mail"), queue.NewJob("bad", nil).Tries(2).Backoff(0))
	b.member(t, "m1")
	if _, err := b.worker(t, worker.Config{Queues: []string{"default", "mail"}, Name: "w1", Master: "m1", StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status = 'completed' AND worker = 'w1' AND master = 'm1' AND runtime_ms >= 0 AND finished_at >= started_at`); n != 2 {
		t.Errorf("%d completed attempts recorded, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status = 'failed' AND name = 'bad' AND error = 'nope'`); n != 2 {
		t.Errorf("%d failed attempts recorded, want 2", n)
	}
	if n := b.count(t, `SELECT sum(processed)::int FROM fleet_counters`); n != 4 {
		t.Errorf("processed counter = %d, want 4", n)
	}
	if n := b.count(t, `SELECT sum(failed)::int FROM fleet_counters WHERE queue = 'default'`); n != 2 {
		t.Errorf("failed counter = %d, want 2", n)
	}
	// queue_counts follows every insert, claim, retry and completion.
	if n := b.count(t, `SELECT COALESCE(sum(unreserved + reserved), 0)::int FROM queue_counts`); n != 0 {
		t.Errorf("queue_counts sums to %d with an empty queue", n)
	}
}

func TestWorkerSkipsPausedQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran sync.Map
	b.jobs.Handle("rec", func(_ context.Context, j *queue.Job) error { ran.Store(j.Queue, true); return nil })
	b.dispatch(t, queue.NewJob("rec", nil).OnQueue("mail"), queue.NewJob("rec", nil))
	w := b.worker(t, worker.Config{Queues: []string{"default", "mail"}, PausedQueues: []string{"mail"}, StopWhenEmpty: false, MaxTime: 300 * time.Millisecond})
	if _, err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := ran.Load("mail"); ok {
		t.Fatal("a paused queue's job ran")
	}
	if _, ok := ran.Load("default"); !ok {
		t.Fatal("the other queue's job did not run")
	}
	w = b.worker(t, worker.Config{Queues: []string{"mail"}, PausedQueues: []string{"mail"}})
	errc := make(chan error, 1)
	go func() { _, err := w.Run(context.Background()); errc <- err }()
	w.PauseQueues(nil)
	waitFor(t, "the resumed queue's job", func() bool { _, ok := ran.Load("mail"); return ok })
	w.Stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestWorkerSurvivesLostListenConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := make(chan int64, 4)
	b.jobs.Handle("ping", func(_ context.Context, j *queue.Job) error { done <- j.ID; return nil })
	w := b.worker(t, worker.Config{PollInterval: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := w.Run(ctx); errc <- err }()
	listening := func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`) > 0
	}
	waitFor(t, "the listener", listening)
	// The notification connection dies: polling still finds the job, and
	// the listener comes back.
	if n := b.count(t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%') k`); n != 1 {
		t.Fatalf("terminated %d listen connections, want 1", n)
	}
	ids := b.dispatch(t, queue.NewJob("ping", nil))
	select {
	case id := <-done:
		if id != ids[0] {
			t.Fatalf("ran %d, want %d", id, ids[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not picked up after the listen connection died")
	}
	waitFor(t, "the listener to reconnect", listening)
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A worker whose master's row is not live claims nothing, and exits with
// ExitFenced once that has lasted MasterTTL; the job stays for others.
func TestWorkerFencedWhenItsMasterIsOutOfView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	ids := b.dispatch(t, queue.NewJob("ok", nil))
	b.member(t, "frozen")
	if _, err := b.pool.Exec(context.Background(), `UPDATE fleet_masters SET expires_at = now() - interval '1 second' WHERE instance = 'frozen'`); err != nil {
		t.Fatal(err)
	}
	res, err := b.worker(t, worker.Config{Queues: []string{"default"}, Name: "w", Master: "frozen",
		MasterTTL: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != spawner.ExitFenced {
		t.Errorf("exit reason %q, want %q", res.Reason, spawner.ExitFenced)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL AND attempts = 0`, ids[0]); n != 1 {
		t.Error("a fenced worker claimed the job")
	}
}
