package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// claimer is the service that runs the worker's loop, the one owner of
// the loop state (loopState), and the first of the hot path's three
// roles (fetching; then executing, see execute.go, and completing, see
// complete.go): it claims jobs from the queues in priority order into
// free slots and the prefetch buffer, holding back while the completer
// has too much unwritten (backpressure), starts them on the runners, hands
// each end to the executor (which decides its outcome and gives it to the
// completer), watches their timeouts and cancels, beats, reconciles
// (reconcile.go) and stops at the worker's limits. It starts
// last and stops first: its stop is the worker's, and needs every other
// service while it lasts.
//
// Its Stop begins the worker's stop as Run's context ending does, and
// waits for the loop to end: no new jobs, running ones finish within
// their timeout, every outcome is written. The loop's statements in flight
// are not cancelled at once, since a claim whose answer is lost leaves
// jobs reserved: they are cut StopCut after the stop began (see cut), and
// the drain has DrainTimeout, so on a frozen database the stop takes at
// most StopCut + DrainTimeout past the running jobs.
type claimer struct {
	cfg  Config
	st   *store.Store
	log  *slog.Logger
	logs ratelog.Log // failing claims: once per streak, then once a minute
	now  func() time.Time
	// order is the order held jobs start in (see startOrder), and
	// bufOrder the same for the buffer's entries.
	order    func(a, b store.ClaimedJob) int
	bufOrder func(a, b buffered) int
	// size bounds a claim while claims time out on the server (see
	// batchSize); the loop's own.
	size batchSize
	// cursors are where the claims of each queue begin (see
	// claimCursor); the loop's own.
	cursors map[string]*claimCursor

	// The roles and services it drives, given when it is built (see
	// claimerDeps): the nudges wake it, the completer takes outcomes, the
	// executor decides them, the runners run started jobs (tasks) and hand
	// them back (done), the poller looks for cancel requests among the
	// running ids.
	*nudges
	completer completer
	exec      *executor
	runners   *runners
	poller    *cancelPoller
	tasks     chan<- task
	done      <-chan finished

	paused atomic.Bool
	// pausedQueues is the set of queues not to claim from.
	pausedQueues atomic.Pointer[map[string]bool]
	stopOnce     sync.Once
	stop         chan struct{}
	// finished counts attempts finished; the vacuum reads it too.
	finished atomic.Int64
	// base is the service's context without its cancellation: the parent
	// of the jobs' contexts and of the statements of the stop (release,
	// drain, the last reconcile), which the stop must not cut short.
	base context.Context
	// cut is the context of the loop's own statements (claims, probes,
	// reconciles, releases): cancelled StopCut after the worker begins to
	// stop, so that a statement hanging on a frozen or unreachable
	// database cannot hold up the stop. The loop owns cutTimer.
	cut       context.Context
	cutCancel context.CancelFunc
	cutTimer  *time.Timer

	// Set by its goroutine before it ends.
	res Result
	err error

	lc  lifecycle.Lifecycle
	sig struct {
		stopping lifecycle.Signal[spawner.ExitReason] // the stop began, and why
		polled   lifecycle.Signal[struct{}]           // the poll timer fired and was handled
		claimed  lifecycle.Signal[int]                // a claim's jobs (how many, never 0) joined the buffer
		split    lifecycle.Signal[int]                // a claim of that many jobs timed out and shrank
		started  lifecycle.Signal[int64]              // the id of a job started, in start order
		gaveBack lifecycle.Signal[int]                // that many prefetched jobs waited PrefetchHold and were given back
	}
}

// claimerDeps are the roles and services the claimer drives.
type claimerDeps struct {
	nudges    *nudges
	completer completer
	exec      *executor
	runners   *runners
	poller    *cancelPoller
}

func newClaimer(st *store.Store, cfg Config, log *slog.Logger, d claimerDeps) *claimer {
	c := &claimer{
		cfg:       cfg,
		st:        st,
		log:       log,
		now:       cfg.Now,
		order:     startOrder(queueRanks(cfg.Queues)),
		size:      batchSize{ceiling: cfg.Concurrency + cfg.Prefetch},
		cursors:   make(map[string]*claimCursor, len(cfg.Queues)),
		nudges:    d.nudges,
		completer: d.completer,
		exec:      d.exec,
		runners:   d.runners,
		poller:    d.poller,
		tasks:     d.runners.tasks,
		done:      d.runners.done,
		stop:      make(chan struct{}),
	}
	c.bufOrder = func(a, b buffered) int { return c.order(a.ClaimedJob, b.ClaimedJob) }
	c.paused.Store(cfg.Paused)
	c.pauseQueues(queueSet(cfg.PausedQueues))
	return c
}

func (c *claimer) Name() string { return "claimer" }

// Start runs the loop on its own goroutine until the stop it begins
// (Stop, Worker.Stop, a limit) is done.
func (c *claimer) Start(ctx context.Context) error {
	sctx, end, err := c.lc.Begin(ctx, c.Name())
	if err != nil {
		return err
	}
	c.base = context.WithoutCancel(sctx)
	c.cut, c.cutCancel = context.WithCancel(c.base)
	go func() {
		defer end()
		defer func() {
			if c.cutTimer != nil {
				c.cutTimer.Stop()
			}
			c.cutCancel()
		}()
		c.res, c.err = c.loop(sctx, c.base)
	}()
	return nil
}

// Stop begins the worker's stop and waits until it is done (see claimer).
func (c *claimer) Stop() { c.lc.Halt() }

// Done is closed once the loop has ended (nil before Start).
func (c *claimer) Done() <-chan struct{} { return c.lc.Ended() }

// Result is how the loop ended; call it once Done is closed.
func (c *claimer) Result() (Result, error) { return c.res, c.err }

// since is how long ago t was, by the worker's clock.
func (c *claimer) since(t time.Time) time.Duration { return c.now().Sub(t) }

// pause sets whether the claimer takes new jobs.
func (c *claimer) pause(paused bool) { c.paused.Store(paused); c.poke() }

