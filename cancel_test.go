package fleet_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

func TestServiceCancel(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := fleet.WithActor(context.Background(), "gina")
	svc := fleet.New(pool, fleet.Options{})
	dispatched, err := queue.NewClient(pool, queue.Defaults{}).DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("a", nil), queue.NewJob("b", nil), queue.NewJob("c", nil).OnQueue("mail"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := queue.IDs(dispatched)
	// The second job runs.
	if _, err := store.New(pool).JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 2, Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queue_jobs SET reserved_by = NULL, lease = NULL WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	res, err := svc.Cancel(ctx, ids[0], ids[1], 777)
	if err != nil {
		t.Fatal(err)
	}
	want := []fleet.CancelledJob{{ID: ids[0], Outcome: fleet.CancelDone}, {ID: ids[1], Outcome: fleet.CancelRequested}, {ID: 777, Outcome: fleet.CancelNotFound}}
	if !slices.Equal(res.Jobs, want) || !slices.Equal(res.NotFound, []int64{777}) {
		t.Fatalf("cancel = %+v", res)
	}
	running, err := svc.Job(ctx, ids[1])
	if err != nil || running.Cancel == nil || !running.Cancel.Requested || running.Cancel.By != "gina" {
		t.Fatalf("story of the running job: %+v, %v", running.Cancel, err)
	}
	done, err := svc.Job(ctx, ids[0])
	if err != nil || done.State != fleet.JobCancelled || done.Cancel == nil || done.Cancel.Reason != "cancelled by gina" {
		t.Fatalf("story of the cancelled job: %+v %+v, %v", done.State, done.Cancel, err)
	}
	if _, err := svc.CancelJob(ctx, 777); !errors.Is(err, fleet.ErrJobNotFound) {
		t.Fatalf("CancelJob of a missing job: %v", err)
	}
	n, err := svc.CancelQueueCount(ctx, "mail")
	if err != nil || n.Waiting != 1 || n.Running != 0 {
		t.Fatalf("count = %+v, %v", n, err)
	}
	q, err := svc.CancelQueue(ctx, "mail")
	if err != nil || q.Cancelled != 1 || q.Requested != 0 {
		t.Fatalf("cancel queue = %+v, %v", q, err)
	}
}
