-- The second statement of a cancel (JobCancel), after cancel_lock.sql in
-- its transaction. It deletes the unreserved jobs of @job_ids with a
-- 'cancelled' history row each (attempt: the attempts they had; no
-- runtime), frees the slots of those that held one (unparked limited
-- jobs) and hands them over, and asks for the cancel of the reserved ones
-- (by @who; a first request stays), notifying their workers at commit on
-- the channel fleet_cancel (CancelChannel). It reads the jobs by primary
-- key: its cost grows with @job_ids alone. No counter counts a job
-- cancelled before it ran.
WITH gone AS (
    DELETE FROM queue_jobs j
    WHERE j.id = ANY (@job_ids::bigint[]) AND j.reserved_by IS NULL
    RETURNING j.id, j.queue, j.name, j.attempts, j.limit_key, j.available_at, j.tags
), requested AS (
    UPDATE queue_jobs j
    SET cancel_requested_at = COALESCE(j.cancel_requested_at, now()), cancelled_by = COALESCE(j.cancelled_by, @who)
    WHERE j.id = ANY (@job_ids::bigint[]) AND j.reserved_by IS NOT NULL
    RETURNING j.id, j.lease, j.cancelled_by

-- The history of the deleted jobs, straight into its two tables.
), history_rows (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags) AS (
    SELECT id, queue, name, attempts, 'cancelled', NULL::timestamptz, now(), now(), 0, 'cancelled by ' || @who, NULL, NULL, tags
    FROM gone
-- @include history_insert

-- The slots of the deleted jobs that held one (a parked job holds none),
-- handed over (slot_handoff).
), freed AS (
    SELECT limit_key AS key, count(*)::integer AS n FROM gone
    WHERE limit_key IS NOT NULL AND available_at <> 'infinity' GROUP BY limit_key
-- @include slot_handoff

-- The workers of the reserved ones, told at commit.
), notified AS (
    SELECT pg_notify('fleet_cancel', json_build_object('id', id, 'lease', lease, 'by', cancelled_by)::text)
    FROM requested
)
-- The ids deleted, the ids asked to stop, the notifications sent, and the
-- queues of the jobs handed a slot (NULL for none).
SELECT ARRAY(SELECT id FROM gone), ARRAY(SELECT id FROM requested), (SELECT count(*) FROM notified),
       (SELECT array_agg(DISTINCT queue) FROM handoff)
