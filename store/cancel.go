package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Cancelling jobs, and the two outcomes a handler may end an attempt with
// besides completing and failing.
//
// A job that no worker holds (pending, delayed, or parked under a
// concurrency limit) is cancelled at once: deleted, with a 'cancelled'
// history row, its slot given back (and handed over) when it held one. A
// reserved job gets a cancel request (cancel_requested_at, cancelled_by)
// and a notification on CancelChannel, in the same transaction; its
// worker stops the handler and writes the attempt as OutcomeCancelled.
// Should the worker die first, every release path (JobRelease,
// releaseLost) ends a job with a cancel request as cancelled instead of
// giving it back: it never runs again.

// The outcomes of snoozing and cancelled attempts (see JobOutcome).
const (
	// OutcomeSnoozed makes the job available again after Delay, like a
	// retry, with its attempt taken back (it does not count against its
	// tries) and its snoozes counted. History status: snoozed.
	OutcomeSnoozed OutcomeKind = "snoozed"
	// OutcomeCancelled deletes the job, like a completion, never retried
	// and never moved to failed jobs. History status: cancelled.
	OutcomeCancelled OutcomeKind = "cancelled"
)

// CancelChannel is the channel a cancel request of a running job notifies
// on; the payload is a CancelNotice in JSON.
const CancelChannel = "fleet_cancel"

// MaxCancelledByBytes is the longest cancelled_by kept, in bytes.
const MaxCancelledByBytes = 200

// CancelNotice is a cancel request of a running job, as notified on
// CancelChannel and as a worker's poll finds it.
type CancelNotice struct {
	ID    int64  `json:"id"`
	Lease int64  `json:"lease"`
	By    string `json:"by"`
}

// JobCancelState is what a cancel did to one job.
type JobCancelState string

// What a cancel did.
const (
	// JobCancelDone: the job was not running; it is deleted and recorded
	// as cancelled.
	JobCancelDone JobCancelState = "cancelled"
	// JobCancelRequested: the job is running; its worker was asked to stop
	// it, and records it as cancelled.
	JobCancelRequested JobCancelState = "cancel_requested"
	// JobCancelNotFound: no such job is queued (it finished, failed, was
	// cancelled already, or never existed).
	JobCancelNotFound JobCancelState = "not_found"
)

// JobCancelResult is what a cancel did to one id.
type JobCancelResult struct {
	ID    int64
	State JobCancelState
}

// A cancel runs two statements in one transaction: sql/cancel_lock.sql
// locks the queued jobs in id order, then sql/cancel.sql deletes the
// unreserved ones (with their history, slots handed over) and asks for
// the cancel of the reserved ones, notifying their workers on
// CancelChannel at commit.
var (
	jobCancelLock = mustStatement("cancel_lock.sql", "job_ids")
	jobCancel     = mustStatement("cancel.sql", "job_ids", "who")
)

// JobCancel cancels the jobs with ids, by who (an operator, a token: it
// is recorded), in one transaction, and says per id, in the order given
// (duplicates once), what it did. See JobCancelState.
func (s *Store) JobCancel(ctx context.Context, ids []int64, who string) ([]JobCancelResult, error) {
	uniq := make([]int64, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(uniq, id) {
			uniq = append(uniq, id)
		}
	}
	if len(uniq) == 0 {
		return nil, nil
	}
	who = StorableText(who)
	if len(who) > MaxCancelledByBytes {
		who = StorableText(who[:MaxCancelledByBytes])
	}
	var gone, requested []int64
	var handed []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, jobCancelLock.sql, uniq); err != nil {
			return err
		}
		var notified int64
		return tx.QueryRow(ctx, jobCancel.sql, uniq, who).Scan(&gone, &requested, &notified, &handed)
	})
	if err != nil {
		return nil, fmt.Errorf("cancel %d jobs: %w", len(uniq), err)
	}
	s.wakeHanded(ctx, handed)
	out := make([]JobCancelResult, len(uniq))
	for i, id := range uniq {
		out[i] = JobCancelResult{ID: id, State: JobCancelNotFound}
		switch {
		case slices.Contains(gone, id):
			out[i].State = JobCancelDone
		case slices.Contains(requested, id):
			out[i].State = JobCancelRequested
		}
	}
	return out, nil
}

