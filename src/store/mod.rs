//! The durable store: webhook deliveries (deduplicated), the job queue with
//! leases and retries, what the bot knows of each pull request, the plans it
//! made, the gate ledger's facts and the apply runs. Everything that must
//! survive a crash lives here, in SQLite or PostgreSQL behind one API.

mod apply;
mod clock;
mod console;
mod db;
mod dispatched;
mod drift;
mod intake;
mod intake_file;
mod ledger;
mod metrics;
mod operate;
mod pages;
mod pr_head;
mod reconcile;
mod redeliveries;
mod sql;
mod tokens;

pub(crate) use apply::{ApplyRunRecord, MemberLock, NewApplyRun};
#[cfg(test)]
pub(crate) use clock::ManualClock;
#[cfg(feature = "test-clock")]
pub(crate) use clock::ShiftedClock;
pub(crate) use clock::{Clock, SystemClock};
pub(crate) use console::{CommandRow, Cursor};
pub use db::Backend;
pub(crate) use dispatched::{
    ClaimOutcome, DispatchAuth, DispatchState, DispatchedRecord, HandBack, OutputAppend,
};
pub(crate) use drift::{DriftIssue, StageDrift};
pub(crate) use metrics::StoreFigures;
pub(crate) use pages::{PullRow, PullState};
pub(crate) use reconcile::Still;
pub use sql::{backend_of, redact_url, sqlite_file, Store};
pub use tokens::ApiToken;

use crate::forge::ReviewState;
use crate::model::{CommitSha, Digest, ForgeKind, JobKind, PrNumber, RepoId, UnixMs, User};
use crate::plan::changeset::ChangeSet;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Errors a caller may want to branch on; everything else is `anyhow`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum StoreError {
    #[error(
        "database schema version {found} is newer than this wavegate (knows {known}): upgrade wavegate"
    )]
    SchemaTooNew { found: i64, known: i64 },
    /// The job is not running under this worker's lease: it finished, or its
    /// lease expired and another worker took it over.
    #[error("job {job} is not running under a lease held by `{worker}`")]
    LeaseNotHeld { job: JobId, worker: String },
    #[error("a job needs max_attempts of at least 1")]
    NoAttemptsAllowed,
}

/// A webhook delivery as received, before it is turned into work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    pub forge: ForgeKind,
    /// The hook or installation the delivery came through: the same delivery
    /// id reaches every hook subscribed to the event.
    pub target: String,
    pub delivery_id: String,
    pub event_type: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    Recorded {
        delivery: i64,
        job: Option<JobId>,
    },
    /// Seen before (a redelivery): nothing was written.
    Duplicate,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub(crate) kind: JobKind,
    /// Jobs with the same key (e.g. one pull request) run one at a time, in order.
    pub(crate) queue_key: String,
    pub(crate) payload: serde_json::Value,
    pub max_attempts: u32,
    /// What the job takes up once only, whichever path finds it first (the
    /// webhook or the reconciliation sweep): `comment:<id>` or
    /// `review:<id>:<state>`. The job is enqueued only with its row in
    /// `commands_seen`, in one transaction.
    pub(crate) once: Option<Once>,
}

/// A comment or review state whose commands run once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Once {
    pub(crate) repo: RepoId,
    pub(crate) pr: PrNumber,
    pub(crate) source: OnceSource,
}

/// What a pull request takes up once only, as `commands_seen` keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum OnceSource {
    /// `comment:<id>`: a comment's commands.
    Comment(u64),
    /// `review:<id>:<state>`: a review in a state (one approved and later
    /// dismissed is taken up once in each).
    Review(u64, ReviewState),
    /// `not-applied:<merge>`: the one reply of a merge that starts no run.
    NotApplied(CommitSha),
    /// `notify:<key>`: one notification (`Notice::once_key`).
    Notify(String),
}

impl OnceSource {
    fn review_state(state: ReviewState) -> &'static str {
        match state {
            ReviewState::Approved => "approved",
            ReviewState::ChangesRequested => "changes-requested",
            ReviewState::Commented => "commented",
            ReviewState::Dismissed => "dismissed",
        }
    }
}

