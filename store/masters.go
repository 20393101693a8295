package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kinds of member rows in fleet_masters.
const (
	// KindMaster is a fleet master.
	KindMaster = "master"
	// KindWorker is a worker started without a master (by hand, from
	// cron): it keeps a row of its own so its liveness is known.
	KindWorker = "worker"
)

// Liveness of a member, measured against the view's database clock.
const (
	LivenessOnline   = "online"
	LivenessDraining = "draining"
	LivenessOffline  = "offline"
)

// MemberGoneRetention is how long the row of a member that stopped beating
// stays in fleet_masters, shown as offline (fleet:masters --all), before
// whoever beats deletes it. Its jobs are released as soon as it expires,
// long before that.
const MemberGoneRetention = 10 * time.Minute

// MemberBeatParams is one beat of a member's row.
type MemberBeatParams struct {
	Instance string // random per process: the row's key and the jobs' reserved_master
	Kind     string // KindMaster or KindWorker
	Name     string
	Host     string
	PID      int
	Version  string
	State    string
	Report   json.RawMessage // at most a few KiB; nil: {}
	TTL      time.Duration   // the row expires TTL after this beat
	// Renew only renews a row that exists, and never inserts one: a
	// member's beats after its first, so that a beat the client gave up on,
	// which the server may still run after the member left (deleted its
	// row), does not bring the row back. Without the row the view comes
	// back without the member (Find fails), and the member beats again
	// without Renew.
	Renew bool
}

// Member is a row of fleet_masters as one beat or read saw it.
type Member struct {
	Instance  string          `json:"instance"`
	Kind      string          `json:"kind"`
	Name      string          `json:"name"`
	Host      string          `json:"host"`
	PID       int             `json:"pid"`
	Version   string          `json:"version"`
	State     string          `json:"state"`
	Report    json.RawMessage `json:"report"`
	StartedAt time.Time       `json:"started_at"`
	BeatAt    time.Time       `json:"beat_at"`
	ExpiresAt time.Time       `json:"expires_at"`
}

// Live reports whether the member's row had not expired at at.
func (m Member) Live(at time.Time) bool { return !m.ExpiresAt.Before(at) }

// Liveness is online, draining or offline at at (the view's database
// clock, never the reader's).
func (m Member) Liveness(at time.Time) string {
	switch {
	case !m.Live(at):
		return LivenessOffline
	case m.State == "draining":
		return LivenessDraining
	default:
		return LivenessOnline
	}
}

// View is the membership as one statement saw it: every row not yet
// deleted (live ones and the recently gone), sorted by name then instance,
// with At, the database's now() of that statement. Liveness is always
// measured against At.
type View struct {
	At      time.Time
	Members []Member
	// Prev is, in a beat's view, the beat_at the beating member's own row
	// had before that beat: zero when it had no row. A member that finds
	// it older than its last acknowledged beat knows the database lost
	// writes it had acknowledged (a failover to a standby that lagged),
	// and every other row's expiry with them.
	Prev time.Time
}

// Live returns the live members of kind (every kind when empty), sorted
// by name.
func (v View) Live(kind string) []Member {
	var out []Member
	for _, m := range v.Members {
		if m.Live(v.At) && (kind == "" || m.Kind == kind) {
			out = append(out, m)
		}
	}
	return out
}

// Find returns the member with instance.
func (v View) Find(instance string) (Member, bool) {
	for _, m := range v.Members {
		if m.Instance == instance {
			return m, true
		}
	}
	return Member{}, false
}

const memberColumns = `instance, kind, name, host, pid, version, state, report, started_at, beat_at, expires_at`

// memberUpsert writes a member's row, inserting it when there is none;
// memberRenew only renews the row there is (see MemberBeatParams.Renew).
// The instance is random per process, so kind, name, host and pid in
// memberRenew's filter are the row's own: they are there for the
// statement to take the same parameters.
const (
	memberUpsert = `
			INSERT INTO fleet_masters AS m (instance, kind, name, host, pid, version, state, report, started_at, beat_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now(), now() + $9 * interval '1 millisecond')
			ON CONFLICT (instance) DO UPDATE SET
				state = EXCLUDED.state, report = EXCLUDED.report, version = EXCLUDED.version,
				beat_at = now(), expires_at = EXCLUDED.expires_at
			RETURNING ` + memberColumns
	memberRenew = `
			UPDATE fleet_masters SET
				state = $7, report = $8, version = $6, beat_at = now(), expires_at = now() + $9 * interval '1 millisecond'
			WHERE instance = $1 AND kind = $2 AND name = $3 AND host = $4 AND pid = $5
			RETURNING ` + memberColumns
)

