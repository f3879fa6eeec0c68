-- PostgreSQL: the same tables as migrations/sqlite/0001_init.sql, with
-- 64-bit integers throughout (wavegate stores unix milliseconds and forge ids).
CREATE TABLE deliveries (
    id          BIGSERIAL PRIMARY KEY,
    forge       TEXT   NOT NULL,
    target      TEXT   NOT NULL,
    delivery_id TEXT   NOT NULL,
    event_type  TEXT   NOT NULL,
    received_at BIGINT NOT NULL,
    UNIQUE (forge, target, delivery_id)
);

CREATE TABLE jobs (
    id             BIGSERIAL PRIMARY KEY,
    delivery_id    BIGINT REFERENCES deliveries (id),
    kind           TEXT   NOT NULL,
    queue_key      TEXT   NOT NULL,
    payload        TEXT   NOT NULL,
    status         TEXT   NOT NULL CHECK (status IN ('queued', 'running', 'done', 'skipped', 'dead')),
    attempts       BIGINT NOT NULL DEFAULT 0,
    lease_expiries BIGINT NOT NULL DEFAULT 0,
    max_attempts   BIGINT NOT NULL CHECK (max_attempts >= 1),
    run_after      BIGINT NOT NULL,
    lease_owner    TEXT,
    lease_until    BIGINT,
    last_error     TEXT,
    outcome        TEXT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX jobs_runnable ON jobs (status, run_after);
CREATE INDEX jobs_by_queue_key ON jobs (queue_key, id);

-- is_open is 0 or 1, as in SQLite, so one query reads both.
CREATE TABLE pull_requests (
    forge             TEXT   NOT NULL,
    repo              TEXT   NOT NULL,
    number            BIGINT NOT NULL,
    head_sha          TEXT   NOT NULL,
    base_ref          TEXT   NOT NULL,
    is_open           BIGINT NOT NULL CHECK (is_open IN (0, 1)),
    report_comment_id BIGINT,
    check_id          BIGINT,
    report_head       TEXT,
    report_digest     TEXT,
    report_status     TEXT,
    updated_at        BIGINT NOT NULL,
    PRIMARY KEY (forge, repo, number)
);

CREATE TABLE plans (
    id         BIGSERIAL PRIMARY KEY,
    forge      TEXT   NOT NULL,
    repo       TEXT   NOT NULL,
    number     BIGINT NOT NULL,
    head_sha   TEXT   NOT NULL,
    base_sha   TEXT   NOT NULL,
    digest     TEXT,
    change_set TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX plans_by_pr ON plans (forge, repo, number, id);
