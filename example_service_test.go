package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
)

// The operator's API: what `app fleet:*` does, from Go. (Compiled, not
// run: it needs a database.)
func ExampleService() {
	ctx := context.Background()
	cfg, err := config.Load(config.Options{})
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, cfg.Database.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Each call returns an error; this tour keeps only the last.
	svc := fleet.FromConfig(pool, cfg) // or fleet.New(pool, fleet.Options{...})
	err = svc.Pause(ctx, "exports")    // "": every supervisor
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
		fmt.Println(newID, err)
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
	fmt.Println(status, masters, loads, late, n, pending, done, story, charts, err)
}

// Reading what happened, from the app's own code. (Compiled, not run: it
// needs a database.)
func ExampleService_Workload() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("APP_DATABASE__URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

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
}
