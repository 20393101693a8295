package master

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/model"
)

// Alerts reach the listener in order, from the service's goroutine; a
// listener that falls behind fills the queue, and past it an offer is
// refused without waiting.
func TestAlertsDeliversInOrderAndRefusesWhenFull(t *testing.T) {
	t.Parallel()
	e := &svcEnv{budget: newStopBudget(time.Second)}
	defer e.budget.release()
	gate := make(chan struct{})
	var mu sync.Mutex
	var got []string
	a := newAlerts(func(_ context.Context, ev model.LongWaitDetected) {
		<-gate
		mu.Lock()
		got = append(got, ev.Queue)
		mu.Unlock()
	}, discardLog(), e.budget)
	a.sig.delivered.Init()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	// One is taken by the listener, which waits at the gate; the queue
	// holds alertQueue more.
	var want []string
	offer := func(i int) bool {
		q := "q" + strconv.Itoa(i)
		ok := a.offer(model.LongWaitDetected{Queue: q})
		if ok {
			want = append(want, q)
		}
		return ok
	}
	if !offer(0) {
		t.Fatal("the first offer was refused")
	}
	pollFor(t, "the listener to take the first alert", 5*time.Second, func() bool { return len(a.in) == 0 })
	for i := range alertQueue {
		if !offer(i + 1) {
			t.Fatalf("offer %d refused below the queue's size", i+1)
		}
	}
	if offer(alertQueue + 1) {
		t.Fatal("an offer past the queue's size was taken")
	}
	close(gate)
	for range want {
		a.sig.delivered.Wait(t)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// Alerts queued when the service stops are delivered by its Stop.
func TestAlertsStopDeliversTheQueued(t *testing.T) {
	t.Parallel()
	e := &svcEnv{budget: newStopBudget(time.Second)}
	defer e.budget.release()
	gate := make(chan struct{})
	var mu sync.Mutex
	n := 0
	a := newAlerts(func(context.Context, model.LongWaitDetected) {
		<-gate
		mu.Lock()
		n++
		mu.Unlock()
	}, discardLog(), e.budget)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if !a.offer(model.LongWaitDetected{Queue: "q"}) {
			t.Fatal("offer refused")
		}
	}
	stopped := make(chan struct{})
	go func() {
		a.Stop()
		close(stopped)
	}()
	close(gate)
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	if n != 3 {
		t.Fatalf("%d alerts delivered by the stop, want 3", n)
	}
}

// Without a listener the service runs nothing and refuses every offer.
func TestAlertsWithoutListener(t *testing.T) {
	t.Parallel()
	// A budget of an hour: a Stop that waited it out would be a hang.
	b := newStopBudget(time.Hour)
	defer b.release()
	a := newAlerts(nil, discardLog(), b)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.offer(model.LongWaitDetected{Queue: "q"}) {
		t.Error("an offer without a listener was taken")
	}
	stopPromptly(t, a)
}
