//! Apply runs after merge: one run per merged pull request, driven stage by
//! stage and wave by wave on the merge commit. `crate::apply` decides; this
//! plans and applies through a `Workbench`, writes the attempt record before
//! and after every apply command, holds the member locks, and reports the
//! run in the pull request and on the merge commit.
//!
//! A job drives the run as far as it can go without a person and ends; an
//! approval, an override, a released lock or `/retry` enqueues the next job,
//! and a crash leaves the job's lease to expire and the job to run again.

mod hooks;

use super::gate::plan_scope;
use super::gate::{append_own_fact, candidate, record_pending};
use super::in_flight::{ApplyEvent, InFlight};
use super::notify::notify_of;
use super::publish::publish_run;
use crate::apply::branches::{self, NotApplied};
use crate::apply::hooks as hook_rules;
use crate::apply::machine::{Effect, Observation, Step, WaveMachine, WaveSpec};
use crate::apply::run::{self, Settle};
use crate::apply::stage::{StageMachine, StageObservation, StageSpec};
use crate::apply::{
    run_goes_on, stage_waves, upstream_members, AttemptRecord, MemberState, RunStatus, Wait,
};
use crate::config::hooks::Moment;
use crate::config::repo::{GatePolicy, GateScope, Policy};
use crate::config::BaseRules;
use crate::forge::{PullRequest, RepoRef};
use crate::gate::counting::{Evaluation, Scope, Tally};
use crate::gate::ledger::{Fact, FactData, FactKind};
use crate::git;
use crate::jobs::Task;
use crate::model::{
    CommitSha, Digest, DriftSubject, GateId, MemberId, PrNumber, RepoId, StageName, UnixMs,
};
use crate::plan::changeset::ChangeSet;
use crate::plan::engine::{self, ApplyOutcome, PlanError, RecordedOutputs, Workbench};
use crate::plan::tail::OutputTail;
use crate::report::apply as apply_report;
use crate::sandbox::process;
use crate::store::Store;
use crate::store::{ApplyRunRecord, JobOutcome, NewApplyRun, Once, OnceSource, PlanRecord};
use crate::worker::ctx::{Forge, JobCtx, Mirror, Queue};
use anyhow::{anyhow, Context, Result};
use hooks::{run_hooks, GateDecision};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// The deployed estate as later plans read it.
struct Deployed(HashMap<String, Map<String, Value>>);

impl RecordedOutputs for Deployed {
    fn outputs(&self, member: &str) -> Option<Map<String, Value>> {
        self.0.get(member).cloned()
    }
}

/// What carrying out a run's effects writes to and through.
struct RunIo<'d> {
    run: &'d mut ApplyRunRecord,
    /// The run's plan, for its report (not read when a job gives up).
    plan: Option<&'d PlanRecord>,
    /// It applies a drift issue's plan: what it applies is recorded as
    /// `drift_applied` facts (the runs that stop or give up apply nothing).
    drift: bool,
}

/// What a run needs while it is driven, read once per job.
struct Drive {
    run: ApplyRunRecord,
    plan: PlanRecord,
    approved: Arc<ChangeSet>,
    policy: Policy,
    /// What the target before the merge decides: stage gates, approvers, timeouts.
    rules: Arc<BaseRules>,
    /// Approvers' permissions as the forge answered them in this job.
    asked: HashMap<String, super::gate::Who>,
    /// The run applies a drift issue's plan: its `/apply`, by the stage's
    /// approvers, is the stage's gate too.
    drift: bool,
}

impl Drive {
    /// The policy a stage's gate and rounds are judged by.
    fn stage_policy(&self, stage: &str) -> Policy {
        self.rules.stage_policy(&self.policy, stage)
    }

    /// What gates `stage` after its members are planned.
    fn gate(&self, stage: &str) -> GatePolicy {
        if self.drift {
            GatePolicy::Never
        } else {
            self.rules.gate(stage)
        }
    }
}

/// The recorded outputs of the repository's deployed estate, for plans.
pub(super) async fn deployed_estate(
    store: &Store,
    repo: &RepoId,
) -> Result<Arc<dyn RecordedOutputs>> {
    Ok(Arc::new(Deployed(store.deployed_outputs(repo).await?)))
}

/// A merged pull request: starts its run once (a redelivered merge
/// starts nothing new) and drives it.
pub(in crate::worker) async fn merged(
    job: &JobCtx<'_>,
    pr: &PullRequest,
    merge_sha: &CommitSha,
) -> Result<JobOutcome> {
    let JobCtx {
        store,
        forge,
        mirror,
        ..
    } = *job;
    if store.apply_run(&forge.repo.id, pr.number).await?.is_some() {
        return resume(job).await;
    }
    let plan = store.latest_plan(&forge.repo.id, pr.number).await?;
    let Some(plan) = plan.filter(|p| p.head_sha == pr.head_sha) else {
        forge.client
                .reply(
                    forge.repo,
                    pr.number,
                    &format!(
                        "Merged as {}, but wavegate has no plan of the merged head {}: nothing is applied. Apply it by hand, or open a pull request that changes it again.",
                        merge_sha.short(),
                        pr.head_sha.short()
                    ),
                )
                .await?;
        return Ok(JobOutcome::Skipped(
            "the merged head was never planned".into(),
        ));
    };
    let Some(digest) = plan.digest.clone() else {
        return Ok(JobOutcome::Skipped(
            "the merged plan changes nothing".into(),
        ));
    };
    mirror.fetch(merge_sha).await?;
    let path = mirror.path();
    // The target as it was before the merge, whatever the method: the
    // gates and policy it reads, and the fan-out against it, are never
    // a state an earlier commit of the pull request made.
    let commits = (
        merge_sha.clone(),
        plan.head_sha.clone(),
        plan.base_sha.clone(),
    );
    let base = git::off_runtime(move || {
        let (merge, head, base) = commits;
        git::target_before_merge(&path, merge.as_str(), head.as_str(), base.as_str())
    })
    .await
    .with_context(|| format!("finding the target branch before the merge {merge_sha}"))?;
    let base = CommitSha::parse(&base).map_err(|e| anyhow!(e))?;
    if let Err(why) = merge_applies(forge, &mirror, &pr.base_ref, &base).await? {
        // Said once, whatever redelivers the merge.
        let said = Once {
            repo: forge.repo.id.clone(),
            pr: pr.number,
            source: OnceSource::NotApplied(merge_sha.clone()),
        };
        if !store.was_seen(&said).await? {
            forge
                .client
                .reply(
                    forge.repo,
                    pr.number,
                    &apply_report::not_applied(merge_sha, &why),
                )
                .await?;
            store.mark_seen(&said).await?;
        }
        return Ok(JobOutcome::Skipped(format!(
            "merges into `{}` do not apply",
            pr.base_ref
        )));
    }
    let (run, created) = store
        .create_apply_run(NewApplyRun {
            repo: forge.repo.clone(),
            pr: pr.number,
            merge_sha: merge_sha.clone(),
            base_sha: base,
            plan_id: plan.id,
            digest,
        })
        .await?;
    if created {
        tracing::info!(run = run.id, pr = %pr.number, merge = %merge_sha.short(), "apply run started");
    }
    drive(job, run).await
}

