package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/model"
)

// counterUpsert and counterConflict wrap a SELECT of (queue, shard,
// processed, failed, completed, attempt_failed, timed_out, lost, cancelled,
// retried, failed_final, requeued) increments into fleet_counters, with
// counterShard as the shard: one of 16 rows per queue, one no other
// writing transaction holds (queue_counter_shard, in the queue migrations),
// so that concurrent writers do not wait on one another's row while fewer
// than 16 write at once; readers sum the shards. Rows are taken in queue order so concurrent writers never
// deadlock. sql/fragments/attempt_counters.sql writes the same columns and
// conflict clause for the finish statements.
const (
	counterUpsert = `INSERT INTO fleet_counters AS c (queue, shard, processed, failed,
		completed, attempt_failed, timed_out, lost, cancelled, retried, failed_final, requeued)`
	counterShard    = `queue_counter_shard(0)`
	counterConflict = `
		ON CONFLICT (queue, shard) DO UPDATE SET processed = c.processed + EXCLUDED.processed,
		    failed = c.failed + EXCLUDED.failed, completed = c.completed + EXCLUDED.completed,
		    attempt_failed = c.attempt_failed + EXCLUDED.attempt_failed, timed_out = c.timed_out + EXCLUDED.timed_out,
		    lost = c.lost + EXCLUDED.lost, cancelled = c.cancelled + EXCLUDED.cancelled,
		    retried = c.retried + EXCLUDED.retried, failed_final = c.failed_final + EXCLUDED.failed_final,
		    requeued = c.requeued + EXCLUDED.requeued, updated_at = now()`
)

// RuntimeBoundsMs are the upper bounds, in milliseconds, of the runtime
// histogram kept in fleet_runtime_counters (fleet_job_runtime_seconds);
// an attempt counts in the first bucket whose bound is at or above its
// runtime, or in the one past the last bound. The finish statements spell
// them out (sql/fragments/runtime_histogram.sql); a test keeps the two
// equal.
var RuntimeBoundsMs = []float64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 1800000}

// historyColumns are the columns of the history that fleet's statements
// write, in the order the CTE history_rows holds them for
// historyInsertCTEs.
const historyColumns = `job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags`

// historyInsertCTEs is sql/fragments/history_insert.sql, for a statement
// built in Go: after a CTE history_rows (historyColumns, in order), it
// writes its rows to the history's two tables, defining the CTEs history
// (the completed attempts, into fleet_jobs_completed) and history_other
// (the others, into fleet_jobs_failed). As every fragment, it opens with
// "), " and leaves its last CTE for the text after it to close.
var historyInsertCTEs = mustFragment("history_insert")

// PartitionsEnsure creates the missing history partitions from the hour
// (day) before now up to hoursAhead hours (daysAhead days) ahead, and those
// of any hour (day) whose rows wait in a default partition, moving such rows
// in; it reports how many it created. A partition whose table is busy for
// over a second is left for the next call. On TimescaleDB hypertables it
// creates nothing and reports 0: chunks are made as rows arrive.
func (s *Store) PartitionsEnsure(ctx context.Context, hoursAhead, daysAhead int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT fleet_partitions_ensure(now(), $1, $2)`, hoursAhead, daysAhead).Scan(&n); err != nil {
		return 0, fmt.Errorf("create history partitions: %w", err)
	}
	return n, nil
}

// TrimParams say how long history is kept.
type TrimParams struct {
	CompletedHours int
	FailedDays     int
	MetricsDays    int
}

// PartitionsTrim drops the history partitions (on TimescaleDB, chunks)
// whose range ended at least their retention ago and reports how many it
// dropped. It drops whole partitions only, never a default one, and never
// deletes rows one by one; a table busy for over a second keeps its
// partitions until the next call. HistoryTrim says which it dropped.
func (s *Store) PartitionsTrim(ctx context.Context, p TrimParams) (int, error) {
	if p.CompletedHours < 1 || p.FailedDays < 1 || p.MetricsDays < 1 {
		return 0, errors.New("trim: every retention must be at least 1")
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT fleet_partitions_trim(now(), $1, $2, $3)`,
		p.CompletedHours, p.FailedDays, p.MetricsDays).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("trim history partitions: %w", err)
	}
	return n, nil
}

