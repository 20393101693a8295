package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Concurrency limits per key.
//
// A limited job carries a key and a limit (queue_jobs.limit_key, limit_n):
// at most limit_n jobs of the key are unparked, ready or running, at any
// moment, across every worker of every master. queue_limits keeps, per key,
// the limit and active, the number of the key's unparked jobs.
//
// Claims pay nothing for limits. A limited job that may not run yet is
// parked out of the claim's reach: available_at = 'infinity' (claims read
// only available_at <= now()), with limit_due saying when it may run once a
// slot is free. Slots move only in statements that hold the key's row lock:
//
//   - dispatch takes a slot per undelayed job while the key has one free,
//     and inserts the job ready; the others, and every delayed job, are
//     inserted parked (jobInsertLimitedSQL);
//   - a job that completes, fails for good or is retried frees its slot,
//     and the same statement hands it over to the key's oldest due parked
//     job (limitHandoffCTEs); a retried job is parked again until its
//     backoff has passed, so it holds no slot meanwhile;
//   - a job released because its holder died keeps its slot: it is still
//     one of the key's unparked jobs, and runs again;
//   - the master's sweep (LimitSweep) unparks due parked jobs of keys with
//     free slots (delays that elapsed, retries that are due, handoffs that
//     found nothing due) and recounts active from the jobs themselves, so
//     that jobs deleted by other paths do not hold slots for ever.

// MaxLimitKeyBytes is the longest limit key, in bytes.
const MaxLimitKeyBytes = 200

// jobInsertLimitedSQL inserts a batch holding limited jobs, in one
// statement: it locks the rows of the batch's keys (in key order, so that
// concurrent dispatchers of several keys do not deadlock), takes as many
// free slots as the batch has undelayed jobs of each key, creates the rows
// of new keys, and inserts each job ready when it got a slot, parked
// otherwise. The latest dispatch of a key sets its limit. Two dispatchers
// creating the row of the same new key at once: the one whose insert
// loses parks its jobs, which the sweep unparks at its next tick if a slot
// is free. Batches without a limited job use jobInsertSQL, unchanged.
const jobInsertLimitedSQL = `
	WITH u AS MATERIALIZED (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[],
		                     $7::bigint[], $8::bigint[], $9::smallint[], $10::text[], $11::text[], $12::text[], $13::integer[])
		     WITH ORDINALITY AS u(q, n, p, t, b, tm, d, r, pr, tg, md, lk, ln, ord)
	), want AS (
		SELECT lk AS key, (array_agg(ln ORDER BY ord DESC))[1] AS limit_n, count(*) FILTER (WHERE d <= 0) AS n
		FROM u WHERE lk <> '' GROUP BY lk
	), locked AS (
		SELECT l.key, l.active FROM queue_limits l
		WHERE l.key = ANY (ARRAY(SELECT key FROM want))
		ORDER BY l.key
		FOR UPDATE
	), taken AS (
		UPDATE queue_limits l
		SET limit_n = w.limit_n, active = k.active + least(w.n, greatest(w.limit_n - k.active, 0))
		FROM want w JOIN locked k ON k.key = w.key
		WHERE l.key = w.key
		RETURNING l.key, l.active - k.active AS granted
	), fresh AS (
		INSERT INTO queue_limits (key, limit_n, active)
		SELECT key, limit_n, least(n, limit_n) FROM want
		WHERE key NOT IN (SELECT key FROM locked)
		ORDER BY key
		ON CONFLICT (key) DO NOTHING
		RETURNING key, active AS granted
	), granted AS (
		SELECT key, granted FROM taken UNION ALL SELECT key, granted FROM fresh
	), placed AS (
		SELECT u.*, u.lk <> '' AND (u.d > 0 OR
		       row_number() OVER (PARTITION BY u.lk, u.d > 0 ORDER BY u.ord) > COALESCE(g.granted, 0)) AS parked
		FROM u LEFT JOIN granted g ON g.key = u.lk
	)
	INSERT INTO queue_jobs (queue, name, payload, max_tries, backoff_secs, timeout_ms, available_at, retry_of,
	                        limit_key, limit_n, limit_due, priority, tags, metadata)
	SELECT q, n, p::jsonb, NULLIF(t, 0), b::integer[], NULLIF(tm, 0),
	       CASE WHEN parked THEN 'infinity' ELSE now() + d * interval '1 millisecond' END, NULLIF(r, 0),
	       NULLIF(lk, ''), CASE WHEN lk <> '' THEN ln END,
	       CASE WHEN parked THEN now() + d * interval '1 millisecond' END, pr, tg::text[], md::jsonb
	FROM placed
	ORDER BY ord
	RETURNING id`

