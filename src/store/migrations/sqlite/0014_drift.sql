-- Drift detection (docs/drift.md). Each stage checked for drift has its
-- place in the schedule; `runs` and `failures` count its checks for the
-- metrics, whichever replica made them.
CREATE TABLE drift_schedule (
    forge       TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    stage       TEXT    NOT NULL,
    repo_ref    TEXT    NOT NULL,
    every_ms    INTEGER NOT NULL CHECK (every_ms > 0),
    next_at     INTEGER NOT NULL,
    last_run_at INTEGER,
    runs        INTEGER NOT NULL DEFAULT 0,
    failures    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (forge, repo, stage)
);
CREATE INDEX drift_schedule_due ON drift_schedule (next_at);

-- When each repository's default branch was last read for its schedule.
CREATE TABLE drift_scans (
    forge      TEXT    NOT NULL,
    repo       TEXT    NOT NULL,
    scanned_at INTEGER NOT NULL,
    PRIMARY KEY (forge, repo)
);

-- The forge issue of each drifted subject (a member `c@s`, or a stage when
-- its drift is told in one issue). At most one is open per subject; a
-- closed one is kept, as its apply run may be.
CREATE TABLE drift_issues (
    forge      TEXT    NOT NULL,
    repo       TEXT    NOT NULL,
    number     INTEGER NOT NULL,
    subject    TEXT    NOT NULL,
    stage      TEXT    NOT NULL,
    is_open    INTEGER NOT NULL CHECK (is_open IN (0, 1)),
    -- The drift's plan and its digest; NULL while the subject only fails to plan.
    digest     TEXT,
    -- How many members the drift's plan holds.
    drifted    INTEGER NOT NULL DEFAULT 0,
    plan_id    INTEGER REFERENCES plans (id),
    commit_sha TEXT    NOT NULL,
    -- The last check's failure, while it fails.
    failing    TEXT,
    since      INTEGER NOT NULL,
    changed_at INTEGER NOT NULL,
    checked_at INTEGER NOT NULL,
    PRIMARY KEY (forge, repo, number)
);
CREATE UNIQUE INDEX drift_issues_open ON drift_issues (forge, repo, subject) WHERE is_open = 1;

-- A drift approval (`/apply <digest>` on a drift issue) and an apply of
-- drift are ledger facts of kinds `drift_approved` and `drift_applied`. As
-- in 0012_operator_facts.sql, the table is built again with every fact as
-- it was, and its index and guards are put back.
CREATE TABLE facts_with_drift (
    repo        TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    gate        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent', 'hook', 'lock_released', 'job_retried', 'drift_approved', 'drift_applied')),
    digest      TEXT    NOT NULL,
    actor_id    INTEGER NOT NULL,
    actor_login TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    source      TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    prev        TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    sig         TEXT,
    PRIMARY KEY (repo, seq)
);
INSERT INTO facts_with_drift (repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig)
    SELECT repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig FROM facts;
DROP TRIGGER facts_are_never_updated;
DROP TRIGGER facts_are_never_deleted;
DROP TABLE facts;
ALTER TABLE facts_with_drift RENAME TO facts;
CREATE INDEX facts_by_gate ON facts (repo, gate, seq);
CREATE TRIGGER facts_are_never_updated BEFORE UPDATE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never updated');
END;
CREATE TRIGGER facts_are_never_deleted BEFORE DELETE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never deleted');
END;
