//! What the comment and review handlers share: reading a pull request's
//! gate (its base policy and stages, the plan its report shows, who may
//! approve), recording a fact, and bringing the report's approvals section
//! and the check up to date with the ledger.
//!
//! Every approval is of the digest the report showed, at the head and base it
//! was planned for: `policy::bind` is the only way to a digest, and an
//! approval counts only while the plan it saw is the current one — a push or
//! a retarget that leaves the digest unchanged still needs a new approval,
//! because the commands that will apply it may have changed.

use crate::apply::Wait;
use crate::config::repo::Policy;
use crate::config::{RepoConfig, CONFIG_FILE};
use crate::forge::types::{CheckReport, CheckState};
use crate::gate::counting::{Evaluation, Scope, Tally};
use crate::gate::ledger::{Actor, FactData, FactDigest, FactKind, NewFact, Source};
use crate::gate::policy::{self, Candidate};
use crate::git;
use crate::model::{CommitSha, Digest, GateId, MemberId, User};
use crate::report::approvals::{self, Standing};
use crate::store::{ApplyRunRecord, PlanRecord, PrRecord, ReportStatus};
use crate::worker::ctx::JobCtx;
use anyhow::{Context, Result};

/// How a pull request's own gate counts for `plan` (see [`Scope::Plan`]).
pub(super) fn plan_scope(plan: &PlanRecord, reviews_count: bool) -> Scope<'_> {
    Scope::Plan {
        head: &plan.head_sha,
        base: &plan.base_sha,
        reviews_count,
    }
}

