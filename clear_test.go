package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

func TestClearDeletesPendingDelayedAndLimitedJobsButNotRunningOnes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	svc := fleet.New(pool, fleet.Options{})
	c := queue.NewClient(pool, queue.Defaults{})
	jobs := []*queue.JobSpec{
		queue.NewJob("a", nil).OnQueue("mail"),
		queue.NewJob("a", nil).OnQueue("mail").Delay(time.Hour),
		queue.NewJob("a", nil).OnQueue("mail").Limit("tenant:1", 1),
		queue.NewJob("a", nil).OnQueue("mail").Limit("tenant:1", 1), // parked
		queue.NewJob("a", nil).OnQueue("mail"),
		queue.NewJob("a", nil), // default: not cleared
	}
	if _, err := c.DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	running, err := store.New(pool).JobClaim(ctx, store.JobClaimParams{Queue: "mail", Limit: 1, Worker: "w"})
	if err != nil || len(running) != 1 {
		t.Fatalf("claim: %d, %v", len(running), err)
	}
	if n, err := svc.ClearCount(ctx, "mail"); err != nil || n != 4 {
		t.Fatalf("would clear %d, %v; want 4", n, err)
	}
	if n, err := svc.Clear(ctx, "mail"); err != nil || n != 4 {
		t.Fatalf("cleared %d, %v; want 4", n, err)
	}
	pending, err := svc.PendingJobs(ctx, fleet.Page{Limit: 10})
	if err != nil || len(pending) != 2 {
		t.Fatalf("left %+v, %v; want the running mail job and the default one", pending, err)
	}
	for _, j := range pending {
		if j.Queue == "mail" && j.ID != running[0].ID {
			t.Fatalf("mail job %d left, not the running %d", j.ID, running[0].ID)
		}
	}
	var active int
	if err := pool.QueryRow(ctx, `SELECT active FROM queue_limits WHERE key = 'tenant:1'`).Scan(&active); err != nil || active != 0 {
		t.Fatalf("tenant:1 holds %d slots after the clear, %v; want 0", active, err)
	}
	for _, q := range []string{"", "ma\til"} {
		if _, err := svc.Clear(ctx, q); err == nil || !strings.HasPrefix(err.Error(), "queue ") {
			t.Errorf("Clear(%q): %v, want an error naming queue", q, err)
		}
	}
}
