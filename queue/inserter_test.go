package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// TestConcurrentDispatchesShareInsertsAndFailAlone dispatches from many
// goroutines at once, so that calls gather into shared inserts, with some
// jobs PostgreSQL refuses (a NUL byte in the name): every good call gets
// its own job and id, every bad call fails, and nothing else is lost.
func TestConcurrentDispatchesShareInsertsAndFailAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	const goroutines, each = 16, 60
	var mu sync.Mutex
	seen := map[int64]string{}
	var failed, bad int
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("job-%d-%d", g, i)
				isBad := i%20 == 7
				if isBad {
					name = "bad\x00" + name
				}
				var ids []int64
				var err error
				if i%3 == 0 {
					var res []queue.DispatchResult
					res, err = client.DispatchMany(context.Background(), []*queue.JobSpec{queue.NewJob(name, nil), queue.NewJob(name, nil)})
					ids = queue.IDs(res)
				} else {
					var res queue.DispatchResult
					res, err = client.Dispatch(context.Background(), queue.NewJob(name, nil))
					ids = []int64{res.ID}
				}
				mu.Lock()
				if isBad {
					bad++
				}
				if err != nil {
					failed++
					if !isBad {
						t.Errorf("dispatch of %s failed: %v", name, err)
					}
				} else {
					if isBad {
						t.Errorf("dispatch of a name with a NUL byte succeeded")
					}
					for _, id := range ids {
						if other, dup := seen[id]; dup {
							t.Errorf("id %d given to %s and %s", id, other, name)
						}
						seen[id] = name
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != bad {
		t.Errorf("%d dispatches failed, want the %d bad ones", failed, bad)
	}
	var rows int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queue_jobs`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(seen) {
		t.Errorf("%d jobs in the table, %d ids handed out", rows, len(seen))
	}
	// Every id names the job its caller dispatched.
	for id, name := range seen {
		var got string
		if err := pool.QueryRow(context.Background(), `SELECT name FROM queue_jobs WHERE id = $1`, id).Scan(&got); err != nil || got != name {
			t.Fatalf("job %d is %q (%v), want %q", id, got, err, name)
		}
	}
}