// The layouts of the history and snapshot tables (HistoryLayout.Kind); see
// migrations.LayoutPartitions and migrations.LayoutHypertables.
const (
	LayoutPartitions  = "partitions"
	LayoutHypertables = "hypertables"
)

// HistoryLayout says how fleet_jobs and fleet_metrics are laid out.
type HistoryLayout struct {
	// Kind is LayoutPartitions (native partitions: an hour of completed
	// attempts, a day of the others and of snapshots per partition) or
	// LayoutHypertables (TimescaleDB hypertables with chunks of those
	// spans; fleet_jobs is a view of fleet_jobs_completed and
	// fleet_jobs_failed).
	Kind string `json:"kind"`
	// Timescale is the version of the timescaledb extension installed in
	// the database, "" when it is not.
	Timescale string `json:"timescale,omitempty"`
}

// HistoryLayout reads the layout of the history and snapshot tables.
func (s *Store) HistoryLayout(ctx context.Context) (HistoryLayout, error) {
	var l HistoryLayout
	var kind, version *string
	err := s.pool.QueryRow(ctx, `
		SELECT fleet_history_layout(), (SELECT extversion FROM pg_extension WHERE extname = 'timescaledb')`).Scan(&kind, &version)
	if err != nil {
		return l, fmt.Errorf("read the history's layout: %w", err)
	}
	if kind == nil {
		return l, errors.New("read the history's layout: fleet_jobs does not exist")
	}
	l.Kind = *kind
	if version != nil {
		l.Timescale = *version
	}
	return l, nil
}

// TrimmedPart is a partition or chunk that HistoryTrim dropped, or would
// drop.
type TrimmedPart struct {
	// Table is fleet_jobs_completed, fleet_jobs_failed or fleet_metrics.
	Table string `json:"table"`
	// Name is the partition (fleet_jobs_completed_p2025010203) or the
	// chunk (_timescaledb_internal._hyper_1_2_chunk).
	Name string `json:"name"`
	// From and To bound the rows it held, [From, To); zero when unknown (a
	// chunk made while the trim ran).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Bytes is its size on disk with its indexes, before it was dropped.
	Bytes int64 `json:"bytes"`
}

// HistoryTrim drops, in either layout, the partitions or chunks of the
// history and the snapshots whose range ended at least their retention ago,
// and returns them, oldest first per table: whole partitions or chunks,
// never a default partition, never rows one by one. With dryRun it drops
// nothing and returns what it would drop. A table busy for over a second
// keeps its partitions until the next call and is left out. PartitionsTrim
// is the same trim, counted.
func (s *Store) HistoryTrim(ctx context.Context, p TrimParams, dryRun bool) ([]TrimmedPart, error) {
	if p.CompletedHours < 1 || p.FailedDays < 1 || p.MetricsDays < 1 {
		return nil, errors.New("trim: every retention must be at least 1")
	}
	rows, err := s.pool.Query(ctx, `
		SELECT parent, part, range_start, range_end, bytes
		FROM fleet_history_trim(now(), $1, $2, $3, $4)`, p.CompletedHours, p.FailedDays, p.MetricsDays, dryRun)
	if err != nil {
		return nil, fmt.Errorf("trim history: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TrimmedPart, error) {
		var t TrimmedPart
		var from, to *time.Time
		var bytes *int64
		err := row.Scan(&t.Table, &t.Name, &from, &to, &bytes)
		if from != nil {
			t.From = *from
		}
		if to != nil {
			t.To = *to
		}
		if bytes != nil {
			t.Bytes = *bytes
		}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("trim history: %w", err)
	}
	return parts, nil
}

// DutyClaim decides which master does a periodic duty: it sets the
// fleet_state row "duty:"+name to now (the store's clock) only if it is
// older than every, and reports whether this caller did. Of concurrent
// callers exactly one wins per period.
func (s *Store) DutyClaim(ctx context.Context, name string, every time.Duration) (bool, error) {
	var key string
	err := s.pool.QueryRow(ctx, `
		INSERT INTO fleet_state AS s (key, updated_at) VALUES ($1, `+clockSQL(3)+`)
		ON CONFLICT (key) DO UPDATE SET updated_at = `+clockSQL(3)+`
		WHERE s.updated_at <= `+clockSQL(3)+` - $2 * interval '1 millisecond'
		RETURNING key`, "duty:"+name, every.Milliseconds(), s.at()).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim duty %s: %w", name, err)
	}
	return true, nil
}

