//! Comment commands on a pull request: who said what, whether they may,
//! which digest it binds, the fact it leaves in the ledger, the reactions
//! and the one reply that says what was refused and why.

use super::apply::{enqueue_resume, resume_if_waiting};
use super::gate::{
    fetch_gate_bases, judge_approver, record_approval, record_fact, refresh_gate, run_gate_policy,
    shown_plan, Approver,
};
use crate::apply::hooks::HookState;
use crate::apply::run::Retry;
use crate::apply::Wait;
use crate::config::repo::Policy;
use crate::forge::types::{Permission, Reaction};
use crate::gate::commands::{self, Command};
use crate::gate::counting::{self};
use crate::gate::ledger::{FactData, FactKind, Source};
use crate::gate::policy::{self, Candidate, ReportSeen};
use crate::jobs::Task;
use crate::model::{CommitSha, Digest, GateId, PrNumber, StageName, UnixMs, User};
use crate::report::refusal::{self, Refusal};
use crate::store::Store;
use crate::store::{ApplyRunRecord, JobOutcome};
use crate::worker::ctx::{Forge, JobCtx, Mirror, Queue};
use anyhow::{Context, Result};

/// A comment as the command job carries it.
pub(crate) struct CommentIn<'a> {
    pub(crate) pr: PrNumber,
    pub(crate) id: u64,
    pub(crate) author: &'a User,
    pub(crate) body: &'a str,
    pub(crate) written_at: Option<UnixMs>,
}

/// What became of one command.
enum Said {
    Done,
    Refused(Refusal),
}

/// A comment's commands, each judged, recorded and answered.
pub(in crate::worker) async fn handle_comment(
    job: &JobCtx<'_>,
    comment: CommentIn<'_>,
) -> Result<JobOutcome> {
    let JobCtx {
        store,
        forge,
        mirror,
        queue,
        ..
    } = *job;
    let mirror = &mirror;
    let pr = comment.pr;
    if comment.author.is_bot || comment.author.login == forge.client.bot_login().await? {
        return Ok(JobOutcome::Skipped("a bot's comment".into()));
    }
    let parsed = commands::parse(comment.body);
    if parsed.commands.is_empty() && parsed.unknown.is_empty() && parsed.errors.is_empty() {
        return Ok(JobOutcome::Skipped("no commands".into()));
    }
    fetch_gate_bases(store, mirror, &forge.repo.id, pr).await?;
    react(forge, comment.id, Reaction::Eyes).await;

    let mut refusals = Vec::new();
    let mut done = 0;
    for error in &parsed.errors {
        refusals.push(Refusal::Malformed {
            text: error.text.clone(),
            problem: error.problem.to_string(),
            fix: error.fix.to_string(),
        });
    }
    for word in &parsed.unknown {
        refusals.push(Refusal::Unknown { word: word.clone() });
    }
    let mut gate_moved = false;
    let mut run_moved = false;
    for command in &parsed.commands {
        let said = match command {
            Command::Help => {
                forge
                    .client
                    .reply(forge.repo, comment.pr, &commands::help_text())
                    .await?;
                Said::Done
            }
            Command::Plan { only } => {
                let closed = store
                    .pr(&forge.repo.id, comment.pr)
                    .await?
                    .is_some_and(|r| !r.open);
                if closed {
                    Said::Refused(Refusal::ClosedNothingToPlan)
                } else {
                    let replan = Task::Replan {
                        repo: forge.repo.clone(),
                        pr: comment.pr,
                        only: only.clone(),
                    };
                    queue.enqueue(replan).await?;
                    Said::Done
                }
            }
            Command::Approve {
                stage,
                wave,
                digest,
            } => {
                let run = store.apply_run(&forge.repo.id, comment.pr).await?;
                let at_run_gate = run.as_ref().is_some_and(|r| {
                    matches!(
                        r.record.wait,
                        Some(Wait::Stage { .. } | Wait::Round { .. } | Wait::Hook { .. })
                    )
                });
                let said = match run {
                    Some(run) if at_run_gate => {
                        let named = (stage.as_deref(), *wave);
                        approve_run(
                            (store, forge, mirror, queue),
                            &comment,
                            named,
                            digest.as_ref(),
                            &run,
                        )
                        .await?
                    }
                    _ => {
                        let named = (stage.as_deref(), *wave);
                        approve((store, forge, mirror), &comment, named, digest.as_ref()).await?
                    }
                };
                gate_moved |= matches!(said, Said::Done) && !at_run_gate;
                run_moved |= matches!(said, Said::Done);
                said
            }
            Command::Revoke => {
                let said = revoke((store, forge, mirror), &comment).await?;
                gate_moved |= matches!(said, Said::Done);
                said
            }
            Command::Retry => retry((store, forge, queue), &comment).await?,
            Command::Override { member, reason } => {
                let said =
                    override_denial((store, forge, mirror), &comment, member, reason).await?;
                run_moved |= matches!(said, Said::Done);
                said
            }
        };
        match said {
            Said::Done => done += 1,
            Said::Refused(why) => refusals.push(why),
        }
    }
    if gate_moved {
        refresh_gate(store, forge, mirror, pr).await?;
    }
    if run_moved {
        resume_if_waiting(store, queue, forge.repo, pr).await?;
    }
    if done > 0 {
        react(forge, comment.id, Reaction::Rocket).await;
    }
    if !refusals.is_empty() {
        react(forge, comment.id, Reaction::Confused).await;
        let body = refusal::reply(&comment.author.login, &refusals);
        forge.reply_linked(comment.pr, &body, "ledger").await?;
    }
    Ok(JobOutcome::Done)
}

