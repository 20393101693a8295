package worker

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// refuseFinish fails the outcome writes as a server with no connection
// left does (SQLSTATE 53300) while refusing holds.
type refuseFinish struct{ refusing atomic.Bool }

func (f *refuseFinish) Before(_ context.Context, statement string) error {
	if statement == "JobFinishMany" && f.refusing.Load() {
		return &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}
	}
	return nil
}
func (f *refuseFinish) After(context.Context, string) error { return nil }

// While the server refuses the writer a connection, its outcomes are
// kept, retried, and counted as stalled (what the heartbeat tells the
// master); once it takes them, every one is written once and nothing is
// stalled.
func TestWriterKeepsOutcomesTheServerHasNoConnectionFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	faults := &refuseFinish{}
	faults.refusing.Store(true)
	st := store.New(pool)
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT 'default', 'n' FROM generate_series(1, 20)`); err != nil {
		t.Fatal(err)
	}
	jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 20, Worker: "w"})
	if err != nil || len(jobs) != 20 {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	w := newWriter(st.WithFaults(faults), "w", "", slog.New(slog.NewTextHandler(io.Discard, nil)), writerHooks{})
	var tries atomic.Int64
	w.sleep = func(ctx context.Context, _ time.Duration) error {
		tries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
			return nil
		}
	}
	if w.Stalled() != 0 {
		t.Fatalf("stalled %d before any write", w.Stalled())
	}
	now := time.Now()
	for _, j := range jobs {
		w.add(store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now})
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	testwait.Eventually(t, testwait.Hang, "the writer says its 20 outcomes are stalled, after a few tries", func() bool {
		return w.Stalled() == 20 && tries.Load() >= 5
	})
	if w.Unsaved() != 20 {
		t.Fatalf("unsaved %d while refused, want 20", w.Unsaved())
	}
	faults.refusing.Store(false)
	dctx, dcancel := context.WithTimeout(ctx, testwait.Hang)
	defer dcancel()
	if err := w.drain(dctx); err != nil {
		t.Fatalf("the writer did not write once the server took it: %v", err)
	}
	if w.Stalled() != 0 {
		t.Errorf("stalled %d once written", w.Stalled())
	}
	var left, history, attempts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempt = 1) FROM fleet_jobs WHERE status = 'completed'`).Scan(&history, &attempts); err != nil {
		t.Fatal(err)
	}
	if left != 0 || history != 20 || attempts != 20 {
		t.Errorf("%d jobs left, %d completed rows (%d of attempt 1), want 0, 20, 20", left, history, attempts)
	}
}
