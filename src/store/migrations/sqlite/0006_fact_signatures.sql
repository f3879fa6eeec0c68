-- Each fact's Ed25519 signature of its hash by the server's ledger key
-- (`ed25519:<base64>`), which the database never holds: whoever can write
-- this table can append a correctly chained fact, but not sign one, and
-- `wavegate ledger verify` names it. NULL for facts written before signing.
ALTER TABLE facts ADD COLUMN sig TEXT;

-- When the server began signing with a key: where each repository's chain
-- stood then (JSON {repo: {seq, hash}}), signed by that key. Facts up to
-- those heads were written before signing; every later one must be signed.
-- One row per key, written at the server's first start with it.
CREATE TABLE ledger_signing (
    public_key TEXT    PRIMARY KEY,
    since      INTEGER NOT NULL,
    heads      TEXT    NOT NULL,
    sig        TEXT    NOT NULL
);
