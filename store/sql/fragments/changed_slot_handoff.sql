-- Frees the slot of each limited job a finish statement changed (each
-- outcome frees one) and hands it over to a due parked job of its key
-- (slot_handoff). Reads changed (limit_key: the jobs the statement
-- deleted or released). Defines freed (key, n) and the CTEs of
-- slot_handoff. For a batch without limited jobs freed is empty and these
-- CTEs touch nothing.
), freed AS (
    SELECT limit_key AS key, count(*)::integer AS n FROM changed
    WHERE limit_key IS NOT NULL GROUP BY limit_key
-- @include slot_handoff
