DELETE FROM fleet_state WHERE key = 'tables:created';
DELETE FROM fleet_metrics WHERE covered_until IS NOT NULL;
ALTER TABLE fleet_metrics DROP COLUMN IF EXISTS backlog_seen;
ALTER TABLE fleet_metrics DROP COLUMN IF EXISTS covered_until;
