package store

import (
	"context"
	"fmt"
)

// Crashes. When a worker process dies (a crash: an exit status or a
// signal it did not report a reason for), its master knows which jobs were
// in it: every job still reserved under the worker's name, but for those
// the worker said it held waiting for a slot and never started (its
// prefetch, see JobReleaseCrashedParams.Unstarted), which are given back
// as if never claimed. Which of them
// killed it is not known when it ran several, so none is charged:
// JobReleaseCrashed ends each attempt with a 'lost' history row saying
// why and gives the job one more try, so its next run is its next attempt
// and the crash spent none of its tries (as an interrupted attempt does),
// and counts the crash on the job (the crashes column). A job that was in two processes that died (SuspectCrashes) is
// a suspect: ordinary claims pass it by, and only an isolation process
// (one slot, started by the master for a queue with ready suspects; see
// JobClaimParams.Suspects) takes it, alone. A crash of an isolation
// process is its one job's doing: the attempt counts against its tries,
// and its error says how the process ended and what it last wrote on its
// stderr; a suspect that completes there was innocent and is done. This is
// the poison-pill rule of Sidekiq Pro's reliable fetch, with isolation in
// place of its kill: a job that crashes every process it runs in fails
// after its tries, and the jobs beside it lose none.

// SuspectCrashes is how many crashes of processes a job must have been in
// to be a suspect. The statements say it as the literal 2, which the
// partial index queue_jobs_suspect_idx repeats.
const SuspectCrashes = 2

// MaxCrashIDs is how many of the other jobs of a crashed process the error
// of a job released from it names.
const MaxCrashIDs = 5

// JobReleaseCrashedParams says which process died and how.
type JobReleaseCrashedParams struct {
	// Worker is the dead process's lease-holder name.
	Worker string
	// Isolated says the process was an isolation process: its one job is
	// charged with the crash.
	Isolated bool
	// Exit says how it ended, as spawner.Exit.Describe does ("exited with
	// status 3", "killed by signal SIGKILL").
	Exit string
	// Stderr is the end of what it wrote on stderr (spawner.Exit.Stderr),
	// kept in a charged job's error.
	Stderr string
	// Tries and Backoff are the defaults of the dead process for jobs that
	// set none: a charged job fails once its tries are spent, or waits out
	// its backoff before its next attempt.
	Tries   int
	Backoff []int
	// Unstarted are jobs the process said it held waiting for a slot and
	// had not started (spawner.Exit.Unstarted): the crash did not touch
	// them, so each is given back as a graceful stop gives back its
	// prefetched jobs (JobRelease with Uncount): ready at once, its
	// attempt taken back, no history row, no crash counted. An id the
	// worker no longer holds is ignored.
	Unstarted []int64
}

// CrashedJobs says what JobReleaseCrashed did.
type CrashedJobs struct {
	// Released counts jobs made ready again; Suspects counts those of them
	// that are suspects now, or still (see SuspectCrashes).
	Released, Suspects int64
	// Charged counts the attempts counted against a job's tries (the one
	// job of an isolation process); Failed the jobs moved to failed jobs
	// because that was their last try.
	Charged, Failed int64
	// Cancelled counts jobs with a cancel request, which end as cancelled.
	Cancelled int64
	// Unstarted counts the jobs of Unstarted given back (no attempt, no
	// crash: see JobReleaseCrashedParams.Unstarted).
	Unstarted int64
}

