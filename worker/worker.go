// Package worker runs jobs: it claims them from PostgreSQL in batches, runs
// up to Concurrency at once from its queues in priority order, writes their
// outcomes in batches, and stops at its limits. `app fleet:work` runs one
// Worker per process; the master's in-process spawner runs several.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/internal/jobhook"
	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/redact"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// Defaults for Config fields left zero.
const (
	DefaultConcurrency       = defaults.Concurrency
	DefaultTries             = defaults.Tries
	DefaultPollInterval      = defaults.PollInterval
	DefaultTimeout           = defaults.Timeout
	DefaultTimeoutGrace      = defaults.TimeoutGrace
	DefaultHeartbeatInterval = time.Second
	DefaultVacuumEvery       = 5 * time.Second
	// DrainTimeout bounds how long a stopping worker keeps trying to write
	// the outcomes of its last jobs.
	DrainTimeout = 30 * time.Second
	// StopCut is how long a statement of the worker's loop that is in
	// flight when the worker begins to stop may still run. With a healthy
	// database it has long answered; with a frozen one the worker then
	// goes on to its drain (DrainTimeout) and exits: a stop takes at most
	// StopCut + DrainTimeout past its running jobs.
	StopCut = 5 * time.Second
)

// ErrJobTimedOut is returned by Run when a job kept running past its timeout
// plus the grace period: the worker recorded the attempt as timed out,
// released its other jobs and gave up, and its process should exit non-zero
// so that its supervisor replaces it.
var ErrJobTimedOut = errors.New("a job ignored its timeout")

// Config shapes a worker.
type Config struct {
	// Queues are worked in priority order: a queue is only claimed from when
	// the ones before it have nothing ready.
	Queues []string
	// Concurrency is how many jobs run at once.
	Concurrency int
	// MaxUnsaved bounds the finished attempts whose outcome is not written
	// yet: while that many wait for the database, the worker claims nothing
	// (backpressure), so it never holds more than Concurrency + Prefetch +
	// MaxUnsaved jobs whatever the backlog. Default
	// DefaultMaxUnsaved(Concurrency).
	MaxUnsaved int
	// Prefetch is how many claimed jobs may wait for a free slot while the
	// worker's jobs are short (their recent average runtime under
	// PrefetchBelow): a claim then takes up to Concurrency + Prefetch jobs,
	// so a low concurrency is not held to one round trip per few jobs. Jobs
	// that take longer are claimed only for free slots, so that no worker
	// sits on slow jobs others could run. Default DefaultPrefetch
	// (Concurrency); negative: never prefetch.
	Prefetch int
	// MaxJobs stops the worker after it has started this many jobs (0: never).
	MaxJobs int
	// MaxTime stops the worker after it has run this long (0: never).
	MaxTime time.Duration
	// MaxMemoryMB stops the worker when its resident memory exceeds it (0: never).
	MaxMemoryMB int
	// StopWhenEmpty stops the worker once nothing is running or unwritten and
	// no job is ready on its queues.
	StopWhenEmpty bool
	// Paused starts the worker taking no jobs until Continue.
	Paused bool
	// PausedQueues starts the worker skipping these queues until
	// PauseQueues says otherwise.
	PausedQueues []string
	// PollInterval is the fallback when no notification arrives.
	PollInterval time.Duration
	// Tries applies to jobs dispatched without their own (default 3).
	Tries int
	// Backoff applies to jobs dispatched without their own, in seconds
	// before each retry (nil: retry at once).
	Backoff []int
	// DefaultTimeout applies to jobs dispatched without a timeout.
	DefaultTimeout time.Duration
	// TimeoutGrace is how long a job may run after its context is cancelled
	// for its timeout, or for an operator's cancel, before the worker gives
	// up on it.
	TimeoutGrace time.Duration
	// CancelPollInterval is how often a worker running jobs asks the
	// database for cancel requests among them, in case a notification was
	// lost. Default DefaultCancelPollInterval.
	CancelPollInterval time.Duration
	// HeartbeatInterval is how often Reports receives a heartbeat while the
	// worker is busy; an idle one whose report has not changed sends one
	// every IdleHeartbeats intervals.
	HeartbeatInterval time.Duration
	// Name is the lease holder's name; default host:pid:random.
	Name string
	// Master is the instance id of the membership row this worker's leases
	// hang on: its master's, or for a worker run without a master, its
	// own. Another master releases its jobs once that row expires, and the
	// worker claims only while the row is live (empty: unfenced, for
	// tests).
	Master string
	// MasterTTL is how long the worker may be fenced (its Master's row not
	// live) before it stops and exits with spawner.ExitFenced: nothing keeps
	// claiming what will be released. Default 10 s (fleet.master_ttl_secs'
	// default).
	MasterTTL time.Duration
	// VacuumEvery is how often a worker that finished jobs since its last
	// look checks whether queue_jobs needs a vacuum, and vacuums it if so
	// (see store.QueueVacuum). Default DefaultVacuumEvery; negative: never.
	VacuumEvery time.Duration
	// Logger receives the worker's logs; default slog.Default().
	Logger *slog.Logger
	// Reports receives ready, heartbeat and exiting reports; may be nil.
	Reports func(spawner.Report)
	// OnEvent receives the event of every outcome this worker wrote, as the
	// registry's subscriptions do (see queue.Registry.SubscribeBuffer), but
	// only this worker's: a test running several workers of one registry
	// tells theirs apart. It is called on the outcome writer's goroutine,
	// which it holds up while it runs; may be nil.
	OnEvent func(queue.Event)
	// MemoryMB measures the worker's memory; default the process's resident
	// set size.
	MemoryMB func() float64
	// Redact lists field-name fragments whose values are hidden in logged
	// error messages (default redact.DefaultFragments).
	Redact []string
}

