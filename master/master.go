// Package master is the fleet master: it runs no jobs itself. It resolves
// supervisors into process groups, starts workers through a Spawner, balances
// them across queues, recycles and restarts them, applies pause and
// terminate requests stored in PostgreSQL, keeps its membership row beating,
// and releases the jobs of workers and masters that died.
//
// A master is a set of services, each a goroutine with its own loop, its
// own per-operation timeouts and the same lifecycle (started by Run, stopped
// once, in order). They start in this order, and stop in the reverse:
//
//  1. membership (package membership): the beat. It starts first, because
//     the first beat is the boot check and gives the instance its row
//     before any worker can claim under it, and stops last, because a peer
//     releases the jobs of a master whose row expired: the row keeps
//     beating, as draining, until the last child has exited and its jobs
//     are released.
//  2. housekeeping: the release of jobs of exited workers and of expired
//     members, the check for workers overdue on a job, and the sweep of
//     the concurrency limits (parked jobs that are due, into free slots).
//     It stops after
//     supervision, so that the jobs of the last exiting children are
//     released before the row goes.
//  3. shared state: pause flags and terminate requests, read every tick.
//  4. workload: queue counts and recent runtimes for the balancer, read
//     every balance cooldown.
//  5. duties: metrics snapshots, partition upkeep, trimming and long-wait
//     alerts, claimed per period across the fleet.
//  6. periodic: the ticks of the periodic schedules, each dispatched once
//     across the fleet (periodic.go). It stops right after supervision, so
//     a draining master keeps dispatching while its children finish.
//  7. supervision (the goroutine that called Run): children, balancing,
//     recycling and crash backoff. It never runs a statement itself, so a
//     slow query delays neither a beat nor a child's event; it reads what
//     the other services last published.
//
// Jobs never wait on any of them: children claim and finish on their own
// connections.
package master

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// On-stop behaviours of a master's row (fleet.on_stop).
const (
	// OnStopLeave deletes the row once the children are gone.
	OnStopLeave = "leave"
	// OnStopLinger writes one last draining row that lives Linger.
	OnStopLinger = "linger"
)

// Settings tune the master. Zero fields take the defaults below.
type Settings struct {
	// Tick is how often supervision, housekeeping, shared state and duties
	// run (default 1 s).
	Tick time.Duration
	// BeatInterval is the time between beats (default Tick); it must be
	// below half the TTL.
	BeatInterval time.Duration
	// BalanceCooldown is the time between rebalancing steps (default 3 s).
	BalanceCooldown time.Duration
	// BalanceMaxShift is how far one group moves per step (default 1).
	BalanceMaxShift int
	// TTL is how long the master's row outlives its last beat (default
	// 10 s). Another master releases the jobs of a master whose row
	// expired.
	TTL time.Duration
	// OnStop is OnStopLeave (default) or OnStopLinger.
	OnStop string
	// Linger is how long the last row lives with OnStopLinger (default
	// 30 s).
	Linger time.Duration
	// StartTimeout is how long a started worker may take to report ready
	// before it is killed and replaced (a crash, with backoff); default
	// 30 s. It is applied only while this master's own beats have held for
	// a ttl: a worker waiting for an unreachable database is not stuck.
	StartTimeout time.Duration
	// Connections is the fleet's connection budget (see
	// supervisor.ConnectionBudget): each worker is started with its pool
	// size, and under a cap (Limit above 0) the master keeps at most Limit
	// processes at once, those finishing their jobs included. The budget
	// is shown in the master's row (fleet:masters). Zero: none.
	Connections supervisor.Budget
	// StopTimeout is how long shutdown waits for workers to finish their
	// running jobs before killing them (default: DefaultTimeout +
	// TimeoutGrace + 5 s).
	StopTimeout time.Duration
	// RestartBase and RestartMax bound the delay before restarting a
	// crashed group (default 1 s doubling to 60 s).
	RestartBase, RestartMax time.Duration
	// DefaultTries is the tries of lost jobs that set none (default 3).
	DefaultTries int
	// DefaultTimeout and TimeoutGrace decide when a worker holding a job
	// is overdue and killed (defaults 60 s and 5 s; a few seconds of slack
	// are added so the worker's own watchdog acts first).
	DefaultTimeout, TimeoutGrace time.Duration
	// Name is the master's name in fleet_masters (default host:pid:nonce).
	// Several instances may share a name; each is told apart by its
	// random instance id.
	Name string
	// Version is reported in its row (default "dev").
	Version string
	// Logger receives the master's logs, under logger=fleet.
	Logger *slog.Logger
	// Now is the clock used for restart backoff and the balance cooldown
	// (default time.Now). Liveness never uses it: it is measured on the
	// database clock.
	Now func() time.Time
	// LongWait maps a queue to the wait, in seconds, that raises
	// OnLongWait (0 or absent: off).
	LongWait map[string]int
	// LongWaitCooldown is the least time between two alerts of one queue
	// across the fleet (default 15 minutes).
	LongWaitCooldown time.Duration
	// OnLongWait receives long-wait alerts, one at a time, from a goroutine
	// of the master's.
	OnLongWait func(context.Context, fleet.LongWaitDetected)
	// Trim says how long history is kept (defaults 24 h completed, 7 days
	// failed, 30 days metrics). The ticks recorded for periodic schedules
	// are kept as long as completed attempts.
	Trim store.TrimParams
	// Periodic are the schedules the master dispatches, each tick once
	// across every master running them.
	Periodic []periodic.Schedule
	// PeriodicGrace is how late a tick may be and still be on time
	// (default TTL): a tick no master dispatched within it was missed,
	// and its schedule's catch-up decides.
	PeriodicGrace time.Duration
}

