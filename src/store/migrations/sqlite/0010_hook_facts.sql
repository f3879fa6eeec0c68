-- Hook outcomes are ledger facts of kind `hook`. SQLite cannot change a
-- CHECK constraint, so the table is built again with every fact as it was
-- (same columns, same order: the hash chain and signatures still check),
-- and its index and append-only guards are put back.
CREATE TABLE facts_with_hooks (
    repo        TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    gate        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent', 'hook')),
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
INSERT INTO facts_with_hooks (repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig)
    SELECT repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig FROM facts;
DROP TRIGGER facts_are_never_updated;
DROP TRIGGER facts_are_never_deleted;
DROP TABLE facts;
ALTER TABLE facts_with_hooks RENAME TO facts;
CREATE INDEX facts_by_gate ON facts (repo, gate, seq);
CREATE TRIGGER facts_are_never_updated BEFORE UPDATE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never updated');
END;
CREATE TRIGGER facts_are_never_deleted BEFORE DELETE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never deleted');
END;
