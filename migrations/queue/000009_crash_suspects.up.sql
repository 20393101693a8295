-- crashes counts the worker processes that died while holding the job
-- without the death being charged to it: it was one of several jobs in a
-- process that crashed, so any of them may have been the cause, and its
-- attempt was given back. A job with two or more (a suspect) runs only
-- alone, in an isolation process of its own, where a crash is its own
-- doing and counts as a try. Adding a column with a constant default
-- rewrites nothing.
ALTER TABLE queue_jobs ADD COLUMN crashes integer NOT NULL DEFAULT 0;

-- The ready suspects, in the order an isolation process claims them. Only
-- suspects have an entry, so the index is empty in a healthy fleet, and
-- an update that leaves crashes as it was keeps it that way.
CREATE INDEX queue_jobs_suspect_idx ON queue_jobs (queue, priority, available_at, id)
    WHERE crashes >= 2 AND reserved_by IS NULL;
