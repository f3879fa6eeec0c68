-- Apply runs: one per merged pull request, with its attempt record (JSON,
-- rewritten whole before and after each apply command).
CREATE TABLE apply_runs (
    id         BIGSERIAL PRIMARY KEY,
    forge      TEXT    NOT NULL,
    repo       TEXT    NOT NULL,
    number     BIGINT  NOT NULL,
    repo_ref   TEXT    NOT NULL,
    merge_sha  TEXT    NOT NULL,
    base_sha   TEXT    NOT NULL,
    plan_id    BIGINT  NOT NULL REFERENCES plans (id),
    digest     TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    record     TEXT    NOT NULL,
    check_id   BIGINT,
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL,
    UNIQUE (forge, repo, number)
);

-- One apply at a time per member, across runs.
CREATE TABLE member_locks (
    forge       TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    member      TEXT    NOT NULL,
    run_id      BIGINT  NOT NULL REFERENCES apply_runs (id),
    acquired_at BIGINT  NOT NULL,
    PRIMARY KEY (forge, repo, member)
);

-- The deployed estate: the outputs each member left when wavegate last applied it.
CREATE TABLE deployed_outputs (
    forge      TEXT    NOT NULL,
    repo       TEXT    NOT NULL,
    member     TEXT    NOT NULL,
    outputs    TEXT    NOT NULL,
    run_id     BIGINT  NOT NULL REFERENCES apply_runs (id),
    applied_at BIGINT  NOT NULL,
    PRIMARY KEY (forge, repo, member)
);
