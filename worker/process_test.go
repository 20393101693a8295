package worker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// errAway stands for a database that does not answer.
var errAway = errors.New("the server does not answer")

func isAway(err error) bool { return errors.Is(err, errAway) }

// processRig is a Process under a master, its commands on a pipe, its
// logs and reports kept.
type processRig struct {
	proc     *worker.Process
	commands *io.PipeWriter
	logs     *syncbuf.Buffer

	mu      sync.Mutex
	reports []spawner.Report
}

func newProcessRig(t *testing.T, cfg worker.Config) *processRig {
	t.Helper()
	r := &processRig{logs: new(syncbuf.Buffer)}
	cfg.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	cfg.Reports = func(rep spawner.Report) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reports = append(r.reports, rep)
	}
	in, out := io.Pipe()
	t.Cleanup(func() { out.Close() })
	r.commands = out
	r.proc = worker.NewProcess(worker.ProcessConfig{Worker: cfg, Commands: in})
	return r
}

func (r *processRig) send(t *testing.T, c spawner.Command) {
	t.Helper()
	if _, err := r.commands.Write(spawner.FormatCommand(c)); err != nil {
		t.Fatal(err)
	}
}

// sync returns once every command sent before has been applied: the
// reader takes lines in order, and warns of the first malformed one.
func (r *processRig) sync(t *testing.T) {
	t.Helper()
	if _, err := r.commands.Write([]byte("not a command\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the malformed line's warning", func() bool { return strings.Contains(r.logs.String(), "ignoring a malformed line") })
}

func (r *processRig) waitingReports() []spawner.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []spawner.Report
	for _, rep := range r.reports {
		if rep.Type == spawner.ReportWaiting {
			out = append(out, rep)
		}
	}
	return out
}

// A worker run by hand does not wait for its database: nobody would count
// its exit as a crash.
func TestProcessRunByHandReturnsTheConnectError(t *testing.T) {
	t.Parallel()
	proc := worker.NewProcess(worker.ProcessConfig{Worker: worker.Config{Logger: slog.New(slog.DiscardHandler)}})
	tries := 0
	ok, err := proc.Connect(context.Background(), func(context.Context) error { tries++; return errAway }, isAway)
	if ok || !errors.Is(err, errAway) || tries != 1 {
		t.Fatalf("Connect = %v, %v after %d tries; want the error after one", ok, err, tries)
	}
}

// Under a master, a database that does not answer is waited for, and the
// master told why; any other error ends the wait.
func TestProcessWaitsForTheDatabaseUnderAMaster(t *testing.T) {
	t.Parallel()
	r := newProcessRig(t, worker.Config{Master: "m"})
	tries := 0
	ok, err := r.proc.Connect(context.Background(), func(context.Context) error {
		tries++
		if tries < 3 {
			return errAway
		}
		return nil
	}, isAway)
	if !ok || err != nil || tries != 3 {
		t.Fatalf("Connect = %v, %v after %d tries; want success at the third", ok, err, tries)
	}
	if w := r.waitingReports(); len(w) != 2 || w[0].Waiting != errAway.Error() || w[0].PID == 0 {
		t.Errorf("waiting reports %+v, want one per failed try saying why", w)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "cannot connect to the database at start; waiting for it") ||
		!strings.Contains(logs, "the database is reachable: starting") || !strings.Contains(logs, "tries=3") {
		t.Errorf("logs:\n%s", logs)
	}

	r = newProcessRig(t, worker.Config{Master: "m"})
	refused := errors.New("password authentication failed")
	tries = 0
	ok, err = r.proc.Connect(context.Background(), func(context.Context) error {
		tries++
		if tries < 2 {
			return errAway
		}
		return refused
	}, isAway)
	if ok || !errors.Is(err, refused) {
		t.Fatalf("Connect = %v, %v; want the error that is not an outage", ok, err)
	}
}

