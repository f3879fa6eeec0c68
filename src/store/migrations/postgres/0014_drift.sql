-- PostgreSQL: drift detection, as migrations/sqlite/0014_drift.sql.
CREATE TABLE drift_schedule (
    forge       TEXT   NOT NULL,
    repo        TEXT   NOT NULL,
    stage       TEXT   NOT NULL,
    repo_ref    TEXT   NOT NULL,
    every_ms    BIGINT NOT NULL CHECK (every_ms > 0),
    next_at     BIGINT NOT NULL,
    last_run_at BIGINT,
    runs        BIGINT NOT NULL DEFAULT 0,
    failures    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (forge, repo, stage)
);
CREATE INDEX drift_schedule_due ON drift_schedule (next_at);

CREATE TABLE drift_scans (
    forge      TEXT   NOT NULL,
    repo       TEXT   NOT NULL,
    scanned_at BIGINT NOT NULL,
    PRIMARY KEY (forge, repo)
);

CREATE TABLE drift_issues (
    forge      TEXT   NOT NULL,
    repo       TEXT   NOT NULL,
    number     BIGINT NOT NULL,
    subject    TEXT   NOT NULL,
    stage      TEXT   NOT NULL,
    is_open    BIGINT NOT NULL CHECK (is_open IN (0, 1)),
    digest     TEXT,
    drifted    BIGINT NOT NULL DEFAULT 0,
    plan_id    BIGINT REFERENCES plans (id),
    commit_sha TEXT   NOT NULL,
    failing    TEXT,
    since      BIGINT NOT NULL,
    changed_at BIGINT NOT NULL,
    checked_at BIGINT NOT NULL,
    PRIMARY KEY (forge, repo, number)
);
CREATE UNIQUE INDEX drift_issues_open ON drift_issues (forge, repo, subject) WHERE is_open = 1;

ALTER TABLE facts DROP CONSTRAINT facts_kind_check;
ALTER TABLE facts ADD CONSTRAINT facts_kind_check
    CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent', 'hook',
                    'lock_released', 'job_retried', 'drift_approved', 'drift_applied'));
