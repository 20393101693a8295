package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/supervisor"
)

// A queue named with a comma, which a worker's comma-separated --queue
// would split, is refused everywhere a name comes in: the Go client, a
// supervisor's configuration at boot (naming its key), plain SQL through
// fleet_dispatch, and any other insert; nothing is stored.
func TestQueueNamesWithACommaAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if err := queue.CheckQueue("--queue", "x,y"); err == nil || !strings.Contains(err.Error(), `--queue "x,y" must not contain a comma`) {
		t.Errorf("CheckQueue: %v", err)
	}
	if _, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("n", nil).OnQueue("x,y")); err == nil || !strings.Contains(err.Error(), "must not contain a comma") {
		t.Errorf("Dispatch to x,y: %v", err)
	}
	_, err := supervisor.Resolve(supervisor.Options{
		Supervisors:  map[string]supervisor.SupervisorOptions{"exports": {Queues: []string{"exports", "x,y"}}},
		DefaultQueue: "default", DefaultConcurrency: 1,
		CheckQueue: func(q string) error { return queue.CheckQueue("the queue name", q) },
	})
	if err == nil || !strings.Contains(err.Error(), `fleet.supervisors.exports.queues[1]: the queue name "x,y" must not contain a comma`) {
		t.Errorf("a supervisor working x,y: %v", err)
	}
	// fleet_dispatch refuses it in its own words, naming the argument; any
	// other insert meets the constraint.
	var pgErr *pgconn.PgError
	if _, err := pool.Exec(ctx, `SELECT fleet_dispatch('x,y', 'n')`); !errors.As(err, &pgErr) || pgErr.Code != "22023" ||
		!strings.Contains(pgErr.Message, "queue must not contain a comma") {
		t.Errorf("fleet_dispatch to x,y: %v, want SQLSTATE 22023 saying the queue must not contain a comma", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) VALUES ('x,y', 'n')`); !errors.As(err, &pgErr) ||
		pgErr.Code != "23514" || pgErr.ConstraintName != "queue_jobs_queue_no_comma" {
		t.Errorf("insert to x,y: %v, want SQLSTATE 23514 from queue_jobs_queue_no_comma", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs stored (%v), want none", n, err)
	}
}
