//! Comment commands and reviews on a pull request: who said what, whether
//! they may, which digest it binds, the fact it leaves in the ledger, the
//! reactions and replies, and the report and check brought up to date.
//!
//! Every approval is of the digest the report showed, at the head and base it
//! was planned for: `policy::bind` is the only way to a digest here, and an
//! approval counts only while the plan it saw is the current one — a push or
//! a retarget that leaves the digest unchanged still needs a new approval,
//! because the commands that will apply it may have changed.

use super::Worker;
use crate::apply::run::Retry;
use crate::apply::Wait;
use crate::config::repo::Policy;
use crate::config::{RepoConfig, CONFIG_FILE};
use crate::forge::client::ForgeClient;
use crate::forge::types::{CheckReport, CheckState, Permission, Reaction};
use crate::forge::{RepoRef, ReviewState};
use crate::gate::commands::{self, Command};
use crate::gate::counting::{self, Evaluation, Scope, Tally};
use crate::gate::ledger::{Actor, FactData, FactKind, NewFact, Source};
use crate::gate::policy::{self, Candidate, ReportSeen};
use crate::git;
use crate::jobs::Task;
use crate::model::{CommitSha, GateId, MemberId, PrNumber, User};
use crate::report::approvals::{self, Standing};
use crate::report::refusal::{self, Refusal};
use crate::store::{ApplyRunRecord, JobOutcome, PlanRecord, PrRecord};
use anyhow::{Context, Result};

/// A comment as the command job carries it.
pub struct CommentIn<'a> {
    pub id: u64,
    pub author: &'a User,
    pub body: &'a str,
    pub written_at: Option<i64>,
}

/// A review as the review job carries it.
pub struct ReviewIn<'a> {
    pub id: u64,
    pub author: &'a User,
    pub state: ReviewState,
    pub commit: Option<&'a CommitSha>,
}

/// What became of one command.
enum Said {
    Done,
    Refused(Refusal),
}

/// How a pull request's own gate counts for `plan` (see [`Scope::Plan`]).
pub(super) fn plan_scope(plan: &PlanRecord, reviews_count: bool) -> Scope<'_> {
    Scope::Plan {
        head: &plan.head_sha,
        base: &plan.base_sha,
        reviews_count,
    }
}

