-- PostgreSQL: the comments whose commands were taken up, as migrations/sqlite/0008_commands_seen.sql.
CREATE TABLE commands_seen (
    forge       TEXT   NOT NULL,
    repo        TEXT   NOT NULL,
    source      TEXT   NOT NULL,
    number      BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (forge, repo, source)
);
ALTER TABLE pull_requests ADD COLUMN comments_since BIGINT;
UPDATE pull_requests SET comments_since = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT);
