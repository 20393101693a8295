package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// The runtime a prefetch is sized by: the recent average, or how long
// the running jobs have gone without one finishing when that is longer;
// none before the first job ends.
func TestRuntimeNow(t *testing.T) {
	for _, tc := range []struct {
		avg     time.Duration
		running int
		quiet   time.Duration
		want    time.Duration
		prefech int // PrefetchFor(4, 512, want)
	}{
		{avg: -1, running: 4, quiet: time.Hour, want: -1, prefech: 0},
		{avg: 0, running: 0, quiet: 0, want: 0, prefech: 512},
		{avg: time.Millisecond, running: 4, quiet: 0, want: time.Millisecond, prefech: 80},
		{avg: time.Millisecond, running: 4, quiet: 2 * time.Millisecond, want: 2 * time.Millisecond, prefech: 40},
		// Short jobs gave way to long ones: the average is stale.
		{avg: 0, running: 4, quiet: worker.PrefetchBelow, want: worker.PrefetchBelow, prefech: 0},
		{avg: time.Millisecond, running: 1, quiet: time.Second, want: time.Second, prefech: 0},
		// Between two jobs a worker keeps its average; after a lull, what
		// comes next is unknown.
		{avg: time.Millisecond, running: 0, quiet: worker.PrefetchWindow, want: time.Millisecond, prefech: 80},
		{avg: time.Millisecond, running: 0, quiet: worker.PrefetchWindow + 1, want: -1, prefech: 0},
	} {
		got := worker.RuntimeNow(tc.avg, tc.running, tc.quiet)
		if got != tc.want {
			t.Errorf("RuntimeNow(%s, %d, %s) = %s, want %s", tc.avg, tc.running, tc.quiet, got, tc.want)
		}
		if p := worker.PrefetchFor(4, 512, got); p != tc.prefech {
			t.Errorf("PrefetchFor(4, 512, %s) = %d, want %d", got, p, tc.prefech)
		}
	}
}

