ALTER TABLE fleet_counters
    DROP COLUMN completed, DROP COLUMN attempt_failed, DROP COLUMN timed_out, DROP COLUMN lost,
    DROP COLUMN cancelled, DROP COLUMN retried, DROP COLUMN failed_final, DROP COLUMN requeued;
