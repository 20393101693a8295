package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/store"
)

// db holds the bench's own statements, kept out of the product's store.
// They touch only the queues whose name starts with the prefix they are
// given (the bench's own), apart from foreignJobs, which counts the
// others, and xactCommits, which reads the database's statistics.
type db struct {
	pool *pgxpool.Pool
}

// tablesMissing lists fleet's tables that do not exist in the
// database (none when it is migrated).
func (d db) tablesMissing(ctx context.Context) ([]string, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT t FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NULL ORDER BY t`,
		[]string{"queue_jobs", "queue_counts", "queue_failed_jobs", "fleet_jobs", "fleet_masters", "fleet_counters", "fleet_runtime_counters", "fleet_metrics", "fleet_state", "fleet_duties"})
	if err != nil {
		return nil, fmt.Errorf("look for fleet's tables: %w", err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look for fleet's tables: %w", err)
	}
	return missing, nil
}

// foreignJobs counts the rows of queue_jobs whose queue does not start
// with prefix.
func (d db) foreignJobs(ctx context.Context, prefix string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs WHERE left(queue, length($1)) <> $1`, prefix).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count jobs of other queues: %w", err)
	}
	return n, nil
}

// cleanupResult says what cleanup deleted.
type cleanupResult struct {
	Jobs, FailedJobs, History int64
}

// cleanup deletes everything of the queues starting with prefix:
// queued and failed jobs, their history, counters and metrics snapshots,
// and vacuums the tables it deleted rows from.
func (d db) cleanup(ctx context.Context, prefix string) (cleanupResult, error) {
	var res cleanupResult
	var completed, other int64 // history rows deleted
	steps := []struct {
		what string
		sql  string
		n    *int64
	}{
		{"queued jobs", `DELETE FROM queue_jobs WHERE left(queue, length($1)) = $1`, &res.Jobs},
		{"failed jobs", `DELETE FROM queue_failed_jobs WHERE left(queue, length($1)) = $1`, &res.FailedJobs},
		// The history's two tables, not fleet_jobs: on TimescaleDB that is a
		// view, which takes no DELETE.
		{"completed history", `DELETE FROM fleet_jobs_completed WHERE left(queue, length($1)) = $1`, &completed},
		{"other history", `DELETE FROM fleet_jobs_failed WHERE left(queue, length($1)) = $1`, &other},
		{"counters", `DELETE FROM fleet_counters WHERE left(queue, length($1)) = $1`, nil},
		{"runtime counters", `DELETE FROM fleet_runtime_counters WHERE left(queue, length($1)) = $1`, nil},
		{"metrics", `DELETE FROM fleet_metrics WHERE kind = 'queue' AND left(subject, length($1)) = $1`, nil},
	}
	for _, st := range steps {
		tag, err := d.pool.Exec(ctx, st.sql, prefix)
		if err != nil {
			return res, fmt.Errorf("delete the bench's %s: %w", st.what, err)
		}
		if st.n != nil {
			*st.n = tag.RowsAffected()
		}
	}
	res.History = completed + other
	// The deleted rows would otherwise stay as dead entries where the next
	// scenario's claims and counts read (autovacuum may be off, and is
	// slow to come in any case), so each scenario starts from a vacuumed
	// table.
	for _, table := range []struct {
		name string
		n    int64
	}{{"queue_jobs", 1}, {"fleet_jobs_completed", completed}, {"fleet_jobs_failed", other}} { // queue_jobs always: an earlier run may have left it so
		if table.n == 0 {
			continue
		}
		if _, err := d.pool.Exec(ctx, `VACUUM (ANALYZE, SKIP_LOCKED) `+table.name, pgx.QueryExecModeSimpleProtocol); err != nil {
			return res, fmt.Errorf("vacuum %s after the bench: %w", table.name, err)
		}
	}
	return res, nil
}

// insert bulk-inserts n jobs named name on queue with an empty payload
// (COPY), as fast as the database takes them.
func (d db) insert(ctx context.Context, queue, name string, n int) error {
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		return []any{queue, name}, nil
	})
	got, err := d.pool.CopyFrom(ctx, pgx.Identifier{"queue_jobs"}, []string{"queue", "name"}, src)
	if err != nil {
		return fmt.Errorf("copy %d jobs into %s: %w", n, queue, err)
	}
	if got != int64(n) {
		return fmt.Errorf("copy %d jobs into %s: %d copied", n, queue, got)
	}
	return nil
}