func (s Settings) withDefaults() Settings {
	s.Tick = cmp.Or(s.Tick, defaults.BeatInterval)
	s.BeatInterval = cmp.Or(s.BeatInterval, s.Tick)
	s.BalanceCooldown = cmp.Or(s.BalanceCooldown, defaults.BalanceCooldown)
	s.BalanceMaxShift = cmp.Or(s.BalanceMaxShift, defaults.BalanceMaxShift)
	s.TTL = cmp.Or(s.TTL, defaults.TTL)
	s.OnStop = cmp.Or(s.OnStop, OnStopLeave)
	s.Linger = cmp.Or(s.Linger, defaults.Linger)
	s.RestartBase = cmp.Or(s.RestartBase, time.Second)
	s.RestartMax = cmp.Or(s.RestartMax, time.Minute)
	s.DefaultTries = cmp.Or(s.DefaultTries, defaults.Tries)
	s.DefaultTimeout = cmp.Or(s.DefaultTimeout, defaults.Timeout)
	s.TimeoutGrace = cmp.Or(s.TimeoutGrace, defaults.TimeoutGrace)
	s.StopTimeout = cmp.Or(s.StopTimeout, s.DefaultTimeout+s.TimeoutGrace+5*time.Second)
	s.StartTimeout = cmp.Or(s.StartTimeout, defaults.StartTimeout)
	s.Version = cmp.Or(s.Version, "dev")
	s.LongWaitCooldown = cmp.Or(s.LongWaitCooldown, defaults.LongWaitCooldown)
	s.Trim.CompletedHours = cmp.Or(s.Trim.CompletedHours, defaults.CompletedHours)
	s.Trim.FailedDays = cmp.Or(s.Trim.FailedDays, defaults.FailedDays)
	s.Trim.MetricsDays = cmp.Or(s.Trim.MetricsDays, defaults.MetricsDays)
	s.PeriodicGrace = cmp.Or(s.PeriodicGrace, s.TTL)
	if s.Name == "" {
		s.Name = DefaultName()
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s
}

// DefaultName is host:pid:nonce, the nonce random per call.
func DefaultName() string { return defaults.Name() }

// Summary is what a master did, returned by Run.
type Summary struct {
	// Started counts processes started.
	Started int
	// Recycled counts processes that exited at a recycling limit.
	Recycled int
	// Crashed counts processes that died without saying why, and spawns
	// that failed.
	Crashed int
	// Jobs counts the attempts its processes finished.
	Jobs int64
	// Unsaved counts finished attempts whose outcome its processes could
	// not write before exiting (the database was away): their jobs are
	// released later and run again.
	Unsaved int
}

// Option configures a Master.
type Option func(*Master)

// WithSpawner sets how workers are started (default: none; New fails
// without one).
func WithSpawner(s spawner.Spawner) Option { return func(m *Master) { m.spawner = s } }

// WithSettings sets the master's settings.
func WithSettings(s Settings) Option { return func(m *Master) { m.set = s } }

// Master supervises workers. Build it with New; call Run once.
type Master struct {
	st      *store.Store
	spawner spawner.Spawner
	set     Settings
	log     *slog.Logger
	sups    []*supState
	member  *membership.Service

	// Owned by supervision (the goroutine in Run).
	procs     map[spawner.Process]*proc
	startedAt time.Time // the row's started_at, database clock
	lastBal   time.Time
	stopping  bool
	running   bool // every supervisor had its children once
	summary   Summary
	// pausedQueues is the set of queues paused across every supervisor.
	pausedQueues map[string]bool
	seq          int // numbers worker names
	workload     map[string]balancer.QueueWorkload
	jobSamples   []jobSample

	// Published by supervision for the beat.
	report atomic.Pointer[masterReport]
	state  atomic.Value // string

	// Channels from the services to supervision (latest value wins) and
	// back.
	stateCh    chan stateSnap
	workloadCh chan map[string]balancer.QueueWorkload
	killCh     chan []string
	releaseCh  chan *releaseReq

	alerts chan fleet.LongWaitDetected

	// logs rate-limits the failures of the services' statements.
	logs ratelog.Log

	// Owned by housekeeping.
	lastSweep       time.Time
	limitCursor     string // where the next limit sweep's walk starts
	pendingReleases []*releaseReq
	releasing       map[string]time.Time // expired member@expiry -> first release try (view clock)

	// Owned by the duties goroutine.
	dutyMemo *dutyMemo
}

type supState struct {
	sup      supervisor.Supervisor
	groups   []supervisor.Group
	alloc    balancer.Allocation
	paused   bool
	restarts map[string]*restarts
	// ceiling is the process ceiling this master confirmed for the
	// supervisor's fleet-wide budget (-1: no budget).
	ceiling int
	// claim is the ceiling published in the last beat.
	claim int
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

type proc struct {
	p        spawner.Process
	sup      *supState
	group    string
	started  time.Time
	ready    bool // it reported ready (or beat)
	killed   bool // killed for not getting ready in time
	stopping bool
	// waitingAt is when it last reported that it waits (for the database
	// or a free connection) before getting ready; waiting says for what.
	waitingAt time.Time
	waiting   string
	jobs      int64
	memoryMB  float64
}

type jobSample struct {
	at   time.Time
	jobs int64
}

// New returns a master for supervisors.
func New(st *store.Store, supervisors []supervisor.Supervisor, opts ...Option) (*Master, error) {
	m := &Master{st: st, procs: map[spawner.Process]*proc{}, releasing: map[string]time.Time{}}
	for _, o := range opts {
		o(m)
	}
	if m.spawner == nil {
		return nil, errors.New("master needs a spawner")
	}
	if len(supervisors) == 0 {
		return nil, errors.New("master needs at least one supervisor")
	}
	m.set = m.set.withDefaults()
	if m.set.OnStop != OnStopLeave && m.set.OnStop != OnStopLinger {
		return nil, fmt.Errorf("on stop %q: want %q or %q", m.set.OnStop, OnStopLeave, OnStopLinger)
	}
	m.log = m.set.Logger.With("logger", "fleet", "master", m.set.Name)
	for _, s := range supervisors {
		ss := &supState{sup: s, groups: s.Groups(), alloc: balancer.Allocation{}, restarts: map[string]*restarts{}, ceiling: -1, claim: -1}
		for _, g := range ss.groups {
			ss.restarts[g.Key] = &restarts{}
		}
		if s.FleetMaxProcesses > 0 {
			ss.ceiling, ss.claim = 0, 0
		}
		m.sups = append(m.sups, ss)
	}
	member, err := membership.New(st, membership.Config{
		Kind: store.KindMaster, Name: m.set.Name, Version: m.set.Version,
		TTL: m.set.TTL, Interval: m.set.BeatInterval, Logger: m.log,
		Report: func() (string, any) { return m.currentState(), m.report.Load() },
	})
	if err != nil {
		return nil, fmt.Errorf("master %q: %w", m.set.Name, err)
	}
	m.member = member
	m.state.Store("starting")
	m.publish()
	return m, nil
}

// Name is the master's name in fleet_masters.
func (m *Master) Name() string { return m.set.Name }

// Instance is this master's instance id, the key of its row and the
// reserved_master of its workers' jobs.
func (m *Master) Instance() string { return m.member.Instance() }

// Membership is the master's membership service (its view, beat counts).
func (m *Master) Membership() *membership.Service { return m.member }

// Run supervises until ctx ends or a terminate request made after this
// master started arrives; then it stops every worker gracefully (they finish
// their running jobs within StopTimeout), and leaves the fleet (or lingers)
// once the last of them has exited and its jobs are released.
func (m *Master) Run(ctx context.Context) (Summary, error) {
	if err := m.member.Start(ctx); err != nil {
		return m.summary, err
	}
	view := m.member.View()
	if me, ok := view.Find(m.Instance()); ok {
		m.startedAt = me.StartedAt
	}
	m.log.Info("master started", "instance", m.Instance(), "supervisors", len(m.sups), "ttl", m.set.TTL)

	m.stateCh = make(chan stateSnap, 1)
	m.workloadCh = make(chan map[string]balancer.QueueWorkload, 1)
	m.killCh = make(chan []string, 1)
	m.releaseCh = make(chan *releaseReq, 1024)

	// Services after membership, in the documented order; stopped in
	// reverse by the deferred calls.
	var alertsDone sync.WaitGroup
	if m.set.OnLongWait != nil {
		m.alerts = make(chan fleet.LongWaitDetected, 64)
		alertsDone.Go(func() { m.notify(context.WithoutCancel(ctx)) })
	}
	house := startLoop(m.set.Tick, m.housekeep, m.drainReleases)
	// The first pause state and workload are read before any child starts.
	m.readState(context.WithoutCancel(ctx))
	m.readWorkload(context.WithoutCancel(ctx))
	state := startLoop(m.set.Tick, m.readState, nil)
	work := startLoop(m.set.BalanceCooldown, m.readWorkload, nil)
	duties := startLoop(m.set.Tick, m.duties, m.lastSnapshot)
	var ticks *loop
	if len(m.set.Periodic) > 0 {
		ticks = startTimedLoop(m.periodicRound)
	}

	sum, err := m.supervise(ctx)

	// Once the children are gone, what is left (the rounds in flight, the
	// last snapshot, the release of what exited workers held, leaving the
	// fleet) shares StopBudget: a frozen database cannot hold the stop
	// longer.
	fctx, cancel := context.WithTimeout(context.Background(), StopBudget)
	defer cancel()
	if ticks != nil {
		ticks.stop(fctx)
	}
	duties.stop(fctx)
	if m.alerts != nil {
		close(m.alerts)
		alertsDone.Wait()
	}
	work.stop(fctx)
	state.stop(fctx)
	house.stop(fctx) // releases what exited workers still held
	linger := time.Duration(0)
	if m.set.OnStop == OnStopLinger {
		linger = m.set.Linger
	}
	if serr := m.member.Stop(fctx, linger); serr != nil {
		m.log.Warn("leave the fleet failed; the row expires on its own", "err", serr)
	}
	m.log.Info("master stopped", "started", m.summary.Started, "recycled", m.summary.Recycled,
		"crashed", m.summary.Crashed, "jobs", m.summary.Jobs, "on_stop", m.set.OnStop)
	return sum, err
}

// StopBudget bounds what a master does after its last child exited: with
// a healthy database it takes milliseconds; with a frozen one, the master
// exits StopBudget after its children.
const StopBudget = 5 * time.Second

// loop is one background service: run every interval until stopped, then
// final once.
type loop struct {
	quit     chan struct{}
	done     chan struct{}
	once     sync.Once
	cancel   context.CancelFunc // the context of its rounds
	finalCtx context.Context    // set by stop, before quit closes
}

func startLoop(every time.Duration, run func(context.Context), final func(context.Context)) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{quit: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-l.quit:
				if final != nil {
					final(l.finalCtx)
				}
				return
			case <-t.C:
				run(ctx)
			}
		}
	}()
	return l
}

