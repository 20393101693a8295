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

// clockTexts are the two texts of a statement whose only parameter is its
// time: one on the database's clock, now() written in and no parameter, the
// other on a store clock's, $1. Statements that read the TimescaleDB
// hypertable fleet_metrics use them rather than clockSQL: TimescaleDB
// prunes a hypertable's chunks and picks their index scans by now() at
// planning time, also in a generic plan, which it cannot do through
// COALESCE($1, now()). Production thus sends the same text as before the
// store had a clock, with the same plans.
type clockTexts struct{ server, clocked string }

// onClockTexts builds a statement's clockTexts from its text as a function
// of its time's SQL.
func onClockTexts(text func(now string) string) clockTexts {
	return clockTexts{server: text("now()"), clocked: text("$1::timestamptz")}
}

// onClock returns the text and arguments that run t on the store's clock.
func (s *Store) onClock(t clockTexts) (string, []any) {
	if at := s.at(); at != nil {
		return t.clocked, []any{*at}
	}
	return t.server, nil
}
