-- The gate ledger: append-only facts, hash-chained per repository (seq from 1).
CREATE TABLE facts (
    repo        TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    gate        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent')),
    digest      TEXT    NOT NULL,
    actor_id    INTEGER NOT NULL,
    actor_login TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    -- JSON: {"kind": "comment" | "review" | "wavegate", "id": ...}
    source      TEXT    NOT NULL,
    -- JSON; the text `null` when the fact carries nothing more
    data        TEXT    NOT NULL,
    prev        TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    PRIMARY KEY (repo, seq)
);
CREATE INDEX facts_by_gate ON facts (repo, gate, seq);

-- Facts are never changed or removed; `wavegate ledger verify` catches what
-- gets past these guards (e.g. someone dropping them first).
CREATE TRIGGER facts_are_never_updated BEFORE UPDATE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never updated');
END;
CREATE TRIGGER facts_are_never_deleted BEFORE DELETE ON facts
BEGIN
    SELECT RAISE(ABORT, 'ledger facts are append-only: they are never deleted');
END;
