package fleettest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/queue"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

// failing records what a kit function said when it failed the test: a
// testing.TB whose Fatalf stops the function (as the real one does) without
// failing the test running it.
type failing struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *failing) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

func (f *failing) Fatal(args ...any) { f.msg = fmt.Sprint(args...); panic(stopped{}) }

// failure runs fn with a failing TB and returns its failure message; ""
// when it did not fail.
func failure(t *testing.T, fn func(tb testing.TB)) (msg string) {
	t.Helper()
	f := &failing{TB: t}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stopped); !ok {
				panic(p)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

type mail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (mail) JobName() string { return "mail.send" }

// TestRequireDispatchedMatches: each criterion narrows the match; args
// compare as JSON values; a miss lists the jobs there are instead.
func TestRequireDispatchedMatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewTypedJob(mail{To: "ann", Subject: "hi"}).OnQueue("mail").Tags("user:1", "welcome").Priority(-5),
		queue.NewJob("report.build", []byte(`{"month": 3, "format": "pdf"}`)).Delay(time.Hour).SetMeta("who", "cron"),
		queue.NewTypedJob(mail{To: "bob"}),
	}); err != nil {
		t.Fatal(err)
	}

	job := fleettest.RequireDispatched(t, pool, "mail.send", fleettest.Args(mail{To: "ann", Subject: "hi"}),
		fleettest.OnQueue("mail"), fleettest.Tags("welcome"), fleettest.Priority(-5))
	var got mail
	if err := job.Decode(&got); err != nil || got != (mail{To: "ann", Subject: "hi"}) || job.State != "pending" {
		t.Errorf("matched %+v (%v), decoded %+v", job, err, got)
	}
	fleettest.RequireDispatchedArgs(t, pool, mail{To: "bob"}, fleettest.OnQueue("default"))
	fleettest.RequireDispatched(t, pool, "report.build", fleettest.Args(json.RawMessage(`{"format":"pdf","month":3.0}`)),
		fleettest.Meta("who", "cron"))
	fleettest.RequireDispatched(t, pool, "report.build", fleettest.Args(map[string]any{"format": "pdf", "month": 3}))
	fleettest.RequireDispatched(t, pool, "report.build", fleettest.ArgsInclude(map[string]any{"month": 3}))
	fleettest.RequireDispatched(t, pool, "mail.send", fleettest.Times(2))
	fleettest.RequireNotDispatched(t, pool, "mail.send", fleettest.Args(mail{To: "carl"}))
	if n := len(fleettest.Dispatched(t, pool, "", fleettest.OnQueue("default"))); n != 2 {
		t.Errorf("Dispatched on default: %d jobs, want 2", n)
	}

	msg := failure(t, func(tb testing.TB) {
		fleettest.RequireDispatched(tb, pool, "mail.send", fleettest.Args(mail{To: "carl"}), fleettest.OnQueue("mail"))
	})
	for _, want := range []string{
		`no job "mail.send" on queue "mail", with args {"to":"carl","subject":""} was dispatched; the jobs that are waiting or running:`,
		"\n\t#1 mail.send queue=mail state=pending priority=-5 tags=[user:1 welcome] args={\"to\": \"ann\", \"subject\": \"hi\"}",
		"\n\t#2 report.build queue=default state=delayed args={\"month\": 3, \"format\": \"pdf\"}",
		"\n\t#3 mail.send queue=default state=pending args=",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, msg)
		}
	}
	msg = failure(t, func(tb testing.TB) { fleettest.RequireDispatched(tb, pool, "mail.send", fleettest.Times(3)) })
	if !strings.Contains(msg, `want 3 jobs "mail.send", found 2`) {
		t.Errorf("Times failure: %s", msg)
	}
	msg = failure(t, func(tb testing.TB) { fleettest.RequireNotDispatched(tb, pool, "mail.send", fleettest.Tags("user:1")) })
	if !strings.Contains(msg, `want no job "mail.send" tagged [user:1], found 1:`) || strings.Contains(msg, "bob") {
		t.Errorf("RequireNotDispatched failure: %s", msg)
	}
	msg = failure(t, func(tb testing.TB) { fleettest.RequireDispatched(tb, pool, "x", fleettest.Args(func() {})) })
	if !strings.Contains(msg, "encode args to match") {
		t.Errorf("a bad Args: %s", msg)
	}
}

