package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// TestStatements runs the bench's own statements on a migrated database:
// they fill, count, drain and clean the bench's queues and leave the
// others alone.
func TestStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	d := db{pool: pool}
	q := Prefix + "sql"

	missing, err := d.tablesMissing(ctx)
	if err != nil || len(missing) != 0 {
		t.Fatalf("tablesMissing on a migrated database = %v, %v", missing, err)
	}
	since := time.Now()
	if err := d.insert(ctx, q, JobName, 250); err != nil {
		t.Fatal(err)
	}
	if n, err := d.queueSize(ctx, q); err != nil || n != 250 {
		t.Fatalf("queueSize = %d, %v; want 250", n, err)
	}
	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("other.job", nil).OnQueue("other"), queue.NewJob("other.job", nil).OnQueue("other"),
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.foreignJobs(ctx, Prefix); err != nil || n != 2 {
		t.Fatalf("foreignJobs = %d, %v; want the 2 of queue other", n, err)
	}

	// The reference loop: batches of 100 until the queue is empty.
	total := 0
	for {
		n, err := d.claimDelete(ctx, q, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 100 {
			t.Fatalf("claimDelete took %d jobs, batch 100", n)
		}
		total += n
	}
	if total != 250 {
		t.Fatalf("claimDelete deleted %d jobs, want 250", total)
	}
	if n, err := d.queueSize(ctx, q); err != nil || n != 0 {
		t.Fatalf("queueSize after the loop = %d, %v", n, err)
	}

	idRes, err := client.Dispatch(ctx, queue.NewJob(JobName, nil).OnQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	if gone, err := d.jobGone(ctx, id); err != nil || gone {
		t.Fatalf("jobGone of a pending job = %v, %v", gone, err)
	}
	if _, err := d.attemptOf(ctx, id); !errors.Is(err, errNoHistory) {
		t.Fatalf("attemptOf a job never run: %v, want errNoHistory", err)
	}
	if _, ok, err := d.firstReserved(ctx, q, since); err != nil || ok {
		t.Fatalf("firstReserved with no history = %v, %v", ok, err)
	}
	if n, err := d.failedCount(ctx, q); err != nil || n != 0 {
		t.Fatalf("failedCount = %d, %v", n, err)
	}
	if n, err := d.xactCommits(ctx); err != nil || n <= 0 {
		t.Fatalf("xactCommits = %d, %v", n, err)
	}

	res, err := d.cleanup(ctx, Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 1 || res.FailedJobs != 0 || res.History != 0 {
		t.Errorf("cleanup = %+v, want the 1 bench job", res)
	}
	if gone, err := d.jobGone(ctx, id); err != nil || !gone {
		t.Errorf("jobGone after cleanup = %v, %v", gone, err)
	}
	if n, err := d.foreignJobs(ctx, Prefix); err != nil || n != 2 {
		t.Errorf("foreignJobs after cleanup = %d, %v; the other queue's jobs stay", n, err)
	}
}
