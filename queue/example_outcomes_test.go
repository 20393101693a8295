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

// rateLimited and orderWithdrawn stand in for an app's own checks.
func rateLimited() (bool, time.Duration) { return true, 30 * time.Second }

func orderWithdrawn(*queue.Job) bool { return true }

// A handler that cannot do its work yet snoozes its job.
func ExampleSnooze() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	jobs := queue.NewRegistry()

	jobs.Handle("api.sync", func(ctx context.Context, job *queue.Job) error {
		if limited, retryAfter := rateLimited(); limited {
			// Run again in retryAfter; this attempt does not count
			// against the job's tries.
			return queue.Snooze(retryAfter)
		}
		return nil
	})

	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewJob("api.sync", nil)); err != nil {
		log.Fatal(err)
	}
	e, _ := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
	fmt.Println(e.Kind, "for", e.RetryIn)
	// Output: snoozed for 30s
}

// A handler that finds its job has no point any more cancels it.
func ExampleCancel() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	jobs := queue.NewRegistry()

	jobs.Handle("order.ship", func(ctx context.Context, job *queue.Job) error {
		if orderWithdrawn(job) {
			// Ends the job as cancelled: no retry, not a failed job.
			return queue.Cancel(errors.New("the order was withdrawn"))
		}
		return nil
	})

	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewJob("order.ship", nil)); err != nil {
		log.Fatal(err)
	}
	e, _ := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
	fmt.Println(e.Kind)
	// Output: cancelled
}

// A running job that an operator cancels sees its context end with a cause
// matching queue.ErrCancelled. (Here the context is cancelled by hand, as
// the worker cancels it when an operator cancels the job.)
func ExampleErrCancelled() {
	jobs := queue.NewRegistry()
	jobs.Handle("report.build", func(ctx context.Context, job *queue.Job) error {
		for page := 0; page < 1000; page++ {
			select {
			case <-ctx.Done():
				if errors.Is(context.Cause(ctx), queue.ErrCancelled) {
					// An operator cancelled the job (fleet:cancel): stop
					// here; the attempt is recorded as cancelled.
					return context.Cause(ctx)
				}
				return ctx.Err() // its timeout
			default:
			}
			_ = page // build one page
		}
		return nil
	})

	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("cancelled by ann@ops: %w", queue.ErrCancelled))
	fmt.Println(jobs.Run(ctx, &queue.Job{ID: 1, Name: "report.build", Attempt: 1}))
	// Output: cancelled by ann@ops: the job was cancelled
}

func ExampleSnoozeError() {
	var s *queue.SnoozeError
	if errors.As(queue.Snooze(time.Minute), &s) {
		fmt.Println(s.Delay)
	}
	// Output: 1m0s
}
