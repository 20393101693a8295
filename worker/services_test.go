package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// wantOrder is the documented order of a worker's services (package doc,
// docs/internals.md): started in this order, stopped in the reverse.
var wantOrder = []string{"writer", "runners", "cancel poller", "listener", "vacuum", "claimer"}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestWorker returns a worker of the default queue on a fresh database,
// with cfg's other fields.
func newTestWorker(t *testing.T, st *store.Store, jobs *queue.Registry, cfg Config) *Worker {
	t.Helper()
	if cfg.Queues == nil {
		cfg.Queues = []string{"default"}
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLog()
	}
	w, err := New(st, jobs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func serviceNames(services []lifecycle.Service) []string {
	names := make([]string, len(services))
	for i, s := range services {
		names[i] = s.Name()
	}
	return names
}

func TestWorkerServicesAreInTheDocumentedOrder(t *testing.T) {
	t.Parallel()
	w := newTestWorker(t, store.New(pgtest.Pool(t)), queue.NewRegistry(), Config{})
	if got := serviceNames(w.services); !slices.Equal(got, wantOrder) {
		t.Fatalf("services %v, want %v", got, wantOrder)
	}
	if w.services[len(w.services)-1] != lifecycle.Service(w.claimer) {
		t.Error("the claimer, whose end ends Run, is not the last service")
	}
}

// Run starts every service in order, and once the claimer has ended
// stops them in the reverse: the writer last.
func TestRunStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	w := newTestWorker(t, store.New(pgtest.Pool(t)), queue.NewRegistry(), Config{PollInterval: 20 * time.Millisecond})
	w.sig.lifecycle.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := w.Run(ctx)
		done <- err
	}()
	var got []string
	for range wantOrder {
		got = append(got, w.sig.lifecycle.Wait(t))
	}
	cancel()
	for range wantOrder {
		got = append(got, w.sig.lifecycle.Wait(t))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := lifecycle.Sequence(wantOrder); !slices.Equal(got, want) {
		t.Fatalf("lifecycle\n%v\nwant\n%v", got, want)
	}
	if _, err := w.Run(context.Background()); err == nil {
		t.Error("a second Run did not fail")
	}
}

// A service that fails to start (here the claimer, stopped before Run)
// fails Run, and those started before it are stopped in the reverse.
func TestRunStopsTheStartedWhenOneFailsToStart(t *testing.T) {
	t.Parallel()
	w := newTestWorker(t, store.New(pgtest.Pool(t)), queue.NewRegistry(), Config{})
	w.sig.lifecycle.Init()
	w.claimer.Stop()
	if _, err := w.Run(context.Background()); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Run = %v, want the claimer's ErrStopped", err)
	}
	var got []string
	for range 2*len(wantOrder) - 2 {
		got = append(got, w.sig.lifecycle.Wait(t))
	}
	w.sig.lifecycle.None(t, "a lifecycle event of the claimer")
	if got[len(wantOrder)-1] != "stop vacuum" || got[len(got)-1] != "stop writer" {
		t.Fatalf("lifecycle %v: want the started stopped in reverse from the vacuum to the writer", got)
	}
}

// Each service of a worker started and stopped from several goroutines
// at once, many times (run under -race): every call returns, a Start
// either runs or finds the service stopped, and a Stop after all that
// returns at once. The package's TestMain fails the run if any goroutine
// outlived its service.
func TestServicesStartAndStopConcurrently(t *testing.T) {
	t.Parallel()
	st := store.New(pgtest.Pool(t))
	jobs := queue.NewRegistry()
	for _, name := range wantOrder {
		t.Run(name, func(t *testing.T) {
			for i := range 20 {
				w := newTestWorker(t, st, jobs, Config{PollInterval: 10 * time.Millisecond})
				idx := slices.Index(serviceNames(w.services), name)
				if idx < 0 {
					t.Fatalf("no service %q", name)
				}
				s := w.services[idx]
				var wg sync.WaitGroup
				var startErr error
				switch i % 3 {
				case 0: // Stop before Start: the Start fails
					s.Stop()
					startErr = s.Start(context.Background())
					if !errors.Is(startErr, lifecycle.ErrStopped) {
						t.Fatalf("Start after Stop: %v, want ErrStopped", startErr)
					}
					startErr = nil
				case 1: // Start and Stops race
					wg.Go(func() { startErr = s.Start(context.Background()) })
				default: // Stops race with each other while the service runs
					if startErr = s.Start(context.Background()); startErr != nil {
						t.Fatalf("Start: %v", startErr)
					}
				}
				for range 3 {
					wg.Go(s.Stop)
				}
				wg.Wait()
				if startErr != nil && !errors.Is(startErr, lifecycle.ErrStopped) {
					t.Fatalf("Start: %v", startErr)
				}
				began := time.Now()
				s.Stop()
				// Nothing is left to wait for: a Stop that waited would
				// hang, which this bound catches.
				if took := time.Since(began); took > testwait.Hang {
					t.Errorf("%s: a Stop after Stop took %s", name, took)
				}
				if err := s.Start(context.Background()); err == nil {
					t.Fatal("a Start after Stop succeeded")
				}
			}
		})
	}
}

