//! What the reconciliation sweep reads and writes: the repositories the bot
//! can reach, the pull requests it knows as open, the queues with work in
//! hand and the apply runs not finished; and enqueueing that several
//! replicas sweeping at once do not repeat. Each enqueue checks, in the
//! transaction that inserts the job, that the pull request's queue is idle
//! and that what the sweep saw still holds; on PostgreSQL the check and the
//! insert run under a transaction-scoped advisory lock on the queue key, so
//! a second replica waits for the first one's commit and then sees its job.

use super::apply::{run_columns, run_from_row};
use super::db::to_i64;
use super::sql::{insert_job, pr_columns, pr_from_row, repo_from_row};
use super::{ApplyRunRecord, Backend, JobId, NewJob, Once, OnceSource, PrRecord, Store};
use crate::forge::RepoRef;
use crate::model::{CommitSha, PrNumber, RepoId, UnixMs};
use anyhow::{Context, Result};
use sqlx::Row;
use std::collections::{HashMap, HashSet};

/// Namespaces the advisory locks on queue keys (two-key form), apart from the
/// migration lock and the ledger's one-key locks.
const QUEUE_LOCK_SPACE: i32 = 7_420_002;

/// What must still hold when reconciliation enqueues a job, besides the
/// pull request's queue being idle (no job of its queue key queued or running).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Still<'a> {
    /// Nothing more (an apply run to resume).
    Idle,
    /// The pull request is open, and its report is not of `head` or the
    /// base it was last planned on is not `base_ref`: a plan is due.
    Unplanned {
        repo: &'a RepoId,
        pr: PrNumber,
        head: &'a CommitSha,
        base_ref: &'a str,
    },
    /// The pull request is open; it is marked closed with the enqueue (a
    /// merge whose webhook was lost: the apply is started once).
    OpenThenClose { repo: &'a RepoId, pr: PrNumber },
}

