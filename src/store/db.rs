//! The store's leaf: which database it is, what every SQLite connection
//! sets, how a write transaction begins on each, and the integer
//! conversions every table needs (times included). The other store files import it; it
//! imports none of them.

use crate::model::UnixMs;
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

/// A time is stored as its milliseconds, a `BIGINT`/`INTEGER` column, so
/// queries bind and read a [`UnixMs`] directly.
impl sqlx::Type<sqlx::Any> for UnixMs {
    fn type_info() -> sqlx::any::AnyTypeInfo {
        <i64 as sqlx::Type<sqlx::Any>>::type_info()
    }

    fn compatible(ty: &sqlx::any::AnyTypeInfo) -> bool {
        <i64 as sqlx::Type<sqlx::Any>>::compatible(ty)
    }
}

impl sqlx::Encode<'_, sqlx::Any> for UnixMs {
    fn encode_by_ref(
        &self,
        buf: &mut <sqlx::Any as sqlx::Database>::ArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <i64 as sqlx::Encode<sqlx::Any>>::encode_by_ref(&self.millis(), buf)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Any> for UnixMs {
    fn decode(
        value: <sqlx::Any as sqlx::Database>::ValueRef<'r>,
    ) -> Result<Self, sqlx::error::BoxDynError> {
        <i64 as sqlx::Decode<sqlx::Any>>::decode(value).map(UnixMs::from_millis)
    }
}

/// The intake file (SQLite through rusqlite) stores times the same way.
impl rusqlite::ToSql for UnixMs {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::from(self.millis()))
    }
}

impl rusqlite::types::FromSql for UnixMs {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        <i64 as rusqlite::types::FromSql>::column_result(value).map(UnixMs::from_millis)
    }
}
