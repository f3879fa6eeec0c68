//! Jobs handed to the forge's CI: each is recorded before its run is
//! dispatched, claimed once by the run that proves it is the one dispatched,
//! and handed back once. Each step is one guarded `UPDATE`, so two replicas
//! (or a replayed request) never claim or hand back the same job twice.
//! Tokens are kept by their SHA-256 only. While a claimed job runs, its
//! run streams its output back in numbered batches (`dispatched_output`),
//! each taken once, from the live session only, up to a bound per job.

use super::db::{to_i64, to_u64};
use super::Store;
use crate::model::{RepoId, UnixMs};
use anyhow::{anyhow, Context, Result};
use sqlx::Row;

/// How a job's run proves itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DispatchAuth {
    /// The run's OIDC token (GitHub).
    Oidc,
    /// A single-use token handed to the run (Forgejo).
    Token,
}

impl DispatchAuth {
    fn as_str(self) -> &'static str {
        match self {
            Self::Oidc => "oidc",
            Self::Token => "token",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DispatchState {
    /// Waiting for its run to claim it.
    Dispatched,
    /// Claimed by its run; waiting for what it hands back.
    Claimed,
    /// Handed back.
    Finished,
    /// Given up on by the bot (never claimed in time, its run ended without
    /// handing it back, or the job was cancelled): nothing more is taken.
    Abandoned,
}

impl DispatchState {
    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "dispatched" => Self::Dispatched,
            "claimed" => Self::Claimed,
            "finished" => Self::Finished,
            "abandoned" => Self::Abandoned,
            other => return Err(anyhow!("a dispatched job's state `{other}` is unknown")),
        })
    }
}

/// A dispatched job as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DispatchedRecord {
    pub(crate) id: String,
    pub(crate) repo: RepoId,
    /// What the runner gets, as JSON (the dispatch module's own).
    pub(crate) job: String,
    pub(crate) auth: DispatchAuth,
    /// The forge's run, once the dispatch answered.
    pub(crate) run_id: Option<u64>,
    pub(crate) run_url: Option<String>,
    /// The commit the run was started at, once the forge said.
    pub(crate) run_sha: Option<String>,
    pub(crate) state: DispatchState,
    /// What the run handed back, as JSON.
    pub(crate) finished: Option<String>,
    pub(crate) created_at: UnixMs,
    /// By then its run has stopped it: the time a run had to claim it and
    /// its timeout after that (a record older than that column: the former).
    pub(crate) ends_by: UnixMs,
    pub(crate) claimed_at: Option<UnixMs>,
}

/// What became of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimOutcome {
    Claimed,
    /// Not waiting for a claim (claimed already, or over).
    NotClaimable(DispatchState),
    /// The single-use token is not this job's.
    WrongToken,
    /// Past the time a run had to claim it.
    TooLate,
    Unknown,
}

/// Where a dispatched job stands, read without its payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DispatchProgress {
    pub(crate) state: DispatchState,
    pub(crate) claim_by: UnixMs,
    pub(crate) claimed_at: Option<UnixMs>,
}

/// What became of a hand-back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandBack {
    Recorded,
    /// Not claimed, or handed back or given up on already.
    NotTaken(DispatchState),
    /// The session is not the one the claim gave.
    WrongSession,
    Unknown,
}

/// What became of a batch of a job's streamed output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputAppend {
    Appended,
    /// A batch of this number was taken before (a post retried).
    Repeated,
    /// The job's streamed output would pass the bound it keeps.
    Full,
    /// The session is not the job's live one (it is over, or another's).
    NotTaken,
}

macro_rules! dispatched_columns {
    () => {
        "id, forge, repo, job, auth, run_id, run_url, run_sha, state, finished, created_at, \
         COALESCE(ends_by, claim_by) AS ends_by, claimed_at"
    };
}

