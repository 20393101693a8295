package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobInsertParams is one job to insert.
type JobInsertParams struct {
	Queue       string
	Name        string
	Payload     []byte        // valid JSON
	MaxTries    int           // 0: the worker's default
	BackoffSecs []int         // nil: the worker's default
	Timeout     time.Duration // 0: the worker's default
	Delay       time.Duration
	RetryOf     int64 // 0: none
}

// JobInsertMany inserts jobs in one statement and returns their ids in
// order. Run it on a transaction to make the jobs exist only if it commits.
func (s *Store) JobInsertMany(ctx context.Context, db DBTX, jobs []JobInsertParams) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	n := len(jobs)
	queues, names, payloads, backoffs := make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	tries, timeouts, delays, retryOf := make([]int32, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, j := range jobs {
		queues[i], names[i], payloads[i] = j.Queue, j.Name, string(j.Payload)
		tries[i] = int32(j.MaxTries)
		if j.BackoffSecs != nil {
			lit := intArrayLiteral(j.BackoffSecs)
			backoffs[i] = &lit
		}
		timeouts[i] = j.Timeout.Milliseconds()
		delays[i] = j.Delay.Milliseconds()
		retryOf[i] = j.RetryOf
	}
	rows, err := db.Query(ctx, `
		INSERT INTO queue_jobs (queue, name, payload, max_tries, backoff_secs, timeout_ms, available_at, retry_of)
		SELECT u.q, u.n, u.p::jsonb, NULLIF(u.t, 0), u.b::integer[], NULLIF(u.tm, 0),
		       now() + u.d * interval '1 millisecond', NULLIF(u.r, 0)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[])
		     WITH ORDINALITY AS u(q, n, p, t, b, tm, d, r, ord)
		ORDER BY u.ord
		RETURNING id`,
		queues, names, payloads, tries, backoffs, timeouts, delays, retryOf)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	return ids, nil
}