// crashRelease is the statement of JobReleaseCrashed: $1 the worker, $2
// isolated, $3 the default tries, $4 how the process ended, $5 the end of
// its stderr, $6 the default backoff, $7 the most other ids an error
// names, $8 the jobs it never started. Every job reserved under the
// worker is locked (by id, so that two releases never deadlock) and ends
// one of five ways: cancelled (a cancel request), failed (charged, and its
// last try), retried (charged: ready after its backoff, its attempt
// counted), lost (beside the crash: ready at once with one more try and
// its crash counted) or given back (never started: ready at once, its
// attempt taken back, nothing written). It writes the history rows and
// counters of each but the last, hands the slots of the limited jobs that
// left over, and returns what it did and the queues handed a slot.
var crashRelease = `
	WITH held AS (
		SELECT j.id, j.queue, j.name, j.attempts, j.reserved_at, j.reserved_by, j.reserved_master, j.tags,
		       j.cancel_requested_at IS NOT NULL AS cancel, j.cancelled_by, j.crashes, j.limit_key,
		       COALESCE(j.max_tries, $3) AS tries, COALESCE(j.backoff_secs, $6::integer[]) AS backoff,
		       j.id = ANY ($8::bigint[]) AS unstarted
		FROM queue_jobs j WHERE j.reserved_by = $1 ORDER BY j.id FOR UPDATE
	), unstarted AS (
		UPDATE queue_jobs j
		SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL,
		    available_at = now(), attempts = j.attempts - 1
		FROM held h
		WHERE j.id = h.id AND h.unstarted AND NOT h.cancel
		RETURNING j.id
	), lost AS (
		SELECT h.*, $2::boolean AND NOT h.unstarted AS charged, $2::boolean AND NOT h.unstarted AND h.attempts >= h.tries AS spent,
		       CASE WHEN h.unstarted THEN
		           'never started: its process ' || $4 || ' while the job waited for a slot'
		       WHEN $2::boolean THEN
		           'crashed its process: the process ' || $4 || ' while running this job alone, in an isolation process (attempt '
		           || h.attempts || ' of ' || h.tries || ' tries)'
		           || CASE WHEN $5 <> '' THEN E'; the end of its stderr:\n' || $5 ELSE '; it wrote nothing on stderr' END
		       ELSE
		           'lost: its process ' || $4 || ' while running it'
		           || CASE WHEN o.n = 0 THEN ' and no other job' ELSE ' beside ' || o.n || CASE WHEN o.n = 1 THEN ' other job (' ELSE ' other jobs (' END
		              || o.ids || CASE WHEN o.n > $7 THEN ', ...' ELSE '' END || ')' END
		           || '; the attempt spends no try (the job gets one more)'
		           || CASE WHEN h.crashes + 1 >= 2 THEN '; it was in ' || h.crashes + 1
		              || ' processes that died, so it runs again alone, in an isolation process' ELSE '' END
		       END AS msg
		FROM held h, LATERAL (
			SELECT (SELECT count(*) FROM held x WHERE x.id <> h.id AND NOT x.unstarted) AS n,
			       (SELECT string_agg(y.id::text, ', ' ORDER BY y.id)
			        FROM (SELECT x.id FROM held x WHERE x.id <> h.id AND NOT x.unstarted ORDER BY x.id LIMIT $7) y) AS ids
		) o
		WHERE NOT h.unstarted OR h.cancel
	), history_rows (` + historyColumns + `) AS (
		SELECT id, queue, name, CASE WHEN unstarted THEN greatest(attempts - 1, 0) ELSE attempts END,
		       CASE WHEN cancel THEN 'cancelled' WHEN charged THEN 'failed' ELSE 'lost' END,
		       reserved_at, COALESCE(reserved_at, now()), now(),
		       EXTRACT(EPOCH FROM now() - COALESCE(reserved_at, now())) * 1000,
		       CASE WHEN cancel THEN 'cancelled by ' || COALESCE(cancelled_by, 'an operator') || '; ' || msg ELSE msg END,
		       reserved_master, reserved_by, tags
		FROM lost
	` + historyInsertCTEs + `
	), cancelled AS (
		DELETE FROM queue_jobs j USING lost
		WHERE j.id = lost.id AND lost.cancel
		RETURNING j.id, j.limit_key
	), failed AS (
		DELETE FROM queue_jobs j USING lost
		WHERE j.id = lost.id AND NOT lost.cancel AND lost.spent
		RETURNING j.*
	), moved AS (
		INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries,
		                               backoff_secs, timeout_ms, error, created_at, retry_of, limit_key, limit_n,
		                               priority, tags, metadata)
		SELECT f.id, f.queue, f.name, f.payload, f.attempts, COALESCE(f.max_tries, $3), f.backoff_secs, f.timeout_ms,
		       lost.msg, f.created_at, f.retry_of, f.limit_key, f.limit_n, f.priority, f.tags, f.metadata
		FROM failed f JOIN lost ON lost.id = f.id
		RETURNING job_id
	), released AS (
		UPDATE queue_jobs j
		SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL, last_error = lost.msg,
		    available_at = CASE WHEN lost.charged AND j.limit_key IS NULL
		        THEN now() + COALESCE(lost.backoff[least(lost.attempts, cardinality(lost.backoff))], 0) * interval '1 second'
		        ELSE now() END,
		    max_tries = CASE WHEN lost.charged THEN j.max_tries ELSE lost.tries + 1 END,
		    crashes = CASE WHEN lost.charged THEN j.crashes ELSE j.crashes + 1 END
		FROM lost
		WHERE j.id = lost.id AND NOT lost.cancel AND NOT lost.spent
		RETURNING j.id, j.crashes
	), counted AS (
		` + counterUpsert + `
		SELECT queue, ` + counterShard + `, count(*), count(*) FILTER (WHERE NOT cancel),
		       0, count(*) FILTER (WHERE NOT cancel AND charged), 0,
		       count(*) FILTER (WHERE NOT cancel AND NOT charged), count(*) FILTER (WHERE cancel),
		       count(*) FILTER (WHERE NOT cancel AND charged AND NOT spent),
		       count(*) FILTER (WHERE NOT cancel AND spent),
		       count(*) FILTER (WHERE NOT cancel AND NOT charged)
		FROM lost GROUP BY queue ORDER BY queue` + counterConflict + `
	), freed AS (
		SELECT limit_key AS key, count(*)::integer AS n
		FROM (SELECT limit_key FROM failed UNION ALL SELECT limit_key FROM cancelled) x
		WHERE limit_key IS NOT NULL GROUP BY limit_key
	` + limitHandoffCTEs + `
	)
	SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM released WHERE crashes >= 2),
	       (SELECT count(*) FROM lost WHERE charged AND NOT cancel), (SELECT count(*) FROM moved),
	       (SELECT count(*) FROM cancelled), (SELECT count(*) FROM unstarted), ` + limitHandedQueues

