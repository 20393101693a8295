// Package queue is the application-facing API of fleet: jobs, the handler
// registry, and the Client that dispatches jobs into PostgreSQL, on their own
// or inside the caller's transaction.
package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/jobhook"
	"github.com/fleet-go/fleet/store"
)

// Job is a unit of work. Build one with NewJob to dispatch it; a handler
// receives one with its ID, Attempt and Payload filled in.
type Job struct {
	// ID is the job's id, set once dispatched.
	ID int64
	// Name selects the handler.
	Name string
	// Queue is the queue the job waits on.
	Queue string
	// Payload is the job's JSON payload.
	Payload json.RawMessage
	// Attempt is the 1-based number of the attempt being run.
	Attempt int
	// MaxTries is the most attempts the job gets.
	MaxTries int
	// CreatedAt is when the job was dispatched.
	CreatedAt time.Time
	// Snoozes counts the attempts of the job that ended with a snooze
	// (see Snooze); they do not count in Attempt.
	Snoozes int
	// Duplicate is set by a dispatch that inserted nothing because a job
	// with the same unique key counts (see Unique); ID is then that job's.
	Duplicate bool

	delay      time.Duration
	backoff    []int
	timeout    time.Duration
	payloadErr error
	retryOf    int64
	completeTx jobhook.Completer // set on the jobs a worker runs
	unique     *Unique
	limitKey   string
	limit      int
	limitSet   bool
	priority   int
	tags       []string
	metadata   json.RawMessage
	metaErr    error
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

// NewJob returns a job named name with payload encoded as JSON. A payload
// that is already JSON ([]byte or json.RawMessage) is checked and kept as it
// is; nil becomes {}. An encoding error is returned by Dispatch.
func NewJob(name string, payload any) *Job {
	j := &Job{Name: name}
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

// OnQueue sets the queue; the default is queue.default_queue.
func (j *Job) OnQueue(queue string) *Job { j.Queue = queue; return j }

// Delay makes the job available only after d.
func (j *Job) Delay(d time.Duration) *Job { j.delay = d; return j }

// Tries sets the most attempts the job gets; the default is queue.tries.
func (j *Job) Tries(n int) *Job { j.MaxTries = n; return j }

// Backoff sets the delay in seconds before each retry; the last value
// repeats. The default is queue.backoff.
func (j *Job) Backoff(secs ...int) *Job { j.backoff = append([]int(nil), secs...); return j }

// Timeout sets how long one attempt may run; the default is
// queue.timeout_secs.
func (j *Job) Timeout(d time.Duration) *Job { j.timeout = d; return j }

// RetryOf links the job to the failed job it retries.
func (j *Job) RetryOf(failedID int64) *Job { j.retryOf = failedID; return j }

// Decode unmarshals the payload into v, naming the job when it cannot.
func (j *Job) Decode(v any) error {
	dec := json.NewDecoder(bytes.NewReader(j.Payload))
	if err := dec.Decode(v); err != nil {
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
func (j *Job) Limit(key string, n int) *Job {
	j.limitKey, j.limit, j.limitSet = key, n, true
	return j
}
