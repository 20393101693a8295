-- Back to the backend's shard (000005).
CREATE OR REPLACE FUNCTION queue_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO queue_counts AS c (queue, priority, shard, unreserved, reserved)
        SELECT queue, priority, pg_backend_pid() % 16,
               count(*) FILTER (WHERE reserved_by IS NULL), count(*) FILTER (WHERE reserved_by IS NOT NULL)
        FROM new_rows GROUP BY queue, priority ORDER BY queue, priority
        ON CONFLICT (queue, priority, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO queue_counts AS c (queue, priority, shard, unreserved, reserved)
        SELECT queue, priority, pg_backend_pid() % 16,
               -count(*) FILTER (WHERE reserved_by IS NULL), -count(*) FILTER (WHERE reserved_by IS NOT NULL)
        FROM old_rows GROUP BY queue, priority ORDER BY queue, priority
        ON CONFLICT (queue, priority, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    ELSE
        INSERT INTO queue_counts AS c (queue, priority, shard, unreserved, reserved)
        SELECT queue, priority, pg_backend_pid() % 16, sum(u), sum(r)
        FROM (
            SELECT queue, priority, (reserved_by IS NULL)::int AS u, (reserved_by IS NOT NULL)::int AS r FROM new_rows
            UNION ALL
            SELECT queue, priority, -(reserved_by IS NULL)::int, -(reserved_by IS NOT NULL)::int FROM old_rows
        ) d
        GROUP BY queue, priority
        HAVING sum(u) <> 0 OR sum(r) <> 0
        ORDER BY queue, priority
        ON CONFLICT (queue, priority, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    END IF;
    RETURN NULL;
END;
$$;

DROP FUNCTION queue_counter_shard(integer);
