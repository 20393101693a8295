package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// QueueCount is how many jobs of one queue are pending (ready now),
// delayed (available later) and reserved (held by a worker).
type QueueCount struct {
	Queue    string
	Pending  int64
	Delayed  int64
	Reserved int64
}

// QueueCounts counts the jobs of every queue that has any, in one statement.
func (s *Store) QueueCounts(ctx context.Context) ([]QueueCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT queue,
		       count(*) FILTER (WHERE reserved_by IS NULL AND available_at <= now()),
		       count(*) FILTER (WHERE reserved_by IS NULL AND available_at > now()),
		       count(*) FILTER (WHERE reserved_by IS NOT NULL)
		FROM queue_jobs
		GROUP BY queue
		ORDER BY queue`)
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
