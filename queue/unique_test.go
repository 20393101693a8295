package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// finish claims the job and writes its outcome, as a worker would.
func finish(t *testing.T, pool *pgxpool.Pool, id int64, kind store.OutcomeKind) {
	t.Helper()
	st := store.New(pool)
	ctx := context.Background()
	jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 100, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID != id {
			continue
		}
		now := time.Now()
		status := "completed"
		if kind != store.OutcomeCompleted {
			status = "failed"
		}
		res, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: []store.JobOutcome{{
			Lease: j.Lease(), Kind: kind, Status: status, Error: "x", MaxTries: 1, Queue: j.Queue, Name: j.Name,
			Attempt: j.Attempt, StartedAt: now, FinishedAt: now}}})
		if err != nil || res.Written != 1 {
			t.Fatalf("finish job %d: %+v, %v", id, res, err)
		}
		return
	}
	t.Fatalf("job %d not claimed", id)
}

// 16 goroutines dispatching the same unique job insert exactly one; every
// other call is told it is a duplicate, with that job's id.
func TestUniqueDispatchersRacingInsertOneJob(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	const n = 16
	ids := make([]int64, n)
	dup := make([]bool, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			j := queue.NewJob("report.build", map[string]int{"customer": 42}).Unique(queue.Unique{Key: "customer:42", Period: time.Hour})
			res, err := c.Dispatch(context.Background(), j)
			if err != nil {
				t.Error(err)
			}
			ids[i], dup[i] = res.ID, res.Duplicate
		})
	}
	close(start)
	wg.Wait()
	inserted := 0
	for i := range n {
		if !dup[i] {
			inserted++
		}
		if ids[i] != ids[0] || ids[i] == 0 {
			t.Errorf("call %d got id %d, call 0 got %d: every call must name the one job", i, ids[i], ids[0])
		}
	}
	if inserted != 1 {
		t.Errorf("%d calls inserted, want 1", inserted)
	}
	if k := countRows(t, pool, `SELECT count(*) FROM queue_jobs`); k != 1 {
		t.Errorf("%d rows, want 1", k)
	}
}

// After the job completes, a dispatch in the same period is a duplicate
// only when completed jobs count; after it failed for good, never.
func TestUniqueCompletedCountsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	for _, completed := range []bool{false, true} {
		t.Run(fmt.Sprintf("completed=%v", completed), func(t *testing.T) {
			u := queue.Unique{Key: fmt.Sprintf("k-%v", completed), Period: time.Hour, Completed: completed}
			spec := queue.NewJob("sync", nil).Unique(u)
			first, err := c.Dispatch(ctx, spec)
			id := first.ID
			if err != nil || first.Duplicate {
				t.Fatalf("first dispatch: %+v %v", first, err)
			}
			// One spec, dispatched again: the dispatch left it as it was.
			if again, err := c.Dispatch(ctx, spec); err != nil || !again.Duplicate || again.ID != id {
				t.Fatalf("while queued: %+v err %v, want a duplicate of %d", again, err, id)
			}
			finish(t, pool, id, store.OutcomeCompleted)
			after, err := c.Dispatch(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if after.Duplicate != completed {
				t.Fatalf("after completion: duplicate = %v, want %v", after.Duplicate, completed)
			}
			if completed && after.ID != id {
				t.Fatalf("duplicate of %d, want of the completed job %d", after.ID, id)
			}
		})
	}
	// A kept key whose job failed for good is free again.
	u := queue.Unique{Key: "fails", Period: time.Hour, Completed: true}
	idRes, err := c.Dispatch(ctx, queue.NewJob("sync", nil).Unique(u))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	finish(t, pool, id, store.OutcomeFailed)
	if next, err := c.Dispatch(ctx, queue.NewJob("sync", nil).Unique(u)); err != nil || next.Duplicate || next.ID == id {
		t.Fatalf("after a failure: %+v err %v, want a new job", next, err)
	}
}

