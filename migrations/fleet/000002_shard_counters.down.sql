CREATE TABLE fleet_counters_merged AS
    SELECT queue, sum(processed)::bigint AS processed, sum(failed)::bigint AS failed, max(updated_at) AS updated_at
    FROM fleet_counters GROUP BY queue;
DELETE FROM fleet_counters;
ALTER TABLE fleet_counters DROP CONSTRAINT fleet_counters_pkey;
ALTER TABLE fleet_counters DROP COLUMN shard;
INSERT INTO fleet_counters (queue, processed, failed, updated_at)
    SELECT queue, processed, failed, updated_at FROM fleet_counters_merged;
DROP TABLE fleet_counters_merged;
ALTER TABLE fleet_counters ADD PRIMARY KEY (queue);
