-- fleet_periodic holds one row per periodic schedule ([fleet.periodic.NAME]):
-- its cursor (every tick at or before cursor_at has been decided:
-- dispatched, or skipped as missed) and the last tick dispatched. A master
-- moves the cursor only from the value it read, in the same transaction
-- that inserts the tick's job, so each tick is decided by exactly one
-- master and its job exists exactly when the cursor has moved past it.
CREATE TABLE fleet_periodic (
    name               text PRIMARY KEY,
    cursor_at          timestamptz NOT NULL,
    last_tick          timestamptz,
    last_job_id        bigint,
    last_dispatched_at timestamptz,
    -- who moved the cursor last (a master's instance id) and when.
    updated_by         text,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- fleet_periodic_ticks records each dispatched tick and the job it made,
-- one row per schedule and tick: the primary key refuses a tick dispatched
-- twice. Rows are trimmed with the completed history (fleet.trim).
CREATE TABLE fleet_periodic_ticks (
    name          text        NOT NULL,
    tick          timestamptz NOT NULL,
    job_id        bigint      NOT NULL,
    dispatched_at timestamptz NOT NULL DEFAULT now(),
    dispatched_by text        NOT NULL,
    PRIMARY KEY (name, tick)
);

CREATE INDEX fleet_periodic_ticks_tick_idx ON fleet_periodic_ticks (tick);
