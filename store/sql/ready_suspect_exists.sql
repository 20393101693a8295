-- Whether any of @queues has a suspect (crashes >= 2) ready to run now
-- (JobReadyExists with suspects): an isolation process's check that it
-- has nothing left to do, through queue_jobs_suspect_idx.
SELECT EXISTS (
    SELECT 1 FROM queue_jobs
    WHERE queue = ANY (@queues::text[]) AND crashes >= 2 AND reserved_by IS NULL AND available_at <= now()
)
