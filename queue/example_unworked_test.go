package queue_test

import (
	"context"
	"log"
	"log/slog"

	"github.com/fleet-go/fleet/queue"
)

// A warning for jobs dispatched to a queue that no live master works: the
// jobs are kept, and wait until a master that works the queue starts.
// (This example needs a database: it is compiled, not run.)
func ExampleClient_OnUnworked() {
	ctx := context.Background()
	pool := connect(ctx)
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{})

	client.OnUnworked(func(ctx context.Context, q string) {
		slog.WarnContext(ctx, "dispatched to a queue no master works", "queue", q)
	})

	if _, err := client.Dispatch(ctx, queue.NewJob("export.run", nil).OnQueue("exports")); err != nil {
		log.Fatal(err)
	}
}
