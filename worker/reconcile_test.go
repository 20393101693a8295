package worker_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// phantom reserves a job of one try under the worker name with a lease of
// its own, as a failover that kept the claim but lost the outcome, or a
// claim whose answer never arrived, leaves it.
func (b *bundle) phantom(t *testing.T, name, q string) int64 {
	t.Helper()
	var id int64
	if err := b.pool.QueryRow(context.Background(), `
		INSERT INTO queue_jobs (queue, name, max_tries, reserved_by, lease, reserved_at, attempts)
		VALUES ($1, 'phantom', 1, $2, nextval('queue_jobs_lease_seq'), now(), 1) RETURNING id`, q, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// checkReleasedUnheld checks that job id was released as lost, its
// attempt not counted, and then ran as the same attempt 1 and completed.
func (b *bundle) checkReleasedUnheld(t *testing.T, id int64) {
	t.Helper()
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND attempt = 1 AND status = 'lost' AND error = $2`,
		id, store.UnheldError); n != 1 {
		t.Errorf("job %d has %d lost attempts released as unheld, want 1", id, n)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND attempt = 1 AND status = 'completed'`, id); n != 1 {
		t.Errorf("job %d has %d completed attempt 1, want 1", id, n)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_failed_jobs`); n != 0 {
		t.Errorf("%d failed jobs: the released attempt was counted", n)
	}
}

// A busy worker releases, within a beat, a job reserved under its name
// that it does not hold; it is not failed although its one try was taken,
// and it runs again. What the worker holds is left alone.
func TestReconcileReleasesAPhantomWithinABeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hold, ran := make(chan struct{}), make(chan int64, 8)
	b.jobs.Handle("hold", func(context.Context, *queue.Job) error { <-hold; return nil })
	b.jobs.Handle("phantom", func(_ context.Context, j *queue.Job) error { ran <- j.ID; return nil })
	w := b.worker(t, worker.Config{Concurrency: 2, HeartbeatInterval: 50 * time.Millisecond})
	held := b.dispatch(t, queue.NewJob("hold", nil))[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.Run(ctx); done <- err }()
	waitFor(t, "the held job running", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NOT NULL`, held) == 1
	})
	lease := b.count(t, `SELECT lease FROM queue_jobs WHERE id = $1`, held)
	id := b.phantom(t, w.Name(), "default")
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran job %d, want the phantom %d", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the phantom was not released and run again")
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND lease = $2 AND reserved_by = $3`, held, lease, w.Name()); n != 1 {
		t.Fatal("the job the worker holds was released")
	}
	close(hold)
	waitFor(t, "every job done", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.checkReleasedUnheld(t, id)
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1`, held); n != 1 {
		t.Errorf("the held job has %d attempts, want 1", n)
	}
}