// stop cancels the loop's round in flight, runs its final round on ctx
// (which bounds it) and waits for it; safe twice.
func (l *loop) stop(ctx context.Context) {
	l.once.Do(func() {
		l.finalCtx = ctx
		l.cancel()
		close(l.quit)
	})
	<-l.done
}

// supervise is the supervision service: it runs in Run's goroutine until
// ctx ends or a terminate request arrives, then drains.
func (m *Master) supervise(ctx context.Context) (Summary, error) {
	events := make(chan spawner.Event, 64)
	m.applyState(m.drainState())
	m.applyWorkload()
	m.rebalance()
	m.reconcileAll(ctx, events)

	tick := time.NewTicker(m.set.Tick)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		m.armWake(wake)
		select {
		case <-ctx.Done():
			return m.shutdown(events, "stopped")
		case ev := <-events:
			m.handle(ev)
			m.reconcileAll(ctx, events)
		case <-wake.C:
			m.reconcileAll(ctx, events)
		case snap := <-m.stateCh:
			if m.applyState(snap) {
				return m.shutdown(events, "terminate requested")
			}
		case ws := <-m.killCh:
			m.killOverdue(ws)
		case <-tick.C:
			m.killUnready()
			m.applyWorkload()
			m.applyBudgets()
			if m.set.Now().Sub(m.lastBal) >= m.set.BalanceCooldown {
				m.rebalance()
			}
			m.reconcileAll(ctx, events)
		}
		m.publish()
	}
}

