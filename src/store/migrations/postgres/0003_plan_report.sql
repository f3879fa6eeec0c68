-- The report as posted for a plan (without its approvals section), so the
-- approvals can be brought up to date without planning again.
ALTER TABLE plans ADD COLUMN report TEXT NOT NULL DEFAULT '';