impl JobCtx<'_> {
    pub(super) async fn record(
        &self,
        gate: &GateId,
        (kind, digest, data): (FactKind, FactDigest, FactData),
        actor: Actor,
        source: Source,
    ) -> Result<()> {
        self.store
            .append_fact(NewFact {
                repo: self.repo.id.ledger_key(),
                gate: gate.to_owned(),
                kind,
                digest,
                actor,
                at: self.store.now(),
                source,
                data,
            })
            .await
            .with_context(|| format!("recording a {kind:?} fact at gate {gate}"))?;
        Ok(())
    }

    /// The pull request's record and the plan its report shows, when that
    /// report is for the current head and waits at its gate.
    pub(super) async fn current(&self) -> Result<Option<(PrRecord, PlanRecord)>> {
        let record = self.store.pr(&self.repo.id, self.pr).await?;
        let plan = self.store.latest_plan(&self.repo.id, self.pr).await?;
        Ok(match (record, plan) {
            (Some(record), Some(plan))
                if record.head_sha == plan.head_sha
                    && record.report_head.as_ref() == Some(&plan.head_sha)
                    && record.report_digest.is_some()
                    && record.report_digest == plan.digest
                    && record.report_status != Some(ReportStatus::Refused) =>
            {
                Some((record, plan))
            }
            _ => None,
        })
    }

    pub(super) async fn candidate(&self, who: &User, policy: &Policy) -> Result<Who> {
        let permission = self.client.permission(self.repo, &who.login).await?;
        let mut teams = Vec::new();
        for team in policy::approver_teams(policy) {
            if self.client.in_team(self.repo, &team, &who.login).await? {
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
    pub(super) async fn fetch_gate_bases(&self) -> Result<()> {
        let plan = self.store.latest_plan(&self.repo.id, self.pr).await?;
        let run = self.store.apply_run(&self.repo.id, self.pr).await?;
        let commits = plan
            .map(|p| [p.base_sha, p.head_sha])
            .into_iter()
            .flatten()
            .chain(run.map(|r| r.base_sha));
        for commit in commits {
            self.fetch_commit(&commit).await.with_context(|| {
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
    pub(super) async fn base_policy(&self, base: &CommitSha) -> Result<Result<Policy, String>> {
        Ok(self.base_rules(base).await?.policy())
    }

    /// The stages of the base branch's config (none when it has no readable
    /// one); an error when git could not read it.
    pub(super) async fn base_stages(&self, base: &CommitSha) -> Result<Vec<String>> {
        Ok(self.base_rules(base).await?.stages())
    }

    /// The config at `commit`: `None` when it has none or it does not parse;
    /// an error when git could not read it. Git runs off the runtime, so
    /// webhook intake never waits behind it.
    pub(super) async fn config_at(&self, commit: &CommitSha) -> Result<Option<RepoConfig>> {
        let mirror = self.workspace.mirror_path(&self.repo.id);
        let at = commit.clone();
        let text = git::off_runtime(move || git::read_file(&mirror, at.as_str(), CONFIG_FILE))
            .await
            .with_context(|| format!("reading {CONFIG_FILE} at {}", commit.short()))?;
        Ok(text.and_then(|t| RepoConfig::parse_with(CONFIG_FILE, &t, &self.imposed()).ok()))
    }

    /// The policy a run's gate is judged by: the base's `[policy]`, with the
    /// stage's own `approvers`, `required` and `review_approvals` from the
    /// base's `[[stage]]` entry. The same two kinds of failure as `base_policy`.
    pub(super) async fn run_gate_policy(
        &self,
        run: &ApplyRunRecord,
        stage: Option<&str>,
    ) -> Result<Result<Policy, String>> {
        let rules = self.base_rules(&run.base_sha).await?;
        Ok(rules.policy().map(|policy| match stage {
            Some(stage) => rules.stage_policy(&policy, stage),
            None => policy,
        }))
    }

    /// Brings the report's approvals section and the check up to date with
    /// the ledger, for the plan the report shows.
    pub(super) async fn refresh_gate(&self) -> Result<()> {
        if let Some(mut run) = self.store.apply_run(&self.repo.id, self.pr).await? {
            // After merge the report follows the run.
            if let Some(plan) = self.store.plan(run.plan_id).await? {
                return self.publish_run(&mut run, &plan).await;
            }
        }
        let Some((record, plan)) = self.current().await? else {
            return Ok(());
        };
        let failed = record.report_status == Some(ReportStatus::Failed);
        self.publish_gate(&plan, failed, record.check_id).await
    }

    /// Posts `plan`'s report with its approvals section, and the check that
    /// says where the gate stands.
    pub(super) async fn publish_gate(
        &self,
        plan: &PlanRecord,
        failed: bool,
        check_id: Option<u64>,
    ) -> Result<()> {
        let Some(digest) = plan.digest.clone() else {
            return Ok(());
        };
        let policy = self.base_policy(&plan.base_sha).await?;
        let facts = self
            .store
            .gate_facts(&self.repo.id.ledger_key(), &GateId::Pr(self.pr))
            .await?;
        let reviews_count = policy.as_ref().is_ok_and(|p| p.review_approvals);
        let tally = Tally::new(&facts, plan_scope(plan, reviews_count));
        // Approvals of this digest older than `approval_ttl` no longer count.
        let ttl_ms = policy.as_ref().ok().and_then(Policy::approval_ttl_ms);
        let now = self.store.now();
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
            let members = plan.change_set["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m["member"].as_str().unwrap_or_default().parse())
                .collect::<Result<Vec<MemberId>, String>>()
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("the members gate {} waits on", GateId::Pr(self.pr)))?;
            let description = format!(
                "pull request {} waits for an approval of its change set at {} ({} member{})",
                self.pr,
                plan.head_sha.short(),
                members.len(),
                if members.len() == 1 { "" } else { "s" }
            );
            self.record_pending(&GateId::Pr(self.pr), &digest, &members, description)
                .await?;
        }
        let ledger_head = self.store.ledger_head(&self.repo.id.ledger_key()).await?;
        let standing = Standing {
            counted,
            ledger_head,
            ttl_ms,
            policy_changed: match &policy {
                Ok(base) => self
                    .config_at(&plan.head_sha)
                    .await?
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
            (true, _) => (CheckState::Failure, ReportStatus::Failed),
            (false, true) => (CheckState::Success, ReportStatus::Approved),
            (false, false) => (CheckState::ActionRequired, ReportStatus::AwaitingApproval),
        };
        let title = if failed {
            format!("A member failed to plan; {}", standing.title(&digest))
        } else {
            standing.title(&digest)
        };
        let report = CheckReport::plan(state, title, body);
        let commit = (self.pr, &plan.head_sha);
        self.publish(commit, check_id, report, Some(digest), status)
            .await
    }

    /// Appends one `pending` fact when `gate` starts waiting for `digest`
    /// (what is asked, of whom: the members, and since when), once per gate
    /// and digest however often the wait is looked at again.
    pub(super) async fn record_pending(
        &self,
        gate: &GateId,
        digest: &Digest,
        members: &[MemberId],
        description: String,
    ) -> Result<()> {
        let repo_key = self.repo.id.ledger_key();
        let facts = self.store.gate_facts(&repo_key, gate).await?;
        if facts
            .iter()
            .any(|f| f.fact.kind == FactKind::Pending && f.fact.digest == *digest)
        {
            return Ok(());
        }
        let data = FactData {
            members: Some(members.to_vec()),
            description: Some(description),
            ..FactData::default()
        };
        self.append_own_fact(gate.to_owned(), FactKind::Pending, digest, data)
            .await
    }

    /// Appends a fact wavegate states itself (a gate that waits, a spend, a
    /// hook's outcome): by the bot, now, from no comment or review.
    pub(super) async fn append_own_fact(
        &self,
        gate: GateId,
        kind: FactKind,
        digest: &Digest,
        data: FactData,
    ) -> Result<()> {
        self.store
            .append_fact(NewFact {
                repo: self.repo.id.ledger_key(),
                gate,
                kind,
                digest: digest.into(),
                actor: Actor {
                    id: 0,
                    login: self.client.bot_login().await?,
                },
                at: self.store.now(),
                source: Source::Wavegate,
                data,
            })
            .await?;
        Ok(())
    }
}

/// The gate a run waits at for a person's approval: its name, the digest,
/// and the stage it belongs to (a round's stage).
pub(super) fn run_gate(run: &ApplyRunRecord) -> Option<(GateId, Digest, Option<String>)> {
    match run.record.wait.as_ref()? {
        Wait::Stage {
            stage,
            gate,
            digest,
        } => Some((gate.clone(), digest.clone(), Some(stage.clone()))),
        Wait::Hook {
            stage,
            gate,
            digest,
            ..
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
