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

-- fleet_jobs records every finished attempt. Partitioned by the hour so that
-- trimming drops whole partitions.
CREATE TABLE fleet_jobs (
    job_id      bigint      NOT NULL,
    queue       text        NOT NULL,
    name        text        NOT NULL,
    attempt     integer     NOT NULL,
    status      text        NOT NULL,
    reserved_at timestamptz,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    runtime_ms  double precision NOT NULL,
    error       text,
    master      text,
    worker      text
) PARTITION BY RANGE (finished_at);

CREATE TABLE fleet_jobs_default PARTITION OF fleet_jobs DEFAULT;
CREATE INDEX fleet_jobs_finished_at_idx ON fleet_jobs (finished_at);

-- fleet_metrics holds per-minute snapshots per queue and per job name.
-- Partitioned by day.
CREATE TABLE fleet_metrics (
    taken_at        timestamptz NOT NULL,
    kind            text        NOT NULL,
    subject         text        NOT NULL,
    jobs            bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    jobs_per_minute double precision NOT NULL DEFAULT 0,
    runtime_p50_ms  double precision NOT NULL DEFAULT 0,
    runtime_p95_ms  double precision NOT NULL DEFAULT 0,
    runtime_p99_ms  double precision NOT NULL DEFAULT 0,
    runtime_mean_ms double precision NOT NULL DEFAULT 0,
    wait_secs       double precision NOT NULL DEFAULT 0,
    clear_secs      double precision NOT NULL DEFAULT 0
) PARTITION BY RANGE (taken_at);

CREATE TABLE fleet_metrics_default PARTITION OF fleet_metrics DEFAULT;
CREATE INDEX fleet_metrics_taken_at_idx ON fleet_metrics (taken_at);
