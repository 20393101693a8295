-- Whether any of @queues has a job ready to run now (JobReadyExists): per
-- queue, its priorities with unreserved jobs (from queue_counts), and in
-- each the head of the ready index, until one is found.
SELECT EXISTS (
    SELECT 1 FROM unnest(@queues::text[]) AS q(name), LATERAL (
        WITH lv(p) AS (
            SELECT priority FROM queue_counts WHERE queue = q.name
            GROUP BY priority HAVING sum(unreserved) > 0 ORDER BY priority
        )
        SELECT 1 FROM lv, LATERAL (
            SELECT 1 FROM queue_jobs
            WHERE queue = q.name AND priority = lv.p AND reserved_by IS NULL AND available_at <= now() AND crashes < 2
            ORDER BY available_at LIMIT 1) y
        LIMIT 1
    ) x
)
