//! Drift detection's records (docs/drift.md): each checked stage's place in
//! the schedule, claimed by one replica at a time with its job enqueued in
//! the same transaction; when each repository's default branch was last
//! read for its schedule; and the forge issue of each drifted subject.

use super::apply::{run_columns, run_from_row, ApplyRunRecord};
use super::db::{to_i64, to_opt_digest, to_u64};
use super::sql::insert_job;
use super::{NewJob, Store};
use crate::forge::RepoRef;
use crate::model::{CommitSha, Digest, DriftSubject, PrNumber, RepoId, StageName, UnixMs};
use anyhow::{anyhow, Context, Result};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::time::Duration;

/// A drift issue as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DriftIssue {
    pub(crate) repo: RepoId,
    pub(crate) number: PrNumber,
    pub(crate) subject: DriftSubject,
    pub(crate) open: bool,
    /// The drift's digest and plan, while it has one (a subject that only
    /// fails to plan has neither).
    pub(crate) drift: Option<(Digest, i64)>,
    /// How many members the drift's plan holds.
    pub(crate) drifted: u32,
    /// The default branch's commit the last check planned.
    pub(crate) commit: CommitSha,
    /// Why the last check could not plan the subject, while it cannot.
    pub(crate) failing: Option<String>,
    /// When the issue was opened.
    pub(crate) since: UnixMs,
    /// When its drift last changed (a new digest, or a new failure).
    pub(crate) changed_at: UnixMs,
    pub(crate) checked_at: UnixMs,
}

impl DriftIssue {
    pub(crate) fn digest(&self) -> Option<&Digest> {
        self.drift.as_ref().map(|(digest, _)| digest)
    }
}

/// One stage's drift, for the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StageDrift {
    pub(crate) repo: RepoId,
    pub(crate) stage: String,
    /// Open issues of drift (not of failures alone).
    pub(crate) drifted: u64,
    /// When the oldest open drift was first seen.
    pub(crate) oldest: Option<UnixMs>,
    pub(crate) runs: u64,
    pub(crate) failures: u64,
}

/// The first time after `now` in `every`'s cycle that starts at `phase`
/// (ms into it): the stages of many repositories, each with its own phase,
/// are checked spread over their interval instead of in the same minute.
pub(crate) fn next_slot(now: UnixMs, every: Duration, phase: u64) -> UnixMs {
    let every = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
    let now = u64::try_from(now.millis()).unwrap_or(0);
    let phase = phase % every;
    let cycle_start = now - now % every;
    let mut at = cycle_start + phase;
    if at <= now {
        at += every;
    }
    UnixMs::from_millis(i64::try_from(at).unwrap_or(i64::MAX))
}

/// A stable phase for a repository's stage: the same on every replica and
/// after every restart.
pub(crate) fn phase_of(repo: &RepoId, stage: &str) -> u64 {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(format!("{repo}\n{stage}").as_bytes());
    u64::from_be_bytes(hash[..8].try_into().expect("eight bytes"))
}

macro_rules! issue_columns {
    () => {
        "number, subject, CAST(is_open AS INTEGER) AS is_open, digest, drifted, plan_id, \
         commit_sha, failing, since, changed_at, checked_at"
    };
}

fn issue_from_row(repo: &RepoId, row: &AnyRow) -> Result<DriftIssue> {
    let subject: String = row.try_get("subject")?;
    let digest = to_opt_digest(row.try_get("digest")?, "drift digest")?;
    let plan: Option<i64> = row.try_get("plan_id")?;
    Ok(DriftIssue {
        repo: repo.clone(),
        number: PrNumber(to_u64(row.try_get("number")?, "issue number")?),
        subject: subject
            .parse()
            .map_err(|e: String| anyhow!("stored drift subject: {e}"))?,
        open: row.try_get::<i64, _>("is_open")? == 1,
        drift: digest.zip(plan),
        drifted: u32::try_from(row.try_get::<i64, _>("drifted")?).unwrap_or(u32::MAX),
        commit: CommitSha::parse(&row.try_get::<String, _>("commit_sha")?)
            .map_err(|e| anyhow!("stored drift commit: {e}"))?,
        failing: row.try_get("failing")?,
        since: row.try_get("since")?,
        changed_at: row.try_get("changed_at")?,
        checked_at: row.try_get("checked_at")?,
    })
}

