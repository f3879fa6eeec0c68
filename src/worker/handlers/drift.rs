//! Drift (docs/drift.md): reading a repository's schedule from its default
//! branch, checking a stage — every member planned at the default branch's
//! head against the deployed estate, in the stage's plan profile — and
//! telling each drifted subject in one forge issue (`crate::plan::drift`
//! decides, `crate::report::drift` words it), and `/apply <digest>` on such
//! an issue, which starts an apply run of exactly that plan through the
//! same machinery as a merge's, keyed by the issue's number.
//!
//! A check never takes a member's lock: it waits while an apply holds one
//! of its stage's, and a member an apply locked or applied while it was
//! planned is checked again shortly instead of told. Nothing it does is
//! left behind when it fails: no lock, no queued job but the next check.

use super::apply::{deployed_estate, enqueue_resume};
use super::comment::{react, CommentIn};
use super::gate::{candidate, record_fact};
use super::notify::notify_of_drift;
use crate::apply::MemberState;
use crate::config::raw::DriftIssues;
use crate::forge::types::{IssueEdit, IssueState, Reaction};
use crate::gate::ledger::{FactData, FactKind, Source};
use crate::jobs::queue_key_prefix;
use crate::model::{
    CommitSha, Digest, DriftSubject, GateId, MemberId, PrNumber, StageName, UnixMs,
};
use crate::plan::drift::{self, Finding, Found, Told, Verdict};
use crate::plan::engine::{change_set_of, MemberOutcome, PlanError, PlannedChange};
use crate::report::drift::{self as words, DriftShown};
use crate::store::{DriftIssue, JobOutcome, NewApplyRun, NewPlan, Store};
use crate::worker::ctx::{Forge, JobCtx};
use anyhow::{anyhow, Context, Result};
use std::collections::BTreeSet;
use std::time::Duration;

/// How soon a check that waited for an apply, or whose plan an apply
/// overlapped, looks again (sooner when the operator's floor is shorter).
const AGAIN_SOON: Duration = Duration::from_secs(30);

/// Reads the default branch's `[drift]` into the schedule.
pub(in crate::worker) async fn scan(job: &JobCtx<'_>) -> Result<JobOutcome> {
    let Some(floor) = job.runner.options.drift_floor else {
        return Ok(JobOutcome::Skipped("drift checks are off".into()));
    };
    let (branch, head) = default_head(job).await?;
    let rules = job.mirror.base_rules(&head).await?;
    // A file that does not read keeps the schedule it had: a broken
    // config never stops the checks.
    if let Err(why) = rules.policy() {
        return Ok(JobOutcome::Skipped(format!(
            "the schedule stays as it was: {why}"
        )));
    }
    let stages = rules
        .drift()
        .map(|drift| drift.checked(floor))
        .unwrap_or_default();
    job.store
        .sync_drift_schedule(job.forge.repo, &stages)
        .await?;
    for issue in job.store.open_drift_issues_of(&job.forge.repo.id).await? {
        if !stages
            .iter()
            .any(|(stage, _)| stage.as_str() == issue.subject.stage())
        {
            let why = format!(
                "`{branch}` no longer checks stage `{}`",
                issue.subject.stage()
            );
            retire(job, &issue, &why).await?;
        }
    }
    Ok(JobOutcome::Skipped(format!(
        "{} stage(s) of `{branch}` at {} checked for drift",
        stages.len(),
        head.short()
    )))
}

async fn default_head(job: &JobCtx<'_>) -> Result<(String, CommitSha)> {
    let branch = job
        .forge
        .client
        .default_branch(job.forge.repo)
        .await
        .context("asking the forge for the repository's default branch")?;
    let head = job.mirror.fetch_branch(&branch).await?;
    Ok((branch, head))
}

