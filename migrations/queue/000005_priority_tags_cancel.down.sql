CREATE OR REPLACE FUNCTION queue_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO queue_counts AS c (queue, shard, unreserved, reserved)
        SELECT queue, pg_backend_pid() % 16,
               count(*) FILTER (WHERE reserved_by IS NULL), count(*) FILTER (WHERE reserved_by IS NOT NULL)
        FROM new_rows GROUP BY queue ORDER BY queue
        ON CONFLICT (queue, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO queue_counts AS c (queue, shard, unreserved, reserved)
        SELECT queue, pg_backend_pid() % 16,
               -count(*) FILTER (WHERE reserved_by IS NULL), -count(*) FILTER (WHERE reserved_by IS NOT NULL)
        FROM old_rows GROUP BY queue ORDER BY queue
        ON CONFLICT (queue, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    ELSE
        INSERT INTO queue_counts AS c (queue, shard, unreserved, reserved)
        SELECT queue, pg_backend_pid() % 16, sum(u), sum(r)
        FROM (
            SELECT queue, (reserved_by IS NULL)::int AS u, (reserved_by IS NOT NULL)::int AS r FROM new_rows
            UNION ALL
            SELECT queue, -(reserved_by IS NULL)::int, -(reserved_by IS NOT NULL)::int FROM old_rows
        ) d
        GROUP BY queue
        HAVING sum(u) <> 0 OR sum(r) <> 0
        ORDER BY queue
        ON CONFLICT (queue, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    END IF;
    RETURN NULL;
END;
$$;
-- Fold the per-priority rows back into one row per queue and shard.
CREATE TEMP TABLE queue_counts_folded ON COMMIT DROP AS
    SELECT queue, shard, sum(unreserved)::bigint AS unreserved, sum(reserved)::bigint AS reserved
    FROM queue_counts GROUP BY queue, shard;
DELETE FROM queue_counts;
ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_pkey;
ALTER TABLE queue_counts DROP COLUMN priority;
ALTER TABLE queue_counts ADD PRIMARY KEY (queue, shard);
INSERT INTO queue_counts (queue, shard, unreserved, reserved) SELECT queue, shard, unreserved, reserved FROM queue_counts_folded;
DROP INDEX queue_jobs_ready_idx;
CREATE INDEX queue_jobs_ready_idx ON queue_jobs (queue, available_at, id)
    WHERE reserved_by IS NULL;
DROP INDEX IF EXISTS queue_failed_jobs_tags_idx;
ALTER TABLE queue_failed_jobs
    DROP COLUMN IF EXISTS metadata,
    DROP COLUMN IF EXISTS tags,
    DROP COLUMN IF EXISTS priority;
ALTER TABLE queue_jobs
    DROP COLUMN IF EXISTS cancelled_by,
    DROP COLUMN IF EXISTS cancel_requested_at,
    DROP COLUMN IF EXISTS snoozes,
    DROP COLUMN IF EXISTS metadata,
    DROP COLUMN IF EXISTS tags,
    DROP COLUMN IF EXISTS priority;
