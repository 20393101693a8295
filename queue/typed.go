package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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

// NewTypedJob returns a job named args.JobName() whose payload is args
// encoded as JSON; every builder method of Job (OnQueue, Delay, Tries,
// Unique, Limit, ...) applies to it. An encoding error is returned by
// Dispatch, as with NewJob.
func NewTypedJob[T JobArgs](args T) *Job {
	name := args.JobName()
	j := &Job{Name: name}
	b, err := json.Marshal(args)
	if err != nil {
		j.payloadErr = fmt.Errorf("encode args of job %q: %w", name, err)
	}
	j.Payload = b
	return j
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
