//! The store's leaf: which database it is, how a write transaction begins
//! on each, and the integer conversions every table needs. The other store
//! files import it; it imports none of them.

use anyhow::{anyhow, Result};
use sqlx::AnyPool;

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

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