// A stop from the master, stdin's end, or the context's ends the wait at
// once: Connect returns false and no error.
func TestProcessStopEndsTheWaitForTheDatabase(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"stop", "eof", "context"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			r := newProcessRig(t, worker.Config{Master: "m"})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				ok  bool
				err error
			}
			done := make(chan result, 1)
			go func() {
				ok, err := r.proc.Connect(ctx, func(context.Context) error { return errAway }, isAway)
				done <- result{ok, err}
			}()
			waitFor(t, "the first waiting report", func() bool { return len(r.waitingReports()) > 0 })
			switch how {
			case "stop":
				r.send(t, spawner.Command{Type: spawner.CommandStop})
			case "eof":
				r.commands.Close()
			case "context":
				cancel()
			}
			select {
			case res := <-done:
				if res.ok || res.err != nil {
					t.Fatalf("Connect = %v, %v; want false and no error", res.ok, res.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not end")
			}
			if how == "eof" && !strings.Contains(r.logs.String(), "master closed stdin: stopping") {
				t.Errorf("logs:\n%s", r.logs.String())
			}
		})
	}
}

// Commands that arrive before the worker exists are applied when it
// starts, and later ones as they come: paused, it claims nothing until
// told to continue.
func TestProcessAppliesTheMastersCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.member(t, "m-proc")
	var ran atomic.Int64
	b.jobs.Handle("count", func(context.Context, *queue.Job) error { ran.Add(1); return nil })
	b.dispatch(t, queue.NewJob("count", nil))
	r := newProcessRig(t, worker.Config{Queues: []string{"default"}, Master: "m-proc", PollInterval: 20 * time.Millisecond})
	r.send(t, spawner.Command{Type: spawner.CommandPause})
	r.sync(t)
	type result struct {
		res worker.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := r.proc.Run(context.Background(), b.st, b.jobs)
		done <- result{res, err}
	}()
	time.Sleep(300 * time.Millisecond) // many polls
	if n := ran.Load(); n != 0 {
		t.Fatalf("a worker paused before it started ran %d jobs", n)
	}
	r.send(t, spawner.Command{Type: spawner.CommandContinue})
	waitFor(t, "the job after continue", func() bool { return ran.Load() == 1 })
	r.commands.Close() // the master is gone: stop
	select {
	case got := <-done:
		if got.err != nil || got.res.Reason != spawner.ExitStopped || got.res.Jobs != 1 {
			t.Fatalf("Run = %+v, %v; want stopped after one job", got.res, got.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the end of stdin did not stop the worker")
	}
}

// A stop received before the worker exists stops it as it starts.
func TestProcessStopBeforeRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.member(t, "m-early")
	r := newProcessRig(t, worker.Config{Queues: []string{"default"}, Master: "m-early"})
	r.send(t, spawner.Command{Type: spawner.CommandStop})
	r.sync(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.proc.Run(ctx, b.st, b.jobs)
	if err != nil || res.Reason != spawner.ExitStopped || ctx.Err() != nil {
		t.Fatalf("Run = %+v, %v (context %v); want stopped at once", res, err, ctx.Err())
	}
}

// A worker run by hand keeps a membership row of its own while it runs,
// hangs its leases on it, and removes it at the end.
func TestProcessRunByHandKeepsItsOwnMembershipRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type seen struct {
		rows     int
		instance string
		held     string
	}
	var got seen
	b.jobs.Handle("look", func(ctx context.Context, j *queue.Job) error {
		err := b.pool.QueryRow(ctx, `SELECT count(*), min(instance) FROM fleet_masters WHERE kind = $1 AND name = $2`,
			store.KindWorker, "hand-1").Scan(&got.rows, &got.instance)
		if err != nil {
			return err
		}
		return b.pool.QueryRow(ctx, `SELECT reserved_master FROM queue_jobs WHERE id = $1`, j.ID).Scan(&got.held)
	})
	ids := b.dispatch(t, queue.NewJob("look", nil))
	proc := worker.NewProcess(worker.ProcessConfig{
		Worker: worker.Config{
			Queues: []string{"default"}, Name: "hand-1", StopWhenEmpty: true, PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		},
		Version:   "test",
		MemberTTL: 4 * time.Second,
	})
	res, err := proc.Run(context.Background(), b.st, b.jobs)
	if err != nil || res.Reason != spawner.ExitEmpty || res.Jobs != 1 {
		t.Fatalf("Run = %+v, %v; want empty after one job", res, err)
	}
	if got.rows != 1 || got.instance == "" || got.held != got.instance {
		t.Fatalf("while the job %d ran: %+v; want one row of kind worker, holding the job's lease", ids[0], got)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_masters WHERE name = 'hand-1'`); n != 0 {
		t.Fatalf("%d membership rows left after the run", n)
	}
}
