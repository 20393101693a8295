DROP FUNCTION IF EXISTS fleet_dispatch(text, text, jsonb, interval, integer, text[], jsonb, integer, interval);