// pauseQueues replaces the set of queues not to claim from.
func (c *claimer) pauseQueues(set map[string]bool) { c.pausedQueues.Store(&set); c.poke() }

// requestStop begins the worker's stop as Run's context ending does,
// without waiting for it (Worker.Stop); safe before Start and twice.
func (c *claimer) requestStop() { c.stopOnce.Do(func() { close(c.stop) }) }

type running struct {
	// job is the job as claimed but its payload, which only the runner
	// holds (see start).
	job      store.ClaimedJob
	bytes    int64 // its payload's size, held while it runs
	started  time.Time
	deadline time.Time
	cancel   context.CancelFunc
	// stop cancels the job's context with a cause (an operator's cancel);
	// cancelAt is when, cancelBy who asked (zero: not cancelled).
	stop     context.CancelCauseFunc
	cancelAt time.Time
	cancelBy string
}

// buffered is a claimed job waiting in the prefetch buffer for a slot.
type buffered struct {
	store.ClaimedJob
	// at is when it was claimed, by the worker's clock: it starts within
	// PrefetchHold of that, or is given back (see giveBackOverdue).
	at time.Time
	// told says the master was told it waits (Config.ReportPrefetch), and
	// must be told before it starts or once it is given back.
	told bool
}

type loopState struct {
	running map[int64]*running
	// buffer holds claimed jobs waiting for a free slot (prefetch), in
	// the order they start in (see mergeClaimed). oldest is at most the
	// earliest claim time among them (it is not raised as they start).
	buffer  []buffered
	oldest  time.Time
	claimed int64 // jobs claimed, less those given back unstarted
	started int64 // jobs started
	// runningBytes is the payload bytes of the running jobs; jobBytes the
	// smallest payload of the last claim that took any (0 before one),
	// by which a claim under the byte budget asks for no more jobs than
	// fit (see claimLimit).
	runningBytes int64
	jobBytes     int64
	// runtime is a moving average of recent runtimes; negative until the
	// first attempt finishes. lastEnd is when the last attempt finished,
	// or when the worker, idle, started a job: how long the running jobs
	// have gone without one finishing (see runtimeNow).
	runtime time.Duration
	lastEnd time.Time
	// gaveBack counts the prefetched jobs given back since the last line
	// that said so, gaveBackLogged is when that line was written.
	gaveBack       int
	gaveBackLogged time.Time
	stopping       bool
	reason         spawner.ExitReason
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
	// watchdog is the loop's watchdog ticker, which await watches too:
	// a handler's timeout is enforced while a statement of the loop is in
	// flight, however long the database takes to answer it.
	watchdog <-chan time.Time
	// stuck is set once the worker gave up on a job that ignored its
	// timeout or cancel (see giveUp): the error Run returns. grace fires
	// TimeoutGrace after the first such give-up; the jobs still running
	// then are interrupted. beside is how many jobs were running beside
	// the first job given up on, interrupted how many of them were still
	// running when the grace period ended.
	stuck       error
	grace       *time.Timer
	beside      int
	interrupted int
}

// graceC is the channel of the grace period beside a stuck job (nil
// before one).
func (s *loopState) graceC() <-chan time.Time {
	if s.grace == nil {
		return nil
	}
	return s.grace.C
}

// stopSignal begins the stop when Run's context ended or Stop was
// called; the loop and await call it from their selects.
func (c *claimer) stopSignal(s *loopState, fromCtx bool) {
	if fromCtx {
		s.ctxDone = nil
	} else {
		s.stopC = nil
	}
	c.beginStop(s, spawner.ExitStopped)
}

// held is how many jobs the worker holds and has not finished.
func (s *loopState) held() int { return len(s.running) + len(s.buffer) }

// heldBytes is the payload bytes of the jobs the worker holds and has not
// finished: running, and claimed waiting for a slot.
func (s *loopState) heldBytes() int64 {
	n := s.runningBytes
	for _, j := range s.buffer {
		n += int64(len(j.Payload))
	}
	return n
}

