-- Writes the rows of the CTE history_rows (job_id, queue, name, attempt,
-- status, reserved_at, started_at, finished_at, runtime_ms, error, master,
-- worker, tags, in that order: historyColumns) to the history, straight
-- into its two tables: history inserts the completed attempts into
-- fleet_jobs_completed and history_other the others into
-- fleet_jobs_failed. Both are tables in either layout (partitions of
-- fleet_jobs, or TimescaleDB hypertables behind the view fleet_jobs), so
-- the statement is the same on both and no row goes through the view's
-- trigger. A row without a status goes to fleet_jobs_failed, whose NOT
-- NULL refuses it. Taken by the statements of store/sql and, as text, by
-- those built in Go (releaseLost, crashRelease).
), history AS (
    INSERT INTO fleet_jobs_completed (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags)
    SELECT * FROM history_rows WHERE status = 'completed'
), history_other AS (
    INSERT INTO fleet_jobs_failed (job_id, queue, name, attempt, status, reserved_at, started_at, finished_at, runtime_ms, error, master, worker, tags)
    SELECT * FROM history_rows WHERE status IS DISTINCT FROM 'completed'
