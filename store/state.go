package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Keys of fleet_state.
const (
	// StatePauseAll pauses every supervisor.
	StatePauseAll = "pause:*"
	// StatePauseSupervisorPrefix + NAME pauses one supervisor.
	StatePauseSupervisorPrefix = "pause:supervisor:"
	// StatePauseQueuePrefix + NAME pauses one queue in every supervisor.
	StatePauseQueuePrefix = "pause:queue:"
	// StateTerminate holds the last terminate request.
	StateTerminate = "terminate"
)

// StateRow is one row of fleet_state.
type StateRow struct {
	Key       string
	UpdatedAt time.Time
}

// StateSet writes key, stamping it with the database clock.
func (s *Store) StateSet(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO fleet_state (key, updated_at) VALUES ($1, now())
		ON CONFLICT (key) DO UPDATE SET updated_at = now()`, key)
	if err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	return nil
}

// StateDelete removes key. It reports whether the key existed.
func (s *Store) StateDelete(ctx context.Context, key string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM fleet_state WHERE key = $1`, key)
	if err != nil {
		return false, fmt.Errorf("delete %s: %w", key, err)
	}
	return tag.RowsAffected() > 0, nil
}

// StateDeleteUnless removes key unless the key unless exists, in one
// statement: it reports whether key was removed and whether unless held
// it back (then nothing changed).
func (s *Store) StateDeleteUnless(ctx context.Context, key, unless string) (deleted, blocked bool, err error) {
	err = s.pool.QueryRow(ctx, `
		WITH blocker AS (SELECT EXISTS (SELECT 1 FROM fleet_state WHERE key = $2) AS held),
		gone AS (
			DELETE FROM fleet_state WHERE key = $1 AND NOT (SELECT held FROM blocker)
			RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM gone), (SELECT held FROM blocker)`, key, unless).Scan(&deleted, &blocked)
	if err != nil {
		return false, false, fmt.Errorf("delete %s unless %s: %w", key, unless, err)
	}
	return deleted, blocked, nil
}

// StateDeletePrefix removes every key starting with prefix.
func (s *Store) StateDeletePrefix(ctx context.Context, prefix string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM fleet_state WHERE starts_with(key, $1)`, prefix)
	if err != nil {
		return 0, fmt.Errorf("delete %s*: %w", prefix, err)
	}
	return tag.RowsAffected(), nil
}

// StateList returns the rows whose key starts with any of prefixes, in one
// statement.
func (s *Store) StateList(ctx context.Context, prefixes ...string) ([]StateRow, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT key, updated_at FROM fleet_state
		WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) p WHERE starts_with(key, p))
		ORDER BY key`, prefixes)
	if err != nil {
		return nil, fmt.Errorf("read fleet state: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StateRow])
	if err != nil {
		return nil, fmt.Errorf("read fleet state: %w", err)
	}
	return out, nil
}
