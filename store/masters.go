package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MasterBeatParams is one beat of a master's membership row.
type MasterBeatParams struct {
	Name        string
	Host        string
	PID         int
	Nonce       string
	Version     string
	State       string
	Supervisors json.RawMessage
	TTL         time.Duration
}

// MasterBeat writes the master's row, its beat and expiry taken from the
// database clock so that clock skew between hosts never matters, and returns
// when the row was first written (database clock).
func (s *Store) MasterBeat(ctx context.Context, p MasterBeatParams) (time.Time, error) {
	sups := p.Supervisors
	if len(sups) == 0 {
		sups = json.RawMessage(`[]`)
	}
	var started time.Time
	err := s.pool.QueryRow(ctx, `
		INSERT INTO fleet_masters (name, host, pid, nonce, version, state, supervisors, started_at, beat_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now(), now(), now() + $8 * interval '1 millisecond')
		ON CONFLICT (name) DO UPDATE SET
			state = EXCLUDED.state, supervisors = EXCLUDED.supervisors, version = EXCLUDED.version,
			beat_at = now(), expires_at = EXCLUDED.expires_at
		RETURNING started_at`,
		p.Name, p.Host, p.PID, p.Nonce, p.Version, p.State, sups, p.TTL.Milliseconds()).Scan(&started)
	if err != nil {
		return time.Time{}, fmt.Errorf("beat master %s: %w", p.Name, err)
	}
	return started, nil
}

// MasterDelete removes a master's row: it left the fleet.
func (s *Store) MasterDelete(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM fleet_masters WHERE name = $1`, name); err != nil {
		return fmt.Errorf("remove master %s: %w", name, err)
	}
	return nil
}

// Master is a row of fleet_masters.
type Master struct {
	Name        string          `json:"name"`
	Host        string          `json:"host"`
	PID         int             `json:"pid"`
	Version     string          `json:"version"`
	State       string          `json:"state"`
	Supervisors json.RawMessage `json:"supervisors"`
	StartedAt   time.Time       `json:"started_at"`
	BeatAt      time.Time       `json:"beat_at"`
	ExpiresAt   time.Time       `json:"expires_at"`
	// BeatAgeSecs is how long ago it beat, by the database clock.
	BeatAgeSecs float64 `json:"beat_age_secs"`
}

// MasterList returns the masters that beat within the last within, newest
// first.
func (s *Store) MasterList(ctx context.Context, within time.Duration) ([]Master, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT name, host, pid, version, state, supervisors, started_at, beat_at, expires_at,
		       EXTRACT(EPOCH FROM now() - beat_at)::float8
		FROM fleet_masters
		WHERE beat_at > now() - $1 * interval '1 millisecond'
		ORDER BY started_at DESC, name`, within.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("list masters: %w", err)
	}
	masters, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Master])
	if err != nil {
		return nil, fmt.Errorf("list masters: %w", err)
	}
	return masters, nil
}

// LostJobs says how many jobs a release gave back and how many it moved to
// failed jobs because their tries were spent.
type LostJobs struct {
	Released int64
	Failed   int64
}

// releaseLost releases every job matched by cond (a fixed SQL condition on
// queue_jobs j, never user input). The attempt the lost worker made counts:
// a job whose tries are spent moves to failed jobs with errMsg, so a job
// that kills its worker every time ends there instead of looping.
func (s *Store) releaseLost(ctx context.Context, cond string, defaultTries int, errMsg string, args ...any) (LostJobs, error) {
	n := len(args)
	sql := fmt.Sprintf(`
		WITH lost AS (
			SELECT j.id, j.queue, j.name, j.attempts, j.reserved_at, j.reserved_by, j.reserved_master
			FROM queue_jobs j WHERE %s FOR UPDATE
		), history AS (
			INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, reserved_at, started_at,
			                        finished_at, runtime_ms, error, master, worker)
			SELECT id, queue, name, attempts, 'lost', reserved_at, COALESCE(reserved_at, now()), now(),
			       EXTRACT(EPOCH FROM now() - COALESCE(reserved_at, now())) * 1000, $%d, reserved_master, reserved_by
			FROM lost
		), counted AS (
			`+counterUpsert+`
			SELECT queue, `+counterShard+`, count(*), count(*) FROM lost GROUP BY queue ORDER BY queue`+counterConflict+`
		), failed AS (
			DELETE FROM queue_jobs j USING lost
			WHERE j.id = lost.id AND j.attempts >= COALESCE(j.max_tries, $%d)
			RETURNING j.*
		), moved AS (
			INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries,
			                               backoff_secs, timeout_ms, error, created_at, retry_of)
			SELECT id, queue, name, payload, attempts, COALESCE(max_tries, $%d), backoff_secs, timeout_ms,
			       $%d, created_at, retry_of
			FROM failed
			RETURNING job_id
		), released AS (
			UPDATE queue_jobs j
			SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL,
			    available_at = now(), last_error = $%d
			FROM lost
			WHERE j.id = lost.id AND j.attempts < COALESCE(j.max_tries, $%d)
			RETURNING j.id
		)
		SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM moved)`,
		cond, n+2, n+1, n+1, n+2, n+2, n+1)
	args = append(args, defaultTries, errMsg)
	var out LostJobs
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&out.Released, &out.Failed); err != nil {
		return out, fmt.Errorf("release lost jobs: %w", err)
	}
	return out, nil
}

// JobReleaseWorker releases the jobs still held by a worker that died.
func (s *Store) JobReleaseWorker(ctx context.Context, worker string, defaultTries int, reason string) (LostJobs, error) {
	return s.releaseLost(ctx, `j.reserved_by = $1`, defaultTries,
		fmt.Sprintf("worker lost: %s (%s)", worker, reason), worker)
}

// MasterExpire removes the rows of masters whose ttl has passed and
// releases the jobs held by their workers, and by workers of any master that
// has no row at all. Jobs held by a worker without a master are released
// once reserved longer than their timeout (defaultTimeout when unset) plus
// orphanAfter. It returns the expired masters' names.
func (s *Store) MasterExpire(ctx context.Context, defaultTries int, defaultTimeout, orphanAfter time.Duration) ([]string, LostJobs, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM fleet_masters WHERE expires_at < now() RETURNING name`)
	if err != nil {
		return nil, LostJobs{}, fmt.Errorf("expire masters: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, LostJobs{}, fmt.Errorf("expire masters: %w", err)
	}
	lost, err := s.releaseLost(ctx, `(j.reserved_master IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM fleet_masters m WHERE m.name = j.reserved_master))
		OR (j.reserved_by IS NOT NULL AND j.reserved_master IS NULL
		AND j.reserved_at + (COALESCE(j.timeout_ms, $1) + $2) * interval '1 millisecond' < now())`,
		defaultTries, "worker lost: its master stopped beating, or it held the job far past its timeout",
		defaultTimeout.Milliseconds(), orphanAfter.Milliseconds())
	return names, lost, err
}

// WorkerOverdue returns the workers of master holding a job reserved longer
// than its timeout (or defaultTimeout) plus grace.
func (s *Store) WorkerOverdue(ctx context.Context, master string, defaultTimeout, grace time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT reserved_by FROM queue_jobs
		WHERE reserved_master = $1
		  AND reserved_at + (COALESCE(timeout_ms, $2) + $3) * interval '1 millisecond' < now()`,
		master, defaultTimeout.Milliseconds(), grace.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("find overdue workers: %w", err)
	}
	workers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find overdue workers: %w", err)
	}
	return workers, nil
}