// armWake points the wake timer at the earliest restart that is waiting
// out its backoff, so a replacement starts on time rather than at the next
// tick.
func (m *Master) armWake(t *time.Timer) {
	var next time.Time
	now := m.set.Now()
	for _, s := range m.sups {
		for key, r := range s.restarts {
			if r.ready(now) || m.alive(s, key) >= s.alloc[key] {
				continue
			}
			if next.IsZero() || r.next.Before(next) {
				next = r.next
			}
		}
	}
	d := time.Hour
	if !next.IsZero() {
		d = max(next.Sub(now), time.Millisecond)
	}
	t.Reset(d)
}

func (m *Master) currentState() string {
	s, _ := m.state.Load().(string)
	return s
}

// stateNow is starting until every supervisor has had its children, then
// running, or paused while every supervisor is paused, and draining from
// the moment shutdown begins.
func (m *Master) stateNow() string {
	if m.stopping {
		return "draining"
	}
	if !m.running {
		// Before the first allocation nothing is owed yet: still starting.
		all := !m.lastBal.IsZero()
		for _, s := range m.sups {
			for _, g := range s.groups {
				if m.alive(s, g.Key) < s.alloc[g.Key] {
					all = false
				}
			}
		}
		if !all {
			return "starting"
		}
		m.running = true
	}
	for _, s := range m.sups {
		if !s.paused {
			return "running"
		}
	}
	return "paused"
}

// masterReport is the report in the master's row: small, and capped by
// the membership service.
type masterReport struct {
	Supervisors   []supRow `json:"supervisors"`
	JobsPerMinute float64  `json:"jobs_per_minute"`
	MemoryMB      float64  `json:"memory_mb"`
	// Connections is the budget of Settings.Connections (absent when
	// none is set).
	Connections *supervisor.Budget `json:"connections,omitempty"`
}

// supRow is one supervisor of the report: what every reader decodes
// (fleet.ReportedSupervisor) and what only masters read.
type supRow struct {
	fleet.ReportedSupervisor
	// Claim is the ceiling this master may grow to under the fleet-wide
	// budget (absent without one).
	Claim *int `json:"claim,omitempty"`
}

// publish hands the beat the current state and report, and beats at once
// when the state changed.
func (m *Master) publish() {
	r := &masterReport{Supervisors: make([]supRow, 0, len(m.sups))}
	if m.set.Connections.Total > 0 {
		b := m.set.Connections
		r.Connections = &b
	}
	for _, s := range m.sups {
		row := supRow{ReportedSupervisor: fleet.ReportedSupervisor{
			Name: s.sup.Name, Queues: s.sup.Queues, Balance: string(s.sup.Balance), Paused: s.paused, Processes: map[string]int{},
		}}
		for _, g := range s.groups {
			row.Processes[g.Key] = m.alive(s, g.Key)
		}
		row.Running = m.runningOf(s)
		if s.claim >= 0 {
			c := s.claim
			row.Claim = &c
		}
		r.Supervisors = append(r.Supervisors, row)
	}
	var jobs int64
	for _, p := range m.procs {
		jobs += p.jobs
		r.MemoryMB += p.memoryMB
	}
	now := time.Now()
	m.jobSamples = append(m.jobSamples, jobSample{at: now, jobs: m.summary.Jobs + jobs})
	for len(m.jobSamples) > 1 && now.Sub(m.jobSamples[1].at) >= time.Minute {
		m.jobSamples = m.jobSamples[1:]
	}
	if first := m.jobSamples[0]; now.Sub(first.at) > time.Second {
		r.JobsPerMinute = float64(m.summary.Jobs+jobs-first.jobs) / now.Sub(first.at).Minutes()
	}
	prev := m.report.Swap(r)
	if st := m.stateNow(); st != m.currentState() || pauseChanged(prev, r) {
		// A state or pause change is beaten at once, so that every view
		// (fleet:masters, the dashboard) shows it within one round trip.
		m.state.Store(st)
		m.member.Kick()
	}
}

// pauseChanged reports whether a supervisor's pause flag differs between
// two reports.
func pauseChanged(a, b *masterReport) bool {
	if a == nil || b == nil || len(a.Supervisors) != len(b.Supervisors) {
		return a != b
	}
	for i := range a.Supervisors {
		if a.Supervisors[i].Paused != b.Supervisors[i].Paused {
			return true
		}
	}
	return false
}

// stateSnap is what the shared-state service read.
type stateSnap struct {
	ok        bool
	keys      map[string]bool
	queues    map[string]bool
	terminate bool
}

