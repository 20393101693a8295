package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// BenchmarkDrain drains 50,000 no-op jobs with one in-process worker at
// concurrency 64, history written: the worker's whole hot path (claim,
// start, run through the registry, outcome writer) without a master. Run
// it with -cpuprofile to see where the worker's own time goes.
func BenchmarkDrain(b *testing.B) {
	const jobs = 50_000
	pool := pgtest.Pool(b)
	st := store.New(pool)
	reg := queue.NewRegistry()
	reg.Handle("n", func(context.Context, *queue.Job) error { return nil })
	for b.Loop() {
		b.StopTimer()
		if _, err := pool.Exec(context.Background(), `INSERT INTO queue_jobs (queue, name) SELECT 'default', 'n' FROM generate_series(1, $1)`, jobs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		w, err := worker.New(st, reg, worker.Config{Queues: []string{"default"}, Concurrency: 64, StopWhenEmpty: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*jobs)/b.Elapsed().Seconds(), "jobs/s")
}
