package otelfleet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/otelfleet"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// The test binary runs as a worker process when envChildURL is set: it
// works the queue "traced" of that database with the work middleware, then
// prints each span it recorded as a line "span {json}" on stdout.
const (
	envChildURL = "OTELFLEET_TEST_CHILD_URL"
	spanLine    = "span "
)

func TestMain(m *testing.M) {
	if u := os.Getenv(envChildURL); u != "" {
		if err := runChild(u, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	fleettest.Main(m)
}

// childSpan is a span as the child prints it.
type childSpan struct {
	Name         string            `json:"name"`
	TraceID      string            `json:"trace_id"`
	SpanID       string            `json:"span_id"`
	ParentSpanID string            `json:"parent_span_id"`
	Remote       bool              `json:"parent_remote"`
	Attributes   map[string]string `json:"attributes"`
	PID          int               `json:"pid"`
}

// runChild is the worker process: a real worker with the work middleware
// on a tracer provider of its own, until its queue is empty.
func runChild(url string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	jobs := queue.NewRegistry()
	jobs.Use(otelfleet.WorkMiddleware(otelfleet.WithTracerProvider(tp)))
	queue.HandleTyped(jobs, func(context.Context, *queue.Job, thumbnail) error { return nil })
	w, err := worker.New(store.New(pool), jobs, worker.Config{Queues: []string{"traced"}, Concurrency: 1,
		StopWhenEmpty: true, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return fmt.Errorf("new worker: %w", err)
	}
	if _, err := w.Run(ctx); err != nil {
		return fmt.Errorf("run worker: %w", err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut tracing down: %w", err)
	}
	for _, s := range rec.Ended() {
		cs := childSpan{Name: s.Name(), TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
			ParentSpanID: s.Parent().SpanID().String(), Remote: s.Parent().IsRemote(), Attributes: map[string]string{}, PID: os.Getpid()}
		for _, kv := range s.Attributes() {
			cs.Attributes[string(kv.Key)] = kv.Value.String()
		}
		b, err := json.Marshal(cs)
		if err != nil {
			return fmt.Errorf("encode span: %w", err)
		}
		if _, err := fmt.Fprintf(out, "%s%s\n", spanLine, b); err != nil {
			return fmt.Errorf("write span: %w", err)
		}
	}
	return nil
}

// TestTraceCrossesProcesses: a job dispatched in this process is worked by
// a worker in a child process (the test binary run again), whose work span
// is in the dispatch span's trace with the dispatch span as its parent.
func TestTraceCrossesProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := newTracing(t)
	url := fleettest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client := queue.NewClient(pool, queue.Defaults{})
	client.Use(otelfleet.DispatchMiddleware(otelfleet.WithTracerProvider(tr.tp)))
	idRes, err := client.Dispatch(ctx, queue.NewTypedJob(thumbnail{Path: "far.png"}).OnQueue("traced"))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	dispatch := tr.spans("fleet.dispatch image.thumbnail")
	if len(dispatch) != 1 {
		t.Fatalf("%d dispatch spans", len(dispatch))
	}
	d := dispatch[0].SpanContext()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildURL+"="+url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstderr:\n%s", err, stderr.String())
	}
	var spans []childSpan
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), spanLine); ok {
			var s childSpan
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				t.Fatalf("child span %q: %v", line, err)
			}
			spans = append(spans, s)
		}
	}
	if len(spans) != 1 {
		t.Fatalf("the child recorded %d spans, want 1; stdout:\n%s\nstderr:\n%s", len(spans), stdout.String(), stderr.String())
	}
	s := spans[0]
	if s.PID == os.Getpid() {
		t.Fatal("the child span was recorded by this process")
	}
	if s.Name != "fleet.work image.thumbnail" || s.TraceID != d.TraceID().String() || s.ParentSpanID != d.SpanID().String() || !s.Remote {
		t.Errorf("child span %+v; want fleet.work image.thumbnail in trace %s under remote parent %s", s, d.TraceID(), d.SpanID())
	}
	if s.Attributes["fleet.job.id"] != fmt.Sprint(id) || s.Attributes["fleet.queue"] != "traced" {
		t.Errorf("child span attributes %v", s.Attributes)
	}
	fleettest.RequireNotDispatched(t, pool, "image.thumbnail")
}
