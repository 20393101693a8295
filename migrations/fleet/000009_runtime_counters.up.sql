-- fleet_runtime_counters holds the runtime histogram of the attempts by
-- queue and job name: per bucket (the index of the first bound of
-- store.RuntimeBoundsMs at or above the runtime; one past the last for
-- longer ones) how many attempts fell in it and their summed runtime.
-- Sharded by backend like fleet_counters; bumped in the statement that
-- finishes the attempts; never trimmed.
CREATE TABLE fleet_runtime_counters (
    queue   text    NOT NULL,
    name    text    NOT NULL,
    shard   integer NOT NULL,
    bucket  integer NOT NULL,
    n       bigint  NOT NULL DEFAULT 0,
    sum_ms  float8  NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, name, shard, bucket)
);
