package worker

import (
	"context"
	"time"

	"github.com/fleet-go/fleet/store"
)

// Reconciling what the worker holds with what the database says it holds.
//
// A worker's belief and the database's can part: after a failover to an
// asynchronous standby, the new primary may have a claim but not the
// outcome the worker wrote after it (the worker believes the job done, the
// database has it reserved under the worker's name), or not even the claim
// (the database has the job ready while the worker runs it); a claim whose
// answer was lost leaves a reservation the worker never saw. Left alone, a
// reservation the worker does not hold would stay until the master's
// overdue check (see store.WorkerOverdue) took it for a hung job, killed
// the worker and released its jobs with the attempt counted: a job whose
// handler had succeeded would end in failed jobs with its tries spent.
//
// So the worker asks, in one statement through the reserved_by index
// (store.JobReservedBy), for the leases reserved under its name, and
// compares them with what it holds: jobs running, claimed jobs waiting for
// a slot, and finished attempts whose outcome the completer has not written
// yet (waiting or being written). The database's word wins:
//
//   - A reservation the worker does not hold is released at once
//     (store.JobReleaseUnheld), as lost, with its attempt taken back: the
//     job runs again, as the same attempt, and never fails for it. The
//     release matches id, lease token and holder, so a job finished or
//     claimed again meanwhile is left alone.
//   - A claimed job not started yet that the database no longer has
//     reserved under the worker (another master released it, or a failover
//     lost the claim) is dropped: it is not the worker's to run.
//
// What the worker holds is taken stock of before the statement runs, on
// the loop, which claims nothing until the reconcile is over: anything
// reserved under the worker's name that is not in that stock was claimed
// by no claim the worker saw the answer of, and cannot become held later
// (a claim gives a fresh lease). A job that finishes while the statement
// runs is in the stock as running and its outcome goes to the completer, so
// an outcome in flight is never taken for a phantom.
//
// It runs every HeartbeatInterval while the worker holds anything (running,
// claimed or unwritten), which a failover mid-work always finds; once after
// a statement failed or the notification connection came back, even when
// idle, since a failover may happen between jobs; and once as the worker
// exits, so that its master's release of what it leaves (which counts the
// attempt) finds only jobs it really held. An idle worker holding nothing
// pays nothing for it. Its cost grows with the worker's own rows, never
// with the backlog (see TestReconcilePlans in package store).

// reconcileTimeout bounds each statement of a reconcile.
const reconcileTimeout = 10 * time.Second

// reconcileDue reports whether a reconcile tick should reconcile.
func (c *claimer) reconcileDue(s *loopState) bool {
	return s.held() > 0 || c.completer.Unsaved() > 0 || c.resync.Load()
}

// reconcile compares the leases reserved under the worker's name with the
// jobs it holds, releases the reservations it does not hold and drops the
// claimed jobs not started yet that are no longer reserved to it (see
// above). It runs on the loop.
func (c *claimer) reconcile(parent context.Context, s *loopState) {
	held := make(map[store.Lease]bool, s.held()+c.completer.Unsaved())
	for _, r := range s.running {
		held[r.job.Lease()] = true
	}
	for _, j := range s.buffer {
		held[j.Lease()] = true
	}
	c.completer.holding(held)
	c.resync.Store(false)

	ctx, cancel := context.WithTimeout(parent, reconcileTimeout)
	defer cancel()
	var reserved []store.Lease
	var err error
	c.await(s, func() { reserved, err = c.st.JobReservedBy(ctx, c.cfg.Name) })
	if err != nil {
		c.failed(err)
		c.logs.Fail(c.log, "reconcile", "reading the jobs reserved by this worker failed; trying again at the next beat", "err", err)
		return
	}
	c.logs.OK(c.log, "reconcile", "reading the jobs reserved by this worker works again")
	mine := make(map[store.Lease]bool, len(reserved))
	var unheld []store.Lease
	for _, l := range reserved {
		mine[l] = true
		if !held[l] {
			unheld = append(unheld, l)
		}
	}
	c.dropUnreserved(s, mine)
	if len(unheld) == 0 {
		return
	}
	var lost store.LostJobs
	c.await(s, func() { lost, err = c.st.JobReleaseUnheld(ctx, c.cfg.Name, unheld) })
	if err != nil {
		c.failed(err)
		c.logs.Fail(c.log, "reconcile", "releasing jobs reserved under this worker that it does not hold failed; trying again at the next beat",
			"jobs", len(unheld), "err", err)
		return
	}
	c.log.Warn("released jobs reserved under this worker that it does not hold (their outcome, or the answer to their claim, was lost, as in a database failover): they run again without spending a try",
		"jobs", len(unheld), "released", lost.Released, "cancelled", lost.Cancelled, "job_ids", leaseIDs(unheld, 10))
}

// dropUnreserved drops the claimed jobs waiting for a slot whose lease is
// not among mine, the worker's reservations as the database just read
// them: they are no longer the worker's to run.
func (c *claimer) dropUnreserved(s *loopState, mine map[store.Lease]bool) {
	var dropped []store.Lease
	var gone []buffered
	keep := s.buffer[:0]
	for _, j := range s.buffer {
		if mine[j.Lease()] {
			keep = append(keep, j)
		} else {
			dropped = append(dropped, j.Lease())
			gone = append(gone, j)
		}
	}
	clear(s.buffer[len(keep):])
	s.buffer = keep
	if len(s.buffer) == 0 {
		s.buffer = nil
	}
	c.unbuffer(s, gone)
	if len(dropped) > 0 {
		c.log.Warn("dropped claimed jobs the database no longer has reserved by this worker (released by a master, or their claim lost in a failover): they are not started here",
			"jobs", len(dropped), "job_ids", leaseIDs(dropped, 10))
	}
}

// leaseIDs returns the job ids of the first n leases, for a log line.
func leaseIDs(leases []store.Lease, n int) []int64 {
	ids := make([]int64, 0, min(len(leases), n))
	for _, l := range leases[:cap(ids)] {
		ids = append(ids, l.ID)
	}
	return ids
}
