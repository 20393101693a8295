// Package master is the fleet master: it runs no jobs itself. It resolves
// supervisors into process groups, starts workers through a Spawner, balances
// them across queues, recycles and restarts them, applies pause and
// terminate requests stored in PostgreSQL, keeps its membership row beating,
// and releases the jobs of workers and masters that died.
package master

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/fleet"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// Settings tune the master. Zero fields take the defaults below.
type Settings struct {
	// Tick is how often the master beats, reads shared state and
	// reconciles its processes (default 1 s).
	Tick time.Duration
	// BalanceCooldown is the time between rebalancing steps (default 3 s).
	BalanceCooldown time.Duration
	// BalanceMaxShift is how far one group moves per step (default 1).
	BalanceMaxShift int
	// TTL is how long the master's row outlives its last beat (default
	// 10 s). Another master releases the jobs of a master whose row
	// expired.
	TTL time.Duration
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
	Name string
	// Version is reported in its row (default "dev").
	Version string
	// Logger receives the master's logs, under logger=fleet.
	Logger *slog.Logger
	// Now is the clock used for restart backoff (default time.Now).
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
	// failed, 30 days metrics).
	Trim store.TrimParams
}

func (s Settings) withDefaults() Settings {
	s.Tick = cmp.Or(s.Tick, time.Second)
	s.BalanceCooldown = cmp.Or(s.BalanceCooldown, 3*time.Second)
	s.BalanceMaxShift = cmp.Or(s.BalanceMaxShift, 1)
	s.TTL = cmp.Or(s.TTL, 10*time.Second)
	s.RestartBase = cmp.Or(s.RestartBase, time.Second)
	s.RestartMax = cmp.Or(s.RestartMax, time.Minute)
	s.DefaultTries = cmp.Or(s.DefaultTries, 3)
	s.DefaultTimeout = cmp.Or(s.DefaultTimeout, time.Minute)
	s.TimeoutGrace = cmp.Or(s.TimeoutGrace, 5*time.Second)
	s.StopTimeout = cmp.Or(s.StopTimeout, s.DefaultTimeout+s.TimeoutGrace+5*time.Second)
	s.Version = cmp.Or(s.Version, "dev")
	s.LongWaitCooldown = cmp.Or(s.LongWaitCooldown, 15*time.Minute)
	s.Trim.CompletedHours = cmp.Or(s.Trim.CompletedHours, 24)
	s.Trim.FailedDays = cmp.Or(s.Trim.FailedDays, 7)
	s.Trim.MetricsDays = cmp.Or(s.Trim.MetricsDays, 30)
	if s.Name == "" {
		host, _ := os.Hostname()
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		s.Name = fmt.Sprintf("%s:%d:%s", cmp.Or(host, "localhost"), os.Getpid(), hex.EncodeToString(b))
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s
}

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

	procs     map[spawner.Process]*proc
	startedAt time.Time // the row's started_at, database clock
	lastBal   time.Time
	stopping  bool
	summary   Summary
	beatFails int
	// pausedQueues is the set of queues paused across every supervisor.
	pausedQueues map[string]bool
	seq          int // numbers worker names

	lastSnapshot   time.Time // the minute of the last snapshot attempt
	lastPartitions time.Time
	alerts         chan fleet.LongWaitDetected

	beatErrors   atomic.Uint64
	beatDuration atomic.Int64 // nanoseconds
}

type supState struct {
	sup      supervisor.Supervisor
	groups   []supervisor.Group
	alloc    balancer.Allocation
	paused   bool
	restarts map[string]*restarts
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
	stopping bool
	jobs     int64
	memoryMB float64
}

// New returns a master for supervisors.
func New(st *store.Store, supervisors []supervisor.Supervisor, opts ...Option) (*Master, error) {
	m := &Master{st: st, procs: map[spawner.Process]*proc{}}
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
	m.log = m.set.Logger.With("logger", "fleet", "master", m.set.Name)
	for _, s := range supervisors {
		ss := &supState{sup: s, groups: s.Groups(), alloc: balancer.Allocation{}, restarts: map[string]*restarts{}}
		for _, g := range ss.groups {
			ss.restarts[g.Key] = &restarts{}
		}
		m.sups = append(m.sups, ss)
	}
	return m, nil
}

