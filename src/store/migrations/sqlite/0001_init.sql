-- Webhook deliveries, deduplicated per (forge, hook or installation target, delivery id).
CREATE TABLE deliveries (
    id          INTEGER PRIMARY KEY,
    forge       TEXT    NOT NULL,
    target      TEXT    NOT NULL,
    delivery_id TEXT    NOT NULL,
    event_type  TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    UNIQUE (forge, target, delivery_id)
);

-- The job queue. Jobs sharing a queue_key run one at a time, in id order.
CREATE TABLE jobs (
    id             INTEGER PRIMARY KEY,
    delivery_id    INTEGER REFERENCES deliveries (id),
    kind           TEXT    NOT NULL,
    queue_key      TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'done', 'skipped', 'dead')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    -- how many of those attempts ended with the worker's lease running out
    lease_expiries INTEGER NOT NULL DEFAULT 0,
    max_attempts   INTEGER NOT NULL CHECK (max_attempts >= 1),
    run_after      INTEGER NOT NULL,
    lease_owner    TEXT,
    lease_until    INTEGER,
    last_error     TEXT,
    outcome        TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX jobs_runnable ON jobs (status, run_after);
CREATE INDEX jobs_by_queue_key ON jobs (queue_key, id);

-- What the bot knows of each pull request, and where its report lives.
CREATE TABLE pull_requests (
    forge             TEXT    NOT NULL,
    repo              TEXT    NOT NULL,
    number            INTEGER NOT NULL,
    head_sha          TEXT    NOT NULL,
    base_ref          TEXT    NOT NULL,
    is_open           BOOLEAN NOT NULL,
    report_comment_id INTEGER,
    check_id          INTEGER,
    report_head       TEXT,
    report_digest     TEXT,
    report_status     TEXT,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (forge, repo, number)
);

-- Every change set planned for a pull request; the newest is the current one.
CREATE TABLE plans (
    id         INTEGER PRIMARY KEY,
    forge      TEXT    NOT NULL,
    repo       TEXT    NOT NULL,
    number     INTEGER NOT NULL,
    head_sha   TEXT    NOT NULL,
    base_sha   TEXT    NOT NULL,
    digest     TEXT,
    change_set TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX plans_by_pr ON plans (forge, repo, number, id);
