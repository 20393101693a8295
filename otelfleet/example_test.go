package otelfleet_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/examplekit"
	"github.com/fleet-go/fleet/otelfleet"
	"github.com/fleet-go/fleet/queue"
)

// An app traces its jobs with the two middlewares: dispatch middleware on
// its Client, work middleware on its Registry. They use the global tracer
// provider and propagator unless given others. Here one job goes through
// both, and the exporter receives its two spans.
func Example_setup() {
	pool, drop := examplekit.Pool() // the app's pool
	defer drop()
	ctx := context.Background()
	defer otel.SetTextMapPropagator(otel.GetTextMapPropagator())
	defer otel.SetTracerProvider(otel.GetTracerProvider())

	exporter := tracetest.NewInMemoryExporter() // in an app: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	client := queue.NewClient(pool, queue.Defaults{})
	client.Use(otelfleet.DispatchMiddleware())

	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware())

	jobs.Handle("mail.send", func(context.Context, *queue.Job) error { return nil })
	if _, err := client.Dispatch(ctx, queue.NewJob("mail.send", nil).OnQueue("mail")); err != nil {
		log.Fatal(err)
	}
	fleettest.WorkOne(ctx, examplekit.NewT(), pool, jobs, "mail")
	if err := tp.ForceFlush(ctx); err != nil { // exports what the batcher holds
		log.Fatal(err)
	}
	for _, s := range exporter.GetSpans() {
		fmt.Println(s.Name, s.SpanKind)
	}
	if err := tp.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// fleet.dispatch mail.send producer
	// fleet.work mail.send consumer
}

// The work span of an attempt is the child of its job's dispatch span:
// the trace context travels in the job's metadata. Here the job goes
// from dispatch to handler without a database.
func Example() {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	dispatch := otelfleet.DispatchMiddleware(otelfleet.WithTracerProvider(tp))
	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware(otelfleet.WithTracerProvider(tp)))
	jobs.Handle("mail.send", func(ctx context.Context, job *queue.Job) error { return nil })

	ctx := context.Background()
	spec := queue.NewJob("mail.send", nil).OnQueue("mail")
	if err := dispatch(ctx, spec); err != nil { // as Client.Dispatch does before the insert
		panic(err)
	}
	// The job as a worker would run it.
	job := &queue.Job{ID: 1, Name: spec.Name, Queue: spec.Queue, Attempt: 1, MaxTries: 3, Metadata: spec.Opts().Metadata}
	if err := jobs.Run(ctx, job); err != nil {
		panic(err)
	}

	spans := recorder.Ended()
	d, w := spans[0], spans[1]
	fmt.Println(d.Name(), "->", w.Name())
	fmt.Println("same trace:", w.SpanContext().TraceID() == d.SpanContext().TraceID())
	fmt.Println("child of the dispatch:", w.Parent().SpanID() == d.SpanContext().SpanID())
	fmt.Println("metadata keys:", otelfleet.JobCarrier{Job: job}.Keys())
	// Output:
	// fleet.dispatch mail.send -> fleet.work mail.send
	// same trace: true
	// child of the dispatch: true
	// metadata keys: [traceparent]
}
