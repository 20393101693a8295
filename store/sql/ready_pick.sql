-- The pick of a claim on its own (ReadyPick): the ids of up to @limit
-- ready jobs of @queue, locked (SKIP LOCKED), in the order a claim takes
-- them: the queue's priorities with unreserved jobs lowest first (from
-- queue_counts), and within each the oldest first along the ready index.
-- The bench's reference loop runs it, so that its bound picks rows as a
-- claim does.
WITH lv(p) AS (
    SELECT priority FROM queue_counts WHERE queue = @queue
    GROUP BY priority HAVING sum(unreserved) > 0 ORDER BY priority
)
SELECT x.id FROM lv, LATERAL (
    SELECT id FROM queue_jobs
    WHERE queue = @queue AND priority = lv.p AND reserved_by IS NULL AND available_at <= now() AND crashes < 2
    ORDER BY available_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED) x
LIMIT @limit
