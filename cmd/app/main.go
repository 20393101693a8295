// Command app is fleet's example application: it registers the demo jobs
// and hands the command line to fleet. An application of your own looks the
// same, with its own handlers.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/queue"
)

func main() {
	jobs := queue.NewRegistry()
	registerDemoJobs(jobs)
	os.Exit(cmd.Execute(cmd.App{Jobs: jobs, OnLongWait: logLongWait}))
}

// logLongWait is the example app's long-wait listener: page someone here.
func logLongWait(_ context.Context, e fleet.LongWaitDetected) {
	slog.Warn("queue is backing up", "queue", e.Queue, "wait_secs", e.WaitSecs, "threshold_secs", e.ThresholdSecs)
}