impl Worker {
    pub(super) async fn handle_comment(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        comment: CommentIn<'_>,
    ) -> Result<JobOutcome> {
        if comment.author.is_bot || comment.author.login == client.bot_login().await? {
            return Ok(JobOutcome::Skipped("a bot's comment".into()));
        }
        let parsed = commands::parse(comment.body);
        if parsed.commands.is_empty() && parsed.unknown.is_empty() && parsed.errors.is_empty() {
            return Ok(JobOutcome::Skipped("no commands".into()));
        }
        self.fetch_gate_bases(client, repo, pr).await?;
        self.react(client, repo, comment.id, Reaction::Eyes).await;

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
                    client.reply(repo, pr, &commands::help_text()).await?;
                    Said::Done
                }
                Command::Plan => {
                    let closed = self.store.pr(&repo.id, pr).await?.is_some_and(|r| !r.open);
                    if closed {
                        Said::Refused(Refusal::ClosedNothingToPlan)
                    } else {
                        let replan = Task::Replan {
                            repo: repo.clone(),
                            pr,
                        };
                        self.store.enqueue(replan.into_job()).await?;
                        self.wake.notify_one();
                        Said::Done
                    }
                }
                Command::Approve { stage, digest } => {
                    let run = self.store.apply_run(&repo.id, pr).await?;
                    let at_run_gate = run.as_ref().is_some_and(|r| {
                        matches!(r.record.wait, Some(Wait::Stage { .. } | Wait::Round { .. }))
                    });
                    let said = match run {
                        Some(run) if at_run_gate => {
                            self.approve_run(
                                client,
                                repo,
                                &comment,
                                stage.as_deref(),
                                digest.as_ref(),
                                &run,
                            )
                            .await?
                        }
                        _ => {
                            self.approve(
                                client,
                                repo,
                                pr,
                                &comment,
                                stage.as_deref(),
                                digest.as_ref(),
                            )
                            .await?
                        }
                    };
                    gate_moved |= matches!(said, Said::Done) && !at_run_gate;
                    run_moved |= matches!(said, Said::Done);
                    said
                }
                Command::Revoke => {
                    let said = self.revoke(client, repo, pr, &comment).await?;
                    gate_moved |= matches!(said, Said::Done);
                    said
                }
                Command::Retry => self.retry(client, repo, pr, &comment).await?,
                Command::Override { member, reason } => {
                    let said = self
                        .override_denial(client, repo, pr, &comment, member, reason)
                        .await?;
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
            self.refresh_gate(client, repo, pr).await?;
        }
        if run_moved {
            self.resume_if_waiting(repo, pr).await?;
        }
        if done > 0 {
            self.react(client, repo, comment.id, Reaction::Rocket).await;
        }
        if !refusals.is_empty() {
            self.react(client, repo, comment.id, Reaction::Confused)
                .await;
            let body = refusal::reply(&comment.author.login, &refusals);
            client.reply(repo, pr, &body).await?;
        }
        Ok(JobOutcome::Done)
    }

    /// Reactions are a courtesy: a deleted comment must not fail the job.
    async fn react(&self, client: &ForgeClient, repo: &RepoRef, comment: u64, reaction: Reaction) {
        if let Err(error) = client.react(repo, comment, reaction).await {
            tracing::warn!(
                comment,
                "could not react with {}: {error:#}",
                reaction.as_str()
            );
        }
    }

    /// A review: an approving review (when the base's policy counts reviews)
    /// approves the digest reported for its commit; a dismissed review
    /// withdraws whatever that review approved.
    pub(super) async fn handle_review(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        review: ReviewIn<'_>,
    ) -> Result<JobOutcome> {
        let gate = GateId::Pr(pr).to_string();
        let actor = Actor {
            id: review.author.id,
            login: review.author.login.clone(),
        };
        let run = self.store.apply_run(&repo.id, pr).await?;
        if review.state == ReviewState::Dismissed {
            // What the review approved: the pull request, or a run's gate.
            let mut gates = vec![gate.clone()];
            if let Some(run) = &run {
                gates.extend(run.record.stages.values().map(|g| g.gate.clone()));
                gates.extend(run.record.rounds.iter().map(|r| r.gate.clone()));
            }
            let mut revoked = false;
            for gate in &gates {
                let facts = self.store.gate_facts(&repo.id.ledger_key(), gate).await?;
                let approved = facts.iter().rev().find(|f| {
                    f.fact.kind == FactKind::Approved
                        && f.fact.source == Source::Review { id: review.id }
                        && f.fact.actor.id == review.author.id
                });
                let Some(approved) = approved.cloned() else {
                    continue;
                };
                let data = approved.fact.data.clone().with_reason("review dismissed");
                let revoke = (FactKind::Revoked, approved.fact.digest.as_str(), data);
                let source = Source::Review { id: review.id };
                self.record(repo, gate, revoke, actor.clone(), source)
                    .await?;
                revoked = true;
            }
            if !revoked {
                return Ok(JobOutcome::Skipped(
                    "the dismissed review approved nothing".into(),
                ));
            }
            self.refresh_gate(client, repo, pr).await?;
            return Ok(JobOutcome::Done);
        }
        if review.state != ReviewState::Approved {
            return Ok(JobOutcome::Skipped(
                "a review that neither approves nor dismisses".into(),
            ));
        }
        if let Some(run) = run.filter(|r| run_gate(r).is_some()) {
            return self.review_at_run_gate(client, repo, &review, &run).await;
        }
        let Some((record, plan)) = self.current(repo, pr).await? else {
            return Ok(JobOutcome::Skipped("no current plan to approve".into()));
        };
        let policy = match self.base_policy(repo, &plan.base_sha).await? {
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
        let verdict = match self.candidate(client, repo, review.author, &policy).await {
            Ok(who) => {
                let pr_author = client.pull_request(repo, pr).await?.author.login;
                let authors = policy::Authors {
                    author: &pr_author,
                    pusher: record.pusher_of(&plan.head_sha),
                };
                policy::may_approve(&policy, authors, &who.as_candidate())
                    .map_err(|w| w.to_string())
            }
            Err(error) => Err(format!(
                "wavegate could not check the reviewer's permission: {error:#}"
            )),
        };
        let mut data = FactData::at_plan(&plan.head_sha, &plan.base_sha);
        let kind = match verdict {
            Ok(()) => FactKind::Approved,
            Err(reason) => {
                data.reason = Some(reason);
                FactKind::Refused
            }
        };
        self.record(
            repo,
            &gate,
            (kind, &digest, data),
            actor,
            Source::Review { id: review.id },
        )
        .await?;
        self.refresh_gate(client, repo, pr).await?;
        if kind == FactKind::Approved {
            self.resume_if_waiting(repo, pr).await?;
        }
        Ok(JobOutcome::Done)
    }

    /// An approving review while the apply run waits at a stage gate or a
    /// round: it approves the digest the run waits for, when that stage's
    /// policy on the base counts reviews and the review is of the merged head.
    async fn review_at_run_gate(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        review: &ReviewIn<'_>,
        run: &ApplyRunRecord,
    ) -> Result<JobOutcome> {
        let Some((gate, digest, stage)) = run_gate(run) else {
            return Ok(JobOutcome::Skipped("the run waits for no approval".into()));
        };
        let Some(merged) = self.store.plan(run.plan_id).await? else {
            return Ok(JobOutcome::Skipped("the run's plan is gone".into()));
        };
        if review.commit != Some(&merged.head_sha) {
            return Ok(JobOutcome::Skipped(
                "the review is not of the merged head".into(),
            ));
        }
        let policy = match self.run_gate_policy(repo, run, stage.as_deref()).await? {
            Ok(policy) if policy.review_approvals => policy,
            Ok(_) => {
                return Ok(JobOutcome::Skipped(
                    "review approvals are off for this stage".into(),
                ))
            }
            Err(why) => return Ok(JobOutcome::Skipped(why)),
        };
        let verdict = match self.candidate(client, repo, review.author, &policy).await {
            Ok(who) => {
                let pr_author = client.pull_request(repo, run.pr).await?.author.login;
                let record = self.store.pr(&repo.id, run.pr).await?;
                let authors = policy::Authors {
                    author: &pr_author,
                    pusher: record.as_ref().and_then(|r| r.pusher_of(&merged.head_sha)),
                };
                policy::may_approve(&policy, authors, &who.as_candidate())
                    .map_err(|w| w.to_string())
            }
            Err(error) => Err(format!(
                "wavegate could not check the reviewer's permission: {error:#}"
            )),
        };
        let mut data = FactData::in_run(run.id, &run.merge_sha);
        let kind = match verdict {
            Ok(()) => FactKind::Approved,
            Err(reason) => {
                data.reason = Some(reason);
                FactKind::Refused
            }
        };
        let actor = Actor {
            id: review.author.id,
            login: review.author.login.clone(),
        };
        let source = Source::Review { id: review.id };
        self.record(repo, &gate, (kind, &digest, data), actor, source)
            .await?;
        if kind == FactKind::Approved {
            self.resume_if_waiting(repo, run.pr).await?;
        }
        Ok(JobOutcome::Done)
    }

    /// The policy a run's gate is judged by: the base's `[policy]`, with the
    /// stage's own `approvers`, `required` and `review_approvals` from the
    /// base's `[[stage]]` entry. The same two kinds of failure as `base_policy`.
    async fn run_gate_policy(
        &self,
        repo: &RepoRef,
        run: &ApplyRunRecord,
        stage: Option<&str>,
    ) -> Result<Result<Policy, String>> {
        let rules = self.base_rules(repo, &run.base_sha).await?;
        Ok(rules.policy().map(|policy| match stage {
            Some(stage) => rules.stage_policy(&policy, stage),
            None => policy,
        }))
    }

    async fn approve(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        comment: &CommentIn<'_>,
        stage: Option<&str>,
        named: Option<&commands::DigestRef>,
    ) -> Result<Said> {
        let record = self.store.pr(&repo.id, pr).await?;
        let plan = self.store.latest_plan(&repo.id, pr).await?;
        let seen = record.as_ref().and_then(|r| {
            Some(ReportSeen {
                head: r.report_head.as_ref()?.as_str(),
                digest: r.report_digest.as_deref(),
                posted_at: plan
                    .as_ref()
                    .filter(|p| Some(&p.head_sha) == r.report_head.as_ref())
                    .map_or(i64::MAX, |p| p.created_at),
            })
        });
        let head_now = record.as_ref().map_or("", |r| r.head_sha.as_str());
        let digest = match policy::bind(named, seen.as_ref(), head_now, comment.written_at) {
            Ok(digest) => digest.to_owned(),
            Err(why) => return Ok(Said::Refused(Refusal::Unbound(why))),
        };
        let Some(plan) = plan.filter(|p| p.digest.as_deref() == Some(digest.as_str())) else {
            return Ok(Said::Refused(Refusal::Unbound(policy::Unbound::NoReport)));
        };
        let policy = match self.base_policy(repo, &plan.base_sha).await? {
            Ok(policy) => policy,
            Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
        };
        if let Some(stage) = stage {
            let stages = self.base_stages(repo, &plan.base_sha).await?;
            if !stages.iter().any(|s| s == stage) {
                return Ok(Said::Refused(Refusal::NotAStage {
                    stage: stage.to_owned(),
                    stages,
                }));
            }
            let expired = self
                .store
                .apply_run(&repo.id, pr)
                .await?
                .and_then(|run| run.record.stages.get(stage).cloned())
                .filter(|gate| gate.expired);
            if let Some(gate) = expired {
                return Ok(Said::Refused(Refusal::StageExpired {
                    stage: stage.to_owned(),
                    at: gate.expires_at,
                }));
            }
            // A stage's set is planned on the merge commit when the apply run
            // reaches it; there is nothing of it to approve before that.
            return Ok(Said::Refused(Refusal::StageNotPlannedYet {
                stage: stage.to_owned(),
            }));
        }
        let binding = FactData::at_plan(&plan.head_sha, &plan.base_sha);
        let at = (GateId::Pr(pr).to_string(), digest, binding);
        self.judge_approval(client, repo, (pr, &plan.head_sha, comment), &policy, at)
            .await
    }

    /// Checks the commenter against the base `policy` and records their
    /// approval of `digest` at `gate` with `data`, or the refusal and why.
    async fn judge_approval(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        (pr, head, comment): (PrNumber, &CommitSha, &CommentIn<'_>),
        policy: &Policy,
        (gate, digest, mut data): (String, String, FactData),
    ) -> Result<Said> {
        let who = match self.candidate(client, repo, comment.author, policy).await {
            Ok(who) => who,
            Err(error) => {
                return Ok(Said::Refused(Refusal::PermissionUnknown {
                    error: format!("{error:#}"),
                }))
            }
        };
        let pr_author = client.pull_request(repo, pr).await?.author.login;
        let record = self.store.pr(&repo.id, pr).await?;
        let authors = policy::Authors {
            author: &pr_author,
            pusher: record.as_ref().and_then(|r| r.pusher_of(head)),
        };
        let actor = Actor {
            id: comment.author.id,
            login: comment.author.login.clone(),
        };
        let source = Source::Comment { id: comment.id };
        let (kind, said) = match policy::may_approve(policy, authors, &who.as_candidate()) {
            Ok(()) => (FactKind::Approved, Said::Done),
            Err(why) => {
                data.reason = Some(why.to_string());
                (FactKind::Refused, Said::Refused(Refusal::NotAllowed(why)))
            }
        };
        self.record(repo, &gate, (kind, &digest, data), actor, source)
            .await?;
        Ok(said)
    }

    /// `/revoke`: the commenter's own approvals, of any plan, at the change's
    /// gate and every stage gate; a repository admin's withdraws everyone's
    /// approval of the current plan as well.
    async fn revoke(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        comment: &CommentIn<'_>,
    ) -> Result<Said> {
        let repo_key = repo.id.ledger_key();
        let plan = self.store.latest_plan(&repo.id, pr).await?;
        let mut gates = vec![GateId::Pr(pr).to_string()];
        if let Some(plan) = &plan {
            gates.extend(
                self.base_stages(repo, &plan.base_sha)
                    .await?
                    .iter()
                    .map(|stage| GateId::of(pr, Some(stage)).to_string()),
            );
        }
        if let Some(run) = self.store.apply_run(&repo.id, pr).await? {
            gates.extend(run.record.rounds.iter().map(|r| r.gate.clone()));
            gates.push(GateId::Override(pr).to_string());
        }
        let admin = client
            .permission(repo, &comment.author.login)
            .await
            .is_ok_and(|p| p == Permission::Admin);
        let actor = Actor {
            id: comment.author.id,
            login: comment.author.login.clone(),
        };
        let source = Source::Comment { id: comment.id };
        let current = plan.as_ref().and_then(|p| {
            let binding = FactData::at_plan(&p.head_sha, &p.base_sha);
            Some((p.digest.clone()?, binding))
        });
        let admin_over = current
            .as_ref()
            .filter(|_| admin)
            .map(|(digest, binding)| (digest.as_str(), binding));
        let mut revoked = false;
        for gate in &gates {
            let facts = self.store.gate_facts(&repo_key, gate).await?;
            for withdrawal in counting::revoke(&facts, comment.author.id, admin_over) {
                let revoke = (
                    FactKind::Revoked,
                    withdrawal.digest.as_str(),
                    withdrawal.data,
                );
                self.record(repo, gate, revoke, actor.clone(), source.clone())
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
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        comment: &CommentIn<'_>,
        stage: Option<&str>,
        named: Option<&commands::DigestRef>,
        run: &ApplyRunRecord,
    ) -> Result<Said> {
        let (gate, digest, waiting_stage) = match &run.record.wait {
            Some(Wait::Stage {
                stage,
                gate,
                digest,
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
        if let Some(stage) = stage.filter(|s| Some(*s) != waiting_stage) {
            return Ok(Said::Refused(Refusal::RunWaitsElsewhere {
                gate: gate.clone(),
                waiting: waiting_stage.map(str::to_owned),
                named: stage.to_owned(),
                digest: digest.clone(),
            }));
        }
        if let Some(stage) = waiting_stage {
            let now = chrono::Utc::now().timestamp_millis();
            let expires_at = run.record.stages.get(stage).and_then(|g| g.expires_at);
            if expires_at.is_some_and(|at| now >= at) {
                // The run looks again and fails the stage, if it has not yet.
                self.enqueue_resume(repo, run.pr).await?;
                return Ok(Said::Refused(Refusal::StageExpired {
                    stage: stage.to_owned(),
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
            Err(why) => return Ok(Said::Refused(Refusal::Unbound(why))),
        };
        let policy = match self.run_gate_policy(repo, run, waiting_stage).await? {
            Ok(policy) => policy,
            Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
        };
        let at = (
            gate.clone(),
            bound,
            FactData::in_run(run.id, &run.merge_sha),
        );
        // The merged head's pusher is held to it at the run's gates too.
        let merged_head = match self.store.plan(run.plan_id).await? {
            Some(plan) => plan.head_sha,
            None => run.merge_sha.clone(),
        };
        self.judge_approval(client, repo, (run.pr, &merged_head, comment), &policy, at)
            .await
    }

    /// `/retry`: a failed run starts over what stopped (planned again and
    /// checked for coverage first); what applied stays applied. A running or
    /// waiting run is nudged to look again.
    async fn retry(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        comment: &CommentIn<'_>,
    ) -> Result<Said> {
        let Some(mut run) = self.store.apply_run(&repo.id, pr).await? else {
            return Ok(Said::Refused(Refusal::NoRunToRetry));
        };
        let can_write = client
            .permission(repo, &comment.author.login)
            .await
            .is_ok_and(|p| p.can_write());
        if !can_write || comment.author.is_bot {
            return Ok(Said::Refused(Refusal::RetryNeedsWrite));
        }
        match crate::apply::run::retry(&mut run.status, &mut run.record) {
            Retry::NothingLeft => return Ok(Said::Refused(Refusal::NothingLeftToRetry)),
            Retry::Restarted => self.store.save_apply_run(&run).await?,
            Retry::Nudged => {}
        }
        self.enqueue_resume(repo, pr).await?;
        Ok(Said::Done)
    }

    /// `/override <member> <reason>`: lets the denied plan the run waits on
    /// through, when the commenter is in the base policy's `overriders`.
    async fn override_denial(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        comment: &CommentIn<'_>,
        member: &str,
        reason: &str,
    ) -> Result<Said> {
        let gate = GateId::Override(pr).to_string();
        let run = self.store.apply_run(&repo.id, pr).await?;
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
                let Some((_, plan)) = self.current(repo, pr).await? else {
                    return Ok(Said::Refused(Refusal::NoPlanToOverride));
                };
                let set: crate::plan::changeset::ChangeSet =
                    serde_json::from_value(plan.change_set.clone())
                        .context("reading the current plan's change set")?;
                let denied = set
                    .member(member)
                    .and_then(|m| m.plan.as_ref())
                    .filter(|p| !p.denied.is_empty());
                let Some(denied) = denied else {
                    return Ok(Said::Refused(Refusal::NotDenied {
                        member: member.to_owned(),
                    }));
                };
                (
                    denied.plan_digest.clone(),
                    denied.denied.clone(),
                    plan.base_sha.clone(),
                    None,
                )
            }
        };
        let policy = match self.base_policy(repo, &base).await? {
            Ok(policy) => policy,
            Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
        };
        let permission = client.permission(repo, &comment.author.login).await;
        let mut teams = Vec::new();
        for team in policy::overrider_teams(&policy) {
            if client.in_team(repo, &team, &comment.author.login).await? {
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
        let actor = Actor {
            id: comment.author.id,
            login: comment.author.login.clone(),
        };
        let source = Source::Comment { id: comment.id };
        if let Err(why) = policy::may_override(&policy, &who) {
            data.refused = Some(why.clone());
            self.record(
                repo,
                &gate,
                (FactKind::Refused, &digest, data),
                actor,
                source,
            )
            .await?;
            return Ok(Said::Refused(Refusal::NotOverrider(why)));
        }
        self.record(
            repo,
            &gate,
            (FactKind::Approved, &digest, data),
            actor,
            source,
        )
        .await?;
        Ok(Said::Done)
    }

    async fn record(
        &self,
        repo: &RepoRef,
        gate: &str,
        (kind, digest, data): (FactKind, &str, FactData),
        actor: Actor,
        source: Source,
    ) -> Result<()> {
        self.store
            .append_fact(NewFact {
                repo: repo.id.ledger_key(),
                gate: gate.to_owned(),
                kind,
                digest: digest.to_owned(),
                actor,
                at: chrono::Utc::now().timestamp_millis(),
                source,
                data,
            })
            .await
            .with_context(|| format!("recording a {kind:?} fact at gate {gate}"))?;
        Ok(())
    }

    /// The pull request's record and the plan its report shows, when that
    /// report is for the current head and waits at its gate.
    async fn current(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<Option<(PrRecord, PlanRecord)>> {
        let record = self.store.pr(&repo.id, pr).await?;
        let plan = self.store.latest_plan(&repo.id, pr).await?;
        Ok(match (record, plan) {
            (Some(record), Some(plan))
                if record.head_sha == plan.head_sha
                    && record.report_head.as_ref() == Some(&plan.head_sha)
                    && record.report_digest.is_some()
                    && record.report_digest == plan.digest
                    && record.report_status.as_deref() != Some("refused") =>
            {
                Some((record, plan))
            }
            _ => None,
        })
    }

    pub(super) async fn candidate(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        who: &User,
        policy: &Policy,
    ) -> Result<Who> {
        let permission = client.permission(repo, &who.login).await?;
        let mut teams = Vec::new();
        for team in policy::approver_teams(policy) {
            if client.in_team(repo, &team, &who.login).await? {
                teams.push(team);
            }
        }
        Ok(Who {
            login: who.login.clone(),
            is_bot: who.is_bot,
            can_write: permission.can_write(),
            teams,
        })
    }

    /// Makes sure the mirror holds the commits this pull request's gates
    /// are judged at (its current plan's base and head, its apply run's
    /// base): a
    /// replica that never planned it, or a data dir started afresh, has
    /// neither, and a gate must never be judged without its base.
    pub(super) async fn fetch_gate_bases(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<()> {
        let plan = self.store.latest_plan(&repo.id, pr).await?;
        let run = self.store.apply_run(&repo.id, pr).await?;
        let commits = plan
            .map(|p| [p.base_sha, p.head_sha])
            .into_iter()
            .flatten()
            .chain(run.map(|r| r.base_sha));
        for commit in commits {
            self.fetch_commit(client, repo, &commit)
                .await
                .with_context(|| {
                    format!(
                        "fetching the commit {} this pull request's gates are judged at",
                        commit.short()
                    )
                })?;
        }
        Ok(())
    }

    /// The base branch's `[policy]`: the default when the base has no
    /// `wavegate.toml`, and no approvals at all when it has one that cannot
    /// be read (a broken file must not mean the loosest policy).
    /// The base branch's policy, the default when it has no config. Two
    /// kinds of failure: the repository's (a config that does not parse:
    /// `Ok(Err(why))`, said on the pull request) and ours (git could not
    /// read it: `Err`, the job's attempt fails and is retried). Neither
    /// ever approves by a default.
    pub(super) async fn base_policy(
        &self,
        repo: &RepoRef,
        base: &CommitSha,
    ) -> Result<Result<Policy, String>> {
        Ok(self.base_rules(repo, base).await?.policy())
    }

    /// The stages of the base branch's config (none when it has no readable
    /// one); an error when git could not read it.
    async fn base_stages(&self, repo: &RepoRef, base: &CommitSha) -> Result<Vec<String>> {
        Ok(self.base_rules(repo, base).await?.stages())
    }

    /// The config at `commit`: `None` when it has none or it does not parse;
    /// an error when git could not read it.
    fn config_at(&self, repo: &RepoRef, commit: &CommitSha) -> Result<Option<RepoConfig>> {
        let mirror = self.workspace.mirror_path(&repo.id);
        let text = git::read_file(&mirror, commit.as_str(), CONFIG_FILE)
            .with_context(|| format!("reading {CONFIG_FILE} at {}", commit.short()))?;
        Ok(text.and_then(|t| RepoConfig::parse(CONFIG_FILE, &t).ok()))
    }

    /// Brings the report's approvals section and the check up to date with
    /// the ledger, for the plan the report shows.
    pub(super) async fn refresh_gate(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<()> {
        if let Some(mut run) = self.store.apply_run(&repo.id, pr).await? {
            // After merge the report follows the run.
            if let Some(plan) = self.store.plan(run.plan_id).await? {
                return self.publish_run(client, &mut run, &plan).await;
            }
        }
        let Some((record, plan)) = self.current(repo, pr).await? else {
            return Ok(());
        };
        let failed = record.report_status.as_deref() == Some("failed");
        self.publish_gate(client, repo, pr, &plan, failed, record.check_id)
            .await
    }

    /// Posts `plan`'s report with its approvals section, and the check that
    /// says where the gate stands.
    pub(super) async fn publish_gate(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        plan: &PlanRecord,
        failed: bool,
        check_id: Option<u64>,
    ) -> Result<()> {
        let Some(digest) = plan.digest.clone() else {
            return Ok(());
        };
        let policy = self.base_policy(repo, &plan.base_sha).await?;
        let facts = self
            .store
            .gate_facts(&repo.id.ledger_key(), &GateId::Pr(pr).to_string())
            .await?;
        let reviews_count = policy.as_ref().is_ok_and(|p| p.review_approvals);
        let tally = Tally::new(&facts, plan_scope(plan, reviews_count));
        // Approvals of this digest older than `approval_ttl` no longer count.
        let ttl_ms = policy.as_ref().ok().and_then(Policy::approval_ttl_ms);
        let now = chrono::Utc::now().timestamp_millis();
        let required = policy.as_ref().map_or(1, |p| p.required.max(1) as usize);
        let mut counted = tally.count(&digest, required, ttl_ms, now);
        if policy.is_err() {
            // A base policy that cannot be read approves nothing.
            counted.evaluation = Evaluation::Waiting {
                have: Vec::new(),
                count: 0,
                required,
            };
        }
        if !failed && !matches!(counted.evaluation, Evaluation::Satisfied { .. }) {
            let members: Vec<String> = plan.change_set["members"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["member"].as_str().map(str::to_owned))
                .collect();
            let description = format!(
                "pull request {pr} waits for an approval of its change set at {} ({} member{})",
                plan.head_sha.short(),
                members.len(),
                if members.len() == 1 { "" } else { "s" }
            );
            self.record_pending(
                client,
                repo,
                &GateId::Pr(pr).to_string(),
                &digest,
                &members,
                description,
            )
            .await?;
        }
        let ledger_head = self.store.ledger_head(&repo.id.ledger_key()).await?;
        let standing = Standing {
            counted,
            ledger_head,
            ttl_ms,
            policy_changed: match &policy {
                Ok(base) => self
                    .config_at(repo, &plan.head_sha)?
                    .is_some_and(|head| head.policy != *base),
                Err(_) => false,
            },
        };
        let body = approvals::appended(
            &plan.report,
            &standing,
            &digest,
            policy.as_ref().err().map(String::as_str),
        );
        let (state, status) = match (failed, standing.satisfied()) {
            (true, _) => (CheckState::Failure, "failed"),
            (false, true) => (CheckState::Success, "approved"),
            (false, false) => (CheckState::ActionRequired, "awaiting-approval"),
        };
        let title = if failed {
            format!("A member failed to plan; {}", standing.title(&digest))
        } else {
            standing.title(&digest)
        };
        let report = CheckReport {
            name: crate::forge::types::CHECK_NAME,
            state,
            title,
            summary: body,
            details_url: None,
        };
        let commit = (pr, &plan.head_sha);
        self.publish(client, repo, commit, check_id, report, Some(digest), status)
            .await
    }
}

impl Worker {
    /// Appends one `pending` fact when `gate` starts waiting for `digest`
    /// (what is asked, of whom: the members, and since when), once per gate
    /// and digest however often the wait is looked at again.
    pub(super) async fn record_pending(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        gate: &str,
        digest: &str,
        members: &[String],
        description: String,
    ) -> Result<()> {
        let repo_key = repo.id.ledger_key();
        let facts = self.store.gate_facts(&repo_key, gate).await?;
        if facts
            .iter()
            .any(|f| f.fact.kind == FactKind::Pending && f.fact.digest == digest)
        {
            return Ok(());
        }
        let members = members
            .iter()
            .map(|m| m.parse())
            .collect::<Result<Vec<MemberId>, String>>()
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("the members gate {gate} waits on"))?;
        self.store
            .append_fact(NewFact {
                repo: repo_key,
                gate: gate.to_owned(),
                kind: FactKind::Pending,
                digest: digest.to_owned(),
                actor: Actor {
                    id: 0,
                    login: client.bot_login().await?,
                },
                at: chrono::Utc::now().timestamp_millis(),
                source: Source::Wavegate,
                data: FactData {
                    members: Some(members),
                    description: Some(description),
                    ..FactData::default()
                },
            })
            .await?;
        Ok(())
    }
}

/// The gate a run waits at for a person's approval: its name, the digest,
/// and the stage it belongs to (a round's stage).
fn run_gate(run: &ApplyRunRecord) -> Option<(String, String, Option<String>)> {
    match run.record.wait.as_ref()? {
        Wait::Stage {
            stage,
            gate,
            digest,
        } => Some((gate.clone(), digest.clone(), Some(stage.clone()))),
        Wait::Round {
            gate,
            digest,
            round,
        } => Some((
            gate.clone(),
            digest.clone(),
            run.record
                .rounds
                .iter()
                .find(|r| r.number == *round)
                .map(|r| r.stage.clone()),
        )),
        _ => None,
    }
}

/// A candidate's facts, owned (the policy borrows them).
#[derive(Debug, Clone)]
pub(super) struct Who {
    login: String,
    is_bot: bool,
    can_write: bool,
    teams: Vec<String>,
}

impl Who {
    pub(super) fn as_candidate(&self) -> Candidate<'_> {
        Candidate {
            login: &self.login,
            is_bot: self.is_bot,
            can_write: self.can_write,
            teams: &self.teams,
        }
    }
}
