package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// UniqueParams is the uniqueness of one job to insert (see
// JobInsertUnique).
type UniqueParams struct {
	// Base is the key without its period: the job's name and whatever else
	// the job is unique by, made by package queue.
	Base string
	// Period, when set, makes the key cover one period aligned to the Unix
	// epoch on the database clock: the period's start is part of the key.
	Period time.Duration
	// KeepCompleted keeps the key until the end of its period, also once
	// its job has completed (a job that failed for good frees it).
	KeepCompleted bool
}

// UniqueInsert is what JobInsertUnique did with one job: inserted it with
// ID, or found the job holding its key (Duplicate, with that job's ID).
type UniqueInsert struct {
	ID        int64
	Key       string
	Duplicate bool
}

// JobInsertUnique inserts unique jobs (those with a concurrency limit
// parked, for the masters' sweep to give a slot) (each JobInsertParams with its
// UniqueParams at the same index) in one statement on db, and reports for
// each whether it was inserted or is a duplicate of the job holding its
// key. The keys' primary key decides, so concurrent dispatchers of one key
// insert exactly one job whatever their timing; a dispatcher whose key is
// being taken by an uncommitted transaction waits for it. The keys of one
// call must differ (package queue makes later copies duplicates of the
// first).
func (s *Store) JobInsertUnique(ctx context.Context, db DBTX, jobs []JobInsertParams, uniq []UniqueParams) ([]UniqueInsert, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, jobInsertUniqueSQL, uniqueArgs(jobs, uniq)...)
	if err != nil {
		return nil, fmt.Errorf("insert %d unique jobs: %w", len(jobs), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UniqueInsert, error) {
		var u UniqueInsert
		var id *int64
		err := row.Scan(&u.Key, &id)
		if id != nil {
			u.ID = *id
		}
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("insert %d unique jobs: %w", len(jobs), err)
	}
	return out, resolveDuplicates(len(jobs), out, func(keys []string) (map[string]int64, error) {
		rows, err := db.Query(ctx, uniqueHoldersSQL, keys)
		if err != nil {
			return nil, err
		}
		holders := map[string]int64{}
		var key string
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&key, &id}, func() error { holders[key] = id; return nil })
		return holders, err
	})
}

// resolveDuplicates fills in the holder of each key that was not inserted.
func resolveDuplicates(n int, out []UniqueInsert, holders func([]string) (map[string]int64, error)) error {
	if len(out) != n {
		return fmt.Errorf("insert %d unique jobs: got %d answers", n, len(out))
	}
	var dups []string
	for i := range out {
		if out[i].ID == 0 {
			out[i].Duplicate = true
			dups = append(dups, out[i].Key)
		}
	}
	if len(dups) == 0 {
		return nil
	}
	// The key's holder, read after the insert: the job that made this one
	// a duplicate, committed or in this transaction.
	h, err := holders(dups)
	if err != nil {
		return fmt.Errorf("find the jobs holding %d unique keys: %w", len(dups), err)
	}
	for i := range out {
		if out[i].Duplicate {
			out[i].ID = h[out[i].Key]
		}
	}
	return nil
}

