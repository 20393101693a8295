-- History learns the 'interrupted' attempt: its worker stopped it before
-- its handler returned (it exited for another job that ignored its
-- timeout, and this one did not finish within the grace period), and gave
-- the job back to run again with its next attempt and no try spent. Such
-- rows go to the non-completed partitions (fleet_jobs_failed), trimmed by
-- the day. fleet_counters counts them, per queue: each interrupted attempt
-- also requeues its job.
--
-- The status check is on fleet_jobs in the native layout, and on each of
-- its two tables when they are TimescaleDB hypertables (fleet_jobs is then
-- a view). Replacing it reads the history once, at this migration.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY CASE WHEN fleet_history_layout() = 'hypertables'
                            THEN ARRAY['fleet_jobs_completed', 'fleet_jobs_failed']
                            ELSE ARRAY['fleet_jobs'] END
    LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT fleet_jobs_status_check', t);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT fleet_jobs_status_check CHECK (status IN ' ||
                       '(''completed'', ''failed'', ''timed_out'', ''lost'', ''cancelled'', ''snoozed'', ''interrupted''))', t);
    END LOOP;
END;
$$;

ALTER TABLE fleet_counters
    ADD COLUMN interrupted bigint NOT NULL DEFAULT 0; -- attempts interrupted by their worker's exit, each job released to run again
