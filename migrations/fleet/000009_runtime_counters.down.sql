DROP TABLE IF EXISTS fleet_runtime_counters;