/// Checks `stage` for drift and tells what it finds.
pub(in crate::worker) async fn check(job: &JobCtx<'_>, stage: &StageName) -> Result<JobOutcome> {
    let JobCtx {
        store,
        forge,
        mirror,
        runner,
        ..
    } = *job;
    let repo = &forge.repo.id;
    let Some(floor) = runner.options.drift_floor else {
        return Ok(JobOutcome::Skipped("drift checks are off".into()));
    };
    let (branch, head) = default_head(job).await?;
    let rules = mirror.base_rules(&head).await?;
    let Some(drift_rules) = rules.drift() else {
        if rules.policy().is_ok() {
            // No config any more: nothing is checked.
            store.sync_drift_schedule(forge.repo, &[]).await?;
            return Ok(JobOutcome::Skipped(format!(
                "`{branch}` has no config: no stage is checked for drift"
            )));
        }
        store.count_drift_check(repo, stage.as_str(), true).await?;
        tracing::warn!(%stage, "no drift check: the default branch's config does not read at {}", head.short());
        return Ok(JobOutcome::Skipped(
            "the default branch's config does not read".into(),
        ));
    };
    store
        .sync_drift_schedule(forge.repo, &drift_rules.checked(floor))
        .await?;
    if drift_rules.interval(stage.as_str(), floor).is_none() {
        return Ok(JobOutcome::Skipped(format!(
            "stage {stage} is no longer checked for drift"
        )));
    }
    if let Some(problem) = runner.sandbox.problem() {
        store.count_drift_check(repo, stage.as_str(), true).await?;
        tracing::warn!(%stage, "no drift check: {problem}");
        return Ok(JobOutcome::Skipped(format!(
            "the sandbox cannot run: {problem}"
        )));
    }
    let soon = || store.now() + floor.min(AGAIN_SOON);
    let merges = queue_key_prefix(repo);
    if store.merge_in_hand(repo, &merges).await? {
        store.drift_check_at(repo, stage.as_str(), soon()).await?;
        return Ok(JobOutcome::Skipped(
            "waits: a merge is about to start its apply run".into(),
        ));
    }
    if let Some(lock) = store
        .member_locks(repo)
        .await?
        .into_iter()
        .find(|lock| lock.member.ends_with(&format!("@{stage}")))
    {
        store.drift_check_at(repo, stage.as_str(), soon()).await?;
        return Ok(JobOutcome::Skipped(format!(
            "waits: the apply of {} holds {}",
            lock.pr, lock.member
        )));
    }

    let started = store.now();
    let mut options = runner.plan_options(&mirror, (&head, &head));
    options.merged = true;
    options.every_member = true;
    options.stage = Some(stage.to_string());
    options.recorded = Some(deployed_estate(store, repo).await?);
    let planned = super::plan::plan_apart(options).await?;
    let change = match planned {
        Ok(change) => change,
        Err(PlanError::Internal(error)) => {
            store.count_drift_check(repo, stage.as_str(), true).await?;
            return Err(error.context("checking for drift"));
        }
        Err(error) => {
            store.count_drift_check(repo, stage.as_str(), true).await?;
            tracing::warn!(%stage, "the drift check could not plan `{branch}` at {}: {error}", head.short());
            return Ok(JobOutcome::Skipped(format!("cannot plan: {error}")));
        }
    };

    if store.merge_in_hand(repo, &merges).await? {
        store.drift_check_at(repo, stage.as_str(), soon()).await?;
        return Ok(JobOutcome::Skipped(
            "a merge came in while it planned: checked again shortly".into(),
        ));
    }
    // What a run merged and has yet to apply is no drift: the head says
    // what it will be. Those members wait for their run.
    let mut pending = BTreeSet::new();
    for run in store.runs_in_hand(repo).await? {
        // A drift run's own members are what its issue is about.
        if store.drift_issue(repo, run.pr).await?.is_some() {
            continue;
        }
        for member in run.record.members_in_order() {
            let state = run.record.state(member);
            if !state.is_applied() && state != MemberState::Unaffected {
                pending.insert(member.to_owned());
            }
        }
    }
    // What an apply locked or applied while this planned is not known:
    // those members are checked again shortly.
    let mut overlapped: BTreeSet<String> = store
        .member_locks(repo)
        .await?
        .into_iter()
        .map(|lock| lock.member)
        .collect();
    overlapped.extend(
        store
            .applied_since(repo, started)
            .await?
            .into_iter()
            .map(|(member, _)| member),
    );
    let findings: Vec<(MemberId, Finding)> = change
        .members
        .iter()
        .filter(|m| {
            let member = m.member.as_str();
            m.stage == *stage && !overlapped.contains(member) && !pending.contains(member)
        })
        .map(|m| (m.member.clone(), drift::finding(m)))
        .collect();
    if change
        .members
        .iter()
        .any(|m| overlapped.contains(m.member.as_str()))
    {
        store.drift_check_at(repo, stage.as_str(), soon()).await?;
    }
    let digest_over = rules.policy().map(|p| p.digest_over).unwrap_or_default();
    let open = store.open_drift_issues(repo, stage.as_str()).await?;
    let mut failed = false;
    let checked = Checked {
        branch: &branch,
        head: &head,
        change: &change,
        digest_over,
    };
    // Issues of what this stage no longer has, or no longer tells so.
    for issue in &open {
        let why = match &issue.subject {
            DriftSubject::Member(_) if drift_rules.issues == DriftIssues::Stage => {
                "its stage's drift is told in one issue now"
            }
            DriftSubject::Stage(_) if drift_rules.issues == DriftIssues::Member => {
                "each member's drift is told in an issue of its own now"
            }
            DriftSubject::Member(member) if !change.members.iter().any(|m| m.member == *member) => {
                "it is no member of the stage any more"
            }
            _ => continue,
        };
        retire(job, issue, why).await?;
    }
    // A stage told in one issue is told whole or not at all this time.
    let skipped = change.members.iter().any(|m| {
        let member = m.member.as_str();
        m.stage == *stage && (overlapped.contains(member) || pending.contains(member))
    });
    for found in drift::subjects(stage, &findings, drift_rules.issues) {
        failed |= !found.failed.is_empty();
        if skipped && matches!(found.subject, DriftSubject::Stage(_)) {
            continue;
        }
        let known = open.iter().find(|issue| issue.subject == found.subject);
        tell(job, &checked, &found, known).await?;
    }
    store
        .count_drift_check(repo, stage.as_str(), failed)
        .await?;
    Ok(JobOutcome::Done)
}