func (c *claimer) loop(ctx, jobBase context.Context) (Result, error) {
	s := &loopState{running: map[int64]*running{}, runtime: -1}
	c.report(spawner.Report{Type: spawner.ReportReady, PID: os.Getpid(), Worker: c.cfg.Name,
		Queues: c.cfg.Queues, Concurrency: c.cfg.Concurrency})
	c.log.Info("worker started", "queues", c.cfg.Queues, "concurrency", c.cfg.Concurrency)

	heartbeat := time.NewTicker(c.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	var last spawner.Report // the last heartbeat sent
	lastBeat := c.now()
	watchdog := time.NewTicker(min(200*time.Millisecond, c.cfg.TimeoutGrace))
	defer watchdog.Stop()
	poll := time.NewTimer(c.cfg.PollInterval)
	defer poll.Stop()
	cancelPoll := time.NewTicker(c.cfg.CancelPollInterval)
	defer cancelPoll.Stop()
	defer func() {
		if s.grace != nil {
			s.grace.Stop()
		}
	}()
	reconcile := time.NewTicker(c.cfg.HeartbeatInterval)
	defer reconcile.Stop()
	// hold wakes the loop when a prefetched job has waited PrefetchHold
	// (see giveBackOverdue); armed while jobs wait in the buffer.
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	holdArmed := false
	var maxTime <-chan time.Time
	if c.cfg.MaxTime > 0 {
		t := time.NewTimer(c.cfg.MaxTime)
		defer t.Stop()
		maxTime = t.C
	}
	s.ctxDone, s.stopC, s.watchdog = ctx.Done(), c.stop, watchdog.C
	needClaim, probe := true, false
	for {
		c.startBuffered(jobBase, s)
		if c.giveBackOverdue(s) {
			needClaim = true
		}
		if s.stopping && len(s.running) == 0 {
			break
		}
		if needClaim && !s.stopping && !c.paused.Load() && c.roomToClaim(s) &&
			c.completer.Unsaved() < c.cfg.MaxUnsaved {
			s.freed = false
			needClaim = c.claim(ctx, jobBase, s, poll, probe) || s.freed
			probe = false
			c.startBuffered(jobBase, s)
		}
		if s.stopping && len(s.running) == 0 {
			break
		}
		// The watchdog only ticks while jobs run, and the heartbeat while
		// there is news for the master (or outcomes wait for a write that
		// fails, which the master must keep hearing of): an idle worker
		// wakes for its poll alone, and beats from there now and then.
		var watchdogC, heartbeatC, cancelPollC <-chan time.Time
		if len(s.running) > 0 {
			watchdogC, cancelPollC = watchdog.C, cancelPoll.C
		}
		if len(s.running) > 0 || c.finished.Load() != last.Jobs || c.paused.Load() != last.Paused ||
			c.completer.Stalled() > 0 || last.Unwritten > 0 {
			heartbeatC = heartbeat.C
		}
		var reconcileC <-chan time.Time
		if c.reconcileDue(s) {
			reconcileC = reconcile.C
		}
		var holdC <-chan time.Time
		if len(s.buffer) > 0 && c.cfg.PrefetchHold > 0 {
			if !holdArmed {
				hold.Reset(max(c.cfg.PrefetchHold-c.since(s.oldest), time.Millisecond))
				holdArmed = true
			}
			holdC = hold.C
		}
		select {
		case <-s.ctxDone:
			c.stopSignal(s, true)
		case <-s.stopC:
			c.stopSignal(s, false)
		case f := <-c.done:
			c.finishReady(s, f)
			needClaim = true
		case <-c.wake:
			needClaim = true
		case n := <-c.cancels:
			c.cancelHeld(s, n)
		case <-cancelPollC:
			c.askCancels(s)
		case <-poll.C:
			poll.Reset(c.cfg.PollInterval)
			if heartbeatC == nil && c.since(lastBeat) >= IdleHeartbeats*c.cfg.HeartbeatInterval {
				c.heartbeat(s, &last)
				lastBeat = c.now()
			}
			// A poll with no claim pending since the last one is the idle
			// case: one statement asks whether anything is ready first.
			probe = !needClaim
			needClaim = true
			c.sig.polled.Send(struct{}{})
		case <-maxTime:
			c.beginStop(s, spawner.ExitMaxTime)
		case <-heartbeatC:
			c.heartbeat(s, &last)
			lastBeat = c.now()
		case <-reconcileC:
			if c.cut.Err() == nil { // cut: the database did not answer the stop
				c.reconcile(c.cut, s)
			}
		case <-watchdogC:
			c.giveUpOverdue(s)
		case <-s.graceC():
			c.interrupt(s)
		case <-holdC:
			holdArmed = false // the loop's next round gives back what waited too long
		}
	}
	if s.stuck != nil && s.beside > 0 {
		c.log.Info("the jobs running beside the job given up on are done: exiting so a fresh worker takes over",
			"jobs", s.beside, "interrupted", s.interrupted)
	}
	return c.exit(s, s.stuck)
}

// heartbeat reports the worker's state to its master and checks its
// memory limit.
func (c *claimer) heartbeat(s *loopState, last *spawner.Report) {
	mem := c.cfg.MemoryMB()
	*last = spawner.Report{Type: spawner.ReportHeartbeat, Jobs: c.finished.Load(),
		Running: len(s.running), MemoryMB: mem, Paused: c.paused.Load(), Unwritten: c.completer.Stalled()}
	c.report(*last)
	if c.cfg.MaxMemoryMB > 0 && mem > float64(c.cfg.MaxMemoryMB) {
		c.log.Info("memory limit reached", "memory_mb", mem, "max_memory_mb", c.cfg.MaxMemoryMB)
		c.beginStop(s, spawner.ExitMaxMemory)
	}
}

func (c *claimer) beginStop(s *loopState, reason spawner.ExitReason) {
	if s.stopping {
		return
	}
	s.stopping, s.reason = true, reason
	c.cutTimer = time.AfterFunc(StopCut, c.cutCancel)
	c.log.Info("worker stopping: finishing running jobs", "reason", string(reason), "running", len(s.running))
	c.sig.stopping.Send(reason)
}

// claim fills free slots from the queues in priority order. It reports
// whether another claim may find more right away. With probe (an idle
// worker's poll) it first asks, in one statement over every queue, whether
// any job is ready, and claims only if one is: an idle worker costs one
// statement per poll interval, however many queues it works.
func (c *claimer) claim(ctx, jobBase context.Context, s *loopState, poll *time.Timer, probe bool) bool {
	limit := c.cfg.Concurrency + c.prefetch(s) - s.held()
	if c.cfg.MaxJobs > 0 {
		limit = min(limit, c.cfg.MaxJobs-int(s.claimed))
	}
	limit = c.claimLimit(s, limit)
	// The claim must not be cut off half-way by a stop signal: a claim whose
	// answer is lost would leave jobs reserved until a master releases them.
	// Only a claim still hanging StopCut after a stop is cut (see cut).
	claimCtx, cancel := context.WithTimeout(c.cut, 30*time.Second)
	defer cancel()
	if probe && !c.cfg.StopWhenEmpty {
		var next store.NextJob
		var err error
		after := c.marks()
		c.await(s, func() { next, err = c.st.JobNextAfter(claimCtx, c.cfg.Queues, c.cfg.Master, after) })
		if err != nil {
			c.failed(err)
			c.logs.Fail(c.log, "claim", "looking for ready jobs failed; retrying at the next poll", "err", err)
			return false
		}
		c.logs.OK(c.log, "claim", "the database answers again: claiming resumes")
		if !c.fenced(s, next.Live) {
			return false
		}
		if !next.Any {
			return false // nothing at all: wait for a notification or the next poll
		}
		if next.In > 0 {
			c.schedule(poll, next.In)
			return false
		}
	}
	paused := *c.pausedQueues.Load()
	for i, q := range c.cfg.Queues {
		if limit <= 0 {
			break
		}
		if paused[q] {
			continue
		}
		var jobs []store.ClaimedJob
		var err error
		want := c.size.limit(limit)
		cur := c.cursor(q)
		began := c.now()
		after := cur.after(began)
		bytes, alone := c.byteRoom(s)
		c.await(s, func() {
			jobs, err = c.st.JobClaim(claimCtx, store.JobClaimParams{Queue: q, Limit: want, Worker: c.cfg.Name, Master: c.cfg.Master,
				Suspects: c.cfg.Isolate, After: after, MaxBytes: bytes, FirstAnySize: alone})
		})
		cur.claimed(began, c.since(began), after, jobs)
		if err != nil {
			c.failed(err)
			if store.StatementTimedOut(err) && ctx.Err() == nil {
				// The database answered: a smaller claim may pass, and is
				// tried at once.
				return c.claimTimedOut(want)
			}
			c.logs.Fail(c.log, "claim", "claim failed; retrying at the next poll", "queue", q, "err", err,
				"database", store.ClassifyError(err).String())
			return false
		}
		c.logs.OK(c.log, "claim", "the database answers again: claiming resumes")
		if c.size.ok(want) {
			c.logs.OK(c.log, "claim split", "claims pass at their full size again")
		}
		if ctx.Err() != nil || c.paused.Load() {
			// Stopped or paused while claiming: these jobs never start.
			c.release(jobs, "")
			return false
		}
		if len(jobs) > 0 {
			at := c.now()
			if len(s.buffer) == 0 {
				s.oldest = at
			}
			batch := make([]buffered, len(jobs))
			for i := range jobs {
				batch[i] = buffered{ClaimedJob: jobs[i], at: at}
			}
			s.buffer = mergeClaimed(s.buffer, batch, c.bufOrder)
			s.jobBytes = smallestPayload(jobs)
			c.sig.claimed.Send(len(jobs))
		}
		s.claimed += int64(len(jobs))
		held := want < limit && len(jobs) == want // the claim size held it back
		limit -= len(jobs)
		// Start them now, not after the rest of the round; the master
		// hears first of those left waiting (the jobs past the free slots).
		c.tellPrefetched(s, c.cfg.Concurrency-len(s.running))
		c.startBuffered(jobBase, s)
		if held {
			return true // more may be waiting in this queue: claim again at once
		}
		if len(jobs) < want && c.cutByBytes(claimCtx, s, q, i, len(jobs), alone) {
			// The queue's next job does not fit the byte budget now: it is
			// claimed, before any job of a later queue, once enough of the
			// jobs held have finished.
			return false
		}
	}
	if c.cfg.MaxJobs > 0 && s.claimed >= int64(c.cfg.MaxJobs) {
		return false // the last of them start from the buffer; then the worker stops
	}
	if limit <= 0 {
		return true // every slot filled: more may be waiting
	}
	// The queues ran dry.
	if c.cfg.StopWhenEmpty && s.held() == 0 && c.empty(claimCtx) {
		c.beginStop(s, spawner.ExitEmpty)
		return false
	}
	var next store.NextJob
	var err error
	after := c.marks()
	c.await(s, func() { next, err = c.st.JobNextAfter(claimCtx, c.cfg.Queues, c.cfg.Master, after) })
	if err == nil {
		if c.fenced(s, next.Live) && next.Any && next.In > 0 {
			c.schedule(poll, next.In)
		}
	}
	return false
}

// marks are the marks the worker's claims of each queue would read past
// now (see claimCursor.after): a look for work reads past them too, and
// from the head of a queue whose claim from the head is due.
func (c *claimer) marks() map[string][]store.ClaimMark {
	now := c.now()
	var out map[string][]store.ClaimMark
	for q, cur := range c.cursors {
		if m := cur.after(now); m != nil {
			if out == nil {
				out = make(map[string][]store.ClaimMark, len(c.cursors))
			}
			out[q] = m
		}
	}
	return out
}

// cursor is where the claims of queue q begin. An isolation process's
// claims of suspects read from the head, always: a suspect's index has
// an entry for suspects only.
func (c *claimer) cursor(q string) *claimCursor {
	cur, ok := c.cursors[q]
	if !ok {
		cur = &claimCursor{}
		if !c.cfg.Isolate {
			c.cursors[q] = cur
		}
	}
	return cur
}

// claimTimedOut shrinks the claim size after a claim of n jobs timed out
// on the server (it claimed nothing: the server rolled it back), logs it
// once per episode, then once a minute, and reports whether to claim again
// at once: yes while the claim can still shrink; a claim of one job that
// timed out waits for the next poll or wake-up.
func (c *claimer) claimTimedOut(n int) bool {
	size := c.size.timedOut(n)
	c.logs.Fail(c.log, "claim split", fmt.Sprintf("statement timeout on a claim of %d jobs; claiming at most %d at a time", n, size),
		"batch_size", size)
	c.sig.split.Send(n)
	return n > 1
}

// await runs one statement of a claim (fn) on its own goroutine and, until
// it returns, finishes the jobs that end meanwhile: their outcomes go to
// the completer, whose statements never wait on the claim's. A claim held up
// (every claim reads the member row of its holder's master, so a lock on
// fleet_masters holds it until the lock goes, or the database is slow)
// thus never holds up the outcomes of jobs that ran. A job finished here
// sets s.freed, for the claim that follows, and its slot takes a
// prefetched job at once: the prefetch keeps the slots busy while the next
// claim is on its way, which is what it is for. The watchdog ticks here
// too: a job that ignores its timeout is given up on at its time, not once
// a slow statement returns.
func (c *claimer) await(s *loopState, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	for {
		select {
		case <-done:
			return
		case f := <-c.done:
			c.finishReady(s, f)
			s.freed = true
			c.startBuffered(c.base, s)
		case n := <-c.cancels:
			c.cancelHeld(s, n)
		case <-s.watchdog:
			c.giveUpOverdue(s)
		case <-s.ctxDone:
			c.stopSignal(s, true)
		case <-s.stopC:
			c.stopSignal(s, false)
		}
	}
}

// fenced notes whether the worker's master row is live and reports it. A
// worker fenced for MasterTTL stops (its running jobs are released by
// another master meanwhile; their outcomes will be refused).
func (c *claimer) fenced(s *loopState, live bool) bool {
	if live {
		if !s.fencedSince.IsZero() {
			c.log.Info("master row live again: claiming resumes", "master", c.cfg.Master)
		}
		s.fencedSince = time.Time{}
		return true
	}
	if s.fencedSince.IsZero() {
		s.fencedSince = c.now()
		c.log.Warn("fenced: the master's membership row is not live, so this worker claims nothing", "master", c.cfg.Master)
	}
	if c.since(s.fencedSince) >= c.cfg.MasterTTL {
		c.beginStop(s, spawner.ExitFenced)
	}
	return false
}

// prefetch is how many jobs beyond its concurrency the worker may claim
// now (see PrefetchFor), by the runtime its jobs take now (runtimeNow).
func (c *claimer) prefetch(s *loopState) int {
	return PrefetchFor(c.cfg.Concurrency, c.cfg.Prefetch, c.runtimeNow(s))
}

// runtimeNow is the runtime the prefetch is sized by (see RuntimeNow).
func (c *claimer) runtimeNow(s *loopState) time.Duration {
	return RuntimeNow(s.runtime, len(s.running), c.since(s.lastEnd))
}

// RuntimeNow is the runtime a worker's prefetch is sized by: avg, the
// moving average of its recent runtimes (negative: none finished yet);
// while jobs run, how long they have gone without one finishing (quiet),
// when that is longer; and unknown (-1) once the worker has been idle
// (nothing running) for longer than PrefetchWindow. An average of the
// jobs that finished says nothing of those that have not: when short jobs
// give way to long ones, it stays short until the first long one ends,
// and a claim sized by it would take many long jobs for slots that will
// not be free for a long while. Running at least PrefetchBelow without a
// finish thus ends the prefetch until jobs finish again; and after a lull,
// whatever comes next (a burst of slow jobs, or those another worker just
// gave back) is claimed for free slots only, until the first of it ends.
func RuntimeNow(avg time.Duration, running int, quiet time.Duration) time.Duration {
	switch {
	case avg < 0:
		return avg
	case running > 0:
		return max(avg, quiet)
	case quiet > PrefetchWindow:
		return -1
	default:
		return avg
	}
}

// giveBackOverdue gives back the prefetched jobs that have waited
// PrefetchHold since their claim without a slot (see giveBack), and
// reports whether it gave any back.
func (c *claimer) giveBackOverdue(s *loopState) bool {
	hold := c.cfg.PrefetchHold
	if len(s.buffer) == 0 || hold <= 0 || s.stopping {
		return false
	}
	now := c.now()
	if now.Sub(s.oldest) < hold {
		return false
	}
	var back []buffered
	keep := s.buffer[:0]
	var oldest time.Time
	for _, b := range s.buffer {
		if now.Sub(b.at) >= hold {
			back = append(back, b)
			continue
		}
		keep = append(keep, b)
		if oldest.IsZero() || b.at.Before(oldest) {
			oldest = b.at
		}
	}
	clear(s.buffer[len(keep):])
	s.buffer, s.oldest = keep, oldest
	if len(s.buffer) == 0 {
		s.buffer = nil
	}
	if len(back) == 0 {
		return false
	}
	c.giveBack(s, back)
	return true
}

// giveBack gives back prefetched jobs that waited too long for a slot:
// their attempt is not counted, and their queues are notified, so that a
// worker with a free slot takes them at once. This one claims only for
// its free slots until its running jobs finish (see RuntimeNow): it does
// not take them back. It logs once, then at most once a minute with the
// count since.
func (c *claimer) giveBack(s *loopState, back []buffered) {
	jobs := c.unbuffer(s, back)
	c.release(jobs, "")
	var queues []string
	for _, j := range jobs {
		if !slices.Contains(queues, j.Queue) {
			queues = append(queues, j.Queue)
		}
	}
	ctx, cancel := context.WithTimeout(c.cut, reconcileTimeout)
	if err := c.st.QueueNotify(ctx, queues); err != nil {
		c.log.Debug("notifying the queues of given-back jobs failed: other workers find them at their poll", "err", err)
	}
	cancel()
	s.gaveBack += len(jobs)
	if s.gaveBackLogged.IsZero() || c.since(s.gaveBackLogged) >= time.Minute {
		c.log.Info("gave back prefetched jobs that waited for a slot longer than the prefetch hold: a worker with a free slot takes them, and this one claims only for free slots until its running jobs finish",
			"jobs", s.gaveBack, "prefetch_hold", c.cfg.PrefetchHold, "running", len(s.running), "job_ids", jobIDs(jobs, 10))
		s.gaveBack, s.gaveBackLogged = 0, c.now()
	}
	c.sig.gaveBack.Send(len(jobs))
}

// unbuffer accounts for buffered jobs that leave the buffer without
// starting (given back, cancelled, or no longer the worker's): their
// claim no longer counts toward MaxJobs, and the master hears they no
// longer wait. It returns their jobs.
func (c *claimer) unbuffer(s *loopState, out []buffered) []store.ClaimedJob {
	s.claimed -= int64(len(out))
	c.tellDequeued(out)
	jobs := make([]store.ClaimedJob, len(out))
	for i, b := range out {
		jobs[i] = b.ClaimedJob
	}
	return jobs
}

// tellPrefetched tells the master which buffered jobs, past the first
// from (those about to start in free slots), wait for a slot and it has not
// heard of (Config.ReportPrefetch). It is called before they start, so
// that a job that starts at once from its claim is never reported, and a
// job that waits is reported before its claim's first job runs. Should the
// jobs that start not be the first from (a queue paused meanwhile), a
// reported one that starts is still said to leave first (tellDequeued).
func (c *claimer) tellPrefetched(s *loopState, from int) {
	if !c.cfg.ReportPrefetch {
		return
	}
	var ids []int64
	for i := max(from, 0); i < len(s.buffer); i++ {
		if b := &s.buffer[i]; !b.told {
			b.told = true
			ids = append(ids, b.ID)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), maxReportIDs)
		c.report(spawner.Report{Type: spawner.ReportPrefetch, Prefetched: ids[:n]})
		ids = ids[n:]
	}
}

