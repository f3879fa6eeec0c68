//! The job loop: claims a job with a lease, runs it, and records the outcome.
//! This is the one place that ties the forge, the store and the domain
//! together; the webhook handler only records and enqueues.
//!
//! A repository-side problem (a broken config, a refused fork, a failed plan)
//! becomes a PR reply and a failed check, and the job is done. An error on
//! our side (the forge, the network, the disk) fails the attempt: the job is
//! retried with backoff and dead-lettered with its error after
//! [`task::MAX_ATTEMPTS`].

mod ctx;
pub mod drift_clock;
mod handlers;

use ctx::JobCtx;
use handlers::CommentIn;
pub mod reconcile;
pub(crate) mod redeliver;

/// Characters of the report kept for the approvals section.
use crate::config::BaseRules;
use crate::forge::registry::Forges;
use crate::forge::types::{CheckReport, CheckState};
use crate::git::Workspace;
use crate::jobs::Task;
use crate::model::{CommitSha, PrNumber, RepoId};
use crate::plan::runner::Cancel;
use crate::report::reply;
use crate::sandbox::Sandbox;
use crate::store::{FailOutcome, Job, JobOutcome, Store};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tracing::Instrument as _;

/// How a worker behaves; the defaults suit production.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How long a claim lasts without renewal; a dead process's jobs are
    /// claimed again after this.
    pub lease: Duration,
    /// How often to look for work when nothing wakes the worker.
    pub poll: Duration,
    /// Plans running at once within a wave.
    pub plan_concurrency: usize,
    /// How soon a member whose apply answered `held` is tried again (then
    /// twice as late each time it is still held, at most 15 minutes).
    pub held_retry: Duration,
    /// See `Settings::heartbeat`.
    pub heartbeat: Option<Duration>,
    /// The `[notify]` targets this server defines (`WAVEGATE_NOTIFY_*`).
    pub notify: crate::config::settings::NotifyTargets,
    /// Where this server serves its docs (`WAVEGATE_PUBLIC_URL` + `/docs`),
    /// for the reports' links; none when it is not reached from outside.
    pub docs_url: Option<String>,
    /// Where this server shows its pages (`WAVEGATE_PUBLIC_URL`, when
    /// `WAVEGATE_PUBLIC_PAGES=on`): each check links its pull request's page.
    pub pages_url: Option<String>,
    /// Where the forge's CI runs reach the bot (`WAVEGATE_PUBLIC_URL`), for
    /// the jobs of profiles with `executor = "actions"`.
    pub jobs_url: Option<String>,
    /// The repositories' run keys, which Forgejo runs prove their claims
    /// with (derived from the ledger key); none: no job is dispatched on
    /// Forgejo.
    pub run_keys: Option<Arc<crate::dispatch::run_key::RunKeys>>,
    /// The operator's central configuration (`WAVEGATE_REPOS_CONFIG`).
    pub operator: Arc<crate::config::operator::OperatorConfig>,
    /// The shortest drift interval (`WAVEGATE_DRIFT_MIN_INTERVAL`); `None`:
    /// no drift checks.
    pub drift_floor: Option<Duration>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(300),
            poll: Duration::from_secs(2),
            plan_concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            held_retry: crate::apply::HELD_RETRY,
            heartbeat: Some(crate::config::DEFAULT_HEARTBEAT),
            notify: Default::default(),
            docs_url: None,
            pages_url: None,
            jobs_url: None,
            run_keys: None,
            operator: Default::default(),
            drift_floor: Some(Duration::from_secs(3600)),
        }
    }
}

/// Everything a worker needs; cheap to clone, one per worker task.
#[derive(Clone)]
pub struct Worker {
    pub id: String,
    pub store: Store,
    pub forges: Arc<Forges>,
    pub workspace: Workspace,
    /// Notified by the intake when a job was enqueued.
    pub wake: Arc<Notify>,
    pub options: WorkerOptions,
    /// Where every plan, apply and outputs command runs.
    pub sandbox: Arc<Sandbox>,
    /// Stops the commands of the job in hand when it is given up.
    pub cancel: Cancel,
    /// The base branch's rules, read once per base commit.
    pub base_rules: BaseRulesCache,
    /// The commands running on this server, shown live on the pages.
    pub console: crate::plan::live::Hub,
}

