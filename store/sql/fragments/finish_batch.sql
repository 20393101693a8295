-- The batch of a finish statement (finish.sql, finish_ends.sql), one row
-- per attempt: opens the statement's WITH with the CTE d (id, lease, kind,
-- status, delay_ms, err, tries, queue, name, attempt, reserved, started,
-- finished, runtime), whose n-th row holds the n-th element of each array.
-- @params @job_ids @leases @kinds @statuses @delays_ms @errors @tries
-- @params @queues @names @attempts @reserved @started @finished @runtimes_ms
WITH d AS MATERIALIZED (
    SELECT * FROM unnest(@job_ids::bigint[], @leases::bigint[], @kinds::text[], @statuses::text[],
                         @delays_ms::bigint[], @errors::text[], @tries::integer[], @queues::text[],
                         @names::text[], @attempts::integer[], @reserved::timestamptz[],
                         @started::timestamptz[], @finished::timestamptz[], @runtimes_ms::float8[])
         AS d(id, lease, kind, status, delay_ms, err, tries, queue, name, attempt, reserved, started, finished, runtime)
