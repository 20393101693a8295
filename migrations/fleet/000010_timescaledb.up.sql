-- The history (fleet_jobs) and the snapshots (fleet_metrics) live in one of
-- two layouts:
--
-- * partitions, native PostgreSQL (migration 1): fleet_jobs is partitioned
--   by status into fleet_jobs_completed (range partitions of an hour) and
--   fleet_jobs_failed (every other status, a day each); fleet_metrics has a
--   partition a day. The upkeep creates partitions ahead and drops the
--   expired ones.
-- * hypertables, with TimescaleDB: fleet_jobs_completed (an hour per chunk),
--   fleet_jobs_failed (a day per chunk) and fleet_metrics (a day per chunk)
--   are hypertables, and fleet_jobs is a view of the first two (UNION ALL)
--   that sends the rows inserted into it to the right one. A CHECK on the
--   status keeps each to its class, so that a reader of fleet_jobs that
--   asks for a status reads the chunks of its class only. Chunks are made
--   as rows arrive; the upkeep drops the expired ones (drop_chunks).
--
-- One hypertable per retention class keeps the retention per status: a
-- chunk holds rows of one class, so dropping it never takes rows another
-- class keeps. fleet's own statements write fleet_jobs_completed and
-- fleet_jobs_failed directly, which works in both layouts (in the native
-- one they are partitions); other writers may insert into fleet_jobs.
--
-- The history is on hypertables when the timescaledb extension is
-- installed in the database and the setting fleet.timescale is not 'off'
-- (`app migrate` sets it for its session from the configuration key of
-- that name; a script applied by other means reads the database's or the
-- role's default, see ALTER DATABASE ... SET fleet.timescale = 'off'). This
-- migration decides it once, and fleet_history_convert() applies the same
-- rule again later: `app migrate` calls it on every run, so a database
-- migrated before TimescaleDB was installed is converted by the next
-- migrate, and one whose setting became 'off' goes back to partitions. A
-- conversion moves the rows kept, under an exclusive lock of the tables:
-- writers wait for it.
--
-- A later migration that changes fleet_jobs must handle both layouts: on
-- hypertables, alter both tables and recreate the view (SELECT * is
-- expanded when a view is created).

-- fleet_history_layout names the layout in place: 'partitions' or
-- 'hypertables' (NULL when fleet_jobs does not exist).
CREATE FUNCTION fleet_history_layout() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE c.relkind WHEN 'v' THEN 'hypertables' WHEN 'p' THEN 'partitions' END
    FROM pg_class c WHERE c.oid = to_regclass('fleet_jobs')
$$;

-- fleet_timescale_wanted says whether the history should be on
-- hypertables: the timescaledb extension is installed and fleet.timescale
-- (unset: 'auto') is not 'off'. Any other value is an error.
CREATE FUNCTION fleet_timescale_wanted() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    setting text := lower(btrim(coalesce(current_setting('fleet.timescale', true), '')));
BEGIN
    IF setting = '' THEN
        setting := 'auto';
    END IF;
    IF setting NOT IN ('auto', 'off') THEN
        RAISE EXCEPTION 'fleet.timescale is "%": want auto or off', setting USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN setting = 'auto' AND EXISTS (SELECT FROM pg_extension WHERE extname = 'timescaledb');
END;
$$;

-- fleet_copy_grants grants on dst what was granted on src to roles other
-- than its owner, so that a conversion keeps the readers an operator let in.
CREATE FUNCTION fleet_copy_grants(src regclass, dst regclass) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.privilege_type, a.is_grantable,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee
        FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
        LEFT JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.oid = src AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON %s TO %s%s', g.privilege_type, dst, g.grantee,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END;
$$;

-- fleet_jobs_route is the INSTEAD OF INSERT trigger of the view fleet_jobs
-- (hypertables): each row goes to the table of its class.
CREATE FUNCTION fleet_jobs_route() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'completed' THEN
        INSERT INTO fleet_jobs_completed SELECT NEW.*;
    ELSE
        INSERT INTO fleet_jobs_failed SELECT NEW.*;
    END IF;
    RETURN NEW;
END;
$$;

-- fleet_history_to_hypertables moves the history and the snapshots from
-- native partitions onto hypertables, and returns how many rows it moved.
-- The new tables take the columns, defaults and checks of the old ones,
-- and their grants.
CREATE FUNCTION fleet_history_to_hypertables() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    ts text;
    moved bigint := 0;
    n bigint;
    c record;
BEGIN
    SELECT s.nspname INTO ts FROM pg_extension e JOIN pg_namespace s ON s.oid = e.extnamespace
    WHERE e.extname = 'timescaledb';
    IF ts IS NULL THEN
        RAISE EXCEPTION 'fleet: the timescaledb extension is not installed in this database';
    END IF;
    IF fleet_history_layout() IS DISTINCT FROM 'partitions' THEN
        RAISE EXCEPTION 'fleet: fleet_jobs is not on native partitions (layout %)', fleet_history_layout();
    END IF;
    LOCK TABLE fleet_jobs, fleet_metrics IN ACCESS EXCLUSIVE MODE;

    CREATE TABLE fleet_jobs_completed_new (LIKE fleet_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
        CONSTRAINT fleet_jobs_completed_status_check CHECK (status = 'completed'));
    CREATE TABLE fleet_jobs_failed_new (LIKE fleet_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
        CONSTRAINT fleet_jobs_failed_status_check CHECK (status <> 'completed'));
    CREATE TABLE fleet_metrics_new (LIKE fleet_metrics INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
    FOR c IN
        SELECT * FROM (VALUES ('fleet_jobs_completed_new', 'finished_at', '1 hour'),
                              ('fleet_jobs_failed_new', 'finished_at', '1 day'),
                              ('fleet_metrics_new', 'taken_at', '1 day')) v (tbl, col, span)
    LOOP
        EXECUTE format('SELECT %1$I.create_hypertable(%2$L, %1$I.by_range(%3$L, %4$L::interval), create_default_indexes => false)',
                       ts, c.tbl, c.col, c.span);
    END LOOP;

    INSERT INTO fleet_jobs_completed_new SELECT * FROM fleet_jobs WHERE status = 'completed';
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    INSERT INTO fleet_jobs_failed_new SELECT * FROM fleet_jobs WHERE status <> 'completed';
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    INSERT INTO fleet_metrics_new SELECT * FROM fleet_metrics;
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    PERFORM fleet_copy_grants('fleet_jobs', 'fleet_jobs_completed_new');
    PERFORM fleet_copy_grants('fleet_jobs', 'fleet_jobs_failed_new');
    PERFORM fleet_copy_grants('fleet_metrics', 'fleet_metrics_new');

    DROP TABLE fleet_jobs;
    DROP TABLE fleet_metrics;
    ALTER TABLE fleet_jobs_completed_new RENAME TO fleet_jobs_completed;
    ALTER TABLE fleet_jobs_failed_new RENAME TO fleet_jobs_failed;
    ALTER TABLE fleet_metrics_new RENAME TO fleet_metrics;
    -- The indexes of the native layout, per table (each chunk gets its own).
    CREATE INDEX fleet_jobs_completed_finished_at_idx ON fleet_jobs_completed (finished_at);
    CREATE INDEX fleet_jobs_completed_queue_finished_at_idx ON fleet_jobs_completed (queue, finished_at);
    CREATE INDEX fleet_jobs_completed_job_id_idx ON fleet_jobs_completed (job_id);
    CREATE INDEX fleet_jobs_failed_finished_at_idx ON fleet_jobs_failed (finished_at);
    CREATE INDEX fleet_jobs_failed_queue_finished_at_idx ON fleet_jobs_failed (queue, finished_at);
    CREATE INDEX fleet_jobs_failed_job_id_idx ON fleet_jobs_failed (job_id);
    ALTER TABLE fleet_metrics ADD CONSTRAINT fleet_metrics_taken_at_kind_subject_key UNIQUE (taken_at, kind, subject);

    CREATE VIEW fleet_jobs AS
        SELECT * FROM fleet_jobs_completed
        UNION ALL
        SELECT * FROM fleet_jobs_failed;
    CREATE TRIGGER fleet_jobs_route INSTEAD OF INSERT ON fleet_jobs
        FOR EACH ROW EXECUTE FUNCTION fleet_jobs_route();
    -- An insert into the view that leaves a column out gets its default.
    FOR c IN
        SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS def
        FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'fleet_jobs_completed'::regclass
    LOOP
        EXECUTE format('ALTER VIEW fleet_jobs ALTER COLUMN %I SET DEFAULT %s', c.attname, c.def);
    END LOOP;
    PERFORM fleet_copy_grants('fleet_jobs_completed', 'fleet_jobs');
    ANALYZE fleet_jobs_completed, fleet_jobs_failed, fleet_metrics;
    RETURN moved;
END;
$$;

-- fleet_history_to_partitions moves the history and the snapshots from
-- hypertables back onto native partitions, as migration 1 made them (a
-- partition for every hour or day that holds rows, and those the upkeep
-- makes ahead), and returns how many rows it moved.
CREATE FUNCTION fleet_history_to_partitions() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    moved bigint := 0;
    n bigint;
    c record;
BEGIN
    IF fleet_history_layout() IS DISTINCT FROM 'hypertables' THEN
        RAISE EXCEPTION 'fleet: fleet_jobs is not on hypertables (layout %)', fleet_history_layout();
    END IF;
    LOCK TABLE fleet_jobs_completed, fleet_jobs_failed, fleet_metrics IN ACCESS EXCLUSIVE MODE;
    ALTER VIEW fleet_jobs RENAME TO fleet_jobs_old;
    ALTER TABLE fleet_jobs_completed RENAME TO fleet_jobs_completed_old;
    ALTER TABLE fleet_jobs_failed RENAME TO fleet_jobs_failed_old;
    ALTER TABLE fleet_metrics RENAME TO fleet_metrics_old;

    CREATE TABLE fleet_jobs (LIKE fleet_jobs_completed_old INCLUDING DEFAULTS) PARTITION BY LIST (status);
    -- The checks of the history, but the one keeping a table to its class.
    FOR c IN
        SELECT k.conname, pg_get_constraintdef(k.oid) AS def FROM pg_constraint k
        WHERE k.conrelid = 'fleet_jobs_completed_old'::regclass AND k.contype = 'c'
          AND k.conname <> 'fleet_jobs_completed_status_check'
        ORDER BY k.conname
    LOOP
        EXECUTE format('ALTER TABLE fleet_jobs ADD CONSTRAINT %I %s', c.conname, c.def);
    END LOOP;
    CREATE TABLE fleet_jobs_completed PARTITION OF fleet_jobs
        FOR VALUES IN ('completed') PARTITION BY RANGE (finished_at);
    CREATE TABLE fleet_jobs_failed PARTITION OF fleet_jobs
        DEFAULT PARTITION BY RANGE (finished_at);
    CREATE TABLE fleet_jobs_completed_default PARTITION OF fleet_jobs_completed DEFAULT;
    CREATE TABLE fleet_jobs_failed_default PARTITION OF fleet_jobs_failed DEFAULT;
    CREATE TABLE fleet_metrics (LIKE fleet_metrics_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (taken_at);
    CREATE TABLE fleet_metrics_default PARTITION OF fleet_metrics DEFAULT;

    -- A partition for each hour (day) holding rows, before they are copied,
    -- so that none lands in a default partition.
    FOR c IN
        SELECT 'fleet_jobs_completed' AS parent, 'finished_at' AS col, 'YYYYMMDDHH24' AS fmt, interval '1 hour' AS span, x.s
        FROM (SELECT DISTINCT date_trunc('hour', finished_at AT TIME ZONE 'UTC') AS s FROM fleet_jobs_completed_old) x
        UNION ALL
        SELECT 'fleet_jobs_failed', 'finished_at', 'YYYYMMDD', interval '1 day', x.s
        FROM (SELECT DISTINCT date_trunc('day', finished_at AT TIME ZONE 'UTC') AS s FROM fleet_jobs_failed_old) x
        UNION ALL
        SELECT 'fleet_metrics', 'taken_at', 'YYYYMMDD', interval '1 day', x.s
        FROM (SELECT DISTINCT date_trunc('day', taken_at AT TIME ZONE 'UTC') AS s FROM fleet_metrics_old) x
    LOOP
        CONTINUE WHEN NOT isfinite(c.s) OR c.s < '0001-01-01';
        PERFORM fleet_partition_create(c.parent, c.parent || '_p' || to_char(c.s, c.fmt),
                                       c.s AT TIME ZONE 'UTC', (c.s + c.span) AT TIME ZONE 'UTC', c.col);
    END LOOP;
    PERFORM fleet_partitions_ensure_native(now(), 48, 8);

    INSERT INTO fleet_jobs SELECT * FROM fleet_jobs_old;
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    INSERT INTO fleet_metrics SELECT * FROM fleet_metrics_old;
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    PERFORM fleet_copy_grants('fleet_jobs_old', 'fleet_jobs');
    PERFORM fleet_copy_grants('fleet_metrics_old', 'fleet_metrics');

    DROP VIEW fleet_jobs_old;
    DROP TABLE fleet_jobs_completed_old, fleet_jobs_failed_old, fleet_metrics_old;
    CREATE INDEX fleet_jobs_finished_at_idx ON fleet_jobs (finished_at);
    CREATE INDEX fleet_jobs_queue_finished_at_idx ON fleet_jobs (queue, finished_at);
    CREATE INDEX fleet_jobs_job_id_idx ON fleet_jobs (job_id);
    ALTER TABLE fleet_metrics ADD CONSTRAINT fleet_metrics_taken_at_kind_subject_key UNIQUE (taken_at, kind, subject);
    ANALYZE fleet_jobs, fleet_metrics;
    RETURN moved;
END;
$$;

-- fleet_history_convert puts the history in the layout fleet.timescale and
-- the installed extensions ask for (see fleet_timescale_wanted), converting
-- it when it is in the other one, and returns the layout. Run again, it
-- changes nothing. It takes the upkeep's lock, so no upkeep runs meanwhile.
CREATE FUNCTION fleet_history_convert() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    have text;
    want text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('fleet_partitions'));
    have := fleet_history_layout();
    IF have IS NULL THEN
        RAISE EXCEPTION 'fleet: fleet_jobs does not exist: migrate the fleet set first';
    END IF;
    want := CASE WHEN fleet_timescale_wanted() THEN 'hypertables' ELSE 'partitions' END;
    IF have = 'partitions' AND want = 'hypertables' THEN
        PERFORM fleet_history_to_hypertables();
    ELSIF have = 'hypertables' AND want = 'partitions' THEN
        PERFORM fleet_history_to_partitions();
    END IF;
    RETURN want;
END;
$$;

-- Partition upkeep works on either layout. fleet_partitions_ensure creates
-- partitions ahead on native partitions (migration 1's function, now
-- fleet_partitions_ensure_native) and does nothing on hypertables, whose
-- chunks are made as rows arrive.
ALTER FUNCTION fleet_partitions_ensure(timestamptz, integer, integer) RENAME TO fleet_partitions_ensure_native;

CREATE FUNCTION fleet_partitions_ensure(now timestamptz, hours_ahead integer, days_ahead integer)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    IF fleet_history_layout() = 'hypertables' THEN
        RETURN 0;
    END IF;
    RETURN fleet_partitions_ensure_native(now, hours_ahead, days_ahead);
END;
$$;

-- fleet_history_trim drops, from fleet_jobs_completed, fleet_jobs_failed
-- and fleet_metrics, every partition or chunk whose range ended at or
-- before its retention back from now (completed_hours, failed_days,
-- metrics_days), and returns one row per partition or chunk it dropped:
-- its table, its name, its range and its size on disk. With dry_run it
-- drops nothing and returns what it would drop. It never deletes rows and
-- never drops a default partition (it has no upper time). A table busy for
-- over a second keeps its partitions or chunks until the next run, with a
-- warning, and is left out of the result.
CREATE FUNCTION fleet_history_trim(now timestamptz, completed_hours integer, failed_days integer,
                                   metrics_days integer, dry_run boolean)
RETURNS TABLE (parent text, part text, range_start timestamptz, range_end timestamptz, bytes bigint)
LANGUAGE plpgsql SET datestyle = 'ISO, YMD' SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    layout text := fleet_history_layout();
    ts text;
    t record;
    names text[];
    los timestamptz[];
    his timestamptz[];
    sizes bigint[];
    dropped text[];
    p text;
BEGIN
    IF layout IS NULL THEN
        RAISE EXCEPTION 'fleet: fleet_jobs does not exist: migrate the fleet set first';
    END IF;
    IF NOT dry_run THEN
        PERFORM pg_advisory_xact_lock(hashtext('fleet_partitions'));
    END IF;
    SELECT s.nspname INTO ts FROM pg_extension e JOIN pg_namespace s ON s.oid = e.extnamespace
    WHERE e.extname = 'timescaledb';
    FOR t IN
        SELECT v.tbl, v.tbl::regclass AS rel, v.cutoff
        FROM (VALUES (1, 'fleet_jobs_completed', now - completed_hours * interval '1 hour'),
                     (2, 'fleet_jobs_failed', now - failed_days * interval '1 day'),
                     (3, 'fleet_metrics', now - metrics_days * interval '1 day')) v (ord, tbl, cutoff)
        ORDER BY v.ord
    LOOP
        IF layout = 'partitions' THEN
            -- A range bound reads FOR VALUES FROM ('...') TO ('...');
            -- DEFAULT, MINVALUE and MAXVALUE give no upper time.
            SELECT coalesce(array_agg(x.name ORDER BY x.hi, x.name), '{}'), coalesce(array_agg(x.lo ORDER BY x.hi, x.name), '{}'),
                   coalesce(array_agg(x.hi ORDER BY x.hi, x.name), '{}'), coalesce(array_agg(x.size ORDER BY x.hi, x.name), '{}')
            INTO names, los, his, sizes
            FROM (SELECT k.oid::regclass::text AS name,
                         substring(pg_get_expr(k.relpartbound, k.oid) FROM 'FROM \(''([^'']+)''\) TO')::timestamptz AS lo,
                         substring(pg_get_expr(k.relpartbound, k.oid) FROM ' TO \(''([^'']+)''\)$')::timestamptz AS hi,
                         pg_total_relation_size(k.oid) AS size
                  FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                  WHERE i.inhparent = t.rel) x
            WHERE x.hi <= t.cutoff;
        ELSE
            SELECT coalesce(array_agg(x.name ORDER BY x.hi, x.name), '{}'), coalesce(array_agg(x.lo ORDER BY x.hi, x.name), '{}'),
                   coalesce(array_agg(x.hi ORDER BY x.hi, x.name), '{}'), coalesce(array_agg(x.size ORDER BY x.hi, x.name), '{}')
            INTO names, los, his, sizes
            FROM (SELECT format('%I.%I', ch.chunk_schema, ch.chunk_name) AS name, ch.range_start AS lo, ch.range_end AS hi,
                         pg_total_relation_size(format('%I.%I', ch.chunk_schema, ch.chunk_name)::regclass) AS size
                  FROM timescaledb_information.chunks ch
                  WHERE format('%I.%I', ch.hypertable_schema, ch.hypertable_name)::regclass = t.rel) x
            WHERE x.hi <= t.cutoff;
        END IF;
        CONTINUE WHEN cardinality(names) = 0;
        dropped := names;
        IF NOT dry_run THEN
            BEGIN
                IF layout = 'partitions' THEN
                    -- Dropping a partition locks its parent; take that lock once.
                    EXECUTE format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE', t.rel);
                    FOREACH p IN ARRAY names LOOP
                        EXECUTE format('DROP TABLE %s', p);
                    END LOOP;
                ELSE
                    EXECUTE format('SELECT coalesce(array_agg(d::text), ''{}'') FROM %I.drop_chunks($1, older_than => $2) d', ts)
                    INTO dropped USING t.rel, t.cutoff;
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                RAISE WARNING 'fleet: % is busy; its expired partitions are left for the next run: %', t.tbl, SQLERRM;
                CONTINUE;
            END;
        END IF;
        RETURN QUERY
            SELECT t.tbl, u.name, u.lo, u.hi, u.size
            FROM unnest(names, los, his, sizes) WITH ORDINALITY AS u (name, lo, hi, size, ord)
            WHERE u.name = ANY (dropped)
            UNION ALL
            SELECT t.tbl, d.name, NULL::timestamptz, NULL::timestamptz, NULL::bigint
            FROM unnest(dropped) AS d (name) WHERE d.name <> ALL (names);
    END LOOP;
END;
$$;

-- fleet_partitions_trim is fleet_history_trim that counts what it dropped.
CREATE OR REPLACE FUNCTION fleet_partitions_trim(now timestamptz, completed_hours integer, failed_days integer, metrics_days integer)
RETURNS integer LANGUAGE sql AS $$
    SELECT count(*)::integer FROM fleet_history_trim(now, completed_hours, failed_days, metrics_days, false)
$$;

-- The layout the setting and the extensions ask for, from now on.
SELECT fleet_history_convert();
