package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/model"
)

// ErrJobNotFound is returned by JobStoryGet for a job id that no table
// knows: not queued, not failed, no recorded attempt.
var ErrJobNotFound = model.ErrJobNotFound

// StoryQueued is a job's row of queue_jobs, with the name of the master
// whose member row its reserved_master (an instance id) names, when that
// row still exists.
type StoryQueued struct {
	ID             int64           `json:"id"`
	Queue          string          `json:"queue"`
	Name           string          `json:"name"`
	Payload        json.RawMessage `json:"payload"`
	State          string          `json:"state"` // pending, delayed, limited or reserved
	Attempts       int             `json:"attempts"`
	MaxTries       *int            `json:"max_tries"`
	AvailableAt    time.Time       `json:"available_at"`
	CreatedAt      time.Time       `json:"created_at"`
	ReservedAt     *time.Time      `json:"reserved_at"`
	ReservedBy     *string         `json:"reserved_by"`
	ReservedMaster *string         `json:"reserved_master"`
	MasterName     *string         `json:"master_name"`
	MasterKind     *string         `json:"master_kind"`
	LastError      *string         `json:"last_error"`
	RetryOf        *int64          `json:"retry_of"`
	UniqueKey      *string         `json:"unique_key"`
	// LimitKey and Limit are the job's concurrency limit (nil: none).
	LimitKey *string `json:"limit_key"`
	Limit    *int    `json:"limit_n"`
	// LimitActive is how many jobs of the key are ready or running now
	// (queue_limits.active), when the key has a row.
	LimitActive *int `json:"limit_active"`
	// CancelRequestedAt and CancelledBy are an operator's cancel of the
	// running job, which its worker has not ended yet (nil: none).
	CancelRequestedAt *time.Time      `json:"cancel_requested_at"`
	CancelledBy       *string         `json:"cancelled_by"`
	Priority          int             `json:"priority"`
	Tags              []string        `json:"tags"`
	Metadata          json.RawMessage `json:"metadata"`
}

