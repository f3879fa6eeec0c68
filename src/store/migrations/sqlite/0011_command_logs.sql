-- Every command wavegate ran for a pull request (its plans) or its apply
-- run (applies, outputs, hooks), with its output as far as it was kept:
-- written in batches while it runs (a row of command_output_parts each,
-- never rewriting what came before), so another replica and a restarted
-- server show it, and once it ends its whole kept output (capped,
-- redacted, as the report has it) in `output`, the parts gone.
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
    -- Its whole kept output once it ended; '' while it runs.
    output      TEXT    NOT NULL DEFAULT '',
    -- Output went past the cap: while it runs, what comes after waits for
    -- its end; once it ended, some was not kept (the output marks the cut).
    truncated   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX command_logs_of_pull ON command_logs (forge, repo, number, id);

-- A running command's output, a batch a row, in order.
CREATE TABLE command_output_parts (
    command_id INTEGER NOT NULL REFERENCES command_logs (id),
    seq        INTEGER NOT NULL,
    text       TEXT    NOT NULL,
    PRIMARY KEY (command_id, seq)
);