// maxReportIDs bounds the job ids of one prefetch report, so that its line
// stays far below spawner.MaxLineLength (an id takes at most 20 bytes),
// which a master drops whole.
const maxReportIDs = 1000

// tellDequeued tells the master that the jobs of out it heard of no
// longer wait (Config.ReportPrefetch). It is called before they start:
// the report is written on the pipe before their handler runs.
func (c *claimer) tellDequeued(out []buffered) {
	if !c.cfg.ReportPrefetch {
		return
	}
	var ids []int64
	for _, b := range out {
		if b.told {
			ids = append(ids, b.ID)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), maxReportIDs)
		c.report(spawner.Report{Type: spawner.ReportPrefetch, Dequeued: ids[:n]})
		ids = ids[n:]
	}
}

// jobIDs returns the ids of the first n jobs, for a log line.
func jobIDs(jobs []store.ClaimedJob, n int) []int64 {
	ids := make([]int64, 0, min(len(jobs), n))
	for _, j := range jobs[:cap(ids)] {
		ids = append(ids, j.ID)
	}
	return ids
}

// roomToClaim reports whether a claim is due: a slot is free and no
// prefetched job waits for it, or a quarter of the room for prefetched
// jobs is free. A claim of a job or two while others still wait in the
// buffer would cost a round trip and a commit for little.
//
// Under a byte budget (Config.PayloadBudget) the same holds of its bytes:
// a claim is due only while the jobs held leave some of the budget free,
// and, while prefetched jobs wait, a quarter of it. A worker that holds
// nothing may always claim (a job larger than the budget runs alone).
func (c *claimer) roomToClaim(s *loopState) bool {
	room := c.cfg.Concurrency + c.prefetch(s)
	free := room - s.held()
	if free <= 0 || (len(s.buffer) > 0 && free < room/4) {
		return false
	}
	if budget := c.cfg.PayloadBudget; budget > 0 && s.held() > 0 {
		freeBytes := budget - s.heldBytes()
		return freeBytes > 0 && (len(s.buffer) == 0 || freeBytes >= budget/4)
	}
	return true
}

