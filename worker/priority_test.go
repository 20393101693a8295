package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// insertAt inserts n no-op jobs ("ok") of priority on the default queue
// and returns their ids; notify wakes the queue's workers.
func insertAt(t *testing.T, b *bundle, n, priority int, notify bool) []int64 {
	t.Helper()
	params := make([]store.JobInsertParams, n)
	for i := range params {
		params[i] = store.JobInsertParams{Queue: "default", Name: "ok", Payload: []byte(`{}`), Priority: priority}
	}
	var ids []int64
	var err error
	if notify {
		ids, err = b.st.JobInsertManyNotify(context.Background(), params, []string{"default"})
	} else {
		ids, err = b.st.JobInsertMany(context.Background(), b.pool, params)
	}
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return ids
}

// frozen is a worker clock that never moves: every job's runtime reads 0,
// so the worker prefetches its whole bound from its second claim on,
// however slowly a busy machine runs the jobs (see worker.PrefetchFor).
func frozen() func() time.Time {
	at := time.Now()
	return func() time.Time { return at }
}

// received takes the events of sig that have arrived (the worker is done
// sending).
func received[T any](sig *lifecycle.Signal[T]) []T {
	var out []T
	for {
		select {
		case v := <-sig.C():
			out = append(out, v)
		default:
			return out
		}
	}
}

// run runs w until it stops (StopWhenEmpty), failing the test on an error
// or a hang.
func run(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := w.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the worker did not stop within 60 s")
	}
}

// TestPrefetchedJobsStartInPriorityOrder dispatches 100 jobs at priority
// 5, then 10 at priority 1, and runs one worker with the prefetch on: every
// priority-1 job must start before any priority-5 one. At concurrency 1
// the second claim takes the 9 priority-1 jobs left and every priority-5
// one (the prefetch); at 64 the first claim takes them all. Each claim's
// update returns its rows in id order, the priority-5 ones first. Start
// order is what the claimer reports as it starts each job: handlers run
// concurrently, in no order.
func TestPrefetchedJobsStartInPriorityOrder(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 64} {
		t.Run(fmt.Sprintf("concurrency %d", concurrency), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
			later := insertAt(t, b, 100, 5, false)
			urgent := insertAt(t, b, 10, 1, false)

			w := b.worker(t, worker.Config{Concurrency: concurrency, StopWhenEmpty: true, Now: frozen()})
			sig := worker.InitSignals(w)
			run(t, w)

			started, claims := received(sig.Started), received(sig.Claimed)
			if len(started) != len(later)+len(urgent) {
				t.Fatalf("%d jobs started, want %d", len(started), len(later)+len(urgent))
			}
			first := slices.Clone(started[:len(urgent)])
			slices.Sort(first)
			if !slices.Equal(first, urgent) {
				t.Errorf("the first %d jobs started were %v, want the priority-1 jobs %v (start order %v)",
					len(urgent), started[:len(urgent)], urgent, started)
			}
			rest := slices.Clone(started[len(urgent):])
			slices.Sort(rest)
			if !slices.Equal(rest, later) {
				t.Errorf("the jobs started after the priority-1 ones are not the 100 priority-5 jobs: %v", started)
			}
			if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 0 {
				t.Errorf("%d jobs left in the queue", n)
			}
			// At concurrency 1, some claim took more jobs than the one
			// slot: the prefetch was on.
			if concurrency == 1 && slices.Max(claims) <= 1 {
				t.Errorf("claims took %v jobs: nothing was prefetched", claims)
			}
		})
	}
}

// TestMoreUrgentJobClaimedLaterStartsBeforeThePrefetched has the worker
// (concurrency 1) prefetch 48 priority-5 jobs while its second job holds
// the slot, then dispatches a priority-1 job: the next claim takes it, and
// it starts before every prefetched job, right after the one running.
func TestMoreUrgentJobClaimedLaterStartsBeforeThePrefetched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered, gate := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error {
		if calls.Add(1) == 2 {
			close(entered)
			<-gate
		}
		return nil
	})
	later := insertAt(t, b, 50, 5, false)

	w := b.worker(t, worker.Config{Concurrency: 1, StopWhenEmpty: true, Now: frozen()})
	sig := worker.InitSignals(w)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { _, err := w.Run(ctx); errc <- err }()

	// The first claim takes one job (no runtime known yet), the second
	// the other 49, the first of which holds the slot: 48 wait.
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("the worker stopped before its second job ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the second job did not start within 60 s")
	}
	for claimed := 0; claimed < len(later); {
		claimed += sig.Claimed.Wait(t)
	}
	urgent := insertAt(t, b, 1, 1, true)
	if n := sig.Claimed.Wait(t); n != 1 {
		t.Fatalf("the claim after the dispatch took %d jobs, want the 1 dispatched", n)
	}
	close(gate)
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}

	want := append([]int64{later[0], later[1]}, urgent...)
	want = append(want, later[2:]...)
	if got := received(sig.Started); !slices.Equal(got, want) {
		t.Errorf("start order %v, want %v", got, want)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 0 {
		t.Errorf("%d jobs left in the queue", n)
	}
}
