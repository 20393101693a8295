-- Ends the attempts a worker stopped before their handlers returned
-- (JobInterrupt): the jobs of @job_ids still held under their @leases. Each
-- attempt gets an 'interrupted' history row (started at its @started_at,
-- ended now, with @error saying why) and counts as processed and
-- interrupted in fleet_counters, and its job is ready again at once. Its
-- attempt stays counted, so its next claim makes the next attempt, and its
-- tries grow by one from @tries (the tries that applied to the attempt):
-- the interruption spends none of them. A released limited job keeps its
-- slot, as any released job. A job an operator asked to cancel is left
-- alone, for JobRelease to end as cancelled. Rows are found by primary
-- key, so the statement's cost grows with its batch.
WITH d AS MATERIALIZED (
    SELECT * FROM unnest(@job_ids::bigint[], @leases::bigint[], @tries::integer[], @started_at::timestamptz[])
        AS d(id, lease, tries, started_at)
), held AS (
    SELECT j.id, j.queue, j.name, j.attempts, j.reserved_at, j.reserved_by, j.reserved_master, j.tags,
           d.tries, d.started_at
    FROM queue_jobs j JOIN d ON j.id = d.id AND j.lease = d.lease
    WHERE j.cancel_requested_at IS NULL
    ORDER BY j.id
    FOR UPDATE OF j
), released AS (
    UPDATE queue_jobs j
    SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL, available_at = now(),
        max_tries = greatest(held.tries, 1) + 1
    FROM held
    WHERE j.id = held.id
    RETURNING j.id, j.queue

-- The history, straight into the table of the non-completed attempts (in
-- either layout of the history, no row goes through the view).
), history AS (
    INSERT INTO fleet_jobs_failed (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags)
    SELECT id, queue, name, attempts, 'interrupted', reserved_at, COALESCE(started_at, reserved_at, now()), now(),
           greatest(EXTRACT(EPOCH FROM now() - COALESCE(started_at, reserved_at, now())) * 1000, 0),
           @error, reserved_master, reserved_by, tags
    FROM held

-- The counters, on a shard no other writing transaction holds
-- (queue_counter_shard), rows taken in queue order so concurrent writers
-- never deadlock.
), counted AS (
    INSERT INTO fleet_counters AS c (queue, shard, processed, interrupted)
    SELECT queue, queue_counter_shard(0), count(*), count(*) FROM held
    GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, shard) DO UPDATE SET processed = c.processed + EXCLUDED.processed,
        interrupted = c.interrupted + EXCLUDED.interrupted, updated_at = now()
)
-- Released, and their queues (NULL for none), for the caller to wake.
SELECT (SELECT count(*) FROM released)::integer, (SELECT array_agg(DISTINCT queue) FROM released)
