package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// An isolation worker runs the suspects of its queues (jobs that were in
// two processes that died), one at a time whatever its concurrency, never
// an ordinary job, and stops once no suspect is ready; an ordinary worker
// never runs a suspect.
func TestIsolationWorkerRunsSuspectsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var running atomic.Int32
	var mu sync.Mutex
	most := int32(0)
	ran := map[int64]string{}
	b.jobs.Handle("n", func(ctx context.Context, j *queue.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		ran[j.ID] = j.Queue
		mu.Unlock()
		return nil
	})
	var specs []*queue.JobSpec
	for range 8 {
		specs = append(specs, queue.NewJob("n", nil))
	}
	ids := b.dispatch(t, specs...)
	suspects := ids[:3]
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE queue_jobs SET crashes = 2 WHERE id = ANY ($1)`, suspects)
	exec(`UPDATE queue_jobs SET crashes = 1 WHERE id = $1`, ids[3]) // one crash: no suspect yet

	iso := b.worker(t, worker.Config{Isolate: true, Concurrency: 8})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := iso.Run(ctx)
	if err != nil || res.Reason != spawner.ExitEmpty || res.Jobs != 3 {
		t.Fatalf("isolation worker: %+v, %v; want it to run 3 jobs and stop empty", res, err)
	}
	if most != 1 {
		t.Errorf("%d jobs ran at once in an isolation worker, want 1", most)
	}
	for _, id := range suspects {
		if _, ok := ran[id]; !ok {
			t.Errorf("suspect %d did not run", id)
		}
	}
	if len(ran) != 3 {
		t.Errorf("ran %d jobs, want the 3 suspects alone", len(ran))
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 5 {
		t.Fatalf("%d jobs left, want the 5 that are no suspects", n)
	}

	// An ordinary worker runs those 5 and stops, leaving a new suspect.
	exec(`INSERT INTO queue_jobs (queue, name, crashes) VALUES ('default', 'n', 3)`)
	res, err = b.worker(t, worker.Config{Concurrency: 4, StopWhenEmpty: true}).Run(ctx)
	if err != nil || res.Jobs != 5 {
		t.Fatalf("ordinary worker: %+v, %v; want 5 jobs", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE crashes = 3 AND attempts = 0`); n != 1 {
		t.Errorf("the ordinary worker touched the suspect")
	}
}
