// Command app is fleet's example application: it registers the demo jobs
// and hands the command line to fleet. An application of your own looks the
// same, with its own handlers.
package main

import (
	"os"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/queue"
)

func main() {
	jobs := queue.NewRegistry()
	registerDemoJobs(jobs)
	os.Exit(cmd.Execute(cmd.App{Jobs: jobs}))
}
