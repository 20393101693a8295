package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// SendWelcome is the args of the "mail.welcome" job.
type SendWelcome struct {
	UserID int64  `json:"user_id"`
	Locale string `json:"locale"`
}

// JobName names the job SendWelcome is the args of. It must not depend on
// fields.
func (SendWelcome) JobName() string { return "mail.welcome" }

// A typed handler receives its args decoded; NewTypedJob makes the job to
// dispatch, and every builder method applies to it. (Registry.Run runs the
// job as a worker would, without a database.)
func ExampleHandleTyped() {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(ctx context.Context, job *queue.Job, args SendWelcome) error {
		fmt.Printf("welcome user %d in %s (attempt %d)\n", args.UserID, args.Locale, job.Attempt)
		return nil
	})

	spec := queue.NewTypedJob(SendWelcome{UserID: 42, Locale: "fr"}).OnQueue("mail").Delay(time.Minute)
	fmt.Println(spec.Name, spec.Queue, string(spec.Payload))

	// The job as a worker runs it.
	job := &queue.Job{ID: 1, Name: spec.Name, Queue: spec.Queue, Payload: spec.Payload, Attempt: 1}
	if err := jobs.Run(context.Background(), job); err != nil {
		fmt.Println(err)
	}
	// Output:
	// mail.welcome mail {"user_id":42,"locale":"fr"}
	// welcome user 42 in fr (attempt 1)
}

// A payload that does not fit the args fails the attempt, naming the job,
// the field and the Go type; the job is retried like any failed attempt.
func ExampleHandleTyped_decodeFailure() {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(ctx context.Context, job *queue.Job, args SendWelcome) error { return nil })

	job := &queue.Job{ID: 7, Name: "mail.welcome", Payload: json.RawMessage(`{"user_id":"42"}`)}
	fmt.Println(jobs.Run(context.Background(), job))
	// Output:
	// decode args of job 7 (mail.welcome) into queue_test.SendWelcome: field "user_id": JSON string does not fit Go type int64
}

// Dispatching a typed job is dispatching a job.
func ExampleNewTypedJob() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})

	res, err := client.Dispatch(ctx, queue.NewTypedJob(SendWelcome{UserID: 42}).OnQueue("mail").Tries(5))
	if err != nil {
		log.Fatal(err)
	}

	job := fleettest.RequireDispatchedArgs(examplekit.NewT(), pool, SendWelcome{UserID: 42})
	fmt.Println(job.ID == res.ID, job.Name, job.Queue, job.MaxTries, string(job.Payload))
	// Output: true mail.welcome mail 5 {"locale": "", "user_id": 42}
}

// ExportCSV is the args of the "exports.csv" job, and carries its jobs'
// defaults.
type ExportCSV struct {
	TenantID int64 `json:"tenant_id"`
}

func (ExportCSV) JobName() string { return "exports.csv" }

// JobOpts are the defaults of every exports.csv job.
func (ExportCSV) JobOpts() queue.JobOpts {
	return queue.JobOpts{Queue: "exports", Tries: 3, Priority: 10, Tags: []string{"export"}}
}

// An args type may declare its jobs' defaults once (JobArgsWithOpts); a
// spec's own methods override them for one dispatch.
func ExampleJobArgsWithOpts() {
	spec := queue.NewTypedJob(ExportCSV{TenantID: 42})
	urgent := queue.NewTypedJob(ExportCSV{TenantID: 42}).Priority(-10).Tags("tenant:42")

	o, u := spec.Opts(), urgent.Opts()
	fmt.Println(spec.Name, o.Queue, o.Tries, o.Priority, o.Tags)
	fmt.Println(urgent.Name, u.Queue, u.Tries, u.Priority, u.Tags)
	// Output:
	// exports.csv exports 3 10 [export]
	// exports.csv exports 3 -10 [export tenant:42]
}

