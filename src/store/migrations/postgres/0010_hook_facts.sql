-- PostgreSQL: hook outcomes are ledger facts of kind `hook`, as
-- migrations/sqlite/0010_hook_facts.sql.
ALTER TABLE facts DROP CONSTRAINT facts_kind_check;
ALTER TABLE facts ADD CONSTRAINT facts_kind_check
    CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent', 'hook'));
