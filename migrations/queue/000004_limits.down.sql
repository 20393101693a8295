-- Parked jobs become plain jobs, available when they were due.
UPDATE queue_jobs SET available_at = COALESCE(limit_due, now()) WHERE available_at = 'infinity';
ALTER TABLE queue_failed_jobs DROP COLUMN limit_key, DROP COLUMN limit_n;
DROP TABLE queue_limits;
DROP INDEX queue_jobs_limit_active_idx;
DROP INDEX queue_jobs_parked_idx;
ALTER TABLE queue_jobs DROP CONSTRAINT queue_jobs_limit_check;
ALTER TABLE queue_jobs DROP COLUMN limit_key, DROP COLUMN limit_n, DROP COLUMN limit_due;
