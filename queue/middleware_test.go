package queue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// trace is work middleware that notes when it is entered and left.
func trace(name string, log *[]string) queue.WorkMiddleware {
	return func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, job *queue.Job) error {
			*log = append(*log, name+" in")
			err := next(ctx, job)
			*log = append(*log, name+" out")
			return err
		}
	}
}

func TestWorkMiddlewareWrapsEveryHandlerOutermostFirst(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	var log []string
	r.Handle("before", func(context.Context, *queue.Job) error { log = append(log, "before"); return nil })
	r.Use(trace("a", &log), trace("b", &log))
	r.Use(trace("c", &log))
	r.Handle("after", func(context.Context, *queue.Job) error { log = append(log, "after"); return nil })
	for _, name := range []string{"before", "after"} {
		log = nil
		if err := r.Run(context.Background(), &queue.Job{Name: name}); err != nil {
			t.Fatal(err)
		}
		want := "a in,b in,c in," + name + ",c out,b out,a out"
		if got := strings.Join(log, ","); got != want {
			t.Errorf("%s ran %s, want %s", name, got, want)
		}
	}
}

func TestPanicInWorkMiddlewareIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	r.Use(func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(context.Context, *queue.Job) error { panic("middleware boom") }
	})
	r.Handle("x", func(context.Context, *queue.Job) error { return nil })
	var hooked error
	r.OnError(func(_ context.Context, _ *queue.Job, err error) { hooked = err })
	err := r.Run(context.Background(), &queue.Job{Name: "x"})
	if err == nil || !strings.HasPrefix(err.Error(), "panic: middleware boom") || !strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("error %v, want the panic's value and stack", err)
	}
	if hooked != err {
		t.Fatalf("error hook got %v, want the panic's error", hooked)
	}
}

