package store

import (
	"context"
	"fmt"
	"time"
)

// InterruptedError is the error kept on the 'interrupted' history row of
// an attempt its worker stopped because it exited after another job
// ignored its timeout or cancel (see JobInterrupt).
const InterruptedError = "interrupted: its worker exited after another job ignored its timeout or cancel, and this attempt did not finish within the grace period; released to run again, no try spent"

// InterruptedAttempt is an attempt its worker stopped before its handler
// returned.
type InterruptedAttempt struct {
	Lease
	// Tries is the tries that applied to the attempt: the job's own, or
	// its worker's default (at least 1).
	Tries int
	// StartedAt is when the attempt started, on the database clock (see
	// ClaimedJob.ClockOffset).
	StartedAt time.Time
}

// JobInterruptParams are the attempts JobInterrupt ends.
type JobInterruptParams struct {
	Attempts []InterruptedAttempt
	// Error says why they were stopped (default InterruptedError).
	Error string
}

// JobInterrupt ends attempts a worker stopped before their handlers
// returned, as it exits: each gets an 'interrupted' history row and
// counts as processed and interrupted (never as failed), and its job is
// ready again at once, its attempt counted (the next claim makes the next
// attempt) and its tries one more than those that applied (so the
// interruption spends none). Jobs whose lease is no longer the caller's are
// left alone, and so is a job an operator asked to cancel: JobRelease then
// ends it as cancelled. The idle workers of the jobs' queues are woken. It
// returns how many jobs it released (see sql/interrupt.sql).
func (s *Store) JobInterrupt(ctx context.Context, p JobInterruptParams) (int, error) {
	if len(p.Attempts) == 0 {
		return 0, nil
	}
	ids, leases := make([]int64, len(p.Attempts)), make([]int64, len(p.Attempts))
	tries, started := make([]int32, len(p.Attempts)), make([]time.Time, len(p.Attempts))
	for i, a := range p.Attempts {
		if a.Tries < 1 {
			return 0, fmt.Errorf("interrupt job %d: tries %d, want at least 1", a.ID, a.Tries)
		}
		ids[i], leases[i], tries[i], started[i] = a.ID, a.Token, int32(a.Tries), a.StartedAt
	}
	msg := p.Error
	if msg == "" {
		msg = InterruptedError
	}
	if err := s.inject(ctx, "JobInterrupt"); err != nil {
		return 0, fmt.Errorf("interrupt %d jobs: %w", len(ids), err)
	}
	var n int
	var queues []string
	if err := s.pool.QueryRow(ctx, jobInterrupt.sql, ids, leases, tries, started, StorableText(msg)).Scan(&n, &queues); err != nil {
		return 0, fmt.Errorf("interrupt %d jobs: %w", len(ids), err)
	}
	s.wakeHanded(ctx, queues)
	return n, nil
}

// jobInterrupt ends interrupted attempts (sql/interrupt.sql).
var jobInterrupt = mustStatement("interrupt.sql", "job_ids", "leases", "tries", "started_at", "error")
