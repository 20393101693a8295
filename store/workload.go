package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/model"
)

// QueueLoad is what one queue holds and how fast it moves.
type QueueLoad struct {
	Queue    string
	Pending  int64
	Delayed  int64
	Reserved int64
	// Limited counts the jobs waiting on a concurrency limit: parked
	// until a slot of their key is free (they are neither pending nor
	// delayed).
	Limited int64
	// OldestWaitSecs is the age of the oldest ready job (since it became
	// available) by the store's clock, 0 with none.
	OldestWaitSecs float64
	// AvgRuntimeMs is the average runtime over the last 5 complete minutes
	// of the attempts a worker timed (lost ones left out), from the
	// per-minute snapshots as the balancer reads it (see QueueRuntimes), 0
	// when nothing ran.
	AvgRuntimeMs float64
	// JobsLastMinute counts the attempts finished in the last complete
	// minute, from its snapshot: the minute before the current one (by the
	// store's clock) once its snapshot is written, until then the one
	// before it (see recentCTE).
	JobsLastMinute int64
	// Processes counts live worker processes working the queue, over every
	// master (a process of a group working several queues counts for each).
	Processes int64
}

// Workload returns every queue that has jobs, history in the snapshots of
// the last 5 complete minutes or processes, in one statement. It reads no
// job history: counts come from queue_counts and two index lookups per
// queue (see queueCountsCTE), runtimes and throughput from the minute
// snapshots (see recentCTE), processes from the masters' rows. Counts,
// waits and runtimes are on the store's clock; which masters are live is
// the database clock's.
func (s *Store) Workload(ctx context.Context) ([]QueueLoad, error) {
	var out []QueueLoad
	// It expands every master's report: JIT off (see queryNoJIT).
	sql, args := s.onClock(workloadSQL)
	err := s.queryNoJIT(ctx, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[QueueLoad])
		return err
	}, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read workload: %w", err)
	}
	return out, nil
}

// workloadSQL is Workload's statement, on the database's clock (NOW) or a
// store clock's ($1); see onClock.
var workloadSQL = onClockTexts(func(now string) string {
	return `
		WITH ` + queueCountsCTE(now) + `, counts AS (
			SELECT * FROM qcounts
		), ` + recentCTE(now) + `, hist AS (
			SELECT queue, avg_ms, last_minute FROM recent
		), procs AS (
			SELECT q.queue, sum(p.value::int) AS n
			FROM fleet_masters m,
			     jsonb_array_elements(m.report->'supervisors') s,
			     jsonb_each_text(s->'processes') p,
			     unnest(string_to_array(p.key, ',')) AS q(queue)
			WHERE m.kind = 'master' AND m.expires_at > now()
			GROUP BY q.queue
		), names AS (
			SELECT queue FROM counts UNION SELECT queue FROM hist UNION SELECT queue FROM procs
		)
		SELECT n.queue,
		       COALESCE(c.pending, 0), COALESCE(c.delayed, 0), COALESCE(c.reserved, 0), COALESCE(c.limited, 0),
		       COALESCE(EXTRACT(EPOCH FROM ` + now + ` - c.oldest)::float8, 0),
		       COALESCE(h.avg_ms, 0)::float8, COALESCE(h.last_minute, 0), COALESCE(p.n, 0)::bigint
		FROM names n
		LEFT JOIN counts c ON c.queue = n.queue
		LEFT JOIN hist h ON h.queue = n.queue
		LEFT JOIN procs p ON p.queue = n.queue
		ORDER BY n.queue`
})

// QueuedJob is a job still in queue_jobs.
type QueuedJob = model.QueuedJob

// JobListParams pages through jobs of one queue (empty: every queue).
type JobListParams struct {
	Queue string
	Tag   string // only jobs carrying this tag; empty: any
	// State keeps only jobs in this state (QueuedStates); empty: any.
	State  string
	Limit  int
	Offset int
}

// QueuedStates are the states of a queued job, as JobList reports them:
// reserved is running.
var QueuedStates = []string{"pending", "delayed", "limited", "reserved"}

// stateConds are the conditions that select a queued state, matching the
// CASE of queuedColumns.
var stateConds = map[string]string{
	"pending":  `reserved_by IS NULL AND available_at <= now()`,
	"delayed":  `reserved_by IS NULL AND available_at > now() AND available_at <> 'infinity'`,
	"limited":  `reserved_by IS NULL AND available_at = 'infinity'`,
	"reserved": `reserved_by IS NOT NULL`,
}

// queuedColumns are the columns of a QueuedJob.
const queuedColumns = `id, queue, name, payload,
		       CASE WHEN reserved_by IS NOT NULL THEN 'reserved' WHEN available_at = 'infinity' THEN 'limited'
		            WHEN available_at > now() THEN 'delayed' ELSE 'pending' END,
		       attempts, CASE WHEN available_at = 'infinity' THEN COALESCE(limit_due, now()) ELSE available_at END,
		       created_at, reserved_by, last_error, priority, tags`

