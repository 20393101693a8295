package queue_test

import (
	"testing"

	"github.com/fleet-go/fleet/queue"
)

func TestSubscriptionFiltersKindsAndDropsWhenFull(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	if r.Subscribed() {
		t.Fatal("a new registry has subscriptions")
	}
	all := r.SubscribeBuffer(2)
	failed := r.Subscribe(queue.EventFailed, queue.EventCancelled)
	if !r.Subscribed() {
		t.Fatal("Subscribed is false with two subscriptions")
	}
	for i, k := range []queue.EventKind{queue.EventCompleted, queue.EventFailed, queue.EventRetried, queue.EventCancelled} {
		r.Publish(queue.Event{Kind: k, JobID: int64(i + 1)})
	}
	// all buffers two and dropped the other two; failed took its kinds.
	if e := <-all.Events(); e.JobID != 1 {
		t.Errorf("first event of all: %+v", e)
	}
	if e := <-all.Events(); e.JobID != 2 {
		t.Errorf("second event of all: %+v", e)
	}
	if n := all.Dropped(); n != 2 {
		t.Errorf("all dropped %d, want 2", n)
	}
	if e := <-failed.Events(); e.Kind != queue.EventFailed || e.JobID != 2 {
		t.Errorf("first failed event: %+v", e)
	}
	if e := <-failed.Events(); e.Kind != queue.EventCancelled || e.JobID != 4 {
		t.Errorf("second failed event: %+v", e)
	}
	if n := failed.Dropped(); n != 0 {
		t.Errorf("failed dropped %d", n)
	}

	all.Close()
	all.Close()
	if _, open := <-all.Events(); open {
		t.Error("a closed subscription's channel is open")
	}
	r.Publish(queue.Event{Kind: queue.EventFailed, JobID: 5}) // not sent to all
	if e := <-failed.Events(); e.JobID != 5 {
		t.Errorf("after closing all, failed got %+v", e)
	}
	failed.Close()
	if r.Subscribed() {
		t.Fatal("Subscribed after closing every subscription")
	}
	r.Publish(queue.Event{Kind: queue.EventFailed})
}
