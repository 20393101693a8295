-- A queue's name holds no comma: a worker is given its queues as one
-- comma-separated list, so a job on "x,y" would wait forever. The Go client,
-- the configuration and fleet_dispatch refuse such a name before this
-- constraint sees it; the constraint also covers any other insert (SQLSTATE
-- 23514, naming queue_jobs_queue_no_comma). NOT VALID: existing rows are not
-- read, only new and updated ones checked.
ALTER TABLE queue_jobs ADD CONSTRAINT queue_jobs_queue_no_comma CHECK (strpos(queue, ',') = 0) NOT VALID;
