package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/internal/lifecycle"
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
// claimed nothing more, gave its other running jobs the grace period to
// finish and interrupted those still running then (each released to run
// again as its next attempt, with no try spent: see store.JobInterrupt),
// and gave up; its process should exit non-zero so that its supervisor
// replaces it.
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
	// Prefetch is the most claimed jobs that may wait for a free slot
	// while the worker's jobs are short (their recent average runtime
	// under PrefetchBelow): a claim then takes up to Concurrency + Prefetch
	// jobs, and the waiting jobs start while the next claim is on its way,
	// so a low concurrency is not held to one round trip per few jobs.
	// Fewer wait when jobs take longer: the waiting jobs hold at most
	// PrefetchWindow of work by the recent average runtime (see
	// PrefetchFor). Jobs that take PrefetchBelow or more are claimed only
	// for free slots, so that no worker sits on slow jobs others could
	// run; the runtime that counts is the recent average, or how long the
	// running jobs have gone without one finishing when that is longer
	// (RuntimeNow). A prefetched job that still waits PrefetchHold after
	// its claim is given back (see PrefetchHold). The price of
	// prefetching is leases held on jobs not yet running: if the worker
	// dies, they wait for its lease to be released like its running ones
	// (under a master that hears its prefetch reports, see ReportPrefetch,
	// they are given back without an attempt). Default DefaultPrefetch;
	// negative: never prefetch.
	//
	// Prefetched jobs wait, and start, in order: the queues' order, then
	// within a queue lowest priority first, then the earliest available,
	// then the lowest id, as a claim picks them. A job more urgent than
	// the waiting ones (a lower priority, or an earlier queue) dispatched
	// while they wait is taken by the worker's next claim, which comes once
	// a quarter of its room (Concurrency plus the prefetch) is free, and
	// then starts before every prefetched job still waiting: a prefetch
	// delays a more urgent job by at most one claim (only the jobs that
	// start before that claim returns go first). Running jobs are never
	// preempted.
	Prefetch int
	// PayloadBudget bounds, in bytes, the payloads of the jobs the worker
	// holds, claimed and running, besides the count of its slots: a claim
	// takes no more jobs than fit what the held jobs leave of it (the
	// database measures each payload as it is stored, see
	// store.JobClaimParams.MaxBytes), and the worker claims nothing while
	// it is full. A worker that holds nothing claims the next job whatever
	// its size, so a job larger than the budget runs too, alone. Default
	// DefaultPayloadBudget; negative: no bound.
	PayloadBudget int64
	// PrefetchHold bounds how long a prefetched job waits for a slot: one
	// that has waited this long since its claim is given back, its attempt
	// not counted, and its queue notified, so that a worker with a free
	// slot takes it at once. So whatever the timing (a claim sized by
	// short jobs that took long ones, a burst after a lull), no job waits
	// behind another worker's prefetch for longer than this while slots
	// are free elsewhere. Default DefaultPrefetchHold; negative: never
	// give back.
	PrefetchHold time.Duration
	// ReportPrefetch sends Reports a spawner.ReportPrefetch report after
	// each claim that leaves jobs waiting for a slot, and before such jobs
	// start or once they are given back, so that its master, when the
	// process dies, gives back without an attempt the jobs it never
	// started. A worker under a master sets it.
	ReportPrefetch bool
	// MaxJobs stops the worker after it has started this many jobs (0: never).
	MaxJobs int
	// MaxTime stops the worker after it has run this long (0: never).
	MaxTime time.Duration
	// MaxMemoryMB stops the worker when its resident memory exceeds it (0: never).
	MaxMemoryMB int
	// StopWhenEmpty stops the worker once nothing is running or unwritten and
	// no job is ready on its queues.
	StopWhenEmpty bool
	// Isolate makes the worker an isolation process, which its master
	// starts for queues with suspect jobs (jobs that were in two or more
	// processes that died, see store.SuspectCrashes): it claims suspects
	// and nothing else, one at a time (Concurrency 1, no prefetch, and
	// MaxUnsaved 1: the next is claimed once the last one's outcome is
	// written), so that a crash of its process is its one job's doing, and
	// it stops once no suspect is ready on its queues (StopWhenEmpty).
	// Ordinary workers never claim a suspect.
	Isolate bool
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
	// up on it; and then how long the jobs running beside it have to
	// finish before the worker interrupts them and exits.
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
	// Now is the worker's clock: when attempts start and end, when a job
	// was cancelled, since when the worker is fenced, when it last beat
	// and how long a vacuum took. Default time.Now. Timers and tickers
	// (polls, heartbeats, the watchdog's ticks) run on real time.
	Now func() time.Time
}