func intArrayLiteral(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ClaimedJob is a job a worker now holds: the lease is (ID, Attempt) held by
// the worker that claimed it.
type ClaimedJob struct {
	ID          int64
	Queue       string
	Name        string
	Payload     []byte
	Attempt     int
	MaxTries    int           // 0: not set by the job
	BackoffSecs []int         // nil: not set by the job
	Timeout     time.Duration // 0: not set by the job
	CreatedAt   time.Time
	ReservedAt  time.Time
}

// JobClaimParams says who claims how many jobs of which queue.
type JobClaimParams struct {
	Queue  string
	Limit  int
	Worker string // the lease holder
	Master string // the holder's master; empty for a worker without one
}

// JobClaim reserves up to Limit ready jobs of one queue, oldest first,
// skipping rows other workers are claiming, and counts the attempt.
func (s *Store) JobClaim(ctx context.Context, p JobClaimParams) ([]ClaimedJob, error) {
	rows, err := s.pool.Query(ctx, `
		WITH picked AS (
			SELECT id FROM queue_jobs
			WHERE queue = $1 AND reserved_by IS NULL AND available_at <= now()
			ORDER BY available_at, id
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		)
		UPDATE queue_jobs j
		SET reserved_by = $3, reserved_master = NULLIF($4, ''),
		    reserved_at = clock_timestamp(), attempts = j.attempts + 1
		FROM picked
		WHERE j.id = picked.id
		RETURNING j.id, j.queue, j.name, j.payload, j.attempts, j.max_tries,
		          j.backoff_secs, j.timeout_ms, j.created_at, j.reserved_at`,
		p.Queue, p.Limit, p.Worker, p.Master)
	if err != nil {
		return nil, fmt.Errorf("claim jobs on %q: %w", p.Queue, err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ClaimedJob, error) {
		var j ClaimedJob
		var backoff []int32
		var maxTries *int32
		var timeoutMs *int64
		err := row.Scan(&j.ID, &j.Queue, &j.Name, &j.Payload, &j.Attempt, &maxTries,
			&backoff, &timeoutMs, &j.CreatedAt, &j.ReservedAt)
		if backoff != nil {
			j.BackoffSecs = make([]int, len(backoff))
			for i, b := range backoff {
				j.BackoffSecs[i] = int(b)
			}
		}
		if maxTries != nil {
			j.MaxTries = int(*maxTries)
		}
		if timeoutMs != nil {
			j.Timeout = time.Duration(*timeoutMs) * time.Millisecond
		}
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs on %q: %w", p.Queue, err)
	}
	return jobs, nil
}

// Lease identifies one attempt of one job.
type Lease struct {
	ID      int64
	Attempt int
}

// JobRetry is a failed attempt that will be tried again after Delay.
type JobRetry struct {
	Lease
	Delay time.Duration
	Error string
}

// JobFail is a failed last attempt: the job moves to queue_failed_jobs.
type JobFail struct {
	Lease
	Error string
	// MaxTries is the number of tries that applied to the job.
	MaxTries int
}

// JobFinishParams is a batch of finished attempts of one worker.
type JobFinishParams struct {
	Worker    string
	Completed []Lease
	Retried   []JobRetry
	Failed    []JobFail
	// History is recorded in fleet_jobs in the same round trip.
	History []JobHistoryRow
}

// JobFinishResult says which attempts were written. An attempt whose lease
// the worker no longer held (its job was released and maybe claimed again)
// changes nothing and is listed in Lost.
type JobFinishResult struct {
	Written int
	Lost    []Lease
}

// JobFinishMany writes a batch of finished attempts in one round trip:
// completed jobs are deleted, retried ones become available after their
// delay, failed ones move to queue_failed_jobs. Only attempts whose lease the
// worker still holds count.
func (s *Store) JobFinishMany(ctx context.Context, p JobFinishParams) (JobFinishResult, error) {
	var res JobFinishResult
	batch := &pgx.Batch{}
	type pending struct {
		leases []Lease
		seen   map[int64]bool
	}
	var steps []*pending
	add := func(leases []Lease, sql string, args ...any) {
		if len(leases) == 0 {
			return
		}
		st := &pending{leases: leases, seen: map[int64]bool{}}
		steps = append(steps, st)
		batch.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			for _, id := range ids {
				st.seen[id] = true
			}
			return err
		})
	}

	if len(p.Completed) > 0 {
		ids, attempts := leaseArrays(p.Completed)
		add(p.Completed, `
			DELETE FROM queue_jobs j
			USING unnest($1::bigint[], $2::integer[]) AS d(id, attempt)
			WHERE j.id = d.id AND j.attempts = d.attempt AND j.reserved_by = $3
			RETURNING j.id`, ids, attempts, p.Worker)
	}
	if len(p.Retried) > 0 {
		leases := make([]Lease, len(p.Retried))
		delays, errs := make([]int64, len(p.Retried)), make([]string, len(p.Retried))
		for i, r := range p.Retried {
			leases[i], delays[i], errs[i] = r.Lease, r.Delay.Milliseconds(), r.Error
		}
		ids, attempts := leaseArrays(leases)
		add(leases, `
			UPDATE queue_jobs j
			SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL,
			    available_at = now() + d.delay_ms * interval '1 millisecond', last_error = d.err
			FROM unnest($1::bigint[], $2::integer[], $3::bigint[], $4::text[]) AS d(id, attempt, delay_ms, err)
			WHERE j.id = d.id AND j.attempts = d.attempt AND j.reserved_by = $5
			RETURNING j.id`, ids, attempts, delays, errs, p.Worker)
	}
	if len(p.Failed) > 0 {
		leases := make([]Lease, len(p.Failed))
		errs := make([]string, len(p.Failed))
		tries := make([]int32, len(p.Failed))
		for i, f := range p.Failed {
			leases[i], errs[i], tries[i] = f.Lease, f.Error, int32(f.MaxTries)
		}
		ids, attempts := leaseArrays(leases)
		add(leases, `
			WITH moved AS (
				DELETE FROM queue_jobs j
				USING unnest($1::bigint[], $2::integer[], $3::text[], $5::integer[]) AS d(id, attempt, err, tries)
				WHERE j.id = d.id AND j.attempts = d.attempt AND j.reserved_by = $4
				RETURNING j.id, j.queue, j.name, j.payload, j.attempts, COALESCE(j.max_tries, d.tries),
				          j.backoff_secs, j.timeout_ms, d.err, j.created_at, j.retry_of
			)
			INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries,
			                               backoff_secs, timeout_ms, error, created_at, retry_of)
			SELECT * FROM moved
			RETURNING job_id`, ids, attempts, errs, p.Worker, tries)
	}
	QueueHistoryInsert(batch, p.History)
	if batch.Len() == 0 {
		return res, nil
	}
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return res, fmt.Errorf("write %d finished jobs: %w", len(p.Completed)+len(p.Retried)+len(p.Failed), err)
	}
	for _, st := range steps {
		for _, l := range st.leases {
			if st.seen[l.ID] {
				res.Written++
			} else {
				res.Lost = append(res.Lost, l)
			}
		}
	}
	return res, nil
}

