-- The counters (queue_counts here; fleet_counters and
-- fleet_runtime_counters in the fleet set) have 16 shards per key so that
-- concurrent writers do not wait on one another's row. Each writer used
-- to take the shard of its backend (pg_backend_pid() % 16), so two busy
-- sessions whose pids agree modulo 16 waited on each other for as long as
-- their connections lived, each for the other's statement and commit: with
-- a dozen busy sessions (several masters' workers) most had such a twin.
--
-- queue_counter_shard(base) hands the transaction a shard no other writer
-- holds: it tries, from the backend's own shard on, a transaction-level
-- advisory lock per shard (never waiting), and keeps the first it gets for
-- the rest of the transaction (a transaction-local setting remembers it, so
-- every counter row of one transaction is on one shard and rows are still
-- taken in key order: no deadlock). Only when 16 transactions hold every
-- shard does a writer fall back to its backend's and wait. base picks the
-- range: 0 for the outcome writers and every trigger, 16 for a job
-- completed in a handler's own transaction (see store.completeShards);
-- each range has its own locks.
CREATE FUNCTION queue_counter_shard(base integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    setting text := 'fleet.counter_shard_' || base;
    held text := current_setting(setting, true);
    home integer := pg_backend_pid() % 16;
    s integer := home;
BEGIN
    IF held IS NOT NULL AND held <> '' THEN
        RETURN held::integer;
    END IF;
    FOR i IN 0 .. 15 LOOP
        IF pg_try_advisory_xact_lock(1718838116, base + (home + i) % 16) THEN
            s := (home + i) % 16;
            EXIT;
        END IF;
    END LOOP;
    PERFORM set_config(setting, (base + s)::text, true);
    RETURN base + s;
END;
$$;

CREATE OR REPLACE FUNCTION queue_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO queue_counts AS c (queue, priority, shard, unreserved, reserved)
        SELECT queue, priority, queue_counter_shard(0),
               count(*) FILTER (WHERE reserved_by IS NULL), count(*) FILTER (WHERE reserved_by IS NOT NULL)
        FROM new_rows GROUP BY queue, priority ORDER BY queue, priority
        ON CONFLICT (queue, priority, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO queue_counts AS c (queue, priority, shard, unreserved, reserved)
        SELECT queue, priority, queue_counter_shard(0),
               -count(*) FILTER (WHERE reserved_by IS NULL), -count(*) FILTER (WHERE reserved_by IS NOT NULL)
        FROM old_rows GROUP BY queue, priority ORDER BY queue, priority
        ON CONFLICT (queue, priority, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    ELSE
        INSERT INTO queue_counts AS c (queue, priority, shard, unreserved, reserved)
        SELECT queue, priority, queue_counter_shard(0), sum(u), sum(r)
        FROM (
            SELECT queue, priority, (reserved_by IS NULL)::int AS u, (reserved_by IS NOT NULL)::int AS r FROM new_rows
            UNION ALL
            SELECT queue, priority, -(reserved_by IS NULL)::int, -(reserved_by IS NOT NULL)::int FROM old_rows
        ) d
        GROUP BY queue, priority
        HAVING sum(u) <> 0 OR sum(r) <> 0
        ORDER BY queue, priority
        ON CONFLICT (queue, priority, shard) DO UPDATE
            SET unreserved = c.unreserved + EXCLUDED.unreserved, reserved = c.reserved + EXCLUDED.reserved;
    END IF;
    RETURN NULL;
END;
$$;
