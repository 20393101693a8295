-- next.sql for a worker without a master (tests): always live. It has no
-- liveness condition rather than a catch-all one on an empty master, which
-- a generic plan would carry for every worker. It reads past the marks
-- @after_keys, @after_at and @after_ids as next.sql does.
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
       true
