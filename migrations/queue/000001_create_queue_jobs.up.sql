-- queue_jobs holds every job that is pending, delayed or reserved. A job
-- leaves the table when it completes, or moves to queue_failed_jobs when its
-- last attempt fails.
CREATE TABLE queue_jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue           text        NOT NULL,
    name            text        NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}',
    -- attempts counts the attempts started so far; together with reserved_by it
    -- is the lease a worker holds while it runs the job.
    attempts        integer     NOT NULL DEFAULT 0,
    -- max_tries, backoff_secs and timeout_ms are NULL when the job did not
    -- set them: the worker running it applies its supervisor's defaults.
    max_tries       integer     CHECK (max_tries >= 1),
    backoff_secs    integer[],
    timeout_ms      bigint      CHECK (timeout_ms >= 1),
    available_at    timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    reserved_at     timestamptz,
    reserved_by     text,
    reserved_master text,
    last_error      text,
    retry_of        bigint
);

-- Claiming reads the ready jobs of one queue in order.
CREATE INDEX queue_jobs_ready_idx ON queue_jobs (queue, available_at, id)
    WHERE reserved_by IS NULL;
-- Releasing the jobs of a lost worker or master finds them by holder.
CREATE INDEX queue_jobs_reserved_by_idx ON queue_jobs (reserved_by)
    WHERE reserved_by IS NOT NULL;
CREATE INDEX queue_jobs_reserved_master_idx ON queue_jobs (reserved_master)
    WHERE reserved_master IS NOT NULL;

-- Idle workers LISTEN on queue_jobs; one notification per queue and
-- statement, sent when the inserting transaction commits.
CREATE FUNCTION queue_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM new_jobs WHERE available_at <= now() LOOP
        PERFORM pg_notify('queue_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER queue_jobs_notify_insert
    AFTER INSERT ON queue_jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_jobs_notify();

-- queue_counts keeps exact per-queue counts of unreserved and reserved jobs,
-- maintained by statement-level triggers, so that reading the workload of a
-- queue holding a million jobs costs a few rows, not a scan. Rows are
-- sharded by backend so concurrent workers rarely touch the same row; a
-- reader sums the shards.
CREATE TABLE queue_counts (
    queue      text    NOT NULL,
    shard      integer NOT NULL,
    unreserved bigint  NOT NULL DEFAULT 0,
    reserved   bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, shard)
);

CREATE FUNCTION queue_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER queue_counts_insert AFTER INSERT ON queue_jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();
CREATE TRIGGER queue_counts_update AFTER UPDATE ON queue_jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();
CREATE TRIGGER queue_counts_delete AFTER DELETE ON queue_jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();

CREATE FUNCTION queue_counts_reset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queue_counts;
    RETURN NULL;
END;
$$;

CREATE TRIGGER queue_counts_truncate AFTER TRUNCATE ON queue_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_reset();

CREATE TABLE queue_failed_jobs (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    bigint      NOT NULL,
    queue     text        NOT NULL,
    name      text        NOT NULL,
    payload   jsonb       NOT NULL,
    attempts  integer     NOT NULL,
    max_tries integer     NOT NULL,
    backoff_secs integer[],
    timeout_ms bigint,
    error     text        NOT NULL,
    created_at timestamptz NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now(),
    retry_of  bigint
);

CREATE INDEX queue_failed_jobs_failed_at_idx ON queue_failed_jobs (failed_at DESC);
CREATE INDEX queue_failed_jobs_queue_idx ON queue_failed_jobs (queue);