/// Whether a merge into `base_ref` starts an apply run, by `branches`
/// in the default branch's config: as it stood before this merge when
/// the merge is into the default branch (`target_before`), as it stands
/// now otherwise.
pub(in crate::worker) async fn merge_applies(
    forge: Forge<'_>,
    mirror: &Mirror<'_>,
    base_ref: &str,
    target_before: &CommitSha,
) -> Result<Result<(), NotApplied>> {
    let default_branch = forge
        .client
        .default_branch(forge.repo)
        .await
        .context("asking the forge for the repository's default branch")?;
    let rules_at = if base_ref == default_branch {
        target_before.clone()
    } else {
        mirror.fetch_branch(&default_branch).await?
    };
    let rules = mirror.base_rules(&rules_at).await?;
    Ok(branches::merge_applies(
        base_ref,
        &default_branch,
        rules.apply_branches(),
    ))
}

/// Drives the pull request's run on from where its record stands.
pub(in crate::worker) async fn resume(job: &JobCtx<'_>) -> Result<JobOutcome> {
    let Some(run) = job.store.apply_run(&job.forge.repo.id, job.pr).await? else {
        return Ok(JobOutcome::Skipped("no apply run".into()));
    };
    if !run_goes_on(run.status, &run.record) {
        return Ok(JobOutcome::Skipped(format!(
            "the run is {}",
            run.status.as_str()
        )));
    }
    job.mirror.fetch(&run.merge_sha).await?;
    drive(job, run).await
}

/// A run whose job was dead-lettered stops as `failed`, so `/retry`
/// resumes it from its record (a member caught applying is planned
/// again first), and the pull request is told why.
pub(in crate::worker) async fn apply_gave_up(
    job: &JobCtx<'_>,
    attempts: u32,
    error: &str,
) -> Result<()> {
    let Some(mut run) = job.store.apply_run(&job.forge.repo.id, job.pr).await? else {
        return Ok(());
    };
    let effects = run::gave_up(&mut run.status, attempts, error);
    let mut io = RunIo {
        run: &mut run,
        plan: None,
        drift: false,
    };
    perform_all(job, &mut io, effects).await?;
    Ok(())
}

/// Resumes the pull request's run if it waits (after an approval).
pub(super) async fn resume_if_waiting(
    store: &Store,
    queue: Queue<'_>,
    repo: &RepoRef,
    pr: PrNumber,
) -> Result<()> {
    let waiting = store
        .apply_run(&repo.id, pr)
        .await?
        .is_some_and(|r| run_goes_on(r.status, &r.record));
    if waiting {
        enqueue_resume(queue, repo, pr).await?;
    }
    Ok(())
}

/// Enqueues the next job of a pull request's run: after an approval, an
/// override or `/retry`, or when a lock it waited for was let go of.
pub(super) async fn enqueue_resume(queue: Queue<'_>, repo: &RepoRef, pr: PrNumber) -> Result<()> {
    let task = Task::Apply {
        repo: repo.clone(),
        pr,
    };
    queue.enqueue(task).await
}

