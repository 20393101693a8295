DROP INDEX IF EXISTS queue_failed_jobs_tags_idx;
DROP INDEX IF EXISTS queue_jobs_tags_idx;
ALTER TABLE queue_failed_jobs
    DROP COLUMN IF EXISTS metadata,
    DROP COLUMN IF EXISTS tags,
    DROP COLUMN IF EXISTS priority;
ALTER TABLE queue_jobs
    DROP COLUMN IF EXISTS cancelled_by,
    DROP COLUMN IF EXISTS cancel_requested_at,
    DROP COLUMN IF EXISTS snoozes,
    DROP COLUMN IF EXISTS metadata,
    DROP COLUMN IF EXISTS tags,
    DROP COLUMN IF EXISTS priority;
