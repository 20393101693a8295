package master

import (
	"cmp"
	"context"
	"fmt"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// supervision is the service that runs the children: it starts them to
// meet each group's allocation, balances the allocation across queues,
// replaces recycled workers at once and crashed ones after the backoff of
// their process slot, starts an isolation process for a group whose queues
// have suspect jobs ready (see reconcileIsolation), kills workers that
// never get ready or hold a job far past its timeout, applies pause and
// terminate requests, and publishes the state and report the membership
// beats. It runs no statement itself, so a slow
// query delays neither a beat nor a child's event: it takes what the
// other services last read from its mailboxes (pause state, workload,
// overdue workers) and queues what exited workers held for housekeeping
// to release; no send of its waits on another service.
//
// It starts last and stops first. It ends by itself on a terminate
// request made after this master started; Stop, or that request, drains
// it: every child is told to stop, finishes its running jobs within
// StopTimeout, and is killed after it. Stop returns, and Done is closed,
// once the last child has exited.
type supervision struct {
	spawner spawner.Spawner
	set     Settings
	log     *slog.Logger
	now     func() time.Time
	member  beater
	status  *status // to the beat and Readiness

	state    *latest[stateSnap]                         // from shared state
	workload *latest[map[string]balancer.QueueWorkload] // from workload
	kills    *latest[[]string]                          // from housekeeping
	suspects *latest[suspectSnap]                       // from housekeeping
	releases *fifo[*releaseReq]                         // to housekeeping

	// Its own state, used only by its goroutine (and by New before it
	// starts).
	sups         []*supState
	procs        map[spawner.Process]*proc
	lastBal      time.Time
	stopping     bool
	running      bool // every supervisor had its children once
	summary      Summary
	pausedQueues map[string]bool // queues paused across every supervisor
	seq          int             // numbers worker names
	load         map[string]balancer.QueueWorkload
	jobSamples   []jobSample
	suspectsNow  suspectSnap // the suspects housekeeping last read

	// Set by its goroutine before it ends.
	sum Summary
	err error

	lc  svclife.Lifecycle
	sig struct {
		applied    svclife.Signal[stateSnap] // a pause state applied
		rebalanced svclife.Signal[struct{}]  // an allocation computed
		ticked     svclife.Signal[struct{}]  // a tick's checks done
		event      svclife.Signal[struct{}]  // a child's event handled
	}
}

type supState struct {
	sup    supervisor.Supervisor
	groups []supervisor.Group
	alloc  balancer.Allocation
	paused bool
	// slots holds, per group, the restart backoff of each of its process
	// slots (see slotFor): a crash delays the restart of its own slot
	// only, so a job that keeps crashing its process never holds back the
	// group's other processes.
	slots map[string][]*restarts
	// isolation holds, per group, the restart backoff of its isolation
	// process's slot, and isoEnded when its last isolation process exited.
	isolation map[string]*restarts
	isoEnded  map[string]time.Time
	// ceiling is the process ceiling this master confirmed for the
	// supervisor's fleet-wide budget (-1: no budget).
	ceiling int
	// claim is the ceiling published in the last beat.
	claim int
}

type proc struct {
	p        spawner.Process
	sup      *supState
	group    string
	slot     int  // its process slot in the group (see supState.slots)
	isolated bool // an isolation process (see reconcileIsolation), in no slot
	started  time.Time
	ready    bool // it reported ready (or beat)
	killed   bool // killed for not getting ready in time
	stopping bool
	// waitingAt is when it last reported that it waits (for the database
	// or a free connection) before getting ready; waiting says for what.
	waitingAt time.Time
	waiting   string
	// unwritten is how many finished jobs its last heartbeat said wait
	// for a write that fails, unwrittenAt when it said so, and spared
	// whether the log said it is not killed for them.
	unwritten   int
	unwrittenAt time.Time
	spared      bool
	jobs        int64
	memoryMB    float64
}

// unwrittenFresh is how long a worker's word that its finished jobs wait
// for a write that fails holds (it says so in every heartbeat, one a
// second, while they wait).
const unwrittenFresh = 10 * time.Second

type jobSample struct {
	at   time.Time
	jobs int64
}

func newSupervision(sp spawner.Spawner, sups []supervisor.Supervisor, set Settings, log *slog.Logger, member beater, st *status,
	state *latest[stateSnap], workload *latest[map[string]balancer.QueueWorkload], kills *latest[[]string], releases *fifo[*releaseReq],
	suspects *latest[suspectSnap]) *supervision {
	s := &supervision{
		spawner: sp, set: set, log: log, now: set.Now, member: member, status: st,
		state: state, workload: workload, kills: kills, releases: releases, suspects: suspects,
		procs: map[spawner.Process]*proc{},
	}
	for _, sup := range sups {
		ss := &supState{sup: sup, groups: sup.Groups(), alloc: balancer.Allocation{}, slots: map[string][]*restarts{},
			isolation: map[string]*restarts{}, isoEnded: map[string]time.Time{}, ceiling: -1, claim: -1}
		for _, g := range ss.groups {
			ss.isolation[g.Key] = newRestarts(set.RestartBase, set.RestartMax)
		}
		if sup.FleetMaxProcesses > 0 {
			ss.ceiling, ss.claim = 0, 0
		}
		s.sups = append(s.sups, ss)
	}
	return s
}

func (s *supervision) Name() string { return "supervision" }

// Start starts the children and supervises them from its own goroutine
// until Stop or a terminate request.
func (s *supervision) Start(ctx context.Context) error {
	sctx, end, err := s.lc.Begin(ctx, s.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		s.sum, s.err = s.supervise(sctx)
	}()
	return nil
}

// Stop drains the children and waits until the last has exited.
func (s *supervision) Stop() { s.lc.Halt() }

// Done is closed once supervision has ended (nil before Start).
func (s *supervision) Done() <-chan struct{} { return s.lc.Ended() }

// Result is what supervision did; call it once Done is closed.
func (s *supervision) Result() (Summary, error) { return s.sum, s.err }

// supervise runs until ctx ends or a terminate request arrives, then
// drains.
func (s *supervision) supervise(ctx context.Context) (Summary, error) {
	events := make(chan spawner.Event, 64)
	if snap, ok := s.state.take(); ok {
		s.applyState(snap) // a terminate in it is read again next tick
	}
	s.applyWorkload()
	s.rebalance()
	s.reconcileAll(ctx, events)

	tick := time.NewTicker(s.set.Tick)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		s.armWake(wake)
		select {
		case <-ctx.Done():
			return s.shutdown(events, "stopped")
		case ev := <-events:
			s.handle(ev)
			s.reconcileAll(ctx, events)
			s.sig.event.Send(struct{}{})
		case <-wake.C:
			s.reconcileAll(ctx, events)
		case snap := <-s.state.c():
			if s.applyState(snap) {
				return s.shutdown(events, "terminate requested")
			}
			s.sig.applied.Send(snap)
		case ws := <-s.kills.c():
			s.killOverdue(ws)
		case snap := <-s.suspects.c():
			s.suspectsNow = snap
			s.reconcileAll(ctx, events)
		case <-tick.C:
			s.killUnready()
			s.applyWorkload()
			s.applyBudgets()
			if s.now().Sub(s.lastBal) >= s.set.BalanceCooldown {
				s.rebalance()
			}
			s.reconcileAll(ctx, events)
			s.sig.ticked.Send(struct{}{})
		}
		s.publish()
	}
}

