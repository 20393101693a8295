package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// A handler that returns queue.Cancel(err) ends its job cancelled: it is
// not retried, whatever tries it has left.
func ExampleCancel_noRetry() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	jobs := queue.NewRegistry()

	jobs.Handle("mail.send", func(ctx context.Context, job *queue.Job) error {
		var p struct {
			To string `json:"to"`
		}
		if err := job.Decode(&p); err != nil {
			return err
		}
		if p.To == "" {
			return queue.Cancel(errors.New("no recipient: retrying cannot help"))
		}
		return nil
	})

	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewJob("mail.send", map[string]string{"to": ""}).Tries(5)); err != nil {
		log.Fatal(err)
	}
	e, _ := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
	fmt.Println(e.Kind+":", e.Error)
	fmt.Println("jobs left:", len(fleettest.Dispatched(examplekit.NewT(), pool, "")))
	// Output:
	// cancelled: the job was cancelled: no recipient: retrying cannot help
	// jobs left: 0
}

// A handler that returns queue.Snooze(d) runs its job again after d; the
// attempt does not count against the job's tries.
func ExampleSnooze_later() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	jobs := queue.NewRegistry()

	jobs.Handle("report.build", func(ctx context.Context, job *queue.Job) error {
		if !dataReady() {
			return queue.Snooze(time.Minute) // try again in a minute, no try spent
		}
		return nil
	})

	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewJob("report.build", nil).Tries(1)); err != nil {
		log.Fatal(err)
	}
	e, _ := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
	job := fleettest.RequireDispatched(examplekit.NewT(), pool, "report.build")
	fmt.Println(e.Kind, e.RetryIn, job.State)
	// Output: snoozed 1m0s delayed
}

// dataReady stands in for the app's own check.
func dataReady() bool { return false }

// A snooze does not count in Job.Attempt: the attempt after a snooze has
// the same number, and Job.Snoozes counts the snoozes. Only failed
// attempts spend the job's tries.
func ExampleJob_snoozes() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	jobs := queue.NewRegistry()

	jobs.Handle("api.sync", func(ctx context.Context, job *queue.Job) error {
		fmt.Printf("attempt %d of %d, after %d snoozes: ", job.Attempt, job.MaxTries, job.Snoozes)
		switch {
		case job.Snoozes < 2:
			return queue.Snooze(time.Minute) // rate limited: later, no try spent
		case job.Attempt == 1:
			return errors.New("the remote side answered 503") // a try spent
		}
		return nil
	})

	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewJob("api.sync", nil).Tries(3)); err != nil {
		log.Fatal(err)
	}
	for {
		e, ok := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
		if !ok {
			break
		}
		fmt.Println(e.Kind)
		fleettest.MakeDue(examplekit.NewT(), pool) // the snooze or the backoff is over
	}
	// Output:
	// attempt 1 of 3, after 0 snoozes: snoozed
	// attempt 1 of 3, after 1 snoozes: snoozed
	// attempt 1 of 3, after 2 snoozes: retried
	// attempt 2 of 3, after 2 snoozes: completed
}