// Result says how a worker stopped.
type Result struct {
	Reason spawner.ExitReason
	// Jobs is the number of attempts the worker finished.
	Jobs int64
}

// Worker claims and runs jobs. Build it with New and call Run once.
type Worker struct {
	cfg      Config
	redactor *redact.Redactor
	st       *store.Store
	jobs     *queue.Registry
	log      *slog.Logger
	logs     ratelog.Log // failing claims: once per streak, then once a minute
	writer   *writer

	wake chan struct{}
	done chan finished
	// tasks hands started jobs to the runners (see runner).
	tasks  chan task
	paused atomic.Bool
	// pausedQueues is the set of queues not to claim from.
	pausedQueues atomic.Pointer[map[string]bool]
	stopOnce     sync.Once
	stop         chan struct{}
	// finished counts attempts finished; the vacuum check reads it too.
	finished atomic.Int64
	// cancels carries cancel requests from the listener and the poller to
	// the loop; cancelPoll the running ids from the loop to the poller.
	cancels    chan store.CancelNotice
	cancelPoll chan []int64
	// resync asks for a reconcile even while nothing is held (see
	// reconcile.go).
	resync atomic.Bool
	// cut is the context of the loop's own statements (claims, probes,
	// reconciles, releases): cancelled StopCut after the worker begins to
	// stop, so that a statement hanging on a frozen or unreachable
	// database cannot hold up the stop. The loop owns cutTimer.
	cut       context.Context
	cutCancel context.CancelFunc
	cutTimer  *time.Timer
}