/// Reactions are a courtesy: a deleted comment must not fail the job.
pub(super) async fn react(forge: Forge<'_>, comment: u64, reaction: Reaction) {
    if let Err(error) = forge.client.react(forge.repo, comment, reaction).await {
        tracing::warn!(
            comment,
            "could not react with {}: {error:#}",
            reaction.as_str()
        );
    }
}

async fn approve(
    (store, forge, mirror): (&Store, Forge<'_>, &Mirror<'_>),
    comment: &CommentIn<'_>,
    (stage, wave): (Option<&str>, Option<u32>),
    named: Option<&commands::DigestRef>,
) -> Result<Said> {
    let record = store.pr(&forge.repo.id, comment.pr).await?;
    let plan = store.latest_plan(&forge.repo.id, comment.pr).await?;
    let seen = record.as_ref().and_then(|r| {
        Some(ReportSeen {
            head: r.report_head.as_ref()?.as_str(),
            digest: r.report_digest.as_ref(),
            posted_at: plan
                .as_ref()
                .filter(|p| Some(&p.head_sha) == r.report_head.as_ref())
                .map_or(UnixMs::MAX, |p| p.created_at),
        })
    });
    let head_now = record.as_ref().map_or("", |r| r.head_sha.as_str());
    let digest = match policy::bind(named, seen.as_ref(), head_now, comment.written_at) {
        Ok(digest) => digest.clone(),
        Err(why) => return Ok(Said::Refused(Refusal::Unbound(why))),
    };
    let Some(plan) = plan.filter(|p| p.digest.as_ref() == Some(&digest)) else {
        return Ok(Said::Refused(Refusal::Unbound(policy::Unbound::NoReport)));
    };
    let policy = match mirror.base_rules(&plan.base_sha).await?.policy() {
        Ok(policy) => policy,
        Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
    };
    if let Some(stage) = stage {
        let stages = mirror.base_rules(&plan.base_sha).await?.stages();
        if !stages.iter().any(|s| s == stage) {
            return Ok(Said::Refused(Refusal::NotAStage {
                stage: stage.to_owned(),
                stages,
            }));
        }
        let expired = store
            .apply_run(&forge.repo.id, comment.pr)
            .await?
            .and_then(|run| {
                // The stage's gate, or (approved wave by wave) the
                // wave's named, or any of its waves' when none is.
                run.record.stages.into_values().find(|gate| {
                    gate.expired
                        && gate.stage() == Some(stage)
                        && wave.is_none_or(|w| {
                            gate.gate == GateId::of_stage(comment.pr, stage, Some(w))
                        })
                })
            });
        if let Some(gate) = expired {
            return Ok(Said::Refused(Refusal::StageExpired {
                stage: gate
                    .gate
                    .stage_gate_key()
                    .unwrap_or_else(|| stage.to_owned()),
                at: gate.expires_at,
            }));
        }
        // A stage's set is planned on the merge commit when the apply run
        // reaches it; there is nothing of it to approve before that.
        return Ok(Said::Refused(Refusal::StageNotPlannedYet {
            stage: StageName::new(stage),
            wave,
        }));
    }
    let binding = FactData::at_plan(&plan.head_sha, &plan.base_sha);
    let at = (GateId::Pr(comment.pr), digest, binding);
    judge_approval(
        (store, forge),
        (comment.pr, &plan.head_sha, comment),
        &policy,
        at,
    )
    .await
}

