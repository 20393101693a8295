package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fleet-go/fleet/queue"
)

// registerDemoJobs adds the demo.* handlers that the demo command and the
// documented checks use.
func registerDemoJobs(jobs *queue.Registry) {
	jobs.Handle("demo.noop", func(context.Context, *queue.Job) error { return nil })
	jobs.Handle("demo.sleep", demoSleep)
	jobs.Handle("demo.fail", func(context.Context, *queue.Job) error { return errors.New("demo failure") })
	jobs.Handle("demo.flaky", demoFlaky)
	jobs.Handle("demo.alloc", demoAlloc)
	jobs.Handle("demo.crash", func(context.Context, *queue.Job) error {
		fmt.Fprintln(os.Stderr, "demo.crash: exiting the whole process with status 3")
		os.Exit(3)
		return nil
	})
}

// demoSleep sleeps {"ms": N} milliseconds, stopping early if cancelled.
func demoSleep(ctx context.Context, job *queue.Job) error {
	var p struct {
		MS int `json:"ms"`
	}
	if err := job.Decode(&p); err != nil {
		return err
	}
	t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// demoFlaky fails its first {"fail_times": N} attempts, then succeeds.
func demoFlaky(_ context.Context, job *queue.Job) error {
	var p struct {
		FailTimes int `json:"fail_times"`
	}
	if err := job.Decode(&p); err != nil {
		return err
	}
	if job.Attempt <= p.FailTimes {
		return fmt.Errorf("demo flaky failure %d of %d", job.Attempt, p.FailTimes)
	}
	return nil
}

// demoAlloc allocates and holds {"mb": N} megabytes until it returns, for
// about a second (or {"ms": N}), so memory recycling can see it.
func demoAlloc(ctx context.Context, job *queue.Job) error {
	var p struct {
		MB int `json:"mb"`
		MS int `json:"ms"`
	}
	if err := job.Decode(&p); err != nil {
		return err
	}
	if p.MS == 0 {
		p.MS = 1500
	}
	buf := make([]byte, p.MB<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1 // touch every page so it counts as resident
	}
	t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if len(buf) > 0 {
		buf[len(buf)/2]++ // keep buf alive until here
	}
	return ctx.Err()
}
