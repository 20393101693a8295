package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/fleet-go/fleet/store"
)

// Job states in a JobStory.
const (
	JobPending   = "pending"   // ready, waiting for a worker
	JobDelayed   = "delayed"   // available later: dispatched with a delay, or waiting out a retry's backoff
	JobLimited   = "limited"   // waiting for a slot of its concurrency limit (parked)
	JobReserved  = "reserved"  // a worker holds it
	JobCompleted = "completed" // its last attempt completed
	JobFailed    = "failed"    // in queue_failed_jobs
	JobRetried   = "retried"   // it failed and a retry of it is queued or failed now
	JobCancelled = "cancelled" // its last attempt was cancelled (by an operator, or by its handler with queue.Cancel)
	JobGone      = "gone"      // its last attempt did not complete and it is neither queued nor failed any more (retried, forgotten or trimmed)
)

// JobStory is one job's whole story: its state now, every recorded
// attempt, and its retry links. Payloads and error texts are redacted.
type JobStory struct {
	ID    int64  `json:"id"`
	Queue string `json:"queue"`
	Name  string `json:"name"`
	// State is one of the Job* states.
	State string `json:"state"`
	// Payload is the job's payload, redacted; absent once the job is
	// neither queued nor failed (the history keeps no payloads).
	Payload json.RawMessage `json:"payload,omitempty"`
	// Tries counts the attempts started, as the queue counts them;
	// MaxTries is the most it gets (absent: its worker's default).
	Tries     int        `json:"tries"`
	MaxTries  *int       `json:"max_tries,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	// AvailableAt is when a queued job is (or was) available.
	AvailableAt *time.Time `json:"available_at,omitempty"`
	// Reserved says who holds a reserved job, since when.
	Reserved *JobReservation `json:"reserved,omitempty"`
	// Limit is the concurrency limit the job runs under, if any.
	Limit *JobLimit `json:"limit,omitempty"`
	// LastError is the error of a queued job's last failed attempt.
	LastError string `json:"last_error,omitempty"`
	// UniqueKey is a queued unique job's key (see queue.Unique).
	UniqueKey string `json:"unique_key,omitempty"`
	// Priority is a queued or failed job's priority (lower runs first).
	Priority *int `json:"priority,omitempty"`
	// Tags are the job's tags, redacted like payloads: the queued or
	// failed job's, else its last recorded attempt's.
	Tags []string `json:"tags,omitempty"`
	// Metadata is a queued job's metadata, redacted like payloads.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Failed is its row in queue_failed_jobs.
	Failed *FailedRecord `json:"failed,omitempty"`
	// Cancel says who cancelled the job and when: a request its worker has
	// not acted on yet, or the cancelled attempt.
	Cancel *JobCancellation `json:"cancel,omitempty"`
	// RetryOf is the first job of the retry chain this job belongs to,
	// when it is a retry (queue_jobs.retry_of / queue_failed_jobs.retry_of).
	RetryOf *int64 `json:"retry_of,omitempty"`
	// Retries are the later jobs of its retry chain that are queued or
	// failed now. Links are known only while the jobs are in queue_jobs or
	// queue_failed_jobs: the history does not record them.
	Retries []JobLink `json:"retries"`
	// Attempts are the recorded attempts, in order.
	Attempts []JobAttempt `json:"attempts"`
	// At is the database's clock when the story was read.
	At time.Time `json:"at"`
}

// JobReservation is who holds a job.
type JobReservation struct {
	// Worker is the holding worker's name (host:pid:random).
	Worker string `json:"worker"`
	// MasterInstance is the member row the reservation hangs on
	// (queue_jobs.reserved_master); Master is that member's name while
	// its row exists, and MasterKind "master", or "worker" for a worker run
	// without a master (the row is its own).
	MasterInstance string     `json:"master_instance,omitempty"`
	Master         string     `json:"master,omitempty"`
	MasterKind     string     `json:"master_kind,omitempty"`
	Since          *time.Time `json:"since,omitempty"`
}

// JobLimit is a job's concurrency limit: at most Limit jobs with Key are
// ready or running at once.
type JobLimit struct {
	Key   string `json:"key"`
	Limit int    `json:"limit"`
	// Active is how many jobs of the key are ready or running now (nil:
	// not known, e.g. for a failed job).
	Active *int `json:"active,omitempty"`
	// Waiting says the job waits for a slot (state limited); AvailableAt
	// is then when it may run once it has one.
	Waiting bool `json:"waiting"`
}

// FailedRecord is a job's row in queue_failed_jobs.
type FailedRecord struct {
	ID       int64     `json:"id"`
	Attempts int       `json:"attempts"`
	MaxTries int       `json:"max_tries"`
	FailedAt time.Time `json:"failed_at"`
	Error    string    `json:"error"`
}

// JobLink names another job of a retry chain.
type JobLink struct {
	JobID int64 `json:"job_id"`
	// FailedID is its failed-job id when State is failed.
	FailedID *int64 `json:"failed_id,omitempty"`
	State    string `json:"state"`
}

// JobCancellation is a job's cancel.
type JobCancellation struct {
	// Requested says the job still runs: its worker was asked to stop it
	// (at At, by By) and records the attempt as cancelled when it does.
	Requested bool      `json:"requested"`
	At        time.Time `json:"at"`
	By        string    `json:"by,omitempty"`
	// Reason is the cancelled attempt's error, once the job has ended: who
	// cancelled it ("cancelled by …") and how the handler stopped.
	Reason string `json:"reason,omitempty"`
}

// JobAttempt is one recorded attempt (a row of the history, fleet_jobs).
type JobAttempt struct {
	Attempt int `json:"attempt"`
	// Status is completed, failed, timed_out, lost, cancelled, snoozed or
	// interrupted.
	Status         string     `json:"status"`
	Worker         string     `json:"worker,omitempty"`
	MasterInstance string     `json:"master_instance,omitempty"`
	Master         string     `json:"master,omitempty"`
	ReservedAt     *time.Time `json:"reserved_at,omitempty"`
	StartedAt      time.Time  `json:"started_at"`
	FinishedAt     time.Time  `json:"finished_at"`
	RuntimeMs      float64    `json:"runtime_ms"`
	Error          string     `json:"error,omitempty"`
}

// Job returns the story of the job with id jobID (ErrJobNotFound when no
// table knows it).
func (s *Service) Job(ctx context.Context, jobID int64) (JobStory, error) {
	if jobID < 1 {
		return JobStory{}, errors.New("a job id is a positive whole number")
	}
	return s.story(ctx, store.JobStoryParams{JobID: jobID})
}

// FailedJobStory returns the story of the job whose row in
// queue_failed_jobs has id failedID (ErrFailedJobNotFound when there is
// none).
func (s *Service) FailedJobStory(ctx context.Context, failedID int64) (JobStory, error) {
	if failedID < 1 {
		return JobStory{}, errors.New("a failed job's id is a positive whole number")
	}
	return s.story(ctx, store.JobStoryParams{FailedID: failedID})
}

func (s *Service) story(ctx context.Context, p store.JobStoryParams) (JobStory, error) {
	st, err := s.st.JobStoryGet(ctx, p)
	if err != nil {
		return JobStory{}, err
	}
	out := JobStory{ID: st.JobID, At: st.At, Retries: []JobLink{}, Attempts: make([]JobAttempt, 0, len(st.Attempts))}
	for _, a := range st.Attempts {
		out.Queue, out.Name, out.Tags = a.Queue, a.Name, a.Tags
		out.Attempts = append(out.Attempts, JobAttempt{
			Attempt: a.Attempt, Status: a.Status, Worker: deref(a.Worker),
			MasterInstance: deref(a.Master), Master: deref(a.MasterName),
			ReservedAt: a.ReservedAt, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt,
			RuntimeMs: a.RuntimeMs, Error: s.redactor.Text(deref(a.Error)),
		})
	}
	switch {
	case st.Queued != nil:
		q := st.Queued
		out.Queue, out.Name, out.State = q.Queue, q.Name, q.State
		out.Payload = s.redactor.JSON(q.Payload)
		out.Tries, out.MaxTries = q.Attempts, q.MaxTries
		out.CreatedAt, out.AvailableAt = &q.CreatedAt, &q.AvailableAt
		out.LastError = s.redactor.Text(deref(q.LastError))
		out.RetryOf = q.RetryOf
		out.UniqueKey = deref(q.UniqueKey)
		out.Priority, out.Tags = &q.Priority, q.Tags
		if q.Metadata != nil {
			out.Metadata = s.redactor.JSON(q.Metadata)
		}
		if q.LimitKey != nil && q.Limit != nil {
			out.Limit = &JobLimit{Key: *q.LimitKey, Limit: *q.Limit, Active: q.LimitActive, Waiting: q.State == JobLimited}
		}
		if q.CancelRequestedAt != nil {
			out.Cancel = &JobCancellation{Requested: true, At: *q.CancelRequestedAt, By: deref(q.CancelledBy)}
		}
		if q.ReservedBy != nil {
			out.Reserved = &JobReservation{
				Worker: *q.ReservedBy, MasterInstance: deref(q.ReservedMaster),
				Master: deref(q.MasterName), MasterKind: deref(q.MasterKind), Since: q.ReservedAt,
			}
		}
	case st.Failed != nil:
		f := st.Failed
		out.Queue, out.Name, out.State = f.Queue, f.Name, JobFailed
		out.Payload = s.redactor.JSON(f.Payload)
		out.Tries, out.MaxTries = f.Attempts, &f.MaxTries
		out.CreatedAt = &f.Created
		out.RetryOf = f.RetryOf
		out.Priority, out.Tags = &f.Priority, f.Tags
		if f.LimitKey != nil && f.Limit != nil {
			out.Limit = &JobLimit{Key: *f.LimitKey, Limit: *f.Limit}
		}
		out.Failed = &FailedRecord{ID: f.ID, Attempts: f.Attempts, MaxTries: f.MaxTries, FailedAt: f.FailedAt, Error: s.redactor.Text(f.Error)}
	default:
		last := st.Attempts[len(st.Attempts)-1]
		out.Tries = last.Attempt
		out.State = JobGone
		switch last.Status {
		case "completed":
			out.State = JobCompleted
		case "cancelled":
			out.State = JobCancelled
			out.Cancel = &JobCancellation{At: last.FinishedAt, Reason: s.redactor.Text(deref(last.Error))}
		}
	}
	out.Tags = s.redactor.Tags(out.Tags)
	for _, l := range st.Chain {
		if l.JobID > out.ID {
			out.Retries = append(out.Retries, JobLink{JobID: l.JobID, FailedID: l.FailedID, State: l.State})
		}
	}
	if out.State == JobGone && len(out.Retries) > 0 {
		out.State = JobRetried
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
