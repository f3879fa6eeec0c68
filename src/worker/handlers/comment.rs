//! Comment commands on a pull request: who said what, whether they may,
//! which digest it binds, the fact it leaves in the ledger, the reactions
//! and the one reply that says what was refused and why.

use crate::apply::hooks::HookState;
use crate::apply::run::Retry;
use crate::apply::Wait;
use crate::config::repo::Policy;
use crate::forge::types::{Permission, Reaction};
use crate::gate::commands::{self, Command};
use crate::gate::counting::{self};
use crate::gate::ledger::{Actor, FactData, FactKind, Source};
use crate::gate::policy::{self, Candidate, ReportSeen};
use crate::jobs::Task;
use crate::model::{CommitSha, Digest, GateId, PrNumber, User};
use crate::report::refusal::{self, Refusal};
use crate::store::{ApplyRunRecord, JobOutcome};
use crate::worker::ctx::JobCtx;
use anyhow::{Context, Result};

/// A comment as the command job carries it.
pub(crate) struct CommentIn<'a> {
    pub(crate) id: u64,
    pub(crate) author: &'a User,
    pub(crate) body: &'a str,
    pub(crate) written_at: Option<i64>,
}

/// What became of one command.
enum Said {
    Done,
    Refused(Refusal),
}

impl JobCtx<'_> {
    pub(in crate::worker) async fn handle_comment(
        &self,
        comment: CommentIn<'_>,
    ) -> Result<JobOutcome> {
        if comment.author.is_bot || comment.author.login == self.client.bot_login().await? {
            return Ok(JobOutcome::Skipped("a bot's comment".into()));
        }
        let parsed = commands::parse(comment.body);
        if parsed.commands.is_empty() && parsed.unknown.is_empty() && parsed.errors.is_empty() {
            return Ok(JobOutcome::Skipped("no commands".into()));
        }
        self.fetch_gate_bases().await?;
        self.react(comment.id, Reaction::Eyes).await;

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
                    self.client
                        .reply(self.repo, self.pr, &commands::help_text())
                        .await?;
                    Said::Done
                }
                Command::Plan { only } => {
                    let closed = self
                        .store
                        .pr(&self.repo.id, self.pr)
                        .await?
                        .is_some_and(|r| !r.open);
                    if closed {
                        Said::Refused(Refusal::ClosedNothingToPlan)
                    } else {
                        let replan = Task::Replan {
                            repo: self.repo.clone(),
                            pr: self.pr,
                            only: only.clone(),
                        };
                        self.store.enqueue(replan.into_job()).await?;
                        self.wake.notify_one();
                        Said::Done
                    }
                }
                Command::Approve {
                    stage,
                    wave,
                    digest,
                } => {
                    let run = self.store.apply_run(&self.repo.id, self.pr).await?;
                    let at_run_gate = run.as_ref().is_some_and(|r| {
                        matches!(
                            r.record.wait,
                            Some(Wait::Stage { .. } | Wait::Round { .. } | Wait::Hook { .. })
                        )
                    });
                    let said = match run {
                        Some(run) if at_run_gate => {
                            let named = (stage.as_deref(), *wave);
                            self.approve_run(&comment, named, digest.as_ref(), &run)
                                .await?
                        }
                        _ => {
                            let named = (stage.as_deref(), *wave);
                            self.approve(&comment, named, digest.as_ref()).await?
                        }
                    };
                    gate_moved |= matches!(said, Said::Done) && !at_run_gate;
                    run_moved |= matches!(said, Said::Done);
                    said
                }
                Command::Revoke => {
                    let said = self.revoke(&comment).await?;
                    gate_moved |= matches!(said, Said::Done);
                    said
                }
                Command::Retry => self.retry(&comment).await?,
                Command::Override { member, reason } => {
                    let said = self.override_denial(&comment, member, reason).await?;
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
            self.refresh_gate().await?;
        }
        if run_moved {
            self.resume_if_waiting().await?;
        }
        if done > 0 {
            self.react(comment.id, Reaction::Rocket).await;
        }
        if !refusals.is_empty() {
            self.react(comment.id, Reaction::Confused).await;
            let body = refusal::reply(&comment.author.login, &refusals);
            self.client.reply(self.repo, self.pr, &body).await?;
        }
        Ok(JobOutcome::Done)
    }

    /// Reactions are a courtesy: a deleted comment must not fail the job.
    async fn react(&self, comment: u64, reaction: Reaction) {
        if let Err(error) = self.client.react(self.repo, comment, reaction).await {
            tracing::warn!(
                comment,
                "could not react with {}: {error:#}",
                reaction.as_str()
            );
        }
    }

    async fn approve(
        &self,
        comment: &CommentIn<'_>,
        (stage, wave): (Option<&str>, Option<u32>),
        named: Option<&commands::DigestRef>,
    ) -> Result<Said> {
        let record = self.store.pr(&self.repo.id, self.pr).await?;
        let plan = self.store.latest_plan(&self.repo.id, self.pr).await?;
        let seen = record.as_ref().and_then(|r| {
            Some(ReportSeen {
                head: r.report_head.as_ref()?.as_str(),
                digest: r.report_digest.as_ref(),
                posted_at: plan
                    .as_ref()
                    .filter(|p| Some(&p.head_sha) == r.report_head.as_ref())
                    .map_or(i64::MAX, |p| p.created_at),
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
        let policy = match self.base_policy(&plan.base_sha).await? {
            Ok(policy) => policy,
            Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
        };
        if let Some(stage) = stage {
            let stages = self.base_stages(&plan.base_sha).await?;
            if !stages.iter().any(|s| s == stage) {
                return Ok(Said::Refused(Refusal::NotAStage {
                    stage: stage.to_owned(),
                    stages,
                }));
            }
            let expired = self
                .store
                .apply_run(&self.repo.id, self.pr)
                .await?
                .and_then(|run| {
                    // The stage's gate, or (approved wave by wave) the
                    // wave's named, or any of its waves' when none is.
                    run.record.stages.into_values().find(|gate| {
                        gate.expired
                            && gate.stage() == Some(stage)
                            && wave.is_none_or(|w| {
                                gate.gate == GateId::of_stage(self.pr, stage, Some(w))
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
                stage: stage.to_owned(),
                wave,
            }));
        }
        let binding = FactData::at_plan(&plan.head_sha, &plan.base_sha);
        let at = (GateId::Pr(self.pr), digest, binding);
        self.judge_approval((self.pr, &plan.head_sha, comment), &policy, at)
            .await
    }

    /// Checks the commenter against the base `policy` and records their
    /// approval of `digest` at `gate` with `data`, or the refusal and why.
    async fn judge_approval(
        &self,
        (pr, head, comment): (PrNumber, &CommitSha, &CommentIn<'_>),
        policy: &Policy,
        (gate, digest, mut data): (GateId, Digest, FactData),
    ) -> Result<Said> {
        let who = match self.candidate(comment.author, policy).await {
            Ok(who) => who,
            Err(error) => {
                return Ok(Said::Refused(Refusal::PermissionUnknown {
                    error: format!("{error:#}"),
                }))
            }
        };
        let pr_author = self.client.pull_request(self.repo, pr).await?.author.login;
        let record = self.store.pr(&self.repo.id, pr).await?;
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
        self.record(&gate, (kind, digest.into(), data), actor, source)
            .await?;
        Ok(said)
    }

    /// `/revoke`: the commenter's own approvals, of any plan, at the change's
    /// gate and every stage gate; a repository admin's withdraws everyone's
    /// approval of the current plan as well.
    async fn revoke(&self, comment: &CommentIn<'_>) -> Result<Said> {
        let repo_key = self.repo.id.ledger_key();
        let plan = self.store.latest_plan(&self.repo.id, self.pr).await?;
        let mut gates = vec![GateId::Pr(self.pr)];
        if let Some(plan) = &plan {
            gates.extend(
                self.base_stages(&plan.base_sha)
                    .await?
                    .iter()
                    .map(|stage| GateId::of(self.pr, Some(stage))),
            );
        }
        if let Some(run) = self.store.apply_run(&self.repo.id, self.pr).await? {
            // The gates of waves of stages approved wave by wave.
            let waves = run.record.stages.values().map(|g| &g.gate);
            gates.extend(waves.filter(|g| matches!(g, GateId::Wave(..))).cloned());
            gates.extend(run.record.rounds.iter().map(|r| r.gate.clone()));
            gates.push(GateId::Override(self.pr));
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
        let admin = self
            .client
            .permission(self.repo, &comment.author.login)
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
            .map(|(digest, binding)| (digest, binding));
        let mut revoked = false;
        for gate in &gates {
            let facts = self.store.gate_facts(&repo_key, gate).await?;
            for withdrawal in counting::revoke(&facts, comment.author.id, admin_over) {
                let revoke = (FactKind::Revoked, withdrawal.digest, withdrawal.data);
                self.record(gate, revoke, actor.clone(), source.clone())
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
                waiting: waiting_stage.map(str::to_owned),
                named: stage.to_owned(),
                named_wave: wave,
                digest: digest.clone(),
            }));
        }
        // Only the stage's own gate (or a wave's) expires; a round or a
        // hook waiting in a stage whose gate went through does not.
        let at_stage_gate = matches!(run.record.wait, Some(Wait::Stage { .. }));
        if let Some(key) = gate.stage_gate_key().filter(|_| at_stage_gate) {
            let now = self.store.now();
            let expires_at = run.record.stages.get(&key).and_then(|g| g.expires_at);
            if expires_at.is_some_and(|at| now >= at) {
                // The run looks again and fails the stage, if it has not yet.
                self.enqueue_resume().await?;
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
                    stage: waiting_stage.map(str::to_owned),
                    line,
                }));
            }
        };
        let policy = match self.run_gate_policy(run, waiting_stage).await? {
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
        self.judge_approval((run.pr, &merged_head, comment), &policy, at)
            .await
    }

    /// `/retry`: a failed run starts over what stopped (planned again and
    /// checked for coverage first); what applied stays applied. A running or
    /// waiting run is nudged to look again.
    async fn retry(&self, comment: &CommentIn<'_>) -> Result<Said> {
        let Some(mut run) = self.store.apply_run(&self.repo.id, self.pr).await? else {
            return Ok(Said::Refused(Refusal::NoRunToRetry));
        };
        let can_write = self
            .client
            .permission(self.repo, &comment.author.login)
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
        self.enqueue_resume().await?;
        Ok(Said::Done)
    }

    /// `/override <member> <reason>`: lets the denied plan the run waits on
    /// through, when the commenter is in the base policy's `overriders`.
    async fn override_denial(
        &self,
        comment: &CommentIn<'_>,
        member: &str,
        reason: &str,
    ) -> Result<Said> {
        let gate = GateId::Override(self.pr);
        let run = self.store.apply_run(&self.repo.id, self.pr).await?;
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
                let Some((_, plan)) = self.current().await? else {
                    return Ok(Said::Refused(Refusal::NoPlanToOverride));
                };
                let set: crate::plan::changeset::ChangeSet =
                    serde_json::from_value(plan.change_set.clone())
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
        let policy = match self.base_policy(&base).await? {
            Ok(policy) => policy,
            Err(why) => return Ok(Said::Refused(Refusal::BaseConfig(why))),
        };
        let permission = self
            .client
            .permission(self.repo, &comment.author.login)
            .await;
        let mut teams = Vec::new();
        for team in policy::overrider_teams(&policy) {
            if self
                .client
                .in_team(self.repo, &team, &comment.author.login)
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
        let actor = Actor {
            id: comment.author.id,
            login: comment.author.login.clone(),
        };
        let source = Source::Comment { id: comment.id };
        let (kind, said) = match policy::may_override(&policy, &who) {
            Err(why) => {
                data.refused = Some(why.clone());
                (FactKind::Refused, Said::Refused(Refusal::NotOverrider(why)))
            }
            Ok(()) => (FactKind::Approved, Said::Done),
        };
        self.record(&gate, (kind, digest.into(), data), actor, source)
            .await?;
        Ok(said)
    }
}
