package master

import (
	"context"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/store"
)

// housekeeping is the service that cleans up after the dead, every tick:
// it releases what this master's exited workers still held (queued by
// supervision, and taken at once rather than at the next tick), the jobs
// of expired members, and, once a minute, jobs whose holder has no row at
// all; it sweeps the concurrency limits, tells supervision which of its
// workers hold a job far past its timeout, and how many suspect jobs
// (see store.SuspectCrashes) are ready on this master's queues, for
// supervision to start isolation processes for them. It starts second and stops second to last: after supervision,
// so that the jobs of the last children to exit are released (its last
// round, on the stop budget) before the membership row goes.
type housekeeping struct {
	st     *store.Store
	log    *slog.Logger
	logs   ratelog.Log
	member peers
	now    func() time.Time
	budget *stopBudget

	tick           time.Duration
	ttl            time.Duration
	defaultTries   int
	defaultTimeout time.Duration
	timeoutGrace   time.Duration

	releases *fifo[*releaseReq]   // from supervision
	kills    *latest[[]string]    // to supervision
	suspects *latest[suspectSnap] // to supervision
	queues   []string             // every queue of this master's supervisors

	// Its own state, used only by its goroutine.
	pending     []*releaseReq        // releases that failed, tried again each tick
	lastSweep   time.Time            // the last full sweep, by now
	limitCursor string               // where the next limit sweep's walk starts
	releasing   map[string]time.Time // expired member@expiry -> first release try (view clock)

	lc  svclife.Lifecycle
	sig struct {
		round svclife.Signal[struct{}] // a tick's round done
	}
}

// releaseReq asks housekeeping to release what an exited worker held.
type releaseReq struct {
	worker   string
	tries    int
	reason   string
	failures int
	// crash, when set, says the worker crashed (see store.JobReleaseCrashed).
	crash *crashInfo
}

// crashInfo is how a crashed worker died.
type crashInfo struct {
	isolated bool   // an isolation process: its one job is charged
	exit     string // spawner.Exit.Describe
	stderr   string // spawner.Exit.Stderr
	backoff  []int  // the worker's default backoff
	// unstarted are the jobs it held waiting for a slot, never started
	// (spawner.Exit.Unstarted): given back without an attempt.
	unstarted []int64
}

// suspectSnap is what housekeeping read of the suspect jobs ready on this
// master's queues: how many per queue (queues without any left out), and
// when, by the master's clock, it began to read them.
type suspectSnap struct {
	at     time.Time
	counts map[string]int
}

func newHousekeeping(st *store.Store, set Settings, log *slog.Logger, member peers, budget *stopBudget,
	releases *fifo[*releaseReq], kills *latest[[]string], suspects *latest[suspectSnap], queues []string) *housekeeping {
	return &housekeeping{
		st: st, log: log, member: member, now: set.Now, budget: budget,
		tick: set.Tick, ttl: set.TTL, defaultTries: set.DefaultTries,
		defaultTimeout: set.DefaultTimeout, timeoutGrace: set.TimeoutGrace,
		releases: releases, kills: kills, suspects: suspects, queues: queues, releasing: map[string]time.Time{},
	}
}

func (h *housekeeping) Name() string { return "housekeeping" }

// Start runs a round every tick until Stop.
func (h *housekeeping) Start(ctx context.Context) error {
	sctx, end, err := h.lc.Begin(ctx, h.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		h.loop(sctx)
		// The last round: what the last children to exit held.
		h.drainReleases(h.budget.context())
	}()
	return nil
}

// Stop cancels the round in flight, releases what the exited workers
// left on the stop budget, and waits.
func (h *housekeeping) Stop() {
	h.budget.start()
	h.lc.Halt()
}

// loop runs a round every tick, and releases what exited workers held as
// soon as supervision queues it, until ctx ends.
func (h *housekeeping) loop(ctx context.Context) {
	t := time.NewTicker(h.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.releases.ready():
			if h.drainReleases(ctx) {
				h.readSuspects(ctx)
			}
		case <-t.C:
			h.round(ctx)
			h.sig.round.Send(struct{}{})
		}
	}
}

// round is one tick: releases, expired members, the limit sweep, the
// suspects and the overdue check.
func (h *housekeeping) round(ctx context.Context) {
	h.drainReleases(ctx)
	h.releaseExpired(ctx)
	h.sweepLimits(ctx)
	h.readSuspects(ctx)
	octx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	overdue, err := h.st.WorkerOverdue(octx, h.member.Instance(), h.defaultTimeout, h.timeoutGrace+5*time.Second)
	if err != nil {
		h.logs.Fail(h.log, "overdue", "look for overdue workers failed", "err", err)
		return
	}
	h.logs.OK(h.log, "overdue", "looking for overdue workers works again")
	if len(overdue) > 0 {
		h.kills.put(overdue)
	}
}

