package cmd

import (
	"errors"
	"fmt"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/spawner"
)

// Exit statuses of the app's commands. Every command exits with one of
// these; docs/operating.md has the same table. A script can tell a missing
// job from a database that is down, and a paused fleet from one with no
// master, without reading the error line.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailure: any other error (fleet:status: no master is live).
	ExitFailure = 1
	// ExitUsage: a bad flag, argument or subcommand; nothing was done.
	ExitUsage = 2
	// ExitNotFound: what the command was asked about does not exist (a
	// job, a failed job, a token, a supervisor).
	ExitNotFound = 3
	// ExitUnreachable: the database could not be reached or refused the
	// connection (down, too many connections, authentication failed, no
	// such database).
	ExitUnreachable = 4
	// ExitNotMigrated: the database lacks fleet's tables, columns or
	// functions: run `app migrate`.
	ExitNotMigrated = 5
	// ExitPaused: fleet:status found live masters, all of them paused.
	ExitPaused = 6
	// ExitMigrationsPending: `app migrate status` found a migration set
	// with pending migrations, or a dirty one.
	ExitMigrationsPending = 7
	// ExitJobTimedOut is the exit status of a worker that gave up on a job
	// that ignored its timeout; its supervisor replaces it.
	ExitJobTimedOut = spawner.ExitCodeJobTimedOut // 8
	// ExitTimedOut: fleet:terminate --wait gave up at --timeout with
	// masters still live.
	ExitTimedOut = 9
	// ExitUnsaved is the exit status of a worker that stopped (at a limit,
	// on a stop or a signal, idle, fenced) but could not write every
	// finished job's outcome: the database was away. Those jobs stay
	// reserved until released, and run again. Its master counts the exit
	// by its reason, not as a crash.
	ExitUnsaved = spawner.ExitCodeUnsaved // 10
	// ExitInterrupted is the exit status of a demo stopped by SIGINT or
	// SIGTERM (or its context) before its jobs were done: 128 + SIGINT, as
	// shells do.
	ExitInterrupted = 130
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
	// silent: the command has said what happened itself; no error line.
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks a bad flag, argument or subcommand (ExitUsage).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usage error (ExitUsage) with fmt.Errorf's formatting.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// usage marks err, when not nil, as a usage error.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
}

// notFoundError marks a missing job, token or supervisor (ExitNotFound).
type notFoundError struct{ err error }

func (e *notFoundError) Error() string { return e.err.Error() }
func (e *notFoundError) Unwrap() error { return e.err }

// notFoundf returns a not-found error (ExitNotFound) with fmt.Errorf's
// formatting.
func notFoundf(format string, args ...any) error {
	return &notFoundError{err: fmt.Errorf(format, args...)}
}

// exitCode maps a command's error to its exit status. An explicit
// exitError wins; then the kinds above, wherever they are in the chain.
func exitCode(err error) int {
	var (
		ee *exitError
		ue *usageError
		nf *notFoundError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, errNotMigrated):
		return ExitNotMigrated
	case errors.Is(err, process.ErrUnreachable):
		return ExitUnreachable
	case errors.As(err, &nf), errors.Is(err, fleet.ErrUnknownSupervisor):
		return ExitNotFound
	case errors.As(err, &ue):
		return ExitUsage
	}
	return ExitFailure
}
