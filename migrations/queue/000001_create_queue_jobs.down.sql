DROP TABLE IF EXISTS queue_failed_jobs;
DROP TRIGGER IF EXISTS queue_jobs_notify_insert ON queue_jobs;
DROP TABLE IF EXISTS queue_jobs;
DROP TABLE IF EXISTS queue_counts;
DROP FUNCTION IF EXISTS queue_counts_apply();
DROP FUNCTION IF EXISTS queue_counts_reset();
DROP FUNCTION IF EXISTS queue_jobs_notify();
