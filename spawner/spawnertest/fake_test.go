package spawnertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/spawner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ spawner.Spawner = (*FakeSpawner)(nil)

func spec(queue string) spawner.Spec {
	return spawner.Spec{Supervisor: "sup", Queues: []string{queue}, Master: "m", Worker: "w-" + queue, Concurrency: 2}
}

func next(t *testing.T, events <-chan spawner.Event) spawner.Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return spawner.Event{}
	}
}

func TestFakeLifecycle(t *testing.T) {
	t.Parallel()
	f := NewFakeSpawner()
	events := make(chan spawner.Event)
	p, err := f.Spawn(t.Context(), spec("mail"), events)
	if err != nil {
		t.Fatal(err)
	}
	if e := next(t, events); e.Process != p || e.Report == nil || e.Report.Type != spawner.ReportReady ||
		e.Report.PID != p.PID() || e.Report.Worker != "w-mail" || e.Report.V != spawner.ProtocolVersion {
		t.Fatalf("first event = %+v, want ready", e)
	}
	if err := f.WaitSpawned(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if got := f.Running(); !slices.Equal(got, []int{0}) {
		t.Fatalf("Running = %v", got)
	}

	// Report waits until the receiver has taken the event, so it needs one.
	got := make(chan spawner.Event)
	go func() { got <- next(t, events) }()
	if err := p.Send(spawner.Command{Type: spawner.CommandPause}); err != nil {
		t.Fatal(err)
	}
	f.Heartbeat(0, 12, 40.5)
	if e := <-got; e.Report == nil || e.Report.Type != spawner.ReportHeartbeat || e.Report.Jobs != 12 ||
		e.Report.MemoryMB != 40.5 || !e.Report.Paused {
		t.Fatalf("heartbeat event = %+v", e)
	}

	// A stop sent from the receiver's own goroutine must not deadlock.
	if err := p.Send(spawner.Command{Type: spawner.CommandStop}); err != nil {
		t.Fatal(err)
	}
	if e := next(t, events); e.Report == nil || e.Report.Type != spawner.ReportExiting || e.Report.Reason != spawner.ExitStopped || e.Report.Jobs != 12 {
		t.Fatalf("event after stop = %+v, want exiting report", e)
	}
	if e := next(t, events); e.Exit == nil || *e.Exit != (spawner.Exit{Reason: spawner.ExitStopped, Reported: spawner.ExitStopped, Code: 0}) {
		t.Fatalf("event after exiting = %+v, want stopped exit", e)
	}
	if err := f.WaitRunning(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(spawner.Command{Type: spawner.CommandStop}); !errors.Is(err, spawner.ErrExited) {
		t.Fatalf("Send after exit = %v", err)
	}
	wantCmds := []spawner.CommandType{spawner.CommandPause, spawner.CommandStop}
	var cmds []spawner.CommandType
	for _, c := range f.Commands(0) {
		cmds = append(cmds, c.Type)
	}
	if !slices.Equal(cmds, wantCmds) {
		t.Fatalf("Commands = %v, want %v", cmds, wantCmds)
	}
	// Calls on an exited process do nothing and do not block.
	f.Heartbeat(0, 1, 1)
	f.Exit(0, spawner.ExitCrash)
	if err := p.Kill(); err != nil || f.Killed(0) {
		t.Fatalf("Kill after exit = %v, Killed = %v", err, f.Killed(0))
	}
}

func TestFakeIgnoreStopKillAndSkipReady(t *testing.T) {
	t.Parallel()
	f := NewFakeSpawner()
	f.IgnoreStop(true)
	f.SkipReady(true)
	events := make(chan spawner.Event, 10)
	p, err := f.Spawn(t.Context(), spec("mail"), events)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Send(spawner.Command{Type: spawner.CommandStop}); err != nil {
		t.Fatal(err)
	}
	if got := f.Running(); len(got) != 1 {
		t.Fatalf("Running after an ignored stop = %v", got)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if e := next(t, events); e.Exit == nil || *e.Exit != (spawner.Exit{Reason: spawner.ExitCrash, Code: -1}) {
		t.Fatalf("first event = %+v, want the crash exit (no ready)", e)
	}
	if !f.Killed(0) {
		t.Fatal("Killed(0) = false")
	}

	// A killed worker crashed, whatever it reported, as a real one does.
	p, err = f.Spawn(t.Context(), spec("mail"), events)
	if err != nil {
		t.Fatal(err)
	}
	f.Report(1, spawner.Report{Type: spawner.ReportExiting, Reason: spawner.ExitMaxMemory})
	_ = next(t, events)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if e := next(t, events); e.Exit == nil || *e.Exit != (spawner.Exit{Reason: spawner.ExitCrash, Reported: spawner.ExitMaxMemory, Code: -1}) {
		t.Fatalf("exit = %+v", e)
	}
}

// TestFakeExitCode: an exit with a status of the test's choosing counts as
// the reported reason only when the status agrees with it.
func TestFakeExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reported spawner.ExitReason
		code     int
		want     spawner.ExitReason
	}{
		{spawner.ExitMaxJobs, 0, spawner.ExitMaxJobs},
		{spawner.ExitMaxJobs, 3, spawner.ExitCrash},
		{spawner.ExitStopped, spawner.ExitCodeUnsaved, spawner.ExitStopped},
		{spawner.ExitTimeout, spawner.ExitCodeJobTimedOut, spawner.ExitTimeout},
		{"", 0, spawner.ExitStopped},
		{"", 3, spawner.ExitCrash},
	} {
		f := NewFakeSpawner()
		events := make(chan spawner.Event, 10)
		if _, err := f.Spawn(t.Context(), spec("q"), events); err != nil {
			t.Fatal(err)
		}
		_ = next(t, events) // ready
		if tc.reported != "" {
			f.Report(0, spawner.Report{Type: spawner.ReportExiting, Reason: tc.reported})
			_ = next(t, events)
		}
		f.ExitCode(0, tc.code)
		want := spawner.Exit{Reason: tc.want, Reported: tc.reported, Code: tc.code}
		if e := next(t, events); e.Exit == nil || *e.Exit != want {
			t.Errorf("%q then exit %d: event %+v, want %+v", tc.reported, tc.code, e, want)
		}
		f.ExitCode(0, 0) // does nothing once exited
		if len(events) != 0 {
			t.Errorf("ExitCode after the exit sent %+v", <-events)
		}
	}
}

func TestFakeExitReasons(t *testing.T) {
	t.Parallel()
	for reason, code := range map[spawner.ExitReason]int{
		spawner.ExitMaxJobs: 0, spawner.ExitMaxTime: 0, spawner.ExitMaxMemory: 0, spawner.ExitEmpty: 0,
		spawner.ExitStopped: 0, spawner.ExitTimeout: spawner.ExitCodeJobTimedOut, spawner.ExitError: 1, spawner.ExitCrash: 1,
	} {
		f := NewFakeSpawner()
		events := make(chan spawner.Event, 10)
		if _, err := f.Spawn(t.Context(), spec("q"), events); err != nil {
			t.Fatal(err)
		}
		f.Exit(0, reason)
		var got []spawner.Event
		for len(events) > 0 {
			got = append(got, <-events)
		}
		wantEvents := 3 // ready, exiting, exit
		if reason == spawner.ExitCrash {
			wantEvents = 2
		}
		last := got[len(got)-1]
		reported := reason
		if reason == spawner.ExitCrash {
			reported = ""
		}
		if len(got) != wantEvents || last.Exit == nil || *last.Exit != (spawner.Exit{Reason: reason, Reported: reported, Code: code}) {
			t.Errorf("%s: events %+v, last exit %+v", reason, got, last.Exit)
		}
	}
}

func TestFakeFailNextAndWaits(t *testing.T) {
	t.Parallel()
	f := NewFakeSpawner()
	events := make(chan spawner.Event, 10)
	f.FailNext(2)
	for range 2 {
		if _, err := f.Spawn(t.Context(), spec("q"), events); !errors.Is(err, ErrInjected) {
			t.Fatalf("Spawn = %v, want ErrInjected", err)
		}
	}
	if _, err := f.Spawn(t.Context(), spec("q"), events); err != nil {
		t.Fatal(err)
	}
	if f.Attempts() != 3 || len(f.Specs()) != 1 {
		t.Fatalf("Attempts = %d, Specs = %v", f.Attempts(), f.Specs())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := f.WaitSpawned(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitSpawned = %v", err)
	}
	cancelled, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if _, err := f.Spawn(cancelled, spec("q"), events); !errors.Is(err, context.Canceled) {
		t.Fatalf("Spawn with a cancelled context = %v", err)
	}
}

// TestFakeConcurrentMaster drives the fake like a master: one goroutine
// reads events, stops every process that reports ready and respawns while
// fewer than total have been spawned, while the test waits and sends
// heartbeats from other goroutines.
func TestFakeConcurrentMaster(t *testing.T) {
	t.Parallel()
	const total, width = 40, 4
	f := NewFakeSpawner()
	events := make(chan spawner.Event)
	done := make(chan error)
	go func() {
		spawned, exits := 0, 0
		seen := map[spawner.Process][]string{}
		spawn := func() error {
			_, err := f.Spawn(context.Background(), spec("q"), events)
			spawned++
			return err
		}
		for range width {
			if err := spawn(); err != nil {
				done <- err
				return
			}
		}
		for exits < total {
			e := <-events
			if e.Exit != nil {
				seen[e.Process] = append(seen[e.Process], "exit")
				exits++
				if spawned < total {
					if err := spawn(); err != nil {
						done <- err
						return
					}
				}
				continue
			}
			seen[e.Process] = append(seen[e.Process], string(e.Report.Type))
			if e.Report.Type == spawner.ReportReady {
				if err := e.Process.Send(spawner.Command{Type: spawner.CommandStop}); err != nil {
					done <- err
					return
				}
			}
		}
		for p, s := range seen {
			if s[0] != "ready" || s[len(s)-1] != "exit" || s[len(s)-2] != "exiting" {
				done <- errors.New("process " + p.Spec().Worker + ": events out of order: " + strings.Join(s, ","))
				return
			}
		}
		done <- nil
	}()
	var wg sync.WaitGroup
	for w := range width {
		wg.Go(func() {
			for i := w; i < total; i += width {
				if err := f.WaitSpawned(t.Context(), i+1); err != nil {
					t.Error(err)
					return
				}
				f.Heartbeat(i, 1, 1) // does nothing once the process has exited
			}
		})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := f.WaitRunning(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if len(f.Specs()) != total || len(f.RunningSpecs()) != 0 {
		t.Fatalf("Specs %d, RunningSpecs %d", len(f.Specs()), len(f.RunningSpecs()))
	}
}