impl Store {
    /// Sets `repo`'s drift schedule to `stages` (each with its interval):
    /// a stage whose interval is unchanged keeps its next check, a new or
    /// changed one takes its phase's next slot, and a stage no longer
    /// checked leaves the schedule. Marks the repository scanned.
    pub(crate) async fn sync_drift_schedule(
        &self,
        repo: &RepoRef,
        stages: &[(StageName, Duration)],
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let (forge, name) = (repo.id.forge.as_str(), &repo.id.full_name);
        let kept: Vec<(String, i64)> = sqlx::query(
            "SELECT stage, every_ms FROM drift_schedule WHERE forge = $1 AND repo = $2",
        )
        .bind(forge)
        .bind(name)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("stage")?, row.try_get("every_ms")?)))
        .collect::<Result<_>>()?;
        for (stage, _) in &kept {
            if !stages.iter().any(|(s, _)| s.as_str() == stage) {
                sqlx::query(
                    "DELETE FROM drift_schedule WHERE forge = $1 AND repo = $2 AND stage = $3",
                )
                .bind(forge)
                .bind(name)
                .bind(stage)
                .execute(&mut *tx)
                .await?;
            }
        }
        let repo_ref = serde_json::to_string(repo)?;
        for (stage, every) in stages {
            let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
            let same = kept
                .iter()
                .any(|(s, ms)| s == stage.as_str() && *ms == every_ms);
            if same {
                sqlx::query(
                    "UPDATE drift_schedule SET repo_ref = $4
                     WHERE forge = $1 AND repo = $2 AND stage = $3",
                )
                .bind(forge)
                .bind(name)
                .bind(stage.as_str())
                .bind(&repo_ref)
                .execute(&mut *tx)
                .await?;
                continue;
            }
            let next = next_slot(now, *every, phase_of(&repo.id, stage.as_str()));
            sqlx::query(
                "INSERT INTO drift_schedule (forge, repo, stage, repo_ref, every_ms, next_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (forge, repo, stage) DO UPDATE
                 SET repo_ref = excluded.repo_ref, every_ms = excluded.every_ms,
                     next_at = excluded.next_at",
            )
            .bind(forge)
            .bind(name)
            .bind(stage.as_str())
            .bind(&repo_ref)
            .bind(every_ms)
            .bind(next)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO drift_scans (forge, repo, scanned_at) VALUES ($1, $2, $3)
             ON CONFLICT (forge, repo) DO UPDATE SET scanned_at = excluded.scanned_at",
        )
        .bind(forge)
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit()
            .await
            .with_context(|| format!("saving the drift schedule of {}", repo.id))
    }

    /// Claims the repositories whose schedule was last read before
    /// `now - every`, each with `job(repo)` enqueued in the transaction
    /// that claims it; answers how many. A repository met for the first
    /// time is read `every` later (its first webhook's jobs come first).
    pub(crate) async fn claim_drift_scans(
        &self,
        every: Duration,
        job: impl Fn(&RepoRef) -> NewJob,
    ) -> Result<usize> {
        let now = self.now();
        let before = UnixMs::from_millis(
            now.millis()
                .saturating_sub(i64::try_from(every.as_millis()).unwrap_or(i64::MAX)),
        );
        let due = sqlx::query(
            "SELECT r.forge, r.repo, r.repo_ref, s.scanned_at FROM repositories r
             LEFT JOIN drift_scans s ON s.forge = r.forge AND s.repo = r.repo
             WHERE s.scanned_at IS NULL OR s.scanned_at < $1",
        )
        .bind(before)
        .fetch_all(&self.pool)
        .await
        .context("reading the repositories whose drift schedule is due a reading")?;
        let mut claimed = 0;
        for row in due {
            let repo: RepoRef = serde_json::from_str(&row.try_get::<String, _>("repo_ref")?)
                .context("a stored repository reference does not read")?;
            let seen: Option<UnixMs> = row.try_get("scanned_at")?;
            let _writer = self.writer.lock().await;
            let mut tx = self.begin_write().await?;
            let won = match seen {
                None => sqlx::query(
                    "INSERT INTO drift_scans (forge, repo, scanned_at) VALUES ($1, $2, $3)
                     ON CONFLICT (forge, repo) DO NOTHING",
                )
                .bind(repo.id.forge.as_str())
                .bind(&repo.id.full_name)
                .bind(now),
                Some(seen) => sqlx::query(
                    "UPDATE drift_scans SET scanned_at = $3
                     WHERE forge = $1 AND repo = $2 AND scanned_at = $4",
                )
                .bind(repo.id.forge.as_str())
                .bind(&repo.id.full_name)
                .bind(now)
                .bind(seen),
            }
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if won && seen.is_some() {
                insert_job(&mut tx, &job(&repo), None, now, now).await?;
                claimed += 1;
            }
            tx.commit().await?;
        }
        Ok(claimed)
    }

    /// Claims the stages whose check is due, each moved on to its next
    /// slot with `job(repo, stage)` enqueued in the same transaction (a
    /// second replica claims nothing twice); answers how many.
    pub(crate) async fn claim_due_drift_checks(
        &self,
        job: impl Fn(&RepoRef, &StageName) -> NewJob,
    ) -> Result<usize> {
        let now = self.now();
        let due = sqlx::query(
            "SELECT forge, repo, stage, repo_ref, every_ms, next_at FROM drift_schedule
             WHERE next_at <= $1 ORDER BY next_at",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .context("reading the drift checks that are due")?;
        let mut claimed = 0;
        for row in due {
            let repo: RepoRef = serde_json::from_str(&row.try_get::<String, _>("repo_ref")?)
                .context("a stored repository reference does not read")?;
            let stage = StageName::new(row.try_get::<String, _>("stage")?);
            let every = Duration::from_millis(to_u64(row.try_get("every_ms")?, "interval")?);
            let was: UnixMs = row.try_get("next_at")?;
            let next = next_slot(now, every, phase_of(&repo.id, stage.as_str()));
            let _writer = self.writer.lock().await;
            let mut tx = self.begin_write().await?;
            let won = sqlx::query(
                "UPDATE drift_schedule SET next_at = $4
                 WHERE forge = $1 AND repo = $2 AND stage = $3 AND next_at = $5",
            )
            .bind(repo.id.forge.as_str())
            .bind(&repo.id.full_name)
            .bind(stage.as_str())
            .bind(next)
            .bind(was)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if won {
                insert_job(&mut tx, &job(&repo, &stage), None, now, now).await?;
                tx.commit().await?;
                claimed += 1;
            } else {
                tx.rollback().await?;
            }
        }
        Ok(claimed)
    }

    /// Checks `stage` of `repo` at the next sweep (a pull request applied
    /// one of its members: whether that brought the drift back is known
    /// only by planning).
    pub(crate) async fn drift_check_soon(&self, repo: &RepoId, stage: &str) -> Result<()> {
        self.drift_check_at(repo, stage, self.now()).await
    }

    /// Checks `stage` of `repo` at `at` unless it is due sooner: a check
    /// that had to wait asks for its next one here, so a stage never has
    /// more than its one place in the schedule, however long it waits.
    pub(crate) async fn drift_check_at(
        &self,
        repo: &RepoId,
        stage: &str,
        at: UnixMs,
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE drift_schedule SET next_at = $4
             WHERE forge = $1 AND repo = $2 AND stage = $3 AND next_at > $4",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(stage)
        .bind(at)
        .execute(&self.pool)
        .await
        .with_context(|| format!("asking for a drift check of {stage} in {repo}"))?;
        Ok(())
    }

    /// Counts one check of `stage`, failed or not.
    pub(crate) async fn count_drift_check(
        &self,
        repo: &RepoId,
        stage: &str,
        failed: bool,
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE drift_schedule SET runs = runs + 1, failures = failures + $4, last_run_at = $5
             WHERE forge = $1 AND repo = $2 AND stage = $3",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(stage)
        .bind(i64::from(failed))
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("counting a drift check of {stage} in {repo}"))?;
        Ok(())
    }

    /// Every open drift issue of `repo`, whatever its stage.
    pub(crate) async fn open_drift_issues_of(&self, repo: &RepoId) -> Result<Vec<DriftIssue>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            issue_columns!(),
            " FROM drift_issues WHERE forge = $1 AND repo = $2 AND is_open = 1 ORDER BY number"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the open drift issues of {repo}"))?;
        rows.iter().map(|row| issue_from_row(repo, row)).collect()
    }

    /// The open drift issues of `stage` in `repo`.
    pub(crate) async fn open_drift_issues(
        &self,
        repo: &RepoId,
        stage: &str,
    ) -> Result<Vec<DriftIssue>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            issue_columns!(),
            " FROM drift_issues
             WHERE forge = $1 AND repo = $2 AND stage = $3 AND is_open = 1 ORDER BY number"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(stage)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the open drift issues of {stage} in {repo}"))?;
        rows.iter().map(|row| issue_from_row(repo, row)).collect()
    }

    /// The repositories with an open drift issue.
    pub(crate) async fn repos_with_open_drift_issues(&self) -> Result<Vec<RepoId>> {
        sqlx::query("SELECT DISTINCT forge, repo FROM drift_issues WHERE is_open = 1")
            .fetch_all(&self.pool)
            .await
            .context("reading the repositories with open drift issues")?
            .iter()
            .map(|row| {
                let forge: String = row.try_get("forge")?;
                Ok(RepoId::new(
                    forge.parse().map_err(|e| anyhow!("stored forge: {e}"))?,
                    row.try_get::<String, _>("repo")?,
                ))
            })
            .collect()
    }

    /// The drift issue numbered `number`, if `number` is one.
    pub(crate) async fn drift_issue(
        &self,
        repo: &RepoId,
        number: PrNumber,
    ) -> Result<Option<DriftIssue>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            issue_columns!(),
            " FROM drift_issues WHERE forge = $1 AND repo = $2 AND number = $3"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(number.0, "issue number")?)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading drift issue {number} of {repo}"))?;
        row.map(|row| issue_from_row(repo, &row)).transpose()
    }

    /// Writes a drift issue as it stands.
    pub(crate) async fn save_drift_issue(&self, issue: &DriftIssue) -> Result<()> {
        let _writer = self.writer.lock().await;
        let (digest, plan) = match &issue.drift {
            Some((digest, plan)) => (Some(digest.as_str()), Some(*plan)),
            None => (None, None),
        };
        sqlx::query(
            "INSERT INTO drift_issues (forge, repo, number, subject, stage, is_open, digest,
                                       plan_id, commit_sha, failing, since, changed_at, checked_at,
                                       drifted)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             ON CONFLICT (forge, repo, number) DO UPDATE
             SET is_open = excluded.is_open, digest = excluded.digest, drifted = excluded.drifted,
                 plan_id = excluded.plan_id, commit_sha = excluded.commit_sha,
                 failing = excluded.failing, changed_at = excluded.changed_at,
                 checked_at = excluded.checked_at",
        )
        .bind(issue.repo.forge.as_str())
        .bind(&issue.repo.full_name)
        .bind(to_i64(issue.number.0, "issue number")?)
        .bind(issue.subject.to_string())
        .bind(issue.subject.stage())
        .bind(i64::from(issue.open))
        .bind(digest)
        .bind(plan)
        .bind(issue.commit.as_str())
        .bind(issue.failing.as_deref())
        .bind(issue.since)
        .bind(issue.changed_at)
        .bind(issue.checked_at)
        .bind(i64::from(issue.drifted))
        .execute(&self.pool)
        .await
        .with_context(|| format!("saving drift issue {} of {}", issue.number, issue.repo))?;
        Ok(())
    }

    /// The members of `repo` an apply run applied at or after `since`,
    /// each with the run's pull request (or drift issue).
    pub(crate) async fn applied_since(
        &self,
        repo: &RepoId,
        since: UnixMs,
    ) -> Result<Vec<(String, PrNumber)>> {
        sqlx::query(
            "SELECT d.member, r.number FROM deployed_outputs d JOIN apply_runs r ON r.id = d.run_id
             WHERE d.forge = $1 AND d.repo = $2 AND d.applied_at >= $3",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(since)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading what was applied in {repo} lately"))?
        .iter()
        .map(|row| {
            Ok((
                row.try_get("member")?,
                PrNumber(to_u64(row.try_get("number")?, "pull request number")?),
            ))
        })
        .collect()
    }

    /// Whether a merge into a repository (whose pull requests' queue keys
    /// start with `prefix`) is yet to start its run: until it has, the
    /// default branch's head says what is not applied yet.
    pub(crate) async fn merge_in_hand(&self, repo: &RepoId, prefix: &str) -> Result<bool> {
        let (count,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM jobs j
             WHERE j.status IN ('queued', 'running') AND j.kind = 'merged'
               AND j.queue_key LIKE $1
               AND NOT EXISTS (SELECT 1 FROM apply_runs r
                               WHERE r.forge = $3 AND r.repo = $4
                                 AND j.queue_key = $2 || CAST(r.number AS TEXT))",
        )
        .bind(format!("{prefix}%"))
        .bind(prefix)
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .fetch_one(&self.pool)
        .await
        .context("looking for merges about to start their runs")?;
        Ok(count > 0)
    }

    /// `repo`'s apply runs that may still apply something: running,
    /// waiting, or failed (a `/retry` goes on).
    pub(crate) async fn runs_in_hand(&self, repo: &RepoId) -> Result<Vec<ApplyRunRecord>> {
        sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM apply_runs WHERE forge = $1 AND repo = $2
              AND status IN ('running', 'waiting', 'failed') ORDER BY id"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the apply runs of {repo} in hand"))?
        .iter()
        .map(run_from_row)
        .collect()
    }

    /// Every checked stage's drift and checks, for the metrics.
    pub(crate) async fn drift_by_stage(&self) -> Result<Vec<StageDrift>> {
        let rows = sqlx::query(
            "SELECT s.forge, s.repo, s.stage, s.runs, s.failures,
                    (SELECT CAST(COALESCE(SUM(i.drifted), 0) AS BIGINT) FROM drift_issues i
                     WHERE i.forge = s.forge AND i.repo = s.repo AND i.stage = s.stage
                       AND i.is_open = 1 AND i.digest IS NOT NULL) AS drifted,
                    (SELECT MIN(i.since) FROM drift_issues i
                     WHERE i.forge = s.forge AND i.repo = s.repo AND i.stage = s.stage
                       AND i.is_open = 1 AND i.digest IS NOT NULL) AS oldest
             FROM drift_schedule s ORDER BY s.forge, s.repo, s.stage",
        )
        .fetch_all(&self.pool)
        .await
        .context("reading the drift of every checked stage")?;
        rows.iter()
            .map(|row| {
                let forge: String = row.try_get("forge")?;
                let name: String = row.try_get("repo")?;
                Ok(StageDrift {
                    repo: RepoId::new(
                        forge.parse().map_err(|e| anyhow!("stored forge: {e}"))?,
                        name,
                    ),
                    stage: row.try_get("stage")?,
                    drifted: to_u64(row.try_get("drifted")?, "drifted members")?,
                    oldest: row.try_get("oldest")?,
                    runs: to_u64(row.try_get("runs")?, "drift checks")?,
                    failures: to_u64(row.try_get("failures")?, "failed drift checks")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_the_next_time_in_the_cycle_at_its_phase() {
        let hour = Duration::from_secs(3600);
        let at = |ms: i64| UnixMs::from_millis(ms);
        // 10:00 in the cycle, phase 15 minutes: 10:15.
        assert_eq!(next_slot(at(36_000_000), hour, 900_000), at(36_900_000));
        // Just past the phase: the next cycle's.
        assert_eq!(next_slot(at(36_900_000), hour, 900_000), at(40_500_000));
        // A phase larger than the interval wraps.
        assert_eq!(
            next_slot(at(36_000_000), hour, 3_600_000 + 900_000),
            at(36_900_000)
        );
    }

    #[test]
    fn a_thousand_stages_are_spread_over_the_interval() {
        let every = Duration::from_secs(6 * 3600);
        let now = UnixMs::from_millis(1_764_460_800_000);
        let mut per_minute = std::collections::HashMap::<i64, u32>::new();
        for i in 0..1000 {
            let repo = RepoId::new(crate::model::ForgeKind::GitHub, format!("acme/infra-{i}"));
            let at = next_slot(now, every, phase_of(&repo, "prod"));
            assert!(at > now && at.millis() <= now.millis() + 6 * 3_600_000);
            *per_minute.entry(at.millis() / 60_000).or_default() += 1;
        }
        // 360 minutes for 1000 stages: about 3 a minute, never a crowd.
        let most = per_minute.values().max().copied().unwrap_or(0);
        assert!(most <= 12, "{most} stages in one minute");
    }
}
