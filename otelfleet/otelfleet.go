// Package otelfleet traces fleet jobs with OpenTelemetry: a producer span
// for every job dispatched, and a consumer span for every attempt a worker
// runs, the child of its job's dispatch span, in whatever process the
// attempt runs.
//
//	client.Use(otelfleet.DispatchMiddleware())
//	jobs.Use(otelfleet.WorkMiddleware())
//
// DispatchMiddleware starts the span "fleet.dispatch <job name>" in the
// dispatch call's context (so under the request that dispatched) and
// writes its span context into the job's metadata through the propagator:
// with the W3C Trace Context propagator, the metadata keys "traceparent"
// and "tracestate". WorkMiddleware reads them back and starts
// "fleet.work <job name>" as the dispatch span's child, records a failed
// attempt's error on it (redacted as fleet's logs redact it) and sets its
// status to Error. Every attempt of a job is a child of the same dispatch
// span; the fleet.job.attempt attribute tells them apart. A job that
// carries no trace context (dispatched by `app dispatch`, a periodic
// schedule, a retry of a failed job) gets a work span of a trace of its
// own.
//
// Only this package imports OpenTelemetry; fleet's other packages do not
// depend on it.
package otelfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/redact"
)

// ScopeName is the instrumentation scope of the spans: the name the
// tracer is asked for.
const ScopeName = "github.com/fleet-go/fleet/otelfleet"

// The attributes the spans carry beyond OpenTelemetry's messaging ones
// (messaging.system "fleet", messaging.operation.type "send" or
// "process", messaging.operation.name "dispatch" or "work",
// messaging.destination.name the queue, messaging.message.id the job id).
const (
	AttrJobName     = attribute.Key("fleet.job.name")
	AttrQueue       = attribute.Key("fleet.queue")
	AttrJobID       = attribute.Key("fleet.job.id")
	AttrJobAttempt  = attribute.Key("fleet.job.attempt")
	AttrJobMaxTries = attribute.Key("fleet.job.max_tries")
	AttrJobPriority = attribute.Key("fleet.job.priority")
	AttrJobTags     = attribute.Key("fleet.job.tags")
)

// The span names are these prefixes followed by the job's name.
const (
	DispatchSpanPrefix = "fleet.dispatch "
	WorkSpanPrefix     = "fleet.work "
)

// Option configures the middleware.
type Option func(*config)

type config struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	redactor   *redact.Redactor
}

// WithTracerProvider sets the provider the spans come from. The default is
// otel.GetTracerProvider(), the global one (which follows a provider set
// later with otel.SetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.provider = tp }
}

// WithPropagator sets how span contexts travel in job metadata. The
// default is otel.GetTextMapPropagator(), the global one, read at each
// dispatch and each attempt; while the global one is OpenTelemetry's
// default no-op (a program that never called otel.SetTextMapPropagator),
// the W3C Trace Context propagator is used instead, so that traces cross
// from dispatcher to worker out of the box. Dispatchers and workers must
// agree on the propagator.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithRedact sets the field-name fragments whose values are hidden in the
// error text and tags the spans carry, as log.redact does for fleet's
// logs. The default is redact.DefaultFragments.
func WithRedact(fragments []string) Option {
	return func(c *config) { c.redactor = redact.New(fragments) }
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		o(c)
	}
	if c.provider == nil {
		c.provider = otel.GetTracerProvider()
	}
	if c.redactor == nil {
		c.redactor = redact.New(redact.DefaultFragments)
	}
	return c
}

func (c *config) tracer() trace.Tracer { return c.provider.Tracer(ScopeName) }

// propagation is the propagator to use now (see WithPropagator).
func (c *config) propagation() propagation.TextMapPropagator {
	if c.propagator != nil {
		return c.propagator
	}
	if p := otel.GetTextMapPropagator(); len(p.Fields()) > 0 {
		return p
	}
	return propagation.TraceContext{}
}

var systemAttr = attribute.String("messaging.system", "fleet")

// DispatchMiddleware returns dispatch middleware (register it with
// queue.Client.Use) that starts a producer span "fleet.dispatch <job
// name>" for each job and injects its context into the job's metadata.
// The span ends when the middleware returns, before the insert: it marks
// the dispatch and is the parent of the job's work spans, and it does not
// time the insert. A dispatch that then fails, or a transaction that rolls
// back, leaves a dispatch span with no job behind it. The queue attributes
// are set when the job names its queue (OnQueue); a job left to the
// client's default queue has them only on its work spans.
func DispatchMiddleware(opts ...Option) queue.DispatchMiddleware {
	c := newConfig(opts)
	tracer := c.tracer()
	return func(ctx context.Context, job *queue.JobSpec) error {
		attrs := []attribute.KeyValue{
			systemAttr,
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "dispatch"),
			AttrJobName.String(job.Name),
		}
		if job.Queue != "" {
			attrs = append(attrs, attribute.String("messaging.destination.name", job.Queue), AttrQueue.String(job.Queue))
		}
		opts := job.Opts()
		attrs = c.jobAttrs(attrs, opts.Priority, opts.Tags)
		ctx, span := tracer.Start(ctx, DispatchSpanPrefix+job.Name,
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		defer span.End()
		c.propagation().Inject(ctx, SpecCarrier{Spec: job})
		return nil
	}
}