async fn drive(job: &JobCtx<'_>, run: ApplyRunRecord) -> Result<JobOutcome> {
    let plan = job.store.plan(run.plan_id).await?.ok_or_else(|| {
        anyhow!(
            "apply run {} names plan {}, which is gone",
            run.id,
            run.plan_id
        )
    })?;
    let rules = job.mirror.base_rules(&run.base_sha).await?;
    let drift = drift_subject(job.store, &run.repo.id, run.pr).await?;
    // A drift run's approval is its stage's: judged by the stage's policy.
    let policy = rules.policy().map(|policy| match &drift {
        Some(subject) => rules.stage_policy(&policy, subject.stage()),
        None => policy,
    });
    let approved = plan.change_set().map_err(|e| e.to_string()).and_then(|set| {
        if set.digest == run.digest {
            Ok(set)
        } else {
            Err(format!(
                "the approved change set cannot be trusted: plan {} digests to {}, not the approved {}",
                run.plan_id, set.digest, run.digest
            ))
        }
    });
    let mut options = job
        .runner
        .plan_options(&job.mirror, (&run.base_sha, &run.merge_sha));
    options.merged = true;
    if let (Some(subject), Ok(set)) = (&drift, &approved) {
        // What drifted is planned as the check planned it: the stage's
        // members at this commit, of which only the approved ones run.
        options.every_member = true;
        options.stage = Some(subject.stage().to_owned());
        options.only_members = Some(Arc::new(
            set.members.iter().map(|m| m.member.clone()).collect(),
        ));
    }
    options.console = Some(job.runner.console(&run.repo.id, run.pr, Some(run.id)));
    options.recorded = Some(deployed_estate(job.store, &run.repo.id).await?);
    let reading = options.clone();
    let prepared = git::off_runtime(move || Ok(engine::prepare(&reading))).await?;

    // What cannot be trusted is said first, then a policy that does not
    // read, then a merge commit that cannot be planned.
    let approved = match approved {
        Ok(approved) => approved,
        Err(why) => return refuse_run(job, run, &plan, &why).await,
    };
    let policy = match policy {
        Ok(policy) => policy,
        Err(why) => return refuse_run(job, run, &plan, &why).await,
    };
    let mut prepared = match prepared {
        Ok(prepared) => prepared,
        Err(PlanError::Internal(e)) => return Err(e.context("reading the merge commit")),
        Err(e) => {
            let why = format!("the merge commit cannot be planned: {e}");
            return refuse_run(job, run, &plan, &why).await;
        }
    };
    // Units are found on the merge commit only once the approval
    // stands (below); until then the layout a job found before stays.
    let undiscovered = !prepared.config.discoverers.is_empty();
    let keep = undiscovered && !run.record.layout.is_empty();
    let layout = layout_of(&prepared);
    let mut drive = Drive {
        run,
        plan,
        approved: Arc::new(approved),
        policy,
        rules,
        asked: HashMap::new(),
        drift: drift.is_some(),
    };
    if !keep {
        drive.run.record.layout = layout;
    }
    drive.run.record.lapsed.clear();
    let failed_before = run::failures(&drive.run.record);
    drive.run.status = RunStatus::Running;
    let previous_wait = drive.run.record.wait.take();

    let step = pr_approval((job.store, job.forge), &mut drive).await?;
    let mut members: BTreeSet<MemberId> = drive
        .approved
        .members
        .iter()
        .map(|m| m.member.clone())
        .collect();
    if step == Step::Continue {
        refresh_approvals((job.store, job.forge), &mut drive).await?;
        if let Some(problem) = job.runner.sandbox.problem() {
            let why = format!("{problem}. Once the server is fixed, `/retry`");
            return stop_run(job, drive.run, &drive.plan, &why).await;
        }
        let checking = (prepared, options.clone());
        let (back, bench) = git::off_runtime(move || {
            let bench = checking.0.workbench(&checking.1);
            Ok((checking.0, bench))
        })
        .await?;
        prepared = back;
        let mut bench = match bench {
            Ok(bench) => bench,
            Err(PlanError::Internal(e)) => return Err(e.context("checking out the merge commit")),
            Err(e) => {
                let why = format!("the merge commit cannot be planned: {e}");
                return refuse_run(job, drive.run, &drive.plan, &why).await;
            }
        };
        if undiscovered {
            // What is applied is what the discovery finds on the merge
            // commit; each unit's finding is bound, so one found
            // otherwise than approved is not covered.
            match prepared.discover(&options, &mut bench).await {
                Ok(()) => drive.run.record.layout = layout_of(&prepared),
                Err(PlanError::Internal(e)) => {
                    return Err(e.context("discovering units on the merge commit"))
                }
                Err(e) => {
                    let why = format!("the merge commit cannot be planned: {e}");
                    return refuse_run(job, drive.run, &drive.plan, &why).await;
                }
            }
        }
        let derived: BTreeSet<&MemberId> = prepared.derivation.members.iter().collect();
        for member in &members {
            if !derived.contains(member) && !drive.run.record.state(member).is_applied() {
                drive.run.record.set(member, MemberState::Unaffected);
            }
        }
        members.extend(prepared.derivation.members.iter().cloned());
        for (member, outputs) in drive.run.record.applied_outputs() {
            bench.record_applied(member, outputs.clone());
        }
        for (member, carry) in &drive.run.record.carried {
            bench.carry(member, carry.clone());
        }
        stages(job, &mut drive, &mut bench).await?;
    }

    let settle = Settle {
        pr: drive.run.pr,
        digest: &drive.run.digest,
        approved: &drive.approved,
        members: &members,
        previous_wait: previous_wait.as_ref(),
        failed_before: &failed_before,
        now: job.store.now(),
    };
    let effects = run::settle(&settle, &mut drive.run.status, &mut drive.run.record);
    let mut io = RunIo {
        run: &mut drive.run,
        plan: Some(&drive.plan),
        drift: drive.drift,
    };
    perform_all(job, &mut io, effects).await?;
    Ok(JobOutcome::Done)
}

/// The run cannot go on for a reason in the repository (a broken config
/// at the merge commit, a policy that cannot be read, a tampered record).
async fn refuse_run(
    job: &JobCtx<'_>,
    run: ApplyRunRecord,
    plan: &PlanRecord,
    why: &str,
) -> Result<JobOutcome> {
    let why = format!("{why}. Fix it on the base branch, then `/retry`");
    stop_run(job, run, plan, &why).await
}

/// Stops the run as failed and says why (and what to do) on the pull request.
async fn stop_run(
    job: &JobCtx<'_>,
    mut run: ApplyRunRecord,
    plan: &PlanRecord,
    why_and_fix: &str,
) -> Result<JobOutcome> {
    let effects = run::stop(&mut run.status, why_and_fix.to_owned());
    let mut io = RunIo {
        run: &mut run,
        plan: Some(plan),
        drift: false,
    };
    perform_all(job, &mut io, effects).await?;
    Ok(JobOutcome::Done)
}

