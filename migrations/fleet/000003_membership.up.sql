-- fleet_masters becomes the fleet's membership: one row per running
-- process instance, keyed by a random instance id made at process start, so
-- that two processes under one name are told apart. Masters have kind
-- 'master'; a worker started without a master (by hand, from cron) keeps a
-- row of its own, kind 'worker', so that its liveness is known instead of
-- guessed from timeouts. queue_jobs.reserved_master holds the instance id
-- of the holder's member row. Rows are ephemeral (every live process beats
-- its own row within a second or so), so the table is rebuilt rather than
-- altered: stop the masters of the previous version before migrating.
DROP TABLE fleet_masters;

CREATE TABLE fleet_masters (
    instance   text PRIMARY KEY,
    kind       text        NOT NULL DEFAULT 'master' CHECK (kind IN ('master', 'worker')),
    name       text        NOT NULL,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    version    text        NOT NULL DEFAULT '',
    state      text        NOT NULL DEFAULT 'starting',
    -- report is the member's small self-description (supervisors,
    -- processes per queue, jobs per minute, memory), capped in size by the
    -- writer.
    report     jsonb       NOT NULL DEFAULT '{}',
    started_at timestamptz NOT NULL DEFAULT now(),
    beat_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX fleet_masters_name_idx ON fleet_masters (name);
CREATE INDEX fleet_masters_expires_at_idx ON fleet_masters (expires_at);

-- fleet_duties records which member does a periodic duty (the metrics
-- snapshot of one minute, partition upkeep of one period, ...) for the
-- period it covers. A claim lasts until lease_until; a holder that dies
-- mid-duty leaves done_at empty and the duty is claimed again once its
-- lease has passed. Rows older than a day are trimmed with the partitions.
CREATE TABLE fleet_duties (
    duty        text        NOT NULL,
    period      timestamptz NOT NULL,
    holder      text        NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL,
    done_at     timestamptz,
    tries       integer     NOT NULL DEFAULT 1,
    last_error  text,
    PRIMARY KEY (duty, period)
);