// SnapshotParams say which minute MetricsSnapshot writes and what its
// writer saw of it.
type SnapshotParams struct {
	// Minute is the whole minute written, [Minute, Minute + 1 minute).
	Minute time.Time
	// Partial writes the minute in progress as far as it went: the
	// attempts finished in it up to now, the rows recording that instant
	// (covered_until). It is a stopping master's last snapshot; a later
	// snapshot of the minute, whole or partial, replaces it. A Partial
	// snapshot of a minute that is over by then is a whole one. Without
	// Partial the minute must be over.
	Partial bool
	// Watched says the writer ran at the minute's end (for a Partial
	// snapshot: now). Only then, and only within BacklogFresh of that end,
	// do the rows carry the backlog measured at the write; otherwise it is
	// not the minute's: the rows have backlog_seen false, pending and wait
	// 0, no clear time, and a queue with a backlog but no attempt in the
	// minute gets no row.
	Watched bool
}

// BacklogFresh is how long after its end a minute's snapshot still
// records the backlog as the minute's (a retried or taken-over snapshot is
// written some seconds late).
const BacklogFresh = time.Minute

// snapshotLockKey is the first key of the advisory lock a snapshot takes
// on its minute (the second is the minute's number since the epoch), so
// that a stopping master's partial snapshot and the duty's whole one of
// the same minute never interleave.
const snapshotLockKey = 0x666d6574

