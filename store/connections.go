package store

import (
	"context"
	"fmt"
)

// ServerConnections is what a server says of its connection slots (see
// ReadServerConnections).
type ServerConnections struct {
	// MaxConnections is max_connections.
	MaxConnections int
	// Reserved is superuser_reserved_connections plus reserved_connections
	// (PostgreSQL 16 and later; 0 before): the slots an ordinary role
	// never gets.
	Reserved int
	// InUse is the client sessions open on the whole server, every
	// database and role, the reading session's own not counted.
	InUse int
}

// ReadServerConnections reads the server's connection settings and the
// client sessions open, on q (a pool, a connection): one statement that
// every role may run. Background workers, autovacuum and WAL senders have
// slots of their own and are not counted. pg_stat_activity shows every
// role a row for every session, but the backend type only of its own
// (unless it has pg_read_all_stats): a row of another role whose type it
// cannot see counts when it has a user, which background processes of
// the server itself have not (the logical replication launcher, and an
// extension's background workers, are then counted too: a few more, never
// fewer).
func ReadServerConnections(ctx context.Context, q DBTX) (ServerConnections, error) {
	var sc ServerConnections
	err := q.QueryRow(ctx, `
		SELECT current_setting('max_connections')::int,
		       current_setting('superuser_reserved_connections')::int
		         + COALESCE(current_setting('reserved_connections', true)::int, 0),
		       (SELECT count(*)::int FROM pg_stat_activity
		        WHERE (backend_type = 'client backend' OR (backend_type IS NULL AND usesysid IS NOT NULL))
		          AND pid <> pg_backend_pid())`).
		Scan(&sc.MaxConnections, &sc.Reserved, &sc.InUse)
	if err != nil {
		return ServerConnections{}, fmt.Errorf("read the server's max_connections and the sessions open: %w", err)
	}
	return sc, nil
}
