ALTER TABLE fleet_jobs DROP COLUMN IF EXISTS tags;
DELETE FROM fleet_jobs WHERE status IN ('cancelled', 'snoozed');
ALTER TABLE fleet_jobs DROP CONSTRAINT fleet_jobs_status_check;
ALTER TABLE fleet_jobs ADD CONSTRAINT fleet_jobs_status_check
    CHECK (status IN ('completed', 'failed', 'timed_out', 'lost'));
