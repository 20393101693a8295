ALTER TABLE queue_jobs DROP CONSTRAINT IF EXISTS queue_jobs_queue_no_comma;
