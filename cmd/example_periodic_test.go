package cmd_test

import (
	"context"
	"fmt"
	"os"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/queue"
)

// ReportArgs is the args of the "reports.build" job, which a periodic job
// dispatches every night.
type ReportArgs struct {
	Kind string `json:"kind"`
	Tick string `json:"tick"` // the tick the job serves (PeriodicOpts.TickKey)
}

// JobName names the job ReportArgs is the args of.
func (ReportArgs) JobName() string { return "reports.build" }

// JobOpts are the defaults of every reports.build job, periodic or not.
func (ReportArgs) JobOpts() queue.JobOpts { return queue.JobOpts{Queue: "reports", Tries: 3} }

// buildReport is the handler of reports.build.
func buildReport(ctx context.Context, job *queue.Job, args ReportArgs) error {
	fmt.Printf("build the %s report of %s\n", args.Kind, args.Tick)
	return nil
}

// An app's main declares its periodic jobs in Go beside its handlers, in
// the registry it hands to fleet: every master of the fleet runs them,
// each tick once across the fleet, beside the [fleet.periodic.NAME]
// tables of the configuration.
func Example_periodicJobs() {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, buildReport)
	// Every night at 03:00 in Paris, once across the fleet; after an
	// outage, the latest missed night once.
	jobs.Periodic("nightly-report", "0 3 * * *", queue.NewTypedJob(ReportArgs{Kind: "daily"}).Priority(-10),
		queue.PeriodicOpts{Timezone: "Europe/Paris", CatchUp: queue.CatchUpLast, TickKey: "tick"})
	os.Exit(cmd.Execute(cmd.App{Jobs: jobs}))
}