// readState is the shared-state service: it reads pause flags and
// terminate requests and hands them to supervision.
func (m *Master) readState(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(m.set.Tick*3, 3*time.Second))
	defer cancel()
	rows, err := m.st.StateList(rctx, "pause:", store.StateTerminate)
	if err != nil {
		m.logs.Fail(m.log, "state", "read fleet state failed; keeping the last pause state", "err", err)
		return
	}
	m.logs.OK(m.log, "state", "reading fleet state works again")
	snap := stateSnap{ok: true, keys: map[string]bool{}, queues: map[string]bool{}}
	for _, r := range rows {
		snap.keys[r.Key] = true
		if r.Key == store.StateTerminate && r.UpdatedAt.After(m.startedAt) {
			snap.terminate = true
		}
		if q, ok := strings.CutPrefix(r.Key, store.StatePauseQueuePrefix); ok {
			snap.queues[q] = true
		}
	}
	select {
	case <-m.stateCh: // replace an unread older one
	default:
	}
	m.stateCh <- snap
}

// drainState returns the snapshot waiting for supervision, if any.
func (m *Master) drainState() stateSnap {
	select {
	case s := <-m.stateCh:
		return s
	default:
		return stateSnap{}
	}
}

// applyState applies pause flags and reports whether a terminate request
// newer than this master arrived.
func (m *Master) applyState(snap stateSnap) (terminate bool) {
	if !snap.ok {
		return false
	}
	if !maps.Equal(snap.queues, m.pausedQueues) {
		m.pausedQueues = snap.queues
		m.log.Info("paused queues", "queues", slices.Sorted(maps.Keys(snap.queues)))
		for _, p := range m.procs {
			if p.stopping {
				continue
			}
			cmd := spawner.Command{Type: spawner.CommandPauseQueues, Queues: pausedOf(p.p.Spec().Queues, snap.queues)}
			if err := p.p.Send(cmd); err != nil {
				m.log.Warn("send command failed", "command", cmd.Type, "pid", p.p.PID(), "err", err)
			}
		}
	}
	for _, s := range m.sups {
		paused := snap.keys[store.StatePauseAll] || snap.keys[store.StatePauseSupervisorPrefix+s.sup.Name]
		if paused == s.paused {
			continue
		}
		s.paused = paused
		cmd := spawner.Command{Type: spawner.CommandContinue}
		if paused {
			cmd.Type = spawner.CommandPause
		}
		m.log.Info("supervisor "+string(cmd.Type), "supervisor", s.sup.Name)
		for _, p := range m.procs {
			if p.sup == s && !p.stopping {
				if err := p.p.Send(cmd); err != nil {
					m.log.Warn("send command failed", "command", cmd.Type, "pid", p.p.PID(), "err", err)
				}
			}
		}
	}
	return snap.terminate
}

// releaseReq asks housekeeping to release what an exited worker held.
type releaseReq struct {
	worker   string
	tries    int
	reason   string
	failures int
}

// housekeep is the housekeeping service's tick: it releases the jobs of
// exited workers and of members whose rows expired, and finds workers of
// this master holding a job far past its timeout.
func (m *Master) housekeep(ctx context.Context) {
	m.drainReleases(ctx)
	m.releaseExpired(ctx)
	m.sweepLimits(ctx)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	overdue, err := m.st.WorkerOverdue(octx, m.Instance(), m.set.DefaultTimeout, m.set.TimeoutGrace+5*time.Second)
	if err != nil {
		m.logs.Fail(m.log, "overdue", "look for overdue workers failed", "err", err)
		return
	}
	m.logs.OK(m.log, "overdue", "looking for overdue workers works again")
	if len(overdue) > 0 {
		select {
		case m.killCh <- overdue:
		default: // supervision has the previous list still; the next tick sends again
		}
	}
}

// drainReleases releases the jobs of every exited worker queued so far.
// A release that fails (the database away, or read-only) is kept and tried
// again at the next tick: nobody else would release them, since this
// master's row lives on.
func (m *Master) drainReleases(ctx context.Context) {
	for {
		select {
		case r := <-m.releaseCh:
			m.pendingReleases = append(m.pendingReleases, r)
			continue
		default:
		}
		break
	}
	kept := m.pendingReleases[:0]
	for _, r := range m.pendingReleases {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lost, err := m.st.JobReleaseWorker(rctx, r.worker, r.tries, r.reason)
		cancel()
		switch {
		case err != nil:
			kept = append(kept, r)
			if r.failures++; r.failures == 1 {
				m.log.Warn("release the jobs of an exited worker failed; retrying every tick", "worker", r.worker, "err", err)
			}
		case lost.Released+lost.Failed > 0:
			m.log.Warn("released the jobs of a lost worker", "worker", r.worker, "released", lost.Released, "failed", lost.Failed)
		}
	}
	m.pendingReleases = kept
}

// sweepEvery is how often a master runs the full sweep for jobs whose
// holder has no row at all.
const sweepEvery = time.Minute

