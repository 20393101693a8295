package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// benchBacklog fills queue q with n ready jobs and vacuums the table.
func benchBacklog(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO queue_jobs (queue, name, available_at)
		SELECT 'q', 'n', now() - interval '1 hour' + g * interval '1 microsecond' FROM generate_series(1, $1) g`, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE queue_jobs`); err != nil {
		b.Fatal(err)
	}
	// The claims are fenced on member m: it must be live.
	if _, err := store.New(pool).MemberBeat(ctx, store.MemberBeatParams{Instance: "m", Name: "m", Host: "h", PID: 1, State: "running", TTL: time.Hour}, false); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJobClaim claims batches of 100 from a backlog of 1,000,000
// (b.N claims; -benchtime 100x keeps it within the backlog).
func BenchmarkJobClaim(b *testing.B) {
	pool := pgtest.Pool(b)
	st := store.New(pool)
	benchBacklog(b, pool, 1_000_000)
	for b.Loop() {
		jobs, err := st.JobClaim(b.Context(), store.JobClaimParams{Queue: "q", Limit: 100, Worker: "w", Master: "m"})
		if err != nil || len(jobs) != 100 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100, "µs/job")
}

// BenchmarkJobFinishMany writes batches of 1000 completed outcomes, with
// their history, for jobs claimed from a backlog.
func BenchmarkJobFinishMany(b *testing.B) {
	pool := pgtest.Pool(b)
	st := store.New(pool)
	benchBacklog(b, pool, 200_000)
	for b.Loop() {
		b.StopTimer()
		jobs, err := st.JobClaim(b.Context(), store.JobClaimParams{Queue: "q", Limit: 1000, Worker: "w", Master: "m"})
		if err != nil || len(jobs) != 1000 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		now := time.Now()
		outcomes := make([]store.JobOutcome, len(jobs))
		for i, j := range jobs {
			outcomes[i] = store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
				Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now}
		}
		b.StartTimer()
		res, err := st.JobFinishMany(b.Context(), store.JobFinishParams{Worker: "w", Master: "m", Outcomes: outcomes})
		if err != nil || res.Written != 1000 {
			b.Fatalf("finish: %+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "µs/job")
}

// BenchmarkClaimFinishCycle is one worker's cycle at concurrency 64: claim
// 64 jobs, then write their 64 completed outcomes with history, from a
// backlog of 200,000 (-benchtime 2000x keeps it within the backlog).
func BenchmarkClaimFinishCycle(b *testing.B) {
	pool := pgtest.Pool(b)
	st := store.New(pool)
	benchBacklog(b, pool, 200_000)
	outcomes := make([]store.JobOutcome, 0, 64)
	for b.Loop() {
		jobs, err := st.JobClaim(b.Context(), store.JobClaimParams{Queue: "q", Limit: 64, Worker: "w", Master: "m"})
		if err != nil || len(jobs) != 64 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		now := time.Now()
		outcomes = outcomes[:0]
		for _, j := range jobs {
			outcomes = append(outcomes, store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
				Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: now, FinishedAt: now})
		}
		res, err := st.JobFinishMany(b.Context(), store.JobFinishParams{Worker: "w", Master: "m", Outcomes: outcomes})
		if err != nil || res.Written != 64 {
			b.Fatalf("finish: %+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/64, "µs/job")
}
