-- Adds the runtimes of the attempts a finish statement wrote (snoozed ones
-- aside) to the runtime histogram (fleet_runtime_counters), on the shard
-- attempt_counters takes. The bucket is how many bounds of
-- RuntimeBoundsMs lie below the runtime: width_bucket over the bounds
-- negated, smallest first. Rows are taken in key order so that concurrent
-- writers never deadlock. Reads written (queue, name, status, runtime: as
-- written_attempts makes it). Defines timed.
-- @params @shard_base
), timed AS (
    INSERT INTO fleet_runtime_counters AS r (queue, name, shard, bucket, n, sum_ms)
    SELECT queue, name, queue_counter_shard(@shard_base::integer), bucket, count(*), sum(runtime)
    FROM (SELECT queue, name, GREATEST(runtime, 0) AS runtime, (15 - width_bucket(-(GREATEST(runtime, 0))::float8, '{-1800000,-300000,-60000,-30000,-10000,-5000,-2500,-1000,-500,-250,-100,-50,-25,-10,-5}'::float8[])) AS bucket
          FROM written WHERE status <> 'snoozed' AND runtime IS NOT NULL) t
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (queue, name, shard, bucket) DO UPDATE SET n = r.n + EXCLUDED.n, sum_ms = r.sum_ms + EXCLUDED.sum_ms