// Result says how a worker stopped.
type Result struct {
	Reason spawner.ExitReason
	// Jobs is the number of attempts the worker finished.
	Jobs int64
}

// Worker claims and runs jobs. Build it with New and call Run once.
//
// It is an ordered list of services (see the package doc), each its own
// type with its own state: Run starts them in order and stops them in the
// reverse.
type Worker struct {
	cfg Config

	completer completer
	runners   *runners
	poller    *cancelPoller
	listener  *listener
	vacuum    *vacuum
	claimer   *claimer
	// services is the worker, in start order; Run stops them in reverse.
	services []lifecycle.Service

	ran atomic.Bool
	sig struct {
		lifecycle lifecycle.Signal[string] // "start NAME", "stop NAME", in Run's order
	}
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
	if cfg.Isolate {
		// One job at a time, and the next claimed only once the last one's
		// outcome is written: when the process dies, the one job it holds
		// is the one that ran.
		cfg.Concurrency, cfg.Prefetch, cfg.StopWhenEmpty, cfg.MaxUnsaved = 1, -1, true, 1
	}
	if cfg.MasterTTL <= 0 {
		cfg.MasterTTL = defaults.TTL
	}
	if cfg.MaxUnsaved <= 0 {
		cfg.MaxUnsaved = DefaultMaxUnsaved(cfg.Concurrency)
	}
	switch {
	case cfg.Prefetch == 0:
		cfg.Prefetch = DefaultPrefetch
	case cfg.Prefetch < 0:
		cfg.Prefetch = 0
	}
	switch {
	case cfg.PayloadBudget == 0:
		cfg.PayloadBudget = DefaultPayloadBudget
	case cfg.PayloadBudget < 0:
		cfg.PayloadBudget = 0
	}
	cfg.PrefetchHold = cmp.Or(cfg.PrefetchHold, DefaultPrefetchHold)
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger.With("worker", cfg.Name)
	n := newNudges()
	wr := newWriter(st, cfg.Name, cfg.Master, log, writerHooks{
		onWritten: n.poke, onFail: n.failed, events: jobs, onEvent: cfg.OnEvent})
	return assemble(st, jobs, cfg, log, n, wr), nil
}

