-- Who pushed a pull request's head, as its push event (`synchronize`) said:
-- the policy treats them like the author when they approve that head.
ALTER TABLE pull_requests ADD COLUMN pusher_head TEXT;
ALTER TABLE pull_requests ADD COLUMN pusher_id INTEGER;
ALTER TABLE pull_requests ADD COLUMN pusher_login TEXT;
