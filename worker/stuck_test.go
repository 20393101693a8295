package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// logLines returns the JSON log lines of buf whose message starts with
// prefix.
func logLines(t *testing.T, buf *syncbuf.Buffer, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// history returns the statuses and attempts of job id's history rows, in
// attempt order.
func (b *bundle) history(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		`SELECT status || ' ' || attempt FROM fleet_jobs WHERE job_id = $1 ORDER BY attempt, finished_at`, id)
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
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJobsBesideAStuckOneFinishWithinTheGrace: once the worker gives up on
// a job that ignores its timeout, it claims nothing more, and the jobs
// running beside it finish and are written as usual, at their first
// attempt, before the worker exits with ErrJobTimedOut: none is cut short
// or run again. The worker's clock makes the stuck job overdue; the jobs
// beside it end once its timed-out outcome is written, well within a grace
// period that only a hang would outlast.
func TestJobsBesideAStuckOneFinishWithinTheGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := testwait.NewClock(time.Now())
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	var started sync.WaitGroup
	b.jobs.Handle("stuck", func(context.Context, *queue.Job) error {
		started.Done()
		<-unblock // ignores its context
		return nil
	})
	givenUp := make(chan struct{})
	b.jobs.Handle("beside", func(context.Context, *queue.Job) error {
		started.Done()
		<-givenUp
		return nil
	})
	const beside = 5
	specs := []*queue.JobSpec{queue.NewJob("stuck", nil).Timeout(time.Minute).Tries(1)}
	for range beside {
		specs = append(specs, queue.NewJob("beside", nil).Timeout(24*time.Hour))
	}
	ids := b.dispatch(t, specs...)
	b.dispatch(t, queue.NewJob("beside", nil).Delay(time.Hour)) // never claimed: the worker stops claiming
	started.Add(1 + beside)
	logs := new(syncbuf.Buffer)
	var once sync.Once
	w := b.worker(t, worker.Config{Concurrency: 8, TimeoutGrace: testwait.Hang, Now: clock.Now,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		OnEvent: func(e queue.Event) {
			if e.JobID == ids[0] && e.TimedOut {
				once.Do(func() { close(givenUp) })
			}
		}})
	type out struct {
		res worker.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := w.Run(context.Background())
		done <- out{res, err}
	}()
	started.Wait()
	clock.Advance(time.Minute + testwait.Hang + time.Second)
	var o out
	select {
	case o = <-done:
	case <-time.After(testwait.Hang):
		t.Fatal("the worker did not exit once the jobs beside the stuck one were done")
	}
	if !errors.Is(o.err, worker.ErrJobTimedOut) || o.res.Reason != spawner.ExitTimeout || o.res.Jobs != 1+beside {
		t.Fatalf("run = %+v, %v; want ErrJobTimedOut after %d attempts", o.res, o.err, 1+beside)
	}
	if got := b.history(t, ids[0]); !slices.Equal(got, []string{"timed_out 1"}) {
		t.Errorf("the stuck job's history %v, want its timed-out attempt", got)
	}
	for _, id := range ids[1:] {
		if got := b.history(t, id); !slices.Equal(got, []string{"completed 1"}) {
			t.Errorf("job %d beside the stuck one: history %v, want completed at attempt 1", id, got)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL OR attempts > 0`); n != 0 {
		t.Errorf("%d jobs left reserved or claimed", n)
	}
	if n := len(logLines(t, logs, "interrupted")); n != 0 {
		t.Errorf("%d lines say jobs were interrupted, want none", n)
	}
	if l := logLines(t, logs, "the jobs running beside"); len(l) != 1 || l[0]["jobs"] != float64(beside) || l[0]["interrupted"] != float64(0) {
		t.Errorf("the line on the jobs beside: %v", l)
	}
}

// TestJobsBesideAStuckOneAreInterruptedAfterTheGrace: the jobs still
// running when the grace period beside a stuck job ends are interrupted:
// their contexts end with a cause that says why, each attempt gets an
// 'interrupted' history row, and the job runs again (here on a second
// worker) as its next attempt with as many tries left as before, so it
// completes once. One whose cancel was requested meanwhile, unseen by the
// worker, ends cancelled instead. The log says how many were interrupted
// and why.
func TestJobsBesideAStuckOneAreInterruptedAfterTheGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	var started sync.WaitGroup
	b.jobs.Handle("stuck", func(context.Context, *queue.Job) error {
		<-unblock // ignores its context
		return nil
	})
	type run struct {
		attempt, tries int
		cause          error
	}
	var mu sync.Mutex
	runs := map[int64][]run{}
	b.jobs.Handle("holder", func(ctx context.Context, j *queue.Job) error {
		if j.Attempt > 1 {
			mu.Lock()
			runs[j.ID] = append(runs[j.ID], run{j.Attempt, j.MaxTries, nil})
			mu.Unlock()
			return nil
		}
		started.Done()
		<-ctx.Done() // only its worker's interruption ends it
		mu.Lock()
		runs[j.ID] = append(runs[j.ID], run{j.Attempt, j.MaxTries, context.Cause(ctx)})
		mu.Unlock()
		return ctx.Err()
	})
	started.Add(3)
	ids := b.dispatch(t,
		queue.NewJob("holder", nil).Timeout(time.Hour).Tries(1),
		queue.NewJob("holder", nil).Timeout(time.Hour).Tries(5),
		queue.NewJob("holder", nil).Timeout(time.Hour),
	)
	holders, cancelled := ids[:2], ids[2]
	// Dispatched last, so that the holders run before it is given up on.
	stuck := b.dispatch(t, queue.NewJob("stuck", nil).Timeout(50*time.Millisecond).Tries(1))[0]
	logs := new(syncbuf.Buffer)
	w := b.worker(t, worker.Config{Concurrency: 4, TimeoutGrace: 100 * time.Millisecond, CancelPollInterval: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	type out struct {
		res worker.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := w.Run(context.Background())
		done <- out{res, err}
	}()
	started.Wait()
	// A cancel request the worker never hears of: written, never notified.
	if _, err := b.pool.Exec(context.Background(),
		`UPDATE queue_jobs SET cancel_requested_at = now(), cancelled_by = 'ops' WHERE id = $1`, cancelled); err != nil {
		t.Fatal(err)
	}
	var o out
	select {
	case o = <-done:
	case <-time.After(testwait.Hang):
		t.Fatal("the worker did not exit after the grace period")
	}
	if !errors.Is(o.err, worker.ErrJobTimedOut) || o.res.Reason != spawner.ExitTimeout {
		t.Fatalf("run = %+v, %v; want ErrJobTimedOut", o.res, o.err)
	}
	if got := b.history(t, stuck); !slices.Equal(got, []string{"timed_out 1"}) {
		t.Errorf("the stuck job's history %v", got)
	}
	if got := b.history(t, cancelled); !slices.Equal(got, []string{"cancelled 1"}) {
		t.Errorf("the job with a cancel request: history %v, want cancelled", got)
	}
	for _, id := range holders {
		if got := b.history(t, id); !slices.Equal(got, []string{"interrupted 1"}) {
			t.Errorf("holder %d: history %v, want its interrupted attempt 1", id, got)
		}
	}
	l := logLines(t, logs, "interrupted the jobs still running")
	if len(l) != 1 || l[0]["jobs"] != float64(3) || l[0]["why"] != "another job ignored its timeout" {
		t.Errorf("the line on the interrupted jobs: %v", l)
	}

	// The holders run again on a fresh worker, as their next attempt.
	res, err := b.worker(t, worker.Config{Concurrency: 4, StopWhenEmpty: true}).Run(context.Background())
	if err != nil || res.Jobs != 2 {
		t.Fatalf("the second worker: %+v, %v", res, err)
	}
	for _, id := range holders {
		if got := b.history(t, id); !slices.Equal(got, []string{"interrupted 1", "completed 2"}) {
			t.Errorf("holder %d: history %v, want interrupted at 1, completed at 2", id, got)
		}
		mu.Lock()
		r := runs[id]
		mu.Unlock()
		if len(r) != 2 || r[0].attempt != 1 || r[1].attempt != 2 || r[1].tries-r[1].attempt != r[0].tries-r[0].attempt {
			t.Errorf("holder %d ran %+v: want attempts 1 then 2 with as many tries left", id, r)
			continue
		}
		if r[0].cause == nil || !strings.Contains(r[0].cause.Error(), "interrupted: its worker exits because another job ignored its timeout") {
			t.Errorf("holder %d's context ended with %v", id, r[0].cause)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`) + b.count(t, `SELECT count(*) FROM queue_failed_jobs WHERE job_id <> $1`, stuck); n != 0 {
		t.Errorf("%d jobs left queued or failed", n)
	}
	if n := b.count(t, `SELECT COALESCE(sum(interrupted), 0)::int FROM fleet_counters`); n != 2 {
		t.Errorf("interrupted counter %d, want 2", n)
	}
}

// TestJobsBesideAJobIgnoringItsCancelAreInterrupted: a job that ignores an
// operator's cancel past the grace is given up on as one that ignores its
// timeout: it ends cancelled, the job running beside it is interrupted
// after the grace with the cause and the log line saying it was for an
// ignored cancel, and Run returns ErrJobIgnoredCancel.
func TestJobsBesideAJobIgnoringItsCancelAreInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	var started sync.WaitGroup
	started.Add(2)
	b.jobs.Handle("stubborn", func(context.Context, *queue.Job) error {
		started.Done()
		<-unblock // ignores its context
		return nil
	})
	causes := make(chan error, 1)
	b.jobs.Handle("holder", func(ctx context.Context, _ *queue.Job) error {
		started.Done()
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	ids := b.dispatch(t, queue.NewJob("stubborn", nil).Timeout(time.Hour), queue.NewJob("holder", nil).Timeout(time.Hour))
	logs := new(syncbuf.Buffer)
	w := b.worker(t, worker.Config{Concurrency: 2, TimeoutGrace: 100 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	type out struct {
		res worker.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := w.Run(context.Background())
		done <- out{res, err}
	}()
	started.Wait()
	if _, err := b.st.JobCancel(context.Background(), ids[:1], "gina"); err != nil {
		t.Fatal(err)
	}
	var o out
	select {
	case o = <-done:
	case <-time.After(testwait.Hang):
		t.Fatal("the worker did not give up on the job")
	}
	if !errors.Is(o.err, worker.ErrJobIgnoredCancel) || o.res.Reason != spawner.ExitTimeout {
		t.Fatalf("run = %+v, %v; want ErrJobIgnoredCancel", o.res, o.err)
	}
	if got := b.history(t, ids[0]); !slices.Equal(got, []string{"cancelled 1"}) {
		t.Errorf("the stubborn job's history %v", got)
	}
	if got := b.history(t, ids[1]); !slices.Equal(got, []string{"interrupted 1"}) {
		t.Errorf("the holder's history %v", got)
	}
	if cause := <-causes; cause == nil || !strings.Contains(cause.Error(), "another job ignored its cancel") {
		t.Errorf("the holder's context ended with %v", cause)
	}
	if l := logLines(t, logs, "interrupted the jobs still running"); len(l) != 1 || l[0]["jobs"] != float64(1) || l[0]["why"] != "another job ignored its cancel" {
		t.Errorf("the line on the interrupted jobs: %v", l)
	}
}

// A job that ignores its timeout is given up on at its time while a
// statement of the worker's loop is held up: here its look for work,
// blocked by a lock on queue_jobs taken after the job started.
func TestStuckJobIsGivenUpOnWhileAStatementHangs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	started := make(chan struct{})
	b.jobs.Handle("stuck", func(context.Context, *queue.Job) error {
		close(started)
		<-unblock // ignores its context
		return nil
	})
	stuck := b.dispatch(t, queue.NewJob("stuck", nil).Timeout(50*time.Millisecond).Tries(1))[0]
	logs := new(syncbuf.Buffer)
	w := b.worker(t, worker.Config{Concurrency: 2, TimeoutGrace: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		CancelPollInterval: time.Hour, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	done := make(chan error, 1)
	go func() {
		_, err := w.Run(context.Background())
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(testwait.Hang):
		t.Fatal("the stuck job never started")
	}
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // before unblock: a failure below leaves it held
	if _, err := tx.Exec(ctx, `LOCK TABLE queue_jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, testwait.Slack*5*time.Second, "a statement of the worker waiting for the lock", func() bool {
		var n int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%queue_jobs%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	testwait.Eventually(t, testwait.Slack*5*time.Second, "the stuck job given up on while the statement waits", func() bool {
		return strings.Contains(logs.String(), "job ignored its timeout or cancel; giving up on it")
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, worker.ErrJobTimedOut) {
			t.Fatalf("run: %v, want ErrJobTimedOut", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the worker did not exit once the lock went")
	}
	if got := b.history(t, stuck); !slices.Equal(got, []string{"timed_out 1"}) {
		t.Errorf("the stuck job's history %v, want timed_out 1", got)
	}
}
