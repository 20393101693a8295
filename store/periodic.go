package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Periodic schedules keep their state in fleet_periodic, one row per
// schedule name: the cursor (every tick at or before it is decided) and
// the last tick dispatched. fleet_periodic_ticks records each dispatched
// tick with its job. Every time is the database clock's.

// PeriodicState is the state of one schedule.
type PeriodicState struct {
	Name string `json:"name"`
	// Cursor is the instant up to which every tick has been decided.
	Cursor time.Time `json:"cursor"`
	// LastTick, LastJobID and LastDispatchedAt describe the latest tick
	// dispatched; nil when none was.
	LastTick         *time.Time `json:"last_tick"`
	LastJobID        *int64     `json:"last_job_id"`
	LastDispatchedAt *time.Time `json:"last_dispatched_at"`
	// UpdatedBy is the instance of the master that moved the cursor last.
	UpdatedBy *string   `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PeriodicView is the state of schedules read at one instant of the
// database clock.
type PeriodicView struct {
	Now    time.Time
	States []PeriodicState
}

// Find returns the state of the schedule name.
func (v PeriodicView) Find(name string) (PeriodicState, bool) {
	for _, s := range v.States {
		if s.Name == name {
			return s, true
		}
	}
	return PeriodicState{}, false
}

// periodicReadSQL returns the database clock on every row, and one row
// per schedule found (a single row with a NULL name when none is): the
// clock and the states in one statement. The join condition follows.
const periodicReadSQL = `
	SELECT c.now, p.name, p.cursor_at, p.last_tick, p.last_job_id, p.last_dispatched_at, p.updated_by, p.updated_at
	FROM (SELECT now() AS now) c
	LEFT JOIN fleet_periodic p ON `

// collectPeriodic reads the rows of periodicReadSQL.
func collectPeriodic(rows pgx.Rows) (PeriodicView, error) {
	defer rows.Close()
	var v PeriodicView
	for rows.Next() {
		var name *string
		var st PeriodicState
		var cursor, updated *time.Time
		if err := rows.Scan(&v.Now, &name, &cursor, &st.LastTick, &st.LastJobID, &st.LastDispatchedAt, &st.UpdatedBy, &updated); err != nil {
			return PeriodicView{}, err
		}
		if name == nil {
			continue
		}
		st.Name, st.Cursor, st.UpdatedAt = *name, *cursor, *updated
		v.States = append(v.States, st)
	}
	if err := rows.Err(); err != nil {
		return PeriodicView{}, err
	}
	return v, nil
}

// PeriodicRead returns the database clock and the state of the named
// schedules that have a row, in one statement through the primary key.
func (s *Store) PeriodicRead(ctx context.Context, names []string) (PeriodicView, error) {
	rows, err := s.pool.Query(ctx, periodicReadSQL+`p.name = ANY($1::text[]) ORDER BY p.name`, names)
	if err != nil {
		return PeriodicView{}, fmt.Errorf("read periodic schedules: %w", err)
	}
	v, err := collectPeriodic(rows)
	if err != nil {
		return PeriodicView{}, fmt.Errorf("read periodic schedules: %w", err)
	}
	return v, nil
}

// PeriodicList returns the database clock and the state of every schedule
// with a row, by name.
func (s *Store) PeriodicList(ctx context.Context) (PeriodicView, error) {
	rows, err := s.pool.Query(ctx, periodicReadSQL+`true ORDER BY p.name`)
	if err != nil {
		return PeriodicView{}, fmt.Errorf("list periodic schedules: %w", err)
	}
	v, err := collectPeriodic(rows)
	if err != nil {
		return PeriodicView{}, fmt.Errorf("list periodic schedules: %w", err)
	}
	return v, nil
}

// PeriodicEnsure creates the rows of the named schedules that have none,
// with the cursor at the database's now: a new schedule's first tick is
// its first after it was first seen; none before is dispatched. Existing
// rows are left as they are. It reports how many it created.
func (s *Store) PeriodicEnsure(ctx context.Context, names []string) (int64, error) {
	if len(names) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO fleet_periodic (name, cursor_at)
		SELECT n, now() FROM unnest($1::text[]) AS n
		ON CONFLICT (name) DO NOTHING`, names)
	if err != nil {
		return 0, fmt.Errorf("create periodic schedules %v: %w", names, err)
	}
	return tag.RowsAffected(), nil
}

// PeriodicDispatchParams is one round of one schedule: move its cursor
// from From to To, dispatching one job per tick.
type PeriodicDispatchParams struct {
	Name string
	// From is the cursor the caller read; the round happens only if it is
	// still the cursor.
	From time.Time
	// To is the new cursor, after From.
	To time.Time
	// Ticks are the ticks dispatched, oldest first, each after From and
	// at or before To; Jobs are their jobs, one per tick. Both may be
	// empty: the cursor then moves past skipped ticks only.
	Ticks []time.Time
	Jobs  []JobInsertParams
	// By is the instance id of the master doing it.
	By string
}

// PeriodicDispatched is what PeriodicDispatch did.
type PeriodicDispatched struct {
	// Won is false when the cursor was no longer From (another master did
	// the round): nothing was written.
	Won bool
	// IDs are the jobs' ids, in the order of Ticks.
	IDs []int64
}