impl fmt::Display for OnceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnceSource::Comment(id) => write!(f, "comment:{id}"),
            OnceSource::Review(id, state) => {
                write!(f, "review:{id}:{}", OnceSource::review_state(*state))
            }
            OnceSource::NotApplied(merge) => write!(f, "not-applied:{merge}"),
            OnceSource::Notify(key) => write!(f, "notify:{key}"),
        }
    }
}

impl std::str::FromStr for OnceSource {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let unknown = || format!("`{text}` is not a key of something taken up once");
        let (kind, rest) = text.split_once(':').ok_or_else(unknown)?;
        let id = |digits: &str| digits.parse::<u64>().map_err(|_| unknown());
        Ok(match kind {
            "comment" => OnceSource::Comment(id(rest)?),
            "review" => {
                let (number, state) = rest.split_once(':').ok_or_else(unknown)?;
                let state = [
                    ReviewState::Approved,
                    ReviewState::ChangesRequested,
                    ReviewState::Commented,
                    ReviewState::Dismissed,
                ]
                .into_iter()
                .find(|s| OnceSource::review_state(*s) == state)
                .ok_or_else(unknown)?;
                OnceSource::Review(id(number)?, state)
            }
            "not-applied" => OnceSource::NotApplied(CommitSha::parse(rest).map_err(|_| unknown())?),
            "notify" if !rest.is_empty() => OnceSource::Notify(rest.to_owned()),
            _ => return Err(unknown()),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Skipped,
    /// Gave up after max_attempts; `last_error` says why.
    Dead,
}

impl JobStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Skipped => "skipped",
            JobStatus::Dead => "dead",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Skipped,
            JobStatus::Dead,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub(crate) id: JobId,
    pub kind: JobKind,
    pub(crate) queue_key: String,
    pub(crate) payload: serde_json::Value,
    pub status: JobStatus,
    pub attempts: u32,
    pub(crate) max_attempts: u32,
    pub(crate) run_after: UnixMs,
    /// The worker running it, or the last one that did.
    pub lease_owner: Option<String>,
    pub(crate) lease_until: Option<UnixMs>,
    pub last_error: Option<String>,
    /// Why a job was skipped.
    pub outcome: Option<String>,
    pub(crate) created_at: UnixMs,
    pub(crate) updated_at: UnixMs,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobOutcome {
    Done,
    /// Nothing to do, with the reason (e.g. "superseded by <sha>").
    Skipped(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailOutcome {
    /// Queued again, runnable from `at` (unix ms).
    Retry {
        at: UnixMs,
    },
    Dead,
}

/// A pull request's head as the latest event describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrHead {
    pub repo: RepoId,
    pub pr: PrNumber,
    pub head_sha: CommitSha,
    pub base_ref: String,
    pub open: bool,
    /// Who pushed `head_sha`, when a push event said so; `None` keeps what
    /// is known of it.
    pub pusher: Option<User>,
}

/// Who pushed a head of a pull request, as its push event said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Pusher {
    pub(crate) head_sha: CommitSha,
    pub(crate) id: u64,
    pub(crate) login: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrRecord {
    pub(crate) repo: RepoId,
    pub(crate) pr: PrNumber,
    pub head_sha: CommitSha,
    pub(crate) base_ref: String,
    pub open: bool,
    pub(crate) report_comment_id: Option<u64>,
    pub(crate) check_id: Option<u64>,
    /// The head the posted report describes (may lag `head_sha` while re-planning).
    pub report_head: Option<CommitSha>,
    pub(crate) report_digest: Option<Digest>,
    pub report_status: Option<ReportStatus>,
    /// Who pushed the newest head a push event named (it may be an older
    /// head than `head_sha` when a later one came another way).
    pub(crate) pusher: Option<Pusher>,
}

impl PrRecord {
    /// Who pushed `head`, when wavegate heard of its push.
    pub(crate) fn pusher_of(&self, head: &CommitSha) -> Option<&str> {
        self.pusher
            .as_ref()
            .filter(|p| &p.head_sha == head)
            .map(|p| p.login.as_str())
    }
}

/// Where the report for a head was posted and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrReport {
    pub head_sha: CommitSha,
    pub digest: Option<Digest>,
    pub comment_id: Option<u64>,
    pub check_id: Option<u64>,
    pub status: Option<ReportStatus>,
}

/// What the report on a pull request's head came to, as the store keeps
/// it: what a later job decides by (a refused report has no plan to judge
/// approvals against; a failed one keeps its check failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportStatus {
    /// Nothing to plan (at most changed files no component claims).
    Empty,
    /// Not planned: the repository's config, a fork, or the sandbox said no.
    Refused,
    /// A member failed to plan.
    Failed,
    /// Planned, and enough approvals of its digest stand.
    Approved,
    /// Planned, and waiting for approvals of its digest.
    AwaitingApproval,
}

impl ReportStatus {
    /// As the store writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Refused => "refused",
            Self::Failed => "failed",
            Self::Approved => "approved",
            Self::AwaitingApproval => "awaiting-approval",
        }
    }

    const ALL: [Self; 5] = [
        Self::Empty,
        Self::Refused,
        Self::Failed,
        Self::Approved,
        Self::AwaitingApproval,
    ];
}

