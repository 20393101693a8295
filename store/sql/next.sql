-- An idle worker's look for work (JobNext with a master): the
-- milliseconds until the first unreserved job of @queues is available
-- (negative when one is ready now; NULL when there is none), and whether
-- the member row of @master is live at the statement's now(). Parked jobs
-- (available_at 'infinity') are not counted: a handoff or the sweep makes
-- them available, and notifies.
--
-- A priority of a queue whose key ('queue,priority': a queue's name holds
-- no comma) is listed in @after_keys is read only past its mark, the
-- (available_at, id) at the same place of @after_at and @after_ids, as a
-- claim reads it (see claim.sql): a job that became ready behind a mark
-- is not seen until the worker reads from the head again.
SELECT (SELECT EXTRACT(EPOCH FROM (min(x.available_at) - now()))::float8 * 1000
        FROM unnest(@queues::text[]) AS q(name), LATERAL (
            WITH lv(p) AS (
                SELECT priority FROM queue_counts WHERE queue = q.name
                GROUP BY priority HAVING sum(unreserved) > 0 ORDER BY priority
            )
            SELECT y.available_at FROM lv, LATERAL (SELECT array_position(@after_keys::text[], q.name || ',' || lv.p) AS i) mark, LATERAL (
                SELECT available_at FROM queue_jobs
                WHERE queue = q.name AND priority = lv.p AND reserved_by IS NULL AND available_at < 'infinity' AND crashes < 2
                  AND (available_at, id) > (COALESCE((@after_at::timestamptz[])[mark.i], '-infinity'),
                                            COALESCE((@after_ids::bigint[])[mark.i], 0))
                ORDER BY available_at, id LIMIT 1) y
        ) x),
       EXISTS (SELECT 1 FROM fleet_masters m WHERE m.instance = @master AND m.expires_at >= now())
