package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueCount is how many jobs of one queue are pending (ready now),
// delayed (available later), waiting on a concurrency limit (parked) and
// reserved (held by a worker).
type QueueCount struct {
	Queue    string
	Pending  int64
	Delayed  int64
	Reserved int64
	Limited  int64
}

// queueCountsCTE defines the CTE "qcounts" (queue, pending, delayed,
// reserved, oldest, limited): exact counts from the trigger-maintained
// queue_counts (a few rows per queue, whatever the backlog), delayed and
// limited (parked: available_at 'infinity') jobs counted by index range
// scans (cheap unless millions are delayed or parked), and the oldest ready
// job found by one index lookup per queue. Ready and delayed are told apart
// at now, the statement's clock (see clockSQL).
func queueCountsCTE(now string) string {
	return `
	qc AS (
		SELECT queue, sum(unreserved) AS unreserved, sum(reserved) AS reserved
		FROM queue_counts GROUP BY queue
		HAVING sum(unreserved) <> 0 OR sum(reserved) <> 0
	), qcounts AS (
		SELECT qc.queue, qc.unreserved - dpo.delayed - dpo.limited AS pending, dpo.delayed, qc.reserved, dpo.oldest, dpo.limited
		FROM qc,
		LATERAL (WITH ` + priorityLevels("qc.queue") + `
		         SELECT COALESCE(sum(y.delayed), 0)::bigint AS delayed, COALESCE(sum(y.limited), 0)::bigint AS limited,
		                min(y.oldest) AS oldest
		         FROM lv, LATERAL (
		             SELECT (SELECT count(*) FROM queue_jobs j
		                     WHERE j.queue = qc.queue AND j.priority = lv.p AND j.reserved_by IS NULL
		                       AND j.available_at > ` + now + ` AND j.available_at < 'infinity') AS delayed,
		                    (SELECT count(*) FROM queue_jobs j
		                     WHERE j.queue = qc.queue AND j.priority = lv.p AND j.reserved_by IS NULL
		                       AND j.available_at = 'infinity') AS limited,
		                    (SELECT available_at FROM queue_jobs j
		                     WHERE j.queue = qc.queue AND j.priority = lv.p AND j.reserved_by IS NULL
		                       AND j.available_at <= ` + now + `
		                     ORDER BY available_at LIMIT 1) AS oldest) y
		        ) dpo
	)`
}

// QueueCounts counts the jobs of every queue that has any, in one
// statement, on the store's clock.
func (s *Store) QueueCounts(ctx context.Context) ([]QueueCount, error) {
	rows, err := s.pool.Query(ctx, `WITH `+queueCountsCTE(clockSQL(1))+`
		SELECT queue, pending, delayed, reserved, limited FROM qcounts ORDER BY queue`, s.at())
	if err != nil {
		return nil, fmt.Errorf("count jobs per queue: %w", err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[QueueCount])
	if err != nil {
		return nil, fmt.Errorf("count jobs per queue: %w", err)
	}
	return counts, nil
}

// FailedJobCountBetween counts failed jobs whose original job id lies in
// [fromID, toID].
func (s *Store) FailedJobCountBetween(ctx context.Context, fromID, toID int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx,
		`SELECT count(*) FROM queue_failed_jobs WHERE job_id BETWEEN $1 AND $2`, fromID, toID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count failed jobs: %w", err)
	}
	return n, nil
}

// JobCountBetween counts the jobs still queued whose id lies in
// [fromID, toID].
func (s *Store) JobCountBetween(ctx context.Context, fromID, toID int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx,
		`SELECT count(*) FROM queue_jobs WHERE id BETWEEN $1 AND $2`, fromID, toID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// QueueOldestWait returns, for each of queues that has a ready job, how
// long its oldest ready job has been available, in seconds, by the store's
// clock. One index lookup per queue, whatever the backlog.
func (s *Store) QueueOldestWait(ctx context.Context, queues []string) (map[string]float64, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT q.name, EXTRACT(EPOCH FROM `+clockSQL(2)+` - x.available_at)::float8
		FROM unnest($1::text[]) AS q(name), LATERAL (
			WITH `+priorityLevels("q.name")+`
			SELECT min(y.available_at) AS available_at FROM lv, LATERAL (
				SELECT available_at FROM queue_jobs
				WHERE queue = q.name AND priority = lv.p AND reserved_by IS NULL AND available_at <= `+clockSQL(2)+`
				ORDER BY available_at LIMIT 1) y
		) x
		WHERE x.available_at IS NOT NULL`, queues, s.at())
	if err != nil {
		return nil, fmt.Errorf("read oldest waits: %w", err)
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var q string
		var secs float64
		if err := rows.Scan(&q, &secs); err != nil {
			return nil, fmt.Errorf("read oldest waits: %w", err)
		}
		out[q] = secs
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read oldest waits: %w", err)
	}
	return out, nil
}

// OverviewCounts are the dashboard's totals that no other read gives.
type OverviewCounts struct {
	// JobsPastHour sums the attempts of the queue snapshots of the last
	// hour.
	JobsPastHour int64
	// FailedPastWeek counts the failed jobs that failed in the last 7 days.
	FailedPastWeek int64
	// At is the store's clock at the read: the database's now() unless the
	// store has a clock (see WithClock).
	At time.Time
}

// OverviewCountsGet reads the totals in one statement: a range of the
// snapshots' (taken_at, kind, subject) index, and a count of the failed
// jobs (which trimming keeps to fleet.trim.failed_days).
func (s *Store) OverviewCountsGet(ctx context.Context) (OverviewCounts, error) {
	var c OverviewCounts
	err := s.pool.QueryRow(ctx, `
		SELECT COALESCE((SELECT sum(jobs) FROM fleet_metrics WHERE taken_at >= `+clockSQL(1)+` - interval '1 hour' AND kind = 'queue'), 0)::bigint,
		       (SELECT count(*) FROM queue_failed_jobs WHERE failed_at >= `+clockSQL(1)+` - interval '7 days'),
		       `+clockSQL(1), s.at()).Scan(&c.JobsPastHour, &c.FailedPastWeek, &c.At)
	if err != nil {
		return OverviewCounts{}, fmt.Errorf("read overview counts: %w", err)
	}
	return c, nil
}
