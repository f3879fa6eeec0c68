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

use super::publish::{self, CiRuns, Shown};
use crate::apply::Wait;
use crate::config::repo::Policy;
use crate::forge::types::{CheckReport, CheckState};
use crate::gate::counting::{Evaluation, Scope, Tally};
use crate::gate::ledger::{Actor, FactData, FactDigest, FactKind, NewFact, Source};
use crate::gate::policy::{self, Candidate};
use crate::model::{CommitSha, Digest, GateId, MemberId, PrNumber, RepoId, StageName, User};
use crate::report::approvals::{self, Standing};
use crate::store::{ApplyRunRecord, PlanRecord, PrRecord, ReportStatus, Store};
use crate::worker::ctx::{Forge, Mirror};
use anyhow::{Context, Result};

/// How a pull request's own gate counts for `plan` (see [`Scope::Plan`]).
pub(super) fn plan_scope(plan: &PlanRecord, reviews_count: bool) -> Scope<'_> {
    Scope::Plan {
        head: &plan.head_sha,
        base: &plan.base_sha,
        reviews_count,
    }
}

/// Appends a fact a person gave: `by` whom, in which comment or review.
pub(super) async fn record_fact(
    store: &Store,
    repo: &RepoId,
    gate: &GateId,
    (kind, digest, data): (FactKind, FactDigest, FactData),
    (by, source): (&User, Source),
) -> Result<()> {
    store
        .append_fact(NewFact {
            repo: repo.ledger_key(),
            gate: gate.to_owned(),
            kind,
            digest,
            actor: Actor {
                id: by.id,
                login: by.login.clone(),
            },
            at: store.now(),
            source,
            data,
        })
        .await
        .with_context(|| format!("recording a {kind:?} fact at gate {gate}"))?;
    Ok(())
}

