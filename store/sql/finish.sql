-- Writes a batch of finished attempts of one worker in one statement
-- (JobFinishMany, for a batch that retries or snoozes a job; finish_ends.sql
-- is the same for a batch of ends only). Each attempt is one element of
-- the arrays @job_ids to @runtimes_ms, and counts only while the job's
-- lease is still the attempt's: every job is found by its primary key and
-- its token checked on the row, so the statement reads rows in proportion
-- to its batch under a custom and a generic plan alike, and an attempt
-- whose lease was lost is recorded nowhere.
--
-- By kind: a completed or cancelled job is deleted; a retried one is
-- released until its delay has passed; a snoozed one likewise, with its
-- attempt taken back and its snooze counted; a failed one moves to
-- queue_failed_jobs. A job an operator asked to cancel while it ran is
-- deleted and recorded as cancelled rather than retried or snoozed, so it
-- never runs again.

-- The batch, one row per attempt.
WITH d AS MATERIALIZED (
    SELECT * FROM unnest(@job_ids::bigint[], @leases::bigint[], @kinds::text[], @statuses::text[],
                         @delays_ms::bigint[], @errors::text[], @tries::integer[], @queues::text[],
                         @names::text[], @attempts::integer[], @reserved::timestamptz[],
                         @started::timestamptz[], @finished::timestamptz[], @runtimes_ms::float8[])
         AS d(id, lease, kind, status, delay_ms, err, tries, queue, name, attempt, reserved, started, finished, runtime)

-- The jobs to retry or snooze, read under their row lock so that a cancel
-- request committed while the statement runs is seen too; stopped are
-- those an operator asked to cancel.
), locked AS (
    SELECT j.id, j.cancel_requested_at IS NOT NULL AS cancel
    FROM queue_jobs j JOIN d ON j.id = d.id AND j.lease = d.lease
    WHERE d.kind IN ('retried', 'snoozed')
    FOR UPDATE OF j
), stopped AS (
    SELECT id FROM locked WHERE cancel

-- Deleted: the completed and cancelled jobs, and the stopped ones,
-- recorded as cancelled.
), completed AS (
    DELETE FROM queue_jobs j USING d
    WHERE j.id = d.id AND j.lease = d.lease
      AND (d.kind IN ('completed', 'cancelled') OR d.id IN (SELECT id FROM stopped))
    RETURNING j.id, d.lease, j.limit_key, j.tags,
              CASE WHEN d.kind IN ('retried', 'snoozed') THEN 'cancelled' END AS status,
              CASE WHEN d.kind IN ('retried', 'snoozed')
                   THEN 'cancelled by ' || COALESCE(j.cancelled_by, 'an operator') || ': ' || d.err END AS err

-- Released: the retried and snoozed jobs not stopped. A limited one is
-- parked again (available_at 'infinity') until its delay has passed,
-- holding no slot meanwhile.
), retried AS (
    UPDATE queue_jobs j
    SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL,
        available_at = CASE WHEN j.limit_key IS NULL THEN now() + d.delay_ms * interval '1 millisecond'
                            ELSE 'infinity' END,
        limit_due = CASE WHEN j.limit_key IS NOT NULL THEN now() + d.delay_ms * interval '1 millisecond' END,
        last_error = CASE WHEN d.kind = 'snoozed' THEN j.last_error ELSE d.err END,
        attempts = j.attempts - (d.kind = 'snoozed')::integer,
        snoozes = CASE WHEN d.kind = 'snoozed' THEN COALESCE(j.snoozes, 0) + 1 ELSE j.snoozes END
    FROM d
    WHERE d.kind IN ('retried', 'snoozed') AND j.id = d.id AND j.lease = d.lease
      AND d.id NOT IN (SELECT id FROM stopped)
    RETURNING j.id, d.lease, j.limit_key, j.tags, NULL::text AS status, NULL::text AS err

-- Moved to the failed jobs: the failed ones, with the tries that applied.
), failed AS (
    DELETE FROM queue_jobs j USING d
    WHERE d.kind = 'failed' AND j.id = d.id AND j.lease = d.lease
    RETURNING j.id, d.lease, j.queue, j.name, j.payload, j.attempts, COALESCE(j.max_tries, d.tries) AS max_tries,
              j.backoff_secs, j.timeout_ms, d.err, j.created_at, j.retry_of, j.limit_key, j.limit_n,
              j.priority, j.tags, j.metadata
), moved AS (
    INSERT INTO queue_failed_jobs (job_id, queue, name, payload, attempts, max_tries,
                                   backoff_secs, timeout_ms, error, created_at, retry_of, limit_key, limit_n,
                                   priority, tags, metadata)
    SELECT id, queue, name, payload, attempts, max_tries, backoff_secs, timeout_ms, err, created_at, retry_of,
           limit_key, limit_n, priority, tags, metadata
    FROM failed

-- Every row the statement changed: what the history, the counters and the
-- result are made from.
), changed AS (
    SELECT id, lease, limit_key, tags, status, err FROM completed
    UNION ALL SELECT id, lease, limit_key, tags, status, err FROM retried
    UNION ALL SELECT id, lease, limit_key, tags, NULL, NULL FROM failed

-- Each of the three outcomes frees a limited job's slot, handed over here
-- to due parked jobs of its key (see limits.go). For a batch without
-- limited jobs freed is empty and these CTEs touch nothing.
), freed AS (
    SELECT limit_key AS key, count(*)::integer AS n FROM changed
    WHERE limit_key IS NOT NULL GROUP BY limit_key
), slots AS (
    SELECT l.key, l.limit_n, l.active, f.n
    FROM queue_limits l JOIN freed f ON f.key = l.key
    WHERE l.key = ANY (ARRAY(SELECT key FROM freed))
    ORDER BY l.key
    FOR UPDATE OF l
), handoff AS (
    UPDATE queue_jobs j SET available_at = now(), limit_due = NULL
    WHERE j.id = ANY (ARRAY(
        SELECT p.id FROM slots s, LATERAL (
            SELECT id FROM queue_jobs
            WHERE limit_key = s.key AND available_at = 'infinity' AND limit_due <= now()
            ORDER BY limit_due, id
            LIMIT least(s.n, greatest(s.limit_n - s.active + s.n, 0))
            FOR UPDATE SKIP LOCKED) p))
      AND j.available_at = 'infinity'
    RETURNING j.id, j.queue, j.limit_key
), handed AS (
    SELECT limit_key AS key, count(*) AS n FROM handoff GROUP BY limit_key
), slotted AS (
    UPDATE queue_limits l SET active = greatest(s.active - s.n + COALESCE(h.n, 0), 0)
    FROM slots s LEFT JOIN handed h ON h.key = s.key
    WHERE l.key = s.key

-- The attempts written, with the status a stopped job got.
), written AS (
    SELECT d.id, d.queue, d.name, d.attempt, d.kind, COALESCE(c.status, d.status) AS status, d.reserved, d.started,
           d.finished, d.runtime, COALESCE(c.err, d.err) AS err, c.tags
    FROM d JOIN changed c ON c.id = d.id AND c.lease = d.lease

-- Their history, straight into its two tables: completed attempts and the
-- others (in either layout of the history, no row goes through the view).
), history_rows (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags) AS (
    SELECT id, queue, name, attempt, status, reserved, started, finished, runtime,
           NULLIF(err, ''), NULLIF(@master, ''), NULLIF(@worker, ''), tags
    FROM written
), history AS (
    INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags)
    SELECT * FROM history_rows WHERE status = 'completed'
), history_other AS (
    INSERT INTO fleet_jobs_failed (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags)
    SELECT * FROM history_rows WHERE status IS DISTINCT FROM 'completed'

-- The counters, per queue on one of 16 shards from @shard_base, picked by
-- backend so that concurrent writers rarely wait on one another's row;
-- rows taken in queue order so that they never deadlock. Snoozed attempts
-- are no attempts; cancelled and snoozed ones are no failures.
), counted AS (
    INSERT INTO fleet_counters AS c (queue, shard, processed, failed,
    completed, attempt_failed, timed_out, lost, cancelled, retried, failed_final, requeued)
    SELECT queue, (@shard_base::integer + mod(pg_backend_pid(), 16)), count(*) FILTER (WHERE status <> 'snoozed'),
    count(*) FILTER (WHERE status IN ('failed', 'timed_out', 'lost')),
    count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'),
    count(*) FILTER (WHERE status = 'timed_out'), 0, count(*) FILTER (WHERE status = 'cancelled'),
    count(*) FILTER (WHERE kind = 'retried' AND status IN ('failed', 'timed_out')),
    count(*) FILTER (WHERE kind = 'failed'), 0
    FROM written GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, shard) DO UPDATE SET processed = c.processed + EXCLUDED.processed,
        failed = c.failed + EXCLUDED.failed, completed = c.completed + EXCLUDED.completed,
        attempt_failed = c.attempt_failed + EXCLUDED.attempt_failed, timed_out = c.timed_out + EXCLUDED.timed_out,
        lost = c.lost + EXCLUDED.lost, cancelled = c.cancelled + EXCLUDED.cancelled,
        retried = c.retried + EXCLUDED.retried, failed_final = c.failed_final + EXCLUDED.failed_final,
        requeued = c.requeued + EXCLUDED.requeued, updated_at = now()

-- The runtime histogram (RuntimeBoundsMs, negated, smallest first: the
-- bucket is how many bounds lie below the runtime), on the same shard.
), timed AS (
    INSERT INTO fleet_runtime_counters AS r (queue, name, shard, bucket, n, sum_ms)
    SELECT queue, name, (@shard_base::integer + mod(pg_backend_pid(), 16)), bucket, count(*), sum(runtime)
    FROM (SELECT queue, name, GREATEST(runtime, 0) AS runtime, (15 - width_bucket(-(GREATEST(runtime, 0))::float8, '{-1800000,-300000,-60000,-30000,-10000,-5000,-2500,-1000,-500,-250,-100,-50,-25,-10,-5}'::float8[])) AS bucket
          FROM written WHERE status <> 'snoozed' AND runtime IS NOT NULL) t
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (queue, name, shard, bucket) DO UPDATE SET n = r.n + EXCLUDED.n, sum_ms = r.sum_ms + EXCLUDED.sum_ms
)
-- The leases written, and the queues of the jobs handed a slot (NULL for
-- none), for the caller to wake.
SELECT id, lease, (SELECT array_agg(DISTINCT queue) FROM handoff) FROM changed
