-- History learns two outcomes of an attempt, cancelled and snoozed, and
-- keeps the job's tags. Both statuses go to the non-completed partitions
-- (fleet_jobs_failed is their default), trimmed by the day. Replacing the
-- check reads the history once, at this migration.
ALTER TABLE fleet_jobs DROP CONSTRAINT fleet_jobs_status_check;
ALTER TABLE fleet_jobs ADD CONSTRAINT fleet_jobs_status_check
    CHECK (status IN ('completed', 'failed', 'timed_out', 'lost', 'cancelled', 'snoozed'));
ALTER TABLE fleet_jobs ADD COLUMN tags text[];
