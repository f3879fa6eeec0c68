-- Every comment (and review state) whose commands were taken up, by the
-- webhook or by the reconciliation sweep: the first to record one enqueues
-- its job in the same transaction, every later one (a redelivery, the other
-- path, another replica) finds the row and enqueues nothing.
CREATE TABLE commands_seen (
    forge       TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    -- `comment:<id>` or `review:<id>:<state>`.
    source      TEXT    NOT NULL,
    number      INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (forge, repo, source)
);
-- How far the sweep has read a pull request's comments: the forge's newest
-- `updated_at` it listed (unix ms). A pull request starts a minute before
-- the bot first hears of it (set on insert); those it knew already start at
-- the upgrade: what came before was the webhooks' to run. NULL reads all.
ALTER TABLE pull_requests ADD COLUMN comments_since INTEGER;
UPDATE pull_requests SET comments_since = CAST(strftime('%s', 'now') AS INTEGER) * 1000;
