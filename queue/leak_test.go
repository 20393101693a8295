package queue_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// TestDispatchLeavesNoGoroutine: a Client starts no goroutine. Dispatches
// one at a time and from many goroutines at once, shared inserts that fail
// (so that each call is inserted again on its own), and delayed jobs leave
// no goroutine behind the moment they return: nothing is checked after a
// grace period, so a notification still in flight on a goroutine of its
// own fails the test.
//
// It runs alone (not in parallel), so that no other test's dispatch is
// running while it looks.
func TestDispatchLeavesNoGoroutine(t *testing.T) {
	pool := pgtest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	burst := func() {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 10 {
					name := fmt.Sprintf("leak-%d-%d", g, i)
					if i%4 == 1 {
						name = "bad\x00" + name // refused: its shared insert is redone call by call
					}
					job := queue.NewJob(name, nil).OnQueue(fmt.Sprintf("leak-%d", i%3))
					if i%5 == 2 {
						job = job.Delay(3600e9)
					}
					_, _ = client.Dispatch(ctx, job)
				}
			})
		}
		wg.Wait()
		if _, err := client.Dispatch(ctx, queue.NewJob("leak-last", nil).OnQueue("leak-0")); err != nil {
			t.Fatal(err)
		}
	}
	// The first burst opens the pool's connections; their goroutines, and
	// those of the test binary and of the tests running beside this one,
	// are the baseline.
	burst()
	baseline := goleak.IgnoreCurrent()
	for range 3 {
		burst()
		// The moment the dispatches return, no goroutine runs the
		// package's code...
		if stacks := queueGoroutines(); len(stacks) > 0 {
			t.Fatalf("goroutines running the queue package after the dispatches returned:\n%s", strings.Join(stacks, "\n\n"))
		}
	}
	// ... and nothing started since the baseline outlives goleak's grace.
	if err := goleak.Find(baseline); err != nil {
		t.Fatalf("goroutines left by dispatches: %v", err)
	}
}

// queueGoroutines returns the stacks of the goroutines other than the
// caller's that run code of package queue (its tests' excluded).
func queueGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // the caller's
		}
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "github.com/fleet-go/fleet/queue.") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
