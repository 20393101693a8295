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

// TestWorkerOnEventGetsOnlyItsOwnEvents: Config.OnEvent receives the event
// of every outcome its worker wrote, with no subscription on the registry;
// a subscription still gets them too.
func TestWorkerOnEventGetsOnlyItsOwnEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	b.jobs.Handle("bad", func(context.Context, *queue.Job) error { return errors.New("no") })
	ids := b.dispatch(t, queue.NewJob("ok", nil), queue.NewJob("bad", nil).Tries(2))
	sub := b.jobs.Subscribe()
	defer sub.Close()
	var mu sync.Mutex
	var got []queue.Event
	res, err := b.worker(t, worker.Config{Concurrency: 1, StopWhenEmpty: true, OnEvent: func(e queue.Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e)
	}}).Run(context.Background())
	if err != nil {
		t.Fatalf("worker ended with %+v, %v", res, err)
	}
	kinds := map[int64][]queue.EventKind{}
	for _, e := range got {
		kinds[e.JobID] = append(kinds[e.JobID], e.Kind)
	}
	if !slices.Equal(kinds[ids[0]], []queue.EventKind{queue.EventCompleted}) ||
		!slices.Equal(kinds[ids[1]], []queue.EventKind{queue.EventRetried, queue.EventFailed}) || len(got) != 3 {
		t.Fatalf("OnEvent got %+v", got)
	}
	if n := len(sub.Events()); n != 3 {
		t.Errorf("the subscription got %d events, want 3", n)
	}
}
