package faults_test

// Faults injected into the statements of a real worker and a real store
// (store.Faults) on a real database: completion writes that fail, before
// their commit or after it, and releases racing completions.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// injector is a store.Faults: it fails the next calls of a statement,
// before or after it runs, and delays statements by a random time up to
// jitter.
type injector struct {
	mu     sync.Mutex
	before map[string]int // statement → failures still to inject before it
	after  map[string]int // statement → failures still to inject after it
	calls  map[string]int
	jitter time.Duration
}

var errInjected = errors.New("connection reset (injected)")

func (f *injector) Before(ctx context.Context, statement string) error {
	f.mu.Lock()
	f.calls[statement]++
	fail := f.before[statement] > 0
	if fail {
		f.before[statement]--
	}
	jitter := f.jitter
	f.mu.Unlock()
	if fail {
		return errInjected
	}
	if jitter > 0 {
		select {
		case <-time.After(rand.N(jitter)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *injector) After(_ context.Context, statement string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.after[statement] > 0 {
		f.after[statement]--
		return errInjected
	}
	return nil
}

func (f *injector) count(statement string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[statement]
}

func newInjector() *injector {
	return &injector{before: map[string]int{}, after: map[string]int{}, calls: map[string]int{}}
}

// beat writes a live member row for instance, so that workers under it
// may claim.
func beat(t *testing.T, st *store.Store, instance string) {
	t.Helper()
	if _, err := st.MemberBeat(context.Background(), store.MemberBeatParams{
		Instance: instance, Name: instance, Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A worker whose completion writes fail twice (the database unreachable,
// the statement never run) keeps its outcomes and writes them once the
// database answers: every job has exactly one 'completed' history row,
// ran once, and nothing is failed or left behind.
func TestCompletionWritesFailingTwiceBeforeTheirCommitWriteEachOutcomeOnce(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	f := newInjector()
	f.before["JobFinishMany"] = 2
	testFailingCompletionWrites(t, f)
}

// The same with the reply lost after the commit, twice: the worker cannot
// tell a write that failed from one that was committed, so it writes again;
// the lease check makes the second write change nothing, so no attempt is
// recorded twice.
func TestCompletionWritesWhoseReplyIsLostTwiceWriteEachOutcomeOnce(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	f := newInjector()
	f.after["JobFinishMany"] = 2
	testFailingCompletionWrites(t, f)
}

func testFailingCompletionWrites(t *testing.T, f *injector) {
	const n = 200
	pool := pgtest.Pool(t)
	st := store.New(pool)
	beat(t, st, "m-writes")
	client := queue.NewClient(pool, queue.Defaults{Tries: 3})
	jobs := make([]*queue.JobSpec, n)
	for i := range jobs {
		jobs[i] = queue.NewJob("test.count", map[string]int{"i": i})
	}
	idsRes, err := client.DispatchMany(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	ids := queue.IDs(idsRes)
	var mu sync.Mutex
	runs := map[int64]int{}
	reg := queue.NewRegistry()
	reg.Handle("test.count", func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	})
	w, err := worker.New(st.WithFaults(f), reg, worker.Config{
		Queues: []string{"default"}, Concurrency: 8, StopWhenEmpty: true, Master: "m-writes",
		PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := w.Run(ctx)
	if err != nil || res.Reason != spawner.ExitEmpty {
		t.Fatalf("worker ended with %+v, %v; want empty", res, err)
	}
	if got := f.count("JobFinishMany"); got < 3 {
		t.Fatalf("%d completion writes; the two injected failures were not both met", got)
	}
	if k := count(t, pool, `SELECT count(*) FROM queue_jobs`); k != 0 {
		t.Errorf("%d jobs left in queue_jobs", k)
	}
	if k := count(t, pool, `SELECT count(*) FROM queue_failed_jobs`); k != 0 {
		t.Errorf("%d jobs failed", k)
	}
	for _, id := range ids {
		if c := count(t, pool, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1`, id); c != 1 {
			t.Errorf("job %d has %d history rows, want 1", id, c)
		}
		if c := count(t, pool, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'completed'`, id); c != 1 {
			t.Errorf("job %d has %d 'completed' history rows, want 1", id, c)
		}
		if runs[id] != 1 {
			t.Errorf("job %d ran %d times", id, runs[id])
		}
	}
	if c := count(t, pool, `SELECT coalesce(sum(processed), 0)::int FROM fleet_counters`); c != n {
		t.Errorf("processed counter = %d, want %d", c, n)
	}
}

// A holder's outcomes race the release of its jobs by another master
// (its member row seen expired), with random delays on both statements,
// round after round: whichever statement wins, each attempt ends exactly
// one way. A completed or failed job is never made pending again or
// recorded as lost; a released one is never recorded as completed or
// failed; and every attempt has exactly one history row.
func TestReleaseRacingCompletionNeverOverwritesATerminalState(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	const (
		rounds   = 150
		perRound = 20 // 3,000 races in all
		instance = "m-race"
	)
	pool := pgtest.Pool(t)
	f := newInjector()
	f.jitter = 2 * time.Millisecond
	st := store.New(pool).WithFaults(f)
	client := queue.NewClient(pool, queue.Defaults{Tries: 3})
	ctx := context.Background()
	var finishWon, releaseWon int
	var deadlocks atomic.Int64
	for round := range rounds {
		beat(t, st, instance)
		jobs := make([]*queue.JobSpec, perRound)
		for i := range jobs {
			// Half of the jobs have a single try: released, they fail as
			// lost instead of coming back.
			jobs[i] = queue.NewJob("test.race", nil).Tries(1 + 2*(i%2))
		}
		if _, err := client.DispatchMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		claimed, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: perRound, Worker: "w-race", Master: instance})
		if err != nil || len(claimed) != perRound {
			t.Fatalf("round %d: claimed %d jobs, %v", round, len(claimed), err)
		}
		// The holder's member row expires, as when its master froze.
		if _, err := pool.Exec(ctx, `UPDATE fleet_masters SET expires_at = now() - interval '1 second' WHERE instance = $1`, instance); err != nil {
			t.Fatal(err)
		}
		outcomes := make([]store.JobOutcome, len(claimed))
		kinds := map[int64]store.OutcomeKind{}
		now := time.Now()
		for i, j := range claimed {
			o := store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
				Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt,
				StartedAt: now, FinishedAt: now, MaxTries: 3}
			switch i % 4 {
			case 1:
				o.Kind, o.Status, o.Error = store.OutcomeFailed, "failed", "boom"
			case 2:
				o.Kind, o.Status, o.Error, o.Delay = store.OutcomeRetried, "failed", "again", time.Hour
			}
			outcomes[i], kinds[j.ID] = o, o.Kind
		}
		var wg sync.WaitGroup
		var fin store.JobFinishResult
		var finErr, relErr error
		var rel store.LostJobs
		wg.Go(func() {
			fin, finErr = retryDeadlock(&deadlocks, func() (store.JobFinishResult, error) {
				return st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w-race", Master: instance, Outcomes: outcomes})
			})
		})
		wg.Go(func() {
			rel, relErr = retryDeadlock(&deadlocks, func() (store.LostJobs, error) {
				return st.MemberRelease(ctx, []string{instance}, 3)
			})
		})
		wg.Wait()
		if finErr != nil || relErr != nil {
			t.Fatalf("round %d: finish %v, release %v", round, finErr, relErr)
		}
		lost := map[int64]bool{}
		for _, l := range fin.Lost {
			lost[l.ID] = true
		}
		if fin.Written+int(rel.Released+rel.Failed) != perRound {
			t.Fatalf("round %d: %d outcomes written and %d+%d jobs released, for %d attempts",
				round, fin.Written, rel.Released, rel.Failed, perRound)
		}
		for _, j := range claimed {
			checkRaced(t, pool, j, kinds[j.ID], lost[j.ID])
		}
		finishWon += fin.Written
		releaseWon += int(rel.Released + rel.Failed)
		if _, err := pool.Exec(ctx, `DELETE FROM queue_jobs`); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d races: the outcome was written first in %d, the release in %d; %d deadlocks retried",
		rounds*perRound, finishWon, releaseWon, deadlocks.Load())
	// Both orders must have happened many times, or the test raced nothing.
	if finishWon < rounds || releaseWon < rounds {
		t.Errorf("the race went one way too often (outcome first %d, release first %d): the delays do not interleave the statements", finishWon, releaseWon)
	}
}

// checkRaced checks how one raced attempt ended: as its outcome kind says
// when its outcome was written (lost false), as a release otherwise.
func checkRaced(t *testing.T, pool *pgxpool.Pool, j store.ClaimedJob, kind store.OutcomeKind, released bool) {
	t.Helper()
	var pending, reserved, failed int
	var history []string
	err := pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM queue_jobs WHERE id = $1)::int,
		       (SELECT count(*) FROM queue_jobs WHERE id = $1 AND lease IS NOT NULL)::int,
		       (SELECT count(*) FROM queue_failed_jobs WHERE job_id = $1)::int,
		       ARRAY(SELECT status FROM fleet_jobs WHERE job_id = $1 ORDER BY status)`, j.ID).
		Scan(&pending, &reserved, &failed, &history)
	if err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf("pending %d, reserved %d, failed %d, history %v", pending, reserved, failed, history)
	if reserved != 0 || len(history) != 1 || pending+failed > 1 {
		t.Fatalf("job %d (tries %d, outcome %s, released %v): %s", j.ID, j.MaxTries, kind, released, state)
	}
	var want string
	switch {
	case released && j.MaxTries == 1:
		want = "pending 0, failed 1, history [lost]"
	case released:
		want = "pending 1, failed 0, history [lost]"
	case kind == store.OutcomeCompleted:
		want = "pending 0, failed 0, history [completed]"
	case kind == store.OutcomeFailed:
		want = "pending 0, failed 1, history [failed]"
	default: // retried
		want = "pending 1, failed 0, history [failed]"
	}
	if got := fmt.Sprintf("pending %d, failed %d, history %v", pending, failed, history); got != want {
		t.Fatalf("job %d (tries %d, outcome %s, released %v): %s, want %s", j.ID, j.MaxTries, kind, released, got, want)
	}
}

// retryDeadlock runs fn again while PostgreSQL breaks a deadlock by failing
// it, as the worker's writer and the master's release (next tick) do.
func retryDeadlock[T any](n *atomic.Int64, fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			n.Add(1)
			continue
		}
		return v, err
	}
}
