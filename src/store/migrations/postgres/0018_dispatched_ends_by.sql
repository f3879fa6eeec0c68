-- PostgreSQL: as migrations/sqlite/0018_dispatched_ends_by.sql.
-- When a dispatched job is over for sure: the time its run had to claim it
-- and its timeout after that, past which the runner has stopped it. What a
-- job past it still holds (a bot stopped while it waited) is dropped.
ALTER TABLE dispatched_jobs ADD COLUMN ends_by BIGINT;
