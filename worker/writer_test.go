package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func TestWriterIsolatesAnOutcomeTheDatabaseRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT 'default', 'n' FROM generate_series(1, 40)`); err != nil {
		t.Fatal(err)
	}
	jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 40, Worker: "w"})
	if err != nil || len(jobs) != 40 {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	w := newWriter(st, "w", "", slog.New(slog.NewTextHandler(io.Discard, nil)), writerHooks{})
	tries := 0
	w.sleep = func(context.Context, time.Duration) error { tries++; return nil }
	now := time.Now()
	var bad int64
	for i, j := range jobs {
		o := store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now}
		if i == 17 {
			// fleet_jobs refuses this status: the whole batch fails until
			// this outcome is alone.
			o.Status, bad = "bogus", j.ID
		}
		w.add(o)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.run(rctx); close(done) }()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	err = w.drain(dctx)
	cancel()
	<-done
	if err != nil {
		t.Fatalf("writer stalled: %v (unsaved %d)", err, w.Unsaved())
	}
	var left, reserved, history int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(reserved_by) FROM queue_jobs`).Scan(&left, &reserved); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fleet_jobs`).Scan(&history); err != nil {
		t.Fatal(err)
	}
	if left != 1 || reserved != 0 || history != 39 {
		t.Errorf("after the write: %d jobs left (%d reserved), %d history rows; want the rejected job released and 39 written", left, reserved, history)
	}
	var id int64
	var lastError string
	if err := pool.QueryRow(ctx, `SELECT id, last_error FROM queue_jobs`).Scan(&id, &lastError); err != nil {
		t.Fatal(err)
	}
	if id != bad || lastError == "" {
		t.Errorf("left job %d (last_error %q), want the rejected job %d with a reason", id, lastError, bad)
	}
	if tries == 0 {
		t.Error("the writer never retried before splitting")
	}
}

// An outcome write that fails and recovers over and over (here every other
// statement) logs its first failure and its first recovery, not one line
// per flap: 216 flaps in a few seconds give two lines.
func TestWriterFlappingLogsOncePerMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	for _, sql := range []string{
		`CREATE SEQUENCE flap`,
		`CREATE FUNCTION flap() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     IF nextval('flap') % 2 = 1 THEN
		         RAISE EXCEPTION 'injected: the write flaps' USING ERRCODE = '08006';
		     END IF;
		     RETURN NULL;
		 END $$`,
		// On the table the completed attempts are written to (fleet's
		// statements name it, not fleet_jobs).
		`CREATE TRIGGER flap BEFORE INSERT ON fleet_jobs_completed FOR EACH STATEMENT EXECUTE FUNCTION flap()`,
		`INSERT INTO queue_jobs (queue, name) SELECT 'default', 'n' FROM generate_series(1, 216)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 216, Worker: "w"})
	if err != nil || len(jobs) != 216 {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	var logs syncbuf.Buffer
	w := newWriter(st, "w", "", slog.New(slog.NewTextHandler(&logs, nil)), writerHooks{})
	w.sleep = func(context.Context, time.Duration) error { return nil }
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	now := time.Now()
	for _, j := range jobs {
		w.add(store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now})
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		err := w.drain(dctx) // one batch of one: a failure, then a recovery
		dcancel()
		if err != nil {
			t.Fatalf("writer stalled: %v", err)
		}
	}
	var flaps int64
	if err := pool.QueryRow(ctx, `SELECT last_value FROM flap`).Scan(&flaps); err != nil || flaps < 2*216 {
		t.Fatalf("%d statements reached the trigger (%v), want a failure and a recovery per outcome", flaps, err)
	}
	out := logs.String()
	if f, r := strings.Count(out, "write finished jobs failed"), strings.Count(out, "works again"); f != 1 || r != 1 {
		t.Errorf("%d flaps logged %d failure and %d recovery lines, want 1 and 1:\n%s", flaps/2, f, r, out)
	}
}
