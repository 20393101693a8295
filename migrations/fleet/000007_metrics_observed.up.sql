-- Snapshots say what they saw. covered_until is NULL for the snapshot of a
-- whole minute, else the instant up to which a stopping master counted the
-- minute it was in; a later snapshot of that minute replaces such rows.
-- backlog_seen is false on a row written long after its minute, or by a
-- master that did not run at the minute's end: its pending and wait are
-- then 0 and say nothing.
ALTER TABLE fleet_metrics ADD COLUMN covered_until timestamptz;
ALTER TABLE fleet_metrics ADD COLUMN backlog_seen boolean NOT NULL DEFAULT true;

-- tables:created records when the fleet tables came to be; no snapshot is
-- written for a minute that ended before it. For a database whose tables
-- are older than this migration, the first snapshot stands for it.
INSERT INTO fleet_state (key, updated_at)
VALUES ('tables:created', LEAST(now(), (SELECT min(taken_at) FROM fleet_metrics)))
ON CONFLICT (key) DO NOTHING;