// drainReleases releases the jobs of every exited worker queued so far,
// and reports whether a crash made a job a suspect or charged one (see
// store.JobReleaseCrashed): the suspects are worth reading again at once.
// A release that fails (the database away, or read-only) is kept and tried
// again at the next tick: nobody else would release them, since this
// master's row lives on.
func (h *housekeeping) drainReleases(ctx context.Context) (suspects bool) {
	h.pending = append(h.pending, h.releases.takeAll()...)
	kept := h.pending[:0]
	for _, r := range h.pending {
		if ctx.Err() != nil {
			kept = append(kept, r)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, statementTimeout)
		var err error
		if r.crash != nil {
			var res store.CrashedJobs
			res, err = h.releaseCrashed(rctx, r)
			suspects = suspects || res.Suspects > 0 || res.Charged > 0
		} else {
			var lost store.LostJobs
			lost, err = h.st.JobReleaseWorker(rctx, r.worker, r.tries, r.reason)
			if err == nil && lost.Released+lost.Failed > 0 {
				h.log.Warn("released the jobs of a lost worker", "worker", r.worker, "released", lost.Released, "failed", lost.Failed)
			}
		}
		cancel()
		if err != nil {
			kept = append(kept, r)
			if r.failures++; r.failures == 1 {
				h.log.Warn("release the jobs of an exited worker failed; retrying every tick", "worker", r.worker, "err", err)
			}
		}
	}
	h.pending = kept
	return suspects
}

// releaseCrashed releases the jobs of a worker that crashed and logs what
// became of them.
func (h *housekeeping) releaseCrashed(ctx context.Context, r *releaseReq) (store.CrashedJobs, error) {
	res, err := h.st.JobReleaseCrashed(ctx, store.JobReleaseCrashedParams{
		Worker: r.worker, Isolated: r.crash.isolated, Exit: r.crash.exit, Stderr: r.crash.stderr,
		Tries: r.tries, Backoff: r.crash.backoff, Unstarted: r.crash.unstarted,
	})
	switch {
	case err != nil:
	case r.crash.isolated && res.Charged > 0:
		h.log.Warn("an isolation process crashed: its job is charged with the attempt", "worker", r.worker,
			"exit", r.crash.exit, "failed_for_good", res.Failed, "retried", res.Released)
	case res.Released+res.Cancelled+res.Unstarted > 0:
		h.log.Warn("released the jobs of a crashed worker without spending their tries", "worker", r.worker,
			"exit", r.crash.exit, "released", res.Released, "suspects", res.Suspects, "never_started", res.Unstarted)
	}
	return res, err
}

// readSuspects tells supervision how many suspect jobs are ready on this
// master's queues.
func (h *housekeeping) readSuspects(ctx context.Context) {
	at := h.now()
	sctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	counts, err := h.st.JobSuspects(sctx, h.queues)
	if err != nil {
		h.logs.Fail(h.log, "suspects", "reading the suspect jobs failed", "err", err)
		return
	}
	h.logs.OK(h.log, "suspects", "reading the suspect jobs works again")
	h.suspects.put(suspectSnap{at: at, counts: counts})
}

// sweepEvery is how often a master runs the full sweep for jobs whose
// holder has no row at all.
const sweepEvery = time.Minute

// releaseExpired releases the jobs of members that are offline in the
// view, once this master's own beats have held for a whole ttl.
func (h *housekeeping) releaseExpired(ctx context.Context) {
	if !h.member.Trusted() {
		return
	}
	view := h.member.View()
	// An expired member's jobs are released on this master's ticks for one
	// ttl from the first try (a claim in flight at the expiry commits within
	// that); anything left after is the minute sweep's. The row itself
	// stays in the view for minutes, offline.
	var gone []string
	seen := map[string]bool{}
	for _, mem := range view.Members {
		if mem.Live(view.At) || mem.Instance == h.member.Instance() {
			continue
		}
		key := mem.Instance + "@" + mem.ExpiresAt.String()
		seen[key] = true
		first, ok := h.releasing[key]
		if !ok {
			first = view.At
			h.releasing[key] = first
		}
		if view.At.Sub(first) <= h.ttl {
			gone = append(gone, mem.Instance)
		}
	}
	for key := range h.releasing {
		if !seen[key] {
			delete(h.releasing, key)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	if len(gone) > 0 {
		lost, err := h.st.MemberRelease(rctx, gone, h.defaultTries)
		if err != nil {
			h.logs.Fail(h.log, "release", "release the jobs of expired members failed", "err", err)
		} else if lost.Released+lost.Failed > 0 {
			h.log.Warn("released the jobs of members that stopped beating", "members", gone, "released", lost.Released, "failed", lost.Failed)
		}
	}
	if now := h.now(); now.Sub(h.lastSweep) >= sweepEvery {
		h.lastSweep = now
		lost, err := h.st.MemberSweep(rctx, h.defaultTries, h.defaultTimeout, h.timeoutGrace+time.Minute)
		if err != nil {
			h.logs.Fail(h.log, "sweep", "sweep for jobs without a live holder failed", "err", err)
		} else if lost.Released+lost.Failed > 0 {
			h.log.Warn("released jobs whose holder has no membership row", "released", lost.Released, "failed", lost.Failed)
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
func (h *housekeeping) sweepLimits(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	res, err := h.st.LimitSweep(sctx, store.LimitSweepParams{After: h.limitCursor, Keys: limitSweepKeys, PerKey: limitSweepPerKey})
	if err != nil {
		h.logs.Fail(h.log, "limits", "sweep of the concurrency limits failed", "err", err)
		return
	}
	h.logs.OK(h.log, "limits", "the sweep of the concurrency limits works again")
	h.limitCursor = res.Next
	if res.Repaired > 0 {
		h.log.Info("concurrency limits recounted: jobs of these keys left the queue without freeing their slot",
			"keys", res.Repaired, "unparked", res.Unparked)
	} else if res.Unparked > 0 {
		h.log.Debug("parked jobs given free slots of their limits", "unparked", res.Unparked, "queues", res.Queues)
	}
}
