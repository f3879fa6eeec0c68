//! Reviews: an approving review (when the base's policy counts reviews)
//! approves the digest reported for its commit, or the one a run's gate
//! waits for; a dismissed review withdraws whatever that review approved.
//! A Forgejo review webhook carries no id: it is found among the pull
//! request's reviews first.

use super::apply::resume_if_waiting;
use super::gate::run_gate;
use super::gate::{
    fetch_gate_bases, judge_approver, record_approval, record_fact, refresh_gate, run_gate_policy,
    shown_plan, Approver,
};
use crate::config::repo::Policy;
use crate::forge::listing::Page;
use crate::forge::ReviewState;
use crate::gate::ledger::{FactData, FactKind, Source};
use crate::jobs;
use crate::model::{CommitSha, GateId, PrNumber, StageName, UnixMs, User};
use crate::store::Store;
use crate::store::{ApplyRunRecord, JobOutcome};
use crate::store::{Once, OnceSource};
use crate::worker::ctx::{Forge, JobCtx, Mirror, Queue};
use anyhow::{Context, Result};
use std::time::Duration;

/// A review as the review job carries it.
pub(crate) struct ReviewIn<'a> {
    pub(crate) id: u64,
    pub(crate) author: &'a User,
    pub(crate) state: ReviewState,
    pub(crate) commit: Option<&'a CommitSha>,
    /// When it was submitted (unix ms), as the forge says.
    pub(crate) submitted_at: Option<UnixMs>,
}

/// What became of a review a webhook brought without its id.
enum Identified {
    /// Not taken up yet (0: not found on the forge; it is handled as before),
    /// and when it was submitted.
    Unseen(u64, Option<UnixMs>),
    /// The reconciliation sweep took it up already.
    Seen(u64),
}

/// A review: an approving review (when the base's policy counts reviews)
/// approves the digest reported for its commit; a dismissed review
/// withdraws whatever that review approved.
async fn handle_review(job: &JobCtx<'_>, review: ReviewIn<'_>) -> Result<JobOutcome> {
    let JobCtx {
        store,
        forge,
        mirror,
        queue,
        pr,
        ..
    } = *job;
    let mirror = &mirror;
    let gate = GateId::Pr(pr);
    let run = store.apply_run(&forge.repo.id, pr).await?;
    if review.state == ReviewState::Dismissed {
        // What the review approved: the pull request, or a run's gate.
        let mut gates = vec![gate.clone()];
        if let Some(run) = &run {
            gates.extend(run.record.stages.values().map(|g| g.gate.clone()));
            gates.extend(run.record.rounds.iter().map(|r| r.gate.clone()));
        }
        let mut revoked = false;
        for gate in &gates {
            let facts = store.gate_facts(&forge.repo.id.ledger_key(), gate).await?;
            let approved = facts.iter().rev().find(|f| {
                f.fact.kind == FactKind::Approved
                    && f.fact.source == Source::Review { id: review.id }
                    && f.fact.actor.id == review.author.id
            });
            let Some(approved) = approved.cloned() else {
                continue;
            };
            let data = approved.fact.data.clone().with_reason("review dismissed");
            let revoke = (FactKind::Revoked, approved.fact.digest.clone(), data);
            let source = Source::Review { id: review.id };
            record_fact(store, &forge.repo.id, gate, revoke, (review.author, source)).await?;
            revoked = true;
        }
        if !revoked {
            return Ok(JobOutcome::Skipped(
                "the dismissed review approved nothing".into(),
            ));
        }
        refresh_gate(store, forge, mirror, pr).await?;
        return Ok(JobOutcome::Done);
    }
    if review.state != ReviewState::Approved {
        return Ok(JobOutcome::Skipped(
            "a review that neither approves nor dismisses".into(),
        ));
    }
    if let Some(run) = run.filter(|r| run_gate(r).is_some()) {
        return review_at_run_gate((store, forge, mirror, queue), &review, &run).await;
    }
    let Some((record, plan)) = shown_plan(store, &forge.repo.id, pr).await? else {
        return Ok(JobOutcome::Skipped("no current plan to approve".into()));
    };
    let policy = match mirror.base_rules(&plan.base_sha).await?.policy() {
        Ok(policy) if policy.review_approvals => policy,
        Ok(_) => return Ok(JobOutcome::Skipped("review approvals are off".into())),
        Err(why) => return Ok(JobOutcome::Skipped(why)),
    };
    let Some(digest) = record.report_digest.clone() else {
        return Ok(JobOutcome::Skipped("the report has no digest".into()));
    };
    if review.commit != Some(&record.head_sha) {
        return Ok(JobOutcome::Skipped(
            "the review is of an earlier commit".into(),
        ));
    }
    let at = (pr, &plan.head_sha);
    let refused = refused_reviewer((store, forge), at, review.author, &policy).await?;
    let data = FactData::at_plan(&plan.head_sha, &plan.base_sha);
    let by = (review.author, Source::Review { id: review.id });
    let kind =
        record_approval((store, &forge.repo.id), &gate, (&digest, data), refused, by).await?;
    refresh_gate(store, forge, mirror, pr).await?;
    if kind == FactKind::Approved {
        resume_if_waiting(store, queue, forge.repo, pr).await?;
    }
    Ok(JobOutcome::Done)
}