// StoryAttempt is one row of fleet_jobs, with the name of the member its
// master column (an instance id) names, when that row still exists.
type StoryAttempt struct {
	Attempt    int        `json:"attempt"`
	Status     string     `json:"status"`
	Queue      string     `json:"queue"`
	Name       string     `json:"name"`
	ReservedAt *time.Time `json:"reserved_at"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt time.Time  `json:"finished_at"`
	RuntimeMs  float64    `json:"runtime_ms"`
	Error      *string    `json:"error"`
	Worker     *string    `json:"worker"`
	Master     *string    `json:"master"`
	MasterName *string    `json:"master_name"`
	MasterKind *string    `json:"master_kind"`
	Tags       []string   `json:"tags"`
}

// StoryLink is a job of the same retry chain: the chain's first job and
// every retry of it (queue_jobs.retry_of and queue_failed_jobs.retry_of
// name the first job), as far as queue_jobs and queue_failed_jobs still
// hold them.
type StoryLink struct {
	JobID    int64  `json:"job_id"`
	FailedID *int64 `json:"failed_id"`
	State    string `json:"state"` // pending, delayed, limited, reserved or failed
	RetryOf  *int64 `json:"retry_of"`
}

// JobStory is everything the tables know about one job.
type JobStory struct {
	// JobID is the job asked about (resolved from the failed job's id with
	// JobStoryParams.FailedID).
	JobID int64
	// At is the database's now().
	At time.Time
	// Root is the first job of the job's retry chain (the job itself when
	// it retries nothing, or when that is unknown).
	Root     int64
	Queued   *StoryQueued
	Failed   *FailedJob
	Attempts []StoryAttempt
	// Chain lists the jobs of the chain still queued or failed, by id,
	// the job itself included when it is one of them.
	Chain []StoryLink
}

// JobStoryParams name the job: by JobID, or by FailedID, the id of its
// row in queue_failed_jobs.
type JobStoryParams struct {
	JobID    int64
	FailedID int64
}

// jobStorySQL reads a job's story in one statement. target is the CTE
// naming the job's id; every part finds its rows through an index
// (queue_jobs and queue_failed_jobs by id or job_id, fleet_jobs by job_id
// in every partition, fleet_masters by instance) except the retry chain:
// no index covers retry_of, so the chain reads queue_jobs and
// queue_failed_jobs whole (an operator's question, not a hot path).
const jobStorySQL = `
	, q AS (
		SELECT j.id, j.queue, j.name, j.payload,
		       CASE WHEN j.reserved_by IS NOT NULL THEN 'reserved' WHEN j.available_at = 'infinity' THEN 'limited'
		            WHEN j.available_at > now() THEN 'delayed' ELSE 'pending' END AS state,
		       j.attempts, j.max_tries,
		       CASE WHEN j.available_at = 'infinity' THEN COALESCE(j.limit_due, now()) ELSE j.available_at END
		           AS available_at,
		       j.created_at, j.reserved_at, j.reserved_by,
		       j.reserved_master, m.name AS master_name, m.kind AS master_kind, j.last_error, j.retry_of,
		       j.limit_key, j.limit_n, l.active AS limit_active,
		       j.unique_key, j.cancel_requested_at, j.cancelled_by, j.priority, j.tags, j.metadata
		FROM queue_jobs j LEFT JOIN fleet_masters m ON m.instance = j.reserved_master
		LEFT JOIN queue_limits l ON l.key = j.limit_key
		WHERE j.id = (SELECT id FROM target)
	), f AS (
		SELECT ` + failedColumns + ` FROM queue_failed_jobs
		WHERE job_id = (SELECT id FROM target) ORDER BY id DESC LIMIT 1
	), h AS (
		SELECT a.attempt, a.status, a.queue, a.name, a.reserved_at, a.started_at, a.finished_at, a.runtime_ms,
		       a.error, a.worker, a.master, m.name AS master_name, m.kind AS master_kind, a.tags
		FROM fleet_jobs a LEFT JOIN fleet_masters m ON m.instance = a.master
		WHERE a.job_id = (SELECT id FROM target)
	), root AS (
		SELECT COALESCE((SELECT retry_of FROM q), (SELECT retry_of FROM f), (SELECT id FROM target)) AS id
	), chain AS (
		SELECT j.id AS job_id, NULL::bigint AS failed_id,
		       CASE WHEN j.reserved_by IS NOT NULL THEN 'reserved' WHEN j.available_at = 'infinity' THEN 'limited'
		            WHEN j.available_at > now() THEN 'delayed' ELSE 'pending' END AS state, j.retry_of
		FROM queue_jobs j WHERE j.retry_of = (SELECT id FROM root) OR j.id = (SELECT id FROM root)
		UNION ALL
		SELECT x.job_id, x.id, 'failed', x.retry_of
		FROM queue_failed_jobs x WHERE x.retry_of = (SELECT id FROM root) OR x.job_id = (SELECT id FROM root)
	)
	SELECT (SELECT id FROM target), now(), (SELECT id FROM root),
	       (SELECT row_to_json(q) FROM q), (SELECT row_to_json(f) FROM f),
	       (SELECT COALESCE(json_agg(h ORDER BY h.attempt, h.finished_at), '[]') FROM h),
	       (SELECT COALESCE(json_agg(chain ORDER BY chain.job_id, chain.failed_id), '[]') FROM chain)`

// JobStoryGet reads what queue_jobs, queue_failed_jobs and the job history
// hold about one job, in one statement. A job none of them knows is
// ErrJobNotFound; a failed-job id that does not exist is
// ErrFailedJobNotFound.
func (s *Store) JobStoryGet(ctx context.Context, p JobStoryParams) (JobStory, error) {
	target, arg, what := `WITH target AS (SELECT $1::bigint AS id)`, p.JobID, fmt.Sprintf("job %d", p.JobID)
	if p.FailedID != 0 {
		target, arg, what = `WITH target AS (SELECT job_id AS id FROM queue_failed_jobs WHERE id = $1)`,
			p.FailedID, fmt.Sprintf("failed job %d", p.FailedID)
	}
	var (
		st                        JobStory
		id, root                  *int64
		queued, failed, hist, chn []byte
	)
	err := s.pool.QueryRow(ctx, target+jobStorySQL, arg).Scan(&id, &st.At, &root, &queued, &failed, &hist, &chn)
	if err != nil {
		return st, fmt.Errorf("read the story of %s: %w", what, err)
	}
	if id == nil {
		return st, fmt.Errorf("read the story of %s: %w", what, ErrFailedJobNotFound)
	}
	st.JobID = *id
	if root != nil {
		st.Root = *root
	}
	if queued != nil {
		st.Queued = new(StoryQueued)
		if err := json.Unmarshal(queued, st.Queued); err != nil {
			return st, fmt.Errorf("read the story of %s: queued row: %w", what, err)
		}
	}
	if failed != nil {
		st.Failed = new(FailedJob)
		if err := json.Unmarshal(failed, st.Failed); err != nil {
			return st, fmt.Errorf("read the story of %s: failed row: %w", what, err)
		}
	}
	if err := json.Unmarshal(hist, &st.Attempts); err != nil {
		return st, fmt.Errorf("read the story of %s: attempts: %w", what, err)
	}
	if err := json.Unmarshal(chn, &st.Chain); err != nil {
		return st, fmt.Errorf("read the story of %s: retry chain: %w", what, err)
	}
	if st.Queued == nil && st.Failed == nil && len(st.Attempts) == 0 {
		return st, fmt.Errorf("read the story of %s: %w", what, ErrJobNotFound)
	}
	return st, nil
}