// byteRoom is what a claim may take under the byte budget now: the bytes
// the jobs held leave free, and whether its first job is taken whatever
// its size (the worker holds nothing). No budget: no bound.
func (c *claimer) byteRoom(s *loopState) (int64, bool) {
	if c.cfg.PayloadBudget <= 0 {
		return 0, false
	}
	return max(c.cfg.PayloadBudget-s.heldBytes(), 1), s.held() == 0
}

// claimLimit bounds a claim's limit under the byte budget by the jobs of
// the last claim's smallest payload that fit what is free (one more, so
// that a claim of such jobs is cut by bytes, not by its count): a claim of
// large payloads then locks about as many rows as it takes.
func (c *claimer) claimLimit(s *loopState, limit int) int {
	if c.cfg.PayloadBudget <= 0 || s.jobBytes <= 0 {
		return limit
	}
	free, _ := c.byteRoom(s)
	return int(min(int64(limit), free/s.jobBytes+1))
}

// cutByBytes reports, after a claim of queue number i took fewer jobs than
// it asked for (took of them, its first of any size when alone), whether
// the byte budget cut it short while later queues remain to be claimed
// from: whether the queue still has a job ready (the claim left it, as it
// does a job that does not fit). The round then ends, so that a large job
// is not passed over for smaller ones of later queues for as long as those
// keep the worker busy. With no budget, on the last queue, or after a
// claim that took nothing though its first job could be of any size (the
// queue had none ready), no statement is run.
func (c *claimer) cutByBytes(ctx context.Context, s *loopState, q string, i, took int, alone bool) bool {
	if c.cfg.PayloadBudget <= 0 || i == len(c.cfg.Queues)-1 || (took == 0 && alone) {
		return false
	}
	var ready bool
	var err error
	c.await(s, func() { ready, err = c.st.JobReadyExists(ctx, []string{q}) })
	return err == nil && ready
}