// JobReleaseCrashed releases the jobs a worker process held when it died
// without saying why (see the comment on crashes above). With Isolated,
// its job was alone in it and is charged: the attempt counts, the job's
// error (and its 'failed' history row) says how the process ended with
// the end of its stderr, and it fails for good when that was its last
// try, or waits out its backoff (a limited job, which keeps its slot, does
// not wait). Otherwise every job is released at once with one more try
// (its tries, or Tries when it set none, plus one) and its crash counted,
// with a 'lost' history row naming how the process ended and the other
// jobs it ran (up to MaxCrashIDs of them).
// Jobs with a cancel request end as cancelled either way. It reads the
// worker's jobs through the reserved_by index.
func (s *Store) JobReleaseCrashed(ctx context.Context, p JobReleaseCrashedParams) (CrashedJobs, error) {
	var out CrashedJobs
	if err := s.inject(ctx, "releaseLost"); err != nil {
		return out, fmt.Errorf("release the jobs of crashed worker %s: %w", p.Worker, err)
	}
	backoff := make([]int32, len(p.Backoff))
	for i, b := range p.Backoff {
		backoff[i] = int32(b)
	}
	var handed []string
	unstarted := p.Unstarted
	if unstarted == nil {
		unstarted = []int64{}
	}
	err := s.pool.QueryRow(ctx, crashRelease, p.Worker, p.Isolated, p.Tries, p.Exit,
		StorableText(p.Stderr), backoff, MaxCrashIDs, unstarted).
		Scan(&out.Released, &out.Suspects, &out.Charged, &out.Failed, &out.Cancelled, &out.Unstarted, &handed)
	if err != nil {
		return out, fmt.Errorf("release the jobs of crashed worker %s: %w", p.Worker, err)
	}
	s.wakeHanded(ctx, handed)
	return out, nil
}

// JobSuspects counts the suspects of each of queues that are ready now
// (see SuspectCrashes), through queue_jobs_suspect_idx: its cost grows
// with the suspects, which a healthy fleet has none of. Queues without one
// are left out.
func (s *Store) JobSuspects(ctx context.Context, queues []string) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT queue, count(*)::integer FROM queue_jobs
		WHERE queue = ANY ($1::text[]) AND crashes >= 2 AND reserved_by IS NULL AND available_at <= now()
		GROUP BY queue`, queues)
	if err != nil {
		return nil, fmt.Errorf("count suspect jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var q string
		var n int
		if err := rows.Scan(&q, &n); err != nil {
			return nil, fmt.Errorf("count suspect jobs: %w", err)
		}
		out[q] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count suspect jobs: %w", err)
	}
	return out, nil
}