// limitHandoffCTEs is sql/fragments/slot_handoff.sql, for a statement
// built in Go: after a CTE freed (key, n: how many of the key's unparked
// jobs just finished, failed or were parked again), it frees those slots
// and hands each over to a due parked job of its key, oldest due first,
// defining the CTEs slots, handoff (the jobs unparked: id, queue,
// limit_key), handed and slotted. As every fragment, it opens with "), "
// and leaves its last CTE for the text after it to close.
var limitHandoffCTEs = mustFragment("slot_handoff")

// limitHandedQueues is the array of the distinct queues of the jobs
// limitHandoffCTEs unparked (NULL for none), for a statement's result.
const limitHandedQueues = `(SELECT array_agg(DISTINCT queue) FROM handoff)`

// wakeHanded notifies the workers of queues that got unparked jobs, as a
// dispatch does; polling covers a notification that fails.
func (s *Store) wakeHanded(ctx context.Context, queues []string) {
	if len(queues) > 0 {
		_ = s.QueueNotify(ctx, queues)
	}
}

// LimitSweepParams bound one sweep.
type LimitSweepParams struct {
	// After is where the walk over keys with parked jobs starts (exclusive):
	// the Next of the previous sweep, "" for the first key.
	After string
	// Keys is the most keys with parked jobs one sweep visits.
	Keys int
	// PerKey is the most jobs of one key one sweep unparks.
	PerKey int
}

// LimitSweepResult is what one sweep did.
type LimitSweepResult struct {
	// Next is where the next sweep starts: "" once the walk reached the
	// last key.
	Next string
	// Visited counts the keys with parked jobs the walk went past; Due
	// those of them with a due parked job.
	Visited, Due int
	// Unparked counts the jobs made ready.
	Unparked int
	// Repaired counts the keys whose active count did not match their
	// unparked jobs and was set right.
	Repaired int
	// Queues are the queues of the jobs made ready.
	Queues []string
}

// limitSweepKeysSQL walks the keys that have parked jobs, in key order from
// $1, through queue_jobs_parked_idx one index descent per key (a loose
// index scan), for at most $2 keys, and says of each whether it has a due
// parked job. Keys whose queue_limits row is missing (deleted by hand) get
// one, with the limit of the key's latest parked job. Its cost grows with
// $2, not with the parked jobs.
const limitSweepKeysSQL = `
	WITH RECURSIVE k AS (
		(SELECT limit_key AS key FROM queue_jobs
		 WHERE available_at = 'infinity' AND limit_key > $1
		 ORDER BY limit_key LIMIT 1)
		UNION ALL
		SELECT (SELECT limit_key FROM queue_jobs
		        WHERE available_at = 'infinity' AND limit_key > k.key
		        ORDER BY limit_key LIMIT 1)
		FROM k WHERE k.key IS NOT NULL
	), walked AS (
		SELECT key FROM k WHERE key IS NOT NULL LIMIT $2
	), due AS (
		SELECT w.key FROM walked w
		WHERE EXISTS (SELECT 1 FROM queue_jobs j
		              WHERE j.limit_key = w.key AND j.available_at = 'infinity' AND j.limit_due <= now())
	), ensured AS (
		INSERT INTO queue_limits (key, limit_n, active)
		SELECT d.key, (SELECT j.limit_n FROM queue_jobs j
		               WHERE j.limit_key = d.key AND j.available_at = 'infinity'
		               ORDER BY j.limit_due DESC LIMIT 1), 0
		FROM due d
		WHERE NOT EXISTS (SELECT 1 FROM queue_limits l WHERE l.key = d.key)
		ORDER BY d.key
		ON CONFLICT (key) DO NOTHING
	)
	SELECT (SELECT count(*) FROM walked), (SELECT max(key) FROM walked),
	       ARRAY(SELECT key FROM due ORDER BY key)`

// limitSweepLockSQL locks the rows of the due keys no one else holds
// (dispatches and finishes hold them for a moment; the next sweep gets
// those).
const limitSweepLockSQL = `
	SELECT key FROM queue_limits WHERE key = ANY ($1::text[]) ORDER BY key FOR UPDATE SKIP LOCKED`

