-- PostgreSQL: read-only API tokens, as migrations/sqlite/0013_api_tokens.sql.
CREATE TABLE api_tokens (
    name       TEXT   PRIMARY KEY,
    hash       TEXT   NOT NULL UNIQUE,
    repos      TEXT,
    created_at BIGINT NOT NULL
);
