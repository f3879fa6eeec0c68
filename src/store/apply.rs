//! Apply runs, member locks and the deployed estate. A run's attempt record
//! is one JSON document rewritten whole in one statement, so a crash leaves
//! either the record before a step or the one after it, never half of each.

use super::db::{to_digest, to_i64, to_u64};
use super::sql::{commit_sha, plan_columns, plan_from_row};
use super::{PlanRecord, Store};
use crate::apply::{AttemptRecord, RunStatus, Wait};
use crate::forge::RepoRef;
use crate::model::{CommitSha, Digest, MemberId, PrNumber, RepoId};
use anyhow::{anyhow, Context, Result};
use serde_json::{Map, Value};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::collections::HashMap;

/// A run to start for a merged pull request.
#[derive(Debug, Clone)]
pub(crate) struct NewApplyRun {
    pub(crate) repo: RepoRef,
    pub(crate) pr: PrNumber,
    pub(crate) merge_sha: CommitSha,
    /// The merge commit's first parent: what the base was when it merged.
    pub(crate) base_sha: CommitSha,
    /// The plan whose change set the pull request's approval binds.
    pub(crate) plan_id: i64,
    pub(crate) digest: Digest,
}

#[derive(Debug, Clone)]
pub(crate) struct ApplyRunRecord {
    pub(crate) id: i64,
    pub(crate) repo: RepoRef,
    pub(crate) pr: PrNumber,
    pub(crate) merge_sha: CommitSha,
    pub(crate) base_sha: CommitSha,
    pub(crate) plan_id: i64,
    pub(crate) digest: Digest,
    pub(crate) status: RunStatus,
    pub(crate) record: AttemptRecord,
    pub(crate) check_id: Option<u64>,
}

/// A member an apply run holds locked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberLock {
    pub(crate) member: String,
    pub(crate) run_id: i64,
    pub(crate) pr: PrNumber,
    pub(crate) since: crate::model::UnixMs,
}

macro_rules! run_columns {
    () => {
        "id, repo_ref, number, merge_sha, base_sha, plan_id, digest, status, record, check_id, \
         updated_at"
    };
}
pub(super) use run_columns;

