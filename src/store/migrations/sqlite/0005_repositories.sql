-- The repositories the bot has run a job for, with what the worker needs to
-- call the forge about them (the event's RepoRef, JSON): reconciliation asks
-- the forge about the open pull requests of each.
CREATE TABLE repositories (
    forge      TEXT    NOT NULL,
    repo       TEXT    NOT NULL,
    repo_ref   TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (forge, repo)
);

-- Reconciliation reads the open pull requests at every sweep.
CREATE INDEX pull_requests_open ON pull_requests (is_open);

-- ... and the runs still running or waiting.
CREATE INDEX apply_runs_by_status ON apply_runs (status);
