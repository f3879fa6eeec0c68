-- Read-only API tokens for integrations: kept as the SHA-256 of the token
-- (the token itself is shown once, when it is made), with the repositories
-- it may read (JSON list of `forge:owner/name`, NULL for every one).
CREATE TABLE api_tokens (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    repos      TEXT,
    created_at INTEGER NOT NULL
);