// The key is the name plus what the job is unique by: the payload compared
// as a JSON value, chosen fields, the queue.
func TestUniqueKeyParts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	dispatch := func(j *queue.JobSpec) bool {
		t.Helper()
		res, err := c.Dispatch(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		return res.Duplicate
	}
	args := queue.Unique{ByArgs: true}
	if dispatch(queue.NewJob("a", []byte(`{"x": 1, "y": [1, 2]}`)).Unique(args)) {
		t.Fatal("first by-args job is a duplicate")
	}
	if !dispatch(queue.NewJob("a", []byte(`{"y":[1,2],"x":1}`)).Unique(args)) {
		t.Error("an equal payload written differently is not a duplicate")
	}
	if dispatch(queue.NewJob("a", []byte(`{"x": 2, "y": [1, 2]}`)).Unique(args)) {
		t.Error("another payload is a duplicate")
	}
	if dispatch(queue.NewJob("b", []byte(`{"x": 1, "y": [1, 2]}`)).Unique(args)) {
		t.Error("the same payload under another name is a duplicate")
	}
	fields := queue.Unique{Fields: []string{"tenant"}}
	if dispatch(queue.NewJob("c", map[string]any{"tenant": 7, "n": 1}).Unique(fields)) {
		t.Fatal("first by-field job is a duplicate")
	}
	if !dispatch(queue.NewJob("c", map[string]any{"tenant": 7, "n": 2}).Unique(fields)) {
		t.Error("a job with the same field is not a duplicate")
	}
	if dispatch(queue.NewJob("c", map[string]any{"tenant": 8, "n": 1}).Unique(fields)) {
		t.Error("a job with another field value is a duplicate")
	}
	across := queue.Unique{Key: "k"}
	if dispatch(queue.NewJob("d", nil).OnQueue("q1").Unique(across)) {
		t.Fatal("first keyed job is a duplicate")
	}
	if !dispatch(queue.NewJob("d", nil).OnQueue("q2").Unique(across)) {
		t.Error("without ByQueue, the key is not unique across queues")
	}
	byQueue := queue.Unique{Key: "k", ByQueue: true}
	if dispatch(queue.NewJob("e", nil).OnQueue("q1").Unique(byQueue)) || dispatch(queue.NewJob("e", nil).OnQueue("q2").Unique(byQueue)) {
		t.Error("with ByQueue, jobs of two queues are duplicates")
	}
	var key string
	if err := pool.QueryRow(ctx, `SELECT unique_key FROM queue_jobs WHERE name = 'e' AND queue = 'q1'`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if key != "e|q=q1|k=k" {
		t.Errorf("stored key %q, want e|q=q1|k=k", key)
	}
}

// A period aligned to the clock: the next period's job is not a duplicate.
func TestUniquePeriodIsAlignedToTheClock(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	u := queue.Unique{Key: "tick", Period: time.Second}
	var periods []string
	deadline := time.Now().Add(5 * time.Second)
	for len(periods) < 2 && time.Now().Before(deadline) {
		res, err := c.Dispatch(ctx, queue.NewJob("p", nil).Unique(u))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Duplicate {
			var key string
			if err := pool.QueryRow(ctx, `SELECT unique_key FROM queue_jobs WHERE id = $1`, res.ID).Scan(&key); err != nil {
				t.Fatal(err)
			}
			periods = append(periods, key)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(periods) != 2 {
		t.Fatalf("jobs inserted in 5 s of one-second periods: %v", periods)
	}
	for _, k := range periods {
		ms := k[strings.LastIndex(k, "|p=")+3:]
		if !strings.HasSuffix(ms, "000") {
			t.Errorf("key %q: its period does not start on a second", k)
		}
	}
}

// DispatchMany treats each job on its own: later copies of a key in the
// batch are duplicates of the first, plain jobs are inserted as always.
func TestUniqueInDispatchManyAndTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	u := queue.Unique{Key: "batch"}
	batch := []*queue.JobSpec{queue.NewJob("m", nil).Unique(u), queue.NewJob("plain", nil), queue.NewJob("m", nil).Unique(u)}
	res, err := c.DispatchMany(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || res[1].Duplicate || !res[2].Duplicate || res[2].ID != res[0].ID || res[1].ID == res[0].ID {
		t.Fatalf("results %+v", res)
	}
	if k := countRows(t, pool, `SELECT count(*) FROM queue_jobs`); k != 2 {
		t.Fatalf("%d rows, want 2", k)
	}

	// A key taken in an open transaction: a concurrent dispatch waits for
	// it, then is a duplicate if it committed, or inserts if it rolled back.
	for _, commit := range []bool{true, false} {
		key := queue.Unique{Key: fmt.Sprintf("tx-%v", commit)}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if inTx, err := c.DispatchTx(ctx, tx, queue.NewJob("t", nil).Unique(key)); err != nil || inTx.Duplicate {
			t.Fatalf("in tx: %v %+v", err, inTx)
		}
		var outside queue.DispatchResult
		done := make(chan error, 1)
		go func() {
			var err error
			outside, err = c.Dispatch(ctx, queue.NewJob("t", nil).Unique(key))
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("a dispatch did not wait for the transaction holding its key: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if outside.Duplicate != commit {
			t.Errorf("commit=%v: the waiting dispatch's duplicate = %v", commit, outside.Duplicate)
		}
	}
}

// Bad uniqueness is an error naming the field, and inserts nothing.
func TestUniqueRejectsBadOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	cases := map[string]queue.Unique{
		"Unique.Completed": {Completed: true},
		"Unique.Period":    {Period: time.Millisecond},
		"Unique.Key":       {Key: "a\nb"},
		"Unique.Fields":    {Fields: []string{""}},
	}
	for want, u := range cases {
		_, err := c.DispatchMany(context.Background(), []*queue.JobSpec{queue.NewJob("ok", nil), queue.NewJob("x", nil).Unique(u)})
		if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an invalid-job error naming %s", u, err, want)
		}
	}
	if k := countRows(t, pool, `SELECT count(*) FROM queue_jobs`); k != 0 {
		t.Errorf("%d rows inserted by rejected batches", k)
	}
}

// A unique job under a concurrency limit keeps both promises: a duplicate
// takes no slot, and the others are parked until the masters' sweep gives
// them one, never more than the limit.
func TestUniqueJobUnderALimit(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "a"} {
		if _, err := c.Dispatch(ctx, queue.NewJob("export", nil).Unique(queue.Unique{Key: k}).Limit("tenant:7", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, pool, `SELECT count(*) FROM queue_jobs`); n != 3 {
		t.Fatalf("%d jobs, want 3 (the second \"a\" is a duplicate)", n)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM queue_jobs WHERE available_at = 'infinity' AND limit_key = 'tenant:7'`); n != 3 {
		t.Fatalf("%d parked, want all 3 until a sweep", n)
	}
	res, err := store.New(pool).LimitSweep(ctx, store.LimitSweepParams{Keys: 100, PerKey: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ready := countRows(t, pool, `SELECT count(*) FROM queue_jobs WHERE available_at <> 'infinity'`)
	if res.Unparked != 1 || ready != 1 {
		t.Fatalf("the sweep unparked %d (%d ready), want 1: the limit is 1", res.Unparked, ready)
	}
	if n := countRows(t, pool, `SELECT active FROM queue_limits WHERE key = 'tenant:7'`); n != 1 {
		t.Fatalf("the key counts %d active, want 1", n)
	}
}
