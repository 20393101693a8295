package queue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // pgx's database/sql driver

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// The examples below that need PostgreSQL each take a fresh database of the
// test harness (examplekit.Pool; in an app, the app's own pool), and run
// the jobs they dispatch with fleettest.WorkOne, as a worker of `app fleet`
// would run them.

// A handler, registered by name, and a dispatch of the job it runs. The
// registry goes to cmd.Execute (see docs/embedding.md); `app fleet`'s
// workers then run the handler.
func ExampleClient_Dispatch() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()

	jobs := queue.NewRegistry()
	jobs.Handle("mail.send", func(ctx context.Context, job *queue.Job) error {
		var p struct {
			To string `json:"to"`
		}
		if err := job.Decode(&p); err != nil {
			return err // a failed attempt: retried after its backoff
		}
		fmt.Println("sending mail to", p.To)
		return nil
	})

	client := queue.NewClient(pool, queue.Defaults{})
	res, err := client.Dispatch(ctx, queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"}).OnQueue("mail"))
	if err != nil {
		log.Fatal(err)
	}

	e, _ := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "mail")
	fmt.Println("job", e.JobID == res.ID, e.Kind, "at attempt", e.Attempt)
	// Output:
	// sending mail to ann@example.com
	// job true completed at attempt 1
}

// Options a job may set; what it does not set is decided when it runs (its
// supervisor's defaults, else the [queue] section's). A dispatch never
// changes the spec it is given: Opts reads back what the spec sets.
func ExampleClient_Dispatch_options() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()

	client := queue.NewClient(pool, queue.Defaults{}) // tries, backoff, timeout: the worker's supervisor decides
	payload := map[string]string{"to": "ann@example.com"}

	job := queue.NewJob("mail.send", payload).
		OnQueue("mail").
		Delay(30*time.Second).   // available in 30 s
		Tries(5).                // at most 5 attempts
		Backoff(1, 5, 30).       // seconds before each retry; the last repeats
		Timeout(2 * time.Minute) // per attempt
	if _, err := client.Dispatch(ctx, job); err != nil {
		log.Fatal(err)
	}
	o := job.Opts()
	fmt.Println(o.Queue, o.Tries, o.Backoff, o.Timeout)

	stored := fleettest.RequireDispatched(examplekit.NewT(), pool, "mail.send")
	fmt.Println(stored.Queue, stored.State, stored.MaxTries)
	// Output:
	// mail 5 [1 5 30] 2m0s
	// mail delayed 5
}

// Inside your own pgx transaction, the job exists only if the transaction
// commits: the order and its mail commit together, or neither.
func ExampleClient_DispatchTx() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, email text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	client := queue.NewClient(pool, queue.Defaults{})

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (email) VALUES ($1)`, "ann@example.com"); err != nil {
			return err
		}
		_, err := client.DispatchTx(ctx, tx, queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"}))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	var orders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", orders, "mail jobs:", len(fleettest.Dispatched(examplekit.NewT(), pool, "mail.send")))
	// Output: orders: 1 mail jobs: 1
}

// The same inside a database/sql transaction of pgx's stdlib driver.
func ExampleClient_DispatchSQLTx() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, email text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	client := queue.NewClient(pool, queue.Defaults{})

	db := stdlib.OpenDBFromPool(pool) // or sql.Open("pgx", url)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // nothing after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (email) VALUES ($1)`, "ann@example.com"); err != nil {
		log.Fatal(err)
	}
	if _, err := client.DispatchSQLTx(ctx, tx, queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"})); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	fmt.Println("mail jobs:", len(fleettest.Dispatched(examplekit.NewT(), pool, "mail.send")))
	// Output: mail jobs: 1
}

// Many jobs in one round trip, all or none, each with its result in order.
func ExampleClient_DispatchMany() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})

	batch := []*queue.JobSpec{
		queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"}),
		queue.NewJob("mail.send", map[string]string{"to": "bob@example.com"}),
	}
	results, err := client.DispatchMany(ctx, batch) // DispatchManyTx, DispatchManySQLTx inside a transaction
	if err != nil {
		log.Fatal(err)
	}
	ids := queue.IDs(results) // the jobs' ids, in the batch's order

	fmt.Println(len(ids), "jobs dispatched, duplicates:", results[0].Duplicate, results[1].Duplicate)
	// Output: 2 jobs dispatched, duplicates: false false
}

// A handler whose effects are writes to fleet's own database makes them
// and the job's completion one transaction.
func ExampleJob_CompleteTx() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (order_id bigint PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	jobs := queue.NewRegistry()

	jobs.Handle("invoice.issue", func(ctx context.Context, j *queue.Job) error {
		var p struct {
			OrderID int64 `json:"order_id"`
		}
		if err := j.Decode(&p); err != nil {
			return err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // does nothing after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, p.OrderID); err != nil {
			return err
		}
		if err := j.CompleteTx(ctx, tx); err != nil { // last, just before Commit
			return err
		}
		return tx.Commit(ctx)
	})

	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewJob("invoice.issue", map[string]int64{"order_id": 7})); err != nil {
		log.Fatal(err)
	}
	e, _ := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default")
	var invoices int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Kind, "invoices:", invoices)
	// Output: completed invoices: 1
}

