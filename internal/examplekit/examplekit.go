// Package examplekit runs the Example functions of fleet's packages on a
// real PostgreSQL: Pool gives one a fresh, migrated database of the test
// harness, and T stands in for the *testing.T that fleettest's functions
// take, which an Example has none of. The package's TestMain must run the
// harness (pgtest.Main or fleettest.Main): the databases come from it.
package examplekit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
)

// Pool returns a pool on a fresh database with fleet's tables, and done,
// which closes the pool and the database (pgtest drops it later). It
// panics when no database can be had, which fails the Example.
func Pool() (pool *pgxpool.Pool, done func()) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, drop, err := pgtest.NewDatabase(ctx)
	if err != nil {
		panic(err)
	}
	pool, err = pgxpool.New(ctx, url)
	if err != nil {
		_ = drop()
		panic(fmt.Errorf("examplekit: open pool: %w", err))
	}
	return pool, func() {
		pool.Close()
		if err := drop(); err != nil {
			panic(err)
		}
	}
}

// T is a testing.TB for an Example: it logs nothing, fails by panicking
// with the failure's message (which fails the Example), and runs its
// cleanups, last first, at Done.
type T struct {
	testing.TB // nil: a method T does not define panics
	ctx        context.Context
	cancel     context.CancelFunc
	cleanups   []func()
}

// NewT returns a T; call Done when the Example is over if anything may
// have registered a cleanup (fleettest.Pool does).
func NewT() *T {
	ctx, cancel := context.WithCancel(context.Background())
	return &T{ctx: ctx, cancel: cancel}
}

// Done cancels the context and runs the cleanups.
func (t *T) Done() {
	t.cancel()
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

func (t *T) Helper()                           {}
func (t *T) Context() context.Context          { return t.ctx }
func (t *T) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *T) Log(...any)                        {}
func (t *T) Logf(string, ...any)               {}
func (t *T) Error(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *T) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *T) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *T) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
