//! The plan job: fetches the base and the head, plans the change in the
//! sandbox, and posts the report and the check; a repository-side problem
//! (a broken config, a refused fork, a sandbox that cannot run) becomes the
//! report itself, with what to do.

use crate::forge::types::{CheckReport, CheckState};
use crate::forge::PullRequest;
use crate::git::FetchRequest;
use crate::model::PlanTarget;
use crate::plan::changeset::ChangeSet;
use crate::plan::engine::{self, PlanError, PlanOptions, PlannedChange};
use crate::plan::targets::KeptPlans;
use crate::report::{self, reply, reply::Reply};
use crate::store::{JobOutcome, NewPlan, PlanRecord, PrHead, ReportStatus};
use crate::worker::ctx::{known_check, JobCtx};
use anyhow::{Context, Result};
use std::sync::Arc;

impl JobCtx<'_> {
    /// The head this job was made for is no longer the pull request's head.
    /// The forge is asked (deliveries can arrive out of order, so the head
    /// the store last heard of may be older), and the store learns its answer.
    async fn superseded(&self, pr: &PullRequest) -> Result<Option<JobOutcome>> {
        let current = self
            .client
            .pull_request(self.repo, pr.number)
            .await
            .with_context(|| format!("reading pull request {} of {}", pr.number, self.repo.id))?;
        self.store
            .upsert_pr_head(PrHead {
                repo: self.repo.id.clone(),
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

    /// Plans `pr` at its head: every member the change selects, or, for a
    /// targeted `/plan` (`only` not empty), those it names and what reads
    /// them, the rest kept from the latest plan when that is of this very
    /// head and base.
    pub(in crate::worker) async fn plan(
        &self,
        pr: &PullRequest,
        only: &[PlanTarget],
    ) -> Result<JobOutcome> {
        if let Some(skip) = self.superseded(pr).await? {
            return Ok(skip);
        }
        let auth = self.client.git_auth_header(self.repo).await?;
        let base_only = FetchRequest {
            repo: &self.repo.id,
            sources: vec![(&self.repo.clone_url, &pr.base_sha)],
            auth: auth.as_ref(),
        };
        let mirror = self.workspace.fetch(&base_only).await?;

        let allowed = self.base_rules(&pr.base_sha).await?.allows_forks();
        if pr.from_fork && !allowed {
            let fork = pr.head_clone_url.as_deref().unwrap_or("a fork");
            return self
                .publish_problem(pr, reply::fork_refused(fork, &pr.base_ref))
                .await;
        }
        // Nothing runs unsandboxed because the sandbox is missing.
        if let Some(problem) = self.sandbox.problem() {
            return self
                .publish_problem(pr, reply::sandbox_unavailable(problem))
                .await;
        }

        // Both forges keep every pull request's head, a fork's too, under
        // `refs/pull/N/head` of the base repository: the head is fetched from
        // there, and the token only ever goes to the base repository's host.
        self.workspace
            .fetch(&FetchRequest {
                repo: &self.repo.id,
                sources: vec![(&self.repo.clone_url, &pr.head_sha)],
                auth: auth.as_ref(),
            })
            .await?;

        let known = self.store.pr(&self.repo.id, pr.number).await?;
        let known_check = known_check(known.as_ref(), &pr.head_sha);
        let check_id = self
            .client
            .publish_check(
                self.repo,
                &pr.head_sha,
                known_check,
                &CheckReport::plan(
                    CheckState::InProgress,
                    format!("Planning {}…", pr.head_sha.short()),
                    "wavegate is planning this change; the report follows.".into(),
                ),
            )
            .await?;

        let mut options = PlanOptions::new(
            &mirror,
            pr.base_sha.as_str(),
            pr.head_sha.as_str(),
            Arc::clone(self.sandbox),
        );
        options.cancel = self.cancel.clone();
        options.repository = Some(self.repo.id.full_name.clone());
        options.imposed = Arc::new(self.imposed());
        // Profiles are picked by a base whose merges apply, for the
        // repository's own branches: a fork's plans, and plans into a branch
        // anyone may push, run with the server's `default`.
        options.base_picks_profiles = !pr.from_fork
            && self
                .merge_applies(&pr.base_ref, &pr.base_sha)
                .await?
                .is_ok();
        options.concurrency = self.options.plan_concurrency;
        options.heartbeat = self.options.heartbeat;
        options.recorded = Some(self.deployed_estate().await?);
        if !only.is_empty() {
            options.kept = Some(Arc::new(self.kept_plans(pr, only).await?));
        }
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
                    .publish_problem(pr, reply::config_error(&error, pr.head_sha.as_str()))
                    .await
            }
            Err(PlanError::Usage(problem)) => {
                return self
                    .publish_problem(pr, reply::plan_refused(&problem, pr.head_sha.as_str()))
                    .await
            }
            Err(PlanError::Internal(error)) => return Err(error.context("planning failed")),
        };
        // The head may have moved while the plan ran.
        if let Some(skip) = self.superseded(pr).await? {
            return Ok(skip);
        }
        self.publish_plan(pr, &change, check_id.or(known_check))
            .await?;
        Ok(JobOutcome::Done)
    }

    async fn publish_plan(
        &self,
        pr: &PullRequest,
        change: &PlannedChange,
        check_id: Option<u64>,
    ) -> Result<()> {
        let body = report::markdown::render_for_comment(change, self.options.docs_url.as_deref());
        let nothing = change.members.is_empty();
        let plan = NewPlan {
            repo: self.repo.id.clone(),
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
            let report = CheckReport::plan(state, title, body);
            let commit = (pr.number, &pr.head_sha);
            return self
                .publish(commit, check_id, report, None, ReportStatus::Empty)
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
        self.publish_gate(&posted, failed, check_id).await?;
        self.store.save_plan(plan).await?;
        Ok(())
    }

    /// Writes a repository-side problem into the report comment and fails
    /// the check; the job is done (retrying cannot fix the repository).
    async fn publish_problem(&self, pr: &PullRequest, problem: Reply) -> Result<JobOutcome> {
        let report = CheckReport::plan(CheckState::Failure, problem.title, problem.body);
        self.publish(
            (pr.number, &pr.head_sha),
            None,
            report,
            None,
            ReportStatus::Refused,
        )
        .await?;
        Ok(JobOutcome::Done)
    }

    /// The plans of the latest plan of `pr`, when it is of this very head
    /// and base (verified with their change set); none otherwise, so a
    /// targeted `/plan` plans everything it cannot keep.
    async fn kept_plans(&self, pr: &PullRequest, only: &[PlanTarget]) -> Result<KeptPlans> {
        let latest = self.store.latest_plan(&self.repo.id, pr.number).await?;
        let plans = latest
            .filter(|l| l.head_sha == pr.head_sha && l.base_sha == pr.base_sha)
            .and_then(|l| {
                let set = serde_json::from_value::<ChangeSet>(l.change_set).ok()?;
                match set.verify() {
                    Ok(()) => Some(set),
                    Err(e) => {
                        tracing::warn!(
                            "the latest plan of {} does not verify, so /plan keeps none of it: {e}",
                            pr.number
                        );
                        None
                    }
                }
            })
            .map(|set| {
                set.members
                    .into_iter()
                    .filter_map(|m| m.plan)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        Ok(KeptPlans::new(only.to_vec(), plans, pr.head_sha.as_str()))
    }

    /// `/plan`: the pull request planned again at its head as the forge has
    /// it now: everything, or what `only` names.
    pub(in crate::worker) async fn replan(&self, only: &[PlanTarget]) -> Result<JobOutcome> {
        let current = self
            .client
            .pull_request(self.repo, self.pr)
            .await
            .with_context(|| format!("reading pull request {} of {}", self.pr, self.repo.id))?;
        self.store
            .upsert_pr_head(PrHead {
                repo: self.repo.id.clone(),
                pr: self.pr,
                head_sha: current.head_sha.clone(),
                base_ref: current.base_ref.clone(),
                open: true,
                pusher: None,
            })
            .await?;
        self.plan(&current, only).await
    }
}
