//! The store's leaf: which database it is, what every SQLite connection
//! sets, how a write transaction begins on each, and the integer
//! conversions every table needs. The other store files import it; it
//! imports none of them.

use anyhow::{anyhow, Result};
use sqlx::AnyPool;

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// What SQLite waits for a lock another process holds before giving up.
pub(super) const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; \
     PRAGMA synchronous = FULL;";

pub(super) async fn begin_write(
    pool: &AnyPool,
    backend: Backend,
) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
    Ok(match backend {
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await?,
        Backend::Postgres => pool.begin().await?,
    })
}

pub(super) fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| anyhow!("{what} {value} is too large to store"))
}

pub(super) fn to_u64(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| anyhow!("stored {what} {value} is negative"))
}

/// A digest read back from a column; one that is not a digest was altered.
pub(super) fn to_digest(text: String, what: &str) -> Result<crate::model::Digest> {
    text.parse()
        .map_err(|e| anyhow!("stored {what}: {e}; the record was altered and is not trusted"))
}

/// [`to_digest`] of a column that may be empty.
pub(super) fn to_opt_digest(
    text: Option<String>,
    what: &str,
) -> Result<Option<crate::model::Digest>> {
    text.map(|text| to_digest(text, what)).transpose()
}
