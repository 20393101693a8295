-- The attempts a finish statement wrote: those of the batch whose job it
-- changed, with the status and error the change gave them where it gave
-- one (a job stopped by a cancel request is recorded as cancelled). Reads
-- d (the batch, as finish_batch makes it) and changed (id, lease, tags,
-- status, err: the jobs deleted or released). Defines written (id, queue,
-- name, attempt, kind, status, reserved, started, finished, runtime, err,
-- tags), what the history and the counters are made from.
), written AS (
    SELECT d.id, d.queue, d.name, d.attempt, d.kind, COALESCE(c.status, d.status) AS status, d.reserved, d.started,
           d.finished, d.runtime, COALESCE(c.err, d.err) AS err, c.tags
    FROM d JOIN changed c ON c.id = d.id AND c.lease = d.lease
