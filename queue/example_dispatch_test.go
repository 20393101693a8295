package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fleet-go/fleet/queue"
)

// connect opens the pool the compile-only examples below use.
func connect(ctx context.Context) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, os.Getenv("APP_DATABASE__URL"))
	if err != nil {
		log.Fatal(err)
	}
	return pool
}

// A handler, registered by name, and a dispatch of the job it runs. The
// registry goes to cmd.Execute (see docs/embedding.md); `app fleet`'s
// workers then run the handler. (This example needs a database: it is
// compiled, not run.)
func ExampleClient_Dispatch() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()

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
	idRes, err := client.Dispatch(ctx, queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"}).OnQueue("mail"))
	if err != nil {
		log.Fatal(err)
	}
	id := idRes.ID
	fmt.Println("dispatched job", id)
}

// Options a job may set; what it does not set is decided when it runs (its
// supervisor's defaults, else the [queue] section's). (Compiled, not run:
// it needs a database.)
func ExampleClient_Dispatch_options() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{}) // tries, backoff, timeout: the worker's supervisor decides
	payload := map[string]string{"to": "ann@example.com"}

	job := queue.NewJob("mail.send", payload).
		OnQueue("mail").
		Delay(30*time.Second).   // available in 30 s
		Tries(5).                // at most 5 attempts
		Backoff(1, 5, 30).       // seconds before each retry; the last repeats
		Timeout(2 * time.Minute) // per attempt
	idRes, err := client.Dispatch(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	id := idRes.ID
	fmt.Println("dispatched job", id)
}

// Inside your own pgx transaction, the job exists only if the transaction
// commits: the order and its mail commit together, or neither. (Compiled,
// not run: it needs a database.)
func ExampleClient_DispatchTx() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
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
}

// The same inside a database/sql transaction of pgx's stdlib driver.
// (Compiled, not run: it needs a database.)
func ExampleClient_DispatchSQLTx() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{})

	db, err := sql.Open("pgx", os.Getenv("APP_DATABASE__URL")) // or stdlib.OpenDBFromPool(pool)
	if err != nil {
		log.Fatal(err)
	}
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
}

// Many jobs in one round trip, all or none. (Compiled, not run: it needs a
// database.)
func ExampleClient_DispatchMany() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{})

	batch := []*queue.JobSpec{
		queue.NewJob("mail.send", map[string]string{"to": "ann@example.com"}),
		queue.NewJob("mail.send", map[string]string{"to": "bob@example.com"}),
	}
	ids, err := client.DispatchMany(ctx, batch) // DispatchManyTx, DispatchManySQLTx inside a transaction
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dispatched jobs", ids)
}

// A handler whose effects are writes to fleet's own database makes them
// and the job's completion one transaction. (Compiled, not run: it needs a
// database and a worker.)
func ExampleJob_CompleteTx() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
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
}

// A unique job: while a job with the same key counts, a dispatch inserts
// nothing and returns the id of the job that holds the key. (Compiled, not
// run: it needs a database.)
func ExampleJobSpec_Unique() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{})
	p := map[string]int{"customer": 42}

	// At most one report per customer per hour, completed ones included.
	j := queue.NewJob("report.build", p).Unique(queue.Unique{
		Key: "customer:42", Period: time.Hour, Completed: true,
	})
	res, err := client.Dispatch(ctx, j) // res.Duplicate: res.ID is the job that holds the key
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ID, res.Duplicate)
}

// A concurrency limit: at most two jobs with the key run at once, across
// every worker of the fleet. (Compiled, not run: it needs a database.)
func ExampleJobSpec_Limit() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{})
	payload := map[string]int{"tenant": 42}

	// At most two exports per tenant at a time.
	job := queue.NewJob("exports.csv", payload).OnQueue("exports").Limit("tenant:42", 2)
	id, err := client.Dispatch(ctx, job) // DispatchTx, DispatchMany(Tx), DispatchSQLTx alike
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dispatched job", id)
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
