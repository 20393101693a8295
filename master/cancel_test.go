package master_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// A worker holding a job whose cancel it ignores past the grace is killed
// like one holding a job past its timeout, and the job then ends as
// cancelled instead of being released to run again.
func TestMasterKillsWorkerIgnoringACancelAndTheJobEndsCancelled(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1)}})
	b := start(t, nil, sups, nil, func(s *master.Settings) { s.TimeoutGrace = time.Second })
	wait(t, b.fake.WaitSpawned(waitCtx(t), 1))
	ctx := context.Background()
	if _, err := queue.NewClient(b.pool, queue.Defaults{Queue: "q"}).Dispatch(ctx, queue.NewJob("x", nil).Timeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
	spec := b.fake.Specs()[0]
	jobs, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 1, Worker: spec.Worker, Master: spec.Master})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	if _, err := b.st.JobCancel(ctx, []int64{jobs[0].ID}, "hal"); err != nil {
		t.Fatal(err)
	}
	// Requested a minute ago: far past the grace.
	if _, err := b.pool.Exec(ctx, `UPDATE queue_jobs SET cancel_requested_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	poll(t, "the worker to be killed", func() bool { return b.fake.Killed(0) })
	poll(t, "its job to end cancelled", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs`) == 0 &&
			b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status = 'cancelled' AND error LIKE 'cancelled by hal;%'`) == 1
	})
}
