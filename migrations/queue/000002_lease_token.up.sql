-- A claim now gives every job it takes one short lease token (one value per
-- claim statement, from a sequence). Finishing or releasing a job matches
-- (id, lease) only: the primary key finds the row, the token says whether
-- the caller still holds it. Unlike (reserved_by, attempts) the token never
-- repeats, and the statements need no predicate on reserved_by, which under
-- a generic plan made PostgreSQL scan every row a worker held.
ALTER TABLE queue_jobs ADD COLUMN lease bigint;
CREATE SEQUENCE queue_jobs_lease_seq AS bigint CACHE 100;

-- Dispatchers notify idle workers themselves, coalesced per queue and sent
-- outside the inserting transaction. A pg_notify inside every inserting
-- transaction takes PostgreSQL's database-wide notify lock until commit,
-- so concurrent dispatches queued behind one another's WAL flush.
DROP TRIGGER queue_jobs_notify_insert ON queue_jobs;
DROP FUNCTION queue_jobs_notify();

-- queue_jobs is a hot table: every job is inserted, updated once per claim
-- and deleted. Vacuum it early and without throttling so that dead rows at
-- the head of the ready index do not pile up under a long drain, and leave
-- room in each page for the claim's new row version.
ALTER TABLE queue_jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Failed jobs of one queue are listed newest first by this index alone,
-- however few of them the queue holds.
CREATE INDEX queue_failed_jobs_queue_failed_at_idx ON queue_failed_jobs (queue, failed_at DESC, id DESC);
DROP INDEX queue_failed_jobs_queue_idx;
