package queue_test

import (
	"context"
	"errors"
	"time"

	"github.com/fleet-go/fleet/queue"
)

// A handler that returns queue.Cancel(err) ends its job cancelled: it is
// not retried, whatever tries it has left.
func ExampleCancel_noRetry() {
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
}

// A handler that returns queue.Snooze(d) runs its job again after d; the
// attempt does not count against the job's tries.
func ExampleSnooze_later() {
	jobs := queue.NewRegistry()
	jobs.Handle("report.build", func(ctx context.Context, job *queue.Job) error {
		if !dataReady() {
			return queue.Snooze(time.Minute) // try again in a minute, no try spent
		}
		return nil
	})
}

// dataReady stands in for the app's own check.
func dataReady() bool { return false }