// armWake points the wake timer at the earliest restart of an empty slot
// that is waiting out its backoff, so a replacement starts on time rather
// than at the next tick.
func (s *supervision) armWake(t *time.Timer) {
	var next time.Time
	now := s.now()
	for _, ss := range s.sups {
		for _, g := range ss.groups {
			if s.alive(ss, g.Key) >= ss.alloc[g.Key] {
				continue
			}
			if r := ss.isolation[g.Key]; s.isolationWanted(ss, g) && !r.ready(now) && (next.IsZero() || r.next.Before(next)) {
				next = r.next
			}
			taken := s.slotsTaken(ss, g.Key)
			for i := range ss.alloc[g.Key] {
				r := s.slotFor(ss, g.Key, i)
				if taken[i] || r.ready(now) {
					continue
				}
				if next.IsZero() || r.next.Before(next) {
					next = r.next
				}
			}
		}
	}
	d := time.Hour
	if !next.IsZero() {
		d = max(next.Sub(now), time.Millisecond)
	}
	t.Reset(d)
}

// applyWorkload takes the latest workload the workload service read.
func (s *supervision) applyWorkload() {
	if w, ok := s.workload.take(); ok {
		s.load = w
	}
}

// applyState applies pause flags and reports whether a terminate request
// newer than this master arrived.
func (s *supervision) applyState(snap stateSnap) (terminate bool) {
	if !snap.ok {
		return false
	}
	if !maps.Equal(snap.queues, s.pausedQueues) {
		s.pausedQueues = snap.queues
		s.log.Info("paused queues", "queues", slices.Sorted(maps.Keys(snap.queues)))
		for _, p := range s.procs {
			if p.stopping {
				continue
			}
			cmd := spawner.Command{Type: spawner.CommandPauseQueues, Queues: pausedOf(p.p.Spec().Queues, snap.queues)}
			if err := p.p.Send(cmd); err != nil {
				s.log.Warn("send command failed", "command", cmd.Type, "pid", p.p.PID(), "err", err)
			}
		}
	}
	for _, ss := range s.sups {
		paused := snap.keys[store.StatePauseAll] || snap.keys[store.StatePauseSupervisorPrefix+ss.sup.Name]
		if paused == ss.paused {
			continue
		}
		ss.paused = paused
		cmd := spawner.Command{Type: spawner.CommandContinue}
		if paused {
			cmd.Type = spawner.CommandPause
		}
		s.log.Info("supervisor "+string(cmd.Type), "supervisor", ss.sup.Name)
		for _, p := range s.procs {
			if p.sup == ss && !p.stopping {
				if err := p.p.Send(cmd); err != nil {
					s.log.Warn("send command failed", "command", cmd.Type, "pid", p.p.PID(), "err", err)
				}
			}
		}
	}
	return snap.terminate
}