// The runners run the tasks they are given and hand back each end; their
// Stop waits for every runner but the one in a handler the claimer gave
// up on, which ends once its handler returns.
func TestRunnersStopLeavesOnlyTheHandlersGivenUpOn(t *testing.T) {
	t.Parallel()
	jobs := queue.NewRegistry()
	release := make(chan struct{})
	jobs.Handle("ok", func(context.Context, *queue.Job) error { return nil })
	jobs.Handle("stuck", func(context.Context, *queue.Job) error { <-release; return nil })
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cfg := Config{Concurrency: 3, Now: func() time.Time { return at }}
	r := newRunners(cfg, discardLog(), newExecutor(nil, jobs, cfg, discardLog(), nil))
	r.sig.left.Init()
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.tasks <- task{ctx: ctx, job: store.ClaimedJob{ID: 1, Name: "ok"}}
	if f := <-r.done; f.job.ID != 1 || f.err != nil || !f.ended.Equal(at) {
		t.Fatalf("finished %+v, want job 1 done at the injected clock's %s", f, at)
	}
	r.tasks <- task{ctx: ctx, job: store.ClaimedJob{ID: 2, Name: "stuck"}}
	r.giveUp(1)
	r.Stop()
	if left := r.sig.left.Wait(t); left != 1 {
		t.Fatalf("Stop left %d runners, want the one in the stuck handler", left)
	}
	close(release)
	if f := <-r.done; f.job.ID != 2 {
		t.Fatalf("finished job %d, want the stuck one's late end", f.job.ID)
	}
	<-r.exited // its runner ends
}