// MemberBeat writes the member's row (expiring TTL from now on the database
// clock) and returns the view in the same statement. With expire, rows that
// expired more than MemberGoneRetention ago are deleted; their jobs were
// released long before (see MemberRelease).
func (s *Store) MemberBeat(ctx context.Context, p MemberBeatParams, expire bool) (View, error) {
	report := p.Report
	if len(report) == 0 {
		report = json.RawMessage(`{}`)
	}
	kind := p.Kind
	if kind == "" {
		kind = KindMaster
	}
	me := memberUpsert
	if p.Renew {
		me = memberRenew
	}
	rows, err := s.pool.Query(ctx, `
		WITH prev AS (
			SELECT beat_at FROM fleet_masters WHERE instance = $1
		), me AS (`+me+`
		), gone AS (
			DELETE FROM fleet_masters
			WHERE $10 AND instance <> $1 AND expires_at < now() - $11 * interval '1 millisecond'
			RETURNING instance
		)
		SELECT now(), (SELECT beat_at FROM prev), `+memberColumns+` FROM me
		UNION ALL
		SELECT now(), NULL, `+memberColumns+` FROM fleet_masters
		WHERE instance <> $1 AND instance NOT IN (SELECT instance FROM gone)`,
		p.Instance, kind, p.Name, p.Host, p.PID, p.Version, p.State, report, p.TTL.Milliseconds(),
		expire, MemberGoneRetention.Milliseconds())
	if err != nil {
		return View{}, fmt.Errorf("beat %s %s: %w", kind, p.Name, err)
	}
	v, err := collectBeatView(rows)
	if err != nil {
		return View{}, fmt.Errorf("beat %s %s: %w", kind, p.Name, err)
	}
	return v, nil
}

func collectView(rows pgx.Rows) (View, error) {
	var v View
	members, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Member, error) {
		var m Member
		err := row.Scan(&v.At, &m.Instance, &m.Kind, &m.Name, &m.Host, &m.PID, &m.Version, &m.State, &m.Report,
			&m.StartedAt, &m.BeatAt, &m.ExpiresAt)
		return m, err
	})
	return sortedView(v, members, err)
}

// collectBeatView is collectView for a beat's rows, whose second column is
// the member's own previous beat_at on its own row (NULL on the others).
func collectBeatView(rows pgx.Rows) (View, error) {
	var v View
	members, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Member, error) {
		var m Member
		var prev *time.Time
		err := row.Scan(&v.At, &prev, &m.Instance, &m.Kind, &m.Name, &m.Host, &m.PID, &m.Version, &m.State, &m.Report,
			&m.StartedAt, &m.BeatAt, &m.ExpiresAt)
		if prev != nil {
			v.Prev = *prev
		}
		return m, err
	})
	return sortedView(v, members, err)
}

func sortedView(v View, members []Member, err error) (View, error) {
	if err != nil {
		return View{}, err
	}
	slices.SortFunc(members, func(a, b Member) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Instance, b.Instance))
	})
	v.Members = members
	return v, nil
}

// MemberView reads the view without beating: every row not yet deleted,
// with the database's now().
func (s *Store) MemberView(ctx context.Context) (View, error) {
	rows, err := s.pool.Query(ctx, `SELECT now(), `+memberColumns+` FROM fleet_masters`)
	if err != nil {
		return View{}, fmt.Errorf("read membership: %w", err)
	}
	v, err := collectView(rows)
	if err != nil {
		return View{}, fmt.Errorf("read membership: %w", err)
	}
	if v.At.IsZero() {
		// No row: ask for the clock alone.
		if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&v.At); err != nil {
			return View{}, fmt.Errorf("read membership: %w", err)
		}
	}
	return v, nil
}

// MemberLinger writes the member's last row: state draining, expiring
// after linger, so that it is seen leaving without the process waiting.
func (s *Store) MemberLinger(ctx context.Context, instance string, linger time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE fleet_masters SET state = 'draining', beat_at = now(), expires_at = now() + $2 * interval '1 millisecond'
		WHERE instance = $1`, instance, linger.Milliseconds())
	if err != nil {
		return fmt.Errorf("write the last row of %s: %w", instance, err)
	}
	return nil
}

// MemberDelete removes a member's row: it left the fleet. Call it only once
// nothing it ran holds a job any more.
func (s *Store) MemberDelete(ctx context.Context, instance string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM fleet_masters WHERE instance = $1`, instance); err != nil {
		return fmt.Errorf("remove member %s: %w", instance, err)
	}
	return nil
}

