-- PostgreSQL: each fact's signature, as migrations/sqlite/0006_fact_signatures.sql.
ALTER TABLE facts ADD COLUMN sig TEXT;

CREATE TABLE ledger_signing (
    public_key TEXT   PRIMARY KEY,
    since      BIGINT NOT NULL,
    heads      TEXT   NOT NULL,
    sig        TEXT   NOT NULL
);