fn record_from_row(row: &sqlx::any::AnyRow) -> Result<DispatchedRecord> {
    let forge: String = row.try_get("forge")?;
    let repo: String = row.try_get("repo")?;
    let auth: String = row.try_get("auth")?;
    let run_id: Option<i64> = row.try_get("run_id")?;
    let state: String = row.try_get("state")?;
    Ok(DispatchedRecord {
        id: row.try_get("id")?,
        repo: RepoId::new(forge.parse().map_err(anyhow::Error::msg)?, repo),
        job: row.try_get("job")?,
        auth: match auth.as_str() {
            "oidc" => DispatchAuth::Oidc,
            "token" => DispatchAuth::Token,
            other => return Err(anyhow!("a dispatched job's auth `{other}` is unknown")),
        },
        run_id: run_id.map(|id| to_u64(id, "run id")).transpose()?,
        run_url: row.try_get("run_url")?,
        run_sha: row.try_get("run_sha")?,
        state: DispatchState::parse(&state)?,
        finished: row.try_get("finished")?,
        created_at: row.try_get("created_at")?,
        ends_by: row.try_get("ends_by")?,
        claimed_at: row.try_get("claimed_at")?,
    })
}

impl Store {
    /// Records a job before its run is dispatched; `claim_hash`: the
    /// SHA-256 of its single-use token, for [`DispatchAuth::Token`]; no
    /// run claims it after `claim_within`, and its run stops it `run_for`
    /// after that at the latest.
    pub(crate) async fn add_dispatched_job(
        &self,
        id: &str,
        repo: &RepoId,
        job: &str,
        (auth, claim_hash): (DispatchAuth, Option<&str>),
        (claim_within, run_for): (std::time::Duration, std::time::Duration),
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        sqlx::query(
            "INSERT INTO dispatched_jobs (id, forge, repo, job, auth, claim_hash, state, created_at, claim_by, ends_by)
             VALUES ($1, $2, $3, $4, $5, $6, 'dispatched', $7, $8, $9)",
        )
        .bind(id)
        .bind(repo.forge.to_string())
        .bind(&repo.full_name)
        .bind(job)
        .bind(auth.as_str())
        .bind(claim_hash)
        .bind(now)
        .bind(now + claim_within)
        .bind(now + claim_within + run_for)
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording dispatched job {id}"))?;
        Ok(())
    }

    /// The run the forge started for job `id`.
    pub(crate) async fn set_dispatched_run(
        &self,
        id: &str,
        run_id: u64,
        run_url: Option<&str>,
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query("UPDATE dispatched_jobs SET run_id = $2, run_url = $3 WHERE id = $1")
            .bind(id)
            .bind(to_i64(run_id, "run id")?)
            .bind(run_url)
            .execute(&self.pool)
            .await
            .with_context(|| format!("recording the run of dispatched job {id}"))?;
        Ok(())
    }

    /// The commit job `id`'s run was started at, as the forge answers.
    pub(crate) async fn set_dispatched_run_sha(&self, id: &str, sha: &str) -> Result<()> {
        let _writer = self.writer.lock().await;
        sqlx::query("UPDATE dispatched_jobs SET run_sha = $2 WHERE id = $1")
            .bind(id)
            .bind(sha)
            .execute(&self.pool)
            .await
            .with_context(|| format!("recording the commit of dispatched job {id}'s run"))?;
        Ok(())
    }

    pub(crate) async fn dispatched_job(&self, id: &str) -> Result<Option<DispatchedRecord>> {
        sqlx::query(concat!(
            "SELECT ",
            dispatched_columns!(),
            " FROM dispatched_jobs WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading dispatched job {id}"))?
        .as_ref()
        .map(record_from_row)
        .transpose()
    }

