-- PostgreSQL: as migrations/sqlite/0015_dispatched_jobs.sql.
-- Jobs handed to the forge's CI (docs/deployment.md): the job as the
-- runner gets it, how its run proves itself (an OIDC token of the
-- dispatched run, or a single-use token kept by its SHA-256 only), the run
-- the forge started, and what came back. A job is claimed once and handed
-- back once; what comes later is refused.
CREATE TABLE dispatched_jobs (
    id           TEXT    PRIMARY KEY,
    forge        TEXT    NOT NULL,
    repo         TEXT    NOT NULL,
    job          TEXT    NOT NULL,
    auth         TEXT    NOT NULL CHECK (auth IN ('oidc', 'token')),
    claim_hash   TEXT,
    session_hash TEXT,
    run_id       BIGINT,
    run_url      TEXT,
    state        TEXT    NOT NULL CHECK (state IN ('dispatched', 'claimed', 'finished', 'abandoned')),
    finished     TEXT,
    created_at   BIGINT  NOT NULL,
    -- Past this, no run claims it: a run queued longer (a bot that
    -- restarted stopped waiting for it) cannot start it any more.
    claim_by     BIGINT  NOT NULL,
    claimed_at   BIGINT,
    finished_at  BIGINT
);
