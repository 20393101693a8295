package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Periodic duties (the metrics snapshot of one minute, the partition upkeep
// of one ten-minute period, ...) are claimed per period in fleet_duties: a
// row (duty, period) says who holds or did it. A claim lasts a lease; a
// holder that dies mid-duty leaves the row undone, and once the lease has
// passed the next claimer takes it over. A duty that failed is claimable
// again after a retry backoff. Every time is the store's clock's: the
// database's, unless the store has a clock (see WithClock).

// ErrDutyNotHeld is returned, wrapped, by DutyDone and DutyFailed when the
// caller no longer holds the period: another holder took it over after the
// caller's lease passed, or it is done already.
var ErrDutyNotHeld = errors.New("duty period not held")

// Retry backoff of a failed duty: DutyFailed sets the lease of the period
// to DutyRetryStep times the tries so far, at most DutyRetryMax, from now,
// so that a duty that keeps failing is retried every few seconds at first
// and at most once a minute later, by whichever master claims it first.
const (
	DutyRetryStep = 5 * time.Second
	DutyRetryMax  = time.Minute
)

// dutyErrorMax caps the length of a recorded error.
const dutyErrorMax = 2000

// DutyClaimPeriod claims the duty for period on behalf of holder for lease,
// and reports whether it did, in one statement. It wins when no row exists
// for (duty, period), or when the row is not done and its lease has passed
// (its holder died or failed): then holder, claimed_at and lease_until are
// replaced and tries is incremented. A done period is never claimed again.
// Of concurrent claimers exactly one wins.
func (s *Store) DutyClaimPeriod(ctx context.Context, duty string, period time.Time, holder string, lease time.Duration) (bool, error) {
	if duty == "" || holder == "" || period.IsZero() || lease <= 0 {
		return false, fmt.Errorf("claim duty %q of %s for %q: a duty, a period, a holder and a positive lease are needed", duty, period, holder)
	}
	var tries int
	err := s.pool.QueryRow(ctx, `
		INSERT INTO fleet_duties AS d (duty, period, holder, lease_until)
		VALUES ($1, $2, $3, `+clockSQL(5)+` + $4::bigint * interval '1 microsecond')
		ON CONFLICT (duty, period) DO UPDATE
		SET holder = EXCLUDED.holder, claimed_at = `+clockSQL(5)+`, lease_until = EXCLUDED.lease_until, tries = d.tries + 1
		WHERE d.done_at IS NULL AND d.lease_until <= `+clockSQL(5)+`
		RETURNING d.tries`, duty, period, holder, lease.Microseconds(), s.at()).Scan(&tries)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim duty %s of %s: %w", duty, period.UTC().Format(time.RFC3339), err)
	}
	return true, nil
}

// DutyDone marks the duty of period done, provided holder still holds it
// (it claimed it last and it is not done; its lease may have passed as long
// as nobody took it over). Otherwise it returns ErrDutyNotHeld, wrapped.
func (s *Store) DutyDone(ctx context.Context, duty string, period time.Time, holder string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE fleet_duties SET done_at = `+clockSQL(4)+`
		WHERE duty = $1 AND period = $2 AND holder = $3 AND done_at IS NULL`, duty, period, holder, s.at())
	if err != nil {
		return fmt.Errorf("mark duty %s of %s done: %w", duty, period.UTC().Format(time.RFC3339), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mark duty %s of %s done by %s: %w", duty, period.UTC().Format(time.RFC3339), holder, ErrDutyNotHeld)
	}
	return nil
}

// DutyFailed records that holder failed the duty of period with errMsg and
// ends its lease after the retry backoff (DutyRetryStep times the tries so
// far, at most DutyRetryMax), after which any holder may claim the period
// again. Like DutyDone it needs holder to still hold the period, else it
// returns ErrDutyNotHeld, wrapped.
func (s *Store) DutyFailed(ctx context.Context, duty string, period time.Time, holder, errMsg string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE fleet_duties
		SET last_error = left($4, $5),
		    lease_until = `+clockSQL(8)+` + least(tries * $6::bigint, $7::bigint) * interval '1 microsecond'
		WHERE duty = $1 AND period = $2 AND holder = $3 AND done_at IS NULL`,
		duty, period, holder, errMsg, dutyErrorMax, DutyRetryStep.Microseconds(), DutyRetryMax.Microseconds(), s.at())
	if err != nil {
		return fmt.Errorf("record failure of duty %s of %s: %w", duty, period.UTC().Format(time.RFC3339), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record failure of duty %s of %s by %s: %w", duty, period.UTC().Format(time.RFC3339), holder, ErrDutyNotHeld)
	}
	return nil
}

