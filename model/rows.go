package model

import (
	"encoding/json"
	"time"
)

// FailedJob is a row of queue_failed_jobs: a job whose tries are spent.
type FailedJob struct {
	ID       int64           `json:"id"`
	JobID    int64           `json:"job_id"`
	Queue    string          `json:"queue"`
	Name     string          `json:"name"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	MaxTries int             `json:"max_tries"`
	Error    string          `json:"error"`
	Created  time.Time       `json:"created_at"`
	FailedAt time.Time       `json:"failed_at"`
	RetryOf  *int64          `json:"retry_of,omitempty"`
	// LimitKey and Limit are the concurrency limit the job ran under
	// (nil: none); a retry of it runs under the same.
	LimitKey *string `json:"limit_key,omitempty"`
	Limit    *int    `json:"limit_n,omitempty"`
	// Priority and Tags are the job's (tags redacted like payloads where
	// people are shown them); a retry of it keeps them.
	Priority int      `json:"priority"`
	Tags     []string `json:"tags,omitempty"`
}

// FailedFilter selects failed jobs. Search matches the name, queue, error
// or payload, case-insensitively and literally (% and _ are not
// wildcards). The store matches the raw payload and error, secrets
// included; fleet.Service, which shows failed jobs to people, matches
// their redacted rendering instead, so a value redacted in the output
// (log.redact) never matches there. Queue matches exactly.
type FailedFilter struct {
	Search string
	Queue  string
	// Tag keeps only jobs carrying this tag, exactly (empty: any).
	Tag string
	// Limit 0 is no limit.
	Limit  int
	Offset int
}

// QueuedJob is a job not finished yet, still in queue_jobs: pending,
// delayed, limited (waiting for a slot of its concurrency limit) or
// reserved.
type QueuedJob struct {
	ID       int64           `json:"id"`
	Queue    string          `json:"queue"`
	Name     string          `json:"name"`
	Payload  json.RawMessage `json:"payload"`
	State    string          `json:"state"`
	Attempts int             `json:"attempts"`
	// AvailableAt is when the job is (or was) available; for a limited
	// job, when it may run once it has a slot.
	AvailableAt time.Time `json:"available_at"`
	CreatedAt   time.Time `json:"created_at"`
	ReservedBy  *string   `json:"reserved_by,omitempty"`
	LastError   *string   `json:"last_error,omitempty"`
	// Priority orders the job in its queue: lower runs first.
	Priority int `json:"priority"`
	// Tags are the job's tags (redacted like payloads where people are
	// shown them).
	Tags []string `json:"tags,omitempty"`
}

// FinishedJob is one recorded attempt of a job: a row of the job history
// (fleet_jobs).
type FinishedJob struct {
	JobID      int64     `json:"job_id"`
	Queue      string    `json:"queue"`
	Name       string    `json:"name"`
	Attempt    int       `json:"attempt"`
	Status     string    `json:"status"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	RuntimeMs  float64   `json:"runtime_ms"`
	Error      *string   `json:"error,omitempty"`
	Master     *string   `json:"master,omitempty"`
	Worker     *string   `json:"worker,omitempty"`
}

// MetricsRow is one snapshot bucket of fleet_metrics: of a queue (Kind
// "queue") or a job name (Kind "job"), Subject naming it.
type MetricsRow struct {
	TakenAt       time.Time `json:"taken_at"`
	Kind          string    `json:"kind"`
	Subject       string    `json:"subject"`
	Jobs          int64     `json:"jobs"`
	Failed        int64     `json:"failed"`
	JobsPerMinute float64   `json:"jobs_per_minute"`
	RuntimeP50Ms  float64   `json:"runtime_p50_ms"`
	RuntimeP95Ms  float64   `json:"runtime_p95_ms"`
	RuntimeP99Ms  float64   `json:"runtime_p99_ms"`
	RuntimeMeanMs float64   `json:"runtime_mean_ms"`
	WaitSecs      float64   `json:"wait_secs"`
	ClearSecs     *float64  `json:"clear_secs"`
	Pending       int64     `json:"pending"`
	// BacklogSeen says some minute of the bucket recorded its own backlog;
	// false: Pending, WaitSecs and ClearSecs say nothing of the bucket
	// (its snapshots were written late, or by a master that did not see
	// the minute end).
	BacklogSeen bool `json:"backlog_seen"`
}
