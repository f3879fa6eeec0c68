-- An operator's release of a stale member lock and retry of a dead job are
-- ledger facts of kinds `lock_released` and `job_retried`. As in
-- 0010_hook_facts.sql, SQLite cannot change a CHECK constraint: the table is
-- built again with every fact as it was (same columns, same order: the hash
-- chain and signatures still check), and its index and guards are put back.
CREATE TABLE facts_with_operator_actions (
    repo        TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    gate        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent', 'hook', 'lock_released', 'job_retried')),
    digest      TEXT    NOT NULL,
    actor_id    INTEGER NOT NULL,
    actor_login TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    source      TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    prev        TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    sig         TEXT,
    PRIMARY KEY (repo, seq)
);
INSERT INTO facts_with_operator_actions (repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig)
    SELECT repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig FROM facts;
DROP TRIGGER facts_are_never_updated;
DROP TRIGGER facts_are_never_deleted;
DROP TABLE facts;
ALTER TABLE facts_with_operator_actions RENAME TO facts;
CREATE INDEX facts_by_gate ON facts (repo, gate, seq);
CREATE TRIGGER facts_are_never_updated BEFORE UPDATE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never updated');
END;
CREATE TRIGGER facts_are_never_deleted BEFORE DELETE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never deleted');
END;
