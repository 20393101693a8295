package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A worker reconciles what it holds with what the database says it holds
// (see worker/reconcile.go): it reads the leases reserved under its name
// (JobReservedBy) and gives back at once those it does not hold
// (JobReleaseUnheld). Such a reservation is left by a database failover
// that kept a claim but lost the outcome written after it, or by a claim
// whose answer never reached the worker.

// JobReservedBy returns the lease of every job reserved under worker (the
// lease holder's name), in one statement through the reserved_by index:
// its cost grows with that worker's own rows, never with the backlog or
// with other workers' jobs.
func (s *Store) JobReservedBy(ctx context.Context, worker string) ([]Lease, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, COALESCE(lease, 0) FROM queue_jobs WHERE reserved_by = $1`, worker)
	if err != nil {
		return nil, fmt.Errorf("read the jobs reserved by %s: %w", worker, err)
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Lease, error) {
		var l Lease
		err := row.Scan(&l.ID, &l.Token)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the jobs reserved by %s: %w", worker, err)
	}
	return leases, nil
}

// UnheldError is the error kept on a job JobReleaseUnheld gave back, and
// on its 'lost' history row.
const UnheldError = "lost: its worker, alive, no longer held it (the outcome of this attempt or the answer to its claim was lost, as in a database failover); released without counting the attempt"

// JobReleaseUnheld releases the jobs of leases that are still reserved
// under worker with those very leases, and that the worker reports it
// does not hold (it read them with JobReservedBy after taking stock of
// what it holds). A job is matched by id, lease token and holder, so one
// finished or claimed again meanwhile is left alone. Each is released as
// lost, with its attempt taken back: it is ready again at once, never
// moved to failed jobs, and its next claim makes the same attempt again.
// The attempt gets a 'lost' history row with UnheldError and counts as
// lost (its outcome is unknown: the handler may well have succeeded), and
// the job is counted as requeued. A job an operator asked to cancel ends
// as cancelled instead, as every release of a lost job does (see
// releaseLost). Rows are found by primary key.
func (s *Store) JobReleaseUnheld(ctx context.Context, worker string, leases []Lease) (LostJobs, error) {
	if len(leases) == 0 {
		return LostJobs{}, nil
	}
	ids, tokens := leaseArrays(leases)
	return s.releaseLostAs(ctx, true, `j.id = ANY($2::bigint[]) AND j.reserved_by = $1
		AND j.lease = ($3::bigint[])[array_position($2::bigint[], j.id)]`,
		1, UnheldError, worker, ids, tokens)
}