// Name is the master's name in fleet_masters.
func (m *Master) Name() string { return m.set.Name }

// Run supervises until ctx ends or a terminate request made after this
// master started arrives; then it stops every worker gracefully (they finish
// their running jobs within StopTimeout), removes its row and returns.
func (m *Master) Run(ctx context.Context) (Summary, error) {
	events := make(chan spawner.Event, 64)
	started, err := m.beat(ctx, "starting")
	if err != nil {
		return m.summary, err
	}
	m.startedAt = started
	m.log.Info("master started", "supervisors", len(m.sups), "ttl", m.set.TTL)
	if m.set.OnLongWait != nil {
		var wg sync.WaitGroup
		m.alerts = make(chan fleet.LongWaitDetected, 64)
		wg.Go(func() { m.notify(context.WithoutCancel(ctx)) })
		defer func() {
			close(m.alerts)
			wg.Wait()
		}()
	}
	m.housekeep(ctx)
	m.readState(ctx)
	m.rebalance(ctx)
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
			m.handle(ctx, ev)
			m.reconcileAll(ctx, events)
		case <-wake.C:
			m.reconcileAll(ctx, events)
		case <-tick.C:
			if _, err := m.beat(ctx, m.state()); err != nil {
				m.beatFailed(err)
			}
			if m.readState(ctx) {
				return m.shutdown(events, "terminate requested")
			}
			m.housekeep(ctx)
			m.duties(ctx)
			if m.set.Now().Sub(m.lastBal) >= m.set.BalanceCooldown {
				m.rebalance(ctx)
			}
			m.reconcileAll(ctx, events)
		}
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

func (m *Master) state() string {
	if m.stopping {
		return "draining"
	}
	for _, s := range m.sups {
		if !s.paused {
			return "running"
		}
	}
	return "paused"
}

type supRow struct {
	Name      string         `json:"name"`
	Queues    []string       `json:"queues"`
	Balance   string         `json:"balance"`
	Paused    bool           `json:"paused"`
	Processes map[string]int `json:"processes"`
}

func (m *Master) beat(ctx context.Context, state string) (time.Time, error) {
	rows := make([]supRow, 0, len(m.sups))
	for _, s := range m.sups {
		r := supRow{Name: s.sup.Name, Queues: s.sup.Queues, Balance: string(s.sup.Balance), Paused: s.paused, Processes: map[string]int{}}
		for _, g := range s.groups {
			r.Processes[g.Key] = m.alive(s, g.Key)
		}
		rows = append(rows, r)
	}
	sups, _ := json.Marshal(rows)
	host, _ := os.Hostname()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(m.set.Tick, time.Second)*3)
	defer cancel()
	start := time.Now()
	t, err := m.st.MasterBeat(bctx, store.MasterBeatParams{
		Name: m.set.Name, Host: host, PID: os.Getpid(), Nonce: m.set.Name, Version: m.set.Version,
		State: state, Supervisors: sups, TTL: m.set.TTL,
	})
	m.beatDuration.Store(int64(time.Since(start)))
	if err != nil {
		m.beatErrors.Add(1)
	}
	return t, err
}

// BeatErrors counts the master's failed beats (for the
// fleet_master_beat_errors_total counter).
func (m *Master) BeatErrors() uint64 { return m.beatErrors.Load() }

// LastBeatDuration is how long the last beat took.
func (m *Master) LastBeatDuration() time.Duration { return time.Duration(m.beatDuration.Load()) }

func (m *Master) beatFailed(err error) {
	m.beatFails++
	// Rate-limited: the first failure, then every tenth.
	if m.beatFails == 1 || m.beatFails%10 == 0 {
		m.log.Warn("master beat failed; workers go on, retrying next tick", "failures", m.beatFails, "err", err)
	}
}

