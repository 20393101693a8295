package queue

import (
	"context"
	"testing"
)

// TestNoDispatchMiddlewareCostsNoAllocation: without middleware, passing a
// batch through intercept allocates nothing, and checking it allocates no
// more than it did before dispatch middleware existed (the params slice).
func TestNoDispatchMiddlewareCostsNoAllocation(t *testing.T) {
	c := &Client{defaults: Defaults{Queue: DefaultQueue}}
	jobs := benchJobs()
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { _, _ = c.intercept(ctx, jobs) }); n != 0 {
		t.Fatalf("intercept without middleware allocates %v times per batch", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = c.paramsOf(ctx, jobs) }); n != 1 {
		t.Fatalf("paramsOf without middleware allocates %v times per batch, want 1 (its result)", n)
	}
}

func benchJobs() []*JobSpec {
	jobs := make([]*JobSpec, 100)
	for i := range jobs {
		jobs[i] = NewJob("mail.send", []byte(`{"to":"a@example.com"}`))
	}
	return jobs
}

// BenchmarkParamsOf measures what a dispatch does for its jobs before the
// insert, without middleware and with one that does nothing.
func BenchmarkParamsOf(b *testing.B) {
	ctx := context.Background()
	b.Run("none", func(b *testing.B) {
		c := &Client{defaults: Defaults{Queue: DefaultQueue}}
		jobs := benchJobs()
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = c.paramsOf(ctx, jobs)
		}
	})
	b.Run("one", func(b *testing.B) {
		c := &Client{defaults: Defaults{Queue: DefaultQueue}}
		c.Use(func(context.Context, *JobSpec) error { return nil })
		jobs := benchJobs()
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = c.paramsOf(ctx, jobs)
		}
	})
}
