-- Gives held jobs back to their queue at once (JobRelease): the jobs of
-- @job_ids whose lease is still the one in @leases. With @uncount, their
-- attempt is taken back; @error, when not empty, is kept as their last
-- error. A job an operator asked to cancel while it was held is deleted
-- instead, with a 'cancelled' history row, and its concurrency slot handed
-- over: it must not run again. Rows are found by primary key, so the
-- statement's cost grows with its batch.
WITH d AS MATERIALIZED (
    SELECT * FROM unnest(@job_ids::bigint[], @leases::bigint[]) AS d(id, lease)
), cancelled AS (
    DELETE FROM queue_jobs j USING d
    WHERE j.id = d.id AND j.lease = d.lease AND j.cancel_requested_at IS NOT NULL
    RETURNING j.id, j.queue, j.name, j.attempts, j.reserved_at, j.reserved_by, j.reserved_master,
              j.limit_key, j.tags, j.cancelled_by
), released AS (
    UPDATE queue_jobs j
    SET reserved_by = NULL, reserved_master = NULL, reserved_at = NULL, lease = NULL, available_at = now(),
        attempts = CASE WHEN @uncount THEN j.attempts - 1 ELSE j.attempts END,
        last_error = COALESCE(NULLIF(@error, ''), j.last_error)
    FROM d
    WHERE j.id = d.id AND j.lease = d.lease AND j.cancel_requested_at IS NULL
    RETURNING j.id

-- The history of the cancelled jobs, written straight into its two tables
-- (in either layout of the history, no row goes through the view).
), history_rows (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags) AS (
    SELECT id, queue, name, CASE WHEN @uncount THEN greatest(attempts - 1, 0) ELSE attempts END, 'cancelled',
           reserved_at, COALESCE(reserved_at, now()), now(),
           EXTRACT(EPOCH FROM now() - COALESCE(reserved_at, now())) * 1000,
           'cancelled by ' || COALESCE(cancelled_by, 'an operator') || ' (its worker gave it back unfinished)',
           reserved_master, reserved_by, tags
    FROM cancelled
-- @include history_insert

-- The slots of the cancelled limited jobs, handed over to due parked jobs
-- of their keys (slot_handoff).
), freed AS (
    SELECT limit_key AS key, count(*)::integer AS n FROM cancelled
    WHERE limit_key IS NOT NULL GROUP BY limit_key
-- @include slot_handoff
)
-- Released, cancelled, and the queues of the jobs handed a slot (NULL for
-- none), for the caller to wake.
SELECT (SELECT count(*) FROM released)::integer, (SELECT count(*) FROM cancelled)::integer,
       (SELECT array_agg(DISTINCT queue) FROM handoff)
