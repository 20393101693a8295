package store_test

import (
	"context"
	"testing"
	"time"

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
