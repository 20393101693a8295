-- Writes a batch of finished attempts that all end their job (JobFinishMany
-- for a batch without a retry or a snooze, and JobCompleteTx): finish.sql
-- without the CTEs that release a retried or snoozed job and look for a
-- cancel request under its row lock first, which a batch of ends would run
-- for nothing (they cost about 4 % of a drain's throughput). Each attempt
-- is one element of the arrays @job_ids to @runtimes_ms (@delays_ms unused
-- by these kinds, but sent alike), and counts only while the job's lease
-- is still the attempt's: every job is found by its primary key and its
-- token checked on the row, and an attempt whose lease was lost is
-- recorded nowhere.
--
-- By kind: a completed or cancelled job is deleted; a failed one moves to
-- queue_failed_jobs. The steps it shares with finish.sql are fragments, in
-- sql/fragments under the name of their include.

-- The batch, one row per attempt: d.
-- @include finish_batch

-- Deleted: the completed and cancelled jobs.
), completed AS (
    DELETE FROM queue_jobs j USING d
    WHERE j.id = d.id AND j.lease = d.lease AND d.kind IN ('completed', 'cancelled')
    RETURNING j.id, d.lease, j.limit_key, j.tags, NULL::text AS status, NULL::text AS err

-- Moved to the failed jobs: the failed ones (failed, moved).
-- @include move_failed

-- Every row the statement changed: what the history, the counters and the
-- result are made from.
), changed AS (
    SELECT id, lease, limit_key, tags, status, err FROM completed
    UNION ALL SELECT id, lease, limit_key, tags, NULL, NULL FROM failed

-- Each outcome frees a limited job's slot, handed over here to due parked
-- jobs of its key (freed, handoff).
-- @include changed_slot_handoff

-- The attempts written (written); their history, straight into its two
-- tables; the counters and the runtime histogram, on one of 16 shards from
-- @shard_base.
-- @include written_attempts
-- @include attempt_history
-- @include attempt_counters
-- @include runtime_histogram
)
-- The leases written, and the queues of the jobs handed a slot (NULL for
-- none), for the caller to wake.
SELECT id, lease, (SELECT array_agg(DISTINCT queue) FROM handoff) FROM changed
