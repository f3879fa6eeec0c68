-- PostgreSQL: an operator's release of a stale member lock and retry of a
-- dead job are ledger facts of kinds `lock_released` and `job_retried`, as
-- migrations/sqlite/0012_operator_facts.sql.
ALTER TABLE facts DROP CONSTRAINT facts_kind_check;
ALTER TABLE facts ADD CONSTRAINT facts_kind_check
    CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent', 'hook',
                    'lock_released', 'job_retried'));
