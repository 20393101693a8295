package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of the test kit (package fleettest): what an app's tests
// read and change in queue_jobs to check what they dispatched and to make
// waiting jobs due. Production code does not run them; they read whole
// tables, which the small databases of tests afford.

// JobInspectParams selects the jobs JobInspect reads.
type JobInspectParams struct {
	// InTx: only the jobs inserted (or changed) by the transaction the
	// statement runs in, not yet committed. Run it on that transaction.
	InTx bool
	// Limit bounds the jobs read, oldest first (0: 1000).
	Limit int
}

// InspectedJob is a job as queue_jobs holds it.
type InspectedJob struct {
	ID       int64
	Queue    string
	Name     string
	Payload  json.RawMessage
	Metadata json.RawMessage // nil: none
	Tags     []string
	Priority int
	// State is reserved (running), limited (parked under its concurrency
	// limit), delayed (available later) or pending.
	State    string
	Attempts int
	// MaxTries is what the job set, 0 when it left it to the worker.
	MaxTries    int
	AvailableAt time.Time // infinity (a parked job) reads as the zero time
	CreatedAt   time.Time
	LastError   string
}

// inTxCondition holds for a row whose version was written by the current
// transaction or one of its subtransactions: its xmin is in progress, and
// of the transactions in progress only the current one's rows are visible.
// xmin is a 32-bit xid; pg_xact_status takes a 64-bit one, rebuilt from
// the current transaction's (d is how far the current one's xid is past
// xmin, modulo 2^32). Only xids from the current transaction's up to a
// million after it are asked about: the subtransactions of a transaction
// come after it, and a test's transaction has fewer than a million, while
// an xid it was not assigned could be in the future, which pg_xact_status
// refuses.
const inTxCondition = `
	(SELECT CASE WHEN d <= 0 AND d > -1000000 THEN pg_xact_status((cur - d)::text::xid8) = 'in progress' ELSE false END
	 FROM (SELECT pg_current_xact_id()::text::bigint AS cur) c,
	      LATERAL (SELECT ((c.cur % 4294967296 - queue_jobs.xmin::text::bigint + 6442450944) % 4294967296) - 2147483648 AS d) x)`

// JobInspect returns the jobs of queue_jobs, oldest first, on db (a
// transaction of the caller's for InTx). It is a function, not a method:
// a test may hold a transaction and no Store.
func JobInspect(ctx context.Context, db DBTX, p JobInspectParams) ([]InspectedJob, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	where := ""
	if p.InTx {
		where = ` WHERE ` + inTxCondition
	}
	rows, err := db.Query(ctx, `
		SELECT id, queue, name, payload, metadata, tags, priority,
		       CASE WHEN reserved_by IS NOT NULL THEN 'reserved' WHEN available_at = 'infinity' THEN 'limited'
		            WHEN available_at > now() THEN 'delayed' ELSE 'pending' END,
		       attempts, COALESCE(max_tries, 0),
		       CASE WHEN available_at = 'infinity' THEN NULL ELSE available_at END,
		       created_at, COALESCE(last_error, '')
		FROM queue_jobs`+where+`
		ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("inspect jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (InspectedJob, error) {
		var j InspectedJob
		var prio int16
		var meta []byte
		var at *time.Time
		err := row.Scan(&j.ID, &j.Queue, &j.Name, &j.Payload, &meta, &j.Tags, &prio, &j.State,
			&j.Attempts, &j.MaxTries, &at, &j.CreatedAt, &j.LastError)
		j.Priority = int(prio)
		if meta != nil {
			j.Metadata = meta
		}
		if at != nil {
			j.AvailableAt = *at
		}
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("inspect jobs: %w", err)
	}
	return jobs, nil
}

// JobMakeDue makes the waiting jobs of queues (every queue when empty)
// available now: the delayed ones, retries waiting out their backoff and
// snoozed jobs. Running jobs and jobs parked under a concurrency limit
// keep theirs. It notifies the queues it changed, so idle workers wake,
// and returns how many jobs it changed.
func (s *Store) JobMakeDue(ctx context.Context, queues []string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH due AS (
				UPDATE queue_jobs SET available_at = now()
				WHERE reserved_by IS NULL AND available_at > now() AND available_at <> 'infinity'
				  AND (COALESCE(cardinality($1::text[]), 0) = 0 OR queue = ANY ($1::text[]))
				RETURNING queue
			)
			SELECT queue, count(*) FROM due GROUP BY queue`, queues)
		if err != nil {
			return err
		}
		var changed []string
		for rows.Next() {
			var q string
			var c int64
			if err := rows.Scan(&q, &c); err != nil {
				rows.Close()
				return err
			}
			changed, n = append(changed, q), n+c
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return QueueNotifyTx(ctx, tx, changed)
	})
	if err != nil {
		return 0, fmt.Errorf("make jobs of queues %v due: %w", queues, err)
	}
	return n, nil
}