// pausedOf returns which of queues are in the paused set, in their order.
func pausedOf(queues []string, paused map[string]bool) []string {
	var out []string
	for _, q := range queues {
		if paused[q] {
			out = append(out, q)
		}
	}
	return out
}

// killUnready kills workers that did not report ready within
// StartTimeout (they hang while starting), but only while this master's
// own beats have held for a ttl: when the database was away, a worker
// waiting for it (retrying every few seconds) is not stuck. Nor is one
// that keeps reporting that it waits (spawner.ReportWaiting: the server
// has no connection left for it, say).
func (s *supervision) killUnready() {
	if !s.member.Trusted() {
		return
	}
	now := s.now()
	for _, p := range s.procs {
		if p.ready || p.killed || p.stopping || now.Sub(p.started) < s.set.StartTimeout {
			continue
		}
		if !p.waitingAt.IsZero() && now.Sub(p.waitingAt) < s.set.StartTimeout {
			continue // it says it waits for the database: not hanging
		}
		p.killed = true
		s.log.Error("worker did not get ready within the start timeout: killing it", "supervisor", p.sup.sup.Name,
			"queues", p.group, "pid", p.p.PID(), "start_timeout", s.set.StartTimeout)
		_ = p.p.Kill()
	}
}

// killOverdue kills this master's workers named in overdue, but not one
// that keeps saying that its finished jobs wait for a write that fails
// (the database is away or has no connection to give): those jobs are
// done, and a kill would run them again with a try spent. A handler that
// ignores its timeout is the worker's own watchdog's to end.
func (s *supervision) killOverdue(overdue []string) {
	now := s.now()
	for _, w := range overdue {
		for _, p := range s.procs {
			if p.p.Spec().Worker != w {
				continue
			}
			if p.unwritten > 0 && now.Sub(p.unwrittenAt) < unwrittenFresh {
				if !p.spared {
					p.spared = true
					s.log.Warn("worker holds jobs past their timeout, but they are finished and wait for the database to take their outcomes: not killing it",
						"worker", w, "pid", p.p.PID(), "unwritten", p.unwritten)
				}
				continue
			}
			s.log.Error("worker holds a job past its timeout and grace: killing it", "worker", w, "pid", p.p.PID())
			_ = p.p.Kill()
		}
	}
}

