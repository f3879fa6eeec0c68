//! The plan job: fetches the base and the head, plans the change in the
//! sandbox, and posts the report and the check; a repository-side problem
//! (a broken config, a refused fork, a sandbox that cannot run) becomes the
//! report itself, with what to do.

use super::apply::{deployed_estate, merge_applies};
use super::gate::publish_gate;
use super::publish::{known_check, publish_report, CiRuns, Shown};
use crate::forge::types::{CheckReport, CheckState};
use crate::forge::PullRequest;
use crate::model::PlanTarget;
use crate::model::RepoId;
use crate::plan::engine::{self, PlanError, PlannedChange};
use crate::plan::targets::KeptPlans;
use crate::report::{self, reply, reply::Reply};
use crate::store::Store;
use crate::store::{JobOutcome, NewPlan, PrHead, ReportStatus};
use crate::worker::ctx::{Forge, JobCtx, Mirror};
use anyhow::{Context, Result};
use std::sync::Arc;

/// The head this job was made for is no longer the pull request's head.
/// The forge is asked (deliveries can arrive out of order, so the head
/// the store last heard of may be older), and the store learns its answer.
async fn superseded(
    store: &Store,
    forge: Forge<'_>,
    pr: &PullRequest,
) -> Result<Option<JobOutcome>> {
    let current = forge
        .client
        .pull_request(forge.repo, pr.number)
        .await
        .with_context(|| format!("reading pull request {} of {}", pr.number, forge.repo.id))?;
    store
        .upsert_pr_head(PrHead {
            repo: forge.repo.id.clone(),
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
    job: &JobCtx<'_>,
    pr: &PullRequest,
    only: &[PlanTarget],
) -> Result<JobOutcome> {
    let JobCtx {
        store,
        forge,
        mirror,
        runner,
        ..
    } = *job;
    if let Some(skip) = superseded(store, forge, pr).await? {
        return Ok(skip);
    }
    mirror.fetch(&pr.base_sha).await?;

    let allowed = mirror.base_rules(&pr.base_sha).await?.allows_forks();
    if pr.from_fork && !allowed {
        let fork = pr.head_clone_url.as_deref().unwrap_or("a fork");
        return publish_problem(store, forge, pr, reply::fork_refused(fork, &pr.base_ref)).await;
    }
    // Nothing runs unsandboxed because the sandbox is missing.
    if let Some(problem) = runner.sandbox.problem() {
        return publish_problem(store, forge, pr, reply::sandbox_unavailable(problem)).await;
    }

    // Both forges keep every pull request's head, a fork's too, under
    // `refs/pull/N/head` of the base repository: the head is fetched from
    // there, and the token only ever goes to the base repository's host.
    mirror.fetch(&pr.head_sha).await?;

    let known = store.pr(&forge.repo.id, pr.number).await?;
    let known_check = known_check(known.as_ref(), &pr.head_sha);
    let check_id = forge
        .client
        .publish_check(
            forge.repo,
            &pr.head_sha,
            known_check,
            &CheckReport::plan(
                CheckState::InProgress,
                format!("Planning {}…", pr.head_sha.short()),
                "wavegate is planning this change; the report follows.".into(),
            )
            .linked(forge.pull_page(pr.number)),
        )
        .await?;

    let mut options = runner.plan_options(&mirror, (&pr.base_sha, &pr.head_sha));
    options.console = Some(runner.console(&forge.repo.id, pr.number, None));
    // Profiles are picked by a base whose merges apply, for the
    // repository's own branches: a fork's plans, and plans into a branch
    // anyone may push, run with the server's `default`.
    options.base_picks_profiles = !pr.from_fork
        && merge_applies(forge, &mirror, &pr.base_ref, &pr.base_sha)
            .await?
            .is_ok();
    options.recorded = Some(deployed_estate(store, &forge.repo.id).await?);
    if !only.is_empty() {
        let kept = kept_plans(store, &forge.repo.id, pr, only).await?;
        options.kept = Some(Arc::new(kept));
    }
    let planned = plan_apart(options).await?;
    let change = match planned {
        Ok(change) => change,
        Err(PlanError::Config(error)) => {
            let problem = reply::config_error(&error, pr.head_sha.as_str());
            return publish_problem(store, forge, pr, problem).await;
        }
        Err(PlanError::Usage(problem)) => {
            let problem = reply::plan_refused(&problem, pr.head_sha.as_str());
            return publish_problem(store, forge, pr, problem).await;
        }
        Err(PlanError::Internal(error)) => return Err(error.context("planning failed")),
    };
    // The head may have moved while the plan ran.
    if let Some(skip) = superseded(store, forge, pr).await? {
        return Ok(skip);
    }
    let docs_url = runner.options.docs_url.as_deref();
    publish_plan(
        (store, forge, &mirror),
        (pr, &change),
        check_id.or(known_check),
        docs_url,
    )
    .await?;
    Ok(JobOutcome::Done)
}

/// Plans as `options` say. Planning calls git synchronously here and
/// there: it runs on a runtime of its own so webhook intake never waits
/// behind it, in the job's span.
pub(super) async fn plan_apart(
    options: engine::PlanOptions,
) -> Result<Result<PlannedChange, PlanError>> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the planner's runtime")?;
        anyhow::Ok(span.in_scope(|| runtime.block_on(engine::plan_change(&options))))
    })
    .await?
}

