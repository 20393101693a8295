-- Unique jobs. While a unique job is in queue_jobs (pending, delayed,
-- reserved, waiting for a retry) its key is in unique_key, and the unique
-- index refuses a second job with the key: two dispatchers racing on one
-- key insert exactly one job. Other jobs have no key and are not in the
-- index.
ALTER TABLE queue_jobs ADD COLUMN unique_key text;
CREATE UNIQUE INDEX queue_jobs_unique_key_idx ON queue_jobs (unique_key) WHERE unique_key IS NOT NULL;

-- A job whose uniqueness counts its completion for the rest of its period
-- also holds its key here, from its dispatch until kept_until (the end of
-- the period). The next dispatch with the key takes the row over in place
-- once kept_until has passed, or when its job failed for good; upkeep
-- deletes rows past kept_until.
CREATE TABLE queue_unique_keys (
    key        text        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    kept_until timestamptz NOT NULL
);

-- Whether a key's job failed for good is asked by its id.
CREATE INDEX queue_failed_jobs_job_id_idx ON queue_failed_jobs (job_id);
