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
// supervision), the jobs of expired members, and, once a minute, jobs
// whose holder has no row at all; it sweeps the concurrency limits, and
// tells supervision which of its workers hold a job far past its
// timeout. It starts second and stops second to last: after supervision,
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

	releases *fifo[*releaseReq] // from supervision
	kills    *latest[[]string]  // to supervision

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
}

func newHousekeeping(st *store.Store, set Settings, log *slog.Logger, member peers, budget *stopBudget,
	releases *fifo[*releaseReq], kills *latest[[]string]) *housekeeping {
	return &housekeeping{
		st: st, log: log, member: member, now: set.Now, budget: budget,
		tick: set.Tick, ttl: set.TTL, defaultTries: set.DefaultTries,
		defaultTimeout: set.DefaultTimeout, timeoutGrace: set.TimeoutGrace,
		releases: releases, kills: kills, releasing: map[string]time.Time{},
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
		svclife.TickEvery(sctx, h.tick, h.round, &h.sig.round)
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

// round is one tick: releases, expired members, the limit sweep and the
// overdue check.
func (h *housekeeping) round(ctx context.Context) {
	h.drainReleases(ctx)
	h.releaseExpired(ctx)
	h.sweepLimits(ctx)
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

// drainReleases releases the jobs of every exited worker queued so far.
// A release that fails (the database away, or read-only) is kept and tried
// again at the next tick: nobody else would release them, since this
// master's row lives on.
func (h *housekeeping) drainReleases(ctx context.Context) {
	h.pending = append(h.pending, h.releases.takeAll()...)
	kept := h.pending[:0]
	for _, r := range h.pending {
		if ctx.Err() != nil {
			kept = append(kept, r)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, statementTimeout)
		lost, err := h.st.JobReleaseWorker(rctx, r.worker, r.tries, r.reason)
		cancel()
		switch {
		case err != nil:
			kept = append(kept, r)
			if r.failures++; r.failures == 1 {
				h.log.Warn("release the jobs of an exited worker failed; retrying every tick", "worker", r.worker, "err", err)
			}
		case lost.Released+lost.Failed > 0:
			h.log.Warn("released the jobs of a lost worker", "worker", r.worker, "released", lost.Released, "failed", lost.Failed)
		}
	}
	h.pending = kept
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
