-- Back to version 10: the interrupted attempts leave the history, and the
-- status check and the counters forget them.
ALTER TABLE fleet_counters DROP COLUMN interrupted;

DO $$
DECLARE
    t text;
BEGIN
    IF fleet_history_layout() = 'hypertables' THEN
        DELETE FROM fleet_jobs_failed WHERE status = 'interrupted';
    ELSE
        DELETE FROM fleet_jobs WHERE status = 'interrupted';
    END IF;
    FOREACH t IN ARRAY CASE WHEN fleet_history_layout() = 'hypertables'
                            THEN ARRAY['fleet_jobs_completed', 'fleet_jobs_failed']
                            ELSE ARRAY['fleet_jobs'] END
    LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT fleet_jobs_status_check', t);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT fleet_jobs_status_check CHECK (status IN ' ||
                       '(''completed'', ''failed'', ''timed_out'', ''lost'', ''cancelled'', ''snoozed''))', t);
    END LOOP;
END;
$$;