// WorkMiddleware returns work middleware (register it with
// queue.Registry.Use) that starts a consumer span "fleet.work <job name>"
// for each attempt, the child of the span context the job's metadata
// carries, and passes the span's context to the handler. A failed attempt
// (an error, or a panic, which goes on unwinding) is recorded on the span
// as an exception event and sets its status to Error. Register it first,
// so that it is the outermost middleware and its span covers the others.
func WorkMiddleware(opts ...Option) queue.WorkMiddleware {
	c := newConfig(opts)
	tracer := c.tracer()
	return func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, job *queue.Job) (err error) {
			ctx = c.propagation().Extract(ctx, JobCarrier{Job: job})
			attrs := []attribute.KeyValue{
				systemAttr,
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.operation.name", "work"),
				attribute.String("messaging.destination.name", job.Queue),
				attribute.String("messaging.message.id", strconv.FormatInt(job.ID, 10)),
				AttrJobName.String(job.Name),
				AttrQueue.String(job.Queue),
				AttrJobID.Int64(job.ID),
				AttrJobAttempt.Int(job.Attempt),
				AttrJobMaxTries.Int(job.MaxTries),
			}
			attrs = c.jobAttrs(attrs, job.Priority, job.Tags)
			ctx, span := tracer.Start(ctx, WorkSpanPrefix+job.Name,
				trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
			defer func() {
				if p := recover(); p != nil {
					c.fail(span, "panic", fmt.Sprintf("panic: %v", p))
					span.End()
					panic(p)
				}
				if err != nil {
					c.fail(span, fmt.Sprintf("%T", err), err.Error())
				}
				span.End()
			}()
			return next(ctx, job)
		}
	}
}

// jobAttrs adds a job's priority and tags (redacted) to attrs.
func (c *config) jobAttrs(attrs []attribute.KeyValue, priority int, tags []string) []attribute.KeyValue {
	if p := priority; p != 0 {
		attrs = append(attrs, AttrJobPriority.Int(p))
	}
	if len(tags) > 0 {
		attrs = append(attrs, AttrJobTags.StringSlice(c.redactor.Tags(tags)))
	}
	return attrs
}

// fail records a failed attempt on span: an exception event as
// span.RecordError writes it, with the message redacted, and the status.
func (c *config) fail(span trace.Span, typ, msg string) {
	msg = c.redactor.Text(msg)
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String("exception.type", typ),
		attribute.String("exception.message", msg),
	))
	span.SetStatus(codes.Error, msg)
}

// SpecCarrier carries span contexts into the metadata of a job being
// dispatched, one string value per propagator key: a
// propagation.TextMapCarrier over queue.JobSpec.SetMeta, MetaString and
// MetaKeys. DispatchMiddleware injects through it.
type SpecCarrier struct {
	Spec *queue.JobSpec
}

var _ propagation.TextMapCarrier = SpecCarrier{}

// Get returns the metadata value of key; "" when it has none.
func (c SpecCarrier) Get(key string) string { return c.Spec.MetaString(key) }

// Set sets the metadata key to value, keeping the other keys.
func (c SpecCarrier) Set(key, value string) { c.Spec.SetMeta(key, value) }

// Keys lists the spec's metadata keys.
func (c SpecCarrier) Keys() []string { return c.Spec.MetaKeys() }

// JobCarrier reads span contexts from the metadata of a job a handler
// runs (see SpecCarrier); WorkMiddleware extracts through it. A job's
// metadata is what was dispatched, so Set changes only this attempt's
// copy (queue.Job.Metadata), never what is stored.
type JobCarrier struct {
	Job *queue.Job
}

var _ propagation.TextMapCarrier = JobCarrier{}

// Get returns the metadata value of key; "" when it has none.
func (c JobCarrier) Get(key string) string { return c.Job.MetaString(key) }

// Set sets the metadata key to value in this attempt's copy.
func (c JobCarrier) Set(key, value string) {
	m := map[string]json.RawMessage{}
	if len(c.Job.Metadata) > 0 && json.Unmarshal(c.Job.Metadata, &m) != nil {
		return
	}
	b, _ := json.Marshal(value) // a string always encodes
	m[key] = b
	c.Job.Metadata, _ = json.Marshal(m) // a map of raw values always encodes
}

// Keys lists the job's metadata keys, sorted.
func (c JobCarrier) Keys() []string {
	var m map[string]json.RawMessage
	if json.Unmarshal(c.Job.Metadata, &m) != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}
