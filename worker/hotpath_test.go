package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// queryCounter counts the statements sent on the connections it traces.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestIdleWorkerCostsOneStatementPerPoll(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	var counter queryCounter
	cfg.ConnConfig.Tracer = &counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	const poll = 200 * time.Millisecond
	// Five queues, none with a job: the queue that once answered 0 ms to
	// "when is the next job" made an idle worker poll every 5 ms.
	w, err := worker.New(store.New(pool), queue.NewRegistry(), worker.Config{
		Queues: []string{"a", "b", "c", "d", "e"}, PollInterval: poll, Concurrency: 8,
	})
	if err != nil {
		t.Fatal(err)
	}
	sig := worker.InitSignals(w)
	// At each poll, on the claimer's goroutine, the count of statements
	// sent so far and the time: the statement a poll asks for is sent
	// after its mark and before the next poll's, whatever the load.
	type mark struct {
		n  int64
		at time.Time
	}
	var (
		mu    sync.Mutex
		marks []mark
	)
	sig.Polled.At(func(struct{}) {
		mu.Lock()
		marks = append(marks, mark{counter.n.Load(), time.Now()})
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := w.Run(ctx); errc <- err }()
	// A starting worker sends its first claim round, the LISTENs, the
	// vacuum's first look and the claim round of the listener's wake on
	// connecting: the polls counted are the ones marked after all four.
	sig.Listening.Wait(t)
	if !sig.Vacuumed.Wait(t) {
		t.Fatal("the vacuum's first round did not look")
	}
	worker.Poll(t, "the claimer takes the listener's wake", func() bool { return !worker.WakePending(w) })
	settled := time.Now()
	first := -1 // the first mark after settled
	const polls = 10
	for {
		mu.Lock()
		if first < 0 {
			first = slices.IndexFunc(marks, func(m mark) bool { return m.at.After(settled) })
		}
		enough := first >= 0 && len(marks) > first+polls
		mu.Unlock()
		if enough {
			break
		}
		sig.Polled.Wait(t)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// From the mark of the first counted poll to the one after the last:
	// each poll's one statement, and nothing else.
	from, to := marks[first], marks[first+polls]
	n, took := to.n-from.n, to.at.Sub(from.at)
	t.Logf("%d statements in %d polls, over %s", n, polls, took.Round(time.Millisecond))
	if n > polls {
		t.Errorf("an idle worker sent %d statements in %d polls, want at most %d", n, polls, polls)
	}
	for i := first; i < first+polls; i++ {
		if marks[i+1].n == marks[i].n {
			t.Errorf("poll %d of %d sent no statement: is it polling at all?", i-first+1, polls)
		}
	}
	// Timers do not fire early, however busy the machine: this bound
	// holds at any load.
	if least := time.Duration(polls-1) * poll; took < least {
		t.Errorf("%d polls in %s with a %s poll interval: it polls more often than its interval", polls, took.Round(time.Millisecond), poll)
	}
}

func TestHandlerErrorThatTextCannotHoldIsStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	b.jobs.Handle("nul", func(context.Context, *queue.Job) error { return errors.New("bad\x00byte \xff") })
	jobs := []*queue.JobSpec{queue.NewJob("nul", nil).Tries(1)}
	for range 50 {
		jobs = append(jobs, queue.NewJob("ok", nil))
	}
	b.dispatch(t, jobs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.worker(t, worker.Config{StopWhenEmpty: true, Concurrency: 8}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 0 {
		t.Errorf("%d jobs left in the queue", n)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_failed_jobs WHERE error = $1`, "bad\uFFFDbyte \uFFFD"); n != 1 {
		t.Errorf("%d failed jobs with the error made storable, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status = 'completed'`); n != 50 {
		t.Errorf("%d completed attempts recorded, want 50", n)
	}
}

func TestDispatchTxWakesAnIdleWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := make(chan int64, 1)
	b.jobs.Handle("ping", func(_ context.Context, j *queue.Job) error { done <- j.ID; return nil })
	w := b.worker(t, worker.Config{PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := w.Run(ctx); errc <- err }()
	waitFor(t, "the listener", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`) > 0
	})
	var id int64
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		res, err := b.client.DispatchTx(ctx, tx, queue.NewJob("ping", nil))
		id = res.ID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got != id {
			t.Fatalf("ran job %d, want %d", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not wake up on the notification of a committed DispatchTx")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestWorkerHoldsAtMostConcurrencyPlusItsBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	jobs := make([]*queue.JobSpec, 5000)
	for i := range jobs {
		jobs[i] = queue.NewJob("ok", nil)
	}
	b.dispatch(t, jobs...)
	// The database is made slow to write outcomes: every history insert
	// waits, so outcomes pile up faster than they are written. (fleet's
	// statements write completed attempts into fleet_jobs_completed, not
	// through fleet_jobs.)
	if _, err := b.pool.Exec(context.Background(), `
		CREATE FUNCTION slow_history() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.05); RETURN NULL; END $$;
		CREATE TRIGGER slow_history AFTER INSERT ON fleet_jobs_completed FOR EACH STATEMENT EXECUTE FUNCTION slow_history()`); err != nil {
		t.Fatal(err)
	}
	const concurrency, unsaved, prefetch = 4, 20, 8
	var most atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int64
			if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`).Scan(&n); err == nil && n > most.Load() {
				most.Store(n)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := b.worker(t, worker.Config{Concurrency: concurrency, MaxUnsaved: unsaved, Prefetch: prefetch,
		StopWhenEmpty: true, MaxJobs: 600}).Run(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// Held: running + prefetched + unwritten. One more batch may be in
	// flight while the count is taken.
	if got, limit := most.Load(), int64(concurrency+prefetch+unsaved+concurrency); got > limit {
		t.Errorf("the worker held up to %d jobs, want at most %d", got, limit)
	}
	if most.Load() == 0 {
		t.Error("never saw a reserved job: the check measured nothing")
	}
}

func TestPrefetchFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		concurrency, bound int
		runtime            time.Duration
		want               int
	}{
		{1, 256, -1, 0},                       // no job finished yet
		{64, 256, worker.PrefetchBelow, 0},    // slow jobs: only free slots
		{64, 256, 0, 256},                     // too short to time
		{1, 256, 10 * time.Microsecond, 256},  // no-op jobs: the bound
		{64, 256, 10 * time.Microsecond, 256}, // the same at 64
		{1, 256, time.Millisecond, 20},        // 20 ms of work
		{4, 256, 4 * time.Millisecond, 20},    // 4 slots × 20 ms / 4 ms
		{1, 256, 4900 * time.Microsecond, 4},  // just under PrefetchBelow
		{1000, 256, time.Millisecond, 256},    // capped by the bound
		{64, 0, time.Microsecond, 0},          // prefetch off
	} {
		if got := worker.PrefetchFor(c.concurrency, c.bound, c.runtime); got != c.want {
			t.Errorf("PrefetchFor(%d, %d, %s) = %d, want %d", c.concurrency, c.bound, c.runtime, got, c.want)
		}
	}
}

// TestPrefetchedJobsStartWhileTheNextClaimWaits holds the worker's third
// claim on a lock: the jobs its second claim prefetched must all run
// meanwhile, as they keep the slots busy while the next claim is on its
// way.
func TestPrefetchedJobsStartWhileTheNextClaimWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A claim (an update reserving jobs) waits for a shared advisory lock,
	// which the test holds from the second job on.
	if _, err := b.pool.Exec(ctx, `
		CREATE FUNCTION claim_gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM new_rows WHERE reserved_by IS NOT NULL) THEN
				PERFORM pg_advisory_xact_lock_shared(4242);
			END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER claim_gate AFTER UPDATE ON queue_jobs REFERENCING NEW TABLE AS new_rows
			FOR EACH STATEMENT EXECUTE FUNCTION claim_gate()`); err != nil {
		t.Fatal(err)
	}
	gate, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close(ctx)
	var ran atomic.Int64
	b.jobs.Handle("ok", func(ctx context.Context, _ *queue.Job) error {
		if ran.Add(1) == 2 {
			if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
				return err
			}
		}
		return nil
	})
	jobs := make([]*queue.JobSpec, 2*worker.DefaultPrefetch)
	for i := range jobs {
		jobs[i] = queue.NewJob("ok", nil)
	}
	b.dispatch(t, jobs...)
	// A frozen clock: every runtime measures 0, so the prefetch stays at
	// its bound however busy the machine is.
	w := b.worker(t, worker.Config{Concurrency: 1, StopWhenEmpty: true, Now: frozen()})
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := w.Run(rctx); errc <- err }()
	// The first claim takes one job (no runtime known yet), the second
	// the slot and the prefetch bound; the third waits for the gate.
	want := int64(1 + 1 + worker.DefaultPrefetch)
	waitFor(t, fmt.Sprintf("the %d jobs claimed before the gate to run", want), func() bool { return ran.Load() >= want })
	if got := ran.Load(); got != want {
		t.Errorf("%d jobs ran while the claim waited, want %d", got, want)
	}
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := ran.Load(); got != int64(len(jobs)) {
		t.Errorf("%d jobs ran, want %d", got, len(jobs))
	}
}
