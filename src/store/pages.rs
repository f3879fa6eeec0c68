//! What the pages list: a repository's pull requests with their apply runs,
//! newest first, a page at a time and filtered by where they stand. Only
//! light columns are read (never a run's whole attempt record), so a list
//! costs the same over ten runs or ten thousand.

use super::apply::run_status;
use super::db::{to_i64, to_u64};
use super::sql::{commit_sha, report_status};
use super::{ReportStatus, Store};
use crate::apply::RunStatus;
use crate::model::{CommitSha, PrNumber, RepoId, UnixMs};
use anyhow::{Context, Result};
use sqlx::Row;
use std::str::FromStr;

/// Where a pull request stands, as a list filters it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PullState {
    /// Its run waits for a person or a lock, or it is open and its plan
    /// awaits an approval.
    Waiting,
    /// Its run is applying.
    Applying,
    /// Its run failed, or it is open and its plan failed or was refused.
    Failed,
    /// Its run applied or ended, or it closed without one.
    Done,
}

impl PullState {
    pub(crate) const ALL: [PullState; 4] = [
        PullState::Waiting,
        PullState::Applying,
        PullState::Failed,
        PullState::Done,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PullState::Waiting => "waiting",
            PullState::Applying => "applying",
            PullState::Failed => "failed",
            PullState::Done => "done",
        }
    }

    /// The same decision as [`PullState::condition`], over one row.
    pub(crate) fn of(
        open: bool,
        report: Option<ReportStatus>,
        run: Option<RunStatus>,
    ) -> Option<Self> {
        match run {
            Some(RunStatus::Waiting) => Some(PullState::Waiting),
            Some(RunStatus::Running) => Some(PullState::Applying),
            Some(RunStatus::Failed) => Some(PullState::Failed),
            Some(RunStatus::Applied | RunStatus::Ended) => Some(PullState::Done),
            None if !open => Some(PullState::Done),
            None => match report {
                Some(ReportStatus::AwaitingApproval) => Some(PullState::Waiting),
                Some(ReportStatus::Failed | ReportStatus::Refused) => Some(PullState::Failed),
                _ => None,
            },
        }
    }

    /// The rows in this state, over `pull_requests p LEFT JOIN apply_runs r`.
    fn condition(self) -> &'static str {
        match self {
            PullState::Waiting => {
                "(r.status = 'waiting' OR (r.id IS NULL AND CAST(p.is_open AS INTEGER) = 1 \
                 AND p.report_status = 'awaiting-approval'))"
            }
            PullState::Applying => "r.status = 'running'",
            PullState::Failed => {
                "(r.status = 'failed' OR (r.id IS NULL AND CAST(p.is_open AS INTEGER) = 1 \
                 AND p.report_status IN ('failed', 'refused')))"
            }
            PullState::Done => {
                "(r.status IN ('applied', 'ended') OR (r.id IS NULL AND CAST(p.is_open AS INTEGER) = 0))"
            }
        }
    }
}

impl FromStr for PullState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        PullState::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
            .ok_or_else(|| {
                format!("`{text}` is not a state to list; use waiting, applying, failed or done")
            })
    }
}

/// One pull request in a repository's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PullRow {
    pub(crate) pr: PrNumber,
    pub(crate) head_sha: CommitSha,
    pub(crate) open: bool,
    pub(crate) report_status: Option<ReportStatus>,
    pub(crate) updated_at: UnixMs,
    pub(crate) run: Option<RunRow>,
}

impl PullRow {
    pub(crate) fn state(&self) -> Option<PullState> {
        PullState::of(
            self.open,
            self.report_status,
            self.run.as_ref().map(|r| r.status),
        )
    }
}

/// A pull request's apply run, as a list shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunRow {
    pub(crate) id: i64,
    pub(crate) status: RunStatus,
    pub(crate) updated_at: UnixMs,
}

impl Store {
    /// Up to `limit` of `repo`'s pull requests numbered below `before` (all
    /// when `None`), newest first, in `state` when one is given.
    pub(crate) async fn pull_rows(
        &self,
        repo: &RepoId,
        state: Option<PullState>,
        before: Option<PrNumber>,
        limit: u32,
    ) -> Result<Vec<PullRow>> {
        let filter = state.map_or("", PullState::condition);
        let sql = format!(
            "SELECT p.number, p.head_sha, CAST(p.is_open AS INTEGER) AS is_open, p.report_status,
                    p.updated_at, r.id AS run_id, r.status AS run_status,
                    r.updated_at AS run_updated_at
             FROM pull_requests p
             LEFT JOIN apply_runs r
               ON r.forge = p.forge AND r.repo = p.repo AND r.number = p.number
             WHERE p.forge = $1 AND p.repo = $2 AND p.number < $3 {}{filter}
             ORDER BY p.number DESC LIMIT $4",
            if filter.is_empty() { "" } else { "AND " }
        );
        let before = match before {
            Some(pr) => to_i64(pr.0, "pull request number")?,
            None => i64::MAX,
        };
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .with_context(|| format!("listing the pull requests of {repo}"))?;
        rows.iter()
            .map(|row| {
                let pr = PrNumber(to_u64(row.try_get("number")?, "pull request number")?);
                let run = match row.try_get::<Option<i64>, _>("run_id")? {
                    None => None,
                    Some(id) => Some(RunRow {
                        id,
                        status: run_status(id, &row.try_get::<String, _>("run_status")?)?,
                        updated_at: row.try_get("run_updated_at")?,
                    }),
                };
                Ok(PullRow {
                    pr,
                    head_sha: commit_sha(row.try_get("head_sha")?)?,
                    open: row.try_get::<i64, _>("is_open")? != 0,
                    report_status: report_status(row)
                        .with_context(|| format!("reading the report status of {repo}{pr}"))?,
                    updated_at: row.try_get("updated_at")?,
                    run,
                })
            })
            .collect()
    }
}
