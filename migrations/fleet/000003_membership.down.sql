DROP TABLE IF EXISTS fleet_duties;
DROP TABLE IF EXISTS fleet_masters;
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