// smallestPayload is the size of the smallest payload among jobs (at least
// 1).
func smallestPayload(jobs []store.ClaimedJob) int64 {
	n := len(jobs[0].Payload)
	for _, j := range jobs[1:] {
		n = min(n, len(j.Payload))
	}
	return int64(max(n, 1))
}

// startBuffered starts claimed jobs in free slots, in the buffer's order
// (the queues' order, then each queue's priority order: see mergeClaimed). A
// stopping or paused worker gives its buffered jobs back instead (their
// attempt not counted), as it does those of queues paused since the claim.
func (c *claimer) startBuffered(jobBase context.Context, s *loopState) {
	if len(s.buffer) == 0 {
		return
	}
	if s.stopping || c.paused.Load() {
		c.release(c.unbuffer(s, s.buffer), "")
		s.buffer = nil
		return
	}
	if paused := *c.pausedQueues.Load(); len(paused) > 0 {
		var back []buffered
		keep := s.buffer[:0]
		for _, j := range s.buffer {
			if paused[j.Queue] {
				back = append(back, j)
			} else {
				keep = append(keep, j)
			}
		}
		clear(s.buffer[len(keep):])
		s.buffer = keep
		c.release(c.unbuffer(s, back), "")
	}
	n := max(min(len(s.buffer), c.cfg.Concurrency-len(s.running)), 0)
	c.tellDequeued(s.buffer[:n])
	for _, j := range s.buffer[:n] {
		c.start(jobBase, s, j.ClaimedJob)
	}
	// The started jobs leave the buffer's array too: their payloads are
	// the runners' alone from here.
	clear(s.buffer[:n])
	s.buffer = s.buffer[n:]
	if len(s.buffer) == 0 {
		s.buffer = nil
	}
	if c.cfg.MaxJobs > 0 && s.started >= int64(c.cfg.MaxJobs) {
		c.beginStop(s, spawner.ExitMaxJobs)
	}
}