// JobCancelQueueParams name the queue whose jobs to cancel.
type JobCancelQueueParams struct {
	Queue string
	By    string
	// Batch is the most jobs one statement cancels (default 1000).
	Batch int
}

// JobCancelQueueResult counts what JobCancelQueue did.
type JobCancelQueueResult struct {
	Cancelled int // not running: deleted and recorded as cancelled
	Requested int // running: their workers were asked to stop them
}

// JobCancelQueue cancels every job of a queue queued when it starts (ids
// up to the largest then), in batches of p.Batch, each its own
// transaction (JobCancel): first the unreserved ones, read from the head
// of the ready index, then it asks for the cancel of the running ones. A
// job dispatched meanwhile is left alone, so a steady stream of
// dispatches cannot keep it going.
func (s *Store) JobCancelQueue(ctx context.Context, p JobCancelQueueParams) (JobCancelQueueResult, error) {
	var res JobCancelQueueResult
	batch := p.Batch
	if batch <= 0 {
		batch = 1000
	}
	var upTo *int64
	if err := s.pool.QueryRow(ctx, `SELECT max(id) FROM queue_jobs`).Scan(&upTo); err != nil {
		return res, fmt.Errorf("cancel the jobs of queue %q: %w", p.Queue, err)
	}
	if upTo == nil {
		return res, nil
	}
	for _, pick := range []string{
		`SELECT id FROM queue_jobs WHERE queue = $1 AND reserved_by IS NULL AND id <= $2
		 ORDER BY available_at, id LIMIT $3`,
		`SELECT id FROM queue_jobs WHERE queue = $1 AND reserved_by IS NOT NULL AND cancel_requested_at IS NULL
		 AND id <= $2 ORDER BY id LIMIT $3`,
	} {
		for {
			rows, err := s.pool.Query(ctx, pick, p.Queue, *upTo, batch)
			if err != nil {
				return res, fmt.Errorf("cancel the jobs of queue %q: %w", p.Queue, err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return res, fmt.Errorf("cancel the jobs of queue %q: %w", p.Queue, err)
			}
			if len(ids) == 0 {
				break
			}
			done, err := s.JobCancel(ctx, ids, p.By)
			if err != nil {
				return res, fmt.Errorf("cancel the jobs of queue %q: %w", p.Queue, err)
			}
			for _, d := range done {
				switch d.State {
				case JobCancelDone:
					res.Cancelled++
				case JobCancelRequested:
					res.Requested++
				}
			}
			if len(ids) < batch {
				break
			}
		}
	}
	return res, nil
}

// JobCancelQueueCount says what JobCancelQueue would touch now: the jobs
// of queue no worker holds, and the running ones (from queue_counts: a
// few rows, whatever the backlog).
func (s *Store) JobCancelQueueCount(ctx context.Context, queue string) (unreserved, reserved int64, err error) {
	err = s.pool.QueryRow(ctx, `
		SELECT COALESCE(sum(unreserved), 0)::bigint, COALESCE(sum(reserved), 0)::bigint
		FROM queue_counts WHERE queue = $1`, queue).Scan(&unreserved, &reserved)
	if err != nil {
		return 0, 0, fmt.Errorf("count the jobs of queue %q: %w", queue, err)
	}
	return unreserved, reserved, nil
}

// JobCancelPoll returns the cancel requests among the jobs with ids (the
// ones a worker runs), read by primary key: its cost grows with the ids
// alone. The caller checks each lease against its own.
func (s *Store) JobCancelPoll(ctx context.Context, ids []int64) ([]CancelNotice, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, COALESCE(lease, 0), COALESCE(cancelled_by, '') FROM queue_jobs
		WHERE id = ANY ($1::bigint[]) AND cancel_requested_at IS NOT NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("look for cancel requests of %d running jobs: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[CancelNotice])
	if err != nil {
		return nil, fmt.Errorf("look for cancel requests of %d running jobs: %w", len(ids), err)
	}
	return out, nil
}

// parseCancelNotice reads a CancelChannel payload.
func parseCancelNotice(payload string) (CancelNotice, error) {
	var n CancelNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return n, fmt.Errorf("read cancel notification %q: %w", payload, err)
	}
	return n, nil
}
