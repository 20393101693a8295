package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// An outcome writer counts on shards 0 to 15, a job completed in its
// handler's transaction on 16 to 31: the same statement, its shard range a
// parameter.
func TestFinishCountsOnItsShardRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) VALUES ('w', 'n'), ('tx', 'n')`); err != nil {
		t.Fatal(err)
	}
	outcome := func(j store.ClaimedJob) store.JobOutcome {
		now := time.Now()
		return store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
			Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now, RuntimeMs: 1}
	}
	claim := func(q string) store.ClaimedJob {
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: q, Limit: 1, Worker: "w"})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim %s: %d, %v", q, len(jobs), err)
		}
		return jobs[0]
	}
	if res, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: "w", Outcomes: []store.JobOutcome{outcome(claim("w"))}}); err != nil || res.Written != 1 {
		t.Fatalf("finish: %+v, %v", res, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.JobCompleteTx(ctx, tx, "w", "", outcome(claim("tx"))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][2]int{"w": {0, 15}, "tx": {16, 31}} {
		for _, table := range []string{"fleet_counters", "fleet_runtime_counters"} {
			var lo, hi, n int
			if err := pool.QueryRow(ctx, `SELECT coalesce(min(shard), -1), coalesce(max(shard), -1), count(*) FROM `+table+` WHERE queue = $1`, q).Scan(&lo, &hi, &n); err != nil {
				t.Fatal(err)
			}
			if n == 0 || lo < want[0] || hi > want[1] {
				t.Errorf("%s of queue %s: %d rows on shards %d..%d, want shards in %d..%d", table, q, n, lo, hi, want[0], want[1])
			}
		}
	}
}

// Each writing transaction gets a counter shard no other one holds, keeps
// it for the rest of the transaction, and gives it up at its end; only
// when every shard of its range is held does a writer fall back to its
// backend's own shard (and may wait there, as every writer used to). The
// writers' range (0 to 15) and the completing transactions' (16 to 31)
// have their own locks. A transaction that takes the shards' locks itself
// stands for the writers that hold them, so the test needs four
// connections, not seventeen.
func TestCounterShardsAreEachTransactionsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := poolOf(t, 4)
	var txs []pgx.Tx
	t.Cleanup(func() {
		for _, tx := range txs {
			_ = tx.Rollback(ctx)
		}
	})
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
		return tx
	}
	shardOf := func(tx pgx.Tx, base int) int {
		t.Helper()
		var s int
		if err := tx.QueryRow(ctx, `SELECT queue_counter_shard($1)`, base).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := begin(), begin()
	sa := shardOf(a, 0)
	sb := shardOf(b, 0)
	if sa < 0 || sa > 15 || sb < 0 || sb > 15 || sa == sb {
		t.Fatalf("two writers got shards %d and %d, want two distinct ones of 0..15", sa, sb)
	}
	if again := shardOf(a, 0); again != sa {
		t.Errorf("a transaction's second pick %d differs from its first %d", again, sa)
	}
	// Every other writer's shard held too: a fourth writer falls back to
	// its backend's, while a completing transaction gets one of its own.
	holder := begin()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(1718838116, s) FROM generate_series(0, 15) s WHERE s <> ALL ($1::int[])`,
		[]int{sa, sb}); err != nil {
		t.Fatal(err)
	}
	c := begin()
	var pid int
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if s := shardOf(c, 0); s != pid%16 {
		t.Errorf("with every writer's shard held, a writer got %d, want its backend's %d", s, pid%16)
	}
	if s := shardOf(c, 16); s < 16 || s > 31 {
		t.Errorf("a completing transaction got %d, want one of 16..31 (its range's locks are its own)", s)
	}
	// A shard is free again once its transaction has ended.
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	txs = txs[1:]
	if err := c.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	txs = txs[:len(txs)-1]
	if s := shardOf(begin(), 0); s != sa {
		t.Errorf("after the holder of shard %d committed, a new writer got %d", sa, s)
	}
}

// Many writers at once, most shards held meanwhile by another transaction
// (so that writers share the two left and fall back to their backends'),
// dispatching, claiming, finishing and releasing on two queues, each in
// transactions of its own: nothing deadlocks, and the counts
// (queue_counts, summed over the shards) and the counters (fleet_counters)
// come out exact.
func TestCountersExactUnderManyWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("many concurrent writers; runs without -short")
	}
	t.Parallel()
	ctx := context.Background()
	const writers, rounds, batch = 8, 20, 20
	pool := poolOf(t, writers+1)
	st := store.New(pool)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(1718838116, s) FROM generate_series(2, 15) s`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			q := []string{"a", "b"}[w%2]
			name := fmt.Sprintf("w%d", w)
			for range rounds {
				if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT $1, 'n' FROM generate_series(1, $2::int)`, q, batch); err != nil {
					errs <- err
					return
				}
				jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: q, Limit: batch, Worker: name})
				if err != nil {
					errs <- err
					return
				}
				// Half are completed, the other half given back.
				var done []store.JobOutcome
				var back []store.Lease
				for i, j := range jobs {
					if i%2 == 0 {
						now := time.Now()
						done = append(done, store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
							Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, StartedAt: now, FinishedAt: now, RuntimeMs: 1})
					} else {
						back = append(back, j.Lease())
					}
				}
				if _, err := st.JobFinishMany(ctx, store.JobFinishParams{Worker: name, Outcomes: done}); err != nil {
					errs <- err
					return
				}
				if _, err := st.JobRelease(ctx, store.JobReleaseParams{Leases: back, Uncount: true}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b"} {
		var unreserved, reserved, jobs, completed int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(unreserved), 0), coalesce(sum(reserved), 0) FROM queue_counts WHERE queue = $1`, q).Scan(&unreserved, &reserved); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs WHERE queue = $1 AND reserved_by IS NULL`, q).Scan(&jobs); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(completed), 0) FROM fleet_counters WHERE queue = $1`, q).Scan(&completed); err != nil {
			t.Fatal(err)
		}
		var history int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM fleet_jobs WHERE queue = $1 AND status = 'completed'`, q).Scan(&history); err != nil {
			t.Fatal(err)
		}
		if unreserved != jobs || reserved != 0 {
			t.Errorf("queue %s: queue_counts says %d unreserved and %d reserved, the table holds %d jobs, none reserved", q, unreserved, reserved, jobs)
		}
		if completed != history || completed == 0 {
			t.Errorf("queue %s: fleet_counters counts %d completed, the history %d", q, completed, history)
		}
	}
}

// poolOf is a pool of up to n connections on a test database of its own.
func poolOf(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(n)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
