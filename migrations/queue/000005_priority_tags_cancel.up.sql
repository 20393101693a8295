-- Priority, tags, metadata, snoozes and cancel requests.
--
-- priority orders the ready jobs of a queue: lower runs first, then the
-- oldest. tags are short labels an operator filters by ("tenant:42");
-- metadata is free-form JSON a handler reads (the tracing middleware keeps
-- its trace context there). snoozes counts the attempts a job's handler
-- ended with a snooze, which do not count against its tries.
-- cancel_requested_at and cancelled_by record a cancel of a running job:
-- its holder sees them (through a notification, or its poll) and stops
-- the handler.
--
-- Every column has a constant default, so adding it rewrites nothing.
ALTER TABLE queue_jobs
    ADD COLUMN priority            smallint NOT NULL DEFAULT 0,
    ADD COLUMN tags                text[],
    ADD COLUMN metadata            jsonb,
    ADD COLUMN snoozes             integer  NOT NULL DEFAULT 0,
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN cancelled_by        text;

-- A failed job keeps its priority, tags and metadata, so that retrying it
-- dispatches it as it was.
ALTER TABLE queue_failed_jobs
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN tags     text[],
    ADD COLUMN metadata jsonb;

-- Filtering by tag reads only tagged jobs: untagged ones, the common case,
-- have no entry and cost the hot path nothing here.
CREATE INDEX queue_jobs_tags_idx ON queue_jobs USING gin (tags) WHERE tags IS NOT NULL;
CREATE INDEX queue_failed_jobs_tags_idx ON queue_failed_jobs USING gin (tags) WHERE tags IS NOT NULL;
