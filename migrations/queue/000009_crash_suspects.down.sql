DROP INDEX queue_jobs_suspect_idx;
ALTER TABLE queue_jobs DROP COLUMN crashes;