/// What one check planned.
struct Checked<'a> {
    branch: &'a str,
    head: &'a CommitSha,
    change: &'a PlannedChange,
    digest_over: crate::model::DigestOver,
}

impl Checked<'_> {
    fn outcome(&self, member: &MemberId) -> Option<&MemberOutcome> {
        self.change.members.iter().find(|m| m.member == *member)
    }
}

/// Carries out the verdict on one subject's issue.
async fn tell(
    job: &JobCtx<'_>,
    checked: &Checked<'_>,
    found: &Found,
    known: Option<&DriftIssue>,
) -> Result<()> {
    let (store, forge) = (job.store, job.forge);
    let drifted: Vec<MemberOutcome> = found
        .drifted
        .iter()
        .filter_map(|m| checked.outcome(m).cloned())
        .collect();
    let set = (!drifted.is_empty())
        .then(|| change_set_of(&drifted, checked.digest_over))
        .transpose()
        .map_err(|e| anyhow!("binding the drift's plans: {e}"))?;
    let digest = set.as_ref().map(|s| s.digest.clone());
    let told = match known {
        Some(issue) => Some(Told {
            digest: issue.digest().cloned(),
            failing: issue.failing.clone(),
            has_run: store
                .apply_run(&forge.repo.id, issue.number)
                .await?
                .is_some(),
        }),
        None => None,
    };
    let now = store.now();
    let verdict = drift::verdict(found, digest.as_ref(), told.as_ref());
    let show = |since, kept| {
        shown(
            checked,
            found,
            (&drifted, digest.as_ref()),
            (since, kept, now),
        )
    };
    match (verdict, known) {
        (Verdict::Nothing, _) => {}
        (Verdict::Unchanged, Some(issue)) => {
            let mut issue = issue.clone();
            issue.checked_at = now;
            store.save_drift_issue(&issue).await?;
        }
        (Verdict::Open { news }, _) => {
            open_issue(job, checked, found, (&show(now, None), set), news, None).await?;
        }
        (Verdict::Supersede, Some(old)) => {
            // One issue is open per subject: the old one is closed in the
            // store before the new one is saved (a crash between leaves the
            // old one open on the forge, refusing any `/apply`).
            let mut closed = old.clone();
            closed.open = false;
            store.save_drift_issue(&closed).await?;
            let new = open_issue(
                job,
                checked,
                found,
                (&show(now, None), set),
                true,
                old.digest(),
            )
            .await?;
            forge
                .client
                .reply(forge.repo, old.number, &words::superseded(new))
                .await?;
            close(store, forge, old).await?;
        }
        (Verdict::Update { news }, Some(issue)) => {
            let mut issue = issue.clone();
            let kept = issue.digest().cloned();
            let body = words::body(&show(
                issue.since,
                kept.as_ref().filter(|_| digest.is_none()),
            ));
            if let (Some(set), Some(digest)) = (set, &digest) {
                let plan = save_plan(store, forge, issue.number, checked, set, digest).await?;
                issue.drift = Some((digest.clone(), plan));
                issue.drifted = u32::try_from(found.drifted.len()).unwrap_or(u32::MAX);
            }
            let title = words::title(&found.subject, checked.branch, issue.drift.is_some());
            let edit = IssueEdit {
                title: Some(&title),
                body: Some(&body),
                state: None,
            };
            forge
                .client
                .edit_issue(forge.repo, issue.number, &edit)
                .await?;
            issue.failing = found.failing();
            issue.commit = checked.head.clone();
            issue.changed_at = now;
            issue.checked_at = now;
            store.save_drift_issue(&issue).await?;
            if news {
                let digest = digest.as_ref().expect("news of drift has its digest");
                let said = words::moved(kept.as_ref(), digest);
                forge.client.reply(forge.repo, issue.number, &said).await?;
                let changed = kept.is_some();
                notify_of_drift(job, (&issue, checked.head), &found.drifted, &said, changed)
                    .await?;
            }
        }
        (Verdict::Close, Some(issue)) => {
            let applied_by = store
                .applied_since(&forge.repo.id, issue.since)
                .await?
                .into_iter()
                .filter(|(member, _)| {
                    member
                        .parse::<MemberId>()
                        .is_ok_and(|m| issue.subject.covers(&m))
                })
                .map(|(_, pr)| pr)
                .next_back();
            let said = words::clean(checked.head, applied_by);
            forge.client.reply(forge.repo, issue.number, &said).await?;
            close(store, forge, issue).await?;
        }
        (verdict, None) => {
            return Err(anyhow!("{verdict:?} needs an issue, and there is none"));
        }
    }
    Ok(())
}