// readState applies pause flags and reports whether a terminate request
// newer than this master arrived.
func (m *Master) readState(ctx context.Context) (terminate bool) {
	rows, err := m.st.StateList(ctx, "pause:", store.StateTerminate)
	if err != nil {
		m.log.Warn("read fleet state failed", "err", err)
		return false
	}
	keys := map[string]bool{}
	queues := map[string]bool{}
	for _, r := range rows {
		keys[r.Key] = true
		if r.Key == store.StateTerminate && r.UpdatedAt.After(m.startedAt) {
			terminate = true
		}
		if q, ok := strings.CutPrefix(r.Key, store.StatePauseQueuePrefix); ok {
			queues[q] = true
		}
	}
	if !maps.Equal(queues, m.pausedQueues) {
		m.pausedQueues = queues
		m.log.Info("paused queues", "queues", slices.Sorted(maps.Keys(queues)))
		for _, p := range m.procs {
			if p.stopping {
				continue
			}
			cmd := spawner.Command{Type: spawner.CommandPauseQueues, Queues: pausedOf(p.p.Spec().Queues, queues)}
			if err := p.p.Send(cmd); err != nil {
				m.log.Warn("send command failed", "command", cmd.Type, "pid", p.p.PID(), "err", err)
			}
		}
	}
	for _, s := range m.sups {
		paused := keys[store.StatePauseAll] || keys[store.StatePauseSupervisorPrefix+s.sup.Name]
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
	return terminate
}

// housekeep releases the jobs of expired masters and kills workers that
// hold a job far past its timeout.
func (m *Master) housekeep(ctx context.Context) {
	expired, lost, err := m.st.MasterExpire(ctx, m.set.DefaultTries, m.set.DefaultTimeout, m.set.TimeoutGrace+time.Minute)
	if err != nil {
		m.log.Warn("expire masters failed", "err", err)
	} else if len(expired) > 0 || lost.Released+lost.Failed > 0 {
		m.log.Warn("released the jobs of lost masters", "masters", expired, "released", lost.Released, "failed", lost.Failed)
	}
	overdue, err := m.st.WorkerOverdue(ctx, m.set.Name, m.set.DefaultTimeout, m.set.TimeoutGrace+5*time.Second)
	if err != nil {
		m.log.Warn("look for overdue workers failed", "err", err)
		return
	}
	for _, w := range overdue {
		for _, p := range m.procs {
			if p.p.Spec().Worker == w {
				m.log.Error("worker holds a job past its timeout and grace: killing it", "worker", w, "pid", p.p.PID())
				_ = p.p.Kill()
			}
		}
	}
}

// rebalance computes each supervisor's next allocation from the workload:
// the counts of queue_counts and the mean runtimes of the last 5 complete
// minutes from the metrics snapshots (1 s per job for a queue that has
// none), neither of which reads the job history, so a step costs the same
// however much history there is.
func (m *Master) rebalance(ctx context.Context) {
	m.lastBal = m.set.Now()
	counts, err := m.st.QueueCounts(ctx)
	if err != nil {
		m.log.Warn("read workload failed; keeping the current allocation", "err", err)
		counts = nil
	}
	runtimes := map[string]float64{}
	if stats, err := m.st.QueueRuntimes(ctx); err != nil {
		m.log.Warn("read average runtimes failed; assuming 1 s per job", "err", err)
	} else {
		for _, s := range stats {
			runtimes[s.Queue] = s.AvgRuntimeMs
		}
	}
	workload := map[string]balancer.QueueWorkload{}
	for _, c := range counts {
		workload[c.Queue] = balancer.NewQueueWorkload(c.Queue, int(c.Pending), int(c.Reserved), 0, runtimes[c.Queue])
	}
	for _, s := range m.sups {
		current := balancer.Allocation{}
		for _, g := range s.groups {
			current[g.Key] = m.alive(s, g.Key)
		}
		next := balancer.NextAllocation(s.sup, current, workload, m.set.BalanceMaxShift)
		if !maps.Equal(next, s.alloc) {
			m.log.Info("allocation", "supervisor", s.sup.Name, "processes", next)
		}
		s.alloc = next
	}
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
func (m *Master) reconcile(ctx context.Context, events chan<- spawner.Event, s *supState, g supervisor.Group) {
	want, have := s.alloc[g.Key], m.alive(s, g.Key)
	for ; have < want; have++ {
		r := s.restarts[g.Key]
		if !r.ready(m.set.Now()) {
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
		Supervisor:   s.sup.Name,
		Queues:       g.Queues,
		Master:       m.set.Name,
		Worker:       fmt.Sprintf("%s/%s/%d", m.set.Name, s.sup.Name, m.seq),
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
func (m *Master) handle(ctx context.Context, ev spawner.Event) {
	p, ok := m.procs[ev.Process]
	if !ok {
		return
	}
	if r := ev.Report; r != nil {
		if r.Type == spawner.ReportHeartbeat || r.Type == spawner.ReportExiting {
			p.jobs, p.memoryMB = r.Jobs, r.MemoryMB
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
	// Whatever the worker still held is released at once; its attempt counts.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	lost, err := m.st.JobReleaseWorker(rctx, spec.Worker, cmp.Or(spec.Tries, m.set.DefaultTries), string(exit.Reason))
	cancel()
	if err != nil {
		m.log.Error("release the jobs of an exited worker failed; they will be released when its master's row expires", "worker", spec.Worker, "err", err)
	} else if lost.Released+lost.Failed > 0 {
		m.log.Warn("released the jobs of a lost worker", "worker", spec.Worker, "released", lost.Released, "failed", lost.Failed)
	}
	switch {
	case exit.Reason.Recycled():
		m.summary.Recycled++
		p.sup.restarts[p.group].ok()
		m.log.Info("worker recycled", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason), "jobs", p.jobs)
	case exit.Reason == spawner.ExitCrash || exit.Reason == spawner.ExitError:
		m.summary.Crashed++
		if !m.stopping {
			m.failed(p.sup, p.group, lived, fmt.Sprintf("exited with status %d", exit.Code), exit.Err)
		}
	default:
		p.sup.restarts[p.group].ok()
		m.log.Debug("worker exited", "supervisor", spec.Supervisor, "queues", p.group, "pid", p.p.PID(), "reason", string(exit.Reason))
	}
}

// shutdown stops every worker gracefully, waits for them (killing those
// still running after StopTimeout), and removes the master's row.
func (m *Master) shutdown(events chan spawner.Event, why string) (Summary, error) {
	m.stopping = true
	ctx, cancel := context.WithTimeout(context.Background(), m.set.StopTimeout+15*time.Second)
	defer cancel()
	m.log.Info("master stopping: workers finish their running jobs", "reason", why, "workers", len(m.procs))
	if _, err := m.beat(ctx, "draining"); err != nil {
		m.beatFailed(err)
	}
	for _, p := range m.procs {
		if !p.stopping {
			m.stop(p)
		}
	}
	deadline := time.NewTimer(m.set.StopTimeout)
	defer deadline.Stop()
	for len(m.procs) > 0 {
		select {
		case ev := <-events:
			m.handle(ctx, ev)
		case <-deadline.C:
			m.log.Error("workers did not finish within the stop timeout: killing them", "workers", len(m.procs), "stop_timeout", m.set.StopTimeout)
			for _, p := range m.procs {
				_ = p.p.Kill()
			}
		case <-ctx.Done():
			return m.summary, fmt.Errorf("workers did not exit after being killed: %d left", len(m.procs))
		}
	}
	if err := m.st.MasterDelete(ctx, m.set.Name); err != nil {
		m.log.Warn("remove master row failed; it expires on its own", "err", err)
	}
	m.log.Info("master stopped", "started", m.summary.Started, "recycled", m.summary.Recycled,
		"crashed", m.summary.Crashed, "jobs", m.summary.Jobs)
	return m.summary, nil
}
