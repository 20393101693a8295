-- fleet_masters is the membership of running masters: one row each, beaten
-- every tick; expiry comes from the database clock.
CREATE TABLE fleet_masters (
    name        text PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    nonce       text        NOT NULL,
    version     text        NOT NULL DEFAULT '',
    state       text        NOT NULL DEFAULT 'starting',
    supervisors jsonb       NOT NULL DEFAULT '[]',
    started_at  timestamptz NOT NULL DEFAULT now(),
    beat_at     timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX fleet_masters_expires_at_idx ON fleet_masters (expires_at);

-- fleet_state holds shared switches: pause flags, terminate requests, and
-- the timestamps that decide which master does a once-per-period duty.
CREATE TABLE fleet_state (
    key        text PRIMARY KEY,
    value      jsonb       NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- fleet_jobs records every finished attempt. It is partitioned by status,
-- then by time: completed attempts by the hour, the others (failed,
-- timed_out, lost) by the day, so that each is trimmed on its own schedule
-- by dropping whole partitions. Default partitions catch rows no partition
-- was created for yet; creating that partition later moves them.
CREATE TABLE fleet_jobs (
    job_id      bigint      NOT NULL,
    queue       text        NOT NULL,
    name        text        NOT NULL,
    attempt     integer     NOT NULL,
    status      text        NOT NULL CHECK (status IN ('completed', 'failed', 'timed_out', 'lost')),
    reserved_at timestamptz,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    runtime_ms  double precision NOT NULL,
    error       text,
    master      text,
    worker      text
) PARTITION BY LIST (status);

CREATE TABLE fleet_jobs_completed PARTITION OF fleet_jobs
    FOR VALUES IN ('completed') PARTITION BY RANGE (finished_at);
CREATE TABLE fleet_jobs_failed PARTITION OF fleet_jobs
    DEFAULT PARTITION BY RANGE (finished_at);
CREATE TABLE fleet_jobs_completed_default PARTITION OF fleet_jobs_completed DEFAULT;
CREATE TABLE fleet_jobs_failed_default PARTITION OF fleet_jobs_failed DEFAULT;

CREATE INDEX fleet_jobs_finished_at_idx ON fleet_jobs (finished_at);
CREATE INDEX fleet_jobs_queue_finished_at_idx ON fleet_jobs (queue, finished_at);
CREATE INDEX fleet_jobs_job_id_idx ON fleet_jobs (job_id);

-- fleet_metrics holds per-minute snapshots per queue and per job name,
-- partitioned by day.
CREATE TABLE fleet_metrics (
    taken_at        timestamptz NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('queue', 'job')),
    subject         text        NOT NULL,
    jobs            bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    jobs_per_minute double precision NOT NULL DEFAULT 0,
    runtime_p50_ms  double precision NOT NULL DEFAULT 0,
    runtime_p95_ms  double precision NOT NULL DEFAULT 0,
    runtime_p99_ms  double precision NOT NULL DEFAULT 0,
    runtime_mean_ms double precision NOT NULL DEFAULT 0,
    wait_secs       double precision NOT NULL DEFAULT 0,
    clear_secs      double precision,
    pending         bigint      NOT NULL DEFAULT 0,
    UNIQUE (taken_at, kind, subject)
) PARTITION BY RANGE (taken_at);

CREATE TABLE fleet_metrics_default PARTITION OF fleet_metrics DEFAULT;

-- fleet_counters holds monotonic totals for the Prometheus counters; never
-- trimmed.
CREATE TABLE fleet_counters (
    queue      text PRIMARY KEY,
    processed  bigint      NOT NULL DEFAULT 0,
    failed     bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Partition upkeep. Partitions are named and bounded in UTC whatever the
-- session's TimeZone: fleet_jobs_completed_pYYYYMMDDHH holds the completed
-- attempts that finished in that hour, fleet_jobs_failed_pYYYYMMDD and
-- fleet_metrics_pYYYYMMDD the rows of that day. The functions pin DateStyle
-- (bounds are written and read back as text) and wait at most a second for
-- a lock: a partition that cannot be had now is left for the next run
-- rather than stalling the writers queued behind the upkeep. Both take the
-- same advisory lock, so two runs never race.

-- fleet_partition_create creates the range partition name of parent for
-- [lo, hi) unless it exists, and reports whether it did. Rows of that range
-- already waiting in the parent's default partition are moved into it: the
-- table is created on its own, filled from the default partition, then
-- attached. The parent and its default partition are locked first (in the
-- order ATTACH takes them), so no row of the range can land in the default
-- partition meanwhile.
CREATE FUNCTION fleet_partition_create(parent text, name text, lo timestamptz, hi timestamptz, col text)
RETURNS boolean LANGUAGE plpgsql
SET datestyle = 'ISO, YMD' AS $$
BEGIN
    IF to_regclass(quote_ident(name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('LOCK TABLE ONLY %I IN SHARE UPDATE EXCLUSIVE MODE', parent);
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', parent || '_default');
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, parent);
    EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *) INSERT INTO %I SELECT * FROM moved',
                   parent || '_default', col, col, name) USING lo, hi;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, name, lo, hi);
    RETURN true;
