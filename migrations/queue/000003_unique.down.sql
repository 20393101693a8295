DROP INDEX queue_failed_jobs_job_id_idx;
DROP TABLE queue_unique_keys;
DROP INDEX queue_jobs_unique_key_idx;
ALTER TABLE queue_jobs DROP COLUMN unique_key;
