DROP TABLE IF EXISTS fleet_metrics;
DROP TABLE IF EXISTS fleet_jobs;
DROP TABLE IF EXISTS fleet_state;
DROP TABLE IF EXISTS fleet_masters;
