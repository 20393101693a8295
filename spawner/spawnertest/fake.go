// Package spawnertest provides FakeSpawner, a spawner.Spawner whose
// processes are driven by a test instead of running, so a master can be
// tested without starting workers.
package spawnertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/fleet-go/fleet/spawner"
)

// ErrInjected is the error (wrapped) of a Spawn that FailNext made fail.
var ErrInjected = errors.New("spawnertest: injected spawn failure")

// firstPID is the PID of the first fake process. Linux PIDs never exceed
// 2^22, so a fake PID is never a real process's.
const firstPID = 1 << 22

// FakeSpawner is a spawner.Spawner whose processes do nothing by
// themselves: a test makes them report and exit. Processes are numbered
// from 0 in the order they were spawned.
//
// Like a real worker, a fake process
//   - sends a ready report as soon as it is spawned (see SkipReady);
//   - records every command it is sent (see Commands); pause and continue
//     set the Paused field of its later heartbeats;
//   - on a stop command sends an exiting report with reason stopped and
//     exits with ExitStopped, code 0 (see IgnoreStop);
//   - when killed, exits with reason ExitCrash and code -1, without an
//     exiting report;
//   - counts its exit as spawner.ExitFor decides from its last exiting
//     report and its exit status (see ExitCode).
//
// The events of one process are delivered in order, each exactly once, the
// exit last. Report, Heartbeat and Exit, which a test calls, return once the
// receiver has taken the event (and every earlier one of that process) from
// its channel, so a test knows the master has it; events caused by Send
// and Kill, which the master calls, are delivered from a goroutine so that
// a master sending from its event loop never waits on itself. That goroutine
// exists only while the process has undelivered events.
//
// It is safe for concurrent use.
type FakeSpawner struct {
	mu         sync.Mutex
	procs      []*FakeProcess
	attempts   int
	failNext   int
	ignoreStop bool
	skipReady  bool
	changed    chan struct{} // closed and replaced whenever procs or their exits change
}

// NewFakeSpawner returns a FakeSpawner with no processes.
func NewFakeSpawner() *FakeSpawner {
	return &FakeSpawner{changed: make(chan struct{})}
}

// Spawn starts fake process number len(Specs()) for spec. It fails without
// sending any event when ctx is done or a FailNext failure is pending.
func (f *FakeSpawner) Spawn(ctx context.Context, spec spawner.Spec, events chan<- spawner.Event) (spawner.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("spawnertest: spawn: %w", err)
	}
	if f.failNext > 0 {
		f.failNext--
		return nil, fmt.Errorf("spawnertest: spawn worker for %s: %w", spec.Group(), ErrInjected)
	}
	spec.Queues = slices.Clone(spec.Queues)
	spec.Backoff = slices.Clone(spec.Backoff)
	p := &FakeProcess{
		f:      f,
		index:  len(f.procs),
		spec:   spec,
		pid:    firstPID + len(f.procs),
		events: events,
		paused: spec.Paused,
	}
	f.procs = append(f.procs, p)
	if !f.skipReady {
		p.enqueue(spawner.Event{Process: p, Report: &spawner.Report{
			V: spawner.ProtocolVersion, Type: spawner.ReportReady, PID: p.pid,
			Worker: spec.Worker, Queues: slices.Clone(spec.Queues), Concurrency: spec.Concurrency,
		}}, nil)
	}
	f.changedLocked()
	return p, nil
}

// FailNext makes the next n Spawn calls fail with an error wrapping
// ErrInjected.
func (f *FakeSpawner) FailNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = n
}

// IgnoreStop makes processes only record stop commands from now on
// (ignore true), as a worker stuck in a job would, or exit on them again
// (false, the default).
func (f *FakeSpawner) IgnoreStop(ignore bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ignoreStop = ignore
}

// SkipReady makes processes spawned from now on send no ready report
// (skip true), as a worker that hangs while starting would, or send one
// again (false, the default).
func (f *FakeSpawner) SkipReady(skip bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skipReady = skip
}

// Attempts returns how many times Spawn was called, failed calls included.
func (f *FakeSpawner) Attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// Specs returns the spec of every process ever spawned, in order (index i
// is process i).
func (f *FakeSpawner) Specs() []spawner.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	specs := make([]spawner.Spec, len(f.procs))
	for i, p := range f.procs {
		specs[i] = p.spec
	}
	return specs
}

// Running returns the indexes of the processes that have not exited, in
// order.
func (f *FakeSpawner) Running() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var running []int
	for i, p := range f.procs {
		if !p.exited {
			running = append(running, i)
		}
	}
	return running
}

