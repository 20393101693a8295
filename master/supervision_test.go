package master

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// supEnv is a supervision service alone: it runs no statement, so it
// needs no database, only its mailboxes, a membership view and a spawner.
type supEnv struct {
	s        *supervision
	fake     *spawnertest.FakeSpawner
	peers    *fakePeers
	status   *status
	state    *latest[stateSnap]
	workload *latest[map[string]balancer.QueueWorkload]
	kills    *latest[[]string]
	releases *fifo[*releaseReq]
	suspects *latest[suspectSnap]
	logs     *syncbuf.Buffer
}

// newSupEnv builds supervision over one supervisor of one queue and one
// process, with a trusted view; tweak adjusts its settings.
func newSupEnv(t *testing.T, tweak func(*Settings)) *supEnv {
	t.Helper()
	return newSupEnvOf(t, supervisor.Options{DefaultConcurrency: 2, DefaultQueue: "q"}, tweak)
}

// newSupEnvOf builds supervision over the supervisors opts resolve to.
func newSupEnvOf(t *testing.T, opts supervisor.Options, tweak func(*Settings)) *supEnv {
	t.Helper()
	sups, err := supervisor.Resolve(opts)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	set := Settings{
		Tick: 20 * time.Millisecond, BalanceCooldown: 60 * time.Millisecond, TTL: 2 * time.Second,
		RestartBase: 50 * time.Millisecond, RestartMax: 400 * time.Millisecond, StopTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tweak != nil {
		tweak(&set)
	}
	set = set.withDefaults()
	e := &supEnv{
		fake: spawnertest.NewFakeSpawner(), peers: &fakePeers{instance: "0123456789abcdef", trusted: true}, status: &status{},
		state: newLatest[stateSnap](), workload: newLatest[map[string]balancer.QueueWorkload](), kills: newLatest[[]string](),
		releases: &fifo[*releaseReq]{}, suspects: newLatest[suspectSnap](), logs: logs,
	}
	e.s = newSupervision(e.fake, sups, set, set.Logger, e.peers, e.status, e.state, e.workload, e.kills, e.releases, e.suspects)
	e.s.sig.applied.Init()
	e.s.sig.ticked.Init()
	e.s.sig.event.Init()
	return e
}

func (e *supEnv) start(t *testing.T) {
	t.Helper()
	if err := e.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.s.Stop)
	if err := e.fake.WaitRunning(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), signalWait)
	t.Cleanup(cancel)
	return ctx
}

// Supervision hands what exited workers held to housekeeping without
// ever waiting for it: with nobody taking the releases (housekeeping
// stalled on a frozen database) far more workers exit than any bounded
// channel would hold, and each is replaced at once.
func TestSupervisionNeverWaitsOnHousekeeping(t *testing.T) {
	t.Parallel()
	e := newSupEnv(t, nil)
	e.start(t)
	const exits = 1500
	for i := range exits {
		e.fake.Exit(i, spawner.ExitMaxJobs)
		if err := e.fake.WaitSpawned(waitCtx(t), i+2); err != nil {
			t.Fatalf("exit %d: %v", i, err)
		}
	}
	if n := e.releases.len(); n != exits {
		t.Fatalf("%d releases queued for %d exits", n, exits)
	}
	e.s.Stop()
	if sum, _ := e.s.Result(); sum.Recycled != exits {
		t.Fatalf("summary %+v, want %d recycled", sum, exits)
	}
}

// A terminate request in the state mailbox ends supervision by itself:
// its children are told to stop, the state beaten at once is draining,
// and Done closes once they have exited.
func TestSupervisionEndsOnATerminateRequest(t *testing.T) {
	t.Parallel()
	e := newSupEnv(t, nil)
	e.start(t)
	e.state.put(stateSnap{ok: true, terminate: true})
	select {
	case <-e.s.Done():
	case <-time.After(signalWait):
		t.Fatal("supervision did not end on a terminate request")
	}
	if st, _ := e.status.load(); st != "draining" {
		t.Errorf("state %q, want draining", st)
	}
	cmds := e.fake.Commands(0)
	if len(cmds) == 0 || cmds[len(cmds)-1].Type != spawner.CommandStop {
		t.Errorf("the child got %v, want a stop", cmds)
	}
	if !strings.Contains(e.logs.String(), `reason="terminate requested"`) {
		t.Error("the stop does not say why")
	}
	if sum, err := e.s.Result(); err != nil || sum.Started != 1 {
		t.Errorf("result %+v, %v", sum, err)
	}
}