// ErrPeriodicNotFound is returned, wrapped, by PeriodicDispatch when the
// schedule has no row (PeriodicEnsure creates it).
var ErrPeriodicNotFound = errors.New("periodic schedule has no row")

// PeriodicDispatch does one round of a schedule in one transaction: the
// cursor moves from p.From to p.To (a compare-and-set on the row, which
// also locks it, so concurrent masters queue behind one another and all
// but the first find the cursor moved and write nothing), the ticks' jobs
// are inserted as any dispatch inserts them, each tick is recorded with
// its job (fleet_periodic_ticks, whose key refuses a tick twice), and
// idle workers of the jobs' queues are notified at commit. A master that
// dies at any point before the commit leaves nothing behind, and the round
// is done again by the next master to read the cursor.
func (s *Store) PeriodicDispatch(ctx context.Context, p PeriodicDispatchParams) (PeriodicDispatched, error) {
	var out PeriodicDispatched
	if p.Name == "" || p.By == "" || !p.To.After(p.From) || len(p.Ticks) != len(p.Jobs) {
		return out, fmt.Errorf("dispatch periodic %q: a name, a holder, a cursor that moves forward and one job per tick are needed", p.Name)
	}
	for _, t := range p.Ticks {
		if !t.After(p.From) || t.After(p.To) {
			return out, fmt.Errorf("dispatch periodic %s: tick %s outside (%s, %s]", p.Name, t.UTC().Format(time.RFC3339), p.From.UTC().Format(time.RFC3339Nano), p.To.UTC().Format(time.RFC3339))
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var moved bool
		err := tx.QueryRow(ctx, `
			WITH cur AS (SELECT cursor_at FROM fleet_periodic WHERE name = $1),
			upd AS (
				UPDATE fleet_periodic SET cursor_at = $3, updated_by = $4, updated_at = now()
				WHERE name = $1 AND cursor_at = $2
				RETURNING 1
			)
			SELECT EXISTS (SELECT 1 FROM upd) FROM cur`, p.Name, p.From, p.To, p.By).Scan(&moved)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("dispatch periodic %s: %w", p.Name, ErrPeriodicNotFound)
		}
		if err != nil {
			return fmt.Errorf("dispatch periodic %s: move the cursor: %w", p.Name, err)
		}
		if !moved || len(p.Jobs) == 0 {
			out.Won = moved
			return nil
		}
		ids, err := s.JobInsertMany(ctx, tx, p.Jobs)
		if err != nil {
			return fmt.Errorf("dispatch periodic %s: %w", p.Name, err)
		}
		last := len(ids) - 1
		_, err = tx.Exec(ctx, `
			WITH t AS (
				INSERT INTO fleet_periodic_ticks (name, tick, job_id, dispatched_by)
				SELECT $1, u.tick, u.job_id, $4 FROM unnest($2::timestamptz[], $3::bigint[]) AS u (tick, job_id)
			)
			UPDATE fleet_periodic SET last_tick = $5, last_job_id = $6, last_dispatched_at = now()
			WHERE name = $1`, p.Name, p.Ticks, ids, p.By, p.Ticks[last], ids[last])
		if err != nil {
			return fmt.Errorf("dispatch periodic %s: record the ticks: %w", p.Name, err)
		}
		var queues []string
		for _, j := range p.Jobs {
			if j.Delay <= 0 && !slices.Contains(queues, j.Queue) {
				queues = append(queues, j.Queue)
			}
		}
		if err := QueueNotifyTx(ctx, tx, queues); err != nil {
			return fmt.Errorf("dispatch periodic %s: %w", p.Name, err)
		}
		out.Won, out.IDs = true, ids
		return nil
	})
	if err != nil {
		return PeriodicDispatched{}, err
	}
	return out, nil
}

// PeriodicTick is one dispatched tick of a schedule.
type PeriodicTick struct {
	Name         string    `json:"name"`
	Tick         time.Time `json:"tick"`
	JobID        int64     `json:"job_id"`
	DispatchedAt time.Time `json:"dispatched_at"`
	DispatchedBy string    `json:"dispatched_by"`
}

// PeriodicTicks returns the latest limit dispatched ticks of the schedule
// name, newest first.
func (s *Store) PeriodicTicks(ctx context.Context, name string, limit int) ([]PeriodicTick, error) {
	if limit < 1 {
		return nil, fmt.Errorf("list ticks of %s: the limit must be at least 1", name)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT name, tick, job_id, dispatched_at, dispatched_by FROM fleet_periodic_ticks
		WHERE name = $1 ORDER BY tick DESC LIMIT $2`, name, limit)
	if err != nil {
		return nil, fmt.Errorf("list ticks of %s: %w", name, err)
	}
	ticks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PeriodicTick])
	if err != nil {
		return nil, fmt.Errorf("list ticks of %s: %w", name, err)
	}
	return ticks, nil
}

// PeriodicTickTrim deletes the recorded ticks older than olderThan and
// reports how many. The schedules' rows keep their last tick.
func (s *Store) PeriodicTickTrim(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, errors.New("trim periodic ticks: the age must be positive")
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM fleet_periodic_ticks WHERE tick < now() - $1::bigint * interval '1 microsecond'`,
		olderThan.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("trim periodic ticks: %w", err)
	}
	return tag.RowsAffected(), nil
}
