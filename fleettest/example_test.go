package fleettest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// SendInvoice is the args of a job of these examples.
type SendInvoice struct {
	InvoiceID int64  `json:"invoice_id"`
	To        string `json:"to"`
}

func (SendInvoice) JobName() string { return "invoice.send" }

// RequireDispatched checks that the code under test dispatched a job, by
// its name and what it should carry.
func ExampleRequireDispatched() {
	t := examplekit.NewT() // in a test: the test's t
	defer t.Done()
	ctx := context.Background()

	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	_, err := client.Dispatch(ctx, queue.NewTypedJob(SendInvoice{InvoiceID: 7, To: "ann@example.com"}).
		OnQueue("billing").Tags("customer:42"))
	if err != nil {
		panic(err)
	}

	job := fleettest.RequireDispatched(t, pool, "invoice.send",
		fleettest.Args(SendInvoice{InvoiceID: 7, To: "ann@example.com"}),
		fleettest.OnQueue("billing"), fleettest.Tags("customer:42"))
	fmt.Println(job.Name, job.Queue, job.State, job.Tags)
	fleettest.RequireDispatched(t, pool, "invoice.send", fleettest.ArgsInclude(map[string]any{"invoice_id": 7}))
	fleettest.RequireNotDispatched(t, pool, "invoice.send", fleettest.OnQueue("default"))
	// Output: invoice.send billing pending [customer:42]
}

// RequireDispatchedTx looks only at the jobs a transaction dispatched,
// before it commits.
func ExampleRequireDispatchedTx() {
	t := examplekit.NewT()
	defer t.Done()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := client.DispatchTx(ctx, tx, queue.NewTypedJob(SendInvoice{InvoiceID: 8})); err != nil {
			return err
		}
		fleettest.RequireDispatchedTx(t, tx, "invoice.send", fleettest.ArgsInclude(map[string]any{"invoice_id": 8}))
		fleettest.RequireNotDispatched(t, pool, "invoice.send") // not committed yet
		return nil
	})
	fmt.Println(err)
	// Output: <nil>
}

// Drain works queues with the app's registry until they are empty and
// counts how the attempts ended.
func ExampleDrain() {
	t := examplekit.NewT()
	defer t.Done()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})

	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(ctx context.Context, job *queue.Job, args SendInvoice) error {
		if args.To == "" {
			return errors.New("no address")
		}
		return nil
	})
	_, err := client.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewTypedJob(SendInvoice{InvoiceID: 1, To: "ann@example.com"}),
		queue.NewTypedJob(SendInvoice{InvoiceID: 2}).Tries(2),
	})
	if err != nil {
		panic(err)
	}

	counts := fleettest.Drain(ctx, t, pool, jobs, "default")
	fmt.Printf("completed %d, retried %d, failed %d\n", counts.Completed, counts.Retried, counts.Failed)
	// Output: completed 1, retried 1, failed 1
}

// MakeDue moves a delayed job, or a retry waiting out its backoff, to now:
// the test's hand on the database's clock.
func ExampleMakeDue() {
	t := examplekit.NewT()
	defer t.Done()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(context.Context, *queue.Job, SendInvoice) error { return nil })

	if _, err := client.Dispatch(ctx, queue.NewTypedJob(SendInvoice{InvoiceID: 3}).Delay(24*time.Hour)); err != nil {
		panic(err)
	}
	_, ok := fleettest.WorkOne(ctx, t, pool, jobs, "default")
	fmt.Println("ran before MakeDue:", ok)

	fleettest.MakeDue(t, pool, "default")
	e, ok := fleettest.WorkOne(ctx, t, pool, jobs, "default")
	fmt.Println("ran after MakeDue:", ok, e.Kind)
	// Output:
	// ran before MakeDue: false
	// ran after MakeDue: true completed
}

// WorkOne runs one attempt of the next ready job and returns its outcome.
func ExampleWorkOne() {
	t := examplekit.NewT()
	defer t.Done()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	jobs := queue.NewRegistry()
	jobs.Handle("report.build", func(context.Context, *queue.Job) error { return errors.New("no data yet") })

	if _, err := client.Dispatch(ctx, queue.NewJob("report.build", nil).Tries(3).Backoff(60)); err != nil {
		panic(err)
	}
	e, _ := fleettest.WorkOne(ctx, t, pool, jobs, "default")
	fmt.Println(e.Kind, e.Attempt, e.Error, e.RetryIn)
	// Output: retried 1 no data yet 1m0s
}
