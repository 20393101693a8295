package model

import "errors"

// ErrNotFound matches (errors.Is) every not-found error of fleet: a failed
// job, a job or a token that no row has.
var ErrNotFound = errors.New("not found")

// NotFoundError says that no row has the thing asked for. Each kind of
// thing has one value of it (ErrFailedJobNotFound, ErrJobNotFound,
// ErrTokenNotFound), which errors.Is matches exactly; every one of them also
// matches ErrNotFound.
type NotFoundError struct {
	// What is the kind of thing looked for: "failed job", "job", "token".
	What string
}

// Error says what was not found.
func (e *NotFoundError) Error() string { return e.What + " not found" }

// Is matches ErrNotFound, besides the error itself.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// The not-found errors, returned wrapped with the id or name looked for.
var (
	// ErrFailedJobNotFound: no failed job (row of queue_failed_jobs) has
	// the id (any more).
	ErrFailedJobNotFound error = &NotFoundError{What: "failed job"}
	// ErrJobNotFound: no table knows the job id: not queued, not failed,
	// and no recorded attempt (or its history was trimmed).
	ErrJobNotFound error = &NotFoundError{What: "job"}
	// ErrTokenNotFound: no token has the id or name (or, where it says
	// so, none that is not revoked already).
	ErrTokenNotFound error = &NotFoundError{What: "token"}
)