func leaseArrays(leases []Lease) ([]int64, []int32) {
	ids, attempts := make([]int64, len(leases)), make([]int32, len(leases))
	for i, l := range leases {
		ids[i], attempts[i] = l.ID, int32(l.Attempt)
	}
	return ids, attempts
}

// JobReleaseParams gives jobs back to the queue.
type JobReleaseParams struct {
	Worker string
	Leases []Lease
	// Uncount takes the attempt back: the job never started, or was stopped
	// through no fault of its own.
	Uncount bool
	Error   string
}

// JobRelease makes held jobs available again at once. Jobs the worker no
// longer holds are left alone. It returns how many it released.
func (s *Store) JobRelease(ctx context.Context, p JobReleaseParams) (int, error) {
	if len(p.Leases) == 0 {
		return 0, nil
	}
	ids, attempts := leaseArrays(p.Leases)
	tag, err := s.pool.Exec(ctx, `
		UPDATE queue_jobs j
		SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, available_at = now(),
		    attempts = CASE WHEN $4 THEN j.attempts - 1 ELSE j.attempts END,
		    last_error = COALESCE(NULLIF($5, ''), j.last_error)
		FROM unnest($1::bigint[], $2::integer[]) AS d(id, attempt)
		WHERE j.id = d.id AND j.attempts = d.attempt AND j.reserved_by = $3`,
		ids, attempts, p.Worker, p.Uncount, p.Error)
	if err != nil {
		return 0, fmt.Errorf("release %d jobs: %w", len(p.Leases), err)
	}
	return int(tag.RowsAffected()), nil
}

// JobReadyExists reports whether any of queues has a job ready to run now.
func (s *Store) JobReadyExists(ctx context.Context, queues []string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `
		SELECT EXISTS (
			SELECT 1 FROM unnest($1::text[]) AS q(name), LATERAL (
				SELECT 1 FROM queue_jobs
				WHERE queue = q.name AND reserved_by IS NULL AND available_at <= now()
				LIMIT 1
			) x
		)`, queues).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for ready jobs: %w", err)
	}
	return ok, nil
}

// JobNextAvailable returns how long until the earliest unreserved job of
// queues becomes available (0 when one is ready), and false when there is
// none at all.
func (s *Store) JobNextAvailable(ctx context.Context, queues []string) (time.Duration, bool, error) {
	var ms *float64
	err := s.pool.QueryRow(ctx, `
		SELECT GREATEST(0, EXTRACT(EPOCH FROM (min(x.available_at) - now())) * 1000)
		FROM unnest($1::text[]) AS q(name), LATERAL (
			SELECT available_at FROM queue_jobs
			WHERE queue = q.name AND reserved_by IS NULL
			ORDER BY available_at LIMIT 1
		) x`, queues).Scan(&ms)
	if err != nil {
		return 0, false, fmt.Errorf("find next available job: %w", err)
	}
	if ms == nil {
		return 0, false, nil
	}
	return time.Duration(*ms * float64(time.Millisecond)), true, nil
}
