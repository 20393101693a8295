// Package queue is the application-facing API of fleet: jobs, the handler
// registry, and the Client that dispatches jobs into PostgreSQL, on their own
// or inside the caller's transaction.
package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/jobhook"
	"github.com/fleet-go/fleet/store"
)

// Job is the job a handler runs: what was dispatched, and which attempt
// this is. It is the handler's own copy; changing its fields changes
// nothing stored. Build a job to dispatch with NewJob or NewTypedJob (a
// JobSpec), not with this type.
type Job struct {
	// ID is the job's id.
	ID int64
	// Name selects the handler.
	Name string
	// Queue is the queue the job was claimed from.
	Queue string
	// Payload is the job's JSON payload.
	Payload json.RawMessage
	// Attempt is the 1-based number of this attempt among those that
	// count against MaxTries: failed attempts count, snoozes do not, so a
	// job that snoozed (see Snooze) runs again with the same Attempt.
	Attempt int
	// MaxTries is the most attempts the job gets.
	MaxTries int
	// Snoozes counts the attempts of the job that ended with a snooze;
	// they do not count in Attempt. A job snoozes at most MaxSnoozes times.
	Snoozes int
	// Priority is the job's priority (see JobSpec.Priority).
	Priority int
	// Tags are the job's tags (see JobSpec.Tags); nil when it has none.
	Tags []string
	// Metadata is the job's metadata as JSON (see JobSpec.Metadata); nil
	// when it has none.
	Metadata json.RawMessage
	// CreatedAt is when the job was dispatched.
	CreatedAt time.Time

	completeTx jobhook.Completer // set on the jobs a worker runs
}

// JobSpec is a job to dispatch: its name and payload, and how it is to be
// run. Make one with NewJob or NewTypedJob, set what differs from the
// defaults with its methods (each returns the spec, so calls chain), and
// pass it to a Client's Dispatch. A dispatch never changes the spec it is
// given, so one spec may be dispatched many times.
type JobSpec struct {
	// Name selects the handler.
	Name string
	// Queue is the queue the job waits on; "" is the Client's default
	// queue. OnQueue sets it too.
	Queue string
	// Payload is the job's JSON payload.
	Payload json.RawMessage

	delay      time.Duration
	tries      int
	backoff    []int
	timeout    time.Duration
	payloadErr error
	retryOf    int64
	unique     *Unique
	limitKey   string
	limit      int
	limitSet   bool
	priority   int
	tags       []string
	metadata   json.RawMessage
	metaErr    error
}

// clone returns a copy of s that shares nothing the copy's methods change.
func (s *JobSpec) clone() *JobSpec {
	c := *s
	c.tags = slices.Clip(c.tags)
	c.backoff = slices.Clip(c.backoff)
	return &c
}

func init() {
	jobhook.Attach = func(job any, c jobhook.Completer) { job.(*Job).completeTx = c }
}

// ErrLeaseLost is returned by CompleteTx when the worker no longer holds
// the job: it was released (its worker or master was presumed gone) and may
// run elsewhere. The transaction can then no longer commit.
var ErrLeaseLost = store.ErrLeaseLost

// CompleteTx completes the job inside tx, a transaction of the handler on
// fleet's database: the job's row is deleted and its attempt's history row
// written as for any other completion, and all of it commits, or rolls
// back, together with the handler's own writes in tx. So a crash never
// leaves the handler's effects without the completion, or the completion
// without them.
//
// Call it last, just before tx.Commit: from then until the commit the
// transaction holds two small counter rows other workers may wait on.
// When the lease was lost it returns an error wrapping ErrLeaseLost and
// makes tx fail, so the handler's writes cannot commit either.
//
// After CompleteTx the handler's return value decides nothing more when tx
// committed. When tx did not commit (the commit failed, or the handler
// rolled back and returned nil), the attempt is recorded as failed and the
// job retried after its backoff, since its effects are not there; an error
// returned is a failed attempt as always.
func (j *Job) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	if j.completeTx == nil {
		return fmt.Errorf("complete job %d (%s) in a transaction: only a job run by a fleet worker can", j.ID, j.Name)
	}
	return j.completeTx(ctx, tx)
}

// NewJob returns the spec of a job named name with payload encoded as
// JSON. A payload that is already JSON ([]byte or json.RawMessage) is
// checked and kept as it is; nil becomes {}. An encoding error is returned
// by Dispatch.
func NewJob(name string, payload any) *JobSpec {
	j := &JobSpec{Name: name}
	switch p := payload.(type) {
	case nil:
		j.Payload = json.RawMessage(`{}`)
	case json.RawMessage:
		j.Payload = p
	case []byte:
		j.Payload = json.RawMessage(p)
	default:
		b, err := json.Marshal(p)
		if err != nil {
			j.payloadErr = fmt.Errorf("encode payload of job %q: %w", name, err)
		}
		j.Payload = b
	}
	if j.payloadErr == nil && !json.Valid(j.Payload) {
		j.payloadErr = fmt.Errorf("payload of job %q is not valid JSON", name)
	}
	return j
}

// OnQueue sets Queue; the default is the Client's (queue.default_queue).
func (j *JobSpec) OnQueue(queue string) *JobSpec { j.Queue = queue; return j }

// Delay makes the job available only after d.
func (j *JobSpec) Delay(d time.Duration) *JobSpec { j.delay = d; return j }

// Tries sets the most attempts the job gets; the default is queue.tries.
func (j *JobSpec) Tries(n int) *JobSpec { j.tries = n; return j }

// Backoff sets the delay in seconds before each retry; the last value
// repeats. The default is queue.backoff.
func (j *JobSpec) Backoff(secs ...int) *JobSpec { j.backoff = append([]int(nil), secs...); return j }

// Timeout sets how long one attempt may run; the default is
// queue.timeout_secs.
func (j *JobSpec) Timeout(d time.Duration) *JobSpec { j.timeout = d; return j }

// RetryOf links the job to the failed job it retries.
func (j *JobSpec) RetryOf(failedID int64) *JobSpec { j.retryOf = failedID; return j }

// Decode unmarshals the payload into v, naming the job when it cannot. It
// reads the payload in place: a large payload is not copied on its way
// into v.
func (j *Job) Decode(v any) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return fmt.Errorf("decode payload of job %d (%s): %w", j.ID, j.Name, err)
	}
	return nil
}

// RetryDelay is how long a job waits after failed attempt number attempt
// (1-based) given its backoff list in seconds: the attempt's entry, the last
// entry once the list runs out, zero for an empty list.
func RetryDelay(backoffSecs []int, attempt int) time.Duration {
	if len(backoffSecs) == 0 || attempt < 1 {
		return 0
	}
	i := min(attempt-1, len(backoffSecs)-1)
	return time.Duration(backoffSecs[i]) * time.Second
}

// Limit puts the job under a concurrency limit: at most n jobs with key
// run at once (precisely, are ready or running), across every worker of
// every master. Jobs of a key at its limit wait, parked, until a job of
// the key finishes, fails for good or is retried, which hands its slot
// over. A limit set here replaces any that Defaults.Limits (the
// [queue.limits] config) would give the job. The latest dispatch of a key
// sets the key's limit. The key must not be empty, be at most
// MaxLimitKeyBytes, and n at least 1; Dispatch refuses the job otherwise.
func (j *JobSpec) Limit(key string, n int) *JobSpec {
	j.limitKey, j.limit, j.limitSet = key, n, true
	return j
}
