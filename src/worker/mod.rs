//! The job loop: claims a job with a lease, runs it, and records the outcome.
//! This is the one place that ties the forge, the store and the domain
//! together; the webhook handler only records and enqueues.
//!
//! A repository-side problem (a broken config, a refused fork, a failed plan)
//! becomes a PR reply and a failed check, and the job is done. An error on
//! our side (the forge, the network, the disk) fails the attempt: the job is
//! retried with backoff and dead-lettered with its error after
//! [`task::MAX_ATTEMPTS`].

mod apply;
mod gate;
pub mod reconcile;
pub mod redeliver;

/// Characters of the report kept for the approvals section.
use crate::config::{BaseRules, CONFIG_FILE};
use crate::forge::client::ForgeClient;
use crate::forge::listing::Page;
use crate::forge::registry::Forges;
use crate::forge::types::{CheckReport, CheckState};
use crate::forge::{PullRequest, RepoRef, ReviewState};
use crate::git;
use crate::git::{FetchRequest, Workspace};
use crate::jobs::{self, Task};
use crate::model::{CommitSha, PrNumber, RepoId, User};
use crate::plan::engine::{self, PlanError, PlanOptions, PlannedChange};
use crate::plan::runner::Cancel;
use crate::report::{self, reply, reply::Reply};
use crate::sandbox::Sandbox;
use crate::store::{
    FailOutcome, Job, JobOutcome, NewPlan, Once, PlanRecord, PrHead, PrReport, Store,
};
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
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(300),
            poll: Duration::from_secs(2),
            plan_concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            held_retry: crate::apply::HELD_RETRY,
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

/// What became of a review a webhook brought without its id.
enum Identified {
    /// Not taken up yet (0: not found on the forge; it is handled as before).
    Unseen(u64),
    /// The reconciliation sweep took it up already.
    Seen(u64),
}

impl Worker {
    /// Finds the review a webhook named no id of (Forgejo's) among the pull
    /// request's reviews, so that it and the sweep take it up once between
    /// them: the sweep keys it by its id. It is recorded as taken up once
    /// handled, so a failed attempt is retried; a sweep in between may take
    /// it up a second time.
    async fn identify_review(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        author: &User,
        state: ReviewState,
        commit: Option<&CommitSha>,
    ) -> Result<Identified> {
        let mut listed = Vec::new();
        for page in 1u32.. {
            match client
                .pull_reviews_page(repo, pr, page, None)
                .await
                .context("listing the pull request's reviews to find the one the webhook named")?
            {
                Page::NotModified => break,
                Page::Fresh { items, more, .. } => {
                    listed.extend(items);
                    if !more {
                        break;
                    }
                }
            }
        }
        let Some(found) = jobs::webhook_review(&listed, author, state, commit) else {
            return Ok(Identified::Unseen(0));
        };
        let once = Once {
            repo: repo.id.clone(),
            pr,
            source: jobs::review_source(found.id, state),
        };
        Ok(if self.store.was_seen(&once).await? {
            Identified::Seen(found.id)
        } else {
            Identified::Unseen(found.id)
        })
    }