// The timing that made one worker hoard slow jobs while others sat idle:
// a worker whose recent jobs were short sizes its claim by them (4 slots
// plus a prefetch of 512 at a runtime of 0), so a burst of 12 slow jobs
// that follows lands in it whole: 4 run and 8 wait behind them, while a
// second worker of 4 free slots finds nothing to claim. The worker gives
// the 8 back once they have waited PrefetchHold on its clock (and not
// before), uncounted, and the idle worker takes 4 of them at once; the
// busy one, whose running jobs have gone PrefetchHold without a finish,
// claims nothing more (its stale average no longer sizes its claims), so
// the other 4 wait in the queue for the first free slot. Every job then
// completes once, at its first attempt. The clock is the first worker's,
// moved by the test; no step waits on time.
func TestPrefetchedJobsGoBackToAWorkerWithFreeSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	b.jobs.Handle("quick", func(context.Context, *queue.Job) error { return nil })
	b.jobs.Handle("slow", func(ctx context.Context, _ *queue.Job) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	clock := testwait.NewClock(time.Now())
	a := b.worker(t, worker.Config{Concurrency: 4, Now: clock.Now, PollInterval: 20 * time.Millisecond})
	sigA := worker.InitSignals(a)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	var wg sync.WaitGroup
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(release) }) }
	var workers []*worker.Worker
	defer func() {
		free()
		for _, w := range workers {
			w.Stop()
		}
		wg.Wait()
	}()
	run := func(w *worker.Worker) {
		workers = append(workers, w)
		wg.Go(func() {
			if res, err := w.Run(ctx); err != nil || res.Reason != spawner.ExitStopped {
				t.Errorf("worker %s: %+v, %v", w.Name(), res, err)
			}
		})
	}
	run(a)

	// Short jobs first: their runtime reads 0 on the still clock.
	b.dispatch(t, queue.NewJob("quick", nil), queue.NewJob("quick", nil), queue.NewJob("quick", nil), queue.NewJob("quick", nil))
	waitFor(t, "the quick jobs done", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	sigA.Started.Drain()
	slow := make([]*queue.JobSpec, 12)
	for i := range slow {
		slow[i] = queue.NewJob("slow", nil)
	}
	ids := b.dispatch(t, slow...)
	for range 4 {
		if id := sigA.Started.Wait(t); !slices.Contains(ids, id) {
			t.Fatalf("started job %d, want a slow one", id)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by = $1`, a.Name()); n != 12 {
		t.Fatalf("the first worker holds %d slow jobs, want all 12 (4 running, 8 prefetched)", n)
	}

	// A second worker with four free slots finds nothing, and the first
	// gives nothing back while its clock stands.
	bw := b.worker(t, worker.Config{Concurrency: 4, PollInterval: 20 * time.Millisecond})
	sigB := worker.InitSignals(bw)
	run(bw)
	sigB.Polled.WaitFresh(t, 2)
	sigA.Polled.WaitFresh(t, 2)
	sigA.GaveBack.None(t, "gave back before the prefetch hold")
	sigB.Started.None(t, "the idle worker started a job the busy one held")

	// PrefetchHold on its clock: the 8 waiting go back, and the idle
	// worker takes 4 of them.
	clock.Advance(worker.DefaultPrefetchHold)
	if n := sigA.GaveBack.Wait(t); n != 8 {
		t.Fatalf("gave back %d jobs, want the 8 waiting", n)
	}
	for range 4 {
		if id := sigB.Started.Wait(t); !slices.Contains(ids, id) {
			t.Fatalf("the idle worker started job %d, want a slow one", id)
		}
	}
	// Both had their chance to claim again: the busy one took nothing
	// back, the full one nothing more.
	sigA.Polled.WaitFresh(t, 2)
	sigB.Polled.WaitFresh(t, 2)
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by = $1`, a.Name()); n != 4 {
		t.Errorf("the first worker holds %d jobs after the give-back, want its 4 running", n)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by = $1`, bw.Name()); n != 4 {
		t.Errorf("the second worker holds %d jobs, want 4", n)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL AND attempts = 0`); n != 4 {
		t.Errorf("%d jobs ready with no attempt counted, want the 4 given back that found no slot", n)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE name = 'slow'`); n != 0 {
		t.Errorf("%d history rows before any slow job ended, want none (a give-back writes none)", n)
	}
	free()
	waitFor(t, "every slow job done", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE name = 'slow' AND status = 'completed' AND attempt = 1`); n != 12 {
		t.Errorf("%d slow jobs completed at their first attempt, want 12", n)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status <> 'completed'`); n != 0 {
		t.Errorf("%d attempts did not complete, want none", n)
	}
}

// A worker under a master (ReportPrefetch) says which claimed jobs wait
// for a slot, and says so again before any of them starts: at every
// start, the set its reports describe holds no job that runs. Jobs that
// started straight from their claim are never reported; when the worker
// is done, the set is empty.
func TestWorkerTellsItsMasterWhichJobsWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("quick", func(context.Context, *queue.Job) error { return nil })
	const n = 300
	jobs := make([]*queue.JobSpec, n)
	for i := range jobs {
		jobs[i] = queue.NewJob("quick", nil)
	}
	b.dispatch(t, jobs...)
	var mu sync.Mutex
	waiting := map[int64]bool{}
	var told, dequeued, startedWaiting int
	var bad []int64
	w := b.worker(t, worker.Config{Concurrency: 2, StopWhenEmpty: true, Now: frozen(), ReportPrefetch: true,
		Reports: func(r spawner.Report) {
			if r.Type != spawner.ReportPrefetch {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range r.Prefetched {
				if waiting[id] {
					bad = append(bad, id)
				}
				waiting[id] = true
				told++
			}
			for _, id := range r.Dequeued {
				if !waiting[id] {
					bad = append(bad, -id)
				}
				delete(waiting, id)
				dequeued++
			}
		}})
	sig := worker.InitSignals(w)
	sig.Started.At(func(id int64) {
		mu.Lock()
		defer mu.Unlock()
		if waiting[id] {
			startedWaiting++
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	if res, err := w.Run(ctx); err != nil || res.Jobs != n {
		t.Fatalf("run: %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if startedWaiting != 0 || len(bad) != 0 {
		t.Errorf("%d jobs started while reported waiting; reports out of step for %v", startedWaiting, bad)
	}
	if told == 0 || told != dequeued || len(waiting) != 0 {
		t.Errorf("%d reported waiting, %d dequeued, %d left: want some, as many dequeued, none left", told, dequeued, len(waiting))
	}
	if told >= n {
		t.Errorf("%d of %d jobs reported waiting: those started from their claim need no report", told, n)
	}
}