/// What a subject's issue shows after this check: `kept`, the drift an
/// issue showed before while its check only fails.
fn shown<'a>(
    checked: &'a Checked<'a>,
    found: &'a Found,
    (drifted, digest): (&'a [MemberOutcome], Option<&'a Digest>),
    (since, kept, now): (UnixMs, Option<&'a Digest>, UnixMs),
) -> DriftShown<'a> {
    DriftShown {
        subject: &found.subject,
        branch: checked.branch,
        commit: checked.head,
        drifted: drifted.iter().collect(),
        digest,
        failed: found
            .failed
            .iter()
            .map(|(member, why)| {
                let output = checked.outcome(member).map_or("", |o| o.output.as_str());
                (member, why.as_str(), output)
            })
            .collect(),
        kept,
        since,
        checked_at: now,
    }
}

/// Opens the subject's issue, saves its plan under the issue's number and
/// the issue itself, and tells the `[notify]` targets of new drift.
async fn open_issue(
    job: &JobCtx<'_>,
    checked: &Checked<'_>,
    found: &Found,
    (shown, set): (&DriftShown<'_>, Option<crate::plan::changeset::ChangeSet>),
    news: bool,
    was: Option<&Digest>,
) -> Result<PrNumber> {
    let (store, forge) = (job.store, job.forge);
    let title = words::title(&found.subject, checked.branch, set.is_some());
    let number = forge
        .client
        .open_issue(forge.repo, &title, &words::body(shown))
        .await
        .with_context(|| format!("opening the drift issue of {}", found.subject))?;
    let now = store.now();
    let drift = match set {
        Some(set) => {
            let digest = set.digest.clone();
            let plan = save_plan(store, forge, number, checked, set, &digest).await?;
            Some((digest, plan))
        }
        None => None,
    };
    let issue = DriftIssue {
        repo: forge.repo.id.clone(),
        number,
        subject: found.subject.clone(),
        open: true,
        drift,
        drifted: u32::try_from(found.drifted.len()).unwrap_or(u32::MAX),
        commit: checked.head.clone(),
        failing: found.failing(),
        since: now,
        changed_at: now,
        checked_at: now,
    };
    store.save_drift_issue(&issue).await?;
    tracing::info!(issue = %number, subject = %found.subject, "drift issue opened");
    if news {
        let digest = issue.digest().expect("news of drift has its digest");
        let said = words::moved(was, digest);
        notify_of_drift(
            job,
            (&issue, checked.head),
            &found.drifted,
            &said,
            was.is_some(),
        )
        .await?;
    }
    Ok(number)
}

/// The drift's plans as an apply run reads them: saved under the issue's
/// number, at the commit checked (head and base alike).
async fn save_plan(
    store: &Store,
    forge: Forge<'_>,
    number: PrNumber,
    checked: &Checked<'_>,
    set: crate::plan::changeset::ChangeSet,
    digest: &Digest,
) -> Result<i64> {
    store
        .save_plan(NewPlan {
            repo: forge.repo.id.clone(),
            pr: number,
            head_sha: checked.head.clone(),
            base_sha: checked.head.clone(),
            digest: Some(digest.clone()),
            change_set: set,
            report: crate::report::drift::run_report(digest),
        })
        .await
}

/// Closes an issue of something no longer checked, saying why.
async fn retire(job: &JobCtx<'_>, issue: &DriftIssue, why: &str) -> Result<()> {
    let said = words::no_longer_checked(&issue.subject, why);
    job.forge
        .client
        .reply(job.forge.repo, issue.number, &said)
        .await?;
    close(job.store, job.forge, issue).await
}

async fn close(store: &Store, forge: Forge<'_>, issue: &DriftIssue) -> Result<()> {
    let edit = IssueEdit {
        title: None,
        body: None,
        state: Some(IssueState::Closed),
    };
    forge
        .client
        .edit_issue(forge.repo, issue.number, &edit)
        .await?;
    let mut issue = issue.clone();
    issue.open = false;
    issue.checked_at = store.now();
    store.save_drift_issue(&issue).await?;
    tracing::info!(issue = %issue.number, subject = %issue.subject, "drift issue closed");
    Ok(())
}

/// Takes up a comment that is for drift: one on a drift issue (its
/// `/apply`, and everything before its run exists; once its run exists,
/// the run's gates and `/retry` are answered as on a merged pull request),
/// and an `/apply` on an issue that is none of wavegate's, which is
/// ignored. `None`: a pull request's, for the comment commands.
pub(in crate::worker) async fn taken_up(
    job: &JobCtx<'_>,
    comment: &CommentIn<'_>,
) -> Result<Option<JobOutcome>> {
    let (store, forge) = (job.store, job.forge);
    let applying = crate::gate::commands::drift_apply(comment.body).is_some();
    let repo = &forge.repo.id;
    if let Some(issue) = store.drift_issue(repo, comment.pr).await? {
        if comment.author.is_bot || comment.author.login == forge.client.bot_login().await? {
            return Ok(Some(JobOutcome::Skipped("a bot's comment".into())));
        }
        if applying || store.apply_run(repo, comment.pr).await?.is_none() {
            return self::comment(job, comment, issue).await.map(Some);
        }
    } else if store.pr(repo, comment.pr).await?.is_none() {
        return Ok(Some(JobOutcome::Skipped(
            "a comment on an issue that is no drift issue of wavegate's".into(),
        )));
    }
    Ok(None)
}

/// A comment on a drift issue: `/apply <digest>` by someone the default
/// branch's policy lets approve the stage records a `drift_approved` fact
/// and starts (or resumes) the issue's apply run; a run's own gates and
/// `/retry` go through the pull request commands once a run exists.
async fn comment(
    job: &JobCtx<'_>,
    comment: &CommentIn<'_>,
    issue: DriftIssue,
) -> Result<JobOutcome> {
    let (store, forge, queue) = (job.store, job.forge, job.queue);
    let Some(asked) = crate::gate::commands::drift_apply(comment.body) else {
        return Ok(JobOutcome::Skipped("no `/apply` on a drift issue".into()));
    };
    react(forge, comment.id, Reaction::Eyes).await;
    let refuse = |why: String| async move {
        react(forge, comment.id, Reaction::Confused).await;
        forge.client.reply(forge.repo, comment.pr, &why).await?;
        anyhow::Ok(JobOutcome::Done)
    };
    let reference = match asked {
        Ok(reference) => reference,
        Err(problem) => return refuse(format!("`/apply` was not read: {problem}.")).await,
    };
    let Some((digest, plan_id)) = issue.drift.clone().filter(|_| issue.open) else {
        return refuse(words::stale_digest(&reference.as_text(), None)).await;
    };
    if !reference.matches(&digest) {
        return refuse(words::stale_digest(&reference.as_text(), Some(&digest))).await;
    }
    let (_, head) = default_head(job).await?;
    let rules = job.mirror.base_rules(&head).await?;
    let policy = match rules.policy() {
        Ok(policy) => rules.stage_policy(&policy, issue.subject.stage()),
        Err(why) => return refuse(format!("`/apply` was not recorded: {why}.")).await,
    };
    let who = candidate(forge, comment.author, &policy).await?;
    if let Err(why) = crate::gate::policy::may_still_approve(&policy, &who.as_candidate()) {
        return refuse(format!(
            "@{} may not apply stage `{}`'s drift: {why}.",
            comment.author.login,
            issue.subject.stage()
        ))
        .await;
    }
    if let Some(run) = store.apply_run(&forge.repo.id, issue.number).await? {
        if run.digest != digest {
            return refuse(format!(
                "This issue's apply run applies `{}`, not `{digest}`: the next check tells the drift shown here in a new issue.",
                run.digest
            ))
            .await;
        }
        if !crate::apply::run_goes_on(run.status, &run.record) {
            return refuse(format!(
                "This issue's apply run is {}: `/retry` resumes it.",
                run.status.as_str()
            ))
            .await;
        }
    }
    let plan = store.plan(plan_id).await?.ok_or_else(|| {
        anyhow!(
            "drift issue {} names plan {plan_id}, which is gone",
            issue.number
        )
    })?;
    record_fact(
        store,
        &forge.repo.id,
        &GateId::Pr(issue.number),
        (
            FactKind::DriftApproved,
            digest.clone().into(),
            FactData::at_plan(&plan.head_sha, &plan.base_sha),
        ),
        (comment.author, Source::Comment { id: comment.id }),
    )
    .await?;
    let (run, created) = store
        .create_apply_run(NewApplyRun {
            repo: forge.repo.clone(),
            pr: issue.number,
            merge_sha: plan.head_sha.clone(),
            base_sha: plan.base_sha.clone(),
            plan_id,
            digest: digest.clone(),
        })
        .await?;
    if created {
        tracing::info!(run = run.id, issue = %issue.number, "drift apply run started");
    }
    react(forge, comment.id, Reaction::PlusOne).await;
    enqueue_resume(queue, forge.repo, issue.number).await?;
    Ok(JobOutcome::Done)
}