impl std::str::FromStr for ReportStatus {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| format!("`{text}` is not a report status"))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NewPlan {
    pub(crate) repo: RepoId,
    pub(crate) pr: PrNumber,
    pub(crate) head_sha: CommitSha,
    pub(crate) base_sha: CommitSha,
    pub(crate) digest: Option<Digest>,
    pub(crate) change_set: ChangeSet,
    /// The report as posted, without its approvals section.
    pub(crate) report: String,
}

impl NewPlan {
    /// The record this plan is once saved, for judging its gate before it
    /// is (its time is when it was posted, so it is saved after).
    pub(crate) fn as_posted(&self) -> anyhow::Result<PlanRecord> {
        Ok(PlanRecord {
            id: 0,
            repo: self.repo.clone(),
            pr: self.pr,
            head_sha: self.head_sha.clone(),
            base_sha: self.base_sha.clone(),
            digest: self.digest.clone(),
            change_set: serde_json::to_value(&self.change_set)?,
            created_at: UnixMs::EPOCH,
            report: self.report.clone(),
        })
    }
}

/// A plan as the store holds it. Its change set is read only through
/// [`PlanRecord::change_set`], which verifies it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlanRecord {
    pub(crate) id: i64,
    pub(crate) repo: RepoId,
    pub(crate) pr: PrNumber,
    pub(crate) head_sha: CommitSha,
    pub(crate) base_sha: CommitSha,
    pub(crate) digest: Option<Digest>,
    change_set: serde_json::Value,
    pub(crate) created_at: UnixMs,
    pub(crate) report: String,
}

/// A plan whose change set, as the store holds it, does not read or does
/// not verify: it was changed since it was planned, or written by a
/// wavegate that spoke another form. Nothing it holds may be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan {plan}'s change set cannot be trusted: {why}")]
pub(crate) struct Untrusted {
    plan: i64,
    why: String,
}

impl PlanRecord {
    /// The plan's change set, verified against its digest (and the digest
    /// the plan was saved with); an error, never a value, when it does not.
    pub(crate) fn change_set(&self) -> Result<ChangeSet, Untrusted> {
        let untrusted = |why: String| Untrusted { plan: self.id, why };
        let set = serde_json::from_value::<ChangeSet>(self.change_set.clone())
            .map_err(|e| untrusted(format!("it does not read as a change set: {e}")))?;
        set.verify().map_err(|e| untrusted(e.to_string()))?;
        match &self.digest {
            Some(digest) if *digest != set.digest => Err(untrusted(format!(
                "it digests to {}, but the plan was saved as {digest}",
                set.digest
            ))),
            _ => Ok(set),
        }
    }
}

const FIRST_RETRY: Duration = Duration::from_secs(5);
const LONGEST_RETRY: Duration = Duration::from_secs(10 * 60);

/// How long a job waits before its next try after `attempts` failed ones:
/// 5 s, doubling each time, never more than 10 minutes.
pub(crate) fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(31);
    FIRST_RETRY
        .checked_mul(1 << doublings)
        .map_or(LONGEST_RETRY, |wait| wait.min(LONGEST_RETRY))
}

#[cfg(test)]
mod test_db;
#[cfg(test)]
mod tests;