// The listener wakes the worker on a dispatch to its queues, and not on
// one to another queue; hands on cancel requests; and when its connection
// is killed reconnects, asks for a reconcile and wakes the worker again.
// When a statement of the worker is refused a connection, it closes its
// own, waits, and comes back the same way.
func TestListenerWakesAndReconnects(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	var wakes, resyncs atomic.Int64
	cancels := make(chan store.CancelNotice, 8)
	refused := make(chan struct{}, 1)
	l := newListener(st, []string{"mine"}, discardLog(), func() { wakes.Add(1) }, func() { resyncs.Add(1) },
		func(n store.CancelNotice) { cancels <- n }, refused)
	l.yieldWait = 100 * time.Millisecond
	l.sig.connected.Init()
	l.sig.lost.Init()
	l.sig.yielded.Init()
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	l.sig.connected.Wait(t)
	if wakes.Load() != 1 || resyncs.Load() != 0 {
		t.Fatalf("after the first connect: %d wakes, %d resyncs; want 1 and 0", wakes.Load(), resyncs.Load())
	}
	client := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	if _, err := client.Dispatch(ctx, queue.NewJob("x", nil).OnQueue("other")); err != nil {
		t.Fatal(err)
	}
	idRes, err := client.Dispatch(ctx, queue.NewJob("x", nil).OnQueue("mine"))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	poll(t, "the wake of the dispatch to its queue", func() bool { return wakes.Load() == 2 })
	claimed, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "mine", Limit: 1, Worker: "w"})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if _, err := st.JobCancel(ctx, []int64{id}, "op"); err != nil {
		t.Fatal(err)
	}
	if n := waitValue(t, cancels); n.ID != id || n.By != "op" {
		t.Fatalf("cancel notice %+v, want job %d by op", n, id)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
	l.sig.lost.Wait(t)
	l.sig.connected.Wait(t)
	// Three wakes: the connect, the dispatch to its queue, the reconnect
	// (a fourth would be the dispatch to another queue).
	if resyncs.Load() != 1 || wakes.Load() != 3 {
		t.Fatalf("after the reconnect: %d resyncs, %d wakes; want 1 and 3", resyncs.Load(), wakes.Load())
	}

	refused <- struct{}{}
	l.sig.yielded.Wait(t)
	poll(t, "the notification session closed", func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	l.sig.connected.Wait(t)
	if resyncs.Load() != 2 || wakes.Load() != 4 {
		t.Fatalf("after coming back: %d resyncs, %d wakes; want 2 and 4", resyncs.Load(), wakes.Load())
	}
}

// The vacuum looks at start, then at a tick only when jobs finished
// since its last look.
func TestVacuumLooksOnlyAfterJobsFinished(t *testing.T) {
	t.Parallel()
	var finished atomic.Int64
	v := newVacuum(store.New(pgtest.Pool(t)), 10*time.Millisecond, discardLog(), time.Now, finished.Load)
	v.sig.round.Init()
	if err := v.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if !v.sig.round.Wait(t) {
		t.Fatal("no look at start")
	}
	for range 3 {
		if v.sig.round.Wait(t) {
			t.Fatal("a look with nothing finished since the last")
		}
	}
	finished.Add(5)
	for v.sig.round.Wait(t) != true {
	}
	if v.sig.round.Wait(t) {
		t.Fatal("a second look for the same finished jobs")
	}
}

// The cancel poller finds the cancel requests among the ids it is asked
// about and hands them on; a failed poll is signalled and the poller
// goes on.
func TestCancelPollerFindsRequests(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})
	var ids []int64
	for range 3 {
		idRes, err := client.Dispatch(ctx, queue.NewJob("x", nil))
		if err != nil {
			t.Fatal(err)
		}
		id := idRes.ID
		ids = append(ids, id)
	}
	if _, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 3, Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.JobCancel(ctx, ids[1:2], "op"); err != nil {
		t.Fatal(err)
	}
	found := make(chan store.CancelNotice, 8)
	p := newCancelPoller(st, discardLog(), found)
	p.sig.round.Init()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	p.ask(ids)
	if n := p.sig.round.Wait(t); n != 1 {
		t.Fatalf("the poll found %d requests, want 1", n)
	}
	if n := waitValue(t, found); n.ID != ids[1] {
		t.Fatalf("handed on job %d, want %d", n.ID, ids[1])
	}
	p.ask(ids[:1])
	if n := p.sig.round.Wait(t); n != 0 {
		t.Fatalf("the poll of an uncancelled job found %d requests", n)
	}
}

// A worker fenced out (its master's row not live) stops once its clock
// says MasterTTL has passed since it first found the row gone.
func TestFencedByTheInjectedClock(t *testing.T) {
	t.Parallel()
	clock := testwait.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	w := newTestWorker(t, store.New(pgtest.Pool(t)), queue.NewRegistry(), Config{
		Master: "gone", MasterTTL: time.Hour, PollInterval: 10 * time.Millisecond, Now: clock.Now})
	w.claimer.sig.stopping.Init()
	w.claimer.sig.polled.Init()
	done := make(chan Result, 1)
	go func() {
		res, err := w.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	w.claimer.sig.polled.WaitFresh(t, 3)
	w.claimer.sig.stopping.None(t, "stopped before its clock moved")
	clock.Advance(time.Hour)
	if reason := w.claimer.sig.stopping.Wait(t); reason != spawner.ExitFenced {
		t.Fatalf("stopping for %q, want %q", reason, spawner.ExitFenced)
	}
	if res := <-done; res.Reason != spawner.ExitFenced {
		t.Fatalf("exit %q, want %q", res.Reason, spawner.ExitFenced)
	}
}

// poll waits until cond holds, for at most 15 s. It is the package's one
// polling helper, for what no signal says (rows written, counts); what a
// service does is waited for on its test signals.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 15*time.Second, what, cond)
}

// waitValue receives from ch, failing the test after 15 s.
func waitValue[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatal("nothing received within 15 s")
		panic("unreachable")
	}
}
