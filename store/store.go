// Package store holds every SQL statement fleet runs. Each statement is a
// method named noun-first (JobClaim, JobCompleteMany) with a params struct
// where it takes more than a couple of values. Nothing outside this package
// writes SQL.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBTX is what a statement runs on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

var (
	_ DBTX = (*pgxpool.Pool)(nil)
	_ DBTX = (pgx.Tx)(nil)
	_ DBTX = (*pgx.Conn)(nil)
)

// Store runs fleet's statements on a connection pool.
type Store struct {
	pool   *pgxpool.Pool
	faults Faults
	// listen is what Listen connects with: nil for the pool's own
	// connection settings (see WithListen).
	listen *pgx.ConnConfig
	// noListen: Listen has no connection to listen on (see WithoutListen).
	noListen bool
	// now is the clock of the clocked statements: nil for the database's
	// now() (see WithClock).
	now func() time.Time
}

// Faults injects faults into a Store's statements, for the fault suite.
// The statements that take, end or release a job's attempt pass through
// it, named "JobClaim", "JobFinishMany", "JobRelease" or "releaseLost"
// (the releases of lost jobs).
type Faults interface {
	// Before runs before the statement: an error fails it unrun, as an
	// unreachable database would; it may sleep to delay the statement.
	Before(ctx context.Context, statement string) error
	// After runs once the statement has succeeded (JobFinishMany and
	// JobRelease): an error is returned in place of its result, as when
	// the reply is lost after the commit.
	After(ctx context.Context, statement string) error
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Pool is the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// WithFaults returns a Store on the same pool whose statements pass
// through f first. Production code never calls it.
func (s *Store) WithFaults(f Faults) *Store {
	c := *s
	c.faults = f
	return &c
}

// WithListen returns a Store on the same pool whose Listen connects with
// cfg instead of the pool's settings: a direct connection to the same
// database when the pool goes through a pooler that cannot hold a LISTEN
// (one in transaction mode).
func (s *Store) WithListen(cfg *pgx.ConnConfig) *Store {
	c := *s
	c.listen, c.noListen = cfg, false
	return &c
}

// WithoutListen returns a Store on the same pool that has nothing to
// listen on: Listen fails at once with ErrNoListen, and whoever waits for
// notifications polls instead.
func (s *Store) WithoutListen() *Store {
	c := *s
	c.listen, c.noListen = nil, true
	return &c
}

// Listens reports whether Listen has a connection to listen on (see
// WithoutListen).
func (s *Store) Listens() bool { return !s.noListen }

// inject runs the store's Faults, if it has any, before statement.
func (s *Store) inject(ctx context.Context, statement string) error {
	if s.faults == nil {
		return nil
	}
	if err := s.faults.Before(ctx, statement); err != nil {
		return fmt.Errorf("injected fault: %w", err)
	}
	return nil
}

// injectAfter runs the store's Faults, if it has any, after statement
// succeeded.
func (s *Store) injectAfter(ctx context.Context, statement string) error {
	if s.faults == nil {
		return nil
	}
	if err := s.faults.After(ctx, statement); err != nil {
		return fmt.Errorf("injected fault after the commit: %w", err)
	}
	return nil
}

// NotifyChannel is the channel dispatches notify on; the payload is the queue.
const NotifyChannel = "queue_jobs"
