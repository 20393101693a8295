-- Adds the attempts a finish statement wrote to the counters
-- (fleet_counters), per queue, on one of 16 shards from @shard_base that
-- no other writing transaction holds (queue_counter_shard), so that
-- concurrent writers do not wait on one another's row; rows are taken in
-- queue order so that they never deadlock. Snoozed
-- attempts are no attempts; cancelled and snoozed ones are no failures.
-- Reads written (queue, kind, status: as written_attempts makes it).
-- Defines counted. The columns and the conflict clause are those of
-- counterUpsert and counterConflict, which releaseLost and crashRelease
-- take.
-- @params @shard_base
), counted AS (
    INSERT INTO fleet_counters AS c (queue, shard, processed, failed,
    completed, attempt_failed, timed_out, lost, cancelled, retried, failed_final, requeued)
    SELECT queue, queue_counter_shard(@shard_base::integer), count(*) FILTER (WHERE status <> 'snoozed'),
    count(*) FILTER (WHERE status IN ('failed', 'timed_out', 'lost')),
    count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'),
    count(*) FILTER (WHERE status = 'timed_out'), 0, count(*) FILTER (WHERE status = 'cancelled'),
    count(*) FILTER (WHERE kind = 'retried' AND status IN ('failed', 'timed_out')),
    count(*) FILTER (WHERE kind = 'failed'), 0
    FROM written GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, shard) DO UPDATE SET processed = c.processed + EXCLUDED.processed,
        failed = c.failed + EXCLUDED.failed, completed = c.completed + EXCLUDED.completed,
        attempt_failed = c.attempt_failed + EXCLUDED.attempt_failed, timed_out = c.timed_out + EXCLUDED.timed_out,
        lost = c.lost + EXCLUDED.lost, cancelled = c.cancelled + EXCLUDED.cancelled,
        retried = c.retried + EXCLUDED.retried, failed_final = c.failed_final + EXCLUDED.failed_final,
        requeued = c.requeued + EXCLUDED.requeued, updated_at = now()
