package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrFailedJobNotFound is returned for a failed job id that does not exist
// (any more).
var ErrFailedJobNotFound = errors.New("failed job not found")

// FailedJob is a row of queue_failed_jobs.
type FailedJob struct {
	ID       int64           `json:"id"`
	JobID    int64           `json:"job_id"`
	Queue    string          `json:"queue"`
	Name     string          `json:"name"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	MaxTries int             `json:"max_tries"`
	Error    string          `json:"error"`
	Created  time.Time       `json:"created_at"`
	FailedAt time.Time       `json:"failed_at"`
	RetryOf  *int64          `json:"retry_of,omitempty"`
}

// FailedFilter selects failed jobs: Search matches name, queue, payload or
// error (case-insensitive substring); Queue matches exactly.
type FailedFilter struct {
	Search string
	Queue  string
	Limit  int // 0: no limit
	Offset int
}

const failedColumns = `id, job_id, queue, name, payload, attempts, max_tries, error, created_at, failed_at, retry_of`

// failedWhere is the filter shared by every failed-jobs statement; $1 is the
// search, $2 the queue.
const failedWhere = `($1 = '' OR name ILIKE '%' || $1 || '%' OR queue ILIKE '%' || $1 || '%'
	OR payload::text ILIKE '%' || $1 || '%' OR error ILIKE '%' || $1 || '%')
	AND ($2 = '' OR queue = $2)`

func scanFailed(rows pgx.Rows) ([]FailedJob, error) {
	return pgx.CollectRows(rows, pgx.RowToStructByPos[FailedJob])
}

// FailedJobList returns the failed jobs matching f, newest first.
func (s *Store) FailedJobList(ctx context.Context, f FailedFilter) ([]FailedJob, error) {
	limit := any(nil)
	if f.Limit > 0 {
		limit = f.Limit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+failedColumns+` FROM queue_failed_jobs WHERE `+failedWhere+`
		ORDER BY failed_at DESC, id DESC LIMIT $3 OFFSET $4`, f.Search, f.Queue, limit, f.Offset)
	if err != nil {
		return nil, fmt.Errorf("list failed jobs: %w", err)
	}
	jobs, err := scanFailed(rows)
	if err != nil {
		return nil, fmt.Errorf("list failed jobs: %w", err)
	}
	return jobs, nil
}

// FailedJobGet returns one failed job or ErrFailedJobNotFound.
func (s *Store) FailedJobGet(ctx context.Context, id int64) (FailedJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+failedColumns+` FROM queue_failed_jobs WHERE id = $1`, id)
	if err != nil {
		return FailedJob{}, fmt.Errorf("read failed job %d: %w", id, err)
	}
	jobs, err := scanFailed(rows)
	if err != nil {
		return FailedJob{}, fmt.Errorf("read failed job %d: %w", id, err)
	}
	if len(jobs) == 0 {
		return FailedJob{}, fmt.Errorf("failed job %d: %w", id, ErrFailedJobNotFound)
	}
	return jobs[0], nil
}

// retrySQL dispatches the failed jobs picked by the CTE "picked" (ids)
// again with fresh attempts, linked to the original job, and removes them
// from queue_failed_jobs, in one statement.
const retrySQL = `
	, moved AS (
		DELETE FROM queue_failed_jobs f USING picked WHERE f.id = picked.id
		RETURNING f.job_id, f.queue, f.name, f.payload, f.max_tries, f.backoff_secs, f.timeout_ms, f.retry_of
	)
	INSERT INTO queue_jobs (queue, name, payload, max_tries, backoff_secs, timeout_ms, retry_of)
	SELECT queue, name, payload, max_tries, backoff_secs, timeout_ms, COALESCE(retry_of, job_id) FROM moved
	RETURNING id`

// FailedJobRetry dispatches a failed job again with fresh attempts; the new
// job's retry_of links it to the original job. It returns the new job's id,
// or ErrFailedJobNotFound.
func (s *Store) FailedJobRetry(ctx context.Context, id int64) (int64, error) {
	var newID int64
	err := s.pool.QueryRow(ctx, `WITH picked AS (SELECT id FROM queue_failed_jobs WHERE id = $1 FOR UPDATE)`+retrySQL, id).Scan(&newID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("retry failed job %d: %w", id, ErrFailedJobNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("retry failed job %d: %w", id, err)
	}
	return newID, nil
}

// FailedJobRetryAll retries every failed job matching f and returns how
// many it dispatched.
func (s *Store) FailedJobRetryAll(ctx context.Context, f FailedFilter) (int, error) {
	rows, err := s.pool.Query(ctx, `WITH picked AS (SELECT id FROM queue_failed_jobs WHERE `+failedWhere+` FOR UPDATE)`+retrySQL, f.Search, f.Queue)
	if err != nil {
		return 0, fmt.Errorf("retry failed jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("retry failed jobs: %w", err)
	}
	return len(ids), nil
}

// FailedJobForget deletes a failed job, or returns ErrFailedJobNotFound.
func (s *Store) FailedJobForget(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_failed_jobs WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("forget failed job %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("forget failed job %d: %w", id, ErrFailedJobNotFound)
	}
	return nil
}

// FailedJobForgetAll deletes every failed job matching f.
func (s *Store) FailedJobForgetAll(ctx context.Context, f FailedFilter) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_failed_jobs WHERE `+failedWhere, f.Search, f.Queue)
	if err != nil {
		return 0, fmt.Errorf("forget failed jobs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// FailedJobTrim deletes failed jobs older than age.
func (s *Store) FailedJobTrim(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_failed_jobs WHERE failed_at < now() - $1 * interval '1 millisecond'`, age.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("trim failed jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}