/// An approving review while the apply run waits at a stage gate or a
/// round: it approves the digest the run waits for, when that stage's
/// policy on the base counts reviews and the review is of the merged head.
async fn review_at_run_gate(
    (store, forge, mirror, queue): (&Store, Forge<'_>, &Mirror<'_>, Queue<'_>),
    review: &ReviewIn<'_>,
    run: &ApplyRunRecord,
) -> Result<JobOutcome> {
    let Some((gate, digest, stage)) = run_gate(run) else {
        return Ok(JobOutcome::Skipped("the run waits for no approval".into()));
    };
    // A review approves code; a hook's failure or hold is approved only
    // by an `/approve` of the digest the run posted for it.
    if matches!(run.record.wait, Some(crate::apply::Wait::Hook { .. })) {
        return Ok(JobOutcome::Skipped(
            "a review does not approve a hook's failure or hold; `/approve` its digest".into(),
        ));
    }
    let Some(merged) = store.plan(run.plan_id).await? else {
        return Ok(JobOutcome::Skipped("the run's plan is gone".into()));
    };
    if review.commit != Some(&merged.head_sha) {
        return Ok(JobOutcome::Skipped(
            "the review is not of the merged head".into(),
        ));
    }
    let policy = match run_gate_policy(mirror, run, stage.as_ref().map(StageName::as_str)).await? {
        Ok(policy) if policy.review_approvals => policy,
        Ok(_) => {
            return Ok(JobOutcome::Skipped(
                "review approvals are off for this stage".into(),
            ))
        }
        Err(why) => return Ok(JobOutcome::Skipped(why)),
    };
    // Like a plain `/approve`, a review approves the set a gate showed
    // only if it was submitted once that gate waited (to the second, as
    // forges date them).
    let saw_the_wait = review
        .submitted_at
        .is_some_and(|at| at + Duration::from_secs(1) > run.record.wait_posted_at);
    let refused = if !saw_the_wait {
        Some(match review.submitted_at {
                Some(_) => format!("the review was submitted before the run's gate waited, so it did not see the set it would approve; approve it with `/approve {digest}`"),
                None => format!("the forge did not say when the review was submitted, so it is not clear it saw the set the run's gate waits on; approve it with `/approve {digest}`"),
            })
    } else {
        let at = (run.pr, &merged.head_sha);
        refused_reviewer((store, forge), at, review.author, &policy).await?
    };
    let data = FactData::in_run(run.id, &run.merge_sha);
    let by = (review.author, Source::Review { id: review.id });
    let kind =
        record_approval((store, &forge.repo.id), &gate, (&digest, data), refused, by).await?;
    if kind == FactKind::Approved {
        resume_if_waiting(store, queue, forge.repo, run.pr).await?;
    }
    Ok(JobOutcome::Done)
}

/// Why a reviewer's approval of pull request `pr` at `head` is refused
/// under `policy`, if it is.
async fn refused_reviewer(
    (store, forge): (&Store, Forge<'_>),
    at: (PrNumber, &CommitSha),
    reviewer: &User,
    policy: &Policy,
) -> Result<Option<String>> {
    Ok(
        match judge_approver((store, forge), at, reviewer, policy).await? {
            Approver::May => None,
            Approver::MayNot(why) => Some(why.to_string()),
            Approver::Unknown(error) => Some(format!(
                "wavegate could not check the reviewer's permission: {error:#}"
            )),
        },
    )
}

/// Finds the review a webhook named no id of (Forgejo's) among the pull
/// request's reviews, so that it and the sweep take it up once between
/// them: the sweep keys it by its id. It is recorded as taken up once
/// handled, so a failed attempt is retried; a sweep in between may take
/// it up a second time.
async fn identify_review(
    (store, forge): (&Store, Forge<'_>),
    pr: PrNumber,
    author: &User,
    state: ReviewState,
    commit: Option<&CommitSha>,
) -> Result<Identified> {
    let mut listed = Vec::new();
    for page in 1u32.. {
        match forge
            .client
            .pull_reviews_page(forge.repo, pr, page, None)
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
        return Ok(Identified::Unseen(0, None));
    };
    let once = Once {
        repo: forge.repo.id.clone(),
        pr,
        source: OnceSource::Review(found.id, state),
    };
    Ok(if store.was_seen(&once).await? {
        Identified::Seen(found.id)
    } else {
        Identified::Unseen(found.id, found.submitted_at)
    })
}

/// A review job: the review the webhook named (found first when it came
/// without its id), judged once, and marked as taken up.
pub(in crate::worker) async fn review_job(
    job: &JobCtx<'_>,
    (review_id, author, state, commit, submitted_at): (
        u64,
        &User,
        ReviewState,
        Option<&CommitSha>,
        Option<UnixMs>,
    ),
) -> Result<JobOutcome> {
    let identified = review_id == 0;
    let (review_id, submitted_at) = if identified {
        match identify_review((job.store, job.forge), job.pr, author, state, commit).await? {
            Identified::Unseen(id, at) => (id, at.or(submitted_at)),
            Identified::Seen(id) => {
                return Ok(JobOutcome::Skipped(format!(
                    "review {id} was taken up already (by the reconciliation sweep)"
                )))
            }
        }
    } else {
        (review_id, submitted_at)
    };
    let review = ReviewIn {
        id: review_id,
        author,
        state,
        commit,
        submitted_at,
    };
    fetch_gate_bases(job.store, &job.mirror, &job.forge.repo.id, job.pr).await?;
    let outcome = handle_review(job, review).await?;
    if identified && review_id != 0 {
        let once = Once {
            repo: job.forge.repo.id.clone(),
            pr: job.pr,
            source: OnceSource::Review(review_id, state),
        };
        job.store.mark_seen(&once).await?;
    }
    Ok(outcome)
}
