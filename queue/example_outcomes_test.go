package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/queue"
)

// rateLimited and orderWithdrawn stand in for an app's own checks.
func rateLimited() (bool, time.Duration) { return true, 30 * time.Second }

func orderWithdrawn(*queue.Job) bool { return false }

func ExampleSnooze() {
	jobs := queue.NewRegistry()
	jobs.Handle("api.sync", func(ctx context.Context, job *queue.Job) error {
		if limited, retryAfter := rateLimited(); limited {
			// Run again in retryAfter; this attempt does not count
			// against the job's tries.
			return queue.Snooze(retryAfter)
		}
		return nil
	})
}

func ExampleCancel() {
	jobs := queue.NewRegistry()
	jobs.Handle("order.ship", func(ctx context.Context, job *queue.Job) error {
		if orderWithdrawn(job) {
			// Ends the job as cancelled: no retry, not a failed job.
			return queue.Cancel(errors.New("the order was withdrawn"))
		}
		return nil
	})
}

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
}

func ExampleSnoozeError() {
	var s *queue.SnoozeError
	if errors.As(queue.Snooze(time.Minute), &s) {
		fmt.Println(s.Delay)
	}
	// Output: 1m0s
}
