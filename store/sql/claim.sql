-- The fenced claim (JobClaim with a master): reserves up to @limit ready
-- jobs of @queue for @worker, lowest priority first and then oldest first,
-- skipping rows other claims hold, and counts the attempt. Every job it
-- takes gets the same fresh lease token. It takes nothing unless the
-- member row of the holder's @master is live at the statement's now(): an
-- uncorrelated EXISTS, evaluated once, through the primary key.
--
-- The pick is ready_pick.sql with the fence: the queue's priorities with
-- unreserved jobs, from queue_counts, lowest first; within each a range
-- scan of the ready index (queue, priority, available_at, id). The picked
-- ids, as an array, are updated through the primary key: joining the pick
-- as a CTE instead lets a generic plan, which guesses LIMIT @limit at a
-- tenth of the table, hash-join it against a scan of the whole table.
-- Suspects (crashes >= 2: jobs that were in two processes that died) are
-- passed by: only an isolation process takes them (claim_suspect.sql).
--
-- A priority listed in @after_priorities is read only past its mark, the
-- (available_at, id) at the same place of @after_at and @after_ids: the
-- range scan begins there, as an index condition, and steps over none of
-- the entries before it. A held transaction keeps the entries of claimed
-- and finished jobs in the index, where every claim from the head of the
-- range would step over all of them (see store.ClaimMark). Empty arrays
-- read every priority from its head.
--
-- The picked jobs are then cut to the worker's byte budget: in the pick's
-- order, a job is taken while the payloads up to and including its own
-- add up to at most @bytes (the size of each as the stored value says it,
-- or the length of its JSON text when the server compressed it, see
-- payloadBytesSQL), and the first job whatever its size when @alone (the
-- worker holds nothing else). The pick's rows past the cut were locked
-- and are left as they are; the sort costs what the pick's @limit rows
-- cost.
UPDATE queue_jobs j
SET reserved_by = @worker, reserved_master = @master, lease = (SELECT nextval('queue_jobs_lease_seq')),
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
            WHERE EXISTS (SELECT 1 FROM fleet_masters m WHERE m.instance = @master AND m.expires_at >= now())
            LIMIT @limit) p
        WINDOW w AS (ORDER BY p.p, p.available_at, p.id ROWS UNBOUNDED PRECEDING)) c
    WHERE c.upto <= @bytes OR (c.n = 1 AND @alone)))
RETURNING j.id, j.lease, j.queue, j.name, j.payload, j.attempts, j.max_tries,
          j.backoff_secs, j.timeout_ms, j.created_at, j.reserved_at, j.available_at, j.priority, j.tags, j.metadata,
          COALESCE(j.snoozes, 0)