    /// Runs jobs until `shutdown` turns true; the job in hand is finished first.
    /// The base branch's rules at `base`, read from the mirror once; an
    /// error (retried with the job) when git cannot read it, never a guess.
    pub(crate) async fn base_rules(
        &self,
        repo: &RepoRef,
        base: &CommitSha,
    ) -> Result<Arc<BaseRules>> {
        let key = (repo.id.clone(), base.clone());
        let cached = self
            .base_rules
            .0
            .lock()
            .expect("base rules lock poisoned")
            .get(&key)
            .cloned();
        if let Some(rules) = cached {
            return Ok(rules);
        }
        let mirror = self.workspace.mirror_path(&repo.id);
        let commit = base.clone();
        let text = git::off_runtime(move || git::read_file(&mirror, commit.as_str(), CONFIG_FILE))
            .await
            .with_context(|| {
                format!(
                    "reading the base branch's {CONFIG_FILE} at {}",
                    base.short()
                )
            })?;
        let rules = Arc::new(BaseRules::from_file(text.as_deref()));
        let mut cache = self.base_rules.0.lock().expect("base rules lock poisoned");
        if cache.len() >= BaseRulesCache::KEPT {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&rules));
        Ok(rules)
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        tracing::info!(worker = %self.id, "worker started");
        let mut failures = 0u32;
        loop {
            if *shutdown.borrow() {
                break;
            }
            match self.run_next().await {
                Ok(true) => {
                    failures = 0;
                    continue;
                }
                Ok(false) => failures = 0,
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::error!(
                        worker = %self.id,
                        "claiming a job failed ({failures} in a row; next try in {}s): {error:#}",
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
                kind: job.kind.clone(),
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
                self.store.complete(job.id, &self.id, outcome).await?;
                Ok(label)
            }
            Err(error) => {
                let text = format!("{error:#}");
                tracing::warn!(error = ?error, "job attempt failed");
                match self.store.fail(job.id, &self.id, &text).await? {
                    FailOutcome::Retry { at } => {
                        tracing::info!(job = %job.id, retry_at_ms = at, "job will be retried");
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
        match task {
            Task::Plan { repo, pr } => self.plan(&client, &repo, &pr).await,
            Task::Comment {
                repo,
                pr,
                comment_id,
                author,
                body,
                written_at,
            } => {
                let comment = gate::CommentIn {
                    id: comment_id,
                    author: &author,
                    body: &body,
                    written_at,
                };
                self.handle_comment(&client, &repo, pr, comment).await
            }
            Task::Review {
                repo,
                pr,
                review_id,
                author,
                state,
                commit,
            } => {
                let identified = review_id == 0;
                let review_id = if identified {
                    let found = self
                        .identify_review(&client, &repo, pr, &author, state, commit.as_ref())
                        .await?;
                    match found {
                        Identified::Unseen(id) => id,
                        Identified::Seen(id) => {
                            return Ok(JobOutcome::Skipped(format!(
                                "review {id} was taken up already (by the reconciliation sweep)"
                            )))
                        }
                    }
                } else {
                    review_id
                };
                let review = gate::ReviewIn {
                    id: review_id,
                    author: &author,
                    state,
                    commit: commit.as_ref(),
                };
                self.fetch_gate_bases(&client, &repo, pr).await?;
                let outcome = self.handle_review(&client, &repo, pr, review).await?;
                if identified && review_id != 0 {
                    let once = Once {
                        repo: repo.id.clone(),
                        pr,
                        source: jobs::review_source(review_id, state),
                    };
                    self.store.mark_seen(&once).await?;
                }
                Ok(outcome)
            }
            Task::Merged {
                repo,
                pr,
                merge_sha,
            } => self.merged(&client, &repo, &pr, &merge_sha).await,
            Task::Apply { repo, pr } => self.resume(&client, &repo, pr).await,
            Task::Replan { repo, pr } => {
                let current = client
                    .pull_request(&repo, pr)
                    .await
                    .with_context(|| format!("reading pull request {pr} of {}", repo.id))?;
                self.store
                    .upsert_pr_head(PrHead {
                        repo: repo.id.clone(),
                        pr,
                        head_sha: current.head_sha.clone(),
                        base_ref: current.base_ref.clone(),
                        open: true,
                        pusher: None,
                    })
                    .await?;
                self.plan(&client, &repo, &current).await
            }
        }
    }

    /// The head this job was made for is no longer the pull request's head.
    /// The forge is asked (deliveries can arrive out of order, so the head
    /// the store last heard of may be older), and the store learns its answer.
    async fn superseded(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: &PullRequest,
    ) -> Result<Option<JobOutcome>> {
        let current = client
            .pull_request(repo, pr.number)
            .await
            .with_context(|| format!("reading pull request {} of {}", pr.number, repo.id))?;
        self.store
            .upsert_pr_head(PrHead {
                repo: repo.id.clone(),
                pr: pr.number,
                head_sha: current.head_sha.clone(),
                base_ref: current.base_ref.clone(),
                open: true,
                pusher: None,
            })
            .await?;
        if current.head_sha == pr.head_sha {
            return Ok(None);
        }
        Ok(Some(JobOutcome::Skipped(format!(
            "superseded: the head moved from {} to {}",
            pr.head_sha.short(),
            current.head_sha.short()
        ))))
    }

    async fn plan(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: &PullRequest,
    ) -> Result<JobOutcome> {
        if let Some(skip) = self.superseded(client, repo, pr).await? {
            return Ok(skip);
        }
        let auth = client.git_auth_header(repo).await?;
        let base_only = FetchRequest {
            repo: &repo.id,
            sources: vec![(&repo.clone_url, &pr.base_sha)],
            auth: auth.as_ref(),
        };
        let mirror = self.workspace.fetch(&base_only).await?;

        let allowed = self.base_rules(repo, &pr.base_sha).await?.allows_forks();
        if pr.from_fork && !allowed {
            let fork = pr.head_clone_url.as_deref().unwrap_or("a fork");
            return self
                .publish_problem(client, repo, pr, reply::fork_refused(fork, &pr.base_ref))
                .await;
        }
        // Nothing runs unsandboxed because the sandbox is missing.
        if let Some(problem) = self.sandbox.problem() {
            return self
                .publish_problem(client, repo, pr, reply::sandbox_unavailable(problem))
                .await;
        }

        // Both forges keep every pull request's head, a fork's too, under
        // `refs/pull/N/head` of the base repository: the head is fetched from
        // there, and the token only ever goes to the base repository's host.
        self.workspace
            .fetch(&FetchRequest {
                repo: &repo.id,
                sources: vec![(&repo.clone_url, &pr.head_sha)],
                auth: auth.as_ref(),
            })
            .await?;

        let known = self.store.pr(&repo.id, pr.number).await?;
        let known_check = known_check(known.as_ref(), &pr.head_sha);
        let check_id = client
            .publish_check(
                repo,
                &pr.head_sha,
                known_check,
                &CheckReport {
                    name: crate::forge::types::CHECK_NAME,
                    state: CheckState::InProgress,
                    title: format!("Planning {}…", pr.head_sha.short()),
                    summary: "wavegate is planning this change; the report follows.".into(),
                    details_url: None,
                },
            )
            .await?;

        let mut options = PlanOptions::new(
            &mirror,
            pr.base_sha.as_str(),
            pr.head_sha.as_str(),
            Arc::clone(&self.sandbox),
        );
        options.cancel = self.cancel.clone();
        options.concurrency = self.options.plan_concurrency;
        options.recorded = Some(self.deployed_estate(repo).await?);
        // Planning calls git synchronously here and there: it runs on a
        // runtime of its own so webhook intake never waits behind it, in
        // the job's span.
        let span = tracing::Span::current();
        let planned = tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the planner's runtime")?;
            anyhow::Ok(span.in_scope(|| runtime.block_on(engine::plan_change(&options))))
        })
        .await??;
        let change = match planned {
            Ok(change) => change,
            Err(PlanError::Config(error)) => {
                return self
                    .publish_problem(
                        client,
                        repo,
                        pr,
                        reply::config_error(&error, pr.head_sha.as_str()),
                    )
                    .await
            }
            Err(PlanError::Usage(problem)) => {
                return self
                    .publish_problem(
                        client,
                        repo,
                        pr,
                        reply::plan_refused(&problem, pr.head_sha.as_str()),
                    )
                    .await
            }
            Err(PlanError::Internal(error)) => return Err(error.context("planning failed")),
        };
        // The head may have moved while the plan ran.
        if let Some(skip) = self.superseded(client, repo, pr).await? {
            return Ok(skip);
        }
        self.publish_plan(client, repo, pr, &change, check_id.or(known_check))
            .await?;
        Ok(JobOutcome::Done)
    }

    async fn publish_plan(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: &PullRequest,
        change: &PlannedChange,
        check_id: Option<u64>,
    ) -> Result<()> {
        let body = report::markdown::render_for_comment(change);
        let nothing = change.members.is_empty();
        let plan = NewPlan {
            repo: repo.id.clone(),
            pr: pr.number,
            head_sha: pr.head_sha.clone(),
            base_sha: pr.base_sha.clone(),
            digest: (!nothing).then(|| change.change_set.digest.clone()),
            change_set: serde_json::to_value(&change.change_set)?,
            report: body.clone(),
        };
        if nothing {
            self.store.save_plan(plan).await?;
            // Changed files nobody claims may be infrastructure nobody planned:
            // neither a pass nor a failure, and said in the title.
            let unclaimed = change.derivation.indeterminate.len();
            let (state, title) = if unclaimed > 0 {
                (
                    CheckState::Neutral,
                    format!("Nothing planned; {unclaimed} changed files no component claims"),
                )
            } else {
                (CheckState::Success, "Nothing to plan".to_owned())
            };
            let report = CheckReport {
                name: crate::forge::types::CHECK_NAME,
                state,
                title,
                summary: body,
                details_url: None,
            };
            let commit = (pr.number, &pr.head_sha);
            return self
                .publish(client, repo, commit, check_id, report, None, "empty")
                .await;
        }
        // A plan with a digest waits at its gate: the report carries the
        // approvals (earlier ones listed as for an earlier plan). The plan is
        // saved once posted: its time is when reviewers could see it.
        let posted = PlanRecord {
            id: 0,
            repo: plan.repo.clone(),
            pr: plan.pr,
            head_sha: plan.head_sha.clone(),
            base_sha: plan.base_sha.clone(),
            digest: plan.digest.clone(),
            change_set: plan.change_set.clone(),
            created_at: 0,
            report: body,
        };
        let failed = change.any_failed();
        self.publish_gate(client, repo, pr.number, &posted, failed, check_id)
            .await?;
        self.store.save_plan(plan).await?;
        Ok(())
    }

    /// Writes a repository-side problem into the report comment and fails
    /// the check; the job is done (retrying cannot fix the repository).
    async fn publish_problem(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: &PullRequest,
        problem: Reply,
    ) -> Result<JobOutcome> {
        let report = CheckReport {
            name: crate::forge::types::CHECK_NAME,
            state: CheckState::Failure,
            title: problem.title,
            summary: problem.body,
            details_url: None,
        };
        self.publish(
            client,
            repo,
            (pr.number, &pr.head_sha),
            None,
            report,
            None,
            "refused",
        )
        .await?;
        Ok(JobOutcome::Done)
    }

    /// The report comment (its body is the check's summary), the check on
    /// the head, and what the store remembers of both.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn publish(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        (pr, head): (PrNumber, &CommitSha),
        check_id: Option<u64>,
        report: CheckReport,
        digest: Option<String>,
        status: &str,
    ) -> Result<()> {
        let known = self.store.pr(&repo.id, pr).await?;
        let comment_id = client
            .upsert_report(
                repo,
                pr,
                known.as_ref().and_then(|r| r.report_comment_id),
                crate::report::REPORT_MARKER,
                &report.summary,
            )
            .await?;
        let check_id = check_id.or_else(|| known_check(known.as_ref(), head));
        let check_id = client.publish_check(repo, head, check_id, &report).await?;
        self.store
            .set_pr_report(
                &repo.id,
                pr,
                PrReport {
                    head_sha: head.clone(),
                    digest,
                    comment_id: Some(comment_id),
                    check_id,
                    status: status.into(),
                },
            )
            .await
    }

    /// Best effort: a dead-lettered plan or apply job leaves a word on the PR.
    async fn tell_gave_up(&self, job: &Job, error: &str) {
        let Ok(task) = serde_json::from_value::<Task>(job.payload.clone()) else {
            return;
        };
        if matches!(task, Task::Merged { .. } | Task::Apply { .. }) {
            if let Err(e) = self.apply_gave_up(&task, job.attempts, error).await {
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
                    &CheckReport {
                        name: crate::forge::types::CHECK_NAME,
                        state: CheckState::Failure,
                        title: problem.title,
                        summary: problem.body,
                        details_url: None,
                    },
                )
                .await;
        }
        if let Err(e) = result {
            tracing::warn!(job = %job.id, "could not tell the pull request that its job gave up: {e:#}");
        }
    }
}

/// The check already posted on this head, to be updated rather than repeated.
fn known_check(known: Option<&crate::store::PrRecord>, head: &CommitSha) -> Option<u64> {
    known
        .filter(|r| r.report_head.as_ref() == Some(head))
        .and_then(|r| r.check_id)
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