// limitSweepFixSQL runs after limitSweepLockSQL, in its transaction, so its
// snapshot is taken with the keys locked: every dispatch or finish that
// moved a slot of them has committed, and none is under way. It recounts
// each key's unparked jobs (at most about its limit, through
// queue_jobs_limit_active_idx), unparks up to the free slots (at most $2
// per key) of its due parked jobs, oldest due first, and sets active to
// what it counted plus what it unparked.
const limitSweepFixSQL = `
	WITH counted AS (
		SELECT l.key, l.limit_n, l.active AS was,
		       (SELECT count(*) FROM queue_jobs j
		        WHERE j.limit_key = l.key AND j.available_at <> 'infinity')::integer AS active
		FROM queue_limits l WHERE l.key = ANY ($1::text[])
	), unparked AS (
		UPDATE queue_jobs j SET available_at = now(), limit_due = NULL
		WHERE j.id = ANY (ARRAY(
			SELECT p.id FROM counted c, LATERAL (
				SELECT id FROM queue_jobs
				WHERE limit_key = c.key AND available_at = 'infinity' AND limit_due <= now()
				ORDER BY limit_due, id
				LIMIT greatest(least(c.limit_n - c.active, $2), 0)
				FOR UPDATE SKIP LOCKED) p))
		  AND j.available_at = 'infinity'
		RETURNING j.queue, j.limit_key
	), n AS (
		SELECT limit_key AS key, count(*)::integer AS n FROM unparked GROUP BY limit_key
	), fixed AS (
		UPDATE queue_limits l SET active = c.active + COALESCE(n.n, 0)
		FROM counted c LEFT JOIN n ON n.key = c.key
		WHERE l.key = c.key AND l.active <> c.active + COALESCE(n.n, 0)
	)
	SELECT (SELECT count(*) FROM unparked), (SELECT count(*) FROM counted WHERE was <> active),
	       ARRAY(SELECT DISTINCT queue FROM unparked)`

// LimitSweep is the backstop of the limits, run by every master's
// housekeeping: it visits up to p.Keys keys that have parked jobs, from
// p.After on, and for those with a due parked job that no one else is
// moving a slot of right now, recounts their unparked jobs and unparks due
// parked jobs into the free slots. It costs one index descent per key
// visited, plus, per due key, about its limit: not the backlog. Workers of
// the queues that got jobs are notified.
func (s *Store) LimitSweep(ctx context.Context, p LimitSweepParams) (LimitSweepResult, error) {
	var res LimitSweepResult
	var next *string
	var due []string
	if err := s.pool.QueryRow(ctx, limitSweepKeysSQL, p.After, p.Keys).Scan(&res.Visited, &next, &due); err != nil {
		return res, fmt.Errorf("sweep the limits: find keys with parked jobs: %w", err)
	}
	if next != nil && res.Visited >= p.Keys {
		res.Next = *next
	}
	res.Due = len(due)
	if len(due) == 0 {
		return res, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, limitSweepLockSQL, due)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(locked) == 0 {
			return err
		}
		return tx.QueryRow(ctx, limitSweepFixSQL, locked, p.PerKey).Scan(&res.Unparked, &res.Repaired, &res.Queues)
	})
	if err != nil {
		return res, fmt.Errorf("sweep the limits of %d keys: %w", len(due), err)
	}
	slices.Sort(res.Queues)
	s.wakeHanded(ctx, res.Queues)
	return res, nil
}

// LimitKeyTrim deletes the rows of keys no job holds (none running, ready
// or parked, active 0), at most max of them, and returns how many. A
// dispatch of such a key racing the delete either keeps its row (it holds
// the row's lock, and active or the limit changed) or makes a new one; a
// parked job whose row went anyway gets one back from the sweep, which
// also recounts its slots. Masters run it with the partition upkeep.
func (s *Store) LimitKeyTrim(ctx context.Context, max int) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM queue_limits l
		WHERE l.key = ANY (ARRAY(
			SELECT k.key FROM queue_limits k
			WHERE k.active = 0
			  AND NOT EXISTS (SELECT 1 FROM queue_jobs j WHERE j.limit_key = k.key AND j.available_at = 'infinity')
			  AND NOT EXISTS (SELECT 1 FROM queue_jobs j WHERE j.limit_key = k.key AND j.available_at <> 'infinity')
			LIMIT $1))
		  AND l.active = 0`, max)
	if err != nil {
		return 0, fmt.Errorf("trim the rows of unused limit keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
