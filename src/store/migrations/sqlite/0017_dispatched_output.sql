-- The output a dispatched job's run streams back while its command runs
-- (docs/deployment.md), one row per batch the run posts: numbered by the
-- run, so a post it retries is taken once. The bot waiting for the job
-- shows each batch in the live console; the whole output still comes with
-- the hand-back, and the rows go with the job's payloads once it is over.
CREATE TABLE dispatched_output (
    job_id TEXT    NOT NULL REFERENCES dispatched_jobs (id),
    seq    INTEGER NOT NULL,
    text   TEXT    NOT NULL,
    -- The text's length in bytes, which bounds what a job keeps.
    bytes  INTEGER NOT NULL,
    PRIMARY KEY (job_id, seq)
);