/// The base branch's rules by repository and commit: a commit's config
/// never changes, so each is read and parsed once, whichever job asks.
#[derive(Clone, Default)]
pub struct BaseRulesCache(Arc<std::sync::Mutex<HashMap<BaseAt, Arc<BaseRules>>>>);

/// A repository's base branch at one commit.
type BaseAt = (RepoId, CommitSha);

impl BaseRulesCache {
    /// How many bases are kept; past it the cache starts over.
    const KEPT: usize = 256;
}

/// The longest a worker waits before asking a failing store again.
const MOST_CLAIM_BACKOFF: Duration = Duration::from_secs(30);

/// How long a worker waits before claiming again after `failures` failed
/// claims in a row: the poll interval, doubling with each failure up to
/// [`MOST_CLAIM_BACKOFF`], so an unreachable database is not hammered (nor
/// the log filled) by every worker of every replica.
fn claim_backoff(failures: u32, poll: Duration) -> Duration {
    if failures == 0 {
        return poll;
    }
    poll.saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MOST_CLAIM_BACKOFF)
        .max(poll)
}

impl Worker {
    /// Runs jobs until `shutdown` turns true; the job in hand is finished first.
    pub(crate) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        tracing::info!(worker = %self.id, "worker started");
        let mut failures = 0u32;
        // After a failed claim or outcome write the store may say this
        // worker holds a job it does not run; it gives such jobs back
        // before claiming again.
        let mut may_hold = false;
        loop {
            if *shutdown.borrow() {
                break;
            }
            if may_hold {
                may_hold = !self.give_back_held().await;
            }
            match self.run_next().await {
                Ok(true) => {
                    failures = 0;
                    continue;
                }
                Ok(false) => failures = 0,
                Err(error) => {
                    failures = failures.saturating_add(1);
                    may_hold = true;
                    tracing::error!(
                        worker = %self.id,
                        "claiming a job or writing how it ended failed ({failures} in a row; next try in {}s): {error:#}",
                        claim_backoff(failures, self.options.poll).as_secs_f32()
                    );
                }
            }
            // A store that fails is not asked again at once; a wake-up from
            // a new delivery still tries now.
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(claim_backoff(failures, self.options.poll)) => {}
                _ = shutdown.changed() => {}
            }
        }
        tracing::info!(worker = %self.id, "worker stopped");
    }

    /// Queues again the jobs the store says this worker holds, which it
    /// does not run: a claim that committed though its answer was lost, or
    /// an attempt whose outcome could not be written. Without this they
    /// would wait out their lease (five minutes by default), and every
    /// later job of their pull request with them. True once the store
    /// answered.
    async fn give_back_held(&self) -> bool {
        match self.store.release_held(&self.id).await {
            Ok(released) => {
                for job in released {
                    tracing::warn!(worker = %self.id, %job,
                        "job {job} was held by this worker, which does not run it (the store lost the answer to its claim or could not take how it ended): queued to run again now");
                }
                true
            }
            Err(error) => {
                tracing::warn!(worker = %self.id, "{error:#}");
                false
            }
        }
    }

    /// Claims and runs one job; false when there was none.
    pub async fn run_next(&self) -> Result<bool> {
        let Some(job) = self.store.claim(&self.id, self.options.lease).await? else {
            return Ok(false);
        };
        let started = std::time::Instant::now();
        let span = self.job_span(&job).await;
        let outcome = self.run_claimed(job.clone()).instrument(span).await;
        let outcome_label = match &outcome {
            Ok(label) => label,
            Err(_) => "failed",
        };
        crate::metrics::global()
            .job_duration
            .get_or_create(&crate::metrics::JobLabels {
                kind: job.kind.to_string(),
                outcome: outcome_label.to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
        outcome.map(|_| true)
    }

    /// The span every line a job logs carries: the job, and the repository,
    /// pull request and delivery it is for.
    async fn job_span(&self, job: &Job) -> tracing::Span {
        let span = tracing::info_span!(
            "job",
            id = %job.id,
            kind = %job.kind,
            key = %job.queue_key,
            attempt = job.attempts,
            repo = tracing::field::Empty,
            pr = tracing::field::Empty,
            delivery = tracing::field::Empty,
        );
        if let Ok(task) = serde_json::from_value::<Task>(job.payload.clone()) {
            span.record("repo", tracing::field::display(&task.repo().id));
            span.record("pr", task.pr_number().0);
        }
        match self.store.job_delivery(job.id).await {
            Ok(Some(delivery)) => {
                span.record("delivery", delivery.as_str());
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(job = %job.id, "{error:#}"),
        }
        span
    }

    /// Runs a claimed job and records how it ended; answers the outcome it
    /// is counted under (done, skipped, failed, dead or abandoned).
    async fn run_claimed(&self, job: Job) -> Result<&'static str> {
        tracing::info!("job claimed");
        // The job runs in its own task: a panic becomes a failed attempt, and
        // a lost lease (another worker took the job over) abandons it.
        let (lost_tx, lost) = tokio::sync::oneshot::channel();
        let _keep_alive = AbortOnDrop(self.keep_lease(&job, lost_tx));
        let (canceller, cancel) = Cancel::new();
        let running = {
            let (mut worker, job) = (self.clone(), job.clone());
            worker.cancel = cancel;
            let execution = async move { worker.execute(&job).await };
            AbortOnDrop(tokio::spawn(execution.in_current_span()))
        };
        let result = tokio::select! {
            joined = running.join() => match joined {
                Ok(result) => result,
                Err(panic) => Err(anyhow::anyhow!("the job panicked: {panic}")),
            },
            _ = lost => {
                // Its commands stop now, wherever they run (a plan runs on a
                // thread of its own that aborting this task cannot reach).
                canceller.cancel();
                tracing::warn!(job = %job.id, "lease lost to another worker; this attempt is abandoned and its commands stopped");
                return Ok("abandoned");
            }
        };

        match result {
            Ok(outcome) => {
                tracing::info!(?outcome, "job finished");
                let label = match outcome {
                    JobOutcome::Done => "done",
                    JobOutcome::Skipped(_) => "skipped",
                };
                self.store
                    .complete(job.id, &self.id, outcome)
                    .await
                    .with_context(|| format!("writing how job {} ended", job.id))?;
                Ok(label)
            }
            Err(error) => {
                let text = format!("{error:#}");
                tracing::warn!(error = ?error, "job attempt failed");
                let failed = self.store.fail(job.id, &self.id, &text).await;
                match failed.with_context(|| format!("writing how job {} ended", job.id))? {
                    FailOutcome::Retry { at } => {
                        tracing::info!(job = %job.id, retry_at_ms = at.millis(), "job will be retried");
                        Ok("failed")
                    }
                    FailOutcome::Dead => {
                        tracing::error!(job = %job.id, "job dead-lettered after {} attempts: {text}", job.attempts);
                        self.tell_gave_up(&job, &text).await;
                        Ok("dead")
                    }
                }
            }
        }
    }

    /// Renews the lease while the job runs; says so on `lost` if another
    /// worker holds it now.
    fn keep_lease(
        &self,
        job: &Job,
        lost: tokio::sync::oneshot::Sender<()>,
    ) -> tokio::task::JoinHandle<()> {
        let (store, id, worker, lease) = (
            self.store.clone(),
            job.id,
            self.id.clone(),
            self.options.lease,
        );
        let renewing = async move {
            let mut renewed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(lease / 3).await;
                match store.extend_lease(id, &worker, lease).await {
                    Ok(true) => renewed = tokio::time::Instant::now(),
                    Ok(false) => {
                        let _ = lost.send(());
                        break;
                    }
                    // Unrenewed for a whole lease, it may be another worker's
                    // now: this one stops (and its commands with it) rather
                    // than run on beside it.
                    Err(error) if renewed.elapsed() >= lease => {
                        tracing::warn!(job = %id, "the lease could not be renewed for {}s ({error:#}); giving the job up", lease.as_secs());
                        let _ = lost.send(());
                        break;
                    }
                    Err(error) => tracing::warn!(job = %id, "lease renewal failed: {error:#}"),
                }
            }
        };
        tokio::spawn(renewing.in_current_span())
    }

    async fn execute(&self, job: &Job) -> Result<JobOutcome> {
        let task: Task = serde_json::from_value(job.payload.clone())
            .with_context(|| format!("job {} has a payload this wavegate cannot read", job.id))?;
        let client = self.forges.client(task.repo().id.forge)?;
        // Reconciliation reaches the repository's pull requests through this.
        self.store.upsert_repository(task.repo()).await?;
        let job = JobCtx::new(self, &client, task.repo(), task.pr_number());
        match &task {
            Task::Plan { pr, .. } => handlers::plan::plan(&job, pr, &[]).await,
            Task::Comment {
                comment_id,
                author,
                body,
                written_at,
                ..
            } => {
                let comment = CommentIn {
                    pr: job.pr,
                    id: *comment_id,
                    author,
                    body,
                    written_at: *written_at,
                };
                match handlers::drift::taken_up(&job, &comment).await? {
                    Some(outcome) => Ok(outcome),
                    None => handlers::comment::handle_comment(&job, comment).await,
                }
            }
            Task::Review {
                review_id,
                author,
                state,
                commit,
                submitted_at,
                ..
            } => {
                let review = (*review_id, author, *state, commit.as_ref(), *submitted_at);
                handlers::review::review_job(&job, review).await
            }
            Task::Merged { pr, merge_sha, .. } => {
                handlers::apply::merged(&job, pr, merge_sha).await
            }
            Task::Apply { .. } => handlers::apply::resume(&job).await,
            Task::Replan { only, .. } => handlers::plan::replan(&job, only).await,
            Task::Notify { target, notice, .. } => {
                handlers::notify::deliver_notice(&self.options.notify, target, notice).await
            }
            Task::DriftScan { .. } => handlers::drift::scan(&job).await,
            Task::Drift { stage, .. } => handlers::drift::check(&job, stage).await,
        }
    }

    /// Best effort: a dead-lettered plan or apply job leaves a word on the PR.
    async fn tell_gave_up(&self, job: &Job, error: &str) {
        let Ok(task) = serde_json::from_value::<Task>(job.payload.clone()) else {
            return;
        };
        if matches!(task, Task::Merged { .. } | Task::Apply { .. }) {
            let applied = match self.forges.client(task.repo().id.forge) {
                Ok(client) => {
                    let job_ctx = JobCtx::new(self, &client, task.repo(), task.pr_number());
                    handlers::apply::apply_gave_up(&job_ctx, job.attempts, error).await
                }
                Err(error) => Err(error),
            };
            if let Err(e) = applied {
                tracing::warn!(job = %job.id, "could not stop the apply run whose job gave up: {e:#}");
            }
            return;
        }
        // A command or review that gave up leaves the report as it is.
        if !matches!(task, Task::Plan { .. } | Task::Replan { .. }) {
            return;
        }
        let Ok(client) = self.forges.client(task.repo().id.forge) else {
            return;
        };
        let problem = reply::gave_up(job.attempts, error);
        let known = self
            .store
            .pr(&task.repo().id, task.pr_number())
            .await
            .ok()
            .flatten();
        let result = client
            .upsert_report(
                task.repo(),
                task.pr_number(),
                known.as_ref().and_then(|r| r.report_comment_id),
                crate::report::REPORT_MARKER,
                &problem.body,
            )
            .await;
        if let (Ok(_), Some(record)) = (&result, known) {
            let _ = client
                .publish_check(
                    task.repo(),
                    &record.head_sha,
                    None,
                    &CheckReport::plan(CheckState::Failure, problem.title, problem.body).linked(
                        pull_page_url(
                            self.options.pages_url.as_deref(),
                            &task.repo().id,
                            task.pr_number(),
                        ),
                    ),
                )
                .await;
        }
        if let Err(e) = result {
            tracing::warn!(job = %job.id, "could not tell the pull request that its job gave up: {e:#}");
        }
    }
}

/// The page of pull request `pr` on this server (`pages`: where it shows
/// them), for a check's link.
pub(crate) fn pull_page_url(pages: Option<&str>, repo: &RepoId, pr: PrNumber) -> Option<String> {
    pages.map(|base| format!("{base}{}", repo.pull_page_path(pr)))
}

/// A task that ends when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_store_is_asked_again_ever_later_up_to_a_bound() {
        let poll = Duration::from_millis(500);
        assert_eq!(claim_backoff(0, poll), poll);
        assert_eq!(claim_backoff(1, poll), Duration::from_secs(1));
        assert_eq!(claim_backoff(3, poll), Duration::from_secs(4));
        assert_eq!(claim_backoff(7, poll), MOST_CLAIM_BACKOFF);
        assert_eq!(claim_backoff(u32::MAX, poll), MOST_CLAIM_BACKOFF);
        let slow = Duration::from_secs(60);
        assert_eq!(claim_backoff(2, slow), slow, "never sooner than the poll");
    }
}
