package otelfleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/otelfleet"
	"github.com/fleet-go/fleet/queue"
)

// tracing is a tracer provider recording every span in memory.
type tracing struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newTracing(t *testing.T) tracing {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing{rec: rec, tp: tp}
}

// spans returns the ended spans named name, in the order they ended.
func (tr tracing) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs is a span's attributes by key, as strings.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

type thumbnail struct {
	Path string `json:"path"`
}

func (thumbnail) JobName() string { return "image.thumbnail" }

// TestWorkSpanIsChildOfDispatchSpan: a job dispatched through a real
// Client under a request's span gets a producer span, child of the
// request; each attempt a real worker runs gets a consumer span, child of
// the dispatch span in the same trace, whose context the handler sees; a
// failed attempt's span records the error, redacted, and has status Error.
// The propagator is the default, the global no-op one, so the W3C
// fallback carries the context.
func TestWorkSpanIsChildOfDispatchSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := newTracing(t)
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	client.Use(otelfleet.DispatchMiddleware(otelfleet.WithTracerProvider(tr.tp)))
	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware(otelfleet.WithTracerProvider(tr.tp)))
	var mu sync.Mutex
	var seen []trace.SpanContext
	queue.HandleTyped(jobs, func(ctx context.Context, job *queue.Job, _ thumbnail) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, trace.SpanContextFromContext(ctx))
		if job.Attempt == 1 {
			return errors.New("resize failed: password=hunter2")
		}
		return nil
	})

	reqCtx, req := tr.tp.Tracer("test").Start(ctx, "request")
	idRes, err := client.Dispatch(reqCtx, queue.NewTypedJob(thumbnail{Path: "a.png"}).OnQueue("images").Tags("tenant:7").Tries(2))
	id := idRes.ID
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	job := fleettest.RequireDispatched(t, pool, "image.thumbnail")
	if !strings.Contains(string(job.Metadata), `"traceparent": "00-`) {
		t.Errorf("the job's metadata carries no traceparent: %s", job.Metadata)
	}
	counts := fleettest.Drain(ctx, t, pool, jobs, "images")
	if counts.Retried != 1 || counts.Completed != 1 {
		t.Fatalf("drain: %+v", counts)
	}

	dispatch := tr.spans("fleet.dispatch image.thumbnail")
	if len(dispatch) != 1 {
		t.Fatalf("%d dispatch spans", len(dispatch))
	}
	d := dispatch[0]
	if d.SpanKind() != trace.SpanKindProducer || d.Parent().SpanID() != req.SpanContext().SpanID() ||
		d.SpanContext().TraceID() != req.SpanContext().TraceID() {
		t.Errorf("dispatch span: kind %s, parent %s, trace %s; the request is %s in %s", d.SpanKind(),
			d.Parent().SpanID(), d.SpanContext().TraceID(), req.SpanContext().SpanID(), req.SpanContext().TraceID())
	}
	for k, v := range map[string]string{"messaging.system": "fleet", "messaging.operation.type": "send",
		"messaging.destination.name": "images", "fleet.queue": "images", "fleet.job.name": "image.thumbnail",
		"fleet.job.tags": `["tenant:7"]`} {
		if got := attrs(d)[k]; got != v {
			t.Errorf("dispatch span attribute %s = %q, want %q", k, got, v)
		}
	}

	work := tr.spans("fleet.work image.thumbnail")
	if len(work) != 2 {
		t.Fatalf("%d work spans, want one per attempt", len(work))
	}
	for i, w := range work {
		if w.SpanKind() != trace.SpanKindConsumer || w.Parent().SpanID() != d.SpanContext().SpanID() ||
			w.SpanContext().TraceID() != d.SpanContext().TraceID() || !w.Parent().IsRemote() {
			t.Errorf("work span %d: kind %s, parent %s (remote %v), trace %s; want a consumer child of %s in %s",
				i, w.SpanKind(), w.Parent().SpanID(), w.Parent().IsRemote(), w.SpanContext().TraceID(), d.SpanContext().SpanID(), d.SpanContext().TraceID())
		}
		want := map[string]string{"messaging.system": "fleet", "messaging.operation.type": "process",
			"messaging.destination.name": "images", "messaging.message.id": fmt.Sprint(id),
			"fleet.job.id": fmt.Sprint(id), "fleet.job.attempt": fmt.Sprint(i + 1), "fleet.job.max_tries": "2",
			"fleet.queue": "images", "fleet.job.name": "image.thumbnail"}
		for k, v := range want {
			if got := attrs(w)[k]; got != v {
				t.Errorf("work span %d attribute %s = %q, want %q", i, k, got, v)
			}
		}
		if !slices.ContainsFunc(seen, func(sc trace.SpanContext) bool { return sc.SpanID() == w.SpanContext().SpanID() }) {
			t.Errorf("no handler ran in work span %d's context", i)
		}
	}
	failed, ok := work[0], work[1]
	if st := failed.Status(); st.Code != codes.Error || st.Description != "resize failed: password=[redacted]" {
		t.Errorf("failed attempt's status %+v", st)
	}
	if ev := failed.Events(); len(ev) != 1 || ev[0].Name != "exception" ||
		!slices.Contains(ev[0].Attributes, attribute.String("exception.message", "resize failed: password=[redacted]")) ||
		!slices.Contains(ev[0].Attributes, attribute.String("exception.type", "*errors.errorString")) {
		t.Errorf("failed attempt's events %+v", ev)
	}
	if st := ok.Status(); st.Code != codes.Unset || len(ok.Events()) != 0 {
		t.Errorf("completed attempt's status %+v, events %+v", st, ok.Events())
	}
}