// releaseExpired releases the jobs of members that are offline in the
// view, once this master's own beats have held for a whole ttl.
func (m *Master) releaseExpired(ctx context.Context) {
	if !m.member.Trusted() {
		return
	}
	view := m.member.View()
	// An expired member's jobs are released on this master's ticks for one
	// ttl from the first try (a claim in flight at the expiry commits within
	// that); anything left after is the minute sweep's. The row itself
	// stays in the view for minutes, offline.
	var gone []string
	seen := map[string]bool{}
	for _, mem := range view.Members {
		if mem.Live(view.At) || mem.Instance == m.Instance() {
			continue
		}
		key := mem.Instance + "@" + mem.ExpiresAt.String()
		seen[key] = true
		first, ok := m.releasing[key]
		if !ok {
			first = view.At
			m.releasing[key] = first
		}
		if view.At.Sub(first) <= m.set.TTL {
			gone = append(gone, mem.Instance)
		}
	}
	for key := range m.releasing {
		if !seen[key] {
			delete(m.releasing, key)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if len(gone) > 0 {
		lost, err := m.st.MemberRelease(rctx, gone, m.set.DefaultTries)
		if err != nil {
			m.logs.Fail(m.log, "release", "release the jobs of expired members failed", "err", err)
		} else if lost.Released+lost.Failed > 0 {
			m.log.Warn("released the jobs of members that stopped beating", "members", gone, "released", lost.Released, "failed", lost.Failed)
		}
	}
	if time.Since(m.lastSweep) >= sweepEvery {
		m.lastSweep = time.Now()
		lost, err := m.st.MemberSweep(rctx, m.set.DefaultTries, m.set.DefaultTimeout, m.set.TimeoutGrace+time.Minute)
		if err != nil {
			m.logs.Fail(m.log, "sweep", "sweep for jobs without a live holder failed", "err", err)
		} else if lost.Released+lost.Failed > 0 {
			m.log.Warn("released jobs whose holder has no membership row", "released", lost.Released, "failed", lost.Failed)
		}
	}
}

// Bounds of one tick's limit sweep.
const (
	// limitSweepKeys is the most keys with parked jobs one tick visits; the
	// next tick goes on from where it stopped.
	limitSweepKeys = 100
	// limitSweepPerKey is the most jobs of one key one tick unparks.
	limitSweepPerKey = 1000
)

// sweepLimits is the backstop of the concurrency limits, once per tick on
// every master: parked jobs that became due (their delay or their retry's
// backoff passed, or no handoff saw them) get the free slots of their key,
// and a key's count of unparked jobs is set right if jobs were deleted by
// other paths. Slots are handed over as jobs finish, in the finishing
// statement: this only covers what a handoff cannot. Masters sweeping at
// once skip each other's keys (store.LimitSweep). A tick with no parked
// job costs one index probe.
func (m *Master) sweepLimits(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := m.st.LimitSweep(sctx, store.LimitSweepParams{After: m.limitCursor, Keys: limitSweepKeys, PerKey: limitSweepPerKey})
	if err != nil {
		m.logs.Fail(m.log, "limits", "sweep of the concurrency limits failed", "err", err)
		return
	}
	m.logs.OK(m.log, "limits", "the sweep of the concurrency limits works again")
	m.limitCursor = res.Next
	if res.Repaired > 0 {
		m.log.Info("concurrency limits recounted: jobs of these keys left the queue without freeing their slot",
			"keys", res.Repaired, "unparked", res.Unparked)
	} else if res.Unparked > 0 {
		m.log.Debug("parked jobs given free slots of their limits", "unparked", res.Unparked, "queues", res.Queues)
	}
}

// killUnready kills workers that did not report ready within
// StartTimeout (they hang while starting), but only while this master's
// own beats have held for a ttl: when the database was away, a worker
// waiting for it (retrying every few seconds) is not stuck. Nor is one
// that keeps reporting that it waits (spawner.ReportWaiting: the server
// has no connection left for it, say).
func (m *Master) killUnready() {
	if !m.member.Trusted() {
		return
	}
	now := m.set.Now()
	for _, p := range m.procs {
		if p.ready || p.killed || p.stopping || now.Sub(p.started) < m.set.StartTimeout {
			continue
		}
		if !p.waitingAt.IsZero() && now.Sub(p.waitingAt) < m.set.StartTimeout {
			continue // it says it waits for the database: not hanging
		}
		p.killed = true
		m.log.Error("worker did not get ready within the start timeout: killing it", "supervisor", p.sup.sup.Name,
			"queues", p.group, "pid", p.p.PID(), "start_timeout", m.set.StartTimeout)
		_ = p.p.Kill()
	}
}

// killOverdue kills this master's workers named in overdue.
func (m *Master) killOverdue(overdue []string) {
	for _, w := range overdue {
		for _, p := range m.procs {
			if p.p.Spec().Worker == w {
				m.log.Error("worker holds a job past its timeout and grace: killing it", "worker", w, "pid", p.p.PID())
				_ = p.p.Kill()
			}
		}
	}
}

// readWorkload is the workload service: the counts of queue_counts and
// the mean runtimes of the last 5 complete minutes from the metrics
// snapshots (1 s per job for a queue that has none), neither of which
// reads the job history, so a step costs the same however much history
// there is.
func (m *Master) readWorkload(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := m.st.QueueCounts(rctx)
	if err != nil {
		m.logs.Fail(m.log, "workload", "read workload failed; keeping the current allocation", "err", err)
		return
	}
	m.logs.OK(m.log, "workload", "reading the workload works again")
	runtimes := map[string]float64{}
	if stats, err := m.st.QueueRuntimes(rctx); err != nil {
		m.logs.Fail(m.log, "runtimes", "read average runtimes failed; assuming 1 s per job", "err", err)
	} else {
		for _, s := range stats {
			runtimes[s.Queue] = s.AvgRuntimeMs
		}
	}
	workload := map[string]balancer.QueueWorkload{}
	for _, c := range counts {
		workload[c.Queue] = balancer.NewQueueWorkload(c.Queue, int(c.Pending), int(c.Reserved), 0, runtimes[c.Queue])
	}
	select {
	case <-m.workloadCh:
	default:
	}
	m.workloadCh <- workload
}

// applyWorkload takes the latest workload the workload service read.
func (m *Master) applyWorkload() {
	select {
	case w := <-m.workloadCh:
		m.workload = w
	default:
	}
}

// applyBudgets recomputes, for each supervisor with a fleet-wide budget,
// the ceiling of this master from its view: its Share of the budget over
// the live masters running the supervisor, and no more than the budget
// minus what the others run or have claimed. The ceiling it may grow to is
// the smaller of that and the claim in its own row of the view (what the
// beat that read the view wrote, so what any later view of the others
// holds), so two masters that grow at once never both take the same room.
// A drop applies at once.
func (m *Master) applyBudgets() {
	shrink := false
	view := m.member.View()
	for _, s := range m.sups {
		n := s.sup.FleetMaxProcesses
		if n <= 0 {
			continue
		}
		members := []store.Member{{Instance: m.Instance()}}
		others := 0
		for _, mem := range view.Live(store.KindMaster) {
			if mem.Instance == m.Instance() {
				continue
			}
			row, ok := reportedSup(mem.Report, s.sup.Name)
			if !ok {
				continue
			}
			members = append(members, mem)
			others += max(row.Running, derefOr(row.Claim, 0))
		}
		computed := max(0, min(membership.Share(s.sup.Name, n, members, m.Instance()), n-others))
		// The claim others can see now is the one in this master's own
		// row of the view: written by the very beat that read the view.
		prev := 0
		if me, ok := view.Find(m.Instance()); ok {
			if row, ok := reportedSup(me.Report, s.sup.Name); ok {
				prev = derefOr(row.Claim, 0)
			}
		}
		s.claim = computed
		next := min(prev, computed)
		if next != s.ceiling {
			m.log.Info("fleet-wide budget", "supervisor", s.sup.Name, "fleet_max_processes", n,
				"masters", len(members), "ceiling", next)
		}
		s.ceiling = next
		shrink = shrink || s.alloc.Total() > s.ceiling
	}
	if shrink {
		m.rebalance() // at once, not at the next cooldown
	}
}

func derefOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// reportedSup finds supervisor name in a master's report.
func reportedSup(raw []byte, name string) (supRow, bool) {
	var r masterReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return supRow{}, false
	}
	for _, s := range r.Supervisors {
		if s.Name == name {
			return s, true
		}
	}
	return supRow{}, false
}

// rebalance computes each supervisor's next allocation from the latest
// workload and its ceiling.
func (m *Master) rebalance() {
	m.lastBal = m.set.Now()
	for _, s := range m.sups {
		current := balancer.Allocation{}
		for _, g := range s.groups {
			current[g.Key] = m.alive(s, g.Key)
		}
		next := balancer.NextAllocation(s.sup, current, balanceWorkload(m.workload, s.sup.Queues, s.paused, m.pausedQueues),
			m.set.BalanceMaxShift, s.ceiling)
		if !maps.Equal(next, s.alloc) {
			m.log.Info("allocation", "supervisor", s.sup.Name, "processes", next)
		}
		s.alloc = next
	}
}

// balanceWorkload is the workload a supervisor is balanced by: a queue
// that is paused, by itself or with its whole supervisor, counts as idle,
// whatever its backlog. Under balance "auto" it then keeps its
// min_processes only, and the spare processes go to the queues that can
// work; "simple" and "off" do not weigh workloads, so for them nothing
// changes. workload is not modified.
func balanceWorkload(workload map[string]balancer.QueueWorkload, queues []string, supPaused bool, paused map[string]bool) map[string]balancer.QueueWorkload {
	if !supPaused && !slices.ContainsFunc(queues, func(q string) bool { return paused[q] }) {
		return workload
	}
	out := maps.Clone(workload)
	for _, q := range queues {
		if supPaused || paused[q] {
			delete(out, q) // a missing queue is idle
		}
	}
	return out
}

// alive counts the processes of a group that are not stopping: a process
// that is on its way out is never counted as capacity.
func (m *Master) alive(s *supState, group string) int {
	n := 0
	for _, p := range m.procs {
		if p.sup == s && p.group == group && !p.stopping {
			n++
		}
	}
	return n
}

// running counts every process of a supervisor, stopping ones included.
func (m *Master) runningOf(s *supState) int {
	n := 0
	for _, p := range m.procs {
		if p.sup == s {
			n++
		}
	}
	return n
}

func (m *Master) reconcileAll(ctx context.Context, events chan<- spawner.Event) {
	if m.stopping {
		return
	}
	for _, s := range m.sups {
		for _, g := range s.groups {
			m.reconcile(ctx, events, s, g)
		}
	}
}

// reconcile starts or stops processes of one group to meet its allocation.
// Under a fleet-wide budget a start also waits until the supervisor's
// processes, stopping ones included, are below the ceiling.
func (m *Master) reconcile(ctx context.Context, events chan<- spawner.Event, s *supState, g supervisor.Group) {
	want, have := s.alloc[g.Key], m.alive(s, g.Key)
	for ; have < want; have++ {
		r := s.restarts[g.Key]
		if !r.ready(m.set.Now()) {
			return
		}
		if s.ceiling >= 0 && m.runningOf(s) >= s.ceiling {
			return
		}
		if limit := m.set.Connections.Limit; limit > 0 && len(m.procs) >= limit {
			// The connection cap: a process still finishing its jobs
			// holds its connections until it exits.
			return
		}
		if err := m.spawn(ctx, events, s, g); err != nil {
			m.summary.Crashed++
			m.failed(s, g.Key, 0, "spawn failed", err)
			return
		}
	}
	if have > want {
		// Stop the newest first: the oldest are closest to recycling anyway.
		var group []*proc
		for _, p := range m.procs {
			if p.sup == s && p.group == g.Key && !p.stopping {
				group = append(group, p)
			}
		}
		slices.SortFunc(group, func(a, b *proc) int { return b.started.Compare(a.started) })
		for _, p := range group[:have-want] {
			m.stop(p)
		}
	}
}

func (m *Master) stop(p *proc) {
	p.stopping = true
	if err := p.p.Send(spawner.Command{Type: spawner.CommandStop}); err != nil {
		m.log.Warn("send stop failed; killing", "pid", p.p.PID(), "err", err)
		_ = p.p.Kill()
	}
}

func (m *Master) spawn(ctx context.Context, events chan<- spawner.Event, s *supState, g supervisor.Group) error {
	m.seq++
	spec := spawner.Spec{
		Supervisor: s.sup.Name,
		Queues:     g.Queues,
		Master:     m.Instance(),
		MasterTTL:  m.set.TTL,
		// Worker names carry the instance's first digits, so two masters
		// under one name never hand out the same lease-holder name.
		Worker:       fmt.Sprintf("%s/%s/%s-%d", m.set.Name, s.sup.Name, m.Instance()[:6], m.seq),
		Concurrency:  s.sup.Concurrency,
		MaxJobs:      s.sup.MaxJobs,
		MaxTime:      s.sup.MaxTime,
		MaxMemoryMB:  s.sup.MaxMemoryMB,
		Tries:        s.sup.Tries,
		Backoff:      s.sup.Backoff,
		Timeout:      s.sup.Timeout,
		Paused:       s.paused,
		PausedQueues: pausedOf(g.Queues, m.pausedQueues),
	}
	if m.set.Connections.Worker > 0 {
		spec.MaxConns = m.set.Connections.WorkerPool()
	}
	p, err := m.spawner.Spawn(ctx, spec, events)
	if err != nil {
		return err
	}
	m.summary.Started++
	m.procs[p] = &proc{p: p, sup: s, group: g.Key, started: m.set.Now()}
	m.log.Debug("started worker", "supervisor", s.sup.Name, "queues", g.Key, "pid", p.PID(), "worker", spec.Worker)
	return nil
}

// failed records a crash or failed spawn of a group and logs an error when
// the group crash-loops.
func (m *Master) failed(s *supState, group string, lived time.Duration, what string, err error) {
	r := s.restarts[group]
	looping := r.fail(m.set.Now(), lived, m.set.RestartBase, m.set.RestartMax)
	attrs := []any{"supervisor", s.sup.Name, "queues", group, "retry_in", r.delay}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	m.log.Warn("worker "+what+"; restarting after backoff", attrs...)
	if looping {
		m.log.Error("workers keep failing: five failures within a minute", "supervisor", s.sup.Name,
			"queues", group, "failures", len(r.recent), "retry_in", r.delay)
	}
}

// handle applies one event from a process.
func (m *Master) handle(ev spawner.Event) {
	p, ok := m.procs[ev.Process]
	if !ok {
		return
	}
	if r := ev.Report; r != nil {
		if r.Type == spawner.ReportHeartbeat || r.Type == spawner.ReportExiting {
			p.jobs, p.memoryMB = r.Jobs, r.MemoryMB
		}
		if r.Type == spawner.ReportExiting && r.Unsaved > 0 {
			m.summary.Unsaved += r.Unsaved
		}
		if r.Type == spawner.ReportReady || r.Type == spawner.ReportHeartbeat {
			p.ready = true
		}
		if r.Type == spawner.ReportWaiting && !p.ready {
			if p.waitingAt.IsZero() || r.Waiting != p.waiting {
				m.log.Warn("worker waits before it can start", "supervisor", p.sup.sup.Name, "queues", p.group,
					"pid", p.p.PID(), "waiting", r.Waiting)
			}
			p.waitingAt, p.waiting = m.set.Now(), r.Waiting
		}
		return
	}
	exit := ev.Exit
	if exit == nil {
		return
	}
	delete(m.procs, ev.Process)
	m.summary.Jobs += p.jobs
	spec := p.p.Spec()
	lived := m.set.Now().Sub(p.started)
	// Whatever the worker still held is released by housekeeping, soon;
	// its attempt counts. The row keeps beating until that is done.
	m.releaseCh <- &releaseReq{worker: spec.Worker, tries: cmp.Or(spec.Tries, m.set.DefaultTries), reason: string(exit.Reason)}
	switch {
	case exit.Reason.Recycled():
		m.summary.Recycled++
		p.sup.restarts[p.group].ok()
		m.log.Info("worker recycled", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason), "jobs", p.jobs)
	case exit.Reason == spawner.ExitCrash || exit.Reason == spawner.ExitError:
		m.summary.Crashed++
		if !m.stopping {
			m.failed(p.sup, p.group, lived, exit.Describe(), exit.Err)
		}
	case exit.Reason == spawner.ExitFenced:
		p.sup.restarts[p.group].ok()
		m.log.Warn("worker stopped: this master was out of the fleet's view for a ttl", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID())
	default:
		p.sup.restarts[p.group].ok()
		m.log.Debug("worker exited", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason))
	}
}

