package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// thumbnail is the args of a typed job in these tests.
type thumbnail struct {
	Path string `json:"path"`
	Size int    `json:"size"`
}

func (thumbnail) JobName() string { return "image.thumbnail" }

// runEmpty runs a worker of the default queue until nothing is left.
func runEmpty(t *testing.T, b *bundle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.worker(t, worker.Config{Concurrency: 4, StopWhenEmpty: true}).Run(ctx)
	if err != nil || res.Reason != spawner.ExitEmpty {
		t.Fatalf("worker ended with %+v, %v", res, err)
	}
}

// failedError is the error a job that failed for good was moved with.
func (b *bundle) failedError(t *testing.T, id int64) string {
	t.Helper()
	var msg string
	if err := b.pool.QueryRow(context.Background(), `SELECT error FROM queue_failed_jobs WHERE job_id = $1`, id).Scan(&msg); err != nil {
		t.Fatalf("read failed job %d: %v", id, err)
	}
	return msg
}

// TestWorkerRunsTypedJobs: a worker decodes a typed job's payload into
// its args; a payload that does not fit fails the attempt with an error
// naming the job, the field and the Go type.
func TestWorkerRunsTypedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var got []thumbnail
	queue.HandleTyped(b.jobs, func(_ context.Context, _ *queue.Job, args thumbnail) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, args)
		return nil
	})
	b.dispatch(t, queue.NewTypedJob(thumbnail{Path: "a.png", Size: 64}), queue.NewTypedJob(thumbnail{Path: "b.png", Size: 128}))
	bad := b.dispatch(t, queue.NewJob("image.thumbnail", map[string]any{"path": "c.png", "size": "large"}).Tries(1))[0]
	runEmpty(t, b)

	slices.SortFunc(got, func(x, y thumbnail) int { return x.Size - y.Size })
	if want := []thumbnail{{"a.png", 64}, {"b.png", 128}}; !slices.Equal(got, want) {
		t.Errorf("handler got %+v, want %+v", got, want)
	}
	want := fmt.Sprintf(`decode args of job %d (image.thumbnail) into worker_test.thumbnail: field "size": JSON string does not fit Go type int`, bad)
	if msg := b.failedError(t, bad); msg != want {
		t.Errorf("failed job's error = %q, want %q", msg, want)
	}
}

// TestWorkerRunsWorkMiddleware: every job a worker runs passes through the
// registry's middleware, outermost first, and a panic in middleware is a
// failed attempt with its stack.
func TestWorkerRunsWorkMiddleware(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	runs := map[int64][]string{}
	note := func(id int64, s string) {
		mu.Lock()
		defer mu.Unlock()
		runs[id] = append(runs[id], s)
	}
	layer := func(name string) queue.WorkMiddleware {
		return func(next queue.HandlerFunc) queue.HandlerFunc {
			return func(ctx context.Context, job *queue.Job) error {
				note(job.ID, name+" in")
				err := next(ctx, job)
				note(job.ID, name+" out")
				return err
			}
		}
	}
	b.jobs.Use(layer("outer"), layer("inner"))
	b.jobs.Use(func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, job *queue.Job) error {
			if job.Name == "poisoned" {
				panic("middleware refuses poison")
			}
			return next(ctx, job)
		}
	})
	b.jobs.Handle("plain", func(_ context.Context, job *queue.Job) error { note(job.ID, "handler"); return nil })
	b.jobs.Handle("poisoned", func(_ context.Context, job *queue.Job) error { note(job.ID, "handler"); return nil })
	ids := b.dispatch(t, queue.NewJob("plain", nil), queue.NewJob("plain", nil), queue.NewJob("poisoned", nil).Tries(1))
	runEmpty(t, b)

	for _, id := range ids[:2] {
		if got, want := strings.Join(runs[id], ","), "outer in,inner in,handler,inner out,outer out"; got != want {
			t.Errorf("job %d ran %s, want %s", id, got, want)
		}
	}
	// The panic unwinds the layers outside it: they never get to their "out".
	if got, want := strings.Join(runs[ids[2]], ","), "outer in,inner in"; got != want {
		t.Errorf("poisoned job ran %s, want %s", got, want)
	}
	if msg := b.failedError(t, ids[2]); !strings.HasPrefix(msg, "panic: middleware refuses poison") || !strings.Contains(msg, "goroutine") {
		t.Errorf("poisoned job's error = %q, want the panic's value and stack", msg)
	}
}

