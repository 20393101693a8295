package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func TestClassifyError(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("finish jobs: %w", &pgconn.PgError{Code: code, Message: "m"})
	}
	for _, c := range []struct {
		name     string
		err      error
		want     store.ErrorClass
		timedOut bool
		noReply  bool
	}{
		{"nil", nil, store.ErrorNone, false, false},
		{"statement timeout", pg("57014"), store.ErrorTransient, true, false},
		{"serialization failure", pg("40001"), store.ErrorTransient, false, false},
		{"deadlock", pg("40P01"), store.ErrorTransient, false, false},
		{"too many connections", pg("53300"), store.ErrorTransient, false, false},
		{"disk full", pg("53100"), store.ErrorTransient, false, false},
		{"lock not available", pg("55P03"), store.ErrorTransient, false, false},
		{"read-only transaction", pg("25006"), store.ErrorTransient, false, false},
		{"I/O error", pg("58030"), store.ErrorTransient, false, false},
		{"connection failure", pg("08006"), store.ErrorUnreachable, false, false},
		{"cannot connect now", pg("57P03"), store.ErrorUnreachable, false, false},
		{"admin shutdown", pg("57P01"), store.ErrorUnreachable, false, false},
		{"check violation", pg("23514"), store.ErrorRejected, false, false},
		{"undefined table", pg("42P01"), store.ErrorRejected, false, false},
		{"bad password", pg("28P01"), store.ErrorRejected, false, false},
		{"closed connection", fmt.Errorf("finish jobs: %w", net.ErrClosed), store.ErrorUnreachable, false, false},
		{"eof", fmt.Errorf("finish jobs: %w", io.ErrUnexpectedEOF), store.ErrorUnreachable, false, false},
		{"client deadline", fmt.Errorf("finish jobs: %w", context.DeadlineExceeded), store.ErrorUnreachable, false, true},
		{"network timeout", fmt.Errorf("finish jobs: %w", os.ErrDeadlineExceeded), store.ErrorUnreachable, false, true},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, store.ErrorUnreachable, false, false},
	} {
		if got := store.ClassifyError(c.err); got != c.want {
			t.Errorf("%s: ClassifyError = %s, want %s", c.name, got, c.want)
		}
		if got := store.StatementTimedOut(c.err); got != c.timedOut {
			t.Errorf("%s: StatementTimedOut = %v, want %v", c.name, got, c.timedOut)
		}
		if got := store.NoReply(c.err); got != c.noReply {
			t.Errorf("%s: NoReply = %v, want %v", c.name, got, c.noReply)
		}
	}
}

// A real statement timeout, a real deadlock's error code and a real
// closed pool, as PostgreSQL and pgx report them: a timeout is a database
// that answered, and so is the ping beside it; a closed pool is not.
func TestClassifyErrorOfARealServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["statement_timeout"] = "250ms" // the ping beside it must finish within it
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := store.New(pool)
	_, err = pool.Exec(ctx, `SELECT pg_sleep(5)`)
	if store.ClassifyError(err) != store.ErrorTransient || !store.StatementTimedOut(err) || store.NoReply(err) {
		t.Errorf("a statement past statement_timeout: %v is %s (timed out %v, no reply %v), want transient, timed out",
			err, store.ClassifyError(err), store.StatementTimedOut(err), store.NoReply(err))
	}
	if err := st.Ping(ctx); err != nil {
		t.Errorf("ping beside a statement timeout: %v", err)
	}
	patient, err := pgxpool.New(ctx, url) // no statement timeout
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	// Without the timeout: a busy machine may take longer than it to
	// compile and run the block.
	_, err = patient.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40P01'; END $$`)
	if store.ClassifyError(err) != store.ErrorTransient || store.SQLState(err) != "40P01" {
		t.Errorf("a deadlock: %v is %s (SQLSTATE %q), want transient 40P01", err, store.ClassifyError(err), store.SQLState(err))
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = patient.Exec(cctx, `SELECT pg_sleep(5)`)
	if !store.NoReply(err) || store.ClassifyError(err) != store.ErrorUnreachable {
		t.Errorf("a statement the client gave up on: %v is %s (no reply %v), want unreachable with no reply",
			err, store.ClassifyError(err), store.NoReply(err))
	}
	pool.Close()
	_, err = pool.Exec(ctx, `SELECT 1`)
	if store.ClassifyError(err) != store.ErrorUnreachable || store.NoReply(err) {
		t.Errorf("a closed pool: %v is %s (no reply %v), want unreachable", err, store.ClassifyError(err), store.NoReply(err))
	}
	if err := st.Ping(ctx); err == nil {
		t.Error("a closed pool answers a ping")
	}
}