// claimDelete is one step of the reference loop: in one transaction it
// locks up to batch ready jobs of queue, oldest first, skipping locked
// rows, and deletes them. It returns how many it deleted.
func (d db) claimDelete(ctx context.Context, queue string, batch int) (int, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("bench claim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The same pick as a claim: the queue's priorities from queue_counts,
	// then each one's ready jobs in order along the ready index.
	rows, err := tx.Query(ctx, store.ReadyPick(), queue, batch)
	if err != nil {
		return 0, fmt.Errorf("bench claim: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("bench claim: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM queue_jobs WHERE id = ANY($1)`, ids); err != nil {
		return 0, fmt.Errorf("bench delete: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("bench commit: %w", err)
	}
	return len(ids), nil
}

// queueSize counts the jobs of queue, reserved or not, from the
// trigger-maintained counts (exact, a few rows whatever the backlog).
func (d db) queueSize(ctx context.Context, queue string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `
		SELECT COALESCE(sum(unreserved + reserved), 0)::bigint FROM queue_counts WHERE queue = $1`, queue).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the jobs of %s: %w", queue, err)
	}
	return n, nil
}

// jobGone reports whether job id has left queue_jobs.
func (d db) jobGone(ctx context.Context, id int64) (bool, error) {
	var there bool
	if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queue_jobs WHERE id = $1)`, id).Scan(&there); err != nil {
		return false, fmt.Errorf("look for job %d: %w", id, err)
	}
	return !there, nil
}

// attempt is the recorded history of one job's attempt.
type attempt struct {
	ReservedAt time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// errNoHistory says a job has no history row (yet).
var errNoHistory = errors.New("no history row")

// attemptOf returns the history of job id's first attempt.
func (d db) attemptOf(ctx context.Context, id int64) (attempt, error) {
	var a attempt
	var reserved *time.Time
	err := d.pool.QueryRow(ctx, `
		SELECT reserved_at, started_at, finished_at FROM fleet_jobs
		WHERE job_id = $1 ORDER BY attempt LIMIT 1`, id).Scan(&reserved, &a.StartedAt, &a.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, errNoHistory
	}
	if err != nil {
		return a, fmt.Errorf("read the history of job %d: %w", id, err)
	}
	if reserved != nil {
		a.ReservedAt = *reserved
	}
	return a, nil
}

// firstReserved returns when the first attempt of queue that finished
// at or after since was reserved (false when none finished).
func (d db) firstReserved(ctx context.Context, queue string, since time.Time) (time.Time, bool, error) {
	var t *time.Time
	err := d.pool.QueryRow(ctx, `
		SELECT min(reserved_at) FROM fleet_jobs WHERE queue = $1 AND finished_at >= $2`, queue, since).Scan(&t)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the first claim of %s: %w", queue, err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return *t, true, nil
}

// xactCommits returns pg_stat_database.xact_commit of the current
// database: transactions committed so far (the statistics lag by up to a
// second or so).
func (d db) xactCommits(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return n, nil
}

// durableCommit times one small transaction that writes WAL (a
// transactional logical message, which touches no table) and commits
// with the session's synchronous_commit: the flush a dispatch and a claim
// each wait for.
func (d db) durableCommit(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	if _, err := d.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, 'fleet.bench', '')`); err != nil {
		return 0, fmt.Errorf("time a durable commit: %w", err)
	}
	return time.Since(t0), nil
}

// failedCount counts the failed jobs of queue.
func (d db) failedCount(ctx context.Context, queue string) (int64, error) {
	var n int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM queue_failed_jobs WHERE queue = $1`, queue).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the failed jobs of %s: %w", queue, err)
	}
	return n, nil
}

// heldTx is a transaction another session holds open (the held
// scenario): it has taken a transaction id, so no row version deleted or
// updated after it began can be cleaned up until it ends.
type heldTx struct {
	conn *pgx.Conn
	pid  uint32
}

