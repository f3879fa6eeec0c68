-- PostgreSQL: every command's kept output, as migrations/sqlite/0011_command_logs.sql.
CREATE TABLE command_logs (
    id          BIGSERIAL PRIMARY KEY,
    forge       TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    number      BIGINT  NOT NULL,
    run_id      BIGINT,
    label       TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    started_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    finished_at BIGINT,
    ending      TEXT,
    output      TEXT    NOT NULL DEFAULT '',
    truncated   BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX command_logs_of_pull ON command_logs (forge, repo, number, id);

CREATE TABLE command_output_parts (
    command_id BIGINT NOT NULL REFERENCES command_logs (id),
    seq        BIGINT NOT NULL,
    text       TEXT   NOT NULL,
    PRIMARY KEY (command_id, seq)
);
