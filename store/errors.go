package store

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrorClass is what a failed statement says about the database: whether
// it answered, and whether the same statement may succeed later. It is the
// one place fleet decides that the database is away: every caller that
// retries, waits, splits a batch or tells an outage from a slow statement
// asks ClassifyError.
type ErrorClass int

const (
	// ErrorNone is a nil error.
	ErrorNone ErrorClass = iota
	// ErrorTransient is an error of a database that answered and refused
	// the statement for now: a statement timeout or cancel (SQLSTATE
	// 57014), a serialization failure or deadlock (40001, 40P01), no
	// connection slot left (53300) or another shortage of resources (class
	// 53: a full disk, out of memory), a lock not available (55P03) or an
	// object in use (class 55), a read-only transaction on a server in
	// recovery (class 25), an I/O error (class 58). The database is up:
	// the statement is tried again, smaller when it timed out (see
	// StatementTimedOut), and nothing that answers an outage (a worker
	// stopped, fenced or killed, a master's exit) is done for it.
	ErrorTransient
	// ErrorUnreachable is no answer: a connection exception (class 08), a
	// server shutting down or the session ended by the server (57P01 to
	// 57P05), a closed or broken connection, a network error, or no reply
	// before the client's own time limit.
	ErrorUnreachable
	// ErrorRejected is the database refusing the statement itself (bad
	// data, a constraint, a missing table, a permission): the same
	// statement fails the same way however often it is tried.
	ErrorRejected
)

// String names the class for logs.
func (c ErrorClass) String() string {
	switch c {
	case ErrorNone:
		return "none"
	case ErrorTransient:
		return "transient"
	case ErrorUnreachable:
		return "unreachable"
	case ErrorRejected:
		return "rejected"
	}
	return "unknown"
}

// ClassifyError says what err, the error of a statement or of a
// connection attempt, tells about the database (see ErrorClass). An error
// that carries no SQLSTATE is ErrorUnreachable: nothing shows that the
// server answered. A context that ended is ErrorUnreachable too; callers
// tell their own stop apart by their context before they ask.
func ClassifyError(err error) ErrorClass {
	if err == nil {
		return ErrorNone
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return ErrorUnreachable
	}
	switch pg.Code {
	case "57014": // query_canceled: statement_timeout, or a cancel request
		return ErrorTransient
	case "57P01", "57P02", "57P03", "57P04", "57P05":
		// admin_shutdown, crash_shutdown, cannot_connect_now,
		// database_dropped, idle_session_timeout: the session is gone.
		return ErrorUnreachable
	}
	if len(pg.Code) < 2 {
		return ErrorRejected
	}
	switch pg.Code[:2] {
	case "08": // connection exception
		return ErrorUnreachable
	case "25", // invalid transaction state: read-only during recovery or after a failover
		"40", // transaction rollback: serialization failure, deadlock
		"53", // insufficient resources: too many connections, disk full, out of memory
		"55", // object not in prerequisite state: lock not available, object in use
		"57", // operator intervention (the rest of it)
		"58": // system error: I/O
		return ErrorTransient
	}
	return ErrorRejected
}

// ConnectionRefused reports whether err is a connection the server
// refused for want of a free slot (SQLSTATE 53300: max_connections, the
// slots reserved for superusers, or a role's or database's limit).
func ConnectionRefused(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "53300"
}

// StatementTimedOut reports whether err is a statement the server
// cancelled (SQLSTATE 57014: its statement_timeout, or a cancel request):
// the database answered, and a smaller statement may well pass.
func StatementTimedOut(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "57014"
}

// NoReply reports whether err is the client giving up on a statement the
// server had not answered within the client's own time limit, as opposed
// to a server that answered with an error or a connection known to be
// broken: the server may be slow rather than away, which only a ping can
// tell (see Store.Ping).
func NoReply(err error) bool {
	var pg *pgconn.PgError
	if err == nil || errors.As(err, &pg) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, io.EOF)
}

// SQLState is err's SQLSTATE, "" when it carries none.
func SQLState(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// Ping asks the database for an answer within ctx: nil when it answers,
// whatever its statements' timeouts. It is what tells a slow statement from
// a database that is away (see NoReply).
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}
