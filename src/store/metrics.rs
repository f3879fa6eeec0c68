//! Figures `/metrics` reads at scrape time, and the delivery a job came
//! from (for its log span). Plain `GROUP BY` counts that SQLite and
//! PostgreSQL answer alike; counts are BIGINT (`i64`) on both.

use super::{JobId, Store};
use crate::model::UnixMs;
use anyhow::{Context, Result};

/// Counts read from the store for one scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StoreFigures {
    /// Jobs queued, running or dead, by status (a status with none is absent).
    pub(crate) jobs: Vec<(String, i64)>,
    /// The oldest queued job's age in milliseconds (0 when none is queued).
    pub(crate) oldest_queued_ms: i64,
    /// Ledger facts by kind.
    pub(crate) facts: Vec<(String, i64)>,
    /// Apply runs by status.
    pub(crate) apply_runs: Vec<(String, i64)>,
    /// Each checked stage's drift, with how old its oldest drift is (ms).
    pub(crate) drift: Vec<(super::StageDrift, i64)>,
}

impl Store {
    pub(crate) async fn figures(&self) -> Result<StoreFigures> {
        // Finished jobs pile up; these statuses are a range of the
        // (status, run_after) index, never a scan of the whole table.
        let jobs = sqlx::query_as::<_, (String, i64)>(
            "SELECT status, COUNT(*) FROM jobs
             WHERE status IN ('queued', 'running', 'dead') GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await
        .context("counting jobs")?;
        let (oldest,) = sqlx::query_as::<_, (Option<UnixMs>,)>(
            "SELECT MIN(created_at) FROM jobs WHERE status = 'queued'",
        )
        .fetch_one(&self.pool)
        .await
        .context("reading the oldest queued job")?;
        let facts =
            sqlx::query_as::<_, (String, i64)>("SELECT kind, COUNT(*) FROM facts GROUP BY kind")
                .fetch_all(&self.pool)
                .await
                .context("counting ledger facts")?;
        let apply_runs = sqlx::query_as::<_, (String, i64)>(
            "SELECT status, COUNT(*) FROM apply_runs GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await
        .context("counting apply runs")?;
        let now = self.now();
        let drift = self
            .drift_by_stage()
            .await?
            .into_iter()
            .map(|stage| {
                let age = stage.oldest.map_or(0, |since| {
                    i64::try_from(now.since(since).as_millis()).unwrap_or(i64::MAX)
                });
                (stage, age)
            })
            .collect();
        Ok(StoreFigures {
            drift,
            jobs,
            oldest_queued_ms: oldest.map_or(0, |at| {
                i64::try_from(self.now().since(at).as_millis()).unwrap_or(i64::MAX)
            }),
            facts,
            apply_runs,
        })
    }

    /// The forge's id of the delivery that caused `job` (none for a job the
    /// bot enqueued itself, e.g. an apply an approval let go on).
    pub(crate) async fn job_delivery(&self, job: JobId) -> Result<Option<String>> {
        let row = sqlx::query_as::<_, (String,)>(
            "SELECT d.delivery_id FROM jobs j JOIN deliveries d ON d.id = j.delivery_id
             WHERE j.id = $1",
        )
        .bind(job.0)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading the delivery of job {job}"))?;
        Ok(row.map(|(id,)| id))
    }
}
