-- The history rows of the attempts a finish statement wrote, by the
-- writer's master and worker (NULL where empty), and their insert
-- (history_insert). Reads written (as written_attempts makes it). Defines
-- history_rows and the CTEs of history_insert.
-- @params @master @worker
), history_rows (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags) AS (
    SELECT id, queue, name, attempt, status, reserved, started, finished, runtime,
           NULLIF(err, ''), NULLIF(@master, ''), NULLIF(@worker, ''), tags
    FROM written
-- @include history_insert