// jobInsertUniqueSQL inserts the jobs whose key no job in queue_jobs
// holds (the unique index decides: ON CONFLICT DO NOTHING waits for a
// concurrent inserter of the key, then skips). A job whose completion
// counts for its period (kept_until set) first takes its key's row in
// queue_unique_keys, or takes the row over in place when its keep is over
// or its job failed for good; a row held otherwise is left alone (locked,
// not changed), and the job is a duplicate. The takeover's condition reads
// only the key row and queue_failed_jobs, never whether a job is still
// queued, so two dispatchers cannot both take one row over. A duplicate's
// id comes back NULL. The period's start comes from the database clock.
const jobInsertUniqueSQL = `
	WITH want AS MATERIALIZED (
		SELECT u.*,
		       u.base || CASE WHEN u.period > 0
		                 THEN '|p=' || (floor(extract(epoch FROM now()) * 1000 / u.period)::bigint * u.period)::text
		                 ELSE '' END AS key,
		       CASE WHEN u.keep AND u.period > 0
		            THEN to_timestamp(((floor(extract(epoch FROM now()) * 1000 / u.period)::bigint + 1) * u.period) / 1000.0)
		       END AS kept_until
		FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[],
		            $9::smallint[], $10::text[], $11::text[],
		            $12::text[], $13::bigint[], $14::boolean[], $15::text[], $16::integer[])
		     WITH ORDINALITY AS u(q, n, p, t, b, tm, d, r, pr, tg, md, base, period, keep, lk, ln, ord)
	), limits AS (
		-- A unique job under a concurrency limit is inserted parked; the
		-- masters' sweep gives it a slot (see LimitSweep). Its key's row
		-- says the key's limit, as any limited dispatch does.
		INSERT INTO queue_limits AS l (key, limit_n, active)
		SELECT lk, (array_agg(ln ORDER BY ord DESC))[1], 0 FROM want WHERE lk <> '' GROUP BY lk ORDER BY lk
		ON CONFLICT (key) DO UPDATE SET limit_n = EXCLUDED.limit_n
	), kept AS (
		INSERT INTO queue_unique_keys AS k (key, job_id, kept_until)
		SELECT key, nextval(pg_get_serial_sequence('queue_jobs', 'id')), kept_until
		FROM want WHERE kept_until IS NOT NULL ORDER BY ord
		ON CONFLICT (key) DO UPDATE SET job_id = EXCLUDED.job_id, kept_until = EXCLUDED.kept_until
		WHERE k.kept_until <= now() OR EXISTS (SELECT 1 FROM queue_failed_jobs f WHERE f.job_id = k.job_id)
		RETURNING key, job_id
	), inserted AS (
		INSERT INTO queue_jobs (id, queue, name, payload, max_tries, backoff_secs, timeout_ms, available_at, retry_of, unique_key,
		                        limit_key, limit_n, limit_due, priority, tags, metadata)
		OVERRIDING SYSTEM VALUE
		SELECT COALESCE(kp.job_id, nextval(pg_get_serial_sequence('queue_jobs', 'id'))), w.q, w.n, w.p::jsonb,
		       NULLIF(w.t, 0), w.b::integer[], NULLIF(w.tm, 0),
		       CASE WHEN w.lk <> '' THEN 'infinity' ELSE now() + w.d * interval '1 millisecond' END, NULLIF(w.r, 0), w.key,
		       NULLIF(w.lk, ''), CASE WHEN w.lk <> '' THEN w.ln END,
		       CASE WHEN w.lk <> '' THEN now() + w.d * interval '1 millisecond' END, w.pr, w.tg::text[], w.md::jsonb
		FROM want w LEFT JOIN kept kp ON kp.key = w.key
		WHERE w.kept_until IS NULL OR kp.key IS NOT NULL
		ORDER BY w.ord
		ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
		RETURNING id, unique_key
	)
	SELECT w.key, i.id FROM want w LEFT JOIN inserted i ON i.unique_key = w.key ORDER BY w.ord`

// uniqueHoldersSQL finds the job holding each key: the one in queue_jobs,
// else the completed one whose key is kept.
const uniqueHoldersSQL = `
	SELECT unique_key, id FROM queue_jobs WHERE unique_key = ANY($1::text[])
	UNION ALL
	SELECT key, job_id FROM queue_unique_keys k
	WHERE key = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM queue_jobs j WHERE j.unique_key = k.key)`

func uniqueArgs(jobs []JobInsertParams, uniq []UniqueParams) []any {
	args := append(jobInsertArgs(jobs), jobExtraArgs(jobs)...)
	n := len(jobs)
	bases, periods, keeps := make([]string, n), make([]int64, n), make([]bool, n)
	for i, u := range uniq {
		bases[i], periods[i], keeps[i] = u.Base, u.Period.Milliseconds(), u.KeepCompleted
	}
	keys, limits := make([]string, n), make([]int32, n)
	for i, j := range jobs {
		keys[i], limits[i] = j.LimitKey, int32(j.Limit)
	}
	return append(args, bases, periods, keeps, keys, limits)
}

// UniqueKeyTrim deletes the kept keys whose period is over (the next
// dispatch would take them over anyway; this keeps the table small). Masters
// run it with the partition upkeep, every ten minutes.
func (s *Store) UniqueKeyTrim(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queue_unique_keys WHERE kept_until <= now()`)
	if err != nil {
		return 0, fmt.Errorf("trim unique keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
