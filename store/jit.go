package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL's JIT compiler starts when a plan's estimated cost passes
// jit_above_cost (100,000 by default) and then spends tens to hundreds of
// milliseconds compiling. Most of fleet's statements estimate a few
// thousand at most, but those that expand the masters' JSON reports with
// set-returning functions (jsonb_array_elements, jsonb_each: 100 rows
// each to the planner) estimate some 2,500 per live master: with 40
// masters they would compile for longer than they run.
//
// Those statements turn JIT off for their own transaction: set_config's
// third argument makes it local, and the batch runs both statements in
// one implicit transaction, in one round trip. A session-wide SET would
// not do: through a transaction pooler a session lasts one transaction
// (and a SET would stay behind on a server connection others get next),
// and a pool of the app's (fleet.New, metrics.NewCollector) sets nothing.

// noJITSQL turns JIT off until the end of the current transaction.
const noJITSQL = `SELECT set_config('jit', 'off', true)`

// queryNoJIT runs sql with JIT off for its transaction and hands its rows
// to fn.
func (s *Store) queryNoJIT(ctx context.Context, fn func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(noJITSQL)
	b.Queue(sql, args...).Query(fn)
	return s.pool.SendBatch(ctx, b).Close()
}

// queryRowNoJIT is queryNoJIT for a statement of one row, scanned into
// dest.
func (s *Store) queryRowNoJIT(ctx context.Context, dest []any, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(noJITSQL)
	b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
	return s.pool.SendBatch(ctx, b).Close()
}