// TestWorkerCallsErrorHookOncePerFailedAttempt: an error, a panic and a
// payload that does not decode each reach the hook once per attempt, with
// the attempt's number; a success does not.
func TestWorkerCallsErrorHookOncePerFailedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("fails", func(context.Context, *queue.Job) error { return errors.New("broken") })
	b.jobs.Handle("panics", func(context.Context, *queue.Job) error { panic("oops") })
	b.jobs.Handle("works", func(context.Context, *queue.Job) error { return nil })
	queue.HandleTyped(b.jobs, func(context.Context, *queue.Job, thumbnail) error { return nil })
	var mu sync.Mutex
	var calls []string
	b.jobs.OnError(func(ctx context.Context, job *queue.Job, err error) {
		mu.Lock()
		defer mu.Unlock()
		msg, _, _ := strings.Cut(err.Error(), "\n")
		msg, _, _ = strings.Cut(msg, " into ")
		calls = append(calls, fmt.Sprintf("%s %d/%d: %s", job.Name, job.Attempt, job.MaxTries, msg))
	})
	b.dispatch(t,
		queue.NewJob("fails", nil).Tries(3).Backoff(0),
		queue.NewJob("panics", nil).Tries(1),
		queue.NewJob("works", nil),
		queue.NewJob("image.thumbnail", []byte(`{"size":"x"}`)).Tries(2).Backoff(0),
	)
	runEmpty(t, b)

	slices.Sort(calls)
	want := []string{
		"fails 1/3: broken", "fails 2/3: broken", "fails 3/3: broken",
		"image.thumbnail 1/2: decode args of job ", "image.thumbnail 2/2: decode args of job ",
		"panics 1/1: panic: oops",
	}
	for i := range calls {
		if strings.HasPrefix(calls[i], "image.thumbnail") {
			calls[i] = calls[i][:strings.Index(calls[i], "job ")+4]
		}
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("error hook calls:\n%s\nwant\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
}

// TestWorkerSendsEventsAfterWriting: a subscriber gets one event per
// attempt, each only once the attempt's outcome is in the database (the
// subscriber checks as it receives it, while the worker runs on).
func TestWorkerSendsEventsAfterWriting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	b.jobs.Handle("flaky", func(_ context.Context, j *queue.Job) error {
		if j.Attempt == 1 {
			return errors.New("not yet")
		}
		return nil
	})
	b.jobs.Handle("bad", func(context.Context, *queue.Job) error { return errors.New("never") })
	b.jobs.Handle("slow", func(ctx context.Context, _ *queue.Job) error { <-ctx.Done(); return ctx.Err() })
	sub := b.jobs.Subscribe()
	defer sub.Close()

	type seen struct {
		queue.Event
		durable bool // the outcome was in the database when the event came
	}
	ctx := context.Background()
	durable := func(e queue.Event) bool {
		status := map[queue.EventKind]string{queue.EventCompleted: "completed", queue.EventRetried: "failed", queue.EventFailed: "failed"}[e.Kind]
		if e.TimedOut {
			status = "timed_out"
		}
		var history, queued, failed int
		err := b.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND attempt = $2 AND status = $3),
			(SELECT count(*) FROM queue_jobs WHERE id = $1),
			(SELECT count(*) FROM queue_failed_jobs WHERE job_id = $1)`, e.JobID, e.Attempt, status).Scan(&history, &queued, &failed)
		if err != nil {
			t.Errorf("check event %+v: %v", e, err)
			return false
		}
		switch e.Kind {
		case queue.EventCompleted:
			return history == 1 && queued == 0
		case queue.EventRetried:
			return history == 1 // the job may have run again since
		default:
			return history == 1 && queued == 0 && failed == 1
		}
	}
	var got []seen
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for e := range sub.Events() {
			got = append(got, seen{e, durable(e)})
		}
	}()
	ids := b.dispatch(t,
		queue.NewJob("ok", nil),
		queue.NewJob("flaky", nil).Tries(3).Backoff(0),
		queue.NewJob("bad", nil).Tries(2).Backoff(0),
		queue.NewJob("slow", nil).Tries(1).Timeout(20*time.Millisecond),
	)
	runEmpty(t, b)
	sub.Close()
	<-consumed

	type key struct {
		id      int64
		attempt int
	}
	byAttempt := map[key]seen{}
	for _, e := range got {
		if !e.durable {
			t.Errorf("event %+v came before its outcome was in the database", e.Event)
		}
		if e.Queue != "default" || e.Runtime <= 0 || e.At.IsZero() || time.Since(e.At) > time.Minute {
			t.Errorf("event %+v lacks its queue, runtime or time", e.Event)
		}
		byAttempt[key{e.JobID, e.Attempt}] = e
	}
	want := []struct {
		id       int64
		attempt  int
		kind     queue.EventKind
		name     string
		err      string
		timedOut bool
	}{
		{ids[0], 1, queue.EventCompleted, "ok", "", false},
		{ids[1], 1, queue.EventRetried, "flaky", "not yet", false},
		{ids[1], 2, queue.EventCompleted, "flaky", "", false},
		{ids[2], 1, queue.EventRetried, "bad", "never", false},
		{ids[2], 2, queue.EventFailed, "bad", "never", false},
		{ids[3], 1, queue.EventFailed, "slow", "timed out after 20ms: context deadline exceeded", true},
	}
	if len(got) != len(want) || sub.Dropped() != 0 {
		t.Errorf("got %d events (%d dropped), want %d", len(got), sub.Dropped(), len(want))
	}
	for _, w := range want {
		e, ok := byAttempt[key{w.id, w.attempt}]
		if !ok {
			t.Errorf("no event for attempt %d of job %d (%s)", w.attempt, w.id, w.name)
			continue
		}
		if e.Kind != w.kind || e.Name != w.name || e.Error != w.err || e.TimedOut != w.timedOut {
			t.Errorf("attempt %d of job %d: event %+v, want %s %s error %q timed out %v",
				w.attempt, w.id, e.Event, w.kind, w.name, w.err, w.timedOut)
		}
	}
}

// TestCompleteTxSendsCompletedEvent: a job its handler completed in its
// own, committed, transaction is a completed event; one whose transaction
// rolled back is a retried one, then completed.
func TestCompleteTxSendsCompletedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	b.jobs.Handle("tx.job", insertThenComplete(b, nil))
	b.jobs.Handle("tx.rollback", insertThenComplete(b, func(ctx context.Context, tx pgx.Tx, j *queue.Job) error {
		if j.Attempt == 1 {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}))
	sub := b.jobs.Subscribe()
	defer sub.Close()
	ids := b.dispatch(t, queue.NewJob("tx.job", nil), queue.NewJob("tx.rollback", nil).Backoff(0))
	runUntilEmpty(t, b)
	sub.Close()
	var got []string
	for e := range sub.Events() {
		got = append(got, fmt.Sprintf("%d/%d %s", e.JobID, e.Attempt, e.Kind))
	}
	slices.Sort(got)
	want := []string{
		fmt.Sprintf("%d/1 completed", ids[0]),
		fmt.Sprintf("%d/1 retried", ids[1]),
		fmt.Sprintf("%d/2 completed", ids[1]),
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}