// DutyDue returns which of periods the duty is due for, oldest first and
// without repeats: those neither done nor under a live lease (never
// claimed, or their holder's lease or failure backoff has passed). It is
// one statement.
func (s *Store) DutyDue(ctx context.Context, duty string, periods []time.Time) ([]time.Time, error) {
	if len(periods) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT p.period FROM unnest($2::timestamptz[]) AS p (period)
		WHERE NOT EXISTS (
			SELECT 1 FROM fleet_duties d
			WHERE d.duty = $1 AND d.period = p.period AND (d.done_at IS NOT NULL OR d.lease_until > `+clockSQL(3)+`))
		ORDER BY p.period`, duty, periods, s.at())
	if err != nil {
		return nil, fmt.Errorf("read due periods of duty %s: %w", duty, err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("read due periods of duty %s: %w", duty, err)
	}
	return due, nil
}

// DutyRecentParams say which periods DutyRecent reads.
type DutyRecentParams struct {
	Duty string
	// Every is the length of a period. Periods are aligned to the Unix
	// epoch: with a minute, whole minutes; with ten minutes, :00, :10, ...
	Every time.Duration
	// Back is how many of the latest complete periods to read, at least 1.
	Back int
	// Settle is how long after its end a period counts as complete (for
	// late writes of the rows it covers to land); 0 for at once.
	Settle time.Duration
}

// DutyPeriod is one period of a DutyWindow.
type DutyPeriod struct {
	Period time.Time
	Done   bool
	// LeaseUntil is when the claim or failure backoff of an undone period
	// ends; zero when the period was never claimed.
	LeaseUntil time.Time
	// Tries is how many claims the period had, 0 when none.
	Tries int
}

// DutyWindow is the state of a duty's latest complete periods, read at one
// instant of the store's clock.
type DutyWindow struct {
	// Now is the store's clock at the read.
	Now time.Time
	// Next is when, by the store's clock, the period in progress counts
	// as complete (its end plus the settle time).
	Next time.Time
	// Periods are the Back latest complete periods, oldest first.
	Periods []DutyPeriod
}

// Due returns the periods of w that were neither done nor under a live
// lease at w.Now, oldest first.
func (w DutyWindow) Due() []time.Time {
	var due []time.Time
	for _, p := range w.Periods {
		if !p.Done && !p.LeaseUntil.After(w.Now) {
			due = append(due, p.Period)
		}
	}
	return due
}

// Wake returns the earliest instant, by the store's clock, at which a
// period that was not due at w.Now may become due by itself: when the
// period in progress completes (Next), or when a live lease of an undone
// period ends. Up to then, only a claim, done or failure can change which
// periods are due.
func (w DutyWindow) Wake() time.Time {
	wake := w.Next
	for _, p := range w.Periods {
		if !p.Done && p.LeaseUntil.After(w.Now) && p.LeaseUntil.Before(wake) {
			wake = p.LeaseUntil
		}
	}
	return wake
}

// DutyRecent reads, in one statement, the store's clock and the state of
// the latest p.Back complete periods of p.Duty: those of length p.Every,
// aligned to the Unix epoch, that ended at least p.Settle ago. A master
// claims the due ones (DutyWindow.Due), catching up any it missed.
func (s *Store) DutyRecent(ctx context.Context, p DutyRecentParams) (DutyWindow, error) {
	if p.Duty == "" || p.Every < time.Millisecond || p.Back < 1 || p.Settle < 0 {
		return DutyWindow{}, fmt.Errorf("read recent periods of duty %q: a duty, a period of at least 1 ms, at least one period back and a settle time of 0 or more are needed", p.Duty)
	}
	rows, err := s.pool.Query(ctx, `
		WITH c AS (
			SELECT `+clockSQL(5)+` AS now, $2::bigint * interval '1 microsecond' AS every,
			       $4::bigint * interval '1 microsecond' AS settle
		), b AS (
			SELECT c.now, c.every, c.settle,
			       date_bin(c.every, c.now - c.settle, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS cur
			FROM c
		), p AS (
			SELECT b.cur - k * b.every AS period FROM b, generate_series(1, $3::int) k
		)
		SELECT b.now, b.cur + b.every + b.settle, p.period, d.done_at IS NOT NULL,
		       d.lease_until, COALESCE(d.tries, 0)
		FROM b CROSS JOIN p
		LEFT JOIN fleet_duties d ON d.duty = $1 AND d.period = p.period
		ORDER BY p.period`, p.Duty, p.Every.Microseconds(), p.Back, p.Settle.Microseconds(), s.at())
	if err != nil {
		return DutyWindow{}, fmt.Errorf("read recent periods of duty %s: %w", p.Duty, err)
	}
	defer rows.Close()
	var w DutyWindow
	for rows.Next() {
		var dp DutyPeriod
		var lease *time.Time
		if err := rows.Scan(&w.Now, &w.Next, &dp.Period, &dp.Done, &lease, &dp.Tries); err != nil {
			return DutyWindow{}, fmt.Errorf("read recent periods of duty %s: %w", p.Duty, err)
		}
		if lease != nil {
			dp.LeaseUntil = *lease
		}
		w.Periods = append(w.Periods, dp)
	}
	if err := rows.Err(); err != nil {
		return DutyWindow{}, fmt.Errorf("read recent periods of duty %s: %w", p.Duty, err)
	}
	return w, nil
}

// DutyTrim deletes the fleet_duties rows whose period began more than
// olderThan ago, done or not, and reports how many it deleted. olderThan
// must exceed every window masters read (DutyRecent), or a trimmed period
// would be done again.
func (s *Store) DutyTrim(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, errors.New("trim duties: the age must be positive")
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM fleet_duties WHERE period < `+clockSQL(2)+` - $1::bigint * interval '1 microsecond'`,
		olderThan.Microseconds(), s.at())
	if err != nil {
		return 0, fmt.Errorf("trim duties: %w", err)
	}
	return tag.RowsAffected(), nil
}
