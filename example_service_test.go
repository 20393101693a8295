package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// The operator's API: what `app fleet:*` does, from Go. Here no master
// runs, and one job failed for good before the tour starts.
func ExampleService() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	cfg := defaultConfig() // in an app, config.Load(config.Options{})
	failOneJob(ctx, pool, "contacts.export")

	// Each call returns an error; this tour checks only the last.
	svc := fleet.FromConfig(pool, cfg) // or fleet.New(pool, fleet.Options{...})
	err := svc.Pause(ctx, "exports")   // "": every supervisor
	err = svc.Resume(ctx, "")
	err = svc.PauseQueue(ctx, "mail") // one queue, in every supervisor that works it
	err = svc.ResumeQueue(ctx, "mail")
	status, err := svc.Status(ctx)          // fleet.StatusRunning | StatusPaused | StatusInactive
	masters, err := svc.Masters(ctx, false) // true: the recently gone too
	loads, err := svc.Workload(ctx)         // []fleet.QueueWorkload
	late, err := svc.LongWaits(ctx)         // []fleet.LongWaitDetected
	failed, err := svc.FailedJobs(ctx, fleet.FailedFilter{Search: "contacts.export"})
	if len(failed) > 0 {
		newID, err := svc.Retry(ctx, failed[0].ID) // errors.Is(err, fleet.ErrFailedJobNotFound) when gone
		fmt.Println("retried as a new job:", newID != 0, err)
	}
	n, err := svc.FailedCount(ctx, fleet.FailedFilter{Queue: "mail"}) // what RetryAll/ForgetAll would touch
	n, err = svc.RetryAll(ctx, fleet.FailedFilter{Queue: "mail"})
	err = svc.Forget(ctx, 12)
	n, err = svc.ForgetAll(ctx, fleet.FailedFilter{})
	pending, err := svc.PendingJobs(ctx, fleet.Page{Queue: "mail", Tag: "tenant:42", Limit: 50})
	done, err := svc.CompletedJobs(ctx, fleet.Page{})
	story, err := svc.Job(ctx, 4711) // fleet.JobStory
	if errors.Is(err, fleet.ErrJobNotFound) {
		fmt.Println("no job 4711")
	}
	story, err = svc.FailedJobStory(ctx, 12)          // by failed-job id; errors.Is(err, fleet.ErrFailedJobNotFound)
	charts, err := svc.Metrics(ctx, fleet.PeriodHour) // hour (per minute) | day (per 15 min) | week (per hour)
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(status, len(masters.Masters), len(loads), len(late), n, len(pending), len(done), story.ID, len(charts))
	// Output:
	// retried as a new job: true <nil>
	// no job 4711
	// Inactive 0 0 0 0 0 0 0 0
}

// defaultConfig is fleet's configuration with no file and no environment:
// its defaults.
func defaultConfig() *config.Config {
	cfg, err := config.Load(config.Options{Environ: []string{}})
	if err != nil {
		log.Fatal(err)
	}
	return cfg
}

// failOneJob dispatches a job of that name with one try, and runs it with
// a handler that fails: the job moves to the failed jobs.
func failOneJob(ctx context.Context, pool *pgxpool.Pool, name string) {
	jobs := queue.NewRegistry()
	jobs.Handle(name, func(context.Context, *queue.Job) error { return errors.New("disk full") })
	if _, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob(name, nil).Tries(1)); err != nil {
		log.Fatal(err)
	}
	fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
}

// Reading what happened, from the app's own code.
func ExampleService_Workload() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	mail := queue.NewJob("mail.send", nil).OnQueue("mail")
	if _, err := queue.NewClient(pool, queue.Defaults{}).DispatchMany(ctx, []*queue.JobSpec{mail, mail}); err != nil {
		log.Fatal(err)
	}

	svc := fleet.New(pool, fleet.Options{}) // import "github.com/fleet-go/fleet"
	loads, err := svc.Workload(ctx)
	if err != nil {
		log.Fatal(err)
	}
	done, err := svc.CompletedJobs(ctx, fleet.Page{Queue: "mail"})
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range loads {
		fmt.Println(q.Queue, q.Pending, q.Reserved)
	}
	fmt.Println(len(done), "completed attempts in mail")
	// Output:
	// mail 2 0
	// 0 completed attempts in mail
}
