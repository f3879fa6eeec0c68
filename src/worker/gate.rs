//! Comment commands and reviews on a pull request: who said what, whether
//! they may, which digest it binds, the fact it leaves in the ledger, the
//! reactions and replies, and the report and check brought up to date.
//!
//! Every approval is of the digest the report showed: `policy::bind` is the
//! only way to a digest here, and it only hands out the current report's.

use super::task::Task;
use super::Worker;
use crate::config::repo::Policy;
use crate::config::{RepoConfig, CONFIG_FILE};
use crate::forge::client::{CheckReport, CheckState, ForgeClient, Permission, Reaction};
use crate::forge::{CommitSha, PrNumber, RepoRef, ReviewState, User};
use crate::gate::commands::{self, Command};
use crate::gate::ledger::{self, Actor, FactKind, NewFact, Source};
use crate::gate::policy::{self, Candidate, ReportSeen};
use crate::plan::git;
use crate::report::approvals::{self, Stale, Standing};
use crate::store::{JobOutcome, PrReport};
use anyhow::{Context, Result};
use std::collections::BTreeMap;

/// The gate a pull request's change set waits at (`pr-42`), or a stage's (`pr-42-prod`).
pub fn gate_name(pr: PrNumber, stage: Option<&str>) -> String {
    match stage {
        Some(stage) => format!("pr-{}-{stage}", pr.0),
        None => format!("pr-{}", pr.0),
    }
}

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
    Refused(String),
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
        client.react(repo, comment.id, Reaction::Eyes).await?;

        let mut refusals = Vec::new();
        let mut done = 0;
        for error in &parsed.errors {
            refusals.push(format!(
                "`{}`: {}; {}",
                error.text.trim(),
                error.problem,
                error.fix
            ));
        }
        for word in &parsed.unknown {
            refusals.push(format!(
                "`{word}` is not a wavegate command.\n\n{}",
                commands::help_text()
            ));
        }
        let mut gate_moved = false;
        for command in &parsed.commands {
            let said = match command {
                Command::Help => {
                    client.reply(repo, pr, &commands::help_text()).await?;
                    Said::Done
                }
                Command::Plan => {
                    self.store
                        .enqueue(
                            Task::Replan {
                                repo: repo.clone(),
                                pr,
                            }
                            .into_job(),
                        )
                        .await?;
                    self.wake.notify_one();
                    Said::Done
                }
                Command::Approve { stage, digest } => {
                    let said = self
                        .approve(client, repo, pr, &comment, stage.as_deref(), digest.as_ref())
                        .await?;
                    gate_moved |= matches!(said, Said::Done);
                    said
                }
                Command::Revoke => {
                    let said = self.revoke(client, repo, pr, &comment).await?;
                    gate_moved |= matches!(said, Said::Done);
                    said
                }
                Command::Retry => Said::Refused(
                    "there is no apply run to retry: applies start after the pull request is merged".into(),
                ),
                Command::Override { member, .. } => Said::Refused(format!(
                    "`/override {member}` lets a plan the policy denied through an apply run; there is no apply run for this pull request yet"
                )),
            };
            match said {
                Said::Done => done += 1,
                Said::Refused(why) => refusals.push(why),
            }
        }
        if gate_moved {
            self.refresh_gate(client, repo, pr).await?;
        }
        if done > 0 {
            client.react(repo, comment.id, Reaction::Rocket).await?;
        }
        if !refusals.is_empty() {
            client.react(repo, comment.id, Reaction::Confused).await?;
            let body = format!("@{}: {}", comment.author.login, refusals.join("\n\n"));
            client.reply(repo, pr, &body).await?;
        }
        Ok(JobOutcome::Done)
    }

    /// A review: with `review_approvals` on the base, an approving review
    /// approves the digest planned for its commit (if that plan is current),
    /// and a dismissed review revokes what its author approved.
    pub(super) async fn handle_review(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        review: ReviewIn<'_>,
    ) -> Result<JobOutcome> {
        let ReviewIn {
            id: review_id,
            author,
            state,
            commit,
        } = review;
        let Some((record, plan)) = self.current(repo, pr).await? else {
            return Ok(JobOutcome::Skipped("nothing planned yet".into()));
        };
        let policy = self.base_policy(repo, &plan.base_sha);
        if !policy.review_approvals {
            return Ok(JobOutcome::Skipped("review approvals are off".into()));
        }
        let Some(digest) = plan.digest.clone() else {
            return Ok(JobOutcome::Skipped("the plan has no digest".into()));
        };
        let actor = Actor {
            id: author.id,
            login: author.login.clone(),
        };
        let gate = gate_name(pr, None);
        match state {
            ReviewState::Approved => {
                if commit != Some(&record.head_sha) || plan.head_sha != record.head_sha {
                    return Ok(JobOutcome::Skipped(
                        "the review is of an earlier commit".into(),
                    ));
                }
                let who = self.candidate(client, repo, author, &policy).await?;
                let pr_author = client.pull_request(repo, pr).await?.author.login;
                let (kind, data) =
                    match policy::may_approve(&policy, &pr_author, &who.as_candidate()) {
                        Ok(()) => (FactKind::Approved, serde_json::Value::Null),
                        Err(why) => (
                            FactKind::Refused,
                            serde_json::json!({ "reason": why.to_string() }),
                        ),
                    };
                self.record(
                    repo,
                    &gate,
                    kind,
                    &digest,
                    actor,
                    Source::Review { id: review_id },
                    data,
                )
                .await?;
            }
            ReviewState::Dismissed => {
                self.record(
                    repo,
                    &gate,
                    FactKind::Revoked,
                    &digest,
                    actor,
                    Source::Review { id: review_id },
                    serde_json::json!({ "reason": "review dismissed" }),
                )
                .await?;
            }
            _ => {
                return Ok(JobOutcome::Skipped(
                    "a review that neither approves nor dismisses".into(),
                ))
            }
        }
        self.refresh_gate(client, repo, pr).await?;
        Ok(JobOutcome::Done)
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
                    .map_or(i64::MIN, |p| p.created_at),
            })
        });
        let head_now = record.as_ref().map_or("", |r| r.head_sha.as_str());
        let digest = match policy::bind(named, seen.as_ref(), head_now, comment.written_at) {
            Ok(digest) => digest.to_owned(),
            Err(why) => return Ok(Said::Refused(why.to_string())),
        };
        let Some(plan) = plan else {
            return Ok(Said::Refused(policy::Unbound::NoReport.to_string()));
        };
        let policy = self.base_policy(repo, &plan.base_sha);
        if let Some(stage) = stage {
            let stages = self.base_stages(repo, &plan.base_sha);
            if !stages.iter().any(|s| s == stage) {
                return Ok(Said::Refused(format!(
                    "`{stage}` is not a stage of this repository (stages: {}); write `/approve` for the whole change, or `/approve <stage>`",
                    stages.join(", ")
                )));
            }
        }
        let actor = Actor {
            id: comment.author.id,
            login: comment.author.login.clone(),
        };
        let gate = gate_name(pr, stage);
        let who = match self.candidate(client, repo, comment.author, &policy).await {
            Ok(who) => who,
            Err(error) => {
                return Ok(Said::Refused(format!(
                    "wavegate could not check your permission: {error:#}"
                )))
            }
        };
        let pr_author = client.pull_request(repo, pr).await?.author.login;
        if let Err(why) = policy::may_approve(&policy, &pr_author, &who.as_candidate()) {
            let reason = why.to_string();
            self.record(
                repo,
                &gate,
                FactKind::Refused,
                &digest,
                actor,
                Source::Comment { id: comment.id },
                serde_json::json!({ "reason": reason }),
            )
            .await?;
            return Ok(Said::Refused(reason));
        }
        self.record(
            repo,
            &gate,
            FactKind::Approved,
            &digest,
            actor,
            Source::Comment { id: comment.id },
            serde_json::Value::Null,
        )
        .await?;
        Ok(Said::Done)
    }

    async fn revoke(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
        comment: &CommentIn<'_>,
    ) -> Result<Said> {
        let Some((_, plan)) = self.current(repo, pr).await? else {
            return Ok(Said::Refused(
                "there is nothing to revoke: no plan was approved".into(),
            ));
        };
        let Some(digest) = plan.digest.clone() else {
            return Ok(Said::Refused(
                "there is nothing to revoke: the plan has no digest".into(),
            ));
        };
        let gate = gate_name(pr, None);
        let facts = self.store.gate_facts(&repo.id.to_string(), &gate).await?;
        let policy = self.base_policy(repo, &plan.base_sha);
        let standing = ledger::evaluate(&facts, &digest, policy.required.max(1) as usize);
        let approvers = match &standing {
            ledger::Evaluation::Satisfied { by, .. }
            | ledger::Evaluation::Waiting { have: by, .. } => by.clone(),
            ledger::Evaluation::Mismatch { .. } => Vec::new(),
        };
        let own = approvers.iter().any(|a| a.id == comment.author.id);
        let admin = !own
            && client
                .permission(repo, &comment.author.login)
                .await
                .is_ok_and(|p| p == Permission::Admin);
        if !own && !admin {
            return Ok(Said::Refused(
                "you have no standing approval of the current plan to revoke; an approval can be revoked by whoever gave it, or by a repository admin".into(),
            ));
        }
        if approvers.is_empty() {
            return Ok(Said::Refused(
                "no approval of the current plan stands".into(),
            ));
        }
        let data = if own {
            serde_json::Value::Null
        } else {
            serde_json::json!({ "all": true })
        };
        self.record(
            repo,
            &gate,
            FactKind::Revoked,
            &digest,
            Actor {
                id: comment.author.id,
                login: comment.author.login.clone(),
            },
            Source::Comment { id: comment.id },
            data,
        )
        .await?;
        Ok(Said::Done)
    }

    #[allow(clippy::too_many_arguments)]
    async fn record(
        &self,
        repo: &RepoRef,
        gate: &str,
        kind: FactKind,
        digest: &str,
        actor: Actor,
        source: Source,
        data: serde_json::Value,
    ) -> Result<()> {
        self.store
            .append_fact(NewFact {
                repo: repo.id.to_string(),
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

    /// The pull request's record and its latest plan, when the plan is for the
    /// head the report shows.
    async fn current(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<Option<(crate::store::PrRecord, crate::store::PlanRecord)>> {
        let record = self.store.pr(&repo.id, pr).await?;
        let plan = self.store.latest_plan(&repo.id, pr).await?;
        Ok(match (record, plan) {
            (Some(record), Some(plan)) if record.head_sha == plan.head_sha => Some((record, plan)),
            _ => None,
        })
    }

    async fn candidate(
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

    /// The base branch's `[policy]`; the strict default when the base has no
    /// readable config.
    pub(super) fn base_policy(&self, repo: &RepoRef, base: &CommitSha) -> Policy {
        self.base_config(repo, base)
            .map(|c| c.policy)
            .unwrap_or_default()
    }

    fn base_stages(&self, repo: &RepoRef, base: &CommitSha) -> Vec<String> {
        self.base_config(repo, base)
            .map(|c| c.stages.into_iter().map(|s| s.name).collect())
            .unwrap_or_default()
    }

    fn base_config(&self, repo: &RepoRef, base: &CommitSha) -> Option<RepoConfig> {
        let mirror = self.workspace.mirror_path(&repo.id);
        let text = git::read_file(&mirror, base.as_str(), CONFIG_FILE).ok()??;
        RepoConfig::parse(CONFIG_FILE, &text).ok()
    }

    /// Brings the report's approvals section and the check up to date with
    /// the ledger, for the current plan.
    pub(super) async fn refresh_gate(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<()> {
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
        plan: &crate::store::PlanRecord,
        failed: bool,
        check_id: Option<u64>,
    ) -> Result<()> {
        let Some(digest) = plan.digest.clone() else {
            return Ok(());
        };
        let policy = self.base_policy(repo, &plan.base_sha);
        let facts = self
            .store
            .gate_facts(&repo.id.to_string(), &gate_name(pr, None))
            .await?;
        let required = policy.required.max(1) as usize;
        let evaluation = ledger::evaluate(&facts, &digest, required);
        let mut approved_at = BTreeMap::new();
        for fact in facts
            .iter()
            .filter(|f| f.fact.kind == FactKind::Approved && f.fact.digest == digest)
        {
            approved_at.insert(fact.fact.actor.login.clone(), fact.fact.at);
        }
        let standing = Standing {
            evaluation,
            approved_at: approved_at.into_iter().collect(),
            stale: ledger::stale_approvals(&facts, &digest)
                .into_iter()
                .map(|(by, digest, at)| Stale { by, digest, at })
                .collect(),
            policy_changed: self
                .base_config(repo, &plan.head_sha)
                .is_some_and(|head| head.policy != policy),
        };
        let body = approvals::splice(&plan.report, &approvals::render(&standing, &digest));
        let known = self.store.pr(&repo.id, pr).await?;
        let comment_id = client
            .upsert_report(
                repo,
                pr,
                known.as_ref().and_then(|r| r.report_comment_id),
                &body,
            )
            .await?;
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
        let check_id = client
            .publish_check(
                repo,
                &plan.head_sha,
                check_id,
                &CheckReport {
                    state,
                    title,
                    summary: body,
                    details_url: None,
                },
            )
            .await?;
        self.store
            .set_pr_report(
                &repo.id,
                pr,
                PrReport {
                    head_sha: plan.head_sha.clone(),
                    digest: Some(digest),
                    comment_id: Some(comment_id),
                    check_id,
                    status: status.into(),
                },
            )
            .await
    }
}

/// A candidate's facts, owned (the policy borrows them).
struct Who {
    login: String,
    is_bot: bool,
    can_write: bool,
    teams: Vec<String>,
}

impl Who {
    fn as_candidate(&self) -> Candidate<'_> {
        Candidate {
            login: &self.login,
            is_bot: self.is_bot,
            can_write: self.can_write,
            teams: &self.teams,
        }
    }
}