// schedule makes the next poll come when a delayed job becomes available,
// if that is sooner than the poll interval.
func (c *claimer) schedule(poll *time.Timer, next time.Duration) {
	if next < c.cfg.PollInterval {
		poll.Reset(next + 5*time.Millisecond)
	}
}

// empty reports, once every outcome is written (a written retry may be
// ready at once), whether no job is ready on the worker's queues (no
// suspect, for an isolation process).
func (c *claimer) empty(ctx context.Context) bool {
	if err := c.completer.drain(ctx); err != nil {
		return false
	}
	look := c.st.JobReadyExists
	if c.cfg.Isolate {
		look = c.st.JobSuspectReadyExists
	}
	ready, err := look(ctx, c.cfg.Queues)
	return err == nil && !ready
}

func (c *claimer) start(jobBase context.Context, s *loopState, j store.ClaimedJob) {
	// What the job did not set itself, the worker's defaults decide.
	j.MaxTries = cmp.Or(j.MaxTries, c.cfg.Tries)
	if j.BackoffSecs == nil {
		j.BackoffSecs = c.cfg.Backoff
	}
	j.Timeout = cmp.Or(j.Timeout, c.cfg.DefaultTimeout)
	timeout := j.Timeout
	// The timeout's context hangs off jobBase, whose children map exists
	// already; the cancel cause (an operator's cancel) hangs off it. The
	// other way round every job would allocate a children map and a timer
	// under a fresh parent, which costs a drain several per cent.
	tctx, cancel := context.WithTimeout(jobBase, timeout)
	jctx, stop := context.WithCancelCause(tctx)
	now := c.now()
	if len(s.running) == 0 {
		s.lastEnd = now // busy from now: no finish yet
	}
	held, size := j, int64(len(j.Payload))
	held.Payload = nil
	s.running[j.ID] = &running{job: held, bytes: size, started: now, deadline: now.Add(timeout), cancel: cancel, stop: stop}
	s.runningBytes += size
	s.started++
	c.sig.started.Send(j.ID)
	// Never blocks: at most Concurrency jobs run, and tasks holds as many.
	c.tasks <- task{ctx: jctx, job: j, started: now, timeout: timeout}
}

// finishReady finishes f and every other job that has ended by now.
func (c *claimer) finishReady(s *loopState, f finished) {
	c.finish(s, f)
	for {
		select {
		case f := <-c.done:
			c.finish(s, f)
		default:
			return
		}
	}
}

func (c *claimer) finish(s *loopState, f finished) {
	r, ok := s.running[f.job.ID]
	if !ok || r.job.Attempt != f.job.Attempt {
		c.runners.returned() // given up on after a timeout (see abandon)
		return
	}
	r.cancel()
	delete(s.running, f.job.ID)
	s.runningBytes -= r.bytes
	c.finished.Add(1)
	s.lastEnd = f.ended
	if took := f.ended.Sub(r.started); s.runtime < 0 {
		s.runtime = took
	} else {
		s.runtime = (s.runtime*7 + took) / 8
	}
	c.exec.settle(attemptEnd{finished: f, started: r.started, cancelAt: r.cancelAt, cancelBy: r.cancelBy})
}

// overdue returns a job that outlived its timeout, or its cancel, plus
// the grace period.
func (c *claimer) overdue(s *loopState, now time.Time) *running {
	for _, r := range s.running {
		if now.After(r.deadline.Add(c.cfg.TimeoutGrace)) ||
			(!r.cancelAt.IsZero() && now.After(r.cancelAt.Add(c.cfg.TimeoutGrace))) {
			return r
		}
	}
	return nil
}

// giveUpOverdue gives up on every running job past its timeout (or
// cancel) and the grace (see giveUp).
func (c *claimer) giveUpOverdue(s *loopState) {
	for r := c.overdue(s, c.now()); r != nil; r = c.overdue(s, c.now()) {
		c.giveUp(s, r)
	}
}

// giveUp gives up on a job that ignores its cancellation (its timeout, or
// an operator's cancel) past the grace period: its attempt is recorded as
// timed out (as cancelled, when an operator cancelled it), and its runner
// is left in the handler. The worker then stops as it does on a stop
// signal, claiming nothing more and giving back the jobs it claimed but
// had not started, and Run will return ErrJobTimedOut
// (ErrJobIgnoredCancel), so that its supervisor replaces it: a handler
// that ignores its context may hold its goroutine, and whatever it locked,
// for good. The jobs running beside it get the grace period (TimeoutGrace,
// from the first give-up) to finish, and their outcomes are written as
// usual; those still running then are interrupted (see interrupt). Another
// job found overdue meanwhile is given up on the same way.
func (c *claimer) giveUp(s *loopState, r *running) {
	cancelled := !r.cancelAt.IsZero()
	delete(s.running, r.job.ID)
	s.runningBytes -= r.bytes
	c.finished.Add(1)
	c.runners.giveUp(1) // the loop waits for it no more, nor does the runners' Stop
	c.exec.settle(attemptEnd{finished: finished{job: r.job, timeout: r.deadline.Sub(r.started), ended: c.now()},
		started: r.started, cancelAt: r.cancelAt, cancelBy: r.cancelBy, abandoned: true, grace: c.cfg.TimeoutGrace})
	first := s.stuck == nil
	if first {
		s.stuck = ErrJobTimedOut
		if cancelled {
			s.stuck = ErrJobIgnoredCancel
		}
		s.beside = len(s.running)
		s.grace = time.NewTimer(c.cfg.TimeoutGrace)
	}
	c.log.Error("job ignored its timeout or cancel; giving up on it: the worker takes no new jobs, gives those running beside it the grace period to finish, and exits so a fresh worker takes over",
		"job_id", r.job.ID, "job", r.job.Name, "timeout", r.deadline.Sub(r.started), "grace", c.cfg.TimeoutGrace,
		"cancelled", cancelled, "running", len(s.running))
	c.beginStop(s, spawner.ExitTimeout)
	s.reason = spawner.ExitTimeout // also when it was stopping already, for another reason
}

