-- Back to version 9: the history goes back to native partitions first when
-- it is on hypertables, then the functions of migration 1 come back.
DO $$
BEGIN
    IF fleet_history_layout() = 'hypertables' THEN
        PERFORM fleet_history_to_partitions();
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION fleet_partitions_trim(now timestamptz, completed_hours integer, failed_days integer, metrics_days integer)
RETURNS integer LANGUAGE plpgsql
SET datestyle = 'ISO, YMD' SET lock_timeout = '1s' AS $$
DECLARE
    dropped integer := 0;
    n integer;
    t record;
    parts regclass[];
    part regclass;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('fleet_partitions'));
    FOR t IN
        SELECT v.parent::regclass AS parent, v.cutoff
        FROM (VALUES ('fleet_jobs_completed', now - completed_hours * interval '1 hour'),
                     ('fleet_jobs_failed', now - failed_days * interval '1 day'),
                     ('fleet_metrics', now - metrics_days * interval '1 day')) v (parent, cutoff)
    LOOP
        -- A range bound reads FOR VALUES FROM ('...') TO ('...'); DEFAULT,
        -- MINVALUE and MAXVALUE give no upper time, so are never dropped.
        SELECT coalesce(array_agg(c.oid::regclass ORDER BY c.oid), '{}') INTO parts
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = t.parent
          AND substring(pg_get_expr(c.relpartbound, c.oid) FROM ' TO \(''([^'']+)''\)$')::timestamptz <= t.cutoff;
        CONTINUE WHEN cardinality(parts) = 0;
        n := 0;
        BEGIN
            -- Dropping a partition locks its parent; take that lock once.
            EXECUTE format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE', t.parent);
            FOREACH part IN ARRAY parts LOOP
                EXECUTE format('DROP TABLE %s', part);
                n := n + 1;
            END LOOP;
            dropped := dropped + n;
        EXCEPTION WHEN lock_not_available THEN
            RAISE WARNING 'fleet: % is busy; its expired partitions are left for the next run: %', t.parent, SQLERRM;
        END;
    END LOOP;
    RETURN dropped;
END;
$$;

DROP FUNCTION fleet_history_trim(timestamptz, integer, integer, integer, boolean);
DROP FUNCTION fleet_partitions_ensure(timestamptz, integer, integer);
ALTER FUNCTION fleet_partitions_ensure_native(timestamptz, integer, integer) RENAME TO fleet_partitions_ensure;
DROP FUNCTION fleet_history_convert();
DROP FUNCTION fleet_history_to_partitions();
DROP FUNCTION fleet_history_to_hypertables();
DROP FUNCTION fleet_jobs_route();
DROP FUNCTION fleet_copy_grants(regclass, regclass);
DROP FUNCTION fleet_timescale_wanted();
DROP FUNCTION fleet_history_layout();