// assemble builds a worker of cfg (defaults applied) around its
// completer, each service given what it needs as it is built, in the
// order they start: the completer, the runners (through which the
// executor runs handlers), the cancel poller, the listener, the vacuum,
// then the claimer, which drives them. n wakes the claimer; the
// completer was built with it.
func assemble(st *store.Store, jobs *queue.Registry, cfg Config, log *slog.Logger, n *nudges, comp completer) *Worker {
	exec := newExecutor(st, jobs, cfg, log, comp)
	run := newRunners(cfg, log, exec)
	poller := newCancelPoller(st, log, n.cancels)
	c := newClaimer(st, cfg, log, claimerDeps{nudges: n, completer: comp, exec: exec, runners: run, poller: poller})
	w := &Worker{
		cfg:       cfg,
		completer: comp,
		runners:   run,
		poller:    poller,
		listener:  newListener(st, cfg.Queues, log, n.poke, n.resyncSoon, n.noticeCancel, n.refused),
		vacuum:    newVacuum(st, cfg.VacuumEvery, log, cfg.Now, c.finished.Load),
		claimer:   c,
	}
	w.services = []lifecycle.Service{w.completer, w.runners, w.poller, w.listener, w.vacuum, w.claimer}
	return w
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

// Prefetching (see Config.Prefetch).
const (
	// PrefetchBelow is the recent average runtime under which a worker
	// prefetches jobs.
	PrefetchBelow = 5 * time.Millisecond
	// PrefetchWindow bounds the work waiting in a worker's prefetch: the
	// jobs waiting for a slot would keep its Concurrency slots busy this
	// long at their recent average runtime.
	PrefetchWindow = 20 * time.Millisecond
	// DefaultPrefetch is the default bound on prefetched jobs, whatever
	// the concurrency: with no-op jobs at concurrency 64 it lets claims
	// grow to a few hundred jobs, as they are at concurrency 1000. On a
	// 2-core machine, 100k no-op jobs at concurrency 64 drained at about
	// 20,000 jobs/s with a bound of 64, 26,000 with 256 and 31,000 with
	// 512, against 35,000 at concurrency 1000.
	DefaultPrefetch = 512
	// DefaultPrefetchHold is the default bound on a prefetched job's wait
	// for a slot (Config.PrefetchHold): five times the work a full
	// prefetch holds (PrefetchWindow), so that only a prefetch whose
	// jobs turned out slow is given back.
	DefaultPrefetchHold = defaults.PrefetchHold
)

// PrefetchFor is how many jobs may wait for a free slot, beyond the
// running ones, for a worker of the given concurrency and bound (Config.
// Prefetch) whose recent jobs took runtime on average (negative: none
// finished yet): none before the first job ends or when jobs take
// PrefetchBelow or more, else as many as fill PrefetchWindow at that
// runtime (at least PrefetchWindow / PrefetchBelow per slot), at most
// bound.
func PrefetchFor(concurrency, bound int, runtime time.Duration) int {
	if runtime < 0 || runtime >= PrefetchBelow || bound <= 0 {
		return 0
	}
	if runtime == 0 {
		return bound
	}
	n := int64(PrefetchWindow) * int64(concurrency) / int64(runtime)
	return int(min(n, int64(bound)))
}

// DefaultPayloadBudget is the default byte budget of a worker's claimed
// and running payloads (Config.PayloadBudget).
const DefaultPayloadBudget = defaults.PayloadBudget

// DefaultName returns host:pid:random, unique per process (a master's
// default name has the same form).
func DefaultName() string { return defaults.Name() }

// Name is the worker's lease-holder name.
func (w *Worker) Name() string { return w.cfg.Name }

// Pause stops the worker from taking new jobs; running jobs go on.
func (w *Worker) Pause() { w.claimer.pause(true) }

// Continue lets a paused worker take jobs again.
func (w *Worker) Continue() { w.claimer.pause(false) }

// PauseQueues replaces the set of queues the worker does not claim from;
// running jobs go on. An empty set resumes every queue.
func (w *Worker) PauseQueues(queues []string) {
	w.claimer.pauseQueues(queueSet(queues))
}

// queueSet is the set of queues.
func queueSet(queues []string) map[string]bool {
	set := make(map[string]bool, len(queues))
	for _, q := range queues {
		set[q] = true
	}
	return set
}

// Stop asks the worker to stop as if its context ended: it takes no new
// jobs, lets running ones finish, writes their outcomes and returns.
func (w *Worker) Stop() { w.claimer.requestStop() }

// Run works until ctx ends (or Stop), a limit is reached, or, with
// StopWhenEmpty, there is nothing left to do. A stopping worker takes no new
// jobs, lets running ones finish within their timeout, writes every outcome
// and returns a nil error. Jobs run on a context that ctx's cancellation does
// not reach: only their own timeout cancels them.
//
// Run starts the worker's services in order and, once the claimer has
// ended (ctx ended and its stop is done, or a limit was reached), stops
// them in the reverse (see the package doc). When one fails to start,
// those started are stopped and its error returned. A second Run fails.
func (w *Worker) Run(ctx context.Context) (Result, error) {
	if !w.ran.CompareAndSwap(false, true) {
		return Result{}, errors.New("worker: Run called twice")
	}
	n, err := lifecycle.StartAll(ctx, w.services, &w.sig.lifecycle)
	if err != nil {
		lifecycle.StopAll(w.services[:n], &w.sig.lifecycle)
		return Result{}, err
	}
	select {
	case <-ctx.Done():
	case <-w.claimer.Done():
	}
	lifecycle.StopAll(w.services, &w.sig.lifecycle)
	return w.claimer.Result()
}