// LostJobs says how many jobs a release gave back and how many it moved to
// failed jobs because their tries were spent.
type LostJobs struct {
	Released int64
	Failed   int64
	// Cancelled counts the jobs with a cancel request, which end as
	// cancelled instead of being released.
	Cancelled int64
}

// releaseLost releases every job matched by cond (a fixed SQL condition on
// queue_jobs j, never user input). The attempt the lost worker made counts:
// a job whose tries are spent moves to failed jobs with errMsg, so a job
// that kills its worker every time ends there instead of looping. A
// released limited job keeps its slot (it is ready again, still one of its
// key's unparked jobs); one moved to failed jobs frees it, and the slot is
// handed over in the same statement (limitHandoffCTEs). A job an operator
// asked to cancel while it was held is not released but deleted, recorded
// as cancelled (not lost, and no failure), and its slot handed over: it
// never runs again.
func (s *Store) releaseLost(ctx context.Context, cond string, defaultTries int, errMsg string, args ...any) (LostJobs, error) {
	return s.releaseLostAs(ctx, false, cond, defaultTries, errMsg, args...)
}

// releaseLostAs is releaseLost that, with uncount, takes the lost attempt
// back instead of counting it: every matched job is released (none moves
// to failed jobs), its attempts lowered by one, so that its next claim
// makes the same attempt again. The history row ('lost') and the counters
// are written either way.
func (s *Store) releaseLostAs(ctx context.Context, uncount bool, cond string, defaultTries int, errMsg string, args ...any) (LostJobs, error) {
	sql := releaseLostSQL(uncount, cond, len(args))
	args = append(args, defaultTries, errMsg)
	var out LostJobs
	if err := s.inject(ctx, "releaseLost"); err != nil {
		return out, fmt.Errorf("release lost jobs: %w", err)
	}
	var handed []string
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&out.Released, &out.Failed, &out.Cancelled, &handed); err != nil {
		return out, fmt.Errorf("release lost jobs: %w", err)
	}
	s.wakeHanded(ctx, handed)
	return out, nil
}

// releaseLostSQL is the statement of releaseLostAs: cond takes the
// parameters $1 to $n, and the statement adds $n+1, the tries of a job
// that has none of its own, and $n+2, the error written.
func releaseLostSQL(uncount bool, cond string, n int) string {
	// spent: the lost attempt was the job's last try.
	spent, attempts := fmt.Sprintf(`j.attempts >= COALESCE(j.max_tries, $%d)`, n+1), `j.attempts`
	if uncount {
		spent, attempts = `false`, `greatest(j.attempts - 1, 0)`
	}
	return fmt.Sprintf(`
		WITH lost AS (
			SELECT j.id, j.queue, j.name, j.attempts, j.reserved_at, j.reserved_by, j.reserved_master, j.tags,
			       j.cancel_requested_at IS NOT NULL AS cancel, j.cancelled_by
			FROM queue_jobs j WHERE %s FOR UPDATE
		), history_rows (`+historyColumns+`) AS (
			SELECT id, queue, name, attempts, CASE WHEN cancel THEN 'cancelled' ELSE 'lost' END,
			       reserved_at, COALESCE(reserved_at, now()), now(),
			       EXTRACT(EPOCH FROM now() - COALESCE(reserved_at, now())) * 1000,
			       CASE WHEN cancel THEN 'cancelled by ' || COALESCE(cancelled_by, 'an operator') || '; ' || $%d ELSE $%d END,
			       reserved_master, reserved_by, tags
			FROM lost
		`+historyInsertCTEs+`
		), cancelled AS (
			DELETE FROM queue_jobs j USING lost
			WHERE j.id = lost.id AND lost.cancel
			RETURNING j.id, j.limit_key
		), failed AS (
			DELETE FROM queue_jobs j USING lost
			WHERE j.id = lost.id AND NOT lost.cancel AND `+spent+`
			RETURNING j.*
		), counted AS (
			`+counterUpsert+`
			SELECT queue, `+counterShard+`, count(*), count(*) FILTER (WHERE NOT cancel),
			       0, 0, 0, count(*) FILTER (WHERE NOT cancel), count(*) FILTER (WHERE cancel), 0,
			       count(*) FILTER (WHERE id IN (SELECT id FROM failed)),
			       count(*) FILTER (WHERE NOT cancel AND id NOT IN (SELECT id FROM failed))
			FROM lost GROUP BY queue ORDER BY queue`+counterConflict+`
		), moved AS (
			INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries,
			                               backoff_secs, timeout_ms, error, created_at, retry_of, limit_key, limit_n,
			                               priority, tags, metadata)
			SELECT id, queue, name, payload, attempts, COALESCE(max_tries, $%d), backoff_secs, timeout_ms,
			       $%d, created_at, retry_of, limit_key, limit_n, priority, tags, metadata
			FROM failed
			RETURNING job_id
		), released AS (
			UPDATE queue_jobs j
			SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL,
			    available_at = now(), last_error = $%d, attempts = `+attempts+`
			FROM lost
			WHERE j.id = lost.id AND NOT lost.cancel AND NOT (`+spent+`)
			RETURNING j.id
		), freed AS (
			SELECT limit_key AS key, count(*)::integer AS n
			FROM (SELECT limit_key FROM failed UNION ALL SELECT limit_key FROM cancelled) x
			WHERE limit_key IS NOT NULL GROUP BY limit_key
		`+limitHandoffCTEs+`
		)
		SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM moved), (SELECT count(*) FROM cancelled),
		       `+limitHandedQueues,
		cond, n+2, n+2, n+1, n+2, n+2)
}

