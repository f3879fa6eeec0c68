//! The gate ledger (DESIGN §7): append-only, hash-chained facts and their evaluation.
