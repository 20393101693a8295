package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// statuses lists a job's history statuses in order.
func (b *bundle) statuses(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		`SELECT status FROM fleet_jobs WHERE job_id = $1 ORDER BY finished_at, attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestSnoozeDoesNotUseUpTries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var attempts, snoozes []int
	b.jobs.Handle("snoozy", func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		defer mu.Unlock()
		attempts, snoozes = append(attempts, j.Attempt), append(snoozes, j.Snoozes)
		if len(attempts) <= 3 {
			return queue.Snooze(0)
		}
		return nil
	})
	id := b.dispatch(t, queue.NewJob("snoozy", nil).Tries(1))[0]
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := b.statuses(t, id), []string{"snoozed", "snoozed", "snoozed", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if !slices.Equal(snoozes, []int{0, 1, 2, 3}) {
		t.Errorf("snoozes seen %v, want 0, 1, 2, 3", snoozes)
	}
	if !slices.Equal(attempts, []int{1, 1, 1, 1}) {
		t.Fatalf("attempts seen %v, want every run to be attempt 1", attempts)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_failed_jobs`); n != 0 {
		t.Fatal("the job failed")
	}
	var processed, failed int
	if err := b.pool.QueryRow(context.Background(),
		`SELECT sum(processed), sum(failed) FROM fleet_counters`).Scan(&processed, &failed); err != nil {
		t.Fatal(err)
	}
	if processed != 1 || failed != 0 {
		t.Fatalf("counters processed %d failed %d, want 1 and 0: snoozes are neither", processed, failed)
	}
}

func TestSnoozeDelaysAndIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("later", func(context.Context, *queue.Job) error { return queue.Snooze(time.Hour) })
	ids := b.dispatch(t, queue.NewJob("later", nil).Tries(1), queue.NewJob("later", nil).Tries(1))
	// The second job has snoozed as often as it may already.
	if _, err := b.pool.Exec(context.Background(), `UPDATE queue_jobs SET snoozes = $1 WHERE id = $2`, queue.MaxSnoozes, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND attempts = 0 AND snoozes = 1
		AND available_at > now() + interval '59 minutes' AND reserved_by IS NULL`, ids[0]); n != 1 {
		t.Fatal("the snoozed job is not waiting an hour with its attempt taken back")
	}
	var msg string
	if err := b.pool.QueryRow(context.Background(), `SELECT error FROM queue_failed_jobs WHERE job_id = $1`, ids[1]).Scan(&msg); err != nil {
		t.Fatalf("the job over the snooze cap did not fail: %v", err)
	}
	if !strings.Contains(msg, "snoozed more than 100 times") {
		t.Fatalf("error %q", msg)
	}
}

func TestSnoozeOfALimitedJobFreesItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("first", func(context.Context, *queue.Job) error { return queue.Snooze(time.Hour) })
	b.jobs.Handle("second", func(context.Context, *queue.Job) error { return nil })
	ids := b.dispatch(t, queue.NewJob("first", nil).Limit("k", 1), queue.NewJob("second", nil).Limit("k", 1))
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, ids[1]); !slices.Equal(got, []string{"completed"}) {
		t.Fatalf("the second job's history is %v: the snoozing job kept the slot", got)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND available_at = 'infinity'
		AND limit_due > now() + interval '59 minutes'`, ids[0]); n != 1 {
		t.Fatal("the snoozed limited job is not parked until its snooze ends")
	}
	if n := b.count(t, `SELECT active FROM queue_limits WHERE key = 'k'`); n != 0 {
		t.Fatalf("active = %d, want 0", n)
	}
}

func TestHandlerCancelEndsWithoutRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("moot", func(context.Context, *queue.Job) error {
		return queue.Cancel(errors.New("the order was withdrawn"))
	})
	b.jobs.Handle("moot-nil", func(context.Context, *queue.Job) error { return queue.Cancel(nil) })
	ids := b.dispatch(t, queue.NewJob("moot", nil).Tries(3).Limit("k", 1), queue.NewJob("moot-nil", nil).Tries(3))
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got := b.statuses(t, id); !slices.Equal(got, []string{"cancelled"}) {
			t.Fatalf("job %d history %v, want one cancelled attempt", id, got)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`) + b.count(t, `SELECT count(*) FROM queue_failed_jobs`); n != 0 {
		t.Fatal("a cancelled job is queued or failed")
	}
	var msg string
	if err := b.pool.QueryRow(context.Background(), `SELECT error FROM fleet_jobs WHERE job_id = $1`, ids[0]).Scan(&msg); err != nil {
		t.Fatal(err)
	}
	if msg != "the job was cancelled: the order was withdrawn" {
		t.Fatalf("error %q", msg)
	}
	if n := b.count(t, `SELECT active FROM queue_limits WHERE key = 'k'`); n != 0 {
		t.Fatalf("active = %d, want the slot given back", n)
	}
	if n := b.count(t, `SELECT sum(failed) FROM fleet_counters`); n != 0 {
		t.Fatalf("failed counter %d, want 0", n)
	}
}

// cancelRig runs a worker whose "wait" handler reports when it starts and
// when its context ends, with the context's cause.
type cancelRig struct {
	*bundle
	started chan int64
	stopped chan stopped
	done    chan runResult
	w       *worker.Worker
}

type stopped struct {
	id    int64
	at    time.Time
	cause error
}

type runResult struct {
	res worker.Result
	err error
}

func newCancelRig(t *testing.T, cfg worker.Config, ignore bool) *cancelRig {
	t.Helper()
	r := &cancelRig{bundle: setup(t), started: make(chan int64, 64), stopped: make(chan stopped, 64), done: make(chan runResult, 1)}
	unblock := make(chan struct{})
	r.jobs.Handle("wait", func(ctx context.Context, j *queue.Job) error {
		r.started <- j.ID
		<-ctx.Done()
		r.stopped <- stopped{id: j.ID, at: time.Now(), cause: context.Cause(ctx)}
		if ignore {
			<-unblock
		}
		return ctx.Err()
	})
	r.w = r.worker(t, cfg)
	go func() {
		res, err := r.w.Run(context.Background())
		r.done <- runResult{res, err}
	}()
	t.Cleanup(func() {
		close(unblock)
		r.w.Stop()
		<-r.done
	})
	return r
}

func (r *cancelRig) waitStarted(t *testing.T) int64 {
	t.Helper()
	select {
	case id := <-r.started:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
		return 0
	}
}

func (r *cancelRig) waitStopped(t *testing.T) stopped {
	t.Helper()
	select {
	case s := <-r.stopped:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end")
		return stopped{}
	}
}

func TestCancelOfARunningJobStopsItsHandler(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, worker.Config{CancelPollInterval: time.Hour}, false)
	id := r.dispatch(t, queue.NewJob("wait", nil).Tries(3).Limit("k", 1))[0]
	if got := r.waitStarted(t); got != id {
		t.Fatalf("started %d", got)
	}
	res, err := r.st.JobCancel(context.Background(), []int64{id}, "dave")
	if err != nil || res[0].State != store.JobCancelRequested {
		t.Fatalf("cancel = %+v, %v", res, err)
	}
	s := r.waitStopped(t)
	if !errors.Is(s.cause, queue.ErrCancelled) || !strings.Contains(s.cause.Error(), "dave") {
		t.Fatalf("cause %v, want queue.ErrCancelled by dave", s.cause)
	}
	waitFor(t, "the job to end", func() bool { return r.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	r.w.Stop()
	if out := <-r.done; out.err != nil {
		t.Fatalf("run: %v", out.err)
	}
	r.done <- runResult{}
	if got := r.statuses(t, id); !slices.Equal(got, []string{"cancelled"}) {
		t.Fatalf("history %v, want one cancelled attempt", got)
	}
	var msg string
	if err := r.pool.QueryRow(context.Background(), `SELECT error FROM fleet_jobs WHERE job_id = $1`, id).Scan(&msg); err != nil {
		t.Fatal(err)
	}
	if msg != "cancelled by dave: context canceled" {
		t.Fatalf("error %q", msg)
	}
	if n := r.count(t, `SELECT active FROM queue_limits WHERE key = 'k'`); n != 0 {
		t.Fatalf("active = %d, want the slot given back", n)
	}
}

func TestCancelReachesTheWorkerByItsPollWithoutANotification(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, worker.Config{CancelPollInterval: 50 * time.Millisecond}, false)
	id := r.dispatch(t, queue.NewJob("wait", nil).Tries(3))[0]
	r.waitStarted(t)
	// The request as a lost notification leaves it: written, never notified.
	if _, err := r.pool.Exec(context.Background(),
		`UPDATE queue_jobs SET cancel_requested_at = now(), cancelled_by = 'erin' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if s := r.waitStopped(t); !errors.Is(s.cause, queue.ErrCancelled) {
		t.Fatalf("cause %v", s.cause)
	}
	waitFor(t, "the job to end", func() bool { return r.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	if got := r.statuses(t, id); !slices.Equal(got, []string{"cancelled"}) {
		t.Fatalf("history %v", got)
	}
}

func TestCancelledJobIgnoringItsContextEndsCancelledNeverRetried(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, worker.Config{Concurrency: 2, TimeoutGrace: 50 * time.Millisecond}, true)
	ids := r.dispatch(t, queue.NewJob("wait", nil).Tries(3))
	r.waitStarted(t)
	if _, err := r.st.JobCancel(context.Background(), ids, "frank"); err != nil {
		t.Fatal(err)
	}
	r.waitStopped(t)
	var out runResult
	select {
	case out = <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not give up on the job")
	}
	r.done <- out
	if !errors.Is(out.err, worker.ErrJobIgnoredCancel) || !errors.Is(out.err, worker.ErrJobTimedOut) || out.res.Reason != spawner.ExitTimeout {
		t.Fatalf("run = %+v, %v; want ErrJobIgnoredCancel", out.res, out.err)
	}
	if got := r.statuses(t, ids[0]); !slices.Equal(got, []string{"cancelled"}) {
		t.Fatalf("history %v, want one cancelled attempt", got)
	}
	if n := r.count(t, `SELECT count(*) FROM queue_jobs`) + r.count(t, `SELECT count(*) FROM queue_failed_jobs`); n != 0 {
		t.Fatal("the cancelled job is still queued or failed")
	}
}

// TestCancelWakeUp measures how long a cancel takes to reach a running
// handler through a real worker (JobCancel called → the handler's context
// done), over 50 cancels, and logs the median and 95th percentile.
func TestCancelWakeUp(t *testing.T) {
	t.Parallel()
	const n = 50
	r := newCancelRig(t, worker.Config{Concurrency: 4}, false)
	ctx := context.Background()
	var took []time.Duration
	for range n {
		id := r.dispatch(t, queue.NewJob("wait", nil))[0]
		if got := r.waitStarted(t); got != id {
			t.Fatalf("started %d, want %d", got, id)
		}
		at := time.Now()
		if _, err := r.st.JobCancel(ctx, []int64{id}, "bench"); err != nil {
			t.Fatal(err)
		}
		s := r.waitStopped(t)
		took = append(took, s.at.Sub(at))
	}
	slices.Sort(took)
	t.Logf("cancel wake-up over %d cancels of running jobs: p50 %s, p95 %s, max %s",
		n, took[n/2], took[n*95/100], took[n-1])
}