// MetricsSnapshot writes the fleet_metrics rows of p.Minute, per queue and
// per job name, from the attempts' real finish times. Jobs counts every
// attempt but snoozed ones and jobs cancelled before they started; failed
// counts the failed, timed out and lost ones (a cancelled attempt is no
// failure; nor is an interrupted one); the runtime figures leave out,
// besides those, lost attempts (no worker timed them) and interrupted ones
// (their worker cut them short; 0 when none is left). Queue rows also carry the
// backlog when the writer saw it (SnapshotParams.Watched): pending (ready)
// jobs, the age of the oldest, and the seconds to clear them at that
// minute's rate (NULL when nothing finished, 0 with no backlog); a queue
// with a backlog and no history gets a row too. The backlog is measured
// when the snapshot is taken, not at the minute's end. Now, for whether the
// minute is over, how far a partial snapshot goes and the backlog, is the
// store's clock (see WithClock).
//
// A minute is written once: when it has rows of a whole snapshot, writing
// it again writes nothing and changes nothing; rows of a partial one are
// replaced by a snapshot that covers more of the minute. A minute that
// ended before the fleet tables were created (fleet_state
// "tables:created") is never written. It returns the rows written.
func (s *Store) MetricsSnapshot(ctx context.Context, p SnapshotParams) (int, error) {
	minute := p.Minute
	if minute.IsZero() || !minute.Truncate(time.Minute).Equal(minute) {
		return 0, fmt.Errorf("write metrics snapshot of %s: not a whole minute", minute.UTC().Format(time.RFC3339Nano))
	}
	label := minute.UTC().Format(time.RFC3339)
	at := s.at() // both statements' now: the transaction's, or the clock's
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int, $2::int)`,
			snapshotLockKey, int32(minute.Unix()/60)); err != nil {
			return fmt.Errorf("lock the minute: %w", err)
		}
		// One reading of the clock and of the minute's rows decides: how far
		// the snapshot counts (cut), whether it may be written at all, and
		// whether rows of a partial snapshot go first.
		var started, over, partial, seen, write, replace bool
		var cut time.Time
		err := tx.QueryRow(ctx, `
			WITH w AS (
				SELECT $1::timestamptz AS lo, $1::timestamptz + interval '1 minute' AS hi, `+clockSQL(5)+` AS now
			), old AS (
				SELECT count(*) AS n, count(*) FILTER (WHERE covered_until IS NULL) AS whole, max(covered_until) AS until
				FROM fleet_metrics, w WHERE taken_at = w.lo
			), c AS (
				SELECT w.*, w.lo <= w.now AS started, w.hi <= w.now AS over,
				       $2::bool AND w.now < w.hi AS partial,
				       CASE WHEN $2::bool THEN least(w.now, w.hi) ELSE w.hi END AS cut,
				       $3::bool AND w.now < w.hi + $4::bigint * interval '1 microsecond' AS seen,
				       COALESCE(w.hi > (SELECT updated_at FROM fleet_state WHERE key = 'tables:created'), true) AS existed
				FROM w
			)
			SELECT c.started, c.over, c.partial, c.cut, c.seen,
			       (c.over OR c.partial) AND c.existed AND (old.n = 0 OR (old.whole = 0 AND old.until < c.cut)),
			       old.n > 0
			FROM c, old`, minute, p.Partial, p.Watched, BacklogFresh.Microseconds(), at).Scan(
			&started, &over, &partial, &cut, &seen, &write, &replace)
		if err != nil {
			return err
		}
		if !over && !(p.Partial && started) {
			return errors.New("the minute is not over")
		}
		if !write {
			return nil
		}
		if replace {
			if _, err := tx.Exec(ctx, `DELETE FROM fleet_metrics WHERE taken_at = $1`, minute); err != nil {
				return fmt.Errorf("replace the partial snapshot: %w", err)
			}
		}
		var covered *time.Time
		if partial {
			covered = &cut
		}
		return tx.QueryRow(ctx, `
		WITH h AS (
			SELECT j.queue, j.name, j.status, j.runtime_ms,
			       -- ran: an attempt that counts (not snoozed, not a job
			       -- cancelled before it started); timed: one a worker timed to
			       -- its end (not lost, nor interrupted, which its worker cut
			       -- short)
			       j.status <> 'snoozed' AND (j.status <> 'cancelled' OR j.reserved_at IS NOT NULL) AS ran,
			       j.status NOT IN ('lost', 'snoozed', 'interrupted') AND (j.status <> 'cancelled' OR j.reserved_at IS NOT NULL) AS timed
			FROM fleet_jobs j WHERE j.finished_at >= $1::timestamptz AND j.finished_at < $2::timestamptz
		), per AS (
			SELECT 'queue' AS kind, queue AS subject, count(*) FILTER (WHERE ran) AS jobs,
			       count(*) FILTER (WHERE status IN ('failed', 'timed_out', 'lost')) AS failed,
			       percentile_cont(0.5) WITHIN GROUP (ORDER BY runtime_ms) FILTER (WHERE timed) AS p50,
			       percentile_cont(0.95) WITHIN GROUP (ORDER BY runtime_ms) FILTER (WHERE timed) AS p95,
			       percentile_cont(0.99) WITHIN GROUP (ORDER BY runtime_ms) FILTER (WHERE timed) AS p99,
			       avg(runtime_ms) FILTER (WHERE timed) AS mean
			FROM h GROUP BY queue
			UNION ALL
			SELECT 'job', name, count(*) FILTER (WHERE ran),
			       count(*) FILTER (WHERE status IN ('failed', 'timed_out', 'lost')),
			       percentile_cont(0.5) WITHIN GROUP (ORDER BY runtime_ms) FILTER (WHERE timed),
			       percentile_cont(0.95) WITHIN GROUP (ORDER BY runtime_ms) FILTER (WHERE timed),
			       percentile_cont(0.99) WITHIN GROUP (ORDER BY runtime_ms) FILTER (WHERE timed),
			       avg(runtime_ms) FILTER (WHERE timed)
			FROM h GROUP BY name
		), `+queueCountsCTE(clockSQL(5))+`, backlog AS (
			SELECT queue, pending, COALESCE(EXTRACT(EPOCH FROM `+clockSQL(5)+` - oldest)::float8, 0) AS wait FROM qcounts
			WHERE $3::bool
		), rows AS (
			SELECT p.kind, p.subject, p.jobs, p.failed, p.p50, p.p95, p.p99, p.mean,
			       COALESCE(b.wait, 0) AS wait, COALESCE(b.pending, 0) AS pending
			FROM per p LEFT JOIN backlog b ON p.kind = 'queue' AND b.queue = p.subject
			UNION ALL
			SELECT 'queue', b.queue, 0, 0, 0, 0, 0, 0, b.wait, b.pending
			FROM backlog b WHERE NOT EXISTS (SELECT 1 FROM per p WHERE p.kind = 'queue' AND p.subject = b.queue)
		), ins AS (
			INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, failed, jobs_per_minute, runtime_p50_ms,
			                           runtime_p95_ms, runtime_p99_ms, runtime_mean_ms, wait_secs, clear_secs, pending,
			                           covered_until, backlog_seen)
			SELECT $1::timestamptz, r.kind, r.subject, r.jobs, r.failed, r.jobs, COALESCE(r.p50, 0), COALESCE(r.p95, 0),
			       COALESCE(r.p99, 0), COALESCE(r.mean, 0), r.wait,
			       CASE WHEN NOT $3::bool THEN NULL WHEN r.pending = 0 THEN 0 WHEN r.jobs = 0 THEN NULL
			            ELSE r.pending::float8 / r.jobs * 60 END,
			       r.pending, $4::timestamptz, $3::bool
			FROM rows r
			ON CONFLICT (taken_at, kind, subject) DO NOTHING
			RETURNING 1
		)
		SELECT count(*) FROM ins`, minute, cut, seen, covered, at).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("write metrics snapshot of %s: %w", label, err)
	}
	return n, nil
}

// MetricsRow is a row of fleet_metrics.
type MetricsRow = model.MetricsRow

// MetricsList returns the snapshots taken since since, oldest first,
// merged into buckets of bucket (one minute or more): attempts and failures
// add up, jobs per minute is their rate over the bucket, the mean runtime is
// weighted by attempts, percentiles, wait and backlog take the bucket's
// worst minute (a minute whose backlog was not seen has 0 there), and
// BacklogSeen whether any minute of the bucket saw its backlog. A minute
// without a snapshot has no row.
func (s *Store) MetricsList(ctx context.Context, since time.Time, bucket time.Duration) ([]MetricsRow, error) {
	minutes := max(bucket/time.Minute, 1)
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($2 * interval '1 minute', taken_at, TIMESTAMPTZ '2000-01-01') AS t, kind, subject,
		       sum(jobs)::bigint, sum(failed)::bigint, sum(jobs)::float8 / $2,
		       max(runtime_p50_ms), max(runtime_p95_ms), max(runtime_p99_ms),
		       COALESCE(sum(runtime_mean_ms * jobs) / NULLIF(sum(jobs), 0), 0)::float8,
		       max(wait_secs), max(clear_secs), max(pending), bool_or(backlog_seen)
		FROM fleet_metrics WHERE taken_at >= $1
		GROUP BY t, kind, subject
		ORDER BY t, kind, subject`, since, int64(minutes))
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[MetricsRow])
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}
