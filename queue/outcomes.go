package queue

import (
	"errors"
	"fmt"
	"time"
)

// MaxSnoozes is the most times one job may snooze. The attempt that would
// snooze it once more is a failed attempt instead (its error says the job
// snoozed more than MaxSnoozes times), and the job is retried or fails as
// any failed attempt does.
const MaxSnoozes = 100

// ErrCancelled is the cause of a handler's context when an operator
// cancels its running job (fleet:cancel, Service.Cancel, the dashboard):
// check it with errors.Is(context.Cause(ctx), queue.ErrCancelled). The
// cause wraps it with who cancelled the job. It also matches the error
// Cancel returns.
var ErrCancelled = errors.New("the job was cancelled")

// SnoozeError is what Snooze returns: the handler asks to run again after
// Delay.
type SnoozeError struct {
	Delay time.Duration
}

// Error says for how long the job snoozes.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.Delay) }

// Snooze returns an error a handler returns to run its job again after d
// (d <= 0: at once). The attempt does not count against the job's tries:
// the job is released with its attempt taken back and its snooze count
// raised, and its history records the attempt as snoozed. A job under a
// concurrency limit gives its slot up while it snoozes, as a retry does.
// A job may snooze at most MaxSnoozes times.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: max(d, 0)} }

// CancelError is what Cancel returns: the handler ends its job as
// cancelled, with Err (nil allowed) as the reason.
type CancelError struct {
	Err error
}

// Error is "the job was cancelled", with the reason when there is one.
func (e *CancelError) Error() string {
	if e.Err == nil {
		return ErrCancelled.Error()
	}
	return ErrCancelled.Error() + ": " + e.Err.Error()
}

// Unwrap returns the reason.
func (e *CancelError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCancelled) true.
func (e *CancelError) Is(target error) bool { return target == ErrCancelled }

// Cancel returns an error a handler returns to end its job as cancelled:
// no retry, the job is deleted (freeing its concurrency slot, if any), its
// history records the attempt as cancelled with err's text, and it never
// reaches the failed jobs. err may be nil.
func Cancel(err error) error { return &CancelError{Err: err} }