impl Store {
    /// Starts the pull request's run unless it has one; answers the run and
    /// whether this call created it (a redelivered merge creates nothing).
    pub(crate) async fn create_apply_run(
        &self,
        new: NewApplyRun,
    ) -> Result<(ApplyRunRecord, bool)> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let inserted = sqlx::query(
            "INSERT INTO apply_runs (forge, repo, number, repo_ref, merge_sha, base_sha, plan_id,
                                     digest, status, record, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $10, $10)
             ON CONFLICT (forge, repo, number) DO NOTHING",
        )
        .bind(new.repo.id.forge.as_str())
        .bind(&new.repo.id.full_name)
        .bind(to_i64(new.pr.0, "pull request number")?)
        .bind(serde_json::to_string(&new.repo)?)
        .bind(new.merge_sha.as_str())
        .bind(new.base_sha.as_str())
        .bind(new.plan_id)
        .bind(new.digest.as_str())
        .bind(serde_json::to_string(&AttemptRecord::default())?)
        .bind(now)
        .execute(&self.pool)
        .await
        .with_context(|| format!("starting the apply run of {}{}", new.repo.id, new.pr))?
        .rows_affected()
            == 1;
        drop(_writer);
        let run = self
            .apply_run(&new.repo.id, new.pr)
            .await?
            .ok_or_else(|| anyhow!("the apply run of {}{} vanished", new.repo.id, new.pr))?;
        Ok((run, inserted))
    }

    pub(crate) async fn apply_run(
        &self,
        repo: &RepoId,
        pr: PrNumber,
    ) -> Result<Option<ApplyRunRecord>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM apply_runs WHERE forge = $1 AND repo = $2 AND number = $3"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading the apply run of {repo}{pr}"))?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// Writes a run's status, attempt record and check in one statement.
    pub(crate) async fn save_apply_run(&self, run: &ApplyRunRecord) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE apply_runs SET status = $2, record = $3, check_id = $4, updated_at = $5
             WHERE id = $1",
        )
        .bind(run.id)
        .bind(run.status.as_str())
        .bind(serde_json::to_string(&run.record)?)
        .bind(run.check_id.map(|id| to_i64(id, "check id")).transpose()?)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("saving apply run {}", run.id))?;
        Ok(())
    }

    /// The members of `repo` a run holds locked, by member, with the run's
    /// pull request.
    pub(crate) async fn member_locks(&self, repo: &RepoId) -> Result<Vec<MemberLock>> {
        sqlx::query(
            "SELECT l.member, l.run_id, r.number, l.acquired_at FROM member_locks l
             JOIN apply_runs r ON r.id = l.run_id
             WHERE l.forge = $1 AND l.repo = $2 ORDER BY l.member",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the member locks of {repo}"))?
        .iter()
        .map(|row| {
            Ok(MemberLock {
                member: row.try_get("member")?,
                run_id: row.try_get("run_id")?,
                pr: PrNumber(to_u64(row.try_get("number")?, "pull request number")?),
                since: row.try_get("acquired_at")?,
            })
        })
        .collect()
    }

    /// Takes the locks of `members` for `run_id`, all or none. When another
    /// run holds one, answers that member and the holder's pull request.
    pub(crate) async fn lock_members(
        &self,
        repo: &RepoId,
        run_id: i64,
        members: &[MemberId],
    ) -> Result<Option<(MemberId, PrNumber)>> {
        let _writer = self.writer.lock().await;
        let mut tx = self.begin_write().await?;
        for member in members {
            // Insert first, then read who holds it: on PostgreSQL a second
            // replica's insert waits for the first one's commit and then does
            // nothing, so both never think they hold the lock.
            sqlx::query(
                "INSERT INTO member_locks (forge, repo, member, run_id, acquired_at)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .bind(member.as_str())
            .bind(run_id)
            .bind(self.now())
            .execute(&mut *tx)
            .await?;
            let holder = sqlx::query(
                "SELECT l.run_id, r.number FROM member_locks l JOIN apply_runs r ON r.id = l.run_id
                 WHERE l.forge = $1 AND l.repo = $2 AND l.member = $3",
            )
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .bind(member.as_str())
            .fetch_one(&mut *tx)
            .await?;
            if holder.try_get::<i64, _>("run_id")? != run_id {
                let pr = PrNumber(to_u64(holder.try_get("number")?, "pull request number")?);
                tx.rollback().await?;
                return Ok(Some((member.clone(), pr)));
            }
        }
        tx.commit()
            .await
            .with_context(|| format!("locking members of {repo} for run {run_id}"))?;
        Ok(None)
    }

    /// The run holding `member`'s lock, if any.
    pub(crate) async fn member_lock_holder(
        &self,
        repo: &RepoId,
        member: &str,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "SELECT run_id FROM member_locks WHERE forge = $1 AND repo = $2 AND member = $3",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(member)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading the lock of {member} in {repo}"))?;
        row.map(|r| r.try_get(0)).transpose().map_err(Into::into)
    }

    /// Lets go of every lock `run_id` holds; answers the runs of the same
    /// repository that wait for a lock, to be resumed.
    pub(crate) async fn unlock_members(
        &self,
        repo: &RepoId,
        run_id: i64,
    ) -> Result<Vec<ApplyRunRecord>> {
        {
            let _writer = self.writer.lock().await;
            sqlx::query("DELETE FROM member_locks WHERE run_id = $1")
                .bind(run_id)
                .execute(&self.pool)
                .await
                .with_context(|| format!("unlocking the members of run {run_id}"))?;
        }
        self.runs_waiting_for_a_lock(repo, run_id).await
    }

    /// The runs of `repo` but `run_id` that wait for a member's lock, in
    /// the order they started: to be resumed once a lock is let go of.
    pub(super) async fn runs_waiting_for_a_lock(
        &self,
        repo: &RepoId,
        run_id: i64,
    ) -> Result<Vec<ApplyRunRecord>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM apply_runs
             WHERE forge = $1 AND repo = $2 AND status = 'waiting' AND id != $3 ORDER BY id"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the runs of {repo} waiting for a lock"))?;
        let runs = rows.iter().map(run_from_row).collect::<Result<Vec<_>>>()?;
        Ok(runs
            .into_iter()
            .filter(|r| matches!(r.record.wait, Some(Wait::Lock { .. })))
            .collect())
    }

    /// Remembers what a member left deployed, for later plans to read.
    pub(crate) async fn record_deployed(
        &self,
        repo: &RepoId,
        member: &str,
        outputs: &Map<String, Value>,
        run_id: i64,
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "INSERT INTO deployed_outputs (forge, repo, member, outputs, run_id, applied_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (forge, repo, member) DO UPDATE
             SET outputs = excluded.outputs, run_id = excluded.run_id,
                 applied_at = excluded.applied_at",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(member)
        .bind(serde_json::to_string(outputs)?)
        .bind(run_id)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording the outputs {member} of {repo} left"))?;
        Ok(())
    }

    /// The deployed estate of a repository: each member's last applied outputs.
    pub async fn deployed_outputs(
        &self,
        repo: &RepoId,
    ) -> Result<HashMap<String, Map<String, Value>>> {
        let rows = sqlx::query(
            "SELECT member, outputs FROM deployed_outputs WHERE forge = $1 AND repo = $2",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the deployed estate of {repo}"))?;
        rows.iter()
            .map(|row| {
                let member: String = row.try_get("member")?;
                let text: String = row.try_get("outputs")?;
                let outputs = serde_json::from_str(&text)
                    .with_context(|| format!("the recorded outputs of {member} are not JSON"))?;
                Ok((member, outputs))
            })
            .collect()
    }

    pub(crate) async fn plan(&self, id: i64) -> Result<Option<PlanRecord>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            plan_columns!(),
            " FROM plans WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading plan {id}"))?;
        row.as_ref().map(plan_from_row).transpose()
    }
}

/// Run `id`'s stored status.
pub(super) fn run_status(id: i64, status: &str) -> Result<RunStatus> {
    RunStatus::parse(status).ok_or_else(|| {
        anyhow!("apply run {id} has status `{status}`, which wavegate does not know")
    })
}

pub(super) fn run_from_row(row: &AnyRow) -> Result<ApplyRunRecord> {
    let id: i64 = row.try_get("id")?;
    let text = |column: &str| -> Result<String> { Ok(row.try_get::<String, _>(column)?) };
    let status = text("status")?;
    Ok(ApplyRunRecord {
        id,
        repo: serde_json::from_str(&text("repo_ref")?)
            .with_context(|| format!("apply run {id} names a repository wavegate cannot read"))?,
        pr: PrNumber(to_u64(row.try_get("number")?, "pull request number")?),
        merge_sha: commit_sha(text("merge_sha")?)?,
        base_sha: commit_sha(text("base_sha")?)?,
        plan_id: row.try_get("plan_id")?,
        digest: to_digest(text("digest")?, "run digest")?,
        status: run_status(id, &status)?,
        record: serde_json::from_str(&text("record")?).with_context(|| {
            format!("apply run {id} has an attempt record wavegate cannot read")
        })?,
        check_id: row
            .try_get::<Option<i64>, _>("check_id")?
            .map(|id| to_u64(id, "check id"))
            .transpose()?,
    })
}