// alive counts the processes of a group that are not stopping: a process
// that is on its way out is never counted as capacity, nor is an isolation
// process, which runs no ordinary job.
func (s *supervision) alive(ss *supState, group string) int {
	n := 0
	for _, p := range s.procs {
		if p.sup == ss && p.group == group && !p.stopping && !p.isolated {
			n++
		}
	}
	return n
}

// runningOf counts every process of a supervisor, stopping ones included.
func (s *supervision) runningOf(ss *supState) int {
	n := 0
	for _, p := range s.procs {
		if p.sup == ss {
			n++
		}
	}
	return n
}

func (s *supervision) reconcileAll(ctx context.Context, events chan<- spawner.Event) {
	if s.stopping {
		return
	}
	for _, ss := range s.sups {
		for _, g := range ss.groups {
			s.reconcile(ctx, events, ss, g)
			s.reconcileIsolation(ctx, events, ss, g)
		}
	}
}

// slotFor returns the restart backoff of process slot i of a group,
// making the group's slots up to i as needed.
func (s *supervision) slotFor(ss *supState, group string, i int) *restarts {
	for len(ss.slots[group]) <= i {
		ss.slots[group] = append(ss.slots[group], newRestarts(s.set.RestartBase, s.set.RestartMax))
	}
	return ss.slots[group][i]
}

// slotsTaken returns the slots of a group that a process holds: every
// ordinary process of the group that is not stopping holds its own.
func (s *supervision) slotsTaken(ss *supState, group string) map[int]bool {
	taken := map[int]bool{}
	for _, p := range s.procs {
		if p.sup == ss && p.group == group && !p.stopping && !p.isolated {
			taken[p.slot] = true
		}
	}
	return taken
}

// reconcile starts or stops processes of one group to meet its allocation.
// A group of n processes has n slots, numbered from 0, each with its own
// crash backoff: a start takes the lowest free slot whose backoff has
// passed, so that a crash delays the replacement of the process that
// crashed and nothing else. Under a fleet-wide budget a start also waits
// until the supervisor's processes, stopping ones included, are below the
// ceiling.
func (s *supervision) reconcile(ctx context.Context, events chan<- spawner.Event, ss *supState, g supervisor.Group) {
	want, have := ss.alloc[g.Key], s.alive(ss, g.Key)
	if have < want {
		taken := s.slotsTaken(ss, g.Key)
		for slot := 0; slot < want && have < want; slot++ {
			if taken[slot] || !s.slotFor(ss, g.Key, slot).ready(s.now()) {
				continue
			}
			if ss.ceiling >= 0 && s.runningOf(ss) >= ss.ceiling {
				return
			}
			if limit := s.set.Connections.Limit; limit > 0 && len(s.procs) >= limit {
				// The connection cap: a process still finishing its jobs
				// holds its connections until it exits.
				return
			}
			if err := s.spawn(ctx, events, ss, g, slot, false); err != nil {
				s.summary.Crashed++
				s.failed(ss, g.Key, slot, 0, "spawn failed", err)
				return
			}
			have++
		}
	}
	if have > want {
		// Stop the newest first: the oldest are closest to recycling anyway.
		var group []*proc
		for _, p := range s.procs {
			if p.sup == ss && p.group == g.Key && !p.stopping && !p.isolated {
				group = append(group, p)
			}
		}
		slices.SortFunc(group, func(a, b *proc) int { return b.started.Compare(a.started) })
		for _, p := range group[:have-want] {
			s.stop(p)
		}
	}
}

func (s *supervision) stop(p *proc) {
	p.stopping = true
	if err := p.p.Send(spawner.Command{Type: spawner.CommandStop}); err != nil {
		s.log.Warn("send stop failed; killing", "pid", p.p.PID(), "err", err)
		_ = p.p.Kill()
	}
}

// isolationWanted reports whether a group wants an isolation process now:
// its supervisor is not paused, housekeeping read ready suspects on its
// queues (those not paused) after the group's last isolation process
// exited, and none runs or is stopping.
func (s *supervision) isolationWanted(ss *supState, g supervisor.Group) bool {
	if s.stopping || ss.paused || !s.suspectsNow.at.After(ss.isoEnded[g.Key]) {
		return false
	}
	n := 0
	for _, q := range g.Queues {
		if !s.pausedQueues[q] {
			n += s.suspectsNow.counts[q]
		}
	}
	if n == 0 {
		return false
	}
	for _, p := range s.procs {
		if p.sup == ss && p.group == g.Key && p.isolated {
			return false
		}
	}
	return true
}

