package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/internal/testwait"
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

// claimForWriter dispatches n jobs and claims them for the writer's tests,
// and returns their outcomes, completed.
func claimForWriter(t *testing.T, pool *pgxpool.Pool, n int) []store.JobOutcome {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT 'default', 'n' FROM generate_series(1, $1)`, n); err != nil {
		t.Fatal(err)
	}
	jobs, err := store.New(pool).JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: n, Worker: "w"})
	if err != nil || len(jobs) != n {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	now := time.Now()
	out := make([]store.JobOutcome, len(jobs))
	for i, j := range jobs {
		out[i] = store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now}
	}
	return out
}

// runWriter runs w until every outcome added is written, failing the test
// if that does not happen within the hang deadline.
func runWriter(t *testing.T, w *writer) {
	t.Helper()
	ctx := context.Background()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.run(rctx); close(done) }()
	// The first batch is whatever was added before: kick the loop.
	select {
	case w.kick <- struct{}{}:
	default:
	}
	dctx, dcancel := context.WithTimeout(ctx, testwait.Hang)
	defer dcancel()
	err := w.drain(dctx)
	cancel()
	<-done
	if err != nil {
		t.Fatalf("writer stalled: %v (unsaved %d)", err, w.Unsaved())
	}
}

// A finish the server cancels for its statement timeout is tried again at
// once in halves, down to a size that passes, without a pause: 40
// outcomes whose statement times out past 8 jobs are written in
// statements of 5, each exactly once, and the log says so once.
func TestWriterSplitsAFinishThatTimesOut(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	outcomes := claimForWriter(t, pool, 40)
	for _, sql := range []string{
		// The statement timeout of a busy server, as the server reports it,
		// for any finish of more than 8 jobs.
		`CREATE FUNCTION slow_finish() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     IF (SELECT count(*) FROM gone) > 8 THEN
		         RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014';
		     END IF;
		     RETURN NULL;
		 END $$`,
		`CREATE TRIGGER slow_finish AFTER DELETE ON queue_jobs REFERENCING OLD TABLE AS gone
		 FOR EACH STATEMENT EXECUTE FUNCTION slow_finish()`,
	} {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var logs syncbuf.Buffer
	w := newWriter(store.New(pool), "w", "", slog.New(slog.NewTextHandler(&logs, nil)), writerHooks{})
	sleeps := 0
	w.sleep = func(context.Context, time.Duration) error { sleeps++; return nil }
	var splits, written []int
	w.sig.split.Init()
	w.sig.split.At(func(n int) { splits = append(splits, n) })
	w.sig.written.Init()
	w.sig.written.At(func(n int) { written = append(written, n) })
	for _, o := range outcomes {
		w.add(o)
	}
	runWriter(t, w)

	if len(splits) < 3 || splits[0] != 40 || splits[1] != 20 || splits[2] != 10 {
		t.Errorf("timed-out statements of %v jobs, want 40, 20, 10 first", splits)
	}
	sum := 0
	for _, n := range written {
		sum += n
		if n > 8 {
			t.Errorf("a statement of %d outcomes passed the injected timeout", n)
		}
	}
	if sum != 40 {
		t.Errorf("written batches %v: %d outcomes, want 40", written, sum)
	}
	if sleeps != 0 {
		t.Errorf("the writer paused %d times; a timed-out statement is split at once", sleeps)
	}
	var left, history int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM queue_jobs), (SELECT count(*) FROM fleet_jobs WHERE status = 'completed')`).
		Scan(&left, &history); err != nil {
		t.Fatal(err)
	}
	if left != 0 || history != 40 {
		t.Errorf("%d jobs left, %d completed history rows; want 0 and 40", left, history)
	}
	out := logs.String()
	if c := strings.Count(out, "statement timeout on a finish"); c != 1 || !strings.Contains(out, "statement timeout on a finish of 40 jobs; split into 2 of 20") {
		t.Errorf("%d split lines, want one saying 40 jobs were split into 2 of 20:\n%s", c, out)
	}
	if strings.Contains(out, "write finished jobs failed") {
		t.Errorf("a split statement logged as a failed write:\n%s", out)
	}
}

// Outcomes that finish while a statement fails join the try after it:
// the writer takes the oldest pending outcomes for each statement, the
// failed ones first, and pauses at most TransientRetryMax after a
// database that answered (here a deadlock), so no outcome waits for more
// than the statements ahead of it and that pause.
func TestWriterRetryTakesTheOutcomesThatFinishedMeanwhile(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	outcomes := claimForWriter(t, pool, 5)
	for _, sql := range []string{
		`CREATE SEQUENCE deadlock_once`,
		`CREATE FUNCTION deadlock_once() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     IF nextval('deadlock_once') = 1 THEN
		         RAISE EXCEPTION 'injected: deadlock detected' USING ERRCODE = '40P01';
		     END IF;
		     RETURN NULL;
		 END $$`,
		`CREATE TRIGGER deadlock_once BEFORE DELETE ON queue_jobs FOR EACH STATEMENT EXECUTE FUNCTION deadlock_once()`,
	} {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	w := newWriter(store.New(pool), "w", "", slog.New(slog.NewTextHandler(io.Discard, nil)), writerHooks{})
	var pauses []time.Duration
	w.sleep = func(_ context.Context, d time.Duration) error {
		pauses = append(pauses, d)
		for _, o := range outcomes[3:] { // two jobs finish during the pause
			w.add(o)
		}
		return nil
	}
	var written []int
	w.sig.written.Init()
	w.sig.written.At(func(n int) { written = append(written, n) })
	for _, o := range outcomes[:3] {
		w.add(o)
	}
	runWriter(t, w)
	if len(pauses) != 1 || pauses[0] > TransientRetryMax {
		t.Errorf("pauses %v, want one of at most %v", pauses, TransientRetryMax)
	}
	if len(written) != 1 || written[0] != 5 {
		t.Errorf("written batches %v, want the three that failed and the two that finished meanwhile in one", written)
	}
}
