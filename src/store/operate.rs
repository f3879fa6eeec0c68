//! An operator's actions on a repository's queue: letting go of a stale
//! member lock, and queueing a dead job again. Each change is written with
//! the ledger fact that records it in one transaction (both or neither),
//! and only if what the operator's decision rested on still holds there:
//! the lock is still the run's and no job of its pull request was queued
//! or started since; the job is still dead.

use super::apply::ApplyRunRecord;
use super::{JobId, Store};
use crate::gate::ledger::{Fact, NewFact};
use crate::model::{MemberId, RepoId};
use anyhow::{Context, Result};

impl Store {
    /// Lets go of `member`'s lock in `repo` held by run `run_id`, whose
    /// pull request's jobs are `queue_key`'s, and appends `fact`. `None`
    /// when the lock is no longer that run's or one of those jobs is
    /// queued or running now; else the fact and the runs of `repo` waiting
    /// for a lock, to be resumed.
    pub(crate) async fn release_member_lock(
        &self,
        (repo, member): (&RepoId, &MemberId),
        (run_id, queue_key): (i64, &str),
        fact: NewFact,
    ) -> Result<Option<(Fact, Vec<ApplyRunRecord>)>> {
        let writer = self.writer.lock().await;
        let mut tx = self.begin_write().await?;
        let released = sqlx::query(
            "DELETE FROM member_locks
             WHERE forge = $1 AND repo = $2 AND member = $3 AND run_id = $4
               AND NOT EXISTS (SELECT 1 FROM jobs
                               WHERE queue_key = $5 AND status IN ('queued', 'running'))",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(member.as_str())
        .bind(run_id)
        .bind(queue_key)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("releasing the lock of {member} in {repo}"))?
        .rows_affected();
        if released == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let fact = self.append_in(&mut tx, fact).await?;
        tx.commit()
            .await
            .with_context(|| format!("releasing the lock of {member} in {repo}"))?;
        drop(writer);
        let waiting = self.runs_waiting_for_a_lock(repo, run_id).await?;
        Ok(Some((fact, waiting)))
    }

    /// Queues dead job `id` again, to run now with its attempts counted
    /// from zero, and appends `fact`. `None` when the job is not dead (any
    /// more).
    pub(crate) async fn retry_dead_job(&self, id: JobId, fact: NewFact) -> Result<Option<Fact>> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let queued = sqlx::query(
            "UPDATE jobs SET status = 'queued', attempts = 0, lease_expiries = 0, run_after = $2,
                    lease_owner = NULL, lease_until = NULL, updated_at = $2
             WHERE id = $1 AND status = 'dead'",
        )
        .bind(id.0)
        .bind(now)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("queueing job {id} again"))?
        .rows_affected();
        if queued == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let fact = self.append_in(&mut tx, fact).await?;
        tx.commit()
            .await
            .with_context(|| format!("queueing job {id} again"))?;
        Ok(Some(fact))
    }
}
