package worker_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/worker"
)

// TestWorkerOnEvent: Config.OnEvent receives the event of every outcome
// its worker wrote, and only those: two workers of one registry, on two
// databases, at the same time, each get their own, while a subscription
// on the registry gets both.
func TestWorkerOnEvent(t *testing.T) {
	t.Parallel()
	b, other := setup(t), setup(t)
	other.jobs = b.jobs // one registry, as an app's parallel tests may share
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	b.jobs.Handle("bad", func(context.Context, *queue.Job) error { return errors.New("no") })
	ids := b.dispatch(t, queue.NewJob("ok", nil), queue.NewJob("bad", nil).Tries(2))
	otherID := other.dispatch(t, queue.NewJob("ok", nil).OnQueue("elsewhere"))[0]
	sub := b.jobs.Subscribe()
	defer sub.Close()

	var mu sync.Mutex
	got := map[*bundle][]queue.Event{}
	run := func(bb *bundle, queues ...string) {
		res, err := bb.worker(t, worker.Config{Queues: queues, Concurrency: 1, StopWhenEmpty: true, OnEvent: func(e queue.Event) {
			mu.Lock()
			defer mu.Unlock()
			got[bb] = append(got[bb], e)
		}}).Run(context.Background())
		if err != nil {
			t.Errorf("worker ended with %+v, %v", res, err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { run(b, "default") })
	wg.Go(func() { run(other, "elsewhere") })
	wg.Wait()

	kinds := map[int64][]queue.EventKind{}
	for _, e := range got[b] {
		kinds[e.JobID] = append(kinds[e.JobID], e.Kind)
	}
	if !slices.Equal(kinds[ids[0]], []queue.EventKind{queue.EventCompleted}) ||
		!slices.Equal(kinds[ids[1]], []queue.EventKind{queue.EventRetried, queue.EventFailed}) || len(got[b]) != 3 {
		t.Errorf("the first worker's OnEvent got %+v", got[b])
	}
	if o := got[other]; len(o) != 1 || o[0].JobID != otherID || o[0].Queue != "elsewhere" {
		t.Errorf("the other worker's OnEvent got %+v", o)
	}
	if n := len(sub.Events()); n != 4 {
		t.Errorf("the subscription got %d events, want 4", n)
	}
}
