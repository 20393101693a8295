-- fleet_counters was one row per queue, upserted by every outcome batch of
-- every worker: all workers of a queue queued on that row until commit. It
-- is now sharded like queue_counts (by backend, 16 shards per queue);
-- readers sum the shards.
ALTER TABLE fleet_counters ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE fleet_counters DROP CONSTRAINT fleet_counters_pkey;
ALTER TABLE fleet_counters ADD PRIMARY KEY (queue, shard);
