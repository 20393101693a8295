package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// effects is the table the handlers of these tests write to, in the same
// transaction as they complete their job.
func effects(t *testing.T, b *bundle) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `CREATE TABLE effects (job_id bigint NOT NULL, attempt int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// runUntilEmpty runs a worker of the default queue until nothing is left.
func runUntilEmpty(t *testing.T, b *bundle) {
	t.Helper()
	b.member(t, "m-tx")
	w := b.worker(t, worker.Config{Concurrency: 4, StopWhenEmpty: true, Master: "m-tx", Tries: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := w.Run(ctx)
	if err != nil || res.Reason != spawner.ExitEmpty {
		t.Fatalf("worker ended with %+v, %v", res, err)
	}
}

// insertThenComplete is a handler's transaction: its own write, then the
// completion, then end, which commits or not (nil end: commit).
func insertThenComplete(b *bundle, end func(ctx context.Context, tx pgx.Tx, j *queue.Job) error) queue.HandlerFunc {
	return func(ctx context.Context, j *queue.Job) error {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }() // after a commit it does nothing
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, j.ID, j.Attempt); err != nil {
			return err
		}
		if err := j.CompleteTx(ctx, tx); err != nil {
			return err
		}
		if end != nil {
			return end(ctx, tx, j)
		}
		return tx.Commit(ctx)
	}
}

// A handler that writes a row and completes its job in one transaction:
// the row, the job's removal and its one 'completed' history row commit
// together, and the processed counter counts each job once.
func TestCompleteTxCommitsWithTheHandlersWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	b.jobs.Handle("tx.job", insertThenComplete(b, nil))
	const n = 20
	jobs := make([]*queue.JobSpec, n)
	for i := range jobs {
		jobs[i] = queue.NewJob("tx.job", nil)
	}
	ids := b.dispatch(t, jobs...)
	runUntilEmpty(t, b)
	for _, id := range ids {
		if c := b.count(t, `SELECT count(*) FROM effects WHERE job_id = $1`, id); c != 1 {
			t.Errorf("job %d: %d effect rows, want 1", id, c)
		}
		if c := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'completed'`, id); c != 1 {
			t.Errorf("job %d: %d completed history rows, want 1", id, c)
		}
		if c := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1`, id); c != 1 {
			t.Errorf("job %d: %d history rows, want 1", id, c)
		}
	}
	if c := b.count(t, `SELECT count(*) FROM queue_jobs`); c != 0 {
		t.Errorf("%d jobs left", c)
	}
	if c := b.count(t, `SELECT coalesce(sum(processed), 0)::int FROM fleet_counters`); c != n {
		t.Errorf("processed = %d, want %d", c, n)
	}
}

// A failure after the handler's insert and the completion rolls both back:
// the attempt is a failed one, the job is retried, and only the second
// attempt's effect is there. The same when the handler rolls back and
// returns nil: the worker sees the job still queued and retries it.
func TestCompleteTxRolledBackIsRetried(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]error{"error returned": errors.New("after the insert"), "rolled back, nil returned": nil} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			effects(t, b)
			b.jobs.Handle("tx.job", insertThenComplete(b, func(ctx context.Context, tx pgx.Tx, j *queue.Job) error {
				if j.Attempt == 1 {
					if err := tx.Rollback(ctx); err != nil {
						return err
					}
					return fail
				}
				return tx.Commit(ctx)
			}))
			id := b.dispatch(t, queue.NewJob("tx.job", nil))[0]
			runUntilEmpty(t, b)
			if c := b.count(t, `SELECT count(*) FROM effects WHERE job_id = $1 AND attempt = 2`, id); c != 1 {
				t.Errorf("%d effect rows of attempt 2, want 1", c)
			}
			if c := b.count(t, `SELECT count(*) FROM effects`); c != 1 {
				t.Errorf("%d effect rows, want only attempt 2's", c)
			}
			var statuses []string
			if err := b.pool.QueryRow(context.Background(),
				`SELECT array_agg(status ORDER BY attempt) FROM fleet_jobs WHERE job_id = $1`, id).Scan(&statuses); err != nil {
				t.Fatal(err)
			}
			if len(statuses) != 2 || statuses[0] != "failed" || statuses[1] != "completed" {
				t.Errorf("history %v, want [failed completed]", statuses)
			}
		})
	}
}

// A handler whose lease was lost (its job released and claimed again)
// gets ErrLeaseLost from CompleteTx, and its transaction cannot commit,
// even when the handler commits anyway: its effect is not there, the job
// is untouched and no completion is recorded.
func TestCompleteTxWithALostLeaseCannotCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	var mu sync.Mutex
	var completeErr, commitErr error
	b.jobs.Handle("tx.job", func(ctx context.Context, j *queue.Job) error {
		// Another holder took the job meanwhile: its lease token changed.
		if _, err := b.pool.Exec(ctx, `UPDATE queue_jobs SET lease = lease + 1000000 WHERE id = $1`, j.ID); err != nil {
			return err
		}
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, j.ID, j.Attempt); err != nil {
			return err
		}
		cerr := j.CompleteTx(ctx, tx)
		merr := tx.Commit(ctx) // a careless handler commits anyway
		mu.Lock()
		completeErr, commitErr = cerr, merr
		mu.Unlock()
		return nil
	})
	id := b.dispatch(t, queue.NewJob("tx.job", nil))[0]
	b.member(t, "m-tx")
	w := b.worker(t, worker.Config{Concurrency: 1, Master: "m-tx"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = w.Run(ctx) }()
	waitFor(t, "the handler's commit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return commitErr != nil || completeErr != nil
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(completeErr, queue.ErrLeaseLost) {
		t.Errorf("CompleteTx = %v, want ErrLeaseLost", completeErr)
	}
	if commitErr == nil {
		t.Errorf("the commit of a transaction whose completion lost its lease succeeded")
	}
	if c := b.count(t, `SELECT count(*) FROM effects`); c != 0 {
		t.Errorf("%d effect rows committed without the completion", c)
	}
	if c := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1`, id); c != 1 {
		t.Errorf("the job was removed by a completion whose lease was lost")
	}
	if c := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'completed'`, id); c != 0 {
		t.Errorf("%d completed history rows for a lost lease", c)
	}
}

// CompleteTx on a job no worker runs says so instead of completing anything.
func TestCompleteTxOutsideAWorkerIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := (&queue.Job{Name: "x"}).CompleteTx(context.Background(), tx); err == nil {
		t.Fatal("CompleteTx on a job that is not running succeeded")
	}
}
