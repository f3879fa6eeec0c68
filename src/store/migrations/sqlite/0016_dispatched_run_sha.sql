-- The commit a dispatched job's run was started at, as the forge answers
-- for the run: a run's OIDC token must name that very commit (`sha`).
ALTER TABLE dispatched_jobs ADD COLUMN run_sha TEXT;