// interrupt ends the grace period beside a job given up on (see giveUp):
// the jobs whose end has arrived are finished, and those still running are
// interrupted. Their contexts are cancelled, their runners are left in
// their handlers, and each attempt is written as interrupted
// (store.JobInterrupt): its job is released to run again at once, as its
// next attempt, with no try spent. A job an operator asked to cancel ends
// as cancelled instead (store.JobRelease).
func (c *claimer) interrupt(s *loopState) {
	for drained := false; !drained; {
		select {
		case f := <-c.done:
			c.finish(s, f)
		default:
			drained = true
		}
	}
	if len(s.running) == 0 {
		return
	}
	why := "another job ignored its timeout"
	if errors.Is(s.stuck, ErrJobIgnoredCancel) {
		why = "another job ignored its cancel"
	}
	cause := fmt.Errorf("interrupted: its worker exits because %s, and this job did not finish within the grace period (%s)", why, c.cfg.TimeoutGrace)
	attempts := make([]store.InterruptedAttempt, 0, len(s.running))
	leases := make([]store.Lease, 0, len(s.running))
	ids := make([]int64, 0, len(s.running))
	for _, r := range s.running {
		r.stop(cause)
		r.cancel()
		attempts = append(attempts, store.InterruptedAttempt{Lease: r.job.Lease(), Tries: r.job.MaxTries,
			StartedAt: r.started.Add(r.job.ClockOffset)})
		leases = append(leases, r.job.Lease())
		ids = append(ids, r.job.ID)
	}
	s.interrupted = len(attempts)
	clear(s.running)
	s.runningBytes = 0
	c.runners.giveUp(len(attempts))
	slices.Sort(ids)
	c.log.Warn("interrupted the jobs still running after the grace period: released to run again as their next attempt, no try spent",
		"jobs", len(attempts), "why", why, "grace", c.cfg.TimeoutGrace, "job_ids", ids[:min(len(ids), 20)])
	// As a release: before the stop's cut, as long as a drain; after it, as
	// long as a reconcile.
	parent, timeout := c.cut, DrainTimeout
	if c.cut.Err() != nil {
		parent, timeout = c.base, reconcileTimeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	n, err := c.st.JobInterrupt(ctx, store.JobInterruptParams{Attempts: attempts, Error: cause.Error()})
	if err != nil {
		c.log.Error("writing the interrupted jobs failed: they stay reserved until a master releases them", "jobs", len(attempts), "err", err)
		return
	}
	if n < len(leases) {
		// The others had a cancel request (or were no longer this worker's):
		// they end as cancelled.
		if _, err := c.st.JobRelease(ctx, store.JobReleaseParams{Leases: leases}); err != nil {
			c.log.Error("release jobs failed: they stay reserved until a master releases them", "jobs", len(leases)-n, "err", err)
		}
	}
}

func (c *claimer) release(jobs []store.ClaimedJob, reason string) {
	if len(jobs) == 0 {
		return
	}
	leases := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = j.Lease()
	}
	// Before the stop's cut, a release may take as long as a drain; after
	// it (a job given up on at exit), no longer than a reconcile.
	parent, timeout := c.cut, DrainTimeout
	if c.cut.Err() != nil {
		parent, timeout = c.base, reconcileTimeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	n, err := c.releaseLeases(ctx, leases, reason)
	if err != nil {
		c.log.Error("release jobs failed: they stay reserved until a master releases them", "jobs", len(jobs)-n, "err", err)
		return
	}
	c.log.Info("released jobs that had not started", "jobs", n)
}

// releaseLeases releases jobs that had not started (no attempt counted),
// as JobRelease does, but does not give up while the database answers: a
// release the server cancelled for its statement timeout is tried again
// in halves, and one it refused for now (a deadlock, too many
// connections) again after a short pause, until ctx ends. Only a database
// that does not answer ends it at once; those jobs stay reserved until
// this worker's reconcile or a master releases them. It returns how many
// jobs it released.
func (c *claimer) releaseLeases(ctx context.Context, leases []store.Lease, reason string) (int, error) {
	answered := backoff.Exponential{Base: transientRetryBase, Max: TransientRetryMax}
	for {
		n, err := c.st.JobRelease(ctx, store.JobReleaseParams{Leases: leases, Uncount: true, Error: reason})
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil || store.ClassifyError(err) != store.ErrorTransient {
			return 0, err
		}
		if store.StatementTimedOut(err) && len(leases) > 1 {
			half := len(leases) / 2
			a, err := c.releaseLeases(ctx, leases[:half], reason)
			if err != nil {
				return a, err
			}
			b, err := c.releaseLeases(ctx, leases[half:], reason)
			return a + b, err
		}
		d := answered.Next()
		if serr := backoff.Sleep(ctx, backoff.Between(d/2, d)); serr != nil {
			return 0, fmt.Errorf("%w (then: %w)", err, serr)
		}
	}
}

func (c *claimer) exit(s *loopState, runErr error) (Result, error) {
	ctx, cancel := context.WithTimeout(c.base, DrainTimeout)
	defer cancel()
	if err := c.completer.drain(ctx); err != nil {
		c.log.Error("could not write every finished job before exiting: their jobs stay reserved until a master releases them",
			"unsaved", c.completer.Unsaved(), "err", err)
		runErr = errors.Join(runErr, fmt.Errorf("write finished jobs: %w", err))
	} else {
		c.reconcile(ctx, s) // what is left reserved under this name is released without counting
	}
	if s.reason == "" {
		s.reason = spawner.ExitStopped
	}
	c.report(spawner.Report{Type: spawner.ReportExiting, Reason: s.reason, Jobs: c.finished.Load(),
		Running: len(s.running), MemoryMB: c.cfg.MemoryMB(), Unsaved: c.completer.Unsaved()})
	c.log.Info("worker exiting", "reason", string(s.reason), "jobs", c.finished.Load())
	return Result{Reason: s.reason, Jobs: c.finished.Load()}, runErr
}

func (c *claimer) report(r spawner.Report) {
	if c.cfg.Reports != nil {
		c.cfg.Reports(r)
	}
}
