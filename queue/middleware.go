package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// WorkMiddleware wraps the handler of every job a worker runs: it returns
// a HandlerFunc that does its part (a span, a log field, a recover, a
// deadline) and calls next, or returns without calling it. Register it
// with Registry.Use.
type WorkMiddleware func(next HandlerFunc) HandlerFunc

// Use adds work middleware around every handler of the registry, those
// registered before and after alike. The first middleware given (over all
// calls to Use) is the outermost: it sees the job first and its error
// last. A typed handler decodes its args inside the middleware, so the
// middleware sees a decode failure as the handler's error. A panic inside
// middleware is a failed attempt like a panic in the handler.
//
// Call Use while setting the registry up, before workers run: the
// middleware is composed with each handler here, once, not per job. A
// nil middleware, or one that returns a nil handler, panics.
func (r *Registry) Use(mw ...WorkMiddleware) {
	for _, m := range mw {
		if m == nil {
			panic("queue: Use needs non-nil middleware")
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.middleware = append(r.middleware, mw...)
	for name, h := range r.handlers {
		r.wrapped[name] = wrap(h, r.middleware)
	}
}

// wrap puts h inside mw, mw[0] outermost.
func wrap(h HandlerFunc, mw []WorkMiddleware) HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		if h = mw[i](h); h == nil {
			panic(fmt.Sprintf("queue: work middleware %d of %d returned a nil handler", i+1, len(mw)))
		}
	}
	return h
}

// ErrorHook is told of a failed attempt: the job, the attempt's context
// and its error. See Registry.OnError.
type ErrorHook func(ctx context.Context, job *Job, err error)

// OnError adds a hook called for every failed attempt: an error returned
// by the handler or its middleware, a panic (the error then holds the
// panic's value and stack), a typed job's payload that does not decode,
// a job no handler is registered for. It is meant for the app's error
// tracker. Hooks run in the order added.
//
// A hook runs on the job's goroutine, after the handler and its
// middleware returned and before the attempt's outcome is handed to the
// outcome writer, so it holds the job's slot in the worker while it runs:
// keep it short, and hand slow work (a network call to the tracker) to a
// goroutine or a buffered queue of its own. ctx is the attempt's context,
// which is done when the attempt timed out; use context.WithoutCancel(ctx)
// for calls that must still go out. A hook that panics is recovered and
// logged; the attempt's error stays as it was.
//
// A worker's job is retried or fails for good after the hook returned; the
// job's Attempt and MaxTries say which it will be. An attempt the worker
// gave up on because its handler ignored its timeout (past the grace
// period) is recorded as timed out without the hook: the handler has not
// returned. Add hooks while setting
// the registry up, before workers run; a nil hook panics.
func (r *Registry) OnError(hook ErrorHook) {
	if hook == nil {
		panic("queue: OnError needs a hook")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onError = append(r.onError, hook)
}

// Run runs one attempt of job as a worker does: the handler registered for
// job.Name inside the work middleware, a panic turned into the attempt's
// error (its value and stack), then the error hooks when the attempt
// failed (a snooze or a cancel is not a failure). It returns the
// attempt's error. Workers call it for every job;
// an app's tests may call it to run a handler with its middleware and
// hooks without a database (job.CompleteTx then fails: only a worker's
// jobs can complete in a transaction).
func (r *Registry) Run(ctx context.Context, job *Job) error {
	r.mu.RLock()
	h, ok := r.wrapped[job.Name]
	hooks := r.onError
	r.mu.RUnlock()
	var err error
	if ok {
		err = runHandler(ctx, h, job)
	} else {
		err = fmt.Errorf("no handler registered for %q", job.Name)
	}
	if err != nil && !notFailure(ctx, err) {
		for _, hook := range hooks {
			runHook(ctx, hook, job, err)
		}
	}
	return err
}

// notFailure reports whether an attempt's error ends it without failing
// it, so that no error hook hears of it: a snooze, a cancel returned by the
// handler, or any error after the job was cancelled from outside.
func notFailure(ctx context.Context, err error) bool {
	var snooze *SnoozeError
	return errors.As(err, &snooze) || errors.Is(err, ErrCancelled) || errors.Is(context.Cause(ctx), ErrCancelled)
}

// runHandler calls h, turning a panic into an error with its stack.
func runHandler(ctx context.Context, h HandlerFunc, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, job)
}

// runHook calls one error hook, logging a panic of its own.
func runHook(ctx context.Context, hook ErrorHook, job *Job, err error) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("queue: an error hook panicked", "job_id", job.ID, "job", job.Name,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	hook(ctx, job, err)
}
