-- fleet_counters counted processed and failed attempts only. These columns
-- count attempts by outcome and jobs by what became of them, bumped in the
-- same statements; they start at 0 for the history before them.
ALTER TABLE fleet_counters
    ADD COLUMN completed     bigint NOT NULL DEFAULT 0, -- attempts completed (each ends its job)
    ADD COLUMN attempt_failed bigint NOT NULL DEFAULT 0, -- attempts that failed with an error
    ADD COLUMN timed_out     bigint NOT NULL DEFAULT 0, -- attempts that timed out
    ADD COLUMN lost          bigint NOT NULL DEFAULT 0, -- attempts whose worker died
    ADD COLUMN cancelled     bigint NOT NULL DEFAULT 0, -- attempts cancelled (each ends its job)
    ADD COLUMN retried       bigint NOT NULL DEFAULT 0, -- jobs released to run again after a failed or timed out attempt
    ADD COLUMN failed_final  bigint NOT NULL DEFAULT 0, -- jobs moved to failed jobs, their tries spent
    ADD COLUMN requeued      bigint NOT NULL DEFAULT 0; -- jobs released to run again after a lost attempt