    /// Claims job `id` for the caller, who will hand it back with the
    /// session whose SHA-256 is `session_hash`. A [`DispatchAuth::Token`]
    /// job is claimed only with its single-use token (`claim_hash`), which
    /// the claim uses up; an OIDC job's caller was verified before.
    pub(crate) async fn claim_dispatched_job(
        &self,
        id: &str,
        claim_hash: Option<&str>,
        session_hash: &str,
    ) -> Result<ClaimOutcome> {
        let _writer = self.writer.lock().await;
        let claimed = sqlx::query(
            "UPDATE dispatched_jobs
             SET state = 'claimed', claim_hash = NULL, session_hash = $3, claimed_at = $4
             WHERE id = $1 AND state = 'dispatched' AND claim_by > $4
               AND ((auth = 'oidc' AND $2 IS NULL) OR (auth = 'token' AND claim_hash = $2))",
        )
        .bind(id)
        .bind(claim_hash)
        .bind(session_hash)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("claiming dispatched job {id}"))?;
        if claimed.rows_affected() == 1 {
            return Ok(ClaimOutcome::Claimed);
        }
        Ok(match self.progress_of(id).await? {
            None => ClaimOutcome::Unknown,
            Some(progress) if progress.state != DispatchState::Dispatched => {
                ClaimOutcome::NotClaimable(progress.state)
            }
            Some(progress) if self.now() >= progress.claim_by => ClaimOutcome::TooLate,
            Some(_) => ClaimOutcome::WrongToken,
        })
    }

    /// Takes what job `id`'s run hands back, once, from the session its
    /// claim gave.
    pub(crate) async fn finish_dispatched_job(
        &self,
        id: &str,
        session_hash: &str,
        finished: &str,
    ) -> Result<HandBack> {
        let _writer = self.writer.lock().await;
        let recorded = sqlx::query(
            "UPDATE dispatched_jobs
             SET state = 'finished', finished = $3, session_hash = NULL, finished_at = $4
             WHERE id = $1 AND state = 'claimed' AND session_hash = $2",
        )
        .bind(id)
        .bind(session_hash)
        .bind(finished)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording what dispatched job {id} handed back"))?;
        if recorded.rows_affected() == 1 {
            return Ok(HandBack::Recorded);
        }
        Ok(match self.state_of(id).await? {
            None => HandBack::Unknown,
            Some(DispatchState::Claimed) => HandBack::WrongSession,
            Some(state) => HandBack::NotTaken(state),
        })
    }

    /// Whether `session_hash` is job `id`'s live session (a claimed job's):
    /// asked before a hand-back's body is read.
    pub(crate) async fn dispatched_session_is(&self, id: &str, session_hash: &str) -> Result<bool> {
        let found = sqlx::query(
            "SELECT 1 FROM dispatched_jobs WHERE id = $1 AND state = 'claimed' AND session_hash = $2",
        )
        .bind(id)
        .bind(session_hash)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading dispatched job {id}"))?;
        Ok(found.is_some())
    }

    /// Where job `id` stands, without reading what it holds.
    pub(crate) async fn progress_of(&self, id: &str) -> Result<Option<DispatchProgress>> {
        let row =
            sqlx::query("SELECT state, claim_by, claimed_at FROM dispatched_jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .with_context(|| format!("reading dispatched job {id}"))?;
        row.map(|row| -> Result<DispatchProgress> {
            Ok(DispatchProgress {
                state: DispatchState::parse(&row.try_get::<String, _>("state")?)?,
                claim_by: row.try_get("claim_by")?,
                claimed_at: row.try_get("claimed_at")?,
            })
        })
        .transpose()
    }

    /// Gives up on job `id` if no run claimed it: the state it is in
    /// afterwards (a run that claimed it first keeps it).
    pub(crate) async fn abandon_unclaimed_dispatched_job(&self, id: &str) -> Result<DispatchState> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE dispatched_jobs
             SET state = 'abandoned', claim_hash = NULL, finished_at = $2
             WHERE id = $1 AND state = 'dispatched'",
        )
        .bind(id)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("giving up on dispatched job {id}"))?;
        self.state_of(id)
            .await?
            .ok_or_else(|| anyhow!("dispatched job {id} is not recorded"))
    }

    /// Gives up on job `id` unless it was handed back: the state it is in
    /// afterwards (`Finished` when its hand-back came first).
    pub(crate) async fn abandon_dispatched_job(&self, id: &str) -> Result<DispatchState> {
        let _writer = self.writer.lock().await;
        sqlx::query(
            "UPDATE dispatched_jobs
             SET state = 'abandoned', claim_hash = NULL, session_hash = NULL, finished_at = $2
             WHERE id = $1 AND state IN ('dispatched', 'claimed')",
        )
        .bind(id)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("giving up on dispatched job {id}"))?;
        self.state_of(id)
            .await?
            .ok_or_else(|| anyhow!("dispatched job {id} is not recorded"))
    }

    /// Drops what job `id` carried, streamed and handed back once it is
    /// over: its files may hold secrets of a plan, and the engine has read
    /// them.
    /// Gives up on every job over for sure before `over_before` (its run
    /// stopped it by then) that is not given up on or still holds what it
    /// carried, handed back or streamed: those of a bot stopped while it
    /// waited. Answers how many.
    pub(crate) async fn forget_dispatched_jobs_over(&self, over_before: UnixMs) -> Result<u64> {
        let _writer = self.writer.lock().await;
        let mut tx = self.pool.begin().await?;
        let forgotten = sqlx::query(
            "UPDATE dispatched_jobs
             SET state = CASE WHEN state IN ('dispatched', 'claimed') THEN 'abandoned' ELSE state END,
                 job = '', finished = NULL
             WHERE COALESCE(ends_by, claim_by) < $1
               AND (state IN ('dispatched', 'claimed') OR job <> '' OR finished IS NOT NULL)",
        )
        .bind(over_before)
        .execute(&mut *tx)
        .await
        .context("giving up on dispatched jobs that are over")?
        .rows_affected();
        sqlx::query(
            "DELETE FROM dispatched_output WHERE job_id IN (
                 SELECT id FROM dispatched_jobs WHERE COALESCE(ends_by, claim_by) < $1)",
        )
        .bind(over_before)
        .execute(&mut *tx)
        .await
        .context("dropping what dispatched jobs that are over streamed")?;
        tx.commit().await?;
        Ok(forgotten)
    }

    pub(crate) async fn forget_dispatched_payloads(&self, id: &str) -> Result<()> {
        let _writer = self.writer.lock().await;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE dispatched_jobs SET job = '', finished = NULL
             WHERE id = $1 AND state IN ('finished', 'abandoned')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("dropping what dispatched job {id} carried"))?;
        sqlx::query(
            "DELETE FROM dispatched_output
             WHERE job_id = $1 AND EXISTS (
                 SELECT 1 FROM dispatched_jobs
                 WHERE id = $1 AND state IN ('finished', 'abandoned'))",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("dropping what dispatched job {id} streamed"))?;
        tx.commit().await?;
        Ok(())
    }

    /// Appends batch `seq` of job `id`'s streamed output, from the session
    /// whose SHA-256 is `session_hash`, unless the job would then keep more
    /// than `limit` bytes of it.
    pub(crate) async fn append_dispatched_output(
        &self,
        id: &str,
        session_hash: &str,
        seq: u64,
        text: &str,
        limit: u64,
    ) -> Result<OutputAppend> {
        let seq = to_i64(seq, "output batch number")?;
        let _writer = self.writer.lock().await;
        let appended = sqlx::query(
            "INSERT INTO dispatched_output (job_id, seq, text, bytes)
             SELECT $1, $2, $3, $4
             WHERE EXISTS (SELECT 1 FROM dispatched_jobs
                           WHERE id = $1 AND state = 'claimed' AND session_hash = $5)
               AND (SELECT COALESCE(SUM(bytes), 0) FROM dispatched_output WHERE job_id = $1)
                   + $4 <= $6
             ON CONFLICT (job_id, seq) DO NOTHING",
        )
        .bind(id)
        .bind(seq)
        .bind(text)
        .bind(to_i64(text.len() as u64, "output batch length")?)
        .bind(session_hash)
        .bind(to_i64(limit, "output bound")?)
        .execute(&self.pool)
        .await
        .with_context(|| format!("appending to the output of dispatched job {id}"))?;
        if appended.rows_affected() == 1 {
            return Ok(OutputAppend::Appended);
        }
        let repeated =
            sqlx::query("SELECT 1 FROM dispatched_output WHERE job_id = $1 AND seq = $2")
                .bind(id)
                .bind(seq)
                .fetch_optional(&self.pool)
                .await
                .with_context(|| format!("reading the output of dispatched job {id}"))?;
        Ok(if repeated.is_some() {
            OutputAppend::Repeated
        } else if self.dispatched_session_is(id, session_hash).await? {
            OutputAppend::Full
        } else {
            OutputAppend::NotTaken
        })
    }

    /// Up to `limit` batches of job `id`'s streamed output numbered after
    /// `after` (all, for `None`), in order.
    pub(crate) async fn dispatched_output_after(
        &self,
        id: &str,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<(u64, String)>> {
        let after = match after {
            Some(seq) => to_i64(seq, "output batch number")?,
            None => -1,
        };
        let rows = sqlx::query(
            "SELECT seq, text FROM dispatched_output
             WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the output of dispatched job {id}"))?;
        rows.iter()
            .map(|row| {
                Ok((
                    to_u64(row.try_get("seq")?, "output batch number")?,
                    row.try_get("text")?,
                ))
            })
            .collect()
    }

    async fn state_of(&self, id: &str) -> Result<Option<DispatchState>> {
        Ok(self.progress_of(id).await?.map(|progress| progress.state))
    }
}
