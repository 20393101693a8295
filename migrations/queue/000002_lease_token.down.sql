CREATE INDEX queue_failed_jobs_queue_idx ON queue_failed_jobs (queue);
DROP INDEX queue_failed_jobs_queue_failed_at_idx;

ALTER TABLE queue_jobs RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay);

CREATE FUNCTION queue_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM new_jobs WHERE available_at <= now() LOOP
        PERFORM pg_notify('queue_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER queue_jobs_notify_insert
    AFTER INSERT ON queue_jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_jobs_notify();

DROP SEQUENCE queue_jobs_lease_seq;
ALTER TABLE queue_jobs DROP COLUMN lease;