// reconcileIsolation starts the isolation process of a group that wants
// one (isolationWanted) once its slot's backoff has passed. It counts
// against a fleet-wide budget and the connection cap like any process,
// and outside the allocation.
//
// A job that was in two processes that died (a suspect, see
// store.SuspectCrashes) is no longer claimed by ordinary workers: it runs
// alone, in an isolation process of its group (spawner.Spec.Isolate: one
// slot, suspects only, exiting once none is ready), which supervision
// starts when housekeeping reads ready suspects on the group's queues.
// A crash of an isolation process is its one job's: housekeeping charges
// the attempt to that job, which fails after its tries with how its
// process ended and the end of its stderr, while the jobs that were beside
// the crashes that made it a suspect lost no try. An isolation process
// that crashed after it got ready is replaced as soon as suspects are
// ready again, with no backoff of its slot: the job it ran carries the
// crash, and that job's own backoff and tries pace it. One that crashed
// before it got ready is backed off like any process.
func (s *supervision) reconcileIsolation(ctx context.Context, events chan<- spawner.Event, ss *supState, g supervisor.Group) {
	if !s.isolationWanted(ss, g) || !ss.isolation[g.Key].ready(s.now()) {
		return
	}
	if ss.ceiling >= 0 && s.runningOf(ss) >= ss.ceiling {
		return
	}
	if limit := s.set.Connections.Limit; limit > 0 && len(s.procs) >= limit {
		return
	}
	if err := s.spawn(ctx, events, ss, g, 0, true); err != nil {
		s.summary.Crashed++
		r := ss.isolation[g.Key]
		r.fail(s.now(), 0)
		s.log.Warn("isolation process spawn failed; retrying after backoff", "supervisor", ss.sup.Name, "queues", g.Key,
			"retry_in", r.retryIn(), "err", err)
		return
	}
	s.log.Info("started an isolation process: jobs that were in two crashed processes run in it, alone",
		"supervisor", ss.sup.Name, "queues", g.Key, "suspects", s.suspectsNow.counts)
}

func (s *supervision) spawn(ctx context.Context, events chan<- spawner.Event, ss *supState, g supervisor.Group, slot int, isolated bool) error {
	s.seq++
	instance := s.member.Instance()
	spec := spawner.Spec{
		Supervisor: ss.sup.Name,
		Queues:     g.Queues,
		Master:     instance,
		MasterTTL:  s.set.TTL,
		// Worker names carry the instance's first digits, so two masters
		// under one name never hand out the same lease-holder name.
		Worker:        fmt.Sprintf("%s/%s/%s-%d", s.set.Name, ss.sup.Name, instance[:min(6, len(instance))], s.seq),
		Concurrency:   ss.sup.Concurrency,
		MaxJobs:       ss.sup.MaxJobs,
		MaxTime:       ss.sup.MaxTime,
		MaxMemoryMB:   ss.sup.MaxMemoryMB,
		Tries:         ss.sup.Tries,
		Backoff:       ss.sup.Backoff,
		Timeout:       ss.sup.Timeout,
		PayloadBudget: ss.sup.PayloadBudget,
		Paused:        ss.paused,
		PausedQueues:  pausedOf(g.Queues, s.pausedQueues),
	}
	if s.set.Connections.Worker > 0 {
		spec.MaxConns = s.set.Connections.WorkerPool()
	}
	if isolated {
		spec.Isolate, spec.Concurrency = true, 1
		spec.Worker += "-isolation"
	}
	p, err := s.spawner.Spawn(ctx, spec, events)
	if err != nil {
		return err
	}
	s.summary.Started++
	s.procs[p] = &proc{p: p, sup: ss, group: g.Key, slot: slot, isolated: isolated, started: s.now()}
	s.log.Debug("started worker", "supervisor", ss.sup.Name, "queues", g.Key, "slot", slot, "pid", p.PID(), "worker", spec.Worker)
	return nil
}

