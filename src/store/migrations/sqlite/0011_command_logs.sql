-- Every command wavegate ran for a pull request (its plans) or its apply
-- run (applies, outputs, hooks), with its output as far as it was kept:
-- written in batches while it runs, so another replica and a restarted
-- server show it, and replaced by the command's whole kept output (capped,
-- redacted, as the report has it) when it ends.
CREATE TABLE command_logs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    forge       TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    number      INTEGER NOT NULL,
    -- The apply run it is of; NULL for a pull request's plans.
    run_id      INTEGER,
    label       TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    -- Written at each batch and every few seconds while it runs: a running
    -- row nobody touched for a minute lost its server.
    updated_at  INTEGER NOT NULL,
    finished_at INTEGER,
    -- How it ended (`exited:0`, `signalled:9`, `timed-out`, `cancelled`,
    -- `not-started`); NULL while it runs.
    ending      TEXT,
    output      TEXT    NOT NULL DEFAULT '',
    -- Output went past the cap: what follows the cut is the last lines.
    truncated   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX command_logs_of_pull ON command_logs (forge, repo, number, id);
