-- PostgreSQL: who pushed a pull request's head, as migrations/sqlite/0007_head_pusher.sql.
ALTER TABLE pull_requests ADD COLUMN pusher_head TEXT;
ALTER TABLE pull_requests ADD COLUMN pusher_id BIGINT;
ALTER TABLE pull_requests ADD COLUMN pusher_login TEXT;