// New returns a worker running jobs from st with the handlers in jobs.
func New(st *store.Store, jobs *queue.Registry, cfg Config) (*Worker, error) {
	if len(cfg.Queues) == 0 {
		return nil, errors.New("worker needs at least one queue")
	}
	for _, q := range cfg.Queues {
		if q == "" {
			return nil, errors.New("worker queue names must not be empty")
		}
	}
	if cfg.Concurrency < 0 || cfg.MaxJobs < 0 || cfg.MaxTime < 0 || cfg.MaxMemoryMB < 0 || cfg.Tries < 0 {
		return nil, errors.New("worker concurrency and limits must not be negative")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	if cfg.MasterTTL <= 0 {
		cfg.MasterTTL = defaults.TTL
	}
	if cfg.MaxUnsaved <= 0 {
		cfg.MaxUnsaved = DefaultMaxUnsaved(cfg.Concurrency)
	}
	switch {
	case cfg.Prefetch == 0:
		cfg.Prefetch = DefaultPrefetch(cfg.Concurrency)
	case cfg.Prefetch < 0:
		cfg.Prefetch = 0
	}
	cfg.Tries = cmp.Or(cfg.Tries, DefaultTries)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.DefaultTimeout = cmp.Or(cfg.DefaultTimeout, DefaultTimeout)
	cfg.TimeoutGrace = cmp.Or(cfg.TimeoutGrace, DefaultTimeoutGrace)
	cfg.CancelPollInterval = cmp.Or(cfg.CancelPollInterval, DefaultCancelPollInterval)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	cfg.VacuumEvery = cmp.Or(cfg.VacuumEvery, DefaultVacuumEvery)
	if cfg.Name == "" {
		cfg.Name = DefaultName()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MemoryMB == nil {
		cfg.MemoryMB = ResidentMemoryMB
	}
	if cfg.Redact == nil {
		cfg.Redact = redact.DefaultFragments
	}
	log := cfg.Logger.With("worker", cfg.Name)
	w := &Worker{
		cfg:      cfg,
		redactor: redact.New(cfg.Redact),
		st:       st,
		jobs:     jobs,
		log:      log,
		wake:     make(chan struct{}, 1),
		done:     make(chan finished, cfg.Concurrency),
		tasks:    make(chan task, cfg.Concurrency),
		stop:     make(chan struct{}),

		cancels:    make(chan store.CancelNotice, cancelBacklog),
		cancelPoll: make(chan []int64, 1),
	}
	w.writer = newWriter(st, cfg.Name, cfg.Master, log, w.poke)
	w.writer.events = jobs
	w.writer.onEvent = cfg.OnEvent
	w.writer.onFail = w.resyncSoon
	w.paused.Store(cfg.Paused)
	w.PauseQueues(cfg.PausedQueues)
	return w, nil
}

// DefaultMaxUnsaved is the default bound on unwritten outcomes: one full
// write batch (1000), or four times the concurrency when that is more.
// Outcomes are written one batch at a time while the next accumulates, so
// the bound is what lets a batch grow to a size worth its round trip and
// WAL flush: with no-op jobs at concurrency 64 on a 2-core machine, a bound
// of 256 drained 18,000 jobs/s and one of 1000 about 23,000.
func DefaultMaxUnsaved(concurrency int) int { return max(4*concurrency, writeBatch) }

// IdleHeartbeats is how many heartbeat intervals apart, at least, an idle
// worker whose report has not changed sends heartbeats, at its polls (a
// busy one sends one every interval).
const IdleHeartbeats = 5

// PrefetchBelow is the recent average runtime under which a worker
// prefetches jobs.
const PrefetchBelow = 5 * time.Millisecond

// DefaultPrefetch is the default prefetch: the concurrency, between 32 and
// 256.
func DefaultPrefetch(concurrency int) int { return min(max(concurrency, 32), 256) }

// DefaultName returns host:pid:random, unique per process (a master's
// default name has the same form).
func DefaultName() string { return defaults.Name() }

// Name is the worker's lease-holder name.
func (w *Worker) Name() string { return w.cfg.Name }

// Pause stops the worker from taking new jobs; running jobs go on.
func (w *Worker) Pause() { w.paused.Store(true); w.poke() }

// Continue lets a paused worker take jobs again.
func (w *Worker) Continue() { w.paused.Store(false); w.poke() }

// PauseQueues replaces the set of queues the worker does not claim from;
// running jobs go on. An empty set resumes every queue.
func (w *Worker) PauseQueues(queues []string) {
	set := make(map[string]bool, len(queues))
	for _, q := range queues {
		set[q] = true
	}
	w.pausedQueues.Store(&set)
	w.poke()
}

// Stop asks the worker to stop as if its context ended: it takes no new
// jobs, lets running ones finish, writes their outcomes and returns.
func (w *Worker) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

type running struct {
	job      store.ClaimedJob
	started  time.Time
	deadline time.Time
	cancel   context.CancelFunc
	// stop cancels the job's context with a cause (an operator's cancel);
	// cancelAt is when, cancelBy who asked (zero: not cancelled).
	stop     context.CancelCauseFunc
	cancelAt time.Time
	cancelBy string
}

type finished struct {
	job     store.ClaimedJob
	err     error
	timeout time.Duration
	expired bool // the job's context ran out before it returned
	ended   time.Time
	// inTx: the handler completed the job in its own transaction
	// (queue.Job.CompleteTx), which may or may not have committed.
	inTx bool
}

// Run works until ctx ends (or Stop), a limit is reached, or, with
// StopWhenEmpty, there is nothing left to do. A stopping worker takes no new
// jobs, lets running ones finish within their timeout, writes every outcome
// and returns a nil error. Jobs run on a context that ctx's cancellation does
// not reach: only their own timeout cancels them.
func (w *Worker) Run(ctx context.Context) (Result, error) {
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	w.cut, w.cutCancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if w.cutTimer != nil {
			w.cutTimer.Stop()
		}
		w.cutCancel()
	}()
	var wg sync.WaitGroup
	wg.Go(func() { w.writer.run(bg) })
	wg.Go(func() { w.listen(bg) })
	wg.Go(func() { w.pollCancels(bg) })
	if w.cfg.VacuumEvery > 0 {
		wg.Go(func() { w.vacuum(bg) })
	}
	// The runners are not waited for: the loop waits for every job they
	// run, but one whose handler ignored its timeout past the grace
	// period is given up on, and its runner ends when the handler returns.
	for range w.cfg.Concurrency {
		go w.runner()
	}
	defer func() {
		close(w.tasks)
		stopBackground()
		wg.Wait()
	}()
	return w.loop(ctx, context.WithoutCancel(ctx))
}

// task is a started job for a runner.
type task struct {
	ctx     context.Context
	job     store.ClaimedJob
	started time.Time
	timeout time.Duration
}

// runner runs the jobs the loop starts, one at a time, until Run closes
// tasks. There are Concurrency of them for the worker's life, not a
// goroutine per job: a job then starts on a goroutine whose stack has
// already grown to what handlers need, which a drain of no-op jobs feels.
func (w *Worker) runner() {
	for t := range w.tasks {
		var inTx atomic.Bool
		err := w.execute(t.ctx, &t.job, t.started, &inTx)
		w.done <- finished{job: t.job, err: err, timeout: t.timeout, expired: errors.Is(t.ctx.Err(), context.DeadlineExceeded),
			ended: time.Now(), inTx: inTx.Load()}
	}
}

type loopState struct {
	running map[int64]*running
	// buffer holds claimed jobs waiting for a free slot (prefetch).
	buffer  []store.ClaimedJob
	claimed int64 // jobs claimed
	started int64 // jobs started
	// runtime is a moving average of recent runtimes; negative until the
	// first attempt finishes.
	runtime  time.Duration
	stopping bool
	reason   spawner.ExitReason
	// fencedSince is when the worker first found its master's row not
	// live, in the current run of such answers (zero: not fenced).
	fencedSince time.Time
	// freed says a job finished while a claim's statement ran (see
	// await): there is room to claim again.
	freed bool
	// ctxDone and stopC are Run's context and the Stop signal, nil once
	// seen: the loop and await both watch them, so that a stop is heard
	// while a statement hangs.
	ctxDone, stopC <-chan struct{}
}

// stopSignal begins the stop when Run's context ended or Stop was
// called; the loop and await call it from their selects.
func (w *Worker) stopSignal(s *loopState, fromCtx bool) {
	if fromCtx {
		s.ctxDone = nil
	} else {
		s.stopC = nil
	}
	w.beginStop(s, spawner.ExitStopped)
}

// held is how many jobs the worker holds and has not finished.
func (s *loopState) held() int { return len(s.running) + len(s.buffer) }

func (w *Worker) loop(ctx, jobBase context.Context) (Result, error) {
	s := &loopState{running: map[int64]*running{}, runtime: -1}
	w.report(spawner.Report{Type: spawner.ReportReady, PID: os.Getpid(), Worker: w.cfg.Name,
		Queues: w.cfg.Queues, Concurrency: w.cfg.Concurrency})
	w.log.Info("worker started", "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)

	heartbeat := time.NewTicker(w.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	var last spawner.Report // the last heartbeat sent
	lastBeat := time.Now()
	watchdog := time.NewTicker(min(200*time.Millisecond, w.cfg.TimeoutGrace))
	defer watchdog.Stop()
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	cancelPoll := time.NewTicker(w.cfg.CancelPollInterval)
	defer cancelPoll.Stop()
	reconcile := time.NewTicker(w.cfg.HeartbeatInterval)
	defer reconcile.Stop()
	var maxTime <-chan time.Time
	if w.cfg.MaxTime > 0 {
		t := time.NewTimer(w.cfg.MaxTime)
		defer t.Stop()
		maxTime = t.C
	}
	s.ctxDone, s.stopC = ctx.Done(), w.stop
	needClaim, probe := true, false
	for {
		w.startBuffered(jobBase, s)
		if s.stopping && len(s.running) == 0 {
			break
		}
		if needClaim && !s.stopping && !w.paused.Load() && w.roomToClaim(s) &&
			w.writer.Unsaved() < w.cfg.MaxUnsaved {
			s.freed = false
			needClaim = w.claim(ctx, jobBase, s, poll, probe) || s.freed
			probe = false
			w.startBuffered(jobBase, s)
		}
		if s.stopping && len(s.running) == 0 {
			break
		}
		// The watchdog only ticks while jobs run, and the heartbeat while
		// there is news for the master: an idle worker wakes for its poll
		// alone, and beats from there now and then.
		var watchdogC, heartbeatC, cancelPollC <-chan time.Time
		if len(s.running) > 0 {
			watchdogC, cancelPollC = watchdog.C, cancelPoll.C
		}
		if len(s.running) > 0 || w.finished.Load() != last.Jobs || w.paused.Load() != last.Paused {
			heartbeatC = heartbeat.C
		}
		var reconcileC <-chan time.Time
		if w.reconcileDue(s) {
			reconcileC = reconcile.C
		}
		select {
		case <-s.ctxDone:
			w.stopSignal(s, true)
		case <-s.stopC:
			w.stopSignal(s, false)
		case f := <-w.done:
			w.finish(s, f)
			for more := true; more; {
				select {
				case f := <-w.done:
					w.finish(s, f)
				default:
					more = false
				}
			}
			needClaim = true
		case <-w.wake:
			needClaim = true
		case n := <-w.cancels:
			w.cancelHeld(s, n)
		case <-cancelPollC:
			w.askCancels(s)
		case <-poll.C:
			poll.Reset(w.cfg.PollInterval)
			if heartbeatC == nil && time.Since(lastBeat) >= IdleHeartbeats*w.cfg.HeartbeatInterval {
				w.heartbeat(s, &last)
				lastBeat = time.Now()
			}
			// A poll with no claim pending since the last one is the idle
			// case: one statement asks whether anything is ready first.
			probe = !needClaim
			needClaim = true
		case <-maxTime:
			w.beginStop(s, spawner.ExitMaxTime)
		case <-heartbeatC:
			w.heartbeat(s, &last)
			lastBeat = time.Now()
		case <-reconcileC:
			if w.cut.Err() == nil { // cut: the database did not answer the stop
				w.reconcile(w.cut, s)
			}
		case now := <-watchdogC:
			if r := w.overdue(s, now); r != nil {
				return w.abandon(s, r)
			}
		}
	}
	return w.exit(s, nil)
}

// heartbeat reports the worker's state to its master and checks its
// memory limit.
func (w *Worker) heartbeat(s *loopState, last *spawner.Report) {
	mem := w.cfg.MemoryMB()
	*last = spawner.Report{Type: spawner.ReportHeartbeat, Jobs: w.finished.Load(),
		Running: len(s.running), MemoryMB: mem, Paused: w.paused.Load()}
	w.report(*last)
	if w.cfg.MaxMemoryMB > 0 && mem > float64(w.cfg.MaxMemoryMB) {
		w.log.Info("memory limit reached", "memory_mb", mem, "max_memory_mb", w.cfg.MaxMemoryMB)
		w.beginStop(s, spawner.ExitMaxMemory)
	}
}

func (w *Worker) beginStop(s *loopState, reason spawner.ExitReason) {
	if s.stopping {
		return
	}
	s.stopping, s.reason = true, reason
	w.cutTimer = time.AfterFunc(StopCut, w.cutCancel)
	w.log.Info("worker stopping: finishing running jobs", "reason", string(reason), "running", len(s.running))
}

// claim fills free slots from the queues in priority order. It reports
// whether another claim may find more right away. With probe (an idle
// worker's poll) it first asks, in one statement over every queue, whether
// any job is ready, and claims only if one is: an idle worker costs one
// statement per poll interval, however many queues it works.
func (w *Worker) claim(ctx, jobBase context.Context, s *loopState, poll *time.Timer, probe bool) bool {
	limit := w.cfg.Concurrency + w.prefetch(s) - s.held()
	if w.cfg.MaxJobs > 0 {
		limit = min(limit, w.cfg.MaxJobs-int(s.claimed))
	}
	// The claim must not be cut off half-way by a stop signal: a claim whose
	// answer is lost would leave jobs reserved until a master releases them.
	// Only a claim still hanging StopCut after a stop is cut (see cut).
	claimCtx, cancel := context.WithTimeout(w.cut, 30*time.Second)
	defer cancel()
	if probe && !w.cfg.StopWhenEmpty {
		var next store.NextJob
		var err error
		w.await(s, func() { next, err = w.st.JobNext(claimCtx, w.cfg.Queues, w.cfg.Master) })
		if err != nil {
			w.resyncSoon()
			w.logs.Fail(w.log, "claim", "looking for ready jobs failed; retrying at the next poll", "err", err)
			return false
		}
		w.logs.OK(w.log, "claim", "the database answers again: claiming resumes")
		if !w.fenced(s, next.Live) {
			return false
		}
		if !next.Any {
			return false // nothing at all: wait for a notification or the next poll
		}
		if next.In > 0 {
			w.schedule(poll, next.In)
			return false
		}
	}
	paused := *w.pausedQueues.Load()
	for _, q := range w.cfg.Queues {
		if limit <= 0 {
			break
		}
		if paused[q] {
			continue
		}
		var jobs []store.ClaimedJob
		var err error
		w.await(s, func() {
			jobs, err = w.st.JobClaim(claimCtx, store.JobClaimParams{Queue: q, Limit: limit, Worker: w.cfg.Name, Master: w.cfg.Master})
		})
		if err != nil {
			w.resyncSoon()
			w.logs.Fail(w.log, "claim", "claim failed; retrying at the next poll", "queue", q, "err", err)
			return false
		}
		w.logs.OK(w.log, "claim", "the database answers again: claiming resumes")
		if ctx.Err() != nil || w.paused.Load() {
			// Stopped or paused while claiming: these jobs never start.
			w.release(jobs, "")
			return false
		}
		s.buffer = append(s.buffer, jobs...)
		s.claimed += int64(len(jobs))
		limit -= len(jobs)
		// Start them now, not after the rest of the round.
		w.startBuffered(jobBase, s)
	}
	if w.cfg.MaxJobs > 0 && s.claimed >= int64(w.cfg.MaxJobs) {
		return false // the last of them start from the buffer; then the worker stops
	}
	if limit <= 0 {
		return true // every slot filled: more may be waiting
	}
	// The queues ran dry.
	if w.cfg.StopWhenEmpty && s.held() == 0 && w.empty(claimCtx) {
		w.beginStop(s, spawner.ExitEmpty)
		return false
	}
	var next store.NextJob
	var err error
	w.await(s, func() { next, err = w.st.JobNext(claimCtx, w.cfg.Queues, w.cfg.Master) })
	if err == nil {
		if w.fenced(s, next.Live) && next.Any && next.In > 0 {
			w.schedule(poll, next.In)
		}
	}
	return false
}

// await runs one statement of a claim (fn) on its own goroutine and, until
// it returns, finishes the jobs that end meanwhile: their outcomes go to
// the writer, whose statements never wait on the claim's. A claim held up
// (every claim reads the member row of its holder's master, so a lock on
// fleet_masters holds it until the lock goes, or the database is slow)
// thus never holds up the outcomes of jobs that ran. A job finished here
// sets s.freed, for the claim that follows.
func (w *Worker) await(s *loopState, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	for {
		select {
		case <-done:
			return
		case f := <-w.done:
			w.finish(s, f)
			s.freed = true
		case n := <-w.cancels:
			w.cancelHeld(s, n)
		case <-s.ctxDone:
			w.stopSignal(s, true)
		case <-s.stopC:
			w.stopSignal(s, false)
		}
	}
}

// fenced notes whether the worker's master row is live and reports it. A
// worker fenced for MasterTTL stops (its running jobs are released by
// another master meanwhile; their outcomes will be refused).
func (w *Worker) fenced(s *loopState, live bool) bool {
	if live {
		if !s.fencedSince.IsZero() {
			w.log.Info("master row live again: claiming resumes", "master", w.cfg.Master)
		}
		s.fencedSince = time.Time{}
		return true
	}
	if s.fencedSince.IsZero() {
		s.fencedSince = time.Now()
		w.log.Warn("fenced: the master's membership row is not live, so this worker claims nothing", "master", w.cfg.Master)
	}
	if time.Since(s.fencedSince) >= w.cfg.MasterTTL {
		w.beginStop(s, spawner.ExitFenced)
	}
	return false
}

// prefetch is how many jobs beyond its concurrency the worker may claim
// now: Prefetch while recent jobs were short, else none.
func (w *Worker) prefetch(s *loopState) int {
	if s.runtime < 0 || s.runtime >= PrefetchBelow {
		return 0
	}
	return w.cfg.Prefetch
}

// roomToClaim reports whether a claim is due: a slot is free and no
// prefetched job waits for it, or a quarter of the room for prefetched
// jobs is free. A claim of a job or two while others still wait in the
// buffer would cost a round trip and a commit for little.
func (w *Worker) roomToClaim(s *loopState) bool {
	room := w.cfg.Concurrency + w.prefetch(s)
	free := room - s.held()
	return free > 0 && (len(s.buffer) == 0 || free >= room/4)
}

// startBuffered starts claimed jobs in free slots, oldest claim first. A
// stopping or paused worker gives its buffered jobs back instead (their
// attempt not counted), as it does those of queues paused since the claim.
func (w *Worker) startBuffered(jobBase context.Context, s *loopState) {
	if len(s.buffer) == 0 {
		return
	}
	if s.stopping || w.paused.Load() {
		w.release(s.buffer, "")
		s.buffer = nil
		return
	}
	if paused := *w.pausedQueues.Load(); len(paused) > 0 {
		var back []store.ClaimedJob
		keep := s.buffer[:0]
		for _, j := range s.buffer {
			if paused[j.Queue] {
				back = append(back, j)
			} else {
				keep = append(keep, j)
			}
		}
		s.buffer = keep
		w.release(back, "")
	}
	n := min(len(s.buffer), w.cfg.Concurrency-len(s.running))
	for _, j := range s.buffer[:max(n, 0)] {
		w.start(jobBase, s, j)
	}
	s.buffer = s.buffer[max(n, 0):]
	if len(s.buffer) == 0 {
		s.buffer = nil
	}
	if w.cfg.MaxJobs > 0 && s.started >= int64(w.cfg.MaxJobs) {
		w.beginStop(s, spawner.ExitMaxJobs)
	}
}

// schedule makes the next poll come when a delayed job becomes available,
// if that is sooner than the poll interval.
func (w *Worker) schedule(poll *time.Timer, next time.Duration) {
	if next < w.cfg.PollInterval {
		poll.Reset(next + 5*time.Millisecond)
	}
}

// empty reports, once every outcome is written (a written retry may be
// ready at once), whether no job is ready on the worker's queues.
func (w *Worker) empty(ctx context.Context) bool {
	if err := w.writer.drain(ctx); err != nil {
		return false
	}
	ready, err := w.st.JobReadyExists(ctx, w.cfg.Queues)
	return err == nil && !ready
}

func (w *Worker) start(jobBase context.Context, s *loopState, j store.ClaimedJob) {
	// What the job did not set itself, the worker's defaults decide.
	j.MaxTries = cmp.Or(j.MaxTries, w.cfg.Tries)
	if j.BackoffSecs == nil {
		j.BackoffSecs = w.cfg.Backoff
	}
	j.Timeout = cmp.Or(j.Timeout, w.cfg.DefaultTimeout)
	timeout := j.Timeout
	// The timeout's context hangs off jobBase, whose children map exists
	// already; the cancel cause (an operator's cancel) hangs off it. The
	// other way round every job would allocate a children map and a timer
	// under a fresh parent, which costs a drain several per cent.
	tctx, cancel := context.WithTimeout(jobBase, timeout)
	jctx, stop := context.WithCancelCause(tctx)
	now := time.Now()
	s.running[j.ID] = &running{job: j, started: now, deadline: now.Add(timeout), cancel: cancel, stop: stop}
	s.started++
	// Never blocks: at most Concurrency jobs run, and tasks holds as many.
	w.tasks <- task{ctx: jctx, job: j, started: now, timeout: timeout}
}

// execute runs one attempt through the registry (queue.Registry.Run: the
// handler in its work middleware, then the error hooks), which also turns
// a panic into a failed attempt carrying the panic value and stack. inTx
// is set once the handler has completed the job in its own transaction.
func (w *Worker) execute(ctx context.Context, j *store.ClaimedJob, started time.Time, inTx *atomic.Bool) error {
	job := &queue.Job{
		ID: j.ID, Name: j.Name, Queue: j.Queue, Payload: j.Payload,
		Attempt: j.Attempt, MaxTries: j.MaxTries, CreatedAt: j.CreatedAt, Snoozes: j.Snoozes,
	}
	job.Priority(j.Priority).Tags(j.Tags...)
	if j.Metadata != nil {
		job.Metadata(json.RawMessage(j.Metadata))
	}
	jobhook.Attach(job, func(ctx context.Context, tx pgx.Tx) error {
		if inTx.Load() {
			return fmt.Errorf("complete job %d (%s) in a transaction: already completed", j.ID, j.Name)
		}
		o := w.outcome(*j, started, time.Now(), store.OutcomeCompleted, "completed", "")
		if err := w.st.JobCompleteTx(ctx, tx, w.cfg.Name, w.cfg.Master, o); err != nil {
			return err
		}
		inTx.Store(true)
		return nil
	})
	return w.jobs.Run(ctx, job)
}

func (w *Worker) finish(s *loopState, f finished) {
	r, ok := s.running[f.job.ID]
	if !ok || r.job.Attempt != f.job.Attempt {
		return // abandoned after a timeout
	}
	r.cancel()
	delete(s.running, f.job.ID)
	w.finished.Add(1)
	if took := f.ended.Sub(r.started); s.runtime < 0 {
		s.runtime = took
	} else {
		s.runtime = (s.runtime*7 + took) / 8
	}
	if w.finishStopped(r, f) {
		return
	}
	if f.inTx {
		w.finishInTx(f, r.started)
		return
	}
	if f.err == nil {
		if w.log.Enabled(context.Background(), slog.LevelDebug) {
			w.log.Debug("job completed", "job_id", f.job.ID, "job", f.job.Name, "queue", f.job.Queue,
				"attempt", f.job.Attempt, "runtime", f.ended.Sub(r.started).Round(time.Microsecond))
		}
		w.writer.add(w.outcome(f.job, r.started, f.ended, store.OutcomeCompleted, "completed", ""))
		return
	}
	// The error text is made storable here, where it is produced: a handler's
	// error may hold NUL bytes or invalid UTF-8, which a text column refuses.
	msg, status := store.StorableText(f.err.Error()), "failed"
	if f.expired {
		msg, status = fmt.Sprintf("timed out after %s: %s", f.timeout, msg), "timed_out"
	}
	w.recordFailure(f.job, r.started, f.ended, status, msg)
}

// finishInTx records an attempt whose handler completed its job in its own
// transaction. When that committed, the job is gone and nothing is left to
// write; the worker cannot tell, so it writes the attempt as failed with an
// outcome marked InTx, which the lease check applies only when the
// transaction did not commit (then the handler's effects are not there
// either, and the job is retried).
func (w *Worker) finishInTx(f finished, started time.Time) {
	msg, status := "the job was completed in its handler's transaction, which did not commit", "failed"
	if f.err != nil {
		msg = store.StorableText(f.err.Error())
		w.log.Info("job failed after completing in its transaction; if that committed the job is done, otherwise it is retried",
			"job_id", f.job.ID, "job", f.job.Name, "queue", f.job.Queue, "attempt", f.job.Attempt, "err", w.redactor.Text(msg))
	}
	if f.expired {
		msg, status = fmt.Sprintf("timed out after %s: %s", f.timeout, msg), "timed_out"
	}
	o := w.outcome(f.job, started, f.ended, store.OutcomeFailed, status, msg)
	o.InTx = true
	if f.job.Attempt < f.job.MaxTries {
		o.Kind, o.Delay = store.OutcomeRetried, queue.RetryDelay(f.job.BackoffSecs, f.job.Attempt)
	}
	w.writer.add(o)
}

// outcome is the outcome of one attempt with its history, timed by the
// real clock.
func (w *Worker) outcome(j store.ClaimedJob, started, ended time.Time, kind store.OutcomeKind, status, msg string) store.JobOutcome {
	return store.JobOutcome{
		Lease: j.Lease(), Kind: kind, Status: status, Error: msg, MaxTries: j.MaxTries,
		Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt,
		// On the database clock, as ReservedAt (see ClaimedJob.ClockOffset).
		StartedAt: started.Add(j.ClockOffset), FinishedAt: ended.Add(j.ClockOffset),
		RuntimeMs: float64(ended.Sub(started).Microseconds()) / 1000,
	}
}

// recordFailure writes a failed attempt: retried after its backoff while
// tries remain, moved to failed jobs otherwise. Logs carry the error with
// secrets redacted; the payload is never logged.
func (w *Worker) recordFailure(j store.ClaimedJob, started, ended time.Time, status, msg string) {
	shown := w.redactor.Text(msg)
	if j.Attempt >= j.MaxTries {
		w.log.Warn("job failed for good", "job_id", j.ID, "job", j.Name, "queue", j.Queue,
			"attempt", j.Attempt, "tries", j.MaxTries, "err", shown)
		w.writer.add(w.outcome(j, started, ended, store.OutcomeFailed, status, msg))
		return
	}
	delay := queue.RetryDelay(j.BackoffSecs, j.Attempt)
	w.log.Info("job attempt failed; will retry", "job_id", j.ID, "job", j.Name, "queue", j.Queue,
		"attempt", j.Attempt, "tries", j.MaxTries, "retry_in", delay, "err", shown)
	o := w.outcome(j, started, ended, store.OutcomeRetried, status, msg)
	o.Delay = delay
	w.writer.add(o)
}

// overdue returns a job that outlived its timeout, or its cancel, plus
// the grace period.
func (w *Worker) overdue(s *loopState, now time.Time) *running {
	for _, r := range s.running {
		if now.After(r.deadline.Add(w.cfg.TimeoutGrace)) ||
			(!r.cancelAt.IsZero() && now.After(r.cancelAt.Add(w.cfg.TimeoutGrace))) {
			return r
		}
	}
	return nil
}

// abandon gives up on a job that ignores its cancellation: its attempt is
// recorded as timed out (as cancelled, when an operator cancelled it), the
// worker's other jobs are released for another worker (their attempt not
// counted), and Run returns ErrJobTimedOut (ErrJobIgnoredCancel).
func (w *Worker) abandon(s *loopState, r *running) (Result, error) {
	w.log.Error("job ignored its timeout or cancel; giving up on it and exiting so a fresh worker takes over",
		"job_id", r.job.ID, "job", r.job.Name, "timeout", r.deadline.Sub(r.started), "grace", w.cfg.TimeoutGrace,
		"cancelled", !r.cancelAt.IsZero())
	delete(s.running, r.job.ID)
	w.finished.Add(1)
	exitErr := ErrJobTimedOut
	if !r.cancelAt.IsZero() {
		exitErr = ErrJobIgnoredCancel
		w.abandonCancelled(r)
	} else {
		msg := fmt.Sprintf("timed out after %s and did not stop within %s", r.deadline.Sub(r.started), w.cfg.TimeoutGrace)
		w.recordFailure(r.job, r.started, time.Now(), "timed_out", msg)
	}
	others := make([]store.ClaimedJob, 0, len(s.running))
	for _, o := range s.running {
		o.cancel()
		others = append(others, o.job)
	}
	clear(s.running)
	w.release(others, "released: its worker exited after another job timed out")
	w.release(s.buffer, "")
	s.buffer = nil
	s.reason = spawner.ExitTimeout
	return w.exit(s, exitErr)
}

func (w *Worker) release(jobs []store.ClaimedJob, reason string) {
	if len(jobs) == 0 {
		return
	}
	leases := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = j.Lease()
	}
	// Before the stop's cut, a release may take as long as a drain; after
	// it (a job given up on at exit), no longer than a reconcile.
	parent, timeout := w.cut, DrainTimeout
	if w.cut.Err() != nil {
		parent, timeout = context.Background(), reconcileTimeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	n, err := w.st.JobRelease(ctx, store.JobReleaseParams{Leases: leases, Uncount: true, Error: reason})
	if err != nil {
		w.log.Error("release jobs failed: they stay reserved until a master releases them", "jobs", len(jobs), "err", err)
		return
	}
	w.log.Info("released jobs that had not started", "jobs", n)
}

func (w *Worker) exit(s *loopState, runErr error) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	if err := w.writer.drain(ctx); err != nil {
		w.log.Error("could not write every finished job before exiting: their jobs stay reserved until a master releases them",
			"unsaved", w.writer.Unsaved(), "err", err)
		runErr = errors.Join(runErr, fmt.Errorf("write finished jobs: %w", err))
	} else {
		w.reconcile(ctx, s) // what is left reserved under this name is released without counting
	}
	if s.reason == "" {
		s.reason = spawner.ExitStopped
	}
	w.report(spawner.Report{Type: spawner.ReportExiting, Reason: s.reason, Jobs: w.finished.Load(),
		Running: len(s.running), MemoryMB: w.cfg.MemoryMB(), Unsaved: w.writer.Unsaved()})
	w.log.Info("worker exiting", "reason", string(s.reason), "jobs", w.finished.Load())
	return Result{Reason: s.reason, Jobs: w.finished.Load()}, runErr
}

func (w *Worker) report(r spawner.Report) {
	if w.cfg.Reports != nil {
		w.cfg.Reports(r)
	}
}

// listen wakes the worker when a job is dispatched to one of its queues,
// and hands cancel requests to the loop (see cancel.go).
// When the connection drops it reconnects with backoff; polling covers the
// gap. A store with nothing to listen on (store.WithoutListen: a
// transaction pooler and no direct connection) leaves it to the polls.
func (w *Worker) listen(ctx context.Context) {
	if !w.st.Listens() {
		return
	}
	backoff := 100 * time.Millisecond
	for connected := false; ; {
		err := w.st.ListenCancels(ctx, func() {
			backoff = 100 * time.Millisecond
			if connected {
				w.resyncSoon() // back after a drop: the database may have failed over
			}
			connected = true
			w.poke() // catch up with anything dispatched while not listening
		}, func(q string) {
			if slices.Contains(w.cfg.Queues, q) {
				w.poke()
			}
		}, w.noticeCancel)
		if ctx.Err() != nil {
			return
		}
		w.log.Debug("notification connection lost; polling until it is back", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// The dead rows of queue_jobs worth a vacuum: at least vacuumMinDead, and
// a fifth of the live rows.
const (
	vacuumMinDead     = 50_000
	vacuumDeadPerLive = 0.2
)

// vacuum keeps queue_jobs vacuumed while the worker churns it: at start,
// then every VacuumEvery if it finished jobs since its last look, it asks
// store.QueueVacuum. An idle worker asks nothing after its first look.
func (w *Worker) vacuum(ctx context.Context) {
	t := time.NewTicker(w.cfg.VacuumEvery)
	defer t.Stop()
	// The first look is at start: a table left full of dead rows (a drained
	// backlog, a mass delete) is vacuumed before the claims wade through it.
	seen := int64(-1)
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		n := w.finished.Load()
		if n == seen {
			continue
		}
		seen = n
		vctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		began := time.Now()
		r, err := w.st.QueueVacuum(vctx, store.QueueVacuumParams{MinDead: vacuumMinDead, DeadPerLive: vacuumDeadPerLive})
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("vacuum of queue_jobs failed; claims slow down as dead rows pile up", "err", err)
		case r.Vacuumed:
			w.log.Debug("vacuumed queue_jobs", "dead", r.Dead, "live", r.Live, "took", time.Since(began).Round(time.Millisecond))
		}
	}
}