// Work middleware wraps every handler, the first registered outermost.
func ExampleRegistry_Use() {
	jobs := queue.NewRegistry()
	jobs.Use(func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, job *queue.Job) error {
			fmt.Println("start", job.Name)
			err := next(ctx, job)
			fmt.Println("end", job.Name, "err:", err)
			return err
		}
	})
	jobs.Handle("report.build", func(ctx context.Context, job *queue.Job) error {
		fmt.Println("building")
		return nil
	})

	_ = jobs.Run(context.Background(), &queue.Job{Name: "report.build"})
	// Output:
	// start report.build
	// building
	// end report.build err: <nil>
}

// Dispatch middleware sees every job before it is inserted: it may change
// it or refuse it, and a refused dispatch inserts nothing. It changes a
// copy: the caller's spec stays as it was.
func ExampleClient_Use() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})

	errNoTenant := errors.New("no tenant in the payload")
	client.Use(func(ctx context.Context, job *queue.JobSpec) error {
		var p struct {
			Tenant string `json:"tenant"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil || p.Tenant == "" {
			return errNoTenant
		}
		job.OnQueue("tenant-" + p.Tenant) // one queue per tenant
		return nil
	})

	_, err := client.Dispatch(ctx, queue.NewJob("invoice.send", map[string]int{"invoice": 9}))
	fmt.Println(err)
	fmt.Println(errors.Is(err, errNoTenant))

	spec := queue.NewJob("invoice.send", map[string]any{"invoice": 10, "tenant": "acme"})
	if _, err := client.Dispatch(ctx, spec); err != nil {
		log.Fatal(err)
	}
	stored := fleettest.RequireDispatched(examplekit.NewT(), pool, "invoice.send")
	fmt.Printf("stored on %s; the spec's queue is still %q\n", stored.Queue, spec.Queue)
	// Output:
	// dispatch job "invoice.send": refused by dispatch middleware: no tenant in the payload
	// true
	// stored on tenant-acme; the spec's queue is still ""
}

// An error hook hears of every failed attempt, for the app's error
// tracker. It runs on the job's goroutine: keep it short.
func ExampleRegistry_OnError() {
	jobs := queue.NewRegistry()
	jobs.Handle("sync.crm", func(ctx context.Context, job *queue.Job) error {
		return errors.New("crm said 503")
	})
	jobs.OnError(func(ctx context.Context, job *queue.Job, err error) {
		fmt.Printf("report to tracker: %s attempt %d of %d: %v\n", job.Name, job.Attempt, job.MaxTries, err)
	})

	_ = jobs.Run(context.Background(), &queue.Job{Name: "sync.crm", Attempt: 2, MaxTries: 3})
	// Output:
	// report to tracker: sync.crm attempt 2 of 3: crm said 503
}

// A subscription receives what the workers of this process did, once it
// is written to the database. Start reading in main, next to the Handle
// calls: every worker child of `app fleet` runs that main too. (Here the
// event is published by hand, as a worker would.)
func ExampleRegistry_Subscribe() {
	jobs := queue.NewRegistry()
	sub := jobs.Subscribe(queue.EventFailed, queue.EventRetried)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range sub.Events() {
			fmt.Printf("%s: job %d (%s) on %s, attempt %d: %s\n", e.Kind, e.JobID, e.Name, e.Queue, e.Attempt, e.Error)
		}
	}()

	jobs.Publish(queue.Event{Kind: queue.EventCompleted, JobID: 1, Name: "mail.welcome", Queue: "mail", Attempt: 1})
	jobs.Publish(queue.Event{Kind: queue.EventFailed, JobID: 2, Name: "sync.crm", Queue: "default", Attempt: 3, Error: "crm said 503"})
	sub.Close()
	<-done
	fmt.Println("dropped:", sub.Dropped())
	// Output:
	// failed: job 2 (sync.crm) on default, attempt 3: crm said 503
	// dropped: 0
}
