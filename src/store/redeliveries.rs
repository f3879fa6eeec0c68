//! What redelivering lost webhooks reads and writes: which of the events a
//! forge says it delivered the store recorded (`deliveries`, any target),
//! and the redeliveries asked for (`redeliveries`), each claimed by one
//! insert so that replicas sweeping at once ask for an event once.

use super::db::to_i64;
use super::Store;
use crate::model::ForgeKind;
use anyhow::{Context, Result};
use sqlx::AssertSqlSafe;
use std::collections::HashSet;

/// Most values bound in one `IN (…)` list.
const IN_LIST_CHUNK: usize = 500;

impl Store {
    /// Of `delivery_ids`, those recorded as `forge`'s deliveries, whichever
    /// hook or installation they came through.
    pub(crate) async fn recorded_deliveries(
        &self,
        forge: ForgeKind,
        delivery_ids: &[String],
    ) -> Result<HashSet<String>> {
        let mut recorded = HashSet::new();
        for chunk in delivery_ids.chunks(IN_LIST_CHUNK) {
            let sql = format!(
                "SELECT DISTINCT delivery_id FROM deliveries WHERE forge = $1 AND delivery_id IN ({})",
                placeholders(2, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String,)>(AssertSqlSafe(sql)).bind(forge.as_str());
            for id in chunk {
                query = query.bind(id.clone());
            }
            let rows = query
                .fetch_all(&self.pool)
                .await
                .context("reading which deliveries were recorded")?;
            recorded.extend(rows.into_iter().map(|(id,)| id));
        }
        Ok(recorded)
    }

    /// Of `guids`, those whose redelivery was asked for already.
    pub(crate) async fn redeliveries_asked(&self, guids: &[String]) -> Result<HashSet<String>> {
        let mut asked = HashSet::new();
        for chunk in guids.chunks(IN_LIST_CHUNK) {
            let sql = format!(
                "SELECT guid FROM redeliveries WHERE guid IN ({})",
                placeholders(1, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String,)>(AssertSqlSafe(sql));
            for guid in chunk {
                query = query.bind(guid.clone());
            }
            let rows = query
                .fetch_all(&self.pool)
                .await
                .context("reading the redeliveries asked for")?;
            asked.extend(rows.into_iter().map(|(guid,)| guid));
        }
        Ok(asked)
    }

    /// Claims asking for `guid`'s redelivery (by its failed attempt
    /// `delivery_id`): true for the one caller whose insert made the row,
    /// which then asks; false when it was claimed before.
    pub(crate) async fn claim_redelivery(&self, guid: &str, delivery_id: u64) -> Result<bool> {
        let _writer = self.writer.lock().await;
        let made = sqlx::query(
            "INSERT INTO redeliveries (guid, delivery_id, asked_at) VALUES ($1, $2, $3)
             ON CONFLICT (guid) DO NOTHING",
        )
        .bind(guid)
        .bind(to_i64(delivery_id, "delivery id")?)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("claiming the redelivery of {guid}"))?
        .rows_affected()
            == 1;
        Ok(made)
    }
}

/// `$first, $first+1, …` for `count` values.
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
