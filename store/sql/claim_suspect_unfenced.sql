-- claim_suspect.sql for a holder with no member row (tests of the claim
-- itself): without the fence, and with no master recorded on the rows.
UPDATE queue_jobs j
SET reserved_by = @worker, reserved_master = NULL, lease = (SELECT nextval('queue_jobs_lease_seq')),
    reserved_at = clock_timestamp(), attempts = j.attempts + 1
WHERE j.id = ANY (ARRAY(
    SELECT id FROM queue_jobs
    WHERE queue = @queue AND crashes >= 2 AND reserved_by IS NULL AND available_at <= now()
    ORDER BY priority, available_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.lease, j.queue, j.name, j.payload, j.attempts, j.max_tries,
          j.backoff_secs, j.timeout_ms, j.created_at, j.reserved_at, j.available_at, j.priority, j.tags, j.metadata,
          COALESCE(j.snoozes, 0)
