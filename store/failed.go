package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/model"
)

// ErrFailedJobNotFound is returned for a failed job id that does not exist
// (any more).
var ErrFailedJobNotFound = model.ErrFailedJobNotFound

// FailedJob is a row of queue_failed_jobs.
type FailedJob = model.FailedJob

// FailedFilter selects failed jobs. The store matches the raw payload and
// error, secrets included: fleet.Service, which shows failed jobs to
// people, matches their redacted rendering instead.
type FailedFilter = model.FailedFilter

const failedColumns = `id, job_id, queue, name, payload, attempts, max_tries, error, created_at, failed_at, retry_of, limit_key, limit_n, priority, tags`

// failedFilter is the filter shared by every failed-jobs statement: only
// the filters set in f, so each combination is a statement of its own (see
// filter). The search matches case-insensitively anywhere in the name,
// queue, payload or error, literally (its %, _ and \ are escaped); no index
// serves it, so a search reads rows until it has found a page of matches.
// The queue matches exactly.
func failedFilter(f FailedFilter) *filter {
	var w filter
	if f.Search != "" {
		w.add(`(name ILIKE '%' || $? || '%' OR queue ILIKE '%' || $? || '%'
			OR payload::text ILIKE '%' || $? || '%' OR error ILIKE '%' || $? || '%')`, likeEscaper.Replace(f.Search))
	}
	if f.Tag != "" {
		w.add(`tags @> ARRAY[$?]::text[]`, f.Tag)
	}
	if f.Queue != "" {
		// A range of one value, so that a generic plan, which guesses a
		// queue holds 1/(number of queues) of the rows, still takes the
		// (queue, failed_at, id) index for a queue holding a few.
		w.add(`queue >= $? AND queue <= $?`, f.Queue)
	}
	return &w
}

// likeEscaper makes a string match itself in LIKE, whose escape character
// is the backslash.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

func scanFailed(rows pgx.Rows) ([]FailedJob, error) {
	return pgx.CollectRows(rows, pgx.RowToStructByPos[FailedJob])
}

// FailedJobList returns the failed jobs matching f, newest first.
func (s *Store) FailedJobList(ctx context.Context, f FailedFilter) ([]FailedJob, error) {
	w := failedFilter(f)
	order := ` ORDER BY failed_at DESC, id DESC`
	if f.Queue != "" { // the same order within one queue, and only that index gives it
		order = ` ORDER BY queue, failed_at DESC, id DESC`
	}
	sql := `SELECT ` + failedColumns + ` FROM queue_failed_jobs` + w.where() + order
	if f.Limit > 0 { // no limit is a statement of its own, not LIMIT NULL
		sql += ` LIMIT ` + w.param(f.Limit)
	}
	sql += ` OFFSET ` + w.param(f.Offset)
	rows, err := s.pool.Query(ctx, sql, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list failed jobs: %w", err)
	}
	jobs, err := scanFailed(rows)
	if err != nil {
		return nil, fmt.Errorf("list failed jobs: %w", err)
	}
	return jobs, nil
}

