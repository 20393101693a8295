package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Recent runtimes come from the per-minute queue snapshots of fleet_metrics
// (see MetricsSnapshot), never from fleet_jobs: reading them costs an index
// range scan of fleet_metrics' (taken_at, kind, subject) key over a few
// minutes, that is a few rows per queue and job name, however much history
// fleet_jobs holds and however long the backlog. The price is that the
// figures cover complete minutes only and lag by up to a minute (plus the
// moment the master takes to write the snapshot once a minute has ended).

// recentCTE defines the CTE "recent" (queue, jobs, avg_ms, last_minute),
// one row per queue that finished attempts in the snapshots of the last 5
// complete minutes, [date_trunc('minute', now) - 5 minutes,
// date_trunc('minute', now)), now being the statement's clock (see
// clockSQL):
//
//   - jobs adds up their attempts, of every status (lost ones included);
//   - avg_ms is the mean runtime over them, each minute's mean weighted by
//     its attempts; minutes whose mean is 0 are left out, as the snapshot
//     writes 0 when no attempt of the minute was timed (only lost ones);
//     NULL when no minute is left;
//   - last_minute is the attempts of the newest snapshot minute of the last
//     two: the minute before the current one once its snapshot is written,
//     until then the one before that, so the figure never drops to 0 while
//     the snapshot is on its way. A minute in which no queue had history or
//     backlog leaves no rows, so the minute before stands in for it until
//     the next snapshot.
func recentCTE(now string) string {
	return `
	rsnap AS (
		SELECT subject AS queue, taken_at, jobs, runtime_mean_ms
		FROM fleet_metrics
		WHERE taken_at >= date_trunc('minute', ` + now + `) - interval '5 minutes'
		  AND taken_at < date_trunc('minute', ` + now + `) AND kind = 'queue'
	), rlast AS (
		SELECT max(taken_at) AS taken_at FROM rsnap
		WHERE taken_at >= date_trunc('minute', ` + now + `) - interval '2 minutes'
	), recent AS (
		SELECT s.queue, sum(s.jobs) AS jobs,
		       sum(s.runtime_mean_ms * s.jobs) FILTER (WHERE s.runtime_mean_ms > 0)
		           / NULLIF(sum(s.jobs) FILTER (WHERE s.runtime_mean_ms > 0), 0) AS avg_ms,
		       COALESCE(sum(s.jobs) FILTER (WHERE s.taken_at = l.taken_at), 0) AS last_minute
		FROM rsnap s, rlast l
		WHERE s.jobs > 0
		GROUP BY s.queue
	)`
}

// runtimesSQL is QueueRuntimes' statement (see onClock).
var runtimesSQL = onClockTexts(func(now string) string {
	return `WITH ` + recentCTE(now) + `
		SELECT queue, jobs::bigint, COALESCE(avg_ms, 0)::float8 FROM recent ORDER BY queue`
})

// QueueRuntime is a queue's recent history, from the minute snapshots.
type QueueRuntime struct {
	Queue string
	// Jobs counts the attempts finished in the last 5 complete minutes,
	// every status (lost ones included).
	Jobs int64
	// AvgRuntimeMs is their mean runtime, lost attempts left out (no worker
	// timed them); 0 when none was timed.
	AvgRuntimeMs float64
}

// QueueRuntimes returns per queue, sorted, the attempts and mean runtime of
// the last 5 complete minutes, by the store's clock, as the per-minute
// snapshots recorded them (see recentCTE), for the queues that finished any. Its cost is bounded by the
// snapshot rows of 5 minutes (queues and job names), not by history or
// backlog; without snapshots (no master wrote any yet) it returns nothing.
func (s *Store) QueueRuntimes(ctx context.Context) ([]QueueRuntime, error) {
	sql, args := s.onClock(runtimesSQL)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read recent runtimes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[QueueRuntime])
	if err != nil {
		return nil, fmt.Errorf("read recent runtimes: %w", err)
	}
	return out, nil
}
