-- Priority, tags, metadata, snoozes and cancel requests.
--
-- priority orders the ready jobs of a queue: lower runs first, then the
-- oldest. tags are short labels an operator filters by ("tenant:42");
-- metadata is free-form JSON a handler reads (the tracing middleware keeps
-- its trace context there). snoozes counts the attempts a job's handler
-- ended with a snooze, which do not count against its tries (NULL: none,
-- so that a job that never snoozed stores nothing for it: every claim
-- writes a new version of the row, and its width is the hot path's).
-- cancel_requested_at and cancelled_by record a cancel of a running job:
-- its holder sees them (through a notification, or its poll) and stops
-- the handler.
--
-- Every column has a constant default, so adding it rewrites nothing.
ALTER TABLE queue_jobs
    ADD COLUMN priority            smallint NOT NULL DEFAULT 0,
    ADD COLUMN tags                text[],
    ADD COLUMN metadata            jsonb,
    ADD COLUMN snoozes             integer,
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN cancelled_by        text;

-- A failed job keeps its priority, tags and metadata, so that retrying it
-- dispatches it as it was.
ALTER TABLE queue_failed_jobs
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN tags     text[],
    ADD COLUMN metadata jsonb;

-- Filtering failed jobs by tag reads only tagged ones. queue_jobs has no
-- such index: every dispatch, claim and vacuum of the hottest table would
-- pay for it, for an operator's listing (which reads the queue instead).
CREATE INDEX queue_failed_jobs_tags_idx ON queue_failed_jobs USING gin (tags) WHERE tags IS NOT NULL;

-- Claims take the lowest priority first, then the oldest: the ready index
-- leads with the priority after the queue. Statements reading a queue's
-- waiting jobs in order walk the priorities it uses, one range scan each
-- (see store/priority.go), so delayed jobs of one priority are never read
-- past to reach the ready jobs of another. The priorities a queue uses
-- come from queue_counts, which now counts per priority too: every job
-- there is of priority 0 (the column's default), as are the rows counted.
ALTER TABLE queue_counts ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_pkey;
ALTER TABLE queue_counts ADD PRIMARY KEY (queue, priority, shard);

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

DROP INDEX queue_jobs_ready_idx;
CREATE INDEX queue_jobs_ready_idx ON queue_jobs (queue, priority, available_at, id)
    WHERE reserved_by IS NULL;