// failed records a crash or failed spawn in a process slot of a group and
// logs an error when the slot crash-loops.
func (s *supervision) failed(ss *supState, group string, slot int, lived time.Duration, what string, err error) {
	r := s.slotFor(ss, group, slot)
	looping := r.fail(s.now(), lived)
	attrs := []any{"supervisor", ss.sup.Name, "queues", group, "retry_in", r.retryIn(), "slot", slot}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	s.log.Warn("worker "+what+"; restarting after backoff", attrs...)
	if looping {
		s.log.Error("workers keep failing: five failures within a minute", "supervisor", ss.sup.Name,
			"queues", group, "failures", len(r.recent), "retry_in", r.retryIn(), "slot", slot)
	}
}

// handle applies one event from a process.
func (s *supervision) handle(ev spawner.Event) {
	p, ok := s.procs[ev.Process]
	if !ok {
		return
	}
	if r := ev.Report; r != nil {
		if r.Type == spawner.ReportHeartbeat || r.Type == spawner.ReportExiting {
			p.jobs, p.memoryMB = r.Jobs, r.MemoryMB
		}
		if r.Type == spawner.ReportHeartbeat {
			p.unwritten, p.unwrittenAt = r.Unwritten, s.now()
			if r.Unwritten == 0 {
				p.spared = false
			}
		}
		if r.Type == spawner.ReportExiting && r.Unsaved > 0 {
			s.summary.Unsaved += r.Unsaved
		}
		if r.Type == spawner.ReportReady || r.Type == spawner.ReportHeartbeat {
			p.ready = true
		}
		if r.Type == spawner.ReportWaiting && !p.ready {
			if p.waitingAt.IsZero() || r.Waiting != p.waiting {
				s.log.Warn("worker waits before it can start", "supervisor", p.sup.sup.Name, "queues", p.group,
					"pid", p.p.PID(), "waiting", r.Waiting)
			}
			p.waitingAt, p.waiting = s.now(), r.Waiting
		}
		return
	}
	exit := ev.Exit
	if exit == nil {
		return
	}
	delete(s.procs, ev.Process)
	s.summary.Jobs += p.jobs
	spec := p.p.Spec()
	lived := s.now().Sub(p.started)
	// Whatever the worker still held is released by housekeeping, at once;
	// the row keeps beating until that is done. After a crash no job of a
	// process that ran several is charged, and the one job of an isolation
	// process is (see reconcileIsolation); after any other exit (the
	// worker stopped by itself and gave back what it could) the attempt
	// counts.
	req := &releaseReq{worker: spec.Worker, tries: cmp.Or(spec.Tries, s.set.DefaultTries), reason: string(exit.Reason)}
	if exit.Reason == spawner.ExitCrash {
		req.crash = &crashInfo{isolated: p.isolated, exit: exit.Describe(), stderr: exit.Stderr, backoff: spec.Backoff,
			unstarted: ev.Unstarted}
	}
	s.releases.push(req)
	if p.isolated {
		p.sup.isoEnded[p.group] = s.now()
	}
	switch {
	case p.isolated && (exit.Reason == spawner.ExitCrash || exit.Reason == spawner.ExitError):
		s.summary.Crashed++
		r := p.sup.isolation[p.group]
		if !p.ready {
			r.fail(s.now(), lived)
			s.log.Warn("isolation process "+exit.Describe()+" before it got ready; restarting after backoff", "supervisor", spec.Supervisor,
				"queues", p.group, "retry_in", r.retryIn())
		} else {
			r.ok()
			s.log.Warn("isolation process "+exit.Describe()+": the job it ran alone is charged with the crash", "supervisor", spec.Supervisor,
				"queues", p.group, "pid", p.p.PID(), "worker", spec.Worker)
		}
	case p.isolated:
		p.sup.isolation[p.group].ok()
		s.log.Debug("isolation process exited", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason))
	case exit.Reason.Recycled():
		s.summary.Recycled++
		s.slotFor(p.sup, p.group, p.slot).ok()
		s.log.Info("worker recycled", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason), "jobs", p.jobs)
	case exit.Reason == spawner.ExitCrash || exit.Reason == spawner.ExitError:
		s.summary.Crashed++
		if !s.stopping {
			s.failed(p.sup, p.group, p.slot, lived, exit.Describe(), exit.Err)
		}
	case exit.Reason == spawner.ExitFenced:
		s.slotFor(p.sup, p.group, p.slot).ok()
		s.log.Warn("worker stopped: this master was out of the fleet's view for a ttl", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID())
	default:
		s.slotFor(p.sup, p.group, p.slot).ok()
		s.log.Debug("worker exited", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason))
	}
}

