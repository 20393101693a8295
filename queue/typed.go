package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// JobArgs is the arguments of a typed job: a type whose JobName names the
// job it is the payload of. The job's payload is the args encoded as JSON
// (encoding/json, so struct tags apply).
//
// JobName must return a constant: HandleTyped registers the handler under
// the name of the type's zero value, and NewTypedJob names a job after
// the value it is given, so a name that depended on fields would send jobs
// to no handler.
type JobArgs interface {
	JobName() string
}

// HandleTyped registers h for the jobs named T's JobName (taken from T's
// zero value): each attempt decodes the payload into a fresh T and passes
// it to h along with the job. Dispatch them with NewTypedJob.
//
// Decoding is lenient about fields: a payload field T has no field for is
// ignored, and a field of T the payload lacks keeps its zero value, so
// that workers and dispatchers of different releases can run side by side
// during a rolling deploy. A value of the wrong JSON type, or a payload
// that is not JSON, fails the attempt (it is retried like any failure)
// with an error naming the job, the field and the Go type; it wraps the
// *json.UnmarshalTypeError or *json.SyntaxError.
//
// Like Handle, it panics on a name registered twice, an empty name or a
// nil handler, and also when T's zero value cannot say its JobName (a
// pointer type whose method reads fields).
func HandleTyped[T JobArgs](r *Registry, h func(ctx context.Context, job *Job, args T) error) {
	name := typedName[T]()
	if h == nil {
		panic(fmt.Sprintf("queue: HandleTyped for %q needs a handler", name))
	}
	r.Handle(name, func(ctx context.Context, job *Job) error {
		var args T
		if err := decodeArgs(job, &args); err != nil {
			return err
		}
		return h(ctx, job, args)
	})
}

// typedName is the JobName of T's zero value.
func typedName[T JobArgs]() (name string) {
	defer func() {
		if p := recover(); p != nil {
			panic(fmt.Sprintf("queue: the zero value of %s cannot say its JobName (%v): JobName must not depend on fields",
				reflect.TypeFor[T](), p))
		}
	}()
	var zero T
	return zero.JobName()
}

// NewTypedJob returns the spec of a job named args.JobName() whose
// payload is args encoded as JSON. When args also has JobOpts (see
// JobArgsWithOpts), the spec starts from those; the spec's methods (OnQueue,
// Priority, Tries, Unique, Limit, ...) then override them for this
// dispatch. An encoding error is returned by Dispatch, as with NewJob.
func NewTypedJob[T JobArgs](args T) *JobSpec {
	name := args.JobName()
	j := &JobSpec{Name: name}
	b, err := json.Marshal(args)
	if err != nil {
		j.payloadErr = fmt.Errorf("encode args of job %q: %w", name, err)
	}
	j.Payload = b
	if o, ok := any(args).(JobArgsWithOpts); ok {
		o.JobOpts().apply(j)
	}
	return j
}

// JobArgsWithOpts is a JobArgs that carries the defaults of its jobs:
// NewTypedJob starts every spec of it from JobOpts. Declare them once on
// the args type instead of at every dispatch. Like JobName, JobOpts should
// not depend on fields: it describes the kind of job, not one of them.
type JobArgsWithOpts interface {
	JobArgs
	JobOpts() JobOpts
}

// JobOpts are a typed job's defaults (see JobArgsWithOpts). A zero field
// sets nothing, so the Client's Defaults and then the worker's apply, as
// for a job built with NewJob. A spec's own methods override each of them.
type JobOpts struct {
	// Queue is the queue (JobSpec.OnQueue).
	Queue string
	// Priority is the priority (JobSpec.Priority); 0 is DefaultPriority.
	Priority int
	// Tries is the most attempts (JobSpec.Tries).
	Tries int
	// Timeout is how long one attempt may run (JobSpec.Timeout).
	Timeout time.Duration
	// Backoff is the delay in seconds before each retry (JobSpec.Backoff).
	Backoff []int
	// Unique makes the jobs unique (JobSpec.Unique).
	Unique *Unique
	// LimitKey and Limit put the jobs under a concurrency limit
	// (JobSpec.Limit); both or neither.
	LimitKey string
	Limit    int
	// Tags are the jobs' tags (JobSpec.Tags).
	Tags []string
	// Metadata is the jobs' metadata, a JSON object (JobSpec.Metadata).
	Metadata json.RawMessage
}

// Opts returns what the spec sets beyond its name, queue and payload, as
// JobOpts: zero fields are not set. Dispatch middleware reads a spec
// through it.
func (j *JobSpec) Opts() JobOpts {
	o := JobOpts{
		Queue: j.Queue, Priority: j.priority, Tries: j.tries, Timeout: j.timeout,
		Backoff: slices.Clone(j.backoff), Tags: slices.Clone(j.tags), Metadata: j.metadata,
	}
	if j.unique != nil {
		u := *j.unique
		u.Fields = slices.Clone(u.Fields)
		o.Unique = &u
	}
	if j.limitSet {
		o.LimitKey, o.Limit = j.limitKey, j.limit
	}
	return o
}

// apply sets on j what o sets.
func (o JobOpts) apply(j *JobSpec) {
	if o.Queue != "" {
		j.OnQueue(o.Queue)
	}
	if o.Priority != 0 {
		j.Priority(o.Priority)
	}
	if o.Tries != 0 {
		j.Tries(o.Tries)
	}
	if o.Timeout != 0 {
		j.Timeout(o.Timeout)
	}
	if o.Backoff != nil {
		j.Backoff(o.Backoff...)
	}
	if o.Unique != nil {
		j.Unique(*o.Unique)
	}
	if o.LimitKey != "" || o.Limit != 0 {
		j.Limit(o.LimitKey, o.Limit)
	}
	if len(o.Tags) > 0 {
		j.Tags(o.Tags...)
	}
	if o.Metadata != nil {
		j.Metadata(o.Metadata)
	}
}

// decodeArgs decodes job's payload into v, a pointer to its args, with an
// error naming the job and what in the payload did not fit.
func decodeArgs(job *Job, v any) error {
	if len(job.Payload) == 0 {
		return nil // no payload: the zero args, as NewJob's nil payload is {}
	}
	err := json.Unmarshal(job.Payload, v)
	if err == nil {
		return nil
	}
	into := reflect.TypeOf(v).Elem()
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var msg string
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		msg = fmt.Sprintf("field %q: JSON %s does not fit Go type %s", typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.As(err, &typeErr):
		msg = fmt.Sprintf("JSON %s does not fit Go type %s", typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		msg = fmt.Sprintf("the payload is not valid JSON (at byte %d: %v)", syntaxErr.Offset, err)
	default:
		msg = err.Error()
	}
	return &argsError{msg: fmt.Sprintf("decode args of job %d (%s) into %s: %s", job.ID, job.Name, into, msg), err: err}
}

// argsError is a payload that does not decode into a typed job's args.
// Its text says what did not fit, once; it wraps encoding/json's error.
type argsError struct {
	msg string
	err error
}

func (e *argsError) Error() string { return e.msg }
func (e *argsError) Unwrap() error { return e.err }