// JobReleaseWorker releases the jobs still held by a worker that died.
func (s *Store) JobReleaseWorker(ctx context.Context, worker string, defaultTries int, reason string) (LostJobs, error) {
	return s.releaseLost(ctx, `j.reserved_by = $1`, defaultTries,
		fmt.Sprintf("worker lost: %s (%s)", worker, reason), worker)
}

// MemberRelease releases the jobs held under the given member instances,
// which the caller saw expired (offline) in its view. The condition is
// checked again in the statement: a member that beat since is left alone.
// It reads only those members' jobs (through the reserved_master index).
func (s *Store) MemberRelease(ctx context.Context, instances []string, defaultTries int) (LostJobs, error) {
	if len(instances) == 0 {
		return LostJobs{}, nil
	}
	return s.releaseLost(ctx, `j.reserved_master = ANY($1::text[])
		AND NOT EXISTS (SELECT 1 FROM fleet_masters m WHERE m.instance = j.reserved_master AND m.expires_at >= now())`,
		defaultTries, "worker lost: its master (or, for a worker run without one, the worker itself) stopped beating",
		instances)
}

// MemberSweep releases the jobs of holders that have no live row at all
// (their row is gone: deleted after its retention, or never written by a
// worker of an older version), and jobs reserved with no member at all
// once reserved longer than their timeout (defaultTimeout when unset) plus
// orphanAfter. It reads every reserved job, so masters run it rarely
// (once a minute); MemberRelease does the per-beat work.
func (s *Store) MemberSweep(ctx context.Context, defaultTries int, defaultTimeout, orphanAfter time.Duration) (LostJobs, error) {
	return s.releaseLost(ctx, `(j.reserved_master IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM fleet_masters m WHERE m.instance = j.reserved_master AND m.expires_at >= now()))
		OR (j.reserved_by IS NOT NULL AND j.reserved_master IS NULL
		AND j.reserved_at + (COALESCE(j.timeout_ms, $1) + $2) * interval '1 millisecond' < now())`,
		defaultTries, "worker lost: its master stopped beating, or it held the job far past its timeout",
		defaultTimeout.Milliseconds(), orphanAfter.Milliseconds())
}

// WorkerOverdue returns the workers under master (an instance) holding a
// job reserved longer than its timeout (or defaultTimeout) plus grace, or
// a job whose cancel was requested longer than grace ago.
func (s *Store) WorkerOverdue(ctx context.Context, master string, defaultTimeout, grace time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT reserved_by FROM queue_jobs
		WHERE reserved_master = $1
		  AND (reserved_at + (COALESCE(timeout_ms, $2) + $3) * interval '1 millisecond' < now()
		       OR cancel_requested_at + $3 * interval '1 millisecond' < now())`,
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

// SessionsByApp counts this database's sessions per application_name,
// for the names that start with prefix (fleet's own: "fleet"). It reads
// pg_stat_activity, whose application_name every role may see.
func (s *Store) SessionsByApp(ctx context.Context, prefix string) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT application_name, count(*)::int FROM pg_stat_activity
		WHERE datname = current_database() AND starts_with(application_name, $1)
		GROUP BY application_name`, prefix)
	if err != nil {
		return nil, fmt.Errorf("count sessions: %w", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count sessions: %w", err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count sessions: %w", err)
	}
	return out, nil
}