// A unique job: while a job with the same key counts, a dispatch inserts
// nothing and its result names the job that holds the key.
func ExampleJobSpec_Unique() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})
	p := map[string]int{"customer": 42}

	// At most one report per customer per hour, completed ones included.
	j := queue.NewJob("report.build", p).Unique(queue.Unique{
		Key: "customer:42", Period: time.Hour, Completed: true,
	})
	first, err := client.Dispatch(ctx, j)
	if err != nil {
		log.Fatal(err)
	}
	again, err := client.Dispatch(ctx, j) // again.Duplicate: again.ID is the job that holds the key
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(first.Duplicate, again.Duplicate, again.ID == first.ID)
	// Output: false true true
}

// A concurrency limit: at most two jobs with the key run at once, across
// every worker of the fleet; the others wait, parked ("limited").
func ExampleJobSpec_Limit() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})
	payload := map[string]int{"tenant": 42}

	// At most two exports per tenant at a time.
	job := queue.NewJob("exports.csv", payload).OnQueue("exports").Limit("tenant:42", 2)
	res, err := client.Dispatch(ctx, job) // DispatchTx, DispatchMany(Tx), DispatchSQLTx alike
	if err != nil {
		log.Fatal(err)
	}

	if _, err := client.DispatchMany(ctx, []*queue.JobSpec{job, job}); err != nil {
		log.Fatal(err)
	}
	for _, j := range fleettest.Dispatched(examplekit.NewT(), pool, "exports.csv") {
		fmt.Println(j.ID == res.ID, j.State)
	}
	// Output:
	// true pending
	// false pending
	// false limited
}

// Priority orders a queue's ready jobs: lower runs first, then the
// oldest. Dispatch refuses a priority outside -100..100.
func ExampleJobSpec_Priority() {
	urgent := queue.NewJob("mail.send", nil).OnQueue("mail").Priority(-10)
	bulk := queue.NewJob("mail.digest", nil).OnQueue("mail").Priority(50)
	fmt.Println(urgent.Opts().Priority, bulk.Opts().Priority)
	fmt.Println(queue.CheckPriority("JobSpec.Priority", 101))
	// Output:
	// -10 50
	// JobSpec.Priority must be between -100 and 100, got 101
}

// A claim takes the most urgent job first, whatever order the jobs were
// dispatched in.
func ExampleJobSpec_Priority_order() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})
	jobs := queue.NewRegistry()
	jobs.Handle("mail.send", func(ctx context.Context, job *queue.Job) error {
		fmt.Println("priority", job.Priority)
		return nil
	})

	if _, err := client.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("mail.send", nil).Priority(50),  // a digest: it can wait
		queue.NewJob("mail.send", nil),               // the default, 0
		queue.NewJob("mail.send", nil).Priority(-10), // a password reset
	}); err != nil {
		log.Fatal(err)
	}
	for {
		if _, ok := fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "default"); !ok {
			break
		}
	}
	// Output:
	// priority -10
	// priority 0
	// priority 50
}

// Tags label a job; a repeated tag counts once.
func ExampleJobSpec_Tags() {
	job := queue.NewJob("exports.csv", nil).Tags("tenant:42", "import").Tags("import")
	fmt.Println(job.Opts().Tags)
	fmt.Println(queue.CheckTags("JobSpec.Tags", []string{"tenant:\n42"}))
	// Output:
	// [tenant:42 import]
	// JobSpec.Tags[0] "tenant:\n42" must not contain control characters (U+000A at byte 7)
}

// Metadata travels with the job beside its payload; handlers read it.
// (Registry.Run runs the job as a worker would, without a database.)
func ExampleJobSpec_Metadata() {
	jobs := queue.NewRegistry()
	jobs.Handle("mail.send", func(ctx context.Context, job *queue.Job) error {
		var m struct {
			RequestID string `json:"request_id"`
			Source    string `json:"source"`
		}
		if err := job.DecodeMeta(&m); err != nil {
			return err
		}
		fmt.Println("request", job.MetaString("request_id"), "from", m.Source)
		fmt.Println(string(job.Metadata))
		return nil
	})

	spec := queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"}).
		Metadata(map[string]string{"source": "signup"}).
		SetMeta("request_id", "req-7")
	// The job as a worker runs it.
	job := &queue.Job{ID: 1, Name: spec.Name, Payload: spec.Payload, Attempt: 1, Metadata: spec.Opts().Metadata}
	_ = jobs.Run(context.Background(), job)
	// Output:
	// request req-7 from signup
	// {"request_id":"req-7","source":"signup"}
}
