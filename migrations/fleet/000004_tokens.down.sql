DROP TABLE IF EXISTS fleet_tokens;