// RunningSpecs returns the specs of the processes that have not exited, in
// order.
func (f *FakeSpawner) RunningSpecs() []spawner.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	var specs []spawner.Spec
	for _, p := range f.procs {
		if !p.exited {
			specs = append(specs, p.spec)
		}
	}
	return specs
}

// Process returns process i, the value its events carry.
func (f *FakeSpawner) Process(i int) *FakeProcess {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procLocked(i)
}

// Commands returns the commands sent to process i, in order.
func (f *FakeSpawner) Commands(i int) []spawner.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procLocked(i).commands)
}

// Killed reports whether process i was killed.
func (f *FakeSpawner) Killed(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procLocked(i).killed
}

// Report makes process i send hb as is (its V is set to the protocol
// version when zero), like a real worker writing a report line. An exiting
// report's reason is the reported reason of a later exit, which counts only
// when the exit status agrees (a Kill's never does), as with a real
// worker. It returns once the receiver has taken the event; it does nothing
// when the process has exited.
func (f *FakeSpawner) Report(i int, hb spawner.Report) {
	f.mu.Lock()
	p := f.procLocked(i)
	if p.exited {
		f.mu.Unlock()
		return
	}
	if hb.V == 0 {
		hb.V = spawner.ProtocolVersion
	}
	if hb.Type == spawner.ReportExiting {
		p.reported = hb.Reason
	}
	if hb.Type == spawner.ReportHeartbeat || hb.Type == spawner.ReportExiting {
		p.jobs = hb.Jobs
	}
	delivered := make(chan struct{})
	p.enqueue(spawner.Event{Process: p, Report: &hb}, delivered)
	f.mu.Unlock()
	<-delivered
}

// Heartbeat makes process i send a heartbeat report with jobs finished
// jobs, memoryMB of memory and its paused state. It returns once the
// receiver has taken the event; it does nothing when the process has exited.
func (f *FakeSpawner) Heartbeat(i int, jobs int64, memoryMB float64) {
	f.mu.Lock()
	paused := f.procLocked(i).paused
	f.mu.Unlock()
	f.Report(i, spawner.Report{Type: spawner.ReportHeartbeat, Jobs: jobs, MemoryMB: memoryMB, Paused: paused})
}

// Exit makes process i exit for reason, like a real worker: unless reason
// is ExitCrash it first sends an exiting report with that reason, then its
// exit with that reason and code spawner.ExitCodeJobTimedOut for
// ExitTimeout, 1 for ExitCrash and ExitError, 0 for the others. It returns
// once the receiver has taken the exit; it does nothing when the process
// has already exited.
func (f *FakeSpawner) Exit(i int, reason spawner.ExitReason) {
	f.mu.Lock()
	p := f.procLocked(i)
	if p.exited {
		f.mu.Unlock()
		return
	}
	delivered := make(chan struct{})
	p.exitLocked(reason, delivered)
	f.mu.Unlock()
	<-delivered
}

// ExitCode makes process i exit with status code without a report of its
// own: its exit counts as spawner.ExitFor decides from the reason of its
// last exiting report (see Report) and code, so a test can make a worker
// that reported a recycle exit 3. It returns once the receiver has taken
// the exit; it does nothing when the process has already exited.
func (f *FakeSpawner) ExitCode(i, code int) {
	f.mu.Lock()
	p := f.procLocked(i)
	if p.exited {
		f.mu.Unlock()
		return
	}
	delivered := make(chan struct{})
	p.markExitedLocked()
	p.enqueue(spawner.Event{Process: p, Exit: &spawner.Exit{
		Reason: spawner.ExitFor(p.reported, code), Reported: p.reported, Code: code,
	}}, delivered)
	f.mu.Unlock()
	<-delivered
}

// WaitSpawned blocks until at least n processes have been spawned in
// total, or ctx is done (then it returns ctx.Err()).
func (f *FakeSpawner) WaitSpawned(ctx context.Context, n int) error {
	return f.wait(ctx, func() bool { return len(f.procs) >= n })
}

// WaitRunning blocks until exactly n processes are running, or ctx is done
// (then it returns ctx.Err()).
func (f *FakeSpawner) WaitRunning(ctx context.Context, n int) error {
	return f.wait(ctx, func() bool {
		running := 0
		for _, p := range f.procs {
			if !p.exited {
				running++
			}
		}
		return running == n
	})
}