/// Saves the plan and posts its report and check: one that changes
/// nothing passes (or, with files nobody claims, says so), one with a
/// digest waits at its gate.
async fn publish_plan(
    (store, forge, mirror): (&Store, Forge<'_>, &Mirror<'_>),
    (pr, change): (&PullRequest, &PlannedChange),
    check_id: Option<u64>,
    docs_url: Option<&str>,
) -> Result<()> {
    let body = report::markdown::render_for_comment(change, docs_url);
    let nothing = change.members.is_empty();
    let plan = NewPlan {
        repo: forge.repo.id.clone(),
        pr: pr.number,
        head_sha: pr.head_sha.clone(),
        base_sha: pr.base_sha.clone(),
        digest: (!nothing).then(|| change.change_set.digest.clone()),
        change_set: change.change_set.clone(),
        report: body.clone(),
    };
    if nothing {
        store.save_plan(plan).await?;
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
        let shown = Shown {
            pr: pr.number,
            head: &pr.head_sha,
            check_id,
            digest: None,
            status: ReportStatus::Empty,
            runs: CiRuns::default(),
        };
        return publish_report(store, forge, shown, report).await;
    }
    // A plan with a digest waits at its gate: the report carries the
    // approvals (earlier ones listed as for an earlier plan). The plan is
    // saved once posted: its time is when reviewers could see it.
    let posted = plan.as_posted()?;
    let failed = change.any_failed();
    publish_gate(store, forge, mirror, &posted, (failed, check_id)).await?;
    store.save_plan(plan).await?;
    Ok(())
}

/// Writes a repository-side problem into the report comment and fails
/// the check; the job is done (retrying cannot fix the repository).
async fn publish_problem(
    store: &Store,
    forge: Forge<'_>,
    pr: &PullRequest,
    problem: Reply,
) -> Result<JobOutcome> {
    let report = CheckReport::plan(CheckState::Failure, problem.title, problem.body);
    let shown = Shown {
        pr: pr.number,
        head: &pr.head_sha,
        check_id: None,
        digest: None,
        status: ReportStatus::Refused,
        runs: CiRuns::default(),
    };
    publish_report(store, forge, shown, report).await?;
    Ok(JobOutcome::Done)
}

/// The plans of the latest plan of `pr`, when it is of this very head
/// and base (verified with their change set); none otherwise, so a
/// targeted `/plan` plans everything it cannot keep.
async fn kept_plans(
    store: &Store,
    repo: &RepoId,
    pr: &PullRequest,
    only: &[PlanTarget],
) -> Result<KeptPlans> {
    let latest = store.latest_plan(repo, pr.number).await?;
    let plans = latest
        .filter(|l| l.head_sha == pr.head_sha && l.base_sha == pr.base_sha)
        .and_then(|l| match l.change_set() {
            Ok(set) => Some(set),
            Err(e) => {
                tracing::warn!("/plan on {} keeps nothing: {e}", pr.number);
                None
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
pub(in crate::worker) async fn replan(job: &JobCtx<'_>, only: &[PlanTarget]) -> Result<JobOutcome> {
    let (forge, pr) = (job.forge, job.pr);
    let current = forge
        .client
        .pull_request(forge.repo, pr)
        .await
        .with_context(|| format!("reading pull request {pr} of {}", forge.repo.id))?;
    job.store
        .upsert_pr_head(PrHead {
            repo: forge.repo.id.clone(),
            pr,
            head_sha: current.head_sha.clone(),
            base_ref: current.base_ref.clone(),
            open: true,
            pusher: None,
        })
        .await?;
    plan(job, &current, only).await
}
