DROP FUNCTION IF EXISTS fleet_partitions_trim(timestamptz, integer, integer, integer);
DROP FUNCTION IF EXISTS fleet_partitions_ensure(timestamptz, integer, integer);
DROP FUNCTION IF EXISTS fleet_partition_create(text, text, timestamptz, timestamptz, text);
DROP TABLE IF EXISTS fleet_counters;
DROP TABLE IF EXISTS fleet_metrics;
DROP TABLE IF EXISTS fleet_jobs;
DROP TABLE IF EXISTS fleet_state;
DROP TABLE IF EXISTS fleet_masters;