// TestRequireDispatchedTx: the Tx forms see only what the transaction
// dispatched, committed or not by others.
func TestRequireDispatchedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	if _, err := client.Dispatch(ctx, queue.NewTypedJob(mail{To: "outside"})); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := client.DispatchTx(ctx, tx, queue.NewTypedJob(mail{To: "inside"}).Tags("tx")); err != nil {
			return err
		}
		fleettest.RequireDispatchedTx(t, tx, "mail.send", fleettest.Args(mail{To: "inside"}), fleettest.Tags("tx"), fleettest.Times(1))
		fleettest.RequireNotDispatchedTx(t, tx, "mail.send", fleettest.Args(mail{To: "outside"}))
		fleettest.RequireDispatched(t, tx, "mail.send", fleettest.Times(2)) // what tx sees
		fleettest.RequireNotDispatched(t, pool, "mail.send", fleettest.Args(mail{To: "inside"}))
		msg := failure(t, func(tb testing.TB) {
			fleettest.RequireDispatchedTx(tb, tx, "mail.send", fleettest.Args(mail{To: "outside"}))
		})
		if !strings.Contains(msg, "the jobs that the transaction dispatched:") || !strings.Contains(msg, `"to": "inside"`) ||
			strings.Contains(msg, `"to": "outside"`) {
			t.Errorf("Tx failure: %s", msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fleettest.RequireDispatched(t, pool, "mail.send", fleettest.Args(mail{To: "inside"}))
}

// TestWorkOneAndMakeDue: WorkOne runs one attempt and says how it ended;
// a retry waiting out its backoff is not ready until MakeDue.
func TestWorkOneAndMakeDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	jobs := queue.NewRegistry()
	fails := 1
	jobs.Handle("flaky", func(context.Context, *queue.Job) error {
		if fails > 0 {
			fails--
			return errors.New("smtp: try later")
		}
		return nil
	})
	if _, ok := fleettest.WorkOne(ctx, t, pool, jobs, "default"); ok {
		t.Fatal("WorkOne ran a job of an empty queue")
	}
	idRes, err := client.Dispatch(ctx, queue.NewJob("flaky", nil).Tries(3).Backoff(3600))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	e, ok := fleettest.WorkOne(ctx, t, pool, jobs, "default")
	if !ok || e.JobID != id || e.Kind != queue.EventRetried || e.Attempt != 1 || e.RetryIn != time.Hour || e.Error != "smtp: try later" {
		t.Fatalf("first attempt: %+v, %v", e, ok)
	}
	if _, ok := fleettest.WorkOne(ctx, t, pool, jobs, "default"); ok {
		t.Fatal("WorkOne ran a job waiting out its backoff")
	}
	if job := fleettest.RequireDispatched(t, pool, "flaky"); job.State != "delayed" || job.LastError != "smtp: try later" {
		t.Errorf("the retried job: %+v", job)
	}
	if n := fleettest.MakeDue(t, pool, "other"); n != 0 {
		t.Errorf("MakeDue of another queue changed %d jobs", n)
	}
	if n := fleettest.MakeDue(t, pool); n != 1 {
		t.Errorf("MakeDue changed %d jobs, want 1", n)
	}
	e, ok = fleettest.WorkOne(ctx, t, pool, jobs, "default")
	if !ok || e.Kind != queue.EventCompleted || e.Attempt != 2 {
		t.Fatalf("second attempt: %+v, %v", e, ok)
	}
	fleettest.RequireNotDispatched(t, pool, "flaky")
}

// TestDrainCounts: Drain runs every ready job, retries due at once
// included, and counts each way an attempt ended.
func TestDrainCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	jobs := queue.NewRegistry()
	jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	jobs.Handle("bad", func(context.Context, *queue.Job) error { return errors.New("no") })
	if _, err := client.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("ok", nil), queue.NewJob("ok", nil).OnQueue("second"),
		queue.NewJob("bad", nil).Tries(2), queue.NewJob("ok", nil).OnQueue("elsewhere"),
		queue.NewJob("ok", nil).Delay(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	c := fleettest.Drain(ctx, t, pool, jobs, "default", "second")
	if c.Completed != 2 || c.Retried != 1 || c.Failed != 1 || c.Attempts() != 4 {
		t.Errorf("counts %+v", c)
	}
	fleettest.RequireDispatched(t, pool, "ok", fleettest.OnQueue("elsewhere"))
	fleettest.RequireDispatched(t, pool, "ok", fleettest.OnQueue("default"), fleettest.Times(1))
	if c := fleettest.Drain(ctx, t, pool, jobs, "default"); c.Attempts() != 0 {
		t.Errorf("a second drain ran %d attempts", c.Attempts())
	}
}

// TestDrainFailsWhenQueuesNeverEmpty: a handler that dispatches itself
// forever fails the test at the context's deadline, listing what is left.
func TestDrainFailsWhenQueuesNeverEmpty(t *testing.T) {
	t.Parallel()
	pool := fleettest.Pool(t)
	client := queue.NewClient(pool, queue.Defaults{})
	jobs := queue.NewRegistry()
	jobs.Handle("again", func(ctx context.Context, _ *queue.Job) error {
		_, err := client.Dispatch(ctx, queue.NewJob("again", nil))
		return err
	})
	if _, err := client.Dispatch(context.Background(), queue.NewJob("again", nil)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	msg := failure(t, func(tb testing.TB) { fleettest.Drain(ctx, tb, pool, jobs, "default") })
	if !strings.Contains(msg, "queues [default] not drained: the worker stopped (stopped)") || !strings.Contains(msg, " again queue=default") {
		t.Errorf("failure: %s", msg)
	}
}