// An idle worker holding nothing reconciles once its notification
// connection comes back (the database may have failed over meanwhile).
func TestReconcileAfterReconnectWhileIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ran := make(chan int64, 1)
	b.jobs.Handle("phantom", func(_ context.Context, j *queue.Job) error { ran <- j.ID; return nil })
	w := b.worker(t, worker.Config{HeartbeatInterval: 20 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.Run(ctx); done <- err }()
	const listening = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`
	waitFor(t, "the worker listening", func() bool { return b.count(t, listening) == 1 })
	id := b.phantom(t, w.Name(), "elsewhere") // a queue it does not work: only the reconcile frees it
	if n := b.count(t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%') k`); n != 1 {
		t.Fatalf("terminated %d listening sessions, want 1", n)
	}
	waitFor(t, "the phantom released", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, id) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND attempts = 0 AND last_error = $2`, id, store.UnheldError); n != 1 {
		t.Error("the phantom was not released with its attempt taken back")
	}
	select {
	case <-ran:
		t.Error("a job of a queue the worker does not work ran")
	default:
	}
}

// A worker that stops releases, without counting, what is reserved under
// its name and it does not hold, before its master's release of what it
// leaves (which counts the attempt) could fail the job.
func TestReconcileAtExit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("phantom", func(context.Context, *queue.Job) error { return nil })
	w := b.worker(t, worker.Config{HeartbeatInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.Run(ctx); done <- err }()
	id := b.phantom(t, w.Name(), "elsewhere")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL AND attempts = 0`, id); n != 1 {
		t.Fatal("the phantom is still reserved, or its attempt was counted, after the worker exited")
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'lost' AND error = $2`, id, store.UnheldError); n != 1 {
		t.Error("no lost attempt recorded for the released phantom")
	}
}

// slowWrites delays every outcome write and release by up to max, at
// random, so that reconciles run while outcomes are in flight.
type slowWrites struct{ max time.Duration }

func (f slowWrites) Before(ctx context.Context, statement string) error {
	if statement == "JobFinishMany" {
		select {
		case <-time.After(rand.N(f.max)):
		case <-ctx.Done():
		}
	}
	return nil
}

func (slowWrites) After(context.Context, string) error { return nil }

// Reconciles every 2 ms of a worker draining short jobs, prefetched and
// with slow outcome writes, release nothing it holds: running, waiting for
// a slot, or finished with its outcome in flight.
func TestReconcileNeverReleasesWhatItHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	runs := map[int64]int{}
	b.jobs.Handle("short", func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		if rand.N(4) == 0 {
			time.Sleep(time.Duration(rand.N(3)) * time.Millisecond)
		}
		return nil
	})
	const n = 600
	jobs := make([]*queue.JobSpec, n)
	for i := range jobs {
		jobs[i] = queue.NewJob("short", nil).Tries(1)
	}
	b.dispatch(t, jobs...)
	st := b.st.WithFaults(slowWrites{max: 30 * time.Millisecond})
	w, err := worker.New(st, b.jobs, worker.Config{Queues: []string{"default"}, Concurrency: 4, StopWhenEmpty: true,
		HeartbeatInterval: 2 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status = 'lost'`); k != 0 {
		t.Fatalf("%d attempts released as lost from a worker that held them", k)
	}
	if k := b.count(t, `SELECT count(DISTINCT job_id) FROM fleet_jobs WHERE status = 'completed' AND attempt = 1`); k != n {
		t.Fatalf("%d jobs completed at their first attempt, want %d", k, n)
	}
	for id, k := range runs {
		if k != 1 {
			t.Errorf("job %d ran %d times", id, k)
		}
	}
	if len(runs) != n {
		t.Errorf("%d jobs ran, want %d", len(runs), n)
	}
}

// A claimed job waiting for a slot that the database no longer has
// reserved under the worker (a master released it and another worker
// claimed it, or a failover lost the claim) is dropped, never started.
func TestReconcileDropsAClaimNoLongerReserved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hold := make(chan struct{})
	var mu sync.Mutex
	var ran []int64
	b.jobs.Handle("hold", func(context.Context, *queue.Job) error { <-hold; return nil })
	b.jobs.Handle("quick", func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		ran = append(ran, j.ID)
		mu.Unlock()
		return nil
	})
	var logs syncbuf.Buffer
	// A frozen clock: every runtime reads 0 and no claimed job has waited
	// (see worker.RuntimeNow and Config.PrefetchHold), so the worker keeps
	// prefetching while the slot is held.
	w := b.worker(t, worker.Config{Concurrency: 1, HeartbeatInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: frozen()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.Run(ctx); done <- err }()
	// A quick job first, so that the worker prefetches (its jobs are
	// short); then one that holds the only slot, then three that wait for
	// it in the buffer.
	warm := b.dispatch(t, queue.NewJob("quick", nil))[0]
	waitFor(t, "the first job done", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	b.dispatch(t, queue.NewJob("hold", nil))
	waitFor(t, "the slot taken", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 1 })
	waiting := b.dispatch(t, queue.NewJob("quick", nil), queue.NewJob("quick", nil), queue.NewJob("quick", nil))
	waitFor(t, "the three claimed into the buffer", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = ANY($1) AND reserved_by = $2`, waiting, w.Name()) == 3
	})
	if _, err := b.pool.Exec(context.Background(), `
		UPDATE queue_jobs SET reserved_by = 'another', lease = nextval('queue_jobs_lease_seq') WHERE id = ANY($1)`, waiting); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the three dropped", func() bool { return strings.Contains(logs.String(), "dropped claimed jobs") })
	close(hold)
	waitFor(t, "the held job done", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs WHERE name = 'hold'`) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0] != warm {
		t.Fatalf("quick jobs ran here: %v; want only the first, %d", ran, warm)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = ANY($1) AND reserved_by = 'another'`, waiting); n != 3 {
		t.Fatalf("%d of the three still reserved by the other worker, want 3", n)
	}
}