/// The pull request's record and the plan its report shows, when that
/// report is for the current head and waits at its gate.
pub(super) async fn shown_plan(
    store: &Store,
    repo: &RepoId,
    pr: PrNumber,
) -> Result<Option<(PrRecord, PlanRecord)>> {
    let record = store.pr(repo, pr).await?;
    let plan = store.latest_plan(repo, pr).await?;
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

/// What the forge says of `who` that `policy` judges: write access and
/// membership of the teams it lists.
pub(super) async fn candidate(forge: Forge<'_>, who: &User, policy: &Policy) -> Result<Who> {
    let permission = forge.client.permission(forge.repo, &who.login).await?;
    let mut teams = Vec::new();
    for team in policy::approver_teams(policy) {
        if forge.client.in_team(forge.repo, &team, &who.login).await? {
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

/// What the forge and the base's `policy` say of `who` approving pull
/// request `pr` at `head` (which they must not have authored or pushed).
pub(super) enum Approver {
    May,
    MayNot(policy::NotAllowed),
    /// The forge could not say what `who` may do.
    Unknown(anyhow::Error),
}

/// Judges `who` as an approver of pull request `pr` at `head` under
/// `policy`; an error only when the forge cannot say who authored it.
pub(super) async fn judge_approver(
    (store, forge): (&Store, Forge<'_>),
    (pr, head): (PrNumber, &CommitSha),
    who: &User,
    policy: &Policy,
) -> Result<Approver> {
    let who = match candidate(forge, who, policy).await {
        Ok(who) => who,
        Err(error) => return Ok(Approver::Unknown(error)),
    };
    let pr_author = forge
        .client
        .pull_request(forge.repo, pr)
        .await?
        .author
        .login;
    let record = store.pr(&forge.repo.id, pr).await?;
    let authors = policy::Authors {
        author: &pr_author,
        pusher: record.as_ref().and_then(|r| r.pusher_of(head)),
    };
    Ok(
        match policy::may_approve(policy, authors, &who.as_candidate()) {
            Ok(()) => Approver::May,
            Err(why) => Approver::MayNot(why),
        },
    )
}

/// Records a person's approval of `digest` at `gate` with `data`, or, when
/// it is `refused` (why), the refusal; answers which it recorded.
pub(super) async fn record_approval(
    (store, repo): (&Store, &RepoId),
    gate: &GateId,
    (digest, mut data): (&Digest, FactData),
    refused: Option<String>,
    said: (&User, Source),
) -> Result<FactKind> {
    let kind = match refused {
        None => FactKind::Approved,
        Some(why) => {
            data.reason = Some(why);
            FactKind::Refused
        }
    };
    record_fact(store, repo, gate, (kind, digest.into(), data), said).await?;
    Ok(kind)
}

/// Makes sure the mirror holds the commits this pull request's gates are
/// judged at (its current plan's base and head, its apply run's base): a
/// replica that never planned it, or a data dir started afresh, has
/// neither, and a gate must never be judged without its base.
pub(super) async fn fetch_gate_bases(
    store: &Store,
    mirror: &Mirror<'_>,
    repo: &RepoId,
    pr: PrNumber,
) -> Result<()> {
    let plan = store.latest_plan(repo, pr).await?;
    let run = store.apply_run(repo, pr).await?;
    let commits = plan
        .map(|p| [p.base_sha, p.head_sha])
        .into_iter()
        .flatten()
        .chain(run.map(|r| r.base_sha));
    for commit in commits {
        mirror.fetch(&commit).await.with_context(|| {
            format!(
                "fetching the commit {} this pull request's gates are judged at",
                commit.short()
            )
        })?;
    }
    Ok(())
}

/// The policy a run's gate is judged by: the base's `[policy]`, with the
/// stage's own `approvers`, `required` and `review_approvals` from the
/// base's `[[stage]]` entry. Two kinds of failure: the repository's (a
/// config that does not parse: `Ok(Err(why))`, said on the pull request)
/// and ours (git could not read it: `Err`, the job is retried). Neither
/// ever approves by a default.
pub(super) async fn run_gate_policy(
    mirror: &Mirror<'_>,
    run: &ApplyRunRecord,
    stage: Option<&str>,
) -> Result<Result<Policy, String>> {
    let rules = mirror.base_rules(&run.base_sha).await?;
    Ok(rules.policy().map(|policy| match stage {
        Some(stage) => rules.stage_policy(&policy, stage),
        None => policy,
    }))
}

/// Brings the report's approvals section and the check up to date with
/// the ledger, for the plan the report shows (after merge, for the run).
pub(super) async fn refresh_gate(
    store: &Store,
    forge: Forge<'_>,
    mirror: &Mirror<'_>,
    pr: PrNumber,
) -> Result<()> {
    if let Some(mut run) = store.apply_run(&forge.repo.id, pr).await? {
        // After merge the report follows the run.
        if let Some(plan) = store.plan(run.plan_id).await? {
            return publish::publish_run(store, forge, &mut run, &plan).await;
        }
    }
    let Some((record, plan)) = shown_plan(store, &forge.repo.id, pr).await? else {
        return Ok(());
    };
    let failed = record.report_status == Some(ReportStatus::Failed);
    publish_gate(store, forge, mirror, &plan, (failed, record.check_id)).await
}

/// Posts `plan`'s report with its approvals section, and the check that
/// says where the gate stands (`failed`: a member failed to plan).
pub(super) async fn publish_gate(
    store: &Store,
    forge: Forge<'_>,
    mirror: &Mirror<'_>,
    plan: &PlanRecord,
    (failed, check_id): (bool, Option<u64>),
) -> Result<()> {
    let Some(digest) = plan.digest.clone() else {
        return Ok(());
    };
    let gate = GateId::Pr(plan.pr);
    let policy = mirror.base_rules(&plan.base_sha).await?.policy();
    let facts = store.gate_facts(&forge.repo.id.ledger_key(), &gate).await?;
    let reviews_count = policy.as_ref().is_ok_and(|p| p.review_approvals);
    let tally = Tally::new(&facts, plan_scope(plan, reviews_count));
    // Approvals of this digest older than `approval_ttl` no longer count.
    let ttl = policy.as_ref().ok().and_then(Policy::approval_ttl);
    let now = store.now();
    let required = policy.as_ref().map_or(1, |p| p.required.max(1) as usize);
    let mut counted = tally.count(&digest, required, ttl, now);
    if policy.is_err() {
        // A base policy that cannot be read approves nothing.
        counted.evaluation = Evaluation::Waiting {
            have: Vec::new(),
            count: 0,
            required,
        };
    }
    let set = plan.change_set();
    if !failed && !matches!(counted.evaluation, Evaluation::Satisfied { .. }) {
        let set = set
            .as_ref()
            .map_err(Clone::clone)
            .with_context(|| format!("the members gate {gate} waits on"))?;
        let members: Vec<MemberId> = set.members.iter().map(|m| m.member.clone()).collect();
        let description = format!(
            "pull request {} waits for an approval of its change set at {} ({} member{})",
            plan.pr,
            plan.head_sha.short(),
            members.len(),
            if members.len() == 1 { "" } else { "s" }
        );
        let pending = (&gate, &digest, members.as_slice());
        record_pending(store, forge, pending, description).await?;
    }
    let ledger_head = store.ledger_head(&forge.repo.id.ledger_key()).await?;
    let standing = Standing {
        counted,
        ledger_head,
        ttl,
        policy_changed: match &policy {
            Ok(base) => mirror
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
    let shown = Shown {
        pr: plan.pr,
        head: &plan.head_sha,
        check_id,
        digest: Some(digest),
        status,
        runs: set.as_ref().map(CiRuns::of_plan).unwrap_or_default(),
    };
    publish::publish_report(store, forge, shown, report).await
}

/// Appends one `pending` fact when `gate` starts waiting for `digest`
/// (what is asked, of whom: the members, and since when), once per gate
/// and digest however often the wait is looked at again.
pub(super) async fn record_pending(
    store: &Store,
    forge: Forge<'_>,
    (gate, digest, members): (&GateId, &Digest, &[MemberId]),
    description: String,
) -> Result<()> {
    let facts = store.gate_facts(&forge.repo.id.ledger_key(), gate).await?;
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
    append_own_fact(
        store,
        forge,
        (gate.to_owned(), FactKind::Pending, digest),
        data,
    )
    .await
}

/// Appends a fact wavegate states itself (a gate that waits, a spend, a
/// hook's outcome): by the bot, now, from no comment or review.
pub(super) async fn append_own_fact(
    store: &Store,
    forge: Forge<'_>,
    (gate, kind, digest): (GateId, FactKind, &Digest),
    data: FactData,
) -> Result<()> {
    store
        .append_fact(NewFact {
            repo: forge.repo.id.ledger_key(),
            gate,
            kind,
            digest: digest.into(),
            actor: Actor {
                id: 0,
                login: forge.client.bot_login().await?,
            },
            at: store.now(),
            source: Source::Wavegate,
            data,
        })
        .await?;
    Ok(())
}

/// The gate a run waits at for a person's approval: its name, the digest,
/// and the stage it belongs to (a round's stage).
pub(super) fn run_gate(run: &ApplyRunRecord) -> Option<(GateId, Digest, Option<StageName>)> {
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