/// The pull request's own approval, read from the ledger as the report
/// counted it (for the head and base it was given at), on every job: a
/// revoke stops the run before anything more applies.
async fn pr_approval((store, forge): (&Store, Forge<'_>), drive: &mut Drive) -> Result<Step> {
    let gate = GateId::Pr(drive.run.pr);
    let facts = store
        .gate_facts(&drive.run.repo.id.ledger_key(), &gate)
        .await?;
    let tally = Tally::new(
        &facts,
        plan_scope(&drive.plan, drive.policy.review_approvals),
    );
    let policy = drive.policy.clone();
    let digest = drive.run.digest.clone();
    let passed = !drive.run.record.pr_approved_by.is_empty();
    let dropped = still_counting(
        (store, forge),
        drive,
        (&gate, passed),
        &tally,
        (&digest, &policy),
    )
    .await?;
    let required = drive.policy.required.max(1) as usize;
    let evaluation = tally.evaluate_without(&digest, required, &dropped);
    Ok(run::pr_gate(
        &mut drive.run.record,
        evaluation,
        (gate, &digest),
    ))
}

/// Reads every stage gate and round from the ledger again: approvals
/// given since the last job count, revoked ones stop counting. The sets
/// read back from the record are verified against their digests first.
/// An approval the run spent (what it let through applied) is not read
/// again: it was given, and used.
async fn refresh_approvals((store, forge): (&Store, Forge<'_>), drive: &mut Drive) -> Result<()> {
    let stages: Vec<String> = drive.run.record.stages.keys().cloned().collect();
    for stage in stages {
        let gate = &drive.run.record.stages[&stage];
        gate.change_set
            .verify()
            .with_context(|| format!("the recorded set of stage {stage}"))?;
        let (gate_id, digest) = (gate.gate.clone(), gate.change_set.digest.clone());
        if drive
            .run
            .record
            .spent
            .contains(&(gate_id.clone(), digest.clone()))
        {
            continue;
        }
        let passed = !gate.approved_by.is_empty();
        let policy = drive.stage_policy(gate.stage().unwrap_or(&stage));
        let by = run_gate_approvers(
            (store, forge),
            drive,
            (&gate_id, passed),
            (&digest, &policy),
        )
        .await?;
        let gate = &drive.run.record.stages[&stage];
        let mismatch = gate_mismatch(store, &drive.run, &gate.gate, &gate.change_set.digest)
            .await?
            .filter(|_| by.is_empty());
        let gate = drive.run.record.stages.get_mut(&stage).expect("listed");
        gate.approved_by = by;
        gate.mismatch = mismatch;
    }
    for i in 0..drive.run.record.rounds.len() {
        let round = &drive.run.record.rounds[i];
        round
            .change_set
            .verify()
            .with_context(|| format!("the recorded set of round {}", round.number))?;
        let spent = (round.gate.clone(), round.change_set.digest.clone());
        if !round.covered() && !drive.run.record.spent.contains(&spent) {
            let (gate, digest) = spent;
            let passed = !round.approved_by.is_empty();
            let policy = drive.stage_policy(round.stage.as_str());
            let by = run_gate_approvers((store, forge), drive, (&gate, passed), (&digest, &policy))
                .await?;
            let mismatch = gate_mismatch(store, &drive.run, &gate, &digest)
                .await?
                .filter(|_| by.is_empty());
            drive.run.record.rounds[i].approved_by = by;
            drive.run.record.rounds[i].mismatch = mismatch;
        }
    }
    Ok(())
}

/// The newest standing approval at a run's gate of another digest than
/// `digest` (an earlier set), when none of `digest` stands.
async fn gate_mismatch(
    store: &Store,
    run: &ApplyRunRecord,
    gate: &GateId,
    digest: &Digest,
) -> Result<Option<crate::apply::Mismatch>> {
    let facts = store.gate_facts(&run.repo.id.ledger_key(), gate).await?;
    let scope = Scope::Run {
        run: run.id,
        since: UnixMs::EPOCH,
    };
    Ok(match Tally::new(&facts, scope).evaluate(digest, 1) {
        Evaluation::Mismatch(approved) => Some(crate::apply::Mismatch {
            by: approved.by.login,
            digest: approved.digest,
        }),
        _ => None,
    })
}

/// Who approved `digest` at one of this run's gates, when enough did
/// whose approval still counts (asked of the forge again now), whenever
/// in the run they did: an approval of exactly this digest given before
/// its gate (re)opened counts, as the seeds count any standing approval.
async fn run_gate_approvers(
    (store, forge): (&Store, Forge<'_>),
    drive: &mut Drive,
    (gate, passed): (&GateId, bool),
    (digest, policy): (&Digest, &Policy),
) -> Result<Vec<String>> {
    let facts = store
        .gate_facts(&drive.run.repo.id.ledger_key(), gate)
        .await?;
    let tally = Tally::new(
        &facts,
        Scope::Run {
            run: drive.run.id,
            since: UnixMs::EPOCH,
        },
    );
    let dropped = still_counting(
        (store, forge),
        drive,
        (gate, passed),
        &tally,
        (digest, policy),
    )
    .await?;
    let required = policy.required.max(1) as usize;
    Ok(match tally.evaluate_without(digest, required, &dropped) {
        Evaluation::Satisfied { by, .. } => by.into_iter().map(|a| a.login).collect(),
        _ => Vec::new(),
    })
}

/// The approvals of `digest` (by seq) that no longer count under
/// `policy`: expired, or given by someone who may no longer approve
/// (write access lost, no longer listed or in a listed team). The forge
/// is asked again whenever a run uses an approval (once per approver
/// and job); `crate::apply::run` decides, and notes each one dropped in
/// the record so the run says why it waits.
async fn still_counting(
    (store, forge): (&Store, Forge<'_>),
    drive: &mut Drive,
    (gate, passed): (&GateId, bool),
    tally: &Tally<'_>,
    (digest, policy): (&Digest, &Policy),
) -> Result<HashSet<i64>> {
    let record = &mut drive.run.record;
    let now = store.now();
    let mut dropped = run::expired_approvals(record, tally, (gate, passed), (digest, policy), now);
    // Every standing approver of `digest`, however many are required.
    let mut verdicts = Vec::new();
    for actor in tally.approvers_of(digest, &dropped) {
        let teams = crate::gate::policy::approver_teams(policy).join(",");
        let key = format!("{}|{teams}", actor.login.to_ascii_lowercase());
        let who = match drive.asked.get(&key) {
            Some(who) => who.clone(),
            None => {
                let user = crate::model::User {
                    id: actor.id,
                    login: actor.login.clone(),
                    is_bot: false,
                };
                let who = candidate(forge, &user, policy).await.with_context(|| {
                    format!("checking again whether @{} may approve", actor.login)
                })?;
                drive.asked.insert(key, who.clone());
                who
            }
        };
        let verdict = crate::gate::policy::may_still_approve(policy, &who.as_candidate());
        if let Err(why) = &verdict {
            let why = crate::gate::policy::lapsed_reason(why);
            tracing::info!(%gate, by = %actor.login, why = %why, "an approval no longer counts");
        }
        verdicts.push((actor, verdict));
    }
    let record = &mut drive.run.record;
    dropped.extend(run::lost_approvals(
        record,
        tally,
        (gate, digest),
        &verdicts,
    ));
    Ok(dropped)
}

async fn stages(job: &JobCtx<'_>, drive: &mut Drive, bench: &mut Workbench) -> Result<()> {
    for (stage, waves) in drive.run.record.layout.clone() {
        let all: Vec<&MemberId> = waves.iter().flatten().collect();
        // A member that stood down ended on purpose: its stage is done.
        // One still owed its after.apply hooks is not.
        let done = |r: &AttemptRecord| {
            all.iter().all(|m| {
                let state = r.root_state(m);
                let ended = state.is_applied()
                    || matches!(
                        state,
                        MemberState::Unaffected | MemberState::StoodDown { .. }
                    );
                ended && !r.after_apply_due.contains(*m)
            })
        };
        if done(&drive.run.record) {
            continue;
        }
        let open: Vec<MemberId> = all
            .iter()
            .filter(|m| {
                let state = drive.run.record.state(m);
                !state.is_applied() && state != MemberState::Unaffected
            })
            .map(|m| (*m).clone())
            .collect();
        let at = (stage.as_str(), Moment::BeforePlan);
        let result = run_hooks((job.store, job.forge), (drive, bench), at, (&open, None)).await?;
        let record = &mut drive.run.record;
        if hook_rules::settle(record, at.1, &open, result, Step::Continue).is_some() {
            return Ok(());
        }
        // The stage's gate holds all of its waves; a stage approved
        // wave by wave holds each at its own gate, in turn.
        let held: Vec<(Option<u32>, usize)> = match drive.rules.gate_scope(stage.as_str()) {
            GateScope::Stage => vec![(None, 0)],
            GateScope::Wave => (0..waves.len())
                .map(|i| (Some(u32::try_from(i + 1).unwrap_or(u32::MAX)), i))
                .collect(),
        };
        for (gated_wave, first) in held {
            let part = match gated_wave {
                Some(_) => &waves[first..=first],
                None => &waves[..],
            };
            if gate_then_apply(
                job,
                (drive, bench),
                (stage.as_str(), gated_wave),
                (first, part),
                &open,
            )
            .await?
                == Step::Stop
            {
                return Ok(());
            }
        }
        // A later stage applies only after every member of this one did.
        if !done(&drive.run.record) {
            return Ok(());
        }
    }
    Ok(())
}

/// One gate of `stage` (the stage's, or `gated_wave`'s of a stage
/// approved wave by wave), its `after.gate` hooks once it decided, and
/// then the waves it holds (`part`, the first of them the stage's
/// `first`th, 0-based).
async fn gate_then_apply(
    job: &JobCtx<'_>,
    (drive, bench): (&mut Drive, &mut Workbench),
    (stage, gated_wave): (&str, Option<u32>),
    (first, part): (usize, &[Vec<MemberId>]),
    open: &[MemberId],
) -> Result<Step> {
    let gate = drive.gate(stage);
    let step = stage_gate(job, (drive, bench), (stage, gated_wave), part, gate).await?;
    // after.gate runs once the gate decided: it went on, waits, or
    // expired; not when plans or a hook stopped the stage first.
    let key = crate::model::stage_gate_key(stage, gated_wave);
    let record = &drive.run.record;
    let decided = step == Step::Continue
        || matches!(&record.wait, Some(Wait::Stage { gate, .. }) if gate.stage_gate_key().as_ref() == Some(&key))
        || record.stages.get(&key).is_some_and(|g| g.expired);
    if decided && !drive.rules.hooks(stage, Moment::AfterGate).is_empty() {
        let went_on = step == Step::Continue;
        let decision = GateDecision::of(&drive.run.record, (stage, gated_wave), went_on);
        let at = (stage, Moment::AfterGate);
        let open: Vec<MemberId> = match gated_wave {
            Some(_) => open
                .iter()
                .filter(|m| part.iter().flatten().any(|p| p == *m))
                .cloned()
                .collect(),
            None => open.to_vec(),
        };
        let shown = (open.as_slice(), Some(&decision));
        let result = run_hooks((job.store, job.forge), (drive, bench), at, shown).await?;
        let record = &mut drive.run.record;
        if hook_rules::settle(record, at.1, &open, result, step).is_some() {
            return Ok(Step::Stop);
        }
    }
    if step == Step::Stop {
        return Ok(Step::Stop);
    }
    for (i, wave) in part.iter().enumerate() {
        drive.run.record.at = Some((StageName::new(stage), first + i + 1));
        let step = wave_of(job, (drive, bench), (stage, gated_wave), wave).await?;
        let used = crate::apply::run::spend_used(&mut drive.run.record);
        let mut io = RunIo {
            run: &mut drive.run,
            plan: Some(&drive.plan),
            drift: drive.drift,
        };
        perform_all(job, &mut io, used).await?;
        if step == Step::Stop {
            return Ok(Step::Stop);
        }
    }
    Ok(Step::Continue)
}

/// A stage's gate, decided by the apply machine (`crate::apply::stage`):
/// its plans on the merge commit are previewed wave by wave, and the
/// ledger and the forge say who approved their set.
async fn stage_gate(
    job: &JobCtx<'_>,
    (drive, bench): (&mut Drive, &mut Workbench),
    (stage, wave): (&str, Option<u32>),
    waves: &[Vec<MemberId>],
    gate: GatePolicy,
) -> Result<Step> {
    let mut upstreams = BTreeMap::new();
    for member in waves.iter().flatten() {
        if let Some(component) = bench.config().component(member.component()) {
            upstreams.insert(member.clone(), upstream_members(component, stage));
        }
    }
    let approved = Arc::clone(&drive.approved);
    let mut machine = StageMachine::new(StageSpec {
        run: drive.run.id,
        pr: drive.run.pr,
        approved: &approved,
        stage,
        wave,
        waves,
        gate,
        timeout: drive.rules.stage_timeout(stage),
        digest_over: drive.policy.digest_over,
        after_plan_hooks: !drive.rules.hooks(stage, Moment::AfterPlan).is_empty(),
        priced: drive.rules.cost(stage).is_some(),
        approvers: crate::plan::preview::Approvers::of(&drive.stage_policy(stage)),
        upstreams,
    });
    let (store, forge) = (job.store, job.forge);
    let mut observation = StageObservation::Reached { now: store.now() };
    loop {
        let mut effects = machine.step(&mut drive.run.record, observation)?;
        // What asks nothing back (a save, an override spent) is carried
        // out first, in order; the last effect is the question.
        while effects.len() > 1 {
            let mut io = RunIo {
                run: &mut drive.run,
                plan: Some(&drive.plan),
                drift: drive.drift,
            };
            perform(job, &mut io, effects.remove(0)).await?;
        }
        observation = match effects.as_slice() {
            [Effect::Preview(waves)] => {
                let mut outcomes = Vec::new();
                for pending in waves {
                    bench.plan_wave(pending).await?;
                    outcomes.extend(pending.iter().filter_map(|m| bench.outcome(m).cloned()));
                }
                StageObservation::Previewed { outcomes }
            }
            [Effect::CountApprovals { gate, digest }] => {
                let policy = drive.stage_policy(stage);
                let by =
                    run_gate_approvers((store, forge), drive, (gate, false), (digest, &policy))
                        .await?;
                let mismatch = gate_mismatch(store, &drive.run, gate, digest).await?;
                StageObservation::Counted {
                    by,
                    mismatch,
                    now: store.now(),
                }
            }
            [Effect::Hooks { moment, members }] => {
                let at = (stage, *moment);
                let members = members.clone();
                let result =
                    run_hooks((store, forge), (drive, bench), at, (&members, None)).await?;
                StageObservation::Hooked(result)
            }
            [Effect::Price(members)] => {
                let command = drive
                    .rules
                    .cost(stage)
                    .ok_or_else(|| anyhow!("stage {stage} has no cost command to run"))?;
                let max = drive.policy.max_monthly_increase;
                let cost = bench.run_cost(stage, command, members, max).await;
                StageObservation::Priced {
                    cost: Box::new(cost),
                    overrides: override_facts(store, &drive.run).await?,
                }
            }
            [Effect::Done(step)] => return Ok(*step),
            other => return Err(anyhow!("a stage's gate asked for {other:?}")),
        };
    }
}

/// One wave, driven by the apply machine (`crate::apply::machine`): this
/// carries out its effects in order and answers each question with what
/// it saw. The locks are let go whatever happens, and runs queued
/// behind them resume.
async fn wave_of(
    job: &JobCtx<'_>,
    (drive, bench): (&mut Drive, &mut Workbench),
    (stage, gated_wave): (&str, Option<u32>),
    wave: &[MemberId],
) -> Result<Step> {
    let mut upstreams = BTreeMap::new();
    let mut lifetimes = BTreeMap::new();
    let mut elsewhere = std::collections::BTreeSet::new();
    for member in wave {
        let component = bench
            .config()
            .component(member.component())
            .ok_or_else(|| anyhow!("{member} is not a component of the merge commit"))?;
        upstreams.insert(member.clone(), upstream_members(component, stage));
        lifetimes.insert(member.clone(), bench.apply_lifetime(member));
        if let Some(queue) = bench.applies_elsewhere(member) {
            elsewhere.insert(member.clone());
            *lifetimes.get_mut(member).expect("just inserted") += queue;
        }
    }
    let host = process::host_id();
    let approved = Arc::clone(&drive.approved);
    let groups = bench.config().groups.clone();
    let spec = WaveSpec {
        groups: &groups,
        run: drive.run.id,
        pr: drive.run.pr,
        stage,
        gated_wave,
        members: wave,
        upstreams,
        approved: &approved,
        gate: drive.gate(stage),
        digest_over: drive.policy.digest_over,
        host: &host,
        server: process::identify(std::process::id()),
        lifetimes,
        elsewhere,
        held_retry: job.runner.options.held_retry,
        concurrency: drive.rules.apply_concurrency(stage),
        before_apply_hooks: !drive.rules.hooks(stage, Moment::BeforeApply).is_empty(),
        after_apply_hooks: !drive.rules.hooks(stage, Moment::AfterApply).is_empty(),
    };
    let mut machine = WaveMachine::new(spec);
    let first = Observation::Reached {
        now: job.store.now(),
    };
    let carried = carry_out_wave(job, (drive, bench), &mut machine, (stage, first)).await;
    if carried.is_err() && machine.holds_locks() {
        release_locks((job.store, job.queue), &drive.run).await?;
    }
    carried
}

/// Feeds `observation` to the machine and carries out what it returns,
/// until the wave is done in this job. Applies run side by side
/// ([`InFlight`]); what a command did is the next observation once the
/// effects before it are carried out. A question (lock, plan, re-plan)
/// comes only while no apply runs, so the workbench is changed (outputs
/// read, state carried) only then: what an apply left while others ran
/// is kept until they are done.
async fn carry_out_wave(
    job: &JobCtx<'_>,
    (drive, bench): (&mut Drive, &mut Workbench),
    machine: &mut WaveMachine<'_>,
    (stage, observation): (&str, Observation),
) -> Result<Step> {
    let mut effects: VecDeque<Effect> = machine.step(&mut drive.run.record, observation)?.into();
    loop {
        let mut io = RunIo {
            run: &mut drive.run,
            plan: Some(&drive.plan),
            drift: drive.drift,
        };
        let (question, for_bench) =
            carry_out_applies(job, (&mut io, bench), machine, &mut effects).await?;
        for effect in for_bench {
            match effect {
                Effect::ReadOutputs { member, outputs } => bench.record_applied(&member, outputs),
                Effect::Carry { member, carry } => bench.carry(&member, carry),
                other => return Err(anyhow!("{other:?} does not change the workbench")),
            }
        }
        let store = job.store;
        let now = || store.now();
        let answer = match question {
            Effect::Done(step) => return Ok(step),
            Effect::Lock(members) => {
                let repo = drive.run.repo.id.clone();
                match store.lock_members(&repo, drive.run.id, &members).await? {
                    Some((member, pr)) => Observation::LockHeld { member, pr },
                    None => Observation::Locked {
                        alive: processes_alive(&drive.run.record, &members),
                        now: now(),
                    },
                }
            }
            Effect::Plan(members) => {
                bench.plan_wave(&members).await?;
                let outcomes = members
                    .iter()
                    .map(|m| bench.outcome(m).expect("planned above").clone())
                    .collect();
                Observation::Planned {
                    outcomes,
                    overrides: override_facts(store, &drive.run).await?,
                    now: now(),
                }
            }
            Effect::Replan(member) => {
                bench.plan_wave(std::slice::from_ref(&member)).await?;
                Observation::Replanned {
                    outcome: Box::new(bench.outcome(&member).expect("planned").clone()),
                    overrides: override_facts(store, &drive.run).await?,
                    now: now(),
                }
            }
            Effect::Hooks { moment, members } => {
                let at = (stage, moment);
                let result =
                    run_hooks((store, job.forge), (drive, bench), at, (&members, None)).await?;
                Observation::Hooked { result, now: now() }
            }
            other => return Err(anyhow!("{other:?} is not a question of the wave")),
        };
        debug_assert!(effects.is_empty(), "a question is the last effect");
        effects = machine.step(&mut drive.run.record, answer)?.into();
    }
}

/// Carries out `effects` and what the machine answers to the applies'
/// starts and ends, until a question or the wave's end comes with no
/// apply running. Returns it, with the workbench changes kept meanwhile.
async fn carry_out_applies(
    job: &JobCtx<'_>,
    (io, bench): (&mut RunIo<'_>, &Workbench),
    machine: &mut WaveMachine<'_>,
    effects: &mut VecDeque<Effect>,
) -> Result<(Effect, Vec<Effect>)> {
    let mut applies = InFlight::new(bench);
    let mut for_bench = Vec::new();
    loop {
        let Some(effect) = effects.pop_front() else {
            let Some(event) = applies.next().await else {
                return Err(anyhow!("the apply machine stopped without ending the wave"));
            };
            let observation = match event {
                ApplyEvent::Started { member, process } => Observation::Started { member, process },
                ApplyEvent::Ended { member, run } => {
                    if !matches!(run.outcome, ApplyOutcome::Applied(_)) {
                        tracing::warn!(%member, outcome = ?run.outcome, "apply did not complete");
                    }
                    Observation::Ended {
                        member,
                        outcome: run.outcome,
                        printed: OutputTail::of(&run.output),
                        carry: run.carry,
                        ran_on: run.ran_on,
                        now: job.store.now(),
                    }
                }
            };
            effects.extend(machine.step(&mut io.run.record, observation)?);
            continue;
        };
        match effect {
            Effect::Apply(member) => applies.start(member),
            Effect::ApplyGroup(members) => applies.start_group(members),
            Effect::ReadOutputs { .. } | Effect::Carry { .. } => for_bench.push(effect),
            question @ (Effect::Lock(_)
            | Effect::Plan(_)
            | Effect::Replan(_)
            | Effect::Hooks { .. }
            | Effect::Done(_)) => {
                if !applies.is_idle() {
                    return Err(anyhow!(
                        "the apply machine asked {question:?} while applies ran"
                    ));
                }
                return Ok((question, for_bench));
            }
            other => applies.meanwhile(perform(job, io, other)).await?,
        }
    }
}

async fn perform_all(job: &JobCtx<'_>, io: &mut RunIo<'_>, effects: Vec<Effect>) -> Result<()> {
    for effect in effects {
        perform(job, io, effect).await?;
    }
    Ok(())
}

/// Carries out one of the run's effects that asks nothing back.
async fn perform(job: &JobCtx<'_>, io: &mut RunIo<'_>, effect: Effect) -> Result<()> {
    let JobCtx {
        store,
        forge,
        mirror,
        queue,
        ..
    } = *job;
    match effect {
        Effect::Save => store.save_apply_run(io.run).await?,
        Effect::Publish => {
            let plan = io
                .plan
                .ok_or_else(|| anyhow!("the run's report needs its plan"))?;
            publish_run(store, forge, io.run, plan).await?;
        }
        Effect::RecordDeployed { member, outputs } => {
            store
                .record_deployed(&io.run.repo.id, member.as_str(), &outputs, io.run.id)
                .await?;
            if io.drift {
                let digest = match io.run.record.state(&member) {
                    MemberState::Applied { plan_digest, .. } => plan_digest,
                    _ => io.run.digest.clone(),
                };
                let run = (io.run.id, io.run.pr);
                record_drift_applied(store, forge, run, (&member, &digest)).await?;
            }
            recheck_drift(store, &io.run.repo.id, &member).await?;
        }
        Effect::SpendOverride { member, digest } => {
            let gate = GateId::Override(io.run.pr);
            let data = FactData {
                run: Some(io.run.id),
                member: Some(member),
                ..FactData::default()
            };
            append_own_fact(store, forge, (gate, FactKind::Spent, &digest), data).await?;
        }
        Effect::SpendApproval { gate, digest } => {
            let data = FactData::in_run(io.run.id, &io.run.merge_sha);
            append_own_fact(store, forge, (gate, FactKind::Spent, &digest), data).await?;
        }
        Effect::RecordPending(pending) => {
            let asked = (&pending.gate, &pending.digest, pending.members.as_slice());
            record_pending(store, forge, asked, pending.description).await?;
        }
        Effect::ResumeAt(at) => {
            if let Some(Wait::EarlierAttempt { member, until }) = &io.run.record.wait {
                tracing::warn!(
                    %member,
                    until = until.millis(),
                    "an earlier apply may still be running; waiting for it to end"
                );
            }
            let task = Task::Apply {
                repo: io.run.repo.clone(),
                pr: io.run.pr,
            };
            queue.enqueue_at(task, at).await?;
        }
        Effect::Unlock => release_locks((store, queue), io.run).await?,
        Effect::ResumeIfUnlocked(member) => {
            let holder = store
                .member_lock_holder(&io.run.repo.id, member.as_str())
                .await?;
            if holder.is_none_or(|h| h == io.run.id) {
                enqueue_resume(queue, &io.run.repo, io.run.pr).await?;
            }
        }
        Effect::Say(news) => {
            let run = &*io.run;
            let said = apply_report::news(&news, &run.merge_sha, &run.base_sha, &run.record);
            forge.reply_linked(run.pr, &said, "run").await?;
            let page = forge.pull_page(run.pr);
            notify_of((queue, &mirror), (run, page.as_deref()), &news, &said).await?;
        }
        question @ (Effect::Lock(_)
        | Effect::Plan(_)
        | Effect::Apply(_)
        | Effect::ApplyGroup(_)
        | Effect::Replan(_)
        | Effect::Hooks { .. }
        | Effect::Preview(_)
        | Effect::Price(_)
        | Effect::CountApprovals { .. }
        | Effect::ReadOutputs { .. }
        | Effect::Carry { .. }
        | Effect::Done(_)) => {
            return Err(anyhow!(
                "{question:?} belongs to a wave or a gate and is carried out there"
            ))
        }
    }
    Ok(())
}

/// Every fact of the run's override gate, as the ledger holds it now.
async fn override_facts(store: &Store, run: &ApplyRunRecord) -> Result<Vec<Fact>> {
    let gate = GateId::Override(run.pr);
    store.gate_facts(&run.repo.id.ledger_key(), &gate).await
}

/// Lets go of a run's member locks and resumes the runs queued behind them.
async fn release_locks((store, queue): (&Store, Queue<'_>), run: &ApplyRunRecord) -> Result<()> {
    let queued = store.unlock_members(&run.repo.id, run.id).await?;
    for waiting in queued {
        enqueue_resume(queue, &waiting.repo, waiting.pr).await?;
    }
    Ok(())
}

/// Each stage's waves on the merge commit, in order, as `prepared` derives them.
fn layout_of(prepared: &engine::Prepared) -> Vec<(StageName, Vec<Vec<MemberId>>)> {
    prepared
        .config
        .stages
        .iter()
        .map(|s| {
            let waves = stage_waves(&prepared.derivation.waves, s.name.as_str());
            (
                s.name.clone(),
                waves.into_iter().map(<[MemberId]>::to_vec).collect(),
            )
        })
        .filter(|(_, waves): &(StageName, Vec<Vec<MemberId>>)| !waves.is_empty())
        .collect()
}

/// For each of `members` caught `applying` by a command started on this
/// host, whether that command's process still runs (before it was known,
/// whether the server that was starting it does).
fn processes_alive(record: &AttemptRecord, members: &[MemberId]) -> BTreeMap<MemberId, bool> {
    let here = process::host_id();
    members
        .iter()
        .filter_map(|member| match record.state(member) {
            MemberState::Applying {
                attempt: Some(attempt),
                ..
            } if attempt.host == here => attempt
                .process
                .as_ref()
                .or(attempt.server.as_ref())
                .map(|p| (member.clone(), process::is_alive(p))),
            _ => None,
        })
        .collect()
}

/// The subject of a drift run, when `pr` is a drift issue's number: its
/// stage is planned whole and only the approved members run.
async fn drift_subject(store: &Store, repo: &RepoId, pr: PrNumber) -> Result<Option<DriftSubject>> {
    Ok(store
        .drift_issue(repo, pr)
        .await?
        .map(|issue| issue.subject))
}

/// Records that a drift run applied `member` (its plan's digest).
async fn record_drift_applied(
    store: &Store,
    forge: Forge<'_>,
    (run, pr): (i64, PrNumber),
    (member, digest): (&MemberId, &Digest),
) -> Result<()> {
    let data = FactData {
        run: Some(run),
        member: Some(member.clone()),
        ..FactData::default()
    };
    append_own_fact(
        store,
        forge,
        (GateId::Pr(pr), FactKind::DriftApplied, digest),
        data,
    )
    .await
}

/// After a run applied `member`: a drift issue that covers it is checked
/// again at once (whether the apply brought the drift back is known only
/// by planning).
async fn recheck_drift(store: &Store, repo: &RepoId, member: &MemberId) -> Result<()> {
    let open = store.open_drift_issues(repo, member.stage()).await?;
    if open.iter().any(|issue| issue.subject.covers(member)) {
        store.drift_check_soon(repo, member.stage()).await?;
    }
    Ok(())
}