/// Checks the commenter against the base `policy` and records their
/// approval of `digest` at `gate` with `data`, or the refusal and why.
async fn judge_approval(
    (store, forge): (&Store, Forge<'_>),
    (pr, head, comment): (PrNumber, &CommitSha, &CommentIn<'_>),
    policy: &Policy,
    (gate, digest, data): (GateId, Digest, FactData),
) -> Result<Said> {
    let (refused, said) =
        match judge_approver((store, forge), (pr, head), comment.author, policy).await? {
            Approver::May => (None, Said::Done),
            Approver::MayNot(why) => (
                Some(why.to_string()),
                Said::Refused(Refusal::NotAllowed(why)),
            ),
            Approver::Unknown(error) => {
                return Ok(Said::Refused(Refusal::PermissionUnknown {
                    error: format!("{error:#}"),
                }))
            }
        };
    let by = (comment.author, Source::Comment { id: comment.id });
    record_approval((store, &forge.repo.id), &gate, (&digest, data), refused, by).await?;
    Ok(said)
}

/// `/revoke`: the commenter's own approvals, of any plan, at the change's
/// gate and every stage gate; a repository admin's withdraws everyone's
/// approval of the current plan as well.
async fn revoke(
    (store, forge, mirror): (&Store, Forge<'_>, &Mirror<'_>),
    comment: &CommentIn<'_>,
) -> Result<Said> {
    let repo_key = forge.repo.id.ledger_key();
    let plan = store.latest_plan(&forge.repo.id, comment.pr).await?;
    let mut gates = vec![GateId::Pr(comment.pr)];
    if let Some(plan) = &plan {
        gates.extend(
            mirror
                .base_rules(&plan.base_sha)
                .await?
                .stages()
                .iter()
                .map(|stage| GateId::of(comment.pr, Some(stage.as_str()))),
        );
    }
    if let Some(run) = store.apply_run(&forge.repo.id, comment.pr).await? {
        // The gates of waves of stages approved wave by wave.
        let waves = run.record.stages.values().map(|g| &g.gate);
        gates.extend(waves.filter(|g| matches!(g, GateId::Wave(..))).cloned());
        gates.extend(run.record.rounds.iter().map(|r| r.gate.clone()));
        gates.push(GateId::Override(comment.pr));
        // The gates of hooks' failures and holds, approved or waiting.
        let hook_gates = run.record.hooks.iter().filter_map(|h| match &h.state {
            HookState::Held { gate, .. } | HookState::Approved { gate, .. } => Some(gate),
            _ => None,
        });
        for gate in hook_gates.chain(match &run.record.wait {
            Some(Wait::Hook { gate, .. }) => Some(gate),
            _ => None,
        }) {
            if !gates.contains(gate) {
                gates.push(gate.clone());
            }
        }
    }
    let admin = forge
        .client
        .permission(forge.repo, &comment.author.login)
        .await
        .is_ok_and(|p| p == Permission::Admin);
    let source = Source::Comment { id: comment.id };
    let current = plan.as_ref().and_then(|p| {
        let binding = FactData::at_plan(&p.head_sha, &p.base_sha);
        Some((p.digest.clone()?, binding))
    });
    let admin_over = current
        .as_ref()
        .filter(|_| admin)
        .map(|(digest, binding)| (digest, binding));
    let mut revoked = false;
    for gate in &gates {
        let facts = store.gate_facts(&repo_key, gate).await?;
        for withdrawal in counting::revoke(&facts, comment.author.id, admin_over) {
            let revoke = (FactKind::Revoked, withdrawal.digest, withdrawal.data);
            record_fact(
                store,
                &forge.repo.id,
                gate,
                revoke,
                (comment.author, source.clone()),
            )
            .await?;
            revoked = true;
        }
    }
    Ok(if revoked {
        Said::Done
    } else {
        Said::Refused(Refusal::NothingToRevoke)
    })
}

/// `/approve` while the apply run waits at a stage gate or a round: binds
/// the digest the run posted (the same rules as the report's), checks the
/// approver against the base policy the run reads, and records the fact
/// at the run's gate.
async fn approve_run(
    (store, forge, mirror, queue): (&Store, Forge<'_>, &Mirror<'_>, Queue<'_>),
    comment: &CommentIn<'_>,
    (stage, wave): (Option<&str>, Option<u32>),
    named: Option<&commands::DigestRef>,
    run: &ApplyRunRecord,
) -> Result<Said> {
    let (gate, digest, waiting_stage) = match &run.record.wait {
        Some(Wait::Stage {
            stage,
            gate,
            digest,
        }) => (gate, digest, Some(stage.as_str())),
        Some(Wait::Hook {
            stage,
            gate,
            digest,
            ..
        }) => (gate, digest, Some(stage.as_str())),
        Some(Wait::Round {
            gate,
            digest,
            round,
        }) => (
            gate,
            digest,
            run.record
                .rounds
                .iter()
                .find(|r| r.number == *round)
                .map(|r| r.stage.as_str()),
        ),
        _ => return Ok(Said::Refused(Refusal::RunWaitsForNoApproval)),
    };
    // `/approve prod` approves the wave of prod the run waits at (its
    // digest is the one posted); `/approve prod wave 2` only wave 2.
    let waiting_wave = match gate {
        GateId::Wave(_, _, wave) => Some(*wave),
        _ => None,
    };
    let elsewhere = stage.is_some_and(|s| Some(s) != waiting_stage)
        || wave.is_some_and(|w| Some(w) != waiting_wave);
    if let Some(stage) = stage.filter(|_| elsewhere) {
        return Ok(Said::Refused(Refusal::RunWaitsElsewhere {
            gate: gate.clone(),
            waiting: waiting_stage.map(StageName::new),
            named: stage.to_owned(),
            named_wave: wave,
            digest: digest.clone(),
        }));
    }
    // Only the stage's own gate (or a wave's) expires; a round or a
    // hook waiting in a stage whose gate went through does not.
    let at_stage_gate = matches!(run.record.wait, Some(Wait::Stage { .. }));
    if let Some(key) = gate.stage_gate_key().filter(|_| at_stage_gate) {
        let now = store.now();
        let expires_at = run.record.stages.get(&key).and_then(|g| g.expires_at);
        if expires_at.is_some_and(|at| now >= at) {
            // The run looks again and fails the stage, if it has not yet.
            enqueue_resume(queue, forge.repo, comment.pr).await?;
            return Ok(Said::Refused(Refusal::StageExpired {
                stage: key,
                at: expires_at,
            }));
        }
    }
    let seen = ReportSeen {
        head: run.merge_sha.as_str(),
        digest: Some(digest),
        posted_at: run.record.wait_posted_at,
    };
    let bound = match policy::bind(
        named,
        Some(&seen),
        run.merge_sha.as_str(),
        comment.written_at,
    ) {
        Ok(bound) => bound.to_owned(),
        Err(why) => {
            let line = run
                .record
                .wait
                .as_ref()
                .and_then(crate::report::apply::line_to_copy)
                .unwrap_or_else(|| format!("/approve {digest}"));
            return Ok(Said::Refused(Refusal::RunUnbound {
                why,
                stage: waiting_stage.map(StageName::new),
                line,
            }));
        }
    };
    let policy = match run_gate_policy(mirror, run, waiting_stage).await? {
        Ok(policy) => policy,
        Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
    };
    let at = (
        gate.clone(),
        bound,
        FactData::in_run(run.id, &run.merge_sha),
    );
    // The merged head's pusher is held to it at the run's gates too.
    let merged_head = match store.plan(run.plan_id).await? {
        Some(plan) => plan.head_sha,
        None => run.merge_sha.clone(),
    };
    judge_approval((store, forge), (run.pr, &merged_head, comment), &policy, at).await
}

/// `/retry`: a failed run starts over what stopped (planned again and
/// checked for coverage first); what applied stays applied. A running or
/// waiting run is nudged to look again.
async fn retry(
    (store, forge, queue): (&Store, Forge<'_>, Queue<'_>),
    comment: &CommentIn<'_>,
) -> Result<Said> {
    let Some(mut run) = store.apply_run(&forge.repo.id, comment.pr).await? else {
        return Ok(Said::Refused(Refusal::NoRunToRetry));
    };
    let can_write = forge
        .client
        .permission(forge.repo, &comment.author.login)
        .await
        .is_ok_and(|p| p.can_write());
    if !can_write || comment.author.is_bot {
        return Ok(Said::Refused(Refusal::RetryNeedsWrite));
    }
    match crate::apply::run::retry(&mut run.status, &mut run.record) {
        Retry::NothingLeft => return Ok(Said::Refused(Refusal::NothingLeftToRetry)),
        Retry::Restarted => store.save_apply_run(&run).await?,
        Retry::Nudged => {}
    }
    enqueue_resume(queue, forge.repo, comment.pr).await?;
    Ok(Said::Done)
}

/// `/override <member> <reason>`: lets the denied plan the run waits on
/// through, when the commenter is in the base policy's `overriders`.
async fn override_denial(
    (store, forge, mirror): (&Store, Forge<'_>, &Mirror<'_>),
    comment: &CommentIn<'_>,
    member: &str,
    reason: &str,
) -> Result<Said> {
    let gate = GateId::Override(comment.pr);
    let run = store.apply_run(&forge.repo.id, comment.pr).await?;
    let waited_on = run
        .as_ref()
        .and_then(|r| r.record.wait.as_ref())
        .map(Wait::denials)
        .unwrap_or_default()
        .into_iter()
        .find(|d| d.member == member);
    // What it lets through: the fresh plan a run waits on, or (during
    // review, or before the run reaches it) the plan the pull request
    // shows — which then counts at apply only if the fresh plan is it.
    let (digest, rules, base, for_run) = match (&run, waited_on) {
        (Some(run), Some(denial)) => (
            denial.digest,
            denial.rules,
            run.base_sha.clone(),
            Some(run.id),
        ),
        _ => {
            let Some((_, plan)) = shown_plan(store, &forge.repo.id, comment.pr).await? else {
                return Ok(Said::Refused(Refusal::NoPlanToOverride));
            };
            let set = plan
                .change_set()
                .context("reading the current plan's change set")?;
            let denied_plan = set
                .member(member)
                .and_then(|m| m.plan.as_ref())
                .filter(|p| !p.denied.is_empty())
                .map(|p| (p.plan_digest.clone(), p.denied_rules()));
            let denied_cost = || {
                set.costs
                    .iter()
                    .find(|c| c.member == member && !c.denied.is_empty())
                    .map(|c| (c.digest.clone(), c.denied.clone()))
            };
            let Some((digest, rules)) = denied_plan.or_else(denied_cost) else {
                return Ok(Said::Refused(Refusal::NotDenied {
                    member: member.to_owned(),
                }));
            };
            (digest, rules, plan.base_sha.clone(), None)
        }
    };
    let policy = match mirror.base_rules(&base).await?.policy() {
        Ok(policy) => policy,
        Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
    };
    let permission = forge
        .client
        .permission(forge.repo, &comment.author.login)
        .await;
    let mut teams = Vec::new();
    for team in policy::overrider_teams(&policy) {
        if forge
            .client
            .in_team(forge.repo, &team, &comment.author.login)
            .await?
        {
            teams.push(team);
        }
    }
    let who = Candidate {
        login: &comment.author.login,
        is_bot: comment.author.is_bot,
        can_write: permission.is_ok_and(|p| p.can_write()),
        teams: &teams,
    };
    let member = match member.parse() {
        Ok(member) => member,
        Err(why) => return Ok(Said::Refused(Refusal::NotAMember(why))),
    };
    let mut data = FactData {
        member: Some(member),
        reason: Some(reason.to_owned()),
        rules: Some(rules),
        run: for_run,
        ..FactData::default()
    };
    let source = Source::Comment { id: comment.id };
    let (kind, said) = match policy::may_override(&policy, &who) {
        Err(why) => {
            data.refused = Some(why.clone());
            (FactKind::Refused, Said::Refused(Refusal::NotOverrider(why)))
        }
        Ok(()) => (FactKind::Approved, Said::Done),
    };
    record_fact(
        store,
        &forge.repo.id,
        &gate,
        (kind, digest.into(), data),
        (comment.author, source),
    )
    .await?;
    Ok(said)
}
