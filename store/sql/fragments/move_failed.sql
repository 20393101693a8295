-- Moves the jobs of the batch's failed attempts to queue_failed_jobs, with
-- the tries that applied and the attempt's error, where the job's lease is
-- still the attempt's. Reads d (id, lease, kind, err, tries: the batch, as
-- finish_batch makes it). Defines failed (the jobs deleted: id, lease,
-- limit_key, tags and the columns of queue_failed_jobs) and moved.
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
