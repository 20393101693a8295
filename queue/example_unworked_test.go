package queue_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/queue"
)

// A warning for jobs dispatched to a queue that no live master works: the
// jobs are kept, and wait until a master that works the queue starts.
func ExampleClient_OnUnworked() {
	pool, drop := examplekit.Pool()
	defer drop()
	ctx := context.Background()
	// A live master whose one supervisor works default and mail, as
	// `app fleet` reports itself.
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at)
		VALUES ('i1', 'web-1', 'web-1', 1, 'running', '{"supervisors":[{"name":"web","queues":["default","mail"]}]}',
		        now() + interval '1 minute')`); err != nil {
		log.Fatal(err)
	}
	// The app's logger; here on stdout, without the time.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	client := queue.NewClient(pool, queue.Defaults{})

	client.OnUnworked(func(ctx context.Context, q string) {
		logger.WarnContext(ctx, "dispatched to a queue no master works", "queue", q)
	})

	for _, q := range []string{"mail", "exprots"} {
		if _, err := client.Dispatch(ctx, queue.NewJob("export.run", nil).OnQueue(q)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("both jobs kept")
	// Output:
	// level=WARN msg="dispatched to a queue no master works" queue=exprots
	// both jobs kept
}