func TestErrorHookSeesEveryFailedAttemptOnce(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	boom := errors.New("boom")
	r.Handle("fails", func(context.Context, *queue.Job) error { return boom })
	r.Handle("panics", func(context.Context, *queue.Job) error { panic("oops") })
	r.Handle("works", func(context.Context, *queue.Job) error { return nil })
	queue.HandleTyped(r, func(context.Context, *queue.Job, resize) error { return nil })
	var seen []string
	r.OnError(func(_ context.Context, job *queue.Job, err error) { seen = append(seen, job.Name+": "+firstLine(err)) })
	r.OnError(func(_ context.Context, job *queue.Job, _ error) { seen = append(seen, "second hook: "+job.Name) })
	ctx := context.Background()
	for _, j := range []*queue.Job{
		{Name: "fails"}, {Name: "panics"}, {Name: "works"}, {Name: "missing"},
		{ID: 3, Name: "image.resize", Payload: json.RawMessage(`{"width":"x"}`)},
	} {
		err := r.Run(ctx, j)
		if j.Name == "fails" && !errors.Is(err, boom) {
			t.Errorf("Run returned %v, want the handler's error", err)
		}
	}
	want := []string{
		"fails: boom", "second hook: fails",
		"panics: panic: oops", "second hook: panics",
		`missing: no handler registered for "missing"`, "second hook: missing",
		`image.resize: decode args of job 3 (image.resize) into queue_test.resize: field "width": JSON string does not fit Go type int`,
		"second hook: image.resize",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("hooks saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

func TestPanickingErrorHookLeavesTheError(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	boom := errors.New("boom")
	r.Handle("fails", func(context.Context, *queue.Job) error { return boom })
	r.OnError(func(context.Context, *queue.Job, error) { panic("a broken hook") }) // recovered and logged
	called := false
	r.OnError(func(context.Context, *queue.Job, error) { called = true })
	if err := r.Run(context.Background(), &queue.Job{Name: "fails"}); err != boom {
		t.Fatalf("Run returned %v, want the handler's error as it was", err)
	}
	if !called {
		t.Fatal("the hook after a panicking one was not called")
	}
}

// poolAndDB opens a test database through pgx and database/sql.
func poolAndDB(t *testing.T) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return pool, db
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestDispatchMiddlewareChangesJobs: every dispatch form passes its jobs
// through the middleware, which may move them, change their payload and
// give them options.
func TestDispatchMiddlewareChangesJobs(t *testing.T) {
	t.Parallel()
	pool, db := poolAndDB(t)
	ctx := context.Background()
	c := queue.NewClient(pool, queue.Defaults{})
	var order []string
	c.Use(func(_ context.Context, job *queue.JobSpec) error {
		order = append(order, "first "+job.Name)
		job.OnQueue("moved").Tries(7)
		return nil
	}, func(_ context.Context, job *queue.JobSpec) error {
		order = append(order, "second "+job.Name)
		job.Payload = json.RawMessage(`{"tenant":"acme"}`)
		return nil
	})

	one := queue.NewJob("one", nil)
	if _, err := c.Dispatch(ctx, one); err != nil {
		t.Fatal(err)
	}
	// The middleware changed a copy: the caller's spec is as it was.
	if one.Queue != "" || string(one.Payload) != "{}" || one.Opts().Tries != 0 {
		t.Errorf("the caller's spec changed: queue %q, payload %s, %+v", one.Queue, one.Payload, one.Opts())
	}
	if _, err := c.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("two", nil), queue.NewJob("three", nil)}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DispatchTx(ctx, tx, queue.NewJob("four", nil)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DispatchSQLTx(ctx, stx, queue.NewJob("five", nil)); err != nil {
		t.Fatal(err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, ","),
		"first one,second one,first two,second two,first three,second three,first four,second four,first five,second five"; got != want {
		t.Errorf("middleware ran %s, want %s", got, want)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs
		WHERE queue = 'moved' AND max_tries = 7 AND payload = '{"tenant":"acme"}'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("%d jobs moved, given tries and a payload by the middleware, want 5", n)
	}
}

// TestRefusingDispatchMiddlewareInsertsNothing: a refusal fails the whole
// call, with the middleware's error wrapped, and none of its jobs exists.
func TestRefusingDispatchMiddlewareInsertsNothing(t *testing.T) {
	t.Parallel()
	pool, db := poolAndDB(t)
	ctx := context.Background()
	c := queue.NewClient(pool, queue.Defaults{})
	errNoTenant := errors.New("no tenant")
	c.Use(func(_ context.Context, job *queue.JobSpec) error {
		if job.Name == "refused" {
			return errNoTenant
		}
		return nil
	})
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errNoTenant) || !strings.Contains(err.Error(), `dispatch job "refused": refused by dispatch middleware: no tenant`) {
			t.Errorf("%s: error %v, want the middleware's refusal naming the job", what, err)
		}
	}
	_, err := c.Dispatch(ctx, queue.NewJob("refused", nil))
	check("Dispatch", err)
	_, err = c.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("fine", nil), queue.NewJob("refused", nil)})
	check("DispatchMany", err)
	_, err = c.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("fine", nil).Unique(queue.Unique{Key: "k"}), queue.NewJob("refused", nil)})
	check("DispatchMany with a unique job", err)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DispatchManyTx(ctx, tx, []*queue.JobSpec{queue.NewJob("fine", nil), queue.NewJob("refused", nil)})
	check("DispatchManyTx", err)
	// The transaction is still usable: nothing was sent to it.
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after a refused dispatch: %v", err)
	}
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DispatchManySQLTx(ctx, stx, []*queue.JobSpec{queue.NewJob("fine", nil), queue.NewJob("refused", nil)})
	check("DispatchManySQLTx", err)
	if err := stx.Commit(); err != nil {
		t.Fatalf("commit after a refused dispatch: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d jobs inserted by refused dispatches, want none", n)
	}
}

func TestDispatchMiddlewareMustLeaveValidJSON(t *testing.T) {
	t.Parallel()
	c := queue.NewClient(pgtest.Pool(t), queue.Defaults{})
	c.Use(func(_ context.Context, job *queue.JobSpec) error {
		job.Payload = json.RawMessage(`{"cut":`)
		return nil
	})
	_, err := c.Dispatch(context.Background(), queue.NewJob("x", nil))
	if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), "as dispatch middleware set it, is not valid JSON") {
		t.Fatalf("error %v, want an invalid job blaming the middleware's payload", err)
	}
}

// A snooze or a cancel is not a failure: no error hook hears of it.
func TestErrorHooksSkipSnoozeAndCancel(t *testing.T) {
	t.Parallel()
	r := queue.NewRegistry()
	var heard []string
	r.OnError(func(_ context.Context, _ *queue.Job, err error) { heard = append(heard, err.Error()) })
	r.Handle("snooze", func(context.Context, *queue.Job) error { return queue.Snooze(time.Second) })
	r.Handle("cancel", func(context.Context, *queue.Job) error { return queue.Cancel(nil) })
	r.Handle("outside", func(ctx context.Context, _ *queue.Job) error { return ctx.Err() })
	r.Handle("fail", func(context.Context, *queue.Job) error { return errors.New("boom") })
	for _, name := range []string{"snooze", "cancel", "fail"} {
		_ = r.Run(context.Background(), &queue.Job{Name: name})
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(queue.ErrCancelled)
	_ = r.Run(ctx, &queue.Job{Name: "outside"})
	if len(heard) != 1 || heard[0] != "boom" {
		t.Errorf("hooks heard %q, want only boom", heard)
	}
}
