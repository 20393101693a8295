package queue_test

import (
	"context"
	"fmt"
	"time"

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

// A periodic job is declared beside the handlers, with the typed args of
// its job and the options of any dispatch; the app hands the registry to
// cmd.Execute, and every master runs the schedule, each tick once across
// the fleet. PeriodicSchedules is what the masters and fleet:periodic see.
func ExampleRegistry_Periodic() {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, buildReport)
	jobs.Periodic("nightly-report", "0 3 * * *", queue.NewTypedJob(ReportArgs{Kind: "daily"}).Priority(-10),
		queue.PeriodicOpts{Timezone: "Europe/Paris", CatchUp: queue.CatchUpLast, TickKey: "tick"})
	jobs.Periodic("status-report", "@every 30s", queue.NewJob("reports.build", map[string]string{"kind": "status"}).OnQueue("ops"))

	schedules, err := jobs.PeriodicSchedules(queue.Defaults{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range schedules {
		fmt.Printf("%s (%s): %s, job %s on %s, catch-up %s, priority %d, tries %d\n",
			s.Name, s.Source, s.Spec, s.Job, s.Queue, s.CatchUp, s.JobOpts.Priority, s.JobOpts.MaxTries)
	}
	// Output:
	// nightly-report (code): 0 3 * * * (Europe/Paris), job reports.build on reports, catch-up last, priority -10, tries 3
	// status-report (code): @every 30s (UTC), job reports.build on ops, catch-up none, priority 0, tries 0
}

// Each tick's job is the spec's, with the tick in the payload under
// TickKey, in the schedule's time zone: here the night clocks spring
// forward in Paris, and the night after. (Registry.Run runs the job as a
// worker would.)
func ExampleRegistry_PeriodicSchedules_ticks() {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, buildReport)
	jobs.Periodic("nightly-report", "0 3 * * *", queue.NewTypedJob(ReportArgs{Kind: "daily"}),
		queue.PeriodicOpts{Timezone: "Europe/Paris", TickKey: "tick"})
	schedules, err := jobs.PeriodicSchedules(queue.Defaults{})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := schedules[0]
	for tick := s.Spec.Next(time.Date(2025, 3, 29, 12, 0, 0, 0, time.UTC)); tick.Month() == time.March; tick = s.Spec.Next(tick) {
		payload, err := s.PayloadAt(tick)
		if err != nil {
			fmt.Println(err)
			return
		}
		job := &queue.Job{ID: 1, Name: s.Job, Queue: s.Queue, Payload: payload, Attempt: 1}
		if err := jobs.Run(context.Background(), job); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// build the daily report of 2025-03-30T03:00:00+02:00
	// build the daily report of 2025-03-31T03:00:00+02:00
}

// Registrations are checked when the schedules are built, all at once,
// with the rules of the [fleet.periodic.NAME] tables and of a dispatch;
// each error names its schedule as the code does. `app fleet` refuses to
// start with these lines.
func ExampleRegistry_PeriodicSchedules() {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, buildReport)
	jobs.Periodic("hourly-report", "0 * * * * *", queue.NewTypedJob(ReportArgs{Kind: "hourly"}))
	jobs.Periodic("weekly-report", "@weekly", queue.NewTypedJob(ReportArgs{Kind: "weekly"}).Delay(time.Hour))
	jobs.Periodic("monthly-report", "@monthly", queue.NewTypedJob(ReportArgs{Kind: "monthly"}),
		queue.PeriodicOpts{Timezone: "Europe/Pariss"})
	jobs.Periodic("yearly-report", "@yearly", queue.NewJob("reports.yearly", nil))

	_, err := jobs.PeriodicSchedules(queue.Defaults{})
	fmt.Println(err)
	// Output:
	// Periodic("hourly-report"): cron: "0 * * * * *": expected exactly 5 fields, found 6: [0 * * * * *]
	// Periodic("weekly-report"): job "reports.build" has a Delay, which a periodic job cannot have: write the delay into the cron expression
	// Periodic("monthly-report"): PeriodicOpts.Timezone: unknown time zone "Europe/Pariss" (an IANA name such as Europe/Paris, or UTC)
	// Periodic("yearly-report"): no handler is registered for job "reports.yearly" (registered: reports.build)
}