END;
$$;

-- fleet_partitions_ensure creates the missing partitions from the hour (the
-- day) before now up to hours_ahead hours (days_ahead days) after it: hourly
-- ones for completed attempts, daily ones for the other attempts and for
-- metrics. It also creates the partitions of any hour or day that has rows
-- waiting in a default partition (written while no partition existed, say
-- during an outage), so that those rows move out and are trimmed in time
-- like the others. It returns how many partitions it created.
CREATE FUNCTION fleet_partitions_ensure(now timestamptz, hours_ahead integer, days_ahead integer)
RETURNS integer LANGUAGE plpgsql
SET datestyle = 'ISO, YMD' SET lock_timeout = '1s' AS $$
DECLARE
    created integer := 0;
    busy text[] := '{}';
    p record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('fleet_partitions'));
    FOR p IN
        WITH t AS (
            SELECT date_trunc('hour', now AT TIME ZONE 'UTC') AS h0, date_trunc('day', now AT TIME ZONE 'UTC') AS d0
        ), want (parent, col, fmt, span, start) AS (
            SELECT 'fleet_jobs_completed', 'finished_at', 'YYYYMMDDHH24', interval '1 hour', s
            FROM t, generate_series(t.h0 - interval '1 hour', t.h0 + hours_ahead * interval '1 hour', interval '1 hour') s
            UNION
            SELECT 'fleet_jobs_completed', 'finished_at', 'YYYYMMDDHH24', interval '1 hour',
                   date_trunc('hour', finished_at AT TIME ZONE 'UTC')
            FROM fleet_jobs_completed_default
            UNION
            SELECT 'fleet_jobs_failed', 'finished_at', 'YYYYMMDD', interval '1 day', s
            FROM t, generate_series(t.d0 - interval '1 day', t.d0 + days_ahead * interval '1 day', interval '1 day') s
            UNION
            SELECT 'fleet_jobs_failed', 'finished_at', 'YYYYMMDD', interval '1 day',
                   date_trunc('day', finished_at AT TIME ZONE 'UTC')
            FROM fleet_jobs_failed_default
            UNION
            SELECT 'fleet_metrics', 'taken_at', 'YYYYMMDD', interval '1 day', s
            FROM t, generate_series(t.d0 - interval '1 day', t.d0 + days_ahead * interval '1 day', interval '1 day') s
            UNION
            SELECT 'fleet_metrics', 'taken_at', 'YYYYMMDD', interval '1 day',
                   date_trunc('day', taken_at AT TIME ZONE 'UTC')
            FROM fleet_metrics_default
        )
        SELECT parent, col, parent || '_p' || to_char(start, fmt) AS name,
               start AT TIME ZONE 'UTC' AS lo, (start + span) AT TIME ZONE 'UTC' AS hi
        FROM want WHERE isfinite(start) AND start >= '0001-01-01'
        ORDER BY parent, start
    LOOP
        CONTINUE WHEN p.parent = ANY (busy);
        BEGIN
            IF fleet_partition_create(p.parent, p.name, p.lo, p.hi, p.col) THEN
                created := created + 1;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            RAISE WARNING 'fleet: % is busy; partition % and the later ones are left for the next run: %',
                          p.parent, p.name, SQLERRM;
            busy := busy || p.parent;
        END;
    END LOOP;
    RETURN created;
END;
$$;

-- fleet_partitions_trim drops every partition whose range ended at or
-- before its retention back from now: completed_hours for completed
-- attempts, failed_days for the others, metrics_days for metrics. It never
-- drops a default partition and never deletes rows: upper bounds are read
-- from the catalog, and dropping a partition is all it does. It returns how
-- many partitions it dropped.
CREATE FUNCTION fleet_partitions_trim(now timestamptz, completed_hours integer, failed_days integer, metrics_days integer)
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

-- Partitions exist as soon as the schema does.
SELECT fleet_partitions_ensure(now(), 48, 8);
