-- Concurrency limits per key. A limited job carries its key and limit; at
-- most limit_n jobs of a key are unparked (ready or running) at once, across
-- the whole fleet. A limited job that may not run yet is parked: its
-- available_at is 'infinity', which no claim reads (claims read
-- available_at <= now() through queue_jobs_ready_idx), and limit_due says
-- when it may run once a slot is free (now, its delay, or its retry's
-- backoff). Unlimited jobs leave the three columns NULL.
ALTER TABLE queue_jobs
    ADD COLUMN limit_key text,
    ADD COLUMN limit_n   integer,
    ADD COLUMN limit_due timestamptz;
-- NOT VALID: checked for every row written from now on, without scanning
-- the rows already there (they have no limit).
ALTER TABLE queue_jobs ADD CONSTRAINT queue_jobs_limit_check
    CHECK ((limit_key IS NULL) = (limit_n IS NULL) AND (limit_n IS NULL OR limit_n >= 1)) NOT VALID;

-- The handoff: a slot freed by a finishing job goes to the key's parked
-- jobs that are due, oldest due first.
CREATE INDEX queue_jobs_parked_idx ON queue_jobs (limit_key, limit_due, id)
    WHERE available_at = 'infinity';
-- The sweep recounts a key's unparked jobs through this index (a few per
-- key, at most its limit). Unlimited jobs have no entry in it.
CREATE INDEX queue_jobs_limit_active_idx ON queue_jobs (limit_key)
    WHERE limit_key IS NOT NULL AND available_at <> 'infinity';

-- queue_limits holds one row per key: its limit (the latest dispatch's) and
-- active, the number of its unparked jobs. Dispatch takes slots, finishing
-- and failing jobs hand them over or give them back, and the master's sweep
-- repairs drift, each under the row's lock.
CREATE TABLE queue_limits (
    key     text    PRIMARY KEY,
    limit_n integer NOT NULL CHECK (limit_n >= 1),
    active  integer NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

-- A failed limited job keeps its key and limit, so that retrying it
-- (fleet:retry) dispatches it under the same limit.
ALTER TABLE queue_failed_jobs
    ADD COLUMN limit_key text,
    ADD COLUMN limit_n   integer;
