// Package store holds every SQL statement fleet runs. Each statement is a
// method named noun-first (JobClaim, JobCompleteMany) with a params struct
// where it takes more than a couple of values. Nothing outside this package
// writes SQL.
package store

import (
	"context"

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
	pool *pgxpool.Pool
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Pool is the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// NotifyChannel is the channel dispatches notify on; the payload is the queue.
const NotifyChannel = "queue_jobs"
