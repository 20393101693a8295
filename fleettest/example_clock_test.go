package fleettest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// Clock sets the time at which fleet reports and decides: two invoices
// are dispatched, and LongWaits and Workload answer as they would a minute
// and ten minutes later, without the test waiting for either.
func ExampleClock() {
	t := examplekit.NewT()
	defer t.Done()
	ctx := context.Background()
	pool := fleettest.Pool(t)

	// The clock starts at the dispatch: jobs are available from the
	// database's now().
	clock := fleettest.NewClock(time.Now())
	svc := fleet.New(pool, fleet.Options{LongWait: map[string]int{"billing": 300}, Now: clock.Now})
	client := queue.NewClient(pool, queue.Defaults{})
	for id := range int64(2) {
		if _, err := client.Dispatch(ctx, queue.NewTypedJob(SendInvoice{InvoiceID: id}).OnQueue("billing")); err != nil {
			panic(err)
		}
	}

	for _, later := range []time.Duration{time.Minute, 9 * time.Minute} {
		clock.Advance(later)
		late, err := svc.LongWaits(ctx)
		if err != nil {
			panic(err)
		}
		loads, err := svc.Workload(ctx)
		if err != nil {
			panic(err)
		}
		waited := time.Duration(loads[0].OldestWaitSecs * float64(time.Second)).Round(time.Minute)
		fmt.Printf("%s: %d pending, the oldest waiting %s; long waits %d\n", loads[0].Queue, loads[0].Pending, waited, len(late))
	}
	// Output:
	// billing: 2 pending, the oldest waiting 1m0s; long waits 0
	// billing: 2 pending, the oldest waiting 10m0s; long waits 1
}