// wait blocks until cond, called with f.mu held, is true or ctx is done.
func (f *FakeSpawner) wait(ctx context.Context, cond func() bool) error {
	for {
		f.mu.Lock()
		ok, changed := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *FakeSpawner) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *FakeSpawner) procLocked(i int) *FakeProcess {
	if i < 0 || i >= len(f.procs) {
		panic(fmt.Sprintf("spawnertest: no process %d (%d spawned)", i, len(f.procs)))
	}
	return f.procs[i]
}

// FakeProcess is a process of a FakeSpawner.
type FakeProcess struct {
	f      *FakeSpawner
	index  int
	spec   spawner.Spec
	pid    int
	events chan<- spawner.Event

	// Guarded by f.mu.
	commands []spawner.Command
	paused   bool
	jobs     int64
	reported spawner.ExitReason
	exited   bool
	killed   bool
	queue    []pending
	pumping  bool // a goroutine is delivering queue
}

type pending struct {
	ev        spawner.Event
	delivered chan struct{} // closed once taken; may be nil
}

// Index is the process's number: its index in Specs.
func (p *FakeProcess) Index() int { return p.index }

// Spec is what the process was spawned with.
func (p *FakeProcess) Spec() spawner.Spec { return p.spec }

// PID is a fake process id, unique in the FakeSpawner and above every real
// Linux PID.
func (p *FakeProcess) PID() int { return p.pid }

// Send records cmd. A stop makes the process exit with ExitStopped unless
// IgnoreStop is on. It fails, wrapping spawner.ErrExited, once the process
// has exited.
func (p *FakeProcess) Send(cmd spawner.Command) error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.exited {
		return fmt.Errorf("spawnertest: send %s to process %d: %w", cmd.Type, p.index, spawner.ErrExited)
	}
	cmd.V = spawner.ProtocolVersion
	p.commands = append(p.commands, cmd)
	switch cmd.Type {
	case spawner.CommandPause:
		p.paused = true
	case spawner.CommandContinue:
		p.paused = false
	case spawner.CommandStop:
		if !p.f.ignoreStop {
			p.exitLocked(spawner.ExitStopped, nil)
		}
	}
	return nil
}

// Kill makes the process exit with reason ExitCrash and code -1, whatever
// it reported. Killing an exited process does nothing.
func (p *FakeProcess) Kill() error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.exited {
		return nil
	}
	p.killed = true
	p.markExitedLocked()
	p.enqueue(spawner.Event{Process: p, Exit: &spawner.Exit{Reason: spawner.ExitFor(p.reported, -1), Reported: p.reported, Code: -1}}, nil)
	return nil
}

// exitLocked queues a worker's exit for reason; delivered, if not nil, is
// closed once the exit is taken.
func (p *FakeProcess) exitLocked(reason spawner.ExitReason, delivered chan struct{}) {
	code := 0
	switch reason {
	case spawner.ExitTimeout:
		code = spawner.ExitCodeJobTimedOut
	case spawner.ExitCrash, spawner.ExitError:
		code = 1
	}
	reported := spawner.ExitReason("")
	if reason != spawner.ExitCrash {
		reported = reason
		p.enqueue(spawner.Event{Process: p, Report: &spawner.Report{
			V: spawner.ProtocolVersion, Type: spawner.ReportExiting, Reason: reason, Jobs: p.jobs,
		}}, nil)
	}
	p.markExitedLocked()
	p.enqueue(spawner.Event{Process: p, Exit: &spawner.Exit{Reason: spawner.ExitFor(reported, code), Reported: reported, Code: code}}, delivered)
}

func (p *FakeProcess) markExitedLocked() {
	p.exited = true
	p.f.changedLocked()
}

// enqueue queues ev for delivery, starting the delivering goroutine when
// none runs. Called with f.mu held.
func (p *FakeProcess) enqueue(ev spawner.Event, delivered chan struct{}) {
	p.queue = append(p.queue, pending{ev: ev, delivered: delivered})
	if !p.pumping {
		p.pumping = true
		go p.pump()
	}
}

// pump delivers the queue in order and ends when it is empty.
func (p *FakeProcess) pump() {
	for {
		p.f.mu.Lock()
		if len(p.queue) == 0 {
			p.pumping = false
			p.f.mu.Unlock()
			return
		}
		next := p.queue[0]
		p.queue = p.queue[1:]
		p.f.mu.Unlock()
		p.events <- next.ev
		if next.delivered != nil {
			close(next.delivered)
		}
	}
}
