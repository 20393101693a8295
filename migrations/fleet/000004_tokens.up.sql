-- fleet_tokens holds the dashboard's API tokens. A token is
-- "fleet_" || id || "_" || secret: the id finds the row, and only the
-- SHA-256 of the secret is kept, so the table never holds a usable token.
-- Revoking keeps the row (revoked_at) so that `fleet:token list` shows it;
-- a new token may take the name of a revoked or expired one.
CREATE TABLE fleet_tokens (
    id           text PRIMARY KEY,
    name         text        NOT NULL UNIQUE,
    secret_hash  bytea       NOT NULL,
    abilities    text[]      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
