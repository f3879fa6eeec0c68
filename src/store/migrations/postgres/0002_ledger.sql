-- PostgreSQL: the gate ledger, as migrations/sqlite/0002_ledger.sql.
CREATE TABLE facts (
    repo        TEXT   NOT NULL,
    seq         BIGINT NOT NULL CHECK (seq >= 1),
    gate        TEXT   NOT NULL,
    kind        TEXT   NOT NULL CHECK (kind IN ('pending', 'approved', 'refused', 'revoked', 'spent')),
    digest      TEXT   NOT NULL,
    actor_id    BIGINT NOT NULL,
    actor_login TEXT   NOT NULL,
    at          BIGINT NOT NULL,
    source      TEXT   NOT NULL,
    data        TEXT   NOT NULL,
    prev        TEXT   NOT NULL,
    hash        TEXT   NOT NULL,
    PRIMARY KEY (repo, seq)
);
CREATE INDEX facts_by_gate ON facts (repo, gate, seq);

CREATE FUNCTION facts_are_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger facts are append-only: they are never %', lower(TG_OP) || 'd';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER facts_are_never_changed BEFORE UPDATE OR DELETE ON facts
    FOR EACH ROW EXECUTE FUNCTION facts_are_append_only();
CREATE TRIGGER facts_are_never_truncated BEFORE TRUNCATE ON facts
    FOR EACH STATEMENT EXECUTE FUNCTION facts_are_append_only();
