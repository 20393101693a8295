package master

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/queue"
)

// The workload is read once by Start, then every cooldown, each read
// handed to supervision as the latest.
func TestWorkloadReadsCountsForTheBalancer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	ctx := context.Background()
	client := queue.NewClient(e.pool, queue.Defaults{Queue: "mail"})
	if _, err := client.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("x", nil), queue.NewJob("x", nil)}); err != nil {
		t.Fatal(err)
	}
	out := newLatest[map[string]balancer.QueueWorkload]()
	w := newWorkload(e.st, e.set.Tick, e.log, out)
	w.sig.read.Init()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first, ok := out.take()
	if !ok || first["mail"].Waiting != 2 {
		t.Fatalf("first workload %+v (%v), want 2 waiting on mail", first, ok)
	}
	if _, err := client.Dispatch(ctx, queue.NewJob("x", nil)); err != nil {
		t.Fatal(err)
	}
	w.sig.read.WaitFresh(t, 2)
	if latest, ok := out.take(); !ok || latest["mail"].Waiting != 3 {
		t.Fatalf("latest workload %+v (%v), want 3 waiting on mail", latest, ok)
	}
}
