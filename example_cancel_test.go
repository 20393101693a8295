package fleet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// Cancelling jobs by id: a job no worker holds is cancelled at once, a
// running one is asked to stop, an id no job has is not found.
func ExampleService_Cancel() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	res0, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("exports.csv", nil))
	if err != nil {
		log.Fatal(err)
	}
	id := res0.ID

	svc := fleet.New(pool, fleet.Options{})
	// Recorded with the jobs as who cancelled them.
	ctx = fleet.WithActor(ctx, "ann@ops")
	res, err := svc.Cancel(ctx, id, 4711) // 4711: no such job
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range res.Jobs {
		fmt.Println(j.Outcome) // cancelled, cancel_requested or not_found
	}
	// Output:
	// cancelled
	// not_found
}

// Cancelling every job of a queue.
func ExampleService_CancelQueue() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	export := queue.NewJob("exports.csv", nil).OnQueue("exports")
	if _, err := queue.NewClient(pool, queue.Defaults{}).DispatchMany(ctx, []*queue.JobSpec{export, export}); err != nil {
		log.Fatal(err)
	}

	res, err := fleet.New(pool, fleet.Options{}).CancelQueue(ctx, "exports")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Cancelled, "cancelled,", res.Requested, "running ones stopping")
	// Output: 2 cancelled, 0 running ones stopping
}
