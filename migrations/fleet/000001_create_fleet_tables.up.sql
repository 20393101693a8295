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

-- fleet_partition_create creates one range partition of parent for
-- [lo, hi) named name, moving any rows of that range out of the parent's
-- default partition first. It returns false when the partition exists.
CREATE FUNCTION fleet_partition_create(parent text, name text, lo timestamptz, hi timestamptz, col text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, parent);
    EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *) INSERT INTO %I SELECT * FROM moved',
                   parent || '_default', col, col, name) USING lo, hi;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, name, lo, hi);
    RETURN true;
END;
$$;

-- fleet_partitions_ensure creates the partitions from an hour (a day) before
-- now up to hours_ahead hours (days_ahead days) after it, in UTC, and
-- returns how many it created.
CREATE FUNCTION fleet_partitions_ensure(at timestamptz, hours_ahead integer, days_ahead integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    created integer := 0;
    h timestamp;
    d timestamp;
BEGIN
    FOR i IN -1 .. hours_ahead LOOP
        h := date_trunc('hour', at AT TIME ZONE 'UTC') + i * interval '1 hour';
        IF fleet_partition_create('fleet_jobs_completed', 'fleet_jobs_completed_p' || to_char(h, 'YYYYMMDDHH24'),
                                  h AT TIME ZONE 'UTC', (h + interval '1 hour') AT TIME ZONE 'UTC', 'finished_at') THEN
            created := created + 1;
        END IF;
    END LOOP;
    FOR i IN -1 .. days_ahead LOOP
        d := date_trunc('day', at AT TIME ZONE 'UTC') + i * interval '1 day';
        IF fleet_partition_create('fleet_jobs_failed', 'fleet_jobs_failed_p' || to_char(d, 'YYYYMMDD'),
                                  d AT TIME ZONE 'UTC', (d + interval '1 day') AT TIME ZONE 'UTC', 'finished_at') THEN
            created := created + 1;
        END IF;
        IF fleet_partition_create('fleet_metrics', 'fleet_metrics_p' || to_char(d, 'YYYYMMDD'),
                                  d AT TIME ZONE 'UTC', (d + interval '1 day') AT TIME ZONE 'UTC', 'taken_at') THEN
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END;
$$;

-- fleet_partitions_trim drops every partition whose range ended at least
-- its retention before at (never the default partitions) and returns how
-- many it dropped. Bounds are read from the catalog, not from names.
CREATE FUNCTION fleet_partitions_trim(at timestamptz, completed_hours integer, failed_days integer, metrics_days integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    dropped integer := 0;
    p record;
    hi timestamptz;
BEGIN
    FOR p IN
        SELECT c.relname, parent.relname AS parent, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class parent ON parent.oid = i.inhparent
        WHERE parent.relname IN ('fleet_jobs_completed', 'fleet_jobs_failed', 'fleet_metrics')
          AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
    LOOP
        hi := substring(p.bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
        IF (p.parent = 'fleet_jobs_completed' AND hi <= at - completed_hours * interval '1 hour')
           OR (p.parent = 'fleet_jobs_failed' AND hi <= at - failed_days * interval '1 day')
           OR (p.parent = 'fleet_metrics' AND hi <= at - metrics_days * interval '1 day') THEN
            EXECUTE format('DROP TABLE %I', p.relname);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END;
$$;

SELECT fleet_partitions_ensure(now(), 48, 8);
