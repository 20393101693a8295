package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueVacuumParams say when queue_jobs is worth a vacuum.
type QueueVacuumParams struct {
	// MinDead is the fewest dead rows worth a vacuum.
	MinDead int64
	// DeadPerLive is the fewest dead rows per live row worth a vacuum.
	DeadPerLive float64
	// MinGap skips the vacuum when one of queue_jobs (fleet's, or
	// autovacuum's) ended less than MinGap ago, by the database's clock: the
	// workers of every master on the database look on their own, and
	// without it each of N workers would vacuum as often as one does alone.
	// 0: no gap.
	MinGap time.Duration
}

// QueueVacuumResult says what QueueVacuum found and did.
type QueueVacuumResult struct {
	Dead, Live int64
	Vacuumed   bool
	// Recent is set when a vacuum ended within MinGap: none was run.
	Recent bool
}

// QueueVacuum vacuums and analyzes queue_jobs when PostgreSQL's statistics
// count enough dead rows, skipping it when another vacuum holds the table
// or one ended within MinGap.
//
// Every job leaves two dead row versions in queue_jobs (its claim's and its
// deletion's), and their entries stay at the head of the ready index, the
// end claims read from, until a vacuum removes them: without one, every
// claim steps over all the jobs finished since the last. PostgreSQL's
// autovacuum may be switched off, or be too slow for a table that turns
// over thousands of rows a second, so fleet's workers vacuum the table
// they churn themselves.
func (s *Store) QueueVacuum(ctx context.Context, p QueueVacuumParams) (QueueVacuumResult, error) {
	var r QueueVacuumResult
	err := s.pool.QueryRow(ctx, `
		SELECT COALESCE(n_dead_tup, 0), COALESCE(n_live_tup, 0),
		       COALESCE(greatest(last_vacuum, last_autovacuum) > now() - $1::bigint * interval '1 microsecond', false)
		FROM pg_stat_user_tables WHERE relid = 'queue_jobs'::regclass`, p.MinGap.Microseconds()).Scan(&r.Dead, &r.Live, &r.Recent)
	if err != nil {
		return r, fmt.Errorf("read the dead rows of queue_jobs: %w", err)
	}
	if r.Dead < p.MinDead || float64(r.Dead) < p.DeadPerLive*float64(r.Live) {
		r.Recent = false
		return r, nil
	}
	if r.Recent {
		return r, nil
	}
	// VACUUM cannot run in a transaction, so it goes as a simple query.
	if _, err := s.pool.Exec(ctx, `VACUUM (ANALYZE, SKIP_LOCKED) queue_jobs`, pgx.QueryExecModeSimpleProtocol); err != nil {
		return r, fmt.Errorf("vacuum queue_jobs: %w", err)
	}
	r.Vacuumed = true
	return r, nil
}
