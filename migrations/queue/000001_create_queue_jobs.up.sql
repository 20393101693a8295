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
