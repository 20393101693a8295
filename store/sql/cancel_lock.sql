-- The first statement of a cancel (JobCancel): locks the queued jobs of
-- @job_ids in id order, so that two cancels, or a cancel and a claim (which
-- skips locked rows), never deadlock or interleave.
SELECT id FROM queue_jobs WHERE id = ANY (@job_ids::bigint[]) ORDER BY id FOR UPDATE
