-- Frees the concurrency slots counted by the CTE freed (key, n: how many
-- of the key's unparked jobs the statement just ended, failed or parked
-- again) and hands each over to a due parked job of its key, oldest due
-- first, in the statement that freed it (see limits.go). Defines slots
-- (the freed keys' rows, locked in key order), handoff (the jobs unparked:
-- id, queue, limit_key), handed and slotted; a statement returns the
-- queues to wake as (SELECT array_agg(DISTINCT queue) FROM handoff). A
-- key's active drops by the slots not handed over; where its limit was
-- lowered, fewer are handed over. Every part reads through an index, from
-- the freed keys: a statement with no limited job (freed empty) reads and
-- writes nothing here, under a generic plan too (ANY of an empty array).
-- Taken by the statements of store/sql and, as text, by those built in Go
-- (releaseLost, crashRelease).
), slots AS (
    SELECT l.key, l.limit_n, l.active, f.n
    FROM queue_limits l JOIN freed f ON f.key = l.key
    WHERE l.key = ANY (ARRAY(SELECT key FROM freed))
    ORDER BY l.key
    FOR UPDATE OF l
), handoff AS (
    UPDATE queue_jobs j SET available_at = now(), limit_due = NULL
    WHERE j.id = ANY (ARRAY(
        SELECT p.id FROM slots s, LATERAL (
            SELECT id FROM queue_jobs
            WHERE limit_key = s.key AND available_at = 'infinity' AND limit_due <= now()
            ORDER BY limit_due, id
            LIMIT least(s.n, greatest(s.limit_n - s.active + s.n, 0))
            FOR UPDATE SKIP LOCKED) p))
      AND j.available_at = 'infinity'
    RETURNING j.id, j.queue, j.limit_key
), handed AS (
    SELECT limit_key AS key, count(*) AS n FROM handoff GROUP BY limit_key
), slotted AS (
    UPDATE queue_limits l SET active = greatest(s.active - s.n + COALESCE(h.n, 0), 0)
    FROM slots s LEFT JOIN handed h ON h.key = s.key
    WHERE l.key = s.key