impl Store {
    /// Remembers how to reach a repository; every job refreshes it (a
    /// reinstalled App's installation, a moved clone URL).
    pub async fn upsert_repository(&self, repo: &RepoRef) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "INSERT INTO repositories (forge, repo, repo_ref, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (forge, repo) DO UPDATE
             SET repo_ref = excluded.repo_ref, updated_at = excluded.updated_at",
        )
        .bind(repo.id.forge.as_str())
        .bind(&repo.id.full_name)
        .bind(serde_json::to_string(repo)?)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording the repository {}", repo.id))?;
        Ok(())
    }

    /// Every repository the bot has run a job for, by id.
    pub(crate) async fn repositories(&self) -> Result<HashMap<RepoId, RepoRef>> {
        let rows = sqlx::query("SELECT forge, repo, repo_ref FROM repositories")
            .fetch_all(&self.pool)
            .await
            .context("reading the repositories")?;
        rows.iter()
            .map(|row| {
                let id = repo_from_row(row)?;
                let text: String = row.try_get("repo_ref")?;
                let repo = serde_json::from_str(&text)
                    .with_context(|| format!("the recorded ref of {id} cannot be read"))?;
                Ok((id, repo))
            })
            .collect()
    }

    /// Whether an event of `repo` ever reached the store (one row, not the
    /// whole list [`Store::repositories`] reads and parses).
    pub(crate) async fn knows_repository(&self, repo: &RepoId) -> Result<bool> {
        let row = sqlx::query("SELECT 1 FROM repositories WHERE forge = $1 AND repo = $2")
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("looking up the repository {repo}"))?;
        Ok(row.is_some())
    }

    /// How to reach `repo`, if an event of it ever reached the store.
    pub(crate) async fn repository(&self, repo: &RepoId) -> Result<Option<RepoRef>> {
        let row = sqlx::query("SELECT repo_ref FROM repositories WHERE forge = $1 AND repo = $2")
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("looking up the repository {repo}"))?;
        row.map(|row| {
            let text: String = row.try_get("repo_ref")?;
            serde_json::from_str(&text)
                .with_context(|| format!("the recorded ref of {repo} cannot be read"))
        })
        .transpose()
    }

    /// Every pull request the store knows as open.
    pub(crate) async fn open_prs(&self) -> Result<Vec<PrRecord>> {
        sqlx::query(concat!(
            "SELECT ",
            pr_columns!(),
            " FROM pull_requests WHERE is_open = 1 ORDER BY forge, repo, number"
        ))
        .fetch_all(&self.pool)
        .await
        .context("reading the open pull requests")?
        .iter()
        .map(pr_from_row)
        .collect()
    }

    /// The queue keys with a job queued or running (a running job whose
    /// lease expired included: it is claimed again, not lost).
    pub(crate) async fn busy_queue_keys(&self) -> Result<HashSet<String>> {
        let rows = sqlx::query_as::<_, (String,)>(
            "SELECT DISTINCT queue_key FROM jobs WHERE status IN ('queued', 'running')",
        )
        .fetch_all(&self.pool)
        .await
        .context("reading the queues with work in hand")?;
        Ok(rows.into_iter().map(|(key,)| key).collect())
    }

    /// The apply runs running or waiting, oldest first, and the failed runs
    /// whose other part still waits at a stage gate (a failure outranks a
    /// wait in the run's status; the gate's `timeout` runs on).
    pub(crate) async fn unfinished_apply_runs(&self) -> Result<Vec<ApplyRunRecord>> {
        sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM apply_runs WHERE status IN ('running', 'waiting') \
             OR (status = 'failed' AND record LIKE '%\"wait\":{\"for\":\"stage\"%') ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await
        .context("reading the unfinished apply runs")?
        .iter()
        .map(run_from_row)
        .collect()
    }

    /// Marks a pull request closed; false when the store knew it so already.
    pub(crate) async fn mark_pr_closed(&self, repo: &RepoId, pr: PrNumber) -> Result<bool> {
        let _writer = self.writer.lock().await;
        let closed = sqlx::query(
            "UPDATE pull_requests SET is_open = 0, updated_at = $4
             WHERE forge = $1 AND repo = $2 AND number = $3 AND is_open = 1",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("marking {repo}{pr} closed"))?
        .rows_affected();
        Ok(closed == 1)
    }

    /// Enqueues `job` if its queue is idle and `still` holds, all in one
    /// transaction; answers the new job, or None when nothing was enqueued
    /// (another replica's sweep, a webhook or a worker got there first).
    pub(crate) async fn enqueue_reconciled(
        &self,
        job: NewJob,
        still: Still<'_>,
    ) -> Result<Option<JobId>> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        if self.backend == Backend::Postgres {
            // Replicas sweeping at once take turns per queue.
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1, hashtext($2))) AS locked")
                .bind(QUEUE_LOCK_SPACE)
                .bind(&job.queue_key)
                .execute(&mut *tx)
                .await
                .context("waiting for the queue's lock")?;
        }
        let busy = sqlx::query(
            "SELECT 1 FROM jobs WHERE queue_key = $1 AND status IN ('queued', 'running') LIMIT 1",
        )
        .bind(&job.queue_key)
        .fetch_optional(&mut *tx)
        .await
        .with_context(|| format!("looking for work in hand for {}", job.queue_key))?
        .is_some();
        let holds = !busy
            && match still {
                Still::Idle => true,
                Still::Unplanned {
                    repo,
                    pr,
                    head,
                    base_ref,
                } => sqlx::query(
                    "SELECT 1 FROM pull_requests
                     WHERE forge = $1 AND repo = $2 AND number = $3 AND is_open = 1
                       AND (report_head IS NULL OR report_head <> $4 OR base_ref <> $5)",
                )
                .bind(repo.forge.as_str())
                .bind(&repo.full_name)
                .bind(to_i64(pr.0, "pull request number")?)
                .bind(head.as_str())
                .bind(base_ref)
                .fetch_optional(&mut *tx)
                .await
                .with_context(|| format!("reading the report of {repo}{pr}"))?
                .is_some(),
                Still::OpenThenClose { repo, pr } => {
                    sqlx::query(
                        "UPDATE pull_requests SET is_open = 0, updated_at = $4
                         WHERE forge = $1 AND repo = $2 AND number = $3 AND is_open = 1",
                    )
                    .bind(repo.forge.as_str())
                    .bind(&repo.full_name)
                    .bind(to_i64(pr.0, "pull request number")?)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .with_context(|| format!("marking {repo}{pr} closed"))?
                    .rows_affected()
                        == 1
                }
            };
        if !holds {
            tx.rollback().await?;
            return Ok(None);
        }
        let id = insert_job(&mut tx, &job, None, now, now).await?;
        tx.commit()
            .await
            .with_context(|| format!("enqueueing a {} job for {}", job.kind, job.queue_key))?;
        Ok(Some(id))
    }

    /// Enqueues a comment's or review's job unless its source was taken up
    /// already (by a webhook, an earlier sweep or another replica): the
    /// `commands_seen` row and the job are written in one transaction.
    /// Answers the new job, or None when the source was seen.
    pub(crate) async fn enqueue_once(&self, job: NewJob) -> Result<Option<JobId>> {
        let once = job
            .once
            .clone()
            .context("a job enqueued once names what it takes up")?;
        let _writer = self.writer.lock().await;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let fresh = sqlx::query(
            "INSERT INTO commands_seen (forge, repo, source, number, recorded_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (forge, repo, source) DO NOTHING",
        )
        .bind(once.repo.forge.as_str())
        .bind(&once.repo.full_name)
        .bind(once.source.to_string())
        .bind(to_i64(once.pr.0, "pull request number")?)
        .bind(now)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("recording {} of {}{}", once.source, once.repo, once.pr))?
        .rows_affected()
            == 1;
        if !fresh {
            tx.rollback().await?;
            return Ok(None);
        }
        let id = insert_job(&mut tx, &job, None, now, now).await?;
        tx.commit()
            .await
            .with_context(|| format!("enqueueing a {} job for {}", job.kind, job.queue_key))?;
        Ok(Some(id))
    }

    /// Whether a comment or review state was taken up already.
    pub(crate) async fn was_seen(&self, once: &Once) -> Result<bool> {
        let row = sqlx::query(
            "SELECT 1 FROM commands_seen WHERE forge = $1 AND repo = $2 AND source = $3",
        )
        .bind(once.repo.forge.as_str())
        .bind(&once.repo.full_name)
        .bind(once.source.to_string())
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("looking up {} of {}{}", once.source, once.repo, once.pr))?;
        Ok(row.is_some())
    }

    /// Records a comment or review state as taken up (by a job that found
    /// it itself); false when it was already.
    pub(crate) async fn mark_seen(&self, once: &Once) -> Result<bool> {
        let _writer = self.writer.lock().await;
        let fresh = sqlx::query(
            "INSERT INTO commands_seen (forge, repo, source, number, recorded_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (forge, repo, source) DO NOTHING",
        )
        .bind(once.repo.forge.as_str())
        .bind(&once.repo.full_name)
        .bind(once.source.to_string())
        .bind(to_i64(once.pr.0, "pull request number")?)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording {} of {}{}", once.source, once.repo, once.pr))?
        .rows_affected();
        Ok(fresh == 1)
    }

    /// The comment and review sources of a pull request taken up so far.
    pub(crate) async fn commands_seen(
        &self,
        repo: &RepoId,
        pr: PrNumber,
    ) -> Result<HashSet<OnceSource>> {
        let rows = sqlx::query_as::<_, (String,)>(
            "SELECT source FROM commands_seen WHERE forge = $1 AND repo = $2 AND number = $3",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the comments of {repo}{pr} taken up"))?;
        rows.into_iter()
            .map(|(source,)| {
                source.parse().map_err(|e: String| {
                    anyhow::anyhow!(
                        "{repo}{pr} has a row in commands_seen wavegate cannot read: {e}"
                    )
                })
            })
            .collect()
    }

    /// How far the sweep has read the pull request's comments (the forge's
    /// newest `updated_at` listed, unix ms); None: from the start.
    pub async fn comments_since(&self, repo: &RepoId, pr: PrNumber) -> Result<Option<UnixMs>> {
        let row = sqlx::query_as::<_, (Option<UnixMs>,)>(
            "SELECT comments_since FROM pull_requests WHERE forge = $1 AND repo = $2 AND number = $3",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading how far the comments of {repo}{pr} were read"))?;
        Ok(row.and_then(|(since,)| since))
    }

    /// Every pull request's comment mark in the repository (open or not).
    pub(crate) async fn comment_marks(
        &self,
        repo: &RepoId,
    ) -> Result<HashMap<PrNumber, Option<UnixMs>>> {
        let rows = sqlx::query_as::<_, (i64, Option<UnixMs>)>(
            "SELECT number, comments_since FROM pull_requests WHERE forge = $1 AND repo = $2",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading how far the comments of {repo} were read"))?;
        rows.into_iter()
            .map(|(number, since)| {
                let number = u64::try_from(number)
                    .with_context(|| format!("a pull request of {repo} is numbered {number}"))?;
                Ok((PrNumber(number), since))
            })
            .collect()
    }

    /// Moves every pull request's comment mark in the repository forward to
    /// `to`: the repository's comments were read up to there.
    pub(crate) async fn advance_repo_comment_marks(&self, repo: &RepoId, to: UnixMs) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE pull_requests SET comments_since = $3
             WHERE forge = $1 AND repo = $2
               AND (comments_since IS NULL OR comments_since < $3)",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to)
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording how far the comments of {repo} were read"))?;
        Ok(())
    }

    #[cfg(test)]
    /// Moves the mark of how far the comments were read forward to `to`
    /// (never back: replicas sweeping at once may finish in any order).
    pub(crate) async fn advance_comments_since(
        &self,
        repo: &RepoId,
        pr: PrNumber,
        to: UnixMs,
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE pull_requests SET comments_since = $4
             WHERE forge = $1 AND repo = $2 AND number = $3
               AND (comments_since IS NULL OR comments_since < $4)",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .bind(to)
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording how far the comments of {repo}{pr} were read"))?;
        Ok(())
    }
}