// hold opens a connection of its own on url (application_name "fleet
// bench hold"), begins a transaction and takes a transaction id, and
// keeps it open until release.
func (d db) hold(ctx context.Context, url string) (*heldTx, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("hold a transaction: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "fleet bench hold"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hold a transaction: %w", err)
	}
	if _, err := conn.Exec(ctx, `BEGIN; SELECT txid_current()`, pgx.QueryExecModeSimpleProtocol); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("hold a transaction: %w", err)
	}
	return &heldTx{conn: conn, pid: conn.PgConn().PID()}, nil
}

// release ends the held transaction and its connection.
func (h *heldTx) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = h.conn.Exec(ctx, `ROLLBACK`, pgx.QueryExecModeSimpleProtocol)
	_ = h.conn.Close(ctx)
}

// deadRows is the server's count of dead row versions in table, from its
// statistics (they lag the table by a moment).
func (d db) deadRows(ctx context.Context, table string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT COALESCE(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relid = to_regclass($1)`, table).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the dead rows of %s: %w", table, err)
	}
	return n, nil
}

// listeningWorkers counts the fleet:work sessions of this database that
// listen for notifications (their last statement a LISTEN).
func (d db) listeningWorkers(ctx context.Context) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, `
		SELECT count(DISTINCT application_name) FROM pg_stat_activity
		WHERE datname = current_database() AND starts_with(application_name, 'fleet:work ')
		  AND starts_with(query, 'LISTEN')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the listening workers: %w", err)
	}
	return n, nil
}

// prefetchRun reads how the jobs of a prefetch run ran: the start spread
// and longest claim-to-start of the slow jobs (slow), and the jobs each
// worker completed.
func (d db) prefetchRun(ctx context.Context, queue string, slow []int64) (prefetchRun, error) {
	var run prefetchRun
	var first, last *time.Time
	var wait *float64
	var n int
	err := d.pool.QueryRow(ctx, `
		SELECT count(*)::int, min(started_at), max(started_at),
		       max(EXTRACT(EPOCH FROM started_at - reserved_at) * 1000)::float8
		FROM fleet_jobs WHERE job_id = ANY ($1) AND status = 'completed'`, slow).Scan(&n, &first, &last, &wait)
	if err != nil {
		return run, fmt.Errorf("read the slow jobs' starts: %w", err)
	}
	if n != len(slow) || first == nil || last == nil {
		return run, fmt.Errorf("%w: %d of %d", errPrefetchIncomplete, n, len(slow))
	}
	run.SpreadMs = round(float64(last.Sub(*first).Microseconds())/1000, 1)
	if wait != nil {
		run.MaxClaimToStartMs = round(*wait, 1)
	}
	rows, err := d.pool.Query(ctx, `
		SELECT worker, count(*)::int, count(*) FILTER (WHERE job_id = ANY ($2))::int,
		       count(*) FILTER (WHERE attempt > 1)
		FROM fleet_jobs WHERE queue = $1 AND status = 'completed' GROUP BY worker`, queue, slow)
	if err != nil {
		return run, fmt.Errorf("read the jobs per worker: %w", err)
	}
	all, slowBy := map[string]int{}, map[string]int{}
	var w string
	var k, s int
	var retried int64
	if _, err := pgx.ForEachRow(rows, []any{&w, &k, &s, &retried}, func() error {
		all[w], slowBy[w] = k, s
		run.Retried += retried
		return nil
	}); err != nil {
		return run, fmt.Errorf("read the jobs per worker: %w", err)
	}
	run.JobsPerWorker, run.SlowPerWorker = perWorker(all), perWorker(slowBy)
	return run, nil
}

// fleetBackends returns the process ids of the server processes that serve
// fleet's masters and workers on the current database (by their
// application_name: "fleet master ..." and "fleet:work ...").
func (d db) fleetBackends(ctx context.Context) ([]int, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND (application_name LIKE 'fleet master %' OR application_name LIKE 'fleet:work %')`)
	if err != nil {
		return nil, fmt.Errorf("list fleet's sessions: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("list fleet's sessions: %w", err)
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, nil
}
