package store

import (
	"fmt"
	"time"
)

// The store's clock. The statements that report on the fleet or decide its
// once-per-period work by the time take "now" as a parameter, written
// COALESCE($n::timestamptz, now()): NULL, the production value, leaves the
// database's now() in charge exactly as before; a store made WithClock
// passes its clock's time instead, so that a test sets the time those
// statements see rather than waiting for it.
//
// The statements on the clock:
//   - the job counts and the oldest ready job's wait: QueueCounts,
//     QueueOldestWait (long waits), Workload, Scrape's queue figures,
//     OverviewCountsGet;
//   - the recent runtimes of the minute snapshots: QueueRuntimes and
//     Workload's runtimes and last minute;
//   - the metrics snapshot: MetricsSnapshot's "minute over" and "minute in
//     progress" tests, its cut and its backlog;
//   - the duties: DutyClaim, DutyClaimPeriod, DutyDone, DutyFailed,
//     DutyDue, DutyRecent and DutyTrim.
//
// Everything else keeps the database's clock, whatever the store's:
//   - dispatch (a job's available_at, created_at), the claim, the finish,
//     retries, snoozes and releases: the hot path, and the times written
//     into queue_jobs and fleet_jobs;
//   - liveness: the masters' and workers' beats and expiries, which masters
//     count as live (Workload's processes included), leases of jobs;
//   - JobList's states, the stories, tokens, periodic schedules, limits,
//     unique keys and the history's partitions and trimming.
//
// So with a clock set apart from the database's, a job dispatched is
// available at the database's now(): set the clock at or after it to see
// the job ready and waiting (fleettest.Clock does this for an app's tests).

// WithClock returns a Store on the same pool whose clocked statements (see
// above) read the time from now instead of the database's now(); nil
// restores the database's. Production code never calls it.
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = now
	return &c
}

// at is the value of a clocked statement's time parameter: the store's
// clock's time, or NULL for the database's now().
func (s *Store) at() *time.Time {
	if s.now == nil {
		return nil
	}
	t := s.now()
	return &t
}

// clockSQL is the time of a clocked statement whose time parameter is $n.
func clockSQL(n int) string { return fmt.Sprintf("COALESCE($%d::timestamptz, now())", n) }
