package store

import (
	"cmp"
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgtype"
)

// Clearing a queue: deleting the jobs of one queue that no worker holds
// (pending, delayed, waiting for a retry, and parked on a concurrency
// limit), leaving the reserved (running) ones alone.
//
// A clear is a loop of batches, each one statement and so one short
// transaction of its own: a million-job queue is never one giant delete.
// Each batch walks the queue's ready index (queue_jobs_ready_idx: queue,
// priority, available_at, id, unreserved jobs only) from where the previous batch
// stopped, so it costs its batch, never the jobs already deleted (whose
// dead index entries stay until vacuum) or the rest of the backlog.
//
// Slots and keys, in the statement that deletes the jobs:
//   - a deleted limited job that was unparked (ready, available_at <>
//     'infinity') gives its slot back: queue_limits.active of its key drops
//     by one, under the key row's lock (taken in key order, as every path
//     that moves slots does). No slot is handed over here; the masters'
//     sweep (LimitSweep) unparks the key's due parked jobs of other queues
//     into the freed slots within a tick. A parked job holds no slot.
//   - a deleted unique job frees its key: the unique index is on queue_jobs,
//     and a key kept in queue_unique_keys for the deleted job (a job whose
//     completion counts for its period) is deleted with it. A cleared job
//     never ran, so nothing counts against a new dispatch with its key.

// QueueClearBatchDefault is the batch QueueClear deletes per statement when
// its params say none.
const QueueClearBatchDefault = 10_000

// ClearCursor is a position in a queue's ready index: its jobs after
// (Priority, AvailableAt, ID). The zero ClearCursor (ID 0, no time) is the
// index's start.
type ClearCursor struct {
	Priority    int
	AvailableAt pgtype.Timestamptz
	ID          int64
}

// QueueClearBatchParams say which jobs one batch deletes: at most Limit
// unreserved jobs of Queue after After whose id is at most MaxID.
type QueueClearBatchParams struct {
	Queue string
	After ClearCursor
	MaxID int64
	Limit int
}

// QueueClearBatchResult is what one batch did: how many jobs it deleted,
// and the cursor after the last of them (Next.ID 0: it deleted none).
type QueueClearBatchResult struct {
	Deleted int
	Next    ClearCursor
}

// queueClearBatchSQL deletes one batch of a queue's unreserved jobs, in the
// ready index's order from a cursor. The jobs are locked with SKIP LOCKED:
// one a worker is claiming this instant is left to the worker. It gives
// the slots of deleted unparked limited jobs back, deletes the kept unique
// keys of deleted jobs, and returns the count and the cursor after the
// last job deleted.
const queueClearBatchSQL = `
	WITH doomed AS MATERIALIZED (
		SELECT id, priority, available_at FROM queue_jobs
		WHERE queue = $1 AND reserved_by IS NULL
		  AND (priority, available_at, id) > ($2::smallint, $3::timestamptz, $4::bigint) AND id <= $5
		ORDER BY priority, available_at, id
		LIMIT $6
		FOR UPDATE SKIP LOCKED
	), deleted AS (
		DELETE FROM queue_jobs j
		WHERE j.id = ANY (ARRAY(SELECT id FROM doomed)) AND j.reserved_by IS NULL
		RETURNING j.id, j.unique_key, j.limit_key, j.available_at
	), freed AS (
		SELECT limit_key AS key, count(*)::integer AS n FROM deleted
		WHERE limit_key IS NOT NULL AND available_at <> 'infinity'
		GROUP BY limit_key
	), slots AS (
		SELECT l.key, l.active, f.n
		FROM queue_limits l JOIN freed f ON f.key = l.key
		WHERE l.key = ANY (ARRAY(SELECT key FROM freed))
		ORDER BY l.key
		FOR UPDATE OF l
	), given AS (
		UPDATE queue_limits l SET active = greatest(s.active - s.n, 0)
		FROM slots s
		WHERE l.key = s.key
	), unkept AS (
		DELETE FROM queue_unique_keys k
		USING deleted d
		WHERE k.key = d.unique_key AND k.job_id = d.id
		  AND k.key = ANY (ARRAY(SELECT unique_key FROM deleted WHERE unique_key IS NOT NULL))
	), last AS (
		SELECT priority, available_at, id FROM doomed ORDER BY priority DESC, available_at DESC, id DESC LIMIT 1
	)
	SELECT (SELECT count(*) FROM deleted)::integer, COALESCE((SELECT priority FROM last), 0)::integer,
	       COALESCE((SELECT available_at FROM last), '-infinity'), COALESCE((SELECT id FROM last), 0)`

