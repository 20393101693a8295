package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/fleet-go/fleet/store"
)

// ErrFailedJobNotFound is returned (wrapped) by Retry, Forget, FailedJob
// and FailedJobStory for an id that does not exist (any more).
var ErrFailedJobNotFound = errors.New("failed job not found")

// ErrJobNotFound is returned (wrapped) by Job for a job id that no table
// knows: not queued, not failed, and no recorded attempt (or its history
// was trimmed).
var ErrJobNotFound = errors.New("job not found")

// lookupError is a store's not-found error, also matching this package's
// sentinel, with the store's message.
type lookupError struct{ err, sentinel error }

func (e *lookupError) Error() string   { return e.err.Error() }
func (e *lookupError) Unwrap() []error { return []error{e.err, e.sentinel} }

// lookup makes the store's not-found errors match this package's.
func lookup(err error) error {
	switch {
	case errors.Is(err, store.ErrFailedJobNotFound):
		return &lookupError{err, ErrFailedJobNotFound}
	case errors.Is(err, store.ErrJobNotFound):
		return &lookupError{err, ErrJobNotFound}
	}
	return err
}

// FailedFilter selects failed jobs. Search matches the name, queue, error
// or payload as people are shown them, case-insensitively and literally: a
// value redacted in the output (log.redact) never matches, in the payload
// or in the error. Queue matches exactly. Limit 0 is no limit.
type FailedFilter struct {
	Search string
	Queue  string
	// Tag keeps only jobs carrying this tag, exactly.
	Tag    string
	Limit  int
	Offset int
}

func (f FailedFilter) store() store.FailedFilter { return store.FailedFilter(f) }

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
	// Priority and Tags are the job's (tags redacted like payloads); a
	// retry of it keeps them.
	Priority int      `json:"priority"`
	Tags     []string `json:"tags,omitempty"`
}

// QueuedJob is a job not finished yet: pending, delayed, limited (waiting
// for a slot of its concurrency limit; AvailableAt is then when it may run
// once it has one) or reserved.
type QueuedJob struct {
	ID          int64           `json:"id"`
	Queue       string          `json:"queue"`
	Name        string          `json:"name"`
	Payload     json.RawMessage `json:"payload"`
	State       string          `json:"state"`
	Attempts    int             `json:"attempts"`
	AvailableAt time.Time       `json:"available_at"`
	CreatedAt   time.Time       `json:"created_at"`
	ReservedBy  *string         `json:"reserved_by,omitempty"`
	LastError   *string         `json:"last_error,omitempty"`
	// Priority orders the job in its queue: lower runs first.
	Priority int `json:"priority"`
	// Tags are the job's tags, redacted like payloads.
	Tags []string `json:"tags,omitempty"`
}

// FinishedJob is one recorded attempt of a job (a row of fleet_jobs).
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

// MetricsRow is one snapshot bucket of a queue (Kind "queue") or a job
// name (Kind "job"), Subject naming it.
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

// convert converts store rows to this package's identical types.
func convert[T, S any](rows []S, one func(S) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = one(r)
	}
	return out
}

// OldestWaits reads the wait in seconds of the oldest ready job of each of
// queues (absent: no ready job). *Service's store satisfies it, as does
// the master's.
type OldestWaits interface {
	QueueOldestWait(ctx context.Context, queues []string) (map[string]float64, error)
}
