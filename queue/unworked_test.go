package queue_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// OnUnworked is called for a dispatch to a queue no supervisor of a live
// master works, once per queue and call, and never while no master is
// live; the jobs are stored either way.
func TestOnUnworkedNamesQueuesNoLiveMasterWorks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var mu sync.Mutex
	var got []string
	hook := func(_ context.Context, q string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, q)
	}
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}

	idle := queue.NewClient(pool, queue.Defaults{})
	idle.OnUnworked(hook)
	if _, err := idle.Dispatch(ctx, queue.NewJob("x", nil).OnQueue("exports")); err != nil {
		t.Fatal(err)
	}
	if s := seen(); len(s) != 0 {
		t.Fatalf("with no master live, the hook was called for %v", s)
	}

	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
		('i1', 'm1', 'h', 1, 'running', '{"supervisors":[{"name":"web","queues":["default","mail"]}]}', now() + interval '1 minute'),
		('i2', 'm2', 'h', 2, 'running', '{"supervisors":[{"name":"old","queues":["reports"]}]}', now() - interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	c := queue.NewClient(pool, queue.Defaults{})
	c.OnUnworked(hook)
	if _, err := c.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("x", nil).OnQueue("exports"), queue.NewJob("x", nil).OnQueue("exports"),
		queue.NewJob("x", nil), queue.NewJob("x", nil).OnQueue("mail"),
		queue.NewJob("x", nil).OnQueue("reports"), // worked only by a master that is gone
	}); err != nil {
		t.Fatal(err)
	}
	if s := seen(); !slices.Equal(s, []string{"exports", "reports"}) {
		t.Fatalf("hook called for %v, want exports and reports once each", s)
	}
	if _, err := c.Dispatch(ctx, queue.NewJob("x", nil).Unique(queue.Unique{Key: "k"}).OnQueue("exports")); err != nil {
		t.Fatal(err)
	}
	if s := seen(); !slices.Equal(s, []string{"exports"}) {
		t.Fatalf("unique dispatch: hook called for %v", s)
	}
	c.OnUnworked(nil)
	if _, err := c.Dispatch(ctx, queue.NewJob("x", nil).OnQueue("exports")); err != nil {
		t.Fatal(err)
	}
	if s := seen(); len(s) != 0 {
		t.Fatalf("hook removed, still called for %v", s)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs WHERE queue = 'exports'`).Scan(&n); err != nil || n != 5 {
		t.Fatalf("%d jobs on exports (%v), want 5: a warned dispatch still stores its jobs", n, err)
	}
}
