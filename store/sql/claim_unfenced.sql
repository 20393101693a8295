-- The claim of a holder with no member row (JobClaim without a master: the
-- bench's reference loop and tests of the claim itself). It is claim.sql
-- without the fence, and with no master recorded on the rows; it reads
-- past the marks @after_priorities, @after_at and @after_ids as claim.sql
-- does, and cuts the pick to @bytes as claim.sql does.
UPDATE queue_jobs j
SET reserved_by = @worker, reserved_master = NULL, lease = (SELECT nextval('queue_jobs_lease_seq')),
    reserved_at = clock_timestamp(), attempts = j.attempts + 1
WHERE j.id = ANY (ARRAY(
    SELECT c.id FROM (
        SELECT p.id, row_number() OVER w AS n,
               sum(CASE WHEN pg_column_compression(p.payload) IS NULL THEN pg_column_size(p.payload)
                        ELSE octet_length(p.payload::text) END) OVER w AS upto
        FROM (
            WITH lv(p) AS (
                SELECT priority FROM queue_counts WHERE queue = @queue
                GROUP BY priority HAVING sum(unreserved) > 0 ORDER BY priority
            )
            SELECT x.id, lv.p, x.available_at, x.payload FROM lv, LATERAL (SELECT array_position(@after_priorities::smallint[], lv.p) AS i) mark, LATERAL (
                SELECT id, available_at, payload FROM queue_jobs
                WHERE queue = @queue AND priority = lv.p AND reserved_by IS NULL AND available_at <= now() AND crashes < 2
                  AND (available_at, id) > (COALESCE((@after_at::timestamptz[])[mark.i], '-infinity'),
                                            COALESCE((@after_ids::bigint[])[mark.i], 0))
                ORDER BY available_at, id
                LIMIT @limit
                FOR UPDATE SKIP LOCKED) x
            LIMIT @limit) p
        WINDOW w AS (ORDER BY p.p, p.available_at, p.id ROWS UNBOUNDED PRECEDING)) c
    WHERE c.upto <= @bytes OR (c.n = 1 AND @alone)))
RETURNING j.id, j.lease, j.queue, j.name, j.payload, j.attempts, j.max_tries,
          j.backoff_secs, j.timeout_ms, j.created_at, j.reserved_at, j.available_at, j.priority, j.tags, j.metadata,
          COALESCE(j.snoozes, 0)