// JobList returns queued jobs. Jobs of one queue come in the order they
// run: the reserved (running) ones first by id, then the others as a
// claim takes them, lowest priority first, then by when they are (or
// become) available, so delayed and limited jobs of a priority follow its
// ready ones. The unreserved part reads queue_jobs_ready_idx in that
// order, about a page of rows; the reserved part reads the jobs held
// fleet-wide (queue_jobs_reserved_by_idx), a few per worker. Every queue
// is listed by id, along the primary key. A tag filter is a filter on
// that walk: no index covers queue_jobs.tags (it would cost every dispatch
// and claim), so a page of a rare tag reads past the untagged jobs to
// fill itself. Each combination runs a statement of its own (see filter).
func (s *Store) JobList(ctx context.Context, p JobListParams) ([]QueuedJob, error) {
	var f filter
	var sql string
	if p.Tag != "" {
		f.add(`tags @> ARRAY[$?]::text[]`, p.Tag)
	}
	if p.State != "" {
		cond, ok := stateConds[p.State]
		if !ok {
			return nil, fmt.Errorf("list jobs: unknown state %q", p.State)
		}
		f.conds = append(f.conds, cond)
	}
	if p.Queue == "" {
		sql = `SELECT ` + queuedColumns + ` FROM queue_jobs` + f.where() + ` ORDER BY id` + f.page(p.Limit, p.Offset)
	} else {
		f.add(`queue = $?`, p.Queue)
		w := f.where()
		// The page's ids are picked from the indexes alone, each part
		// stopping at the end of the page (a generic plan, not knowing the
		// page, would rather sort the whole queue than fetch rows along
		// the index), then read through the primary key.
		upTo := f.param(p.Limit + p.Offset)
		sql = `
		SELECT ` + queuedColumns + ` FROM queue_jobs WHERE id = ANY (ARRAY(
			(SELECT id FROM queue_jobs` + w + ` AND reserved_by IS NOT NULL ORDER BY id LIMIT ` + upTo + `)
			UNION ALL
			(SELECT id FROM queue_jobs` + w + ` AND reserved_by IS NULL ORDER BY priority, available_at, id LIMIT ` + upTo + `)` +
			f.page(p.Limit, p.Offset) + `))
		ORDER BY reserved_by IS NULL, CASE WHEN reserved_by IS NULL THEN priority END,
		         CASE WHEN reserved_by IS NULL THEN available_at END, id`
	}
	rows, err := s.pool.Query(ctx, sql, f.args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueuedJob, error) {
		var j QueuedJob
		var prio int16
		err := row.Scan(&j.ID, &j.Queue, &j.Name, &j.Payload, &j.State, &j.Attempts, &j.AvailableAt,
			&j.CreatedAt, &j.ReservedBy, &j.LastError, &prio, &j.Tags)
		j.Priority = int(prio)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// FinishedJob is a row of the job history (fleet_jobs).
type FinishedJob = model.FinishedJob

// JobHistoryList returns finished attempts with the given status (empty:
// any), newest first. Each combination of status and queue is a statement
// of its own (see filter), and each reads about a page of rows whatever the
// plan, generic or custom: a status reads the table of its class alone,
// fleet_jobs_completed or fleet_jobs_failed (partitions of fleet_jobs, or
// on TimescaleDB the hypertables behind that view: naming the table, not
// the status, is what keeps the other out of a plan ordered by queue), a
// status other than completed is then filtered within the table it shares
// with the other unsuccessful ones, and a queue walks the (queue,
// finished_at) index backwards. The queue is matched as the
// range [queue, queue] and the rows ordered by (queue, finished_at), the
// same rows in the same order as queue = $n ordered by finished_at, so that
// this index is the only one giving the order and the range's small
// estimate makes it the plan: with "queue = $n" a generic plan, which
// guesses every queue holds 1/(number of queues) of the rows, walks the
// finished_at index instead and filters, reading a whole partition for a
// queue that holds few of its rows.
func (s *Store) JobHistoryList(ctx context.Context, status string, p JobListParams) ([]FinishedJob, error) {
	var f filter
	table := `fleet_jobs`
	switch status {
	case "":
	case "completed":
		table = `fleet_jobs_completed`
	default:
		table = `fleet_jobs_failed`
		f.add(`status = $?`, status)
	}
	order := `finished_at DESC`
	if p.Queue != "" {
		f.add(`queue >= $? AND queue <= $?`, p.Queue)
		order = `queue DESC, finished_at DESC`
	}
	sql := `
		SELECT job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms, error, master, worker
		FROM ` + table + f.where() + `
		ORDER BY ` + order + f.page(p.Limit, p.Offset)
	rows, err := s.pool.Query(ctx, sql, f.args...)
	if err != nil {
		return nil, fmt.Errorf("list job history: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FinishedJob])
	if err != nil {
		return nil, fmt.Errorf("list job history: %w", err)
	}
	return jobs, nil
}

// JobHistoryGet returns every recorded attempt of one job, newest first.
func (s *Store) JobHistoryGet(ctx context.Context, jobID int64) ([]FinishedJob, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms, error, master, worker
		FROM fleet_jobs WHERE job_id = $1 ORDER BY finished_at DESC`, jobID)
	if err != nil {
		return nil, fmt.Errorf("read history of job %d: %w", jobID, err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FinishedJob])
	if err != nil {
		return nil, fmt.Errorf("read history of job %d: %w", jobID, err)
	}
	return jobs, nil
}
