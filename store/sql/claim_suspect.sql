-- The claim of an isolation process (JobClaim with Suspects and a
-- master): reserves up to @limit ready suspects of @queue (jobs that were
-- in two or more processes that died, crashes >= 2) for @worker, lowest
-- priority first, then oldest first, then lowest id, and counts the
-- attempt, fenced on the member row of @master as claim.sql is. The pick
-- reads the partial index queue_jobs_suspect_idx, which holds the ready
-- and waiting suspects and nothing else, so it costs what the suspects
-- cost however long the queue.
UPDATE queue_jobs j
SET reserved_by = @worker, reserved_master = @master, lease = (SELECT nextval('queue_jobs_lease_seq')),
    reserved_at = clock_timestamp(), attempts = j.attempts + 1
WHERE j.id = ANY (ARRAY(
    SELECT id FROM queue_jobs
    WHERE queue = @queue AND crashes >= 2 AND reserved_by IS NULL AND available_at <= now()
      AND EXISTS (SELECT 1 FROM fleet_masters m WHERE m.instance = @master AND m.expires_at >= now())
    ORDER BY priority, available_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.lease, j.queue, j.name, j.payload, j.attempts, j.max_tries,
          j.backoff_secs, j.timeout_ms, j.created_at, j.reserved_at, j.available_at, j.priority, j.tags, j.metadata,
          COALESCE(j.snoozes, 0)