// QueueClearBatch deletes one batch of a queue's unreserved jobs (see
// QueueClear, which loops over batches).
func (s *Store) QueueClearBatch(ctx context.Context, p QueueClearBatchParams) (QueueClearBatchResult, error) {
	after := p.After
	if after.ID == 0 && !after.AvailableAt.Valid {
		after = ClearCursor{Priority: math.MinInt16, AvailableAt: pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}}
	}
	var res QueueClearBatchResult
	err := s.pool.QueryRow(ctx, queueClearBatchSQL, p.Queue, int16(after.Priority), after.AvailableAt, after.ID, p.MaxID, p.Limit).
		Scan(&res.Deleted, &res.Next.Priority, &res.Next.AvailableAt, &res.Next.ID)
	if err != nil {
		return QueueClearBatchResult{}, fmt.Errorf("clear queue %q: delete a batch of %d jobs: %w", p.Queue, p.Limit, err)
	}
	return res, nil
}

// QueueClearParams say which queue QueueClear clears, and in batches of
// how many jobs (0: QueueClearBatchDefault).
type QueueClearParams struct {
	Queue string
	Batch int
}

// QueueClear deletes the jobs of a queue that no worker holds and returns
// how many it deleted. Jobs dispatched after it starts (a larger id) are
// left alone, so a busy dispatcher cannot keep it running; jobs that become
// unreserved while it runs (a retry of a job that was running, a job whose
// holder died) may or may not be deleted. Each batch is a statement of its
// own: an error returns the count deleted so far with it.
//
// The walk follows the ready index in (priority, available_at, id) order,
// so each batch reads past none of the jobs the batches before it deleted.
// A job moved behind the walk while it ran (a parked job unparked, whose
// available_at becomes now()) is picked up by a second walk from the
// start, which reads the first walk's dead entries once.
func (s *Store) QueueClear(ctx context.Context, p QueueClearParams) (int, error) {
	limit := cmp.Or(p.Batch, QueueClearBatchDefault)
	var maxID int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM queue_jobs`).Scan(&maxID); err != nil {
		return 0, fmt.Errorf("clear queue %q: read the last job id: %w", p.Queue, err)
	}
	total := 0
	walk := func() (int, error) {
		var cur ClearCursor
		deleted := 0
		for {
			res, err := s.QueueClearBatch(ctx, QueueClearBatchParams{Queue: p.Queue, After: cur, MaxID: maxID, Limit: limit})
			deleted += res.Deleted
			total += res.Deleted
			if err != nil || res.Next.ID == 0 {
				return deleted, err
			}
			cur = res.Next
		}
	}
	first, err := walk()
	if err != nil || first == 0 {
		return total, err
	}
	_, err = walk()
	return total, err
}

// QueueUnreservedCount returns how many jobs of a queue no worker holds:
// what QueueClear would delete now. It reads the trigger-kept counts (a
// few rows), whatever the backlog.
func (s *Store) QueueUnreservedCount(ctx context.Context, queue string) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(sum(unreserved), 0)::bigint FROM queue_counts WHERE queue = $1`, queue).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the unreserved jobs of queue %q: %w", queue, err)
	}
	return n, nil
}