// shutdown stops every worker gracefully and waits for them (killing those
// still running after StopTimeout). The membership service keeps beating,
// as draining, all the while.
func (s *supervision) shutdown(events chan spawner.Event, why string) (Summary, error) {
	s.stopping = true
	s.publish() // beats draining at once
	s.log.Info("master stopping: workers finish their running jobs", "reason", why, "workers", len(s.procs))
	for _, p := range s.procs {
		if !p.stopping {
			s.stop(p)
		}
	}
	deadline := time.NewTimer(s.set.StopTimeout)
	defer deadline.Stop()
	hard := time.NewTimer(s.set.StopTimeout + 15*time.Second)
	defer hard.Stop()
	for len(s.procs) > 0 {
		select {
		case ev := <-events:
			s.handle(ev)
			s.publish()
			s.sig.event.Send(struct{}{})
		case <-deadline.C:
			s.log.Error("workers did not finish within the stop timeout: killing them", "workers", len(s.procs), "stop_timeout", s.set.StopTimeout)
			for _, p := range s.procs {
				_ = p.p.Kill()
			}
		case <-hard.C:
			return s.summary, fmt.Errorf("workers did not exit after being killed: %d left", len(s.procs))
		}
	}
	if s.summary.Unsaved > 0 {
		return s.summary, fmt.Errorf("%d finished jobs' outcomes were not written before the workers exited (the database did not take them within the drain timeout): their jobs are released later and run again", s.summary.Unsaved)
	}
	return s.summary, nil
}

// stateNow is starting until every supervisor has had its children, then
// running, or paused while every supervisor is paused, and draining from
// the moment shutdown begins.
func (s *supervision) stateNow() string {
	if s.stopping {
		return "draining"
	}
	if !s.running {
		// Before the first allocation nothing is owed yet: still starting.
		all := !s.lastBal.IsZero()
		for _, ss := range s.sups {
			for _, g := range ss.groups {
				if s.alive(ss, g.Key) < ss.alloc[g.Key] {
					all = false
				}
			}
		}
		if !all {
			return "starting"
		}
		s.running = true
	}
	for _, ss := range s.sups {
		if !ss.paused {
			return "running"
		}
	}
	return "paused"
}

// publish hands the beat the current state and report, and beats at once
// when the state changed.
func (s *supervision) publish() {
	r := &model.MasterReport{Supervisors: make([]model.ReportedSupervisor, 0, len(s.sups))}
	if s.set.Connections.Total > 0 {
		b := s.set.Connections
		r.Connections = &b
	}
	for _, ss := range s.sups {
		row := model.ReportedSupervisor{
			Name: ss.sup.Name, Queues: ss.sup.Queues, Balance: string(ss.sup.Balance), Paused: ss.paused, Processes: map[string]int{},
		}
		for _, g := range ss.groups {
			row.Processes[g.Key] = s.alive(ss, g.Key)
		}
		row.Running = s.runningOf(ss)
		if ss.claim >= 0 {
			c := ss.claim
			row.Claim = &c
		}
		r.Supervisors = append(r.Supervisors, row)
	}
	var jobs int64
	for _, p := range s.procs {
		jobs += p.jobs
		r.MemoryMB += p.memoryMB
	}
	now := s.now()
	s.jobSamples = append(s.jobSamples, jobSample{at: now, jobs: s.summary.Jobs + jobs})
	for len(s.jobSamples) > 1 && now.Sub(s.jobSamples[1].at) >= time.Minute {
		s.jobSamples = s.jobSamples[1:]
	}
	if first := s.jobSamples[0]; now.Sub(first.at) > time.Second {
		r.JobsPerMinute = float64(s.summary.Jobs+jobs-first.jobs) / now.Sub(first.at).Minutes()
	}
	prev := s.status.report.Swap(r)
	current, _ := s.status.load()
	if st := s.stateNow(); st != current || pauseChanged(prev, r) {
		// A state or pause change is beaten at once, so that every view
		// (fleet:masters, the dashboard) shows it within one round trip.
		s.status.state.Store(st)
		s.member.Kick()
	}
}