// TestPropagatorOption: a propagator given carries what it carries
// (baggage here, beside the trace context) from dispatch to handler.
func TestPropagatorOption(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	dispatch := otelfleet.DispatchMiddleware(otelfleet.WithTracerProvider(tr.tp), otelfleet.WithPropagator(prop))
	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware(otelfleet.WithTracerProvider(tr.tp), otelfleet.WithPropagator(prop)))
	var tenant string
	jobs.Handle("report", func(ctx context.Context, _ *queue.Job) error {
		tenant = baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	})
	member, _ := baggage.NewMember("tenant", "42")
	bag, _ := baggage.New(member)
	spec := queue.NewJob("report", nil).SetMeta("mine", "kept")
	if err := dispatch(baggage.ContextWithBaggage(context.Background(), bag), spec); err != nil {
		t.Fatal(err)
	}
	job := &queue.Job{Name: spec.Name, Attempt: 1, Metadata: spec.Opts().Metadata}
	if err := jobs.Run(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if tenant != "42" || job.MetaString("baggage") != "tenant=42" || job.MetaString("mine") != "kept" {
		t.Errorf("tenant %q; metadata %s", tenant, job.Metadata)
	}
	keys := otelfleet.JobCarrier{Job: job}.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"baggage", "mine", "traceparent"}) {
		t.Errorf("carrier keys %v", keys)
	}
}

// TestWorkSpanOfAPanic: a handler's panic ends its span with status Error
// and goes on unwinding: the attempt fails with the panic, as without the
// middleware. A job with no trace context gets a root span.
func TestWorkSpanOfAPanic(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware(otelfleet.WithTracerProvider(tr.tp)))
	jobs.Handle("boom", func(context.Context, *queue.Job) error { panic("kaboom") })
	err := jobs.Run(context.Background(), &queue.Job{Name: "boom", Attempt: 1})
	if err == nil || !strings.HasPrefix(err.Error(), "panic: kaboom") {
		t.Fatalf("Run = %v", err)
	}
	spans := tr.spans("fleet.work boom")
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	if st := spans[0].Status(); st.Code != codes.Error || st.Description != "panic: kaboom" || spans[0].Parent().IsValid() {
		t.Errorf("span status %+v, parent %v", st, spans[0].Parent())
	}
}

// TestDispatchWithoutTracing: with no tracer provider set anywhere (the
// global no-op one), dispatch middleware writes no metadata and the work
// middleware still runs the handler.
func TestDispatchWithoutTracing(t *testing.T) {
	t.Parallel()
	spec := queue.NewJob("quiet", nil)
	if err := otelfleet.DispatchMiddleware()(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if m := spec.Opts().Metadata; m != nil {
		t.Errorf("metadata %s with tracing off", m)
	}
	job := &queue.Job{Name: spec.Name, Attempt: 1}
	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware())
	ran := false
	jobs.Handle("quiet", func(context.Context, *queue.Job) error { ran = true; return nil })
	if err := jobs.Run(context.Background(), job); err != nil || !ran {
		t.Errorf("Run = %v, ran %v", err, ran)
	}
}