// Pause flags from the state mailbox reach the children and the report.
func TestSupervisionAppliesThePauseState(t *testing.T) {
	t.Parallel()
	e := newSupEnv(t, nil)
	e.start(t)
	e.s.sig.applied.Drain()
	e.state.put(stateSnap{ok: true, keys: map[string]bool{store.StatePauseAll: true}, queues: map[string]bool{}})
	e.s.sig.applied.Wait(t)
	cmds := e.fake.Commands(0)
	if len(cmds) == 0 || cmds[len(cmds)-1].Type != spawner.CommandPause {
		t.Fatalf("the child got %v, want a pause", cmds)
	}
	e.s.sig.ticked.WaitFresh(t, 1) // published after a tick
	if st, rep := e.status.load(); st != "paused" || !rep.Supervisors[0].Paused {
		t.Fatalf("state %q, report %+v; want paused", st, rep)
	}
}

// A crashed group is restarted after its backoff by supervision's own
// clock: not while the clock stands still, however many ticks go by.
func TestSupervisionRestartsAfterTheBackoffOfItsClock(t *testing.T) {
	t.Parallel()
	clock := newTestClock(time.Now())
	e := newSupEnv(t, func(s *Settings) { s.Now = clock.Now; s.RestartBase = time.Second; s.RestartMax = time.Minute })
	e.start(t)
	e.s.sig.event.Drain()
	e.fake.Exit(0, spawner.ExitCrash)
	e.s.sig.event.Wait(t) // the exit handled
	e.s.sig.ticked.WaitFresh(t, 5)
	if n := e.fake.Attempts(); n != 1 {
		t.Fatalf("%d spawns before the backoff passed", n)
	}
	clock.Advance(999 * time.Millisecond)
	e.s.sig.ticked.WaitFresh(t, 3)
	if n := e.fake.Attempts(); n != 1 {
		t.Fatalf("%d spawns within the backoff's base", n)
	}
	clock.Advance(251 * time.Millisecond) // past the base and its random quarter
	if err := e.fake.WaitSpawned(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
}

// A worker that never reports ready is killed once the start timeout
// passed by supervision's clock, and only while the view is trusted.
func TestSupervisionKillsAWorkerThatNeverGetsReady(t *testing.T) {
	t.Parallel()
	clock := newTestClock(time.Now())
	e := newSupEnv(t, func(s *Settings) { s.Now = clock.Now; s.StartTimeout = time.Minute })
	e.fake.SkipReady(true)
	e.peers.set(store.View{}, false)
	if err := e.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.s.Stop)
	if err := e.fake.WaitSpawned(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(59 * time.Second)
	e.s.sig.ticked.WaitFresh(t, 2)
	if e.fake.Killed(0) {
		t.Fatal("killed within the start timeout")
	}
	clock.Advance(2 * time.Second)
	e.s.sig.ticked.WaitFresh(t, 2)
	if e.fake.Killed(0) {
		t.Fatal("killed while the view is not trusted")
	}
	e.peers.set(store.View{}, true)
	e.s.sig.ticked.WaitFresh(t, 2)
	if !e.fake.Killed(0) {
		t.Fatal("not killed past the start timeout")
	}
}

// A worker whose heartbeats say that its finished jobs wait for a write
// that fails (the server has no connection to give) is not killed when
// housekeeping finds those jobs past their timeout: they are done. Once
// its heartbeat says nothing waits, an overdue job is a stuck one again.
func TestSupervisionSparesAWorkerWhoseOutcomesWait(t *testing.T) {
	t.Parallel()
	e := newSupEnv(t, nil)
	e.start(t)
	worker := e.fake.Specs()[0].Worker
	e.fake.Report(0, spawner.Report{Type: spawner.ReportHeartbeat, Jobs: 20, Unwritten: 20})
	e.s.sig.event.Wait(t) // its ready report
	e.s.sig.event.Wait(t) // the heartbeat
	e.kills.put([]string{worker})
	poll(t, "the log says the worker is spared", func() bool {
		return strings.Contains(e.logs.String(), "wait for the database to take their outcomes: not killing it")
	})
	e.kills.put([]string{worker})
	e.s.sig.ticked.WaitFresh(t, 2)
	if e.fake.Killed(0) {
		t.Fatal("killed a worker whose overdue jobs are finished and wait for a write")
	}
	if n := strings.Count(e.logs.String(), "not killing it"); n != 1 {
		t.Errorf("the log says %d times that the worker is spared, want once", n)
	}
	e.fake.Report(0, spawner.Report{Type: spawner.ReportHeartbeat, Jobs: 20})
	e.s.sig.event.Wait(t)
	e.kills.put([]string{worker})
	for e.releases.len() == 0 {
		e.s.sig.event.Wait(t) // until the kill's exit is handled
	}
	if !e.fake.Killed(0) {
		t.Fatal("the overdue worker was not killed once its outcomes were written")
	}
}

// The overdue workers housekeeping names are killed.
func TestSupervisionKillsTheOverdueWorkers(t *testing.T) {
	t.Parallel()
	e := newSupEnv(t, nil)
	e.start(t)
	e.kills.put([]string{"someone-else", e.fake.Specs()[0].Worker})
	for e.releases.len() == 0 {
		e.s.sig.event.Wait(t) // until the kill's exit is handled
	}
	if !e.fake.Killed(0) {
		t.Fatal("the overdue worker was not killed")
	}
	if r := e.releases.takeAll(); len(r) != 1 || r[0].worker != e.fake.Specs()[0].Worker {
		t.Fatalf("releases %+v, want the killed worker's", r)
	}
}

// Crash backoff is per process slot: while one slot of a group of two
// waits out the backoff of its crashes, again and again, the other slot's
// process that crashes once is replaced after the base delay, and a slot
// whose process recycles is replaced at once.
func TestSupervisionBacksOffPerProcessSlot(t *testing.T) {
	t.Parallel()
	clock := newTestClock(time.Now())
	two := 2
	e := newSupEnvOf(t, supervisor.Options{DefaultConcurrency: 2, DefaultQueue: "q", Supervisors: map[string]supervisor.SupervisorOptions{
		"s": {Queues: []string{"q"}, Balance: string(supervisor.BalanceOff), MaxProcesses: &two},
	}}, func(s *Settings) { s.Now = clock.Now; s.RestartBase = time.Second; s.RestartMax = time.Minute })
	if err := e.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.s.Stop)
	if err := e.fake.WaitRunning(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	// Process 0 is slot 0 (the crashing one), process 1 slot 1.
	crash := func(i int) {
		t.Helper()
		e.s.sig.event.Drain()
		e.fake.Exit(i, spawner.ExitCrash)
		e.s.sig.event.Wait(t)
	}
	crash(0) // slot 0: 1 s
	clock.Advance(1250 * time.Millisecond)
	if err := e.fake.WaitSpawned(waitCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	crash(2) // slot 0 again: 2 s
	crash(1) // slot 1, its first: 1 s
	e.s.sig.ticked.WaitFresh(t, 3)
	if n := e.fake.Attempts(); n != 3 {
		t.Fatalf("%d spawns before any backoff passed, want 3", n)
	}
	clock.Advance(1250 * time.Millisecond)
	if err := e.fake.WaitSpawned(waitCtx(t), 4); err != nil {
		t.Fatal(err) // slot 1 replaced after its own 1 s
	}
	e.s.sig.ticked.WaitFresh(t, 3)
	if n := e.fake.Attempts(); n != 4 {
		t.Fatalf("%d spawns 1.25 s after slot 0's second crash, want 4: slot 0 waits 2 s", n)
	}
	// Slot 1's process recycles: replaced at once, whatever slot 0 waits.
	e.fake.Exit(3, spawner.ExitMaxJobs)
	if err := e.fake.WaitSpawned(waitCtx(t), 5); err != nil {
		t.Fatal(err)
	}
	clock.Advance(1250 * time.Millisecond) // 2.5 s since: past slot 0's 2 s and its random quarter
	if err := e.fake.WaitSpawned(waitCtx(t), 6); err != nil {
		t.Fatal(err)
	}
	if n := len(e.fake.Running()); n != 2 {
		t.Fatalf("%d running, want 2", n)
	}
	logs := e.logs.String()
	for _, want := range []string{`retry_in=1s slot=0`, `retry_in=2s slot=0`, `retry_in=1s slot=1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no crash logged with %s:\n%s", want, logs)
		}
	}
}

// Suspects read by housekeeping start one isolation process for their
// group, outside the allocation and the report's processes; a stale read
// (made before the last isolation process exited) starts none, nor does a
// paused supervisor's; an isolation process that crashed after it got
// ready is replaced at once, one that crashed before after the backoff of
// its own slot, which holds back no ordinary process.
func TestSupervisionIsolatesSuspects(t *testing.T) {
	t.Parallel()
	clock := newTestClock(time.Now())
	e := newSupEnv(t, func(s *Settings) { s.Now = clock.Now; s.RestartBase = time.Second; s.RestartMax = time.Minute })
	e.start(t)
	suspects := func(n int) {
		t.Helper()
		clock.Advance(time.Millisecond) // a read made after what came before
		e.s.sig.ticked.Drain()
		e.suspects.put(suspectSnap{at: clock.Now(), counts: map[string]int{"q": n, "elsewhere": 9}})
		e.s.sig.ticked.WaitFresh(t, 2)
	}
	suspects(0)
	if n := e.fake.Attempts(); n != 1 {
		t.Fatalf("%d spawns without suspects, want the ordinary process alone", n)
	}
	suspects(2)
	if err := e.fake.WaitSpawned(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	if sp := e.fake.Specs()[1]; !sp.Isolate || sp.Concurrency != 1 || !strings.HasSuffix(sp.Worker, "-isolation") || !slices.Equal(sp.Queues, []string{"q"}) {
		t.Fatalf("isolation spec %+v", sp)
	}
	if _, rep := e.status.load(); rep.Supervisors[0].Processes["q"] != 1 || rep.Supervisors[0].Running != 2 {
		t.Errorf("report %+v: want 1 process of q and 2 running", rep.Supervisors[0])
	}
	suspects(2)
	if n := e.fake.Attempts(); n != 2 {
		t.Fatalf("%d spawns: a second isolation process beside the first", n)
	}
	// It crashes after it got ready: charged to its job. The read it
	// crashed after is stale; a fresh one starts the next at once.
	stale := clock.Now()
	e.s.sig.event.Drain()
	e.fake.Exit(1, spawner.ExitCrash)
	e.s.sig.event.Wait(t)
	e.suspects.put(suspectSnap{at: stale, counts: map[string]int{"q": 2}})
	e.s.sig.ticked.WaitFresh(t, 2)
	if n := e.fake.Attempts(); n != 2 {
		t.Fatalf("%d spawns on a read made before the isolation process exited", n)
	}
	e.fake.SkipReady(true) // the next never gets ready
	suspects(1)
	if err := e.fake.WaitSpawned(waitCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	// It crashes before it got ready: its slot backs off, 1 s.
	e.s.sig.event.Drain()
	e.fake.Exit(2, spawner.ExitCrash)
	e.s.sig.event.Wait(t)
	suspects(1)
	if n := e.fake.Attempts(); n != 3 {
		t.Fatalf("%d spawns within the isolation slot's backoff", n)
	}
	// The ordinary process crashes meanwhile: its own slot's backoff.
	e.fake.SkipReady(false)
	e.s.sig.event.Drain()
	e.fake.Exit(0, spawner.ExitCrash)
	e.s.sig.event.Wait(t)
	clock.Advance(1250 * time.Millisecond)
	if err := e.fake.WaitSpawned(waitCtx(t), 5); err != nil {
		t.Fatal(err)
	}
	// Paused: no isolation process once this one is gone.
	isoIdx := 3
	if !e.fake.Specs()[3].Isolate {
		isoIdx = 4
	}
	e.state.put(stateSnap{ok: true, keys: map[string]bool{store.StatePauseAll: true}, queues: map[string]bool{}})
	e.s.sig.applied.Wait(t)
	e.fake.Exit(isoIdx, spawner.ExitEmpty)
	suspects(3)
	if n := e.fake.Attempts(); n != 5 {
		t.Fatalf("%d spawns: an isolation process for a paused supervisor", n)
	}
}