// shutdown stops every worker gracefully and waits for them (killing those
// still running after StopTimeout). The membership service keeps beating,
// as draining, all the while.
func (m *Master) shutdown(events chan spawner.Event, why string) (Summary, error) {
	m.stopping = true
	m.publish() // beats draining at once
	m.log.Info("master stopping: workers finish their running jobs", "reason", why, "workers", len(m.procs))
	for _, p := range m.procs {
		if !p.stopping {
			m.stop(p)
		}
	}
	deadline := time.NewTimer(m.set.StopTimeout)
	defer deadline.Stop()
	hard := time.NewTimer(m.set.StopTimeout + 15*time.Second)
	defer hard.Stop()
	for len(m.procs) > 0 {
		select {
		case ev := <-events:
			m.handle(ev)
			m.publish()
		case <-deadline.C:
			m.log.Error("workers did not finish within the stop timeout: killing them", "workers", len(m.procs), "stop_timeout", m.set.StopTimeout)
			for _, p := range m.procs {
				_ = p.p.Kill()
			}
		case <-hard.C:
			return m.summary, fmt.Errorf("workers did not exit after being killed: %d left", len(m.procs))
		}
	}
	if m.summary.Unsaved > 0 {
		return m.summary, fmt.Errorf("%d finished jobs' outcomes were not written before the workers exited (the database was unreachable): their jobs are released later and run again", m.summary.Unsaved)
	}
	return m.summary, nil
}