// FailedJobCount counts the failed jobs matching f (its Limit and Offset
// aside).
func (s *Store) FailedJobCount(ctx context.Context, f FailedFilter) (int, error) {
	w := failedFilter(f)
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queue_failed_jobs`+w.where(), w.args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count failed jobs: %w", err)
	}
	return n, nil
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
// from queue_failed_jobs, in one statement. It returns the new ids and
// their queues. A limited job is dispatched again under its key and limit,
// parked and due at once: the next handoff or sweep gives it a slot.
const retrySQL = `
	, moved AS (
		DELETE FROM queue_failed_jobs f USING picked WHERE f.id = picked.id
		RETURNING f.job_id, f.queue, f.name, f.payload, f.max_tries, f.backoff_secs, f.timeout_ms, f.retry_of,
		          f.limit_key, f.limit_n, f.priority, f.tags, f.metadata
	)
	INSERT INTO queue_jobs (queue, name, payload, max_tries, backoff_secs, timeout_ms, retry_of,
	                        limit_key, limit_n, available_at, limit_due, priority, tags, metadata)
	SELECT queue, name, payload, max_tries, backoff_secs, timeout_ms, COALESCE(retry_of, job_id),
	       limit_key, limit_n, CASE WHEN limit_key IS NULL THEN now() ELSE 'infinity' END,
	       CASE WHEN limit_key IS NOT NULL THEN now() END, priority, tags, metadata
	FROM moved
	RETURNING id, queue`

type retried struct {
	ID    int64
	Queue string
}

// wakeRetried notifies the workers of the queues of retried jobs, as a
// dispatch does; polling covers a notification that fails.
func (s *Store) wakeRetried(ctx context.Context, jobs []retried) {
	var queues []string
	for _, j := range jobs {
		if !slices.Contains(queues, j.Queue) {
			queues = append(queues, j.Queue)
		}
	}
	_ = s.QueueNotify(ctx, queues)
}

// FailedJobRetry dispatches a failed job again with fresh attempts; the new
// job's retry_of links it to the original job. It returns the new job's id,
// or ErrFailedJobNotFound.
func (s *Store) FailedJobRetry(ctx context.Context, id int64) (int64, error) {
	var job retried
	err := s.pool.QueryRow(ctx, `WITH picked AS (SELECT id FROM queue_failed_jobs WHERE id = $1 FOR UPDATE)`+retrySQL, id).Scan(&job.ID, &job.Queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("retry failed job %d: %w", id, ErrFailedJobNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("retry failed job %d: %w", id, err)
	}
	s.wakeRetried(ctx, []retried{job})
	return job.ID, nil
}

// FailedJobRetryAll retries every failed job matching f and returns how
// many it dispatched.
func (s *Store) FailedJobRetryAll(ctx context.Context, f FailedFilter) (int, error) {
	w := failedFilter(f)
	rows, err := s.pool.Query(ctx, `WITH picked AS (SELECT id FROM queue_failed_jobs`+w.where()+` FOR UPDATE)`+retrySQL, w.args...)
	if err != nil {
		return 0, fmt.Errorf("retry failed jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[retried])
	if err != nil {
		return 0, fmt.Errorf("retry failed jobs: %w", err)
	}
	s.wakeRetried(ctx, jobs)
	return len(jobs), nil
}

// FailedJobRetryMany retries the failed jobs with the given ids (those
// that still exist) and returns how many it dispatched.
func (s *Store) FailedJobRetryMany(ctx context.Context, ids []int64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err := s.pool.Query(ctx, `WITH picked AS (SELECT id FROM queue_failed_jobs WHERE id = ANY($1) FOR UPDATE)`+retrySQL, ids)
	if err != nil {
		return 0, fmt.Errorf("retry %d failed jobs: %w", len(ids), err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[retried])
	if err != nil {
		return 0, fmt.Errorf("retry %d failed jobs: %w", len(ids), err)
	}
	s.wakeRetried(ctx, jobs)
	return len(jobs), nil
}

// FailedJobForgetMany deletes the failed jobs with the given ids and
// returns how many it deleted.
func (s *Store) FailedJobForgetMany(ctx context.Context, ids []int64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_failed_jobs WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, fmt.Errorf("forget %d failed jobs: %w", len(ids), err)
	}
	return int(tag.RowsAffected()), nil
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
	w := failedFilter(f)
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_failed_jobs`+w.where(), w.args...)
	if err != nil {
		return 0, fmt.Errorf("forget failed jobs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// FailedJobTrimCount counts the failed jobs older than age: those
// FailedJobTrim would delete.
func (s *Store) FailedJobTrimCount(ctx context.Context, age time.Duration) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queue_failed_jobs WHERE failed_at < now() - $1 * interval '1 millisecond'`, age.Milliseconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count failed jobs to trim: %w", err)
	}
	return n, nil
}

// FailedJobTrim deletes failed jobs older than age.
func (s *Store) FailedJobTrim(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_failed_jobs WHERE failed_at < now() - $1 * interval '1 millisecond'`, age.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("trim failed jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}
