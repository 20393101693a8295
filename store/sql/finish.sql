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
--
-- The steps it shares with other statements are fragments, in
-- sql/fragments under the name of their include.

-- The batch, one row per attempt: d.
-- @include finish_batch

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

-- Moved to the failed jobs: the failed ones (failed, moved).
-- @include move_failed

-- Every row the statement changed: what the history, the counters and the
-- result are made from.
), changed AS (
    SELECT id, lease, limit_key, tags, status, err FROM completed
    UNION ALL SELECT id, lease, limit_key, tags, status, err FROM retried
    UNION ALL SELECT id, lease, limit_key, tags, NULL, NULL FROM failed

-- Each of the three outcomes frees a limited job's slot, handed over here
-- to due parked jobs of its key (freed, handoff).
-- @include changed_slot_handoff

-- The attempts written, with the status a stopped job got (written); their
-- history, straight into its two tables; the counters and the runtime
-- histogram, on one of 16 shards from @shard_base.
-- @include written_attempts
-- @include attempt_history
-- @include attempt_counters
-- @include runtime_histogram
)
-- The leases written, and the queues of the jobs handed a slot (NULL for
-- none), for the caller to wake.
SELECT id, lease, (SELECT array_agg(DISTINCT queue) FROM handoff) FROM changed
