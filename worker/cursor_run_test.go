package worker_test

import (
	"context"
	"testing"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/worker"
)

// TestAJobReadyBehindTheMarksRuns: a worker that has claimed jobs reads
// each priority from the last job it took there; a job that becomes
// ready behind that (as one dispatched in a transaction that began
// before the jobs claimed) is taken all the same, by a claim from the
// head, whether the worker is busy or idle: every job starts once.
func TestAJobReadyBehindTheMarksRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(t, worker.Config{Concurrency: 2, Prefetch: -1})
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	sig := worker.InitSignals(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.Run(ctx); done <- err }()
	started := map[int64]int{}
	waitStarted := func(ids []int64) {
		t.Helper()
		for {
			missing := 0
			for _, id := range ids {
				if started[id] == 0 {
					missing++
				}
			}
			if missing == 0 {
				return
			}
			started[sig.Started.Wait(t)]++
		}
	}
	first := insertAt(t, b, 20, 0, true)
	waitStarted(first)
	for _, late := range []string{"1 hour", "1 minute"} {
		var id int64
		if err := b.pool.QueryRow(context.Background(), `
			INSERT INTO queue_jobs (queue, name, available_at) VALUES ('default', 'ok', now() - $1::interval) RETURNING id`, late).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := b.st.QueueNotify(context.Background(), []string{"default"}); err != nil {
			t.Fatal(err)
		}
		waitStarted([]int64{id})
		more := insertAt(t, b, 5, 0, true)
		waitStarted(more)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	for id, n := range started {
		if n != 1 {
			t.Errorf("job %d started %d times", id, n)
		}
	}
	if len(started) != 32 {
		t.Errorf("%d jobs started, want 32", len(started))
	}
}
