-- next.sql for a worker without a master (tests): always live. It has no
-- liveness condition rather than a catch-all one on an empty master, which
-- a generic plan would carry for every worker.
SELECT (SELECT EXTRACT(EPOCH FROM (min(x.available_at) - now()))::float8 * 1000
        FROM unnest(@queues::text[]) AS q(name), LATERAL (
            WITH lv(p) AS (
                SELECT priority FROM queue_counts WHERE queue = q.name
                GROUP BY priority HAVING sum(unreserved) > 0 ORDER BY priority
            )
            SELECT y.available_at FROM lv, LATERAL (
                SELECT available_at FROM queue_jobs
                WHERE queue = q.name AND priority = lv.p AND reserved_by IS NULL AND available_at < 'infinity' AND crashes < 2
                ORDER BY available_at LIMIT 1) y
        ) x),
       true
