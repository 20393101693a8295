package fleettest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// DefaultTimeout bounds Drain and WorkOne when their context has no
// deadline: queues that never empty (a handler that dispatches itself
// again and again) fail the test instead of hanging it.
const DefaultTimeout = time.Minute

// Counts is what a Drain did: how many attempts ended each way, and their
// events in the order they were written.
type Counts struct {
	// Completed attempts finished their job.
	Completed int
	// Retried attempts failed with tries left: the job runs again after
	// its backoff.
	Retried int
	// Failed attempts were their job's last: it moved to the failed jobs.
	Failed int
	// Snoozed and Cancelled attempts ended with a snooze or a cancel.
	Snoozed   int
	Cancelled int
	// Events are the attempts' events (see queue.Event), as the worker
	// wrote them.
	Events []queue.Event
}

// Attempts is how many attempts ran.
func (c Counts) Attempts() int { return len(c.Events) }

func (c *Counts) add(e queue.Event) {
	c.Events = append(c.Events, e)
	switch e.Kind {
	case queue.EventCompleted:
		c.Completed++
	case queue.EventRetried:
		c.Retried++
	case queue.EventFailed:
		c.Failed++
	case queue.EventSnoozed:
		c.Snoozed++
	case queue.EventCancelled:
		c.Cancelled++
	}
}

// Drain works queues (in priority order, the first first) with jobs, the
// application's registry, until none of their jobs is ready, and returns
// what the attempts did. It runs the real worker (worker.New, with
// StopWhenEmpty) in the test's process and returns once every outcome is
// written, so middleware, typed decoding, error hooks, retries and
// CompleteTx behave as in production. Jobs that handlers dispatch onto
// these queues meanwhile are worked too; a failed attempt whose retry is
// due at once (no backoff) runs again within the same Drain, one waiting
// out a backoff does not: MakeDue makes it due, and the next Drain runs
// it. The worker runs one job at a time, so jobs run in the order a claim
// takes them (lowest priority, then oldest); DrainWith takes a config.
//
// It fails the test when the worker cannot start or stops for another
// reason (ctx ending; a job ignoring its timeout), and when the queues
// are not drained within ctx's deadline, or DefaultTimeout when it has
// none.
func Drain(ctx context.Context, t testing.TB, pool *pgxpool.Pool, jobs *queue.Registry, queues ...string) Counts {
	t.Helper()
	return DrainWith(ctx, t, pool, jobs, worker.Config{Queues: queues})
}

// DrainWith is Drain with a worker config of the test's: its Queues,
// Concurrency (default 1 here), Tries, Backoff, DefaultTimeout and the
// rest apply, as [fleet.supervisors] would set them in production.
// StopWhenEmpty is always on; Logger defaults to the test's log (t.Log,
// shown with -v or when the test fails); OnEvent, when set, is called as
// well.
func DrainWith(ctx context.Context, t testing.TB, pool *pgxpool.Pool, jobs *queue.Registry, cfg worker.Config) Counts {
	t.Helper()
	c, res := run(ctx, t, pool, jobs, cfg)
	switch res.Reason {
	case spawner.ExitEmpty, spawner.ExitMaxJobs, spawner.ExitMaxTime:
	default:
		left := Dispatched(t, pool, "")
		t.Fatalf("fleettest: queues %v not drained: the worker stopped (%s) after %d attempts; %d jobs are left:%s",
			cfg.Queues, res.Reason, c.Attempts(), len(left), listing(left))
	}
	return c
}

// WorkOne runs the next ready job of queueName, one attempt of it, with
// the real worker (see Drain), and returns its outcome; ok is false when
// no job was ready. A retry waiting out its backoff is not ready: MakeDue
// makes it so.
func WorkOne(ctx context.Context, t testing.TB, pool *pgxpool.Pool, jobs *queue.Registry, queueName string) (e queue.Event, ok bool) {
	t.Helper()
	return WorkOneWith(ctx, t, pool, jobs, worker.Config{Queues: []string{queueName}})
}

// WorkOneWith is WorkOne with a worker config of the test's (see
// DrainWith); its queues are looked at in order. It runs one job, whatever
// Concurrency, MaxJobs and Prefetch say.
func WorkOneWith(ctx context.Context, t testing.TB, pool *pgxpool.Pool, jobs *queue.Registry, cfg worker.Config) (e queue.Event, ok bool) {
	t.Helper()
	cfg.Concurrency, cfg.MaxJobs, cfg.Prefetch = 1, 1, -1
	c, res := run(ctx, t, pool, jobs, cfg)
	switch {
	case res.Reason != spawner.ExitEmpty && res.Reason != spawner.ExitMaxJobs:
		t.Fatalf("fleettest: work one job of %v: the worker stopped (%s)", cfg.Queues, res.Reason)
	case len(c.Events) > 1:
		t.Fatalf("fleettest: work one job of %v: %d attempts ran", cfg.Queues, len(c.Events))
	case len(c.Events) == 0:
		return queue.Event{}, false
	}
	return c.Events[0], true
}

// run runs a worker of cfg until it stops and returns its events.
func run(ctx context.Context, t testing.TB, pool *pgxpool.Pool, jobs *queue.Registry, cfg worker.Config) (Counts, worker.Result) {
	t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	cfg.StopWhenEmpty = true
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.VacuumEvery == 0 {
		cfg.VacuumEvery = -1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testLog{t}, nil))
	}
	var mu sync.Mutex
	var c Counts
	also := cfg.OnEvent
	cfg.OnEvent = func(e queue.Event) {
		mu.Lock()
		c.add(e)
		mu.Unlock()
		if also != nil {
			also(e)
		}
	}
	w, err := worker.New(store.New(pool), jobs, cfg)
	if err != nil {
		t.Fatalf("fleettest: %v", fmt.Errorf("start a worker: %w", err))
	}
	res, err := w.Run(ctx)
	if err != nil {
		if errors.Is(err, worker.ErrJobTimedOut) {
			t.Fatalf("fleettest: a job of %v ignored its timeout: %v", cfg.Queues, err)
		}
		t.Fatalf("fleettest: the worker of %v failed: %v", cfg.Queues, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return c, res
}

// MakeDue makes the waiting jobs of queues (every queue when none is
// given) due now: delayed jobs, retries waiting out their backoff and
// snoozed jobs. Running jobs keep running and jobs parked under a
// concurrency limit stay parked. Availability runs on the database's
// clock, so this is the test's way to move time forward without sleeping.
// It returns how many jobs it changed.
func MakeDue(t testing.TB, pool *pgxpool.Pool, queues ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	n, err := store.New(pool).JobMakeDue(ctx, queues)
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	return int(n)
}

// testLog writes the worker's log lines to the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
