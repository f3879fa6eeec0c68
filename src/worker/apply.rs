//! Apply runs after merge: one run per merged pull request, driven stage by
//! stage and wave by wave on the merge commit. `crate::apply` decides; this
//! plans and applies through a `Workbench`, writes the attempt record before
//! and after every apply command, holds the member locks, and reports the
//! run in the pull request and on the merge commit.
//!
//! A job drives the run as far as it can go without a person and ends; an
//! approval, an override, a released lock or `/retry` enqueues the next job,
//! and a crash leaves the job's lease to expire and the job to run again.

use super::gate::as_counted;
use super::Worker;
use crate::apply::{
    covered_by_any, earlier_attempt, held_backoff, run_goes_on, settled_status,
    stage_needs_approval, stage_waves, stopped_upstream, AttemptRecord, CommandAttempt,
    EarlierAttempt, MemberState, Round, RunStatus, StageGate, Wait, MAX_REPLANS,
};
use crate::config::repo::{gate_of, stage_timeout, GatePolicy, Policy, RawRepoConfig};
use crate::config::{RepoConfig, CONFIG_FILE};
use crate::forge::client::ForgeClient;
use crate::forge::types::{CheckReport, CheckState, APPLY_CHECK_NAME};
use crate::forge::{PullRequest, RepoRef};
use crate::gate::ledger::{self, Actor, Evaluation, Fact, FactKind, NewFact, Source};
use crate::jobs::Task;
use crate::model::{CommitSha, GateId, MemberId, PrNumber};
use crate::plan::changeset::ChangeSet;
use crate::plan::coverage::{Coverage, FreshPlan};
use crate::plan::engine::{
    self, ApplyOutcome, MemberOutcome, PlanError, PlanOptions, RecordedOutputs, Workbench,
};
use crate::plan::git;
use crate::report::apply::{self as apply_report, RunView};
use crate::sandbox::process;
use crate::store::{ApplyRunRecord, JobOutcome, NewApplyRun, PlanRecord};
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Whether a run goes on after a step or stops here (waiting or failed).
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Continue,
    Stop,
}

/// The deployed estate as later plans read it.
struct Deployed(HashMap<String, Map<String, Value>>);

impl RecordedOutputs for Deployed {
    fn outputs(&self, member: &str) -> Option<Map<String, Value>> {
        self.0.get(member).cloned()
    }
}

/// What a run needs while it is driven, read once per job.
struct Drive<'a> {
    client: &'a ForgeClient,
    run: ApplyRunRecord,
    plan: PlanRecord,
    approved: ChangeSet,
    policy: Policy,
    /// The base's config (the merge's first parent), for stage gates.
    base: Option<RawRepoConfig>,
    /// Approvers' permissions as the forge answered them in this job.
    asked: HashMap<String, super::gate::Who>,
}

impl Drive<'_> {
    /// The policy a stage's gate and rounds are judged by.
    fn stage_policy(&self, stage: &str) -> Policy {
        crate::config::repo::stage_policy(self.base.as_ref(), &self.policy, stage)
    }
}

impl Worker {
    /// The recorded outputs of the repository's deployed estate, for plans.
    pub(super) async fn deployed_estate(&self, repo: &RepoRef) -> Result<Arc<dyn RecordedOutputs>> {
        Ok(Arc::new(Deployed(
            self.store.deployed_outputs(&repo.id).await?,
        )))
    }

    /// A merged pull request: starts its run once (a redelivered merge
    /// starts nothing new) and drives it.
    pub(super) async fn merged(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: &PullRequest,
        merge_sha: &CommitSha,
    ) -> Result<JobOutcome> {
        if self.store.apply_run(&repo.id, pr.number).await?.is_some() {
            return self.resume(client, repo, pr.number).await;
        }
        let plan = self.store.latest_plan(&repo.id, pr.number).await?;
        let Some(plan) = plan.filter(|p| p.head_sha == pr.head_sha) else {
            client
                .reply(
                    repo,
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
        self.fetch_commit(client, repo, merge_sha).await?;
        let mirror = self.workspace.mirror_path(&repo.id);
        // The target as it was before the merge, whatever the method: the
        // gates and policy it reads, and the fan-out against it, are never
        // a state an earlier commit of the pull request made.
        let base = tokio::task::block_in_place(|| {
            git::target_before_merge(
                &mirror,
                merge_sha.as_str(),
                plan.head_sha.as_str(),
                plan.base_sha.as_str(),
            )
        })
        .with_context(|| format!("finding the target branch before the merge {merge_sha}"))?;
        let (run, created) = self
            .store
            .create_apply_run(NewApplyRun {
                repo: repo.clone(),
                pr: pr.number,
                merge_sha: merge_sha.clone(),
                base_sha: CommitSha::parse(&base).map_err(|e| anyhow!(e))?,
                plan_id: plan.id,
                digest,
            })
            .await?;
        if created {
            tracing::info!(run = run.id, pr = %pr.number, merge = %merge_sha.short(), "apply run started");
        }
        self.drive(client, run).await
    }

    /// Drives the pull request's run on from where its record stands.
    pub(super) async fn resume(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<JobOutcome> {
        let Some(run) = self.store.apply_run(&repo.id, pr).await? else {
            return Ok(JobOutcome::Skipped("no apply run".into()));
        };
        if !run_goes_on(run.status, &run.record) {
            return Ok(JobOutcome::Skipped(format!(
                "the run is {}",
                run.status.as_str()
            )));
        }
        self.fetch_commit(client, repo, &run.merge_sha).await?;
        self.drive(client, run).await
    }

    /// A run whose job was dead-lettered stops as `failed`, so `/retry`
    /// resumes it from its record (a member caught applying is planned
    /// again first), and the pull request is told why.
    pub(super) async fn apply_gave_up(
        &self,
        task: &Task,
        attempts: u32,
        error: &str,
    ) -> Result<()> {
        let repo = task.repo();
        let Some(mut run) = self.store.apply_run(&repo.id, task.pr_number()).await? else {
            return Ok(());
        };
        if run.status.is_final() {
            return Ok(());
        }
        run.status = RunStatus::Failed;
        self.store.save_apply_run(&run).await?;
        self.release_locks(&run).await?;
        let client = self.forges.client(repo.id.forge)?;
        client
            .reply(
                repo,
                run.pr,
                &format!(
                    "The apply on {} stopped: its job failed {attempts} times, the last with: {error}\n\nWhat applied stays applied. This is usually the forge or the network; `/retry` resumes the run from its record.",
                    run.merge_sha.short()
                ),
            )
            .await?;
        Ok(())
    }

    pub(super) async fn fetch_commit(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        commit: &CommitSha,
    ) -> Result<()> {
        let auth = client.git_auth_header(repo).await?;
        self.workspace
            .fetch(&super::workspace::FetchRequest {
                repo: &repo.id,
                sources: vec![(&repo.clone_url, commit)],
                auth: auth.as_ref(),
            })
            .await?;
        Ok(())
    }

    /// Resumes the pull request's run if it waits (after an approval).
    pub(super) async fn resume_if_waiting(&self, repo: &RepoRef, pr: PrNumber) -> Result<()> {
        let waiting = self
            .store
            .apply_run(&repo.id, pr)
            .await?
            .is_some_and(|r| run_goes_on(r.status, &r.record));
        if waiting {
            self.enqueue_resume(repo, pr).await?;
        }
        Ok(())
    }

    /// Enqueues the next job of a run (after an approval, an override, a
    /// released lock or `/retry`).
    pub(super) async fn enqueue_resume(&self, repo: &RepoRef, pr: PrNumber) -> Result<()> {
        let task = Task::Apply {
            repo: repo.clone(),
            pr,
        };
        self.store.enqueue(task.into_job()).await?;
        self.wake.notify_one();
        Ok(())
    }

    async fn drive(&self, client: &ForgeClient, run: ApplyRunRecord) -> Result<JobOutcome> {
        let plan = self.store.plan(run.plan_id).await?.ok_or_else(|| {
            anyhow!(
                "apply run {} names plan {}, which is gone",
                run.id,
                run.plan_id
            )
        })?;
        let mirror = self.workspace.mirror_path(&run.repo.id);
        let base_raw = tokio::task::block_in_place(|| raw_config_at(&mirror, &run.base_sha))?;
        let policy = self.base_policy(&run.repo, &run.base_sha)?;
        let approved = serde_json::from_value::<ChangeSet>(plan.change_set.clone())
            .map_err(|e| e.to_string())
            .and_then(|set| set.verify().map(|()| set).map_err(|e| e.to_string()))
            .and_then(|set| {
                if set.digest == run.digest {
                    Ok(set)
                } else {
                    Err(format!(
                        "plan {} digests to {}, not the approved {}",
                        run.plan_id, set.digest, run.digest
                    ))
                }
            });
        let mut options = PlanOptions::new(
            &mirror,
            run.base_sha.as_str(),
            run.merge_sha.as_str(),
            Arc::clone(&self.sandbox),
        );
        options.cancel = self.cancel.clone();
        options.concurrency = self.options.plan_concurrency;
        options.recorded = Some(self.deployed_estate(&run.repo).await?);
        let prepared = tokio::task::block_in_place(|| engine::prepare(&options));

        let (approved, policy, prepared) = match (approved, policy, prepared) {
            (Ok(a), Ok(p), Ok(prepared)) => (a, p, prepared),
            (approved, policy, prepared) => {
                let why = match (approved, policy, prepared) {
                    (Err(e), _, _) => format!("the approved change set cannot be trusted: {e}"),
                    (_, Err(e), _) => e,
                    (_, _, Err(PlanError::Internal(e))) => {
                        return Err(e.context("reading the merge commit"))
                    }
                    (_, _, Err(e)) => format!("the merge commit cannot be planned: {e}"),
                    _ => unreachable!("one of them failed"),
                };
                return self.refuse_run(client, run, &plan, &why).await;
            }
        };
        let layout: Vec<(String, Vec<Vec<String>>)> = prepared
            .config
            .stages
            .iter()
            .map(|s| {
                let waves = stage_waves(&prepared.derivation.waves, &s.name);
                (
                    s.name.clone(),
                    waves.into_iter().map(<[String]>::to_vec).collect(),
                )
            })
            .filter(|(_, waves): &(String, Vec<Vec<String>>)| !waves.is_empty())
            .collect();
        let mut drive = Drive {
            client,
            run,
            plan,
            approved,
            policy,
            base: base_raw,
            asked: HashMap::new(),
        };
        drive.run.record.layout = layout;
        drive.run.record.lapsed.clear();
        let failed_before = failed_members(&drive.run.record);
        drive.run.status = RunStatus::Running;
        let previous_wait = drive.run.record.wait.take();

        let step = self.pr_approval(&mut drive).await?;
        let mut members: BTreeSet<String> = drive
            .approved
            .members
            .iter()
            .map(|m| m.member.clone())
            .collect();
        if step == Step::Continue {
            let derived: BTreeSet<&String> = prepared.derivation.members.iter().collect();
            for member in &members {
                if !derived.contains(member) && !drive.run.record.state(member).is_applied() {
                    drive.run.record.set(member, MemberState::Unaffected);
                }
            }
            members.extend(prepared.derivation.members.iter().cloned());
            self.refresh_approvals(&mut drive).await?;
            if let Some(problem) = self.sandbox.problem() {
                let why = format!("{problem}. Once the server is fixed, `/retry`");
                return self.stop_run(client, drive.run, &drive.plan, &why).await;
            }
            let bench = tokio::task::block_in_place(|| {
                Workbench::open(
                    options,
                    prepared.config.clone(),
                    prepared.base_env.clone(),
                    drive.run.merge_sha.as_str(),
                )
            });
            let mut bench = match bench {
                Ok(bench) => bench,
                Err(PlanError::Internal(e)) => {
                    return Err(e.context("checking out the merge commit"))
                }
                Err(e) => {
                    let why = format!("the merge commit cannot be planned: {e}");
                    return self.refuse_run(client, drive.run, &drive.plan, &why).await;
                }
            };
            for (member, outputs) in drive.run.record.applied_outputs() {
                bench.record_applied(member, outputs.clone());
            }
            self.stages(&mut drive, &mut bench).await?;
        }

        drive.run.status = settled_status(&drive.run.record, &members);
        if drive.run.status != RunStatus::Waiting {
            drive.run.record.at = None;
        }
        let new_wait = drive
            .run
            .record
            .wait
            .as_ref()
            .is_some_and(|w| w.is_new_since(previous_wait.as_ref()));
        if new_wait || (drive.run.record.wait.is_none() && previous_wait.is_some()) {
            drive.run.record.wait_posted_at = chrono::Utc::now().timestamp_millis();
        }
        if new_wait {
            if let Some((gate, digest, members, description)) =
                pending_of(&drive.run, &drive.approved)
            {
                self.record_pending(
                    drive.client,
                    &drive.run.repo,
                    &gate,
                    &digest,
                    &members,
                    description,
                )
                .await?;
            }
        }
        if drive.run.status.is_final() {
            self.spend_approvals(&drive).await?;
        }
        if drive.run.status.is_final() || drive.run.status == RunStatus::Failed {
            self.release_locks(&drive.run).await?;
        }
        self.publish_run(client, &mut drive.run, &drive.plan)
            .await?;
        // The holder may have let go between our refusal and our saying we
        // wait: it wakes the runs it finds waiting, and we look again after
        // saving, so one of the two always sees the other.
        if let Some(Wait::Lock { member, .. }) = &drive.run.record.wait {
            let holder = self
                .store
                .member_lock_holder(&drive.run.repo.id, member)
                .await?;
            if holder.is_none_or(|h| h == drive.run.id) {
                self.enqueue_resume(&drive.run.repo, drive.run.pr).await?;
            }
        }
        // A failure outranks a wait: said first, with the wait after it.
        let newly_failed = drive.run.status == RunStatus::Failed
            && failed_members(&drive.run.record) != failed_before;
        let wait_help = drive
            .run
            .record
            .wait
            .as_ref()
            .filter(|_| new_wait)
            .map(|wait| {
                let lapsed = apply_report::lapsed_lines(&drive.run.record)
                    + &apply_report::wait_expiry(&drive.run.record);
                match lapsed.is_empty() {
                    true => apply_report::wait_help(wait),
                    false => format!("{}\n{lapsed}", apply_report::wait_help(wait)),
                }
            });
        let said = match drive.run.status {
            RunStatus::Failed if newly_failed => {
                let mut said = format!(
                    "The apply on {} failed: {}. Members that applied stay applied; `/retry` plans what failed again and applies what the approvals cover.",
                    drive.run.merge_sha.short(),
                    stopped_members(&drive.run.record)
                );
                if let Some(help) = wait_help {
                    said.push_str(&format!("\n\nMeanwhile, elsewhere in the run: {help}"));
                }
                Some(said)
            }
            RunStatus::Applied => Some(applied_summary(&drive.run)),
            RunStatus::Ended => Some(ended_summary(&drive.run)),
            _ => wait_help,
        };
        if let Some(said) = said {
            let repo = drive.run.repo.clone();
            client.reply(&repo, drive.run.pr, &said).await?;
        }
        Ok(JobOutcome::Done)
    }

    /// The run cannot go on for a reason in the repository (a broken config
    /// at the merge commit, a policy that cannot be read, a tampered record).
    async fn refuse_run(
        &self,
        client: &ForgeClient,
        run: ApplyRunRecord,
        plan: &PlanRecord,
        why: &str,
    ) -> Result<JobOutcome> {
        let why = format!("{why}. Fix it on the base branch, then `/retry`");
        self.stop_run(client, run, plan, &why).await
    }

    /// Stops the run as failed and says why (and what to do) on the pull request.
    async fn stop_run(
        &self,
        client: &ForgeClient,
        mut run: ApplyRunRecord,
        plan: &PlanRecord,
        why_and_fix: &str,
    ) -> Result<JobOutcome> {
        run.status = RunStatus::Failed;
        self.publish_run(client, &mut run, plan).await?;
        client
            .reply(
                &run.repo,
                run.pr,
                &format!(
                    "The apply on {} cannot go on: {why_and_fix}.",
                    run.merge_sha.short()
                ),
            )
            .await?;
        Ok(JobOutcome::Done)
    }

    /// The pull request's own approval, read from the ledger as the report
    /// counted it (for the head and base it was given at), on every job: a
    /// revoke stops the run before anything more applies.
    async fn pr_approval(&self, drive: &mut Drive<'_>) -> Result<Step> {
        let gate = GateId::Pr(drive.run.pr).to_string();
        let facts = self
            .store
            .gate_facts(&drive.run.repo.id.ledger_key(), &gate)
            .await?;
        let counted = as_counted(&facts, &drive.plan, drive.policy.review_approvals);
        let policy = drive.policy.clone();
        let digest = drive.run.digest.clone();
        let passed = !drive.run.record.pr_approved_by.is_empty();
        let counted = self
            .still_counting(drive, (&gate, passed), counted, &digest, &policy)
            .await?;
        let required = drive.policy.required.max(1) as usize;
        match ledger::evaluate(&counted, &drive.run.digest, required) {
            Evaluation::Satisfied { by, .. } => {
                drive.run.record.pr_approved_by = by.into_iter().map(|a| a.login).collect();
                Ok(Step::Continue)
            }
            _ => {
                drive.run.record.pr_approved_by.clear();
                drive.run.record.wait = Some(Wait::PrApproval {
                    gate,
                    digest: drive.run.digest.clone(),
                });
                Ok(Step::Stop)
            }
        }
    }

    /// Reads every stage gate and round from the ledger again: approvals
    /// given since the last job count, revoked ones stop counting. The sets
    /// read back from the record are verified against their digests first.
    async fn refresh_approvals(&self, drive: &mut Drive<'_>) -> Result<()> {
        let stages: Vec<String> = drive.run.record.stages.keys().cloned().collect();
        for stage in stages {
            let gate = &drive.run.record.stages[&stage];
            gate.change_set
                .verify()
                .with_context(|| format!("the recorded set of stage {stage}"))?;
            let (gate_id, digest) = (gate.gate.clone(), gate.change_set.digest.clone());
            let (since, passed) = (gate.opened_at, !gate.approved_by.is_empty());
            let policy = drive.stage_policy(&stage);
            let by = self
                .run_gate_approvers(drive, (&gate_id, since, passed), &digest, &policy)
                .await?;
            let gate = &drive.run.record.stages[&stage];
            let mismatch = self
                .gate_mismatch(&drive.run, &gate.gate, &gate.change_set.digest)
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
            if !round.covered() {
                let (gate, digest) = (round.gate.clone(), round.change_set.digest.clone());
                let passed = !round.approved_by.is_empty();
                let policy = drive.stage_policy(&round.stage.clone());
                let by = self
                    .run_gate_approvers(drive, (&gate, 0, passed), &digest, &policy)
                    .await?;
                let mismatch = self
                    .gate_mismatch(&drive.run, &gate, &digest)
                    .await?
                    .filter(|_| by.is_empty());
                drive.run.record.rounds[i].approved_by = by;
                drive.run.record.rounds[i].mismatch = mismatch;
            }
        }
        Ok(())
    }

    /// The facts of one of this run's gates that bear on it: given in this
    /// run, and every revoke and spend.
    async fn run_gate_facts(&self, run: &ApplyRunRecord, gate: &str) -> Result<Vec<Fact>> {
        let facts = self
            .store
            .gate_facts(&run.repo.id.ledger_key(), gate)
            .await?;
        Ok(facts
            .into_iter()
            .filter(|f| {
                matches!(f.fact.kind, FactKind::Revoked | FactKind::Spent)
                    || f.fact.data.get("run") == Some(&json!(run.id))
            })
            .collect())
    }

    /// The newest standing approval at a run's gate of another digest than
    /// `digest` (an earlier set), when none of `digest` stands.
    async fn gate_mismatch(
        &self,
        run: &ApplyRunRecord,
        gate: &str,
        digest: &str,
    ) -> Result<Option<crate::apply::Mismatch>> {
        let here = self.run_gate_facts(run, gate).await?;
        Ok(match ledger::evaluate(&here, digest, 1) {
            Evaluation::Mismatch { approved, by } => Some(crate::apply::Mismatch {
                by: by.login,
                digest: approved,
            }),
            _ => None,
        })
    }

    /// Who approved `digest` at one of this run's gates, when enough did
    /// whose approval still counts (asked of the forge again now).
    async fn run_gate_approvers(
        &self,
        drive: &mut Drive<'_>,
        (gate, since, passed): (&str, i64, bool),
        digest: &str,
        policy: &Policy,
    ) -> Result<Vec<String>> {
        // A gate opened afresh counts only the approvals given since.
        let here: Vec<Fact> = self
            .run_gate_facts(&drive.run, gate)
            .await?
            .into_iter()
            .filter(|f| f.fact.kind != FactKind::Approved || f.fact.at >= since)
            .collect();
        let here = self
            .still_counting(drive, (gate, passed), here, digest, policy)
            .await?;
        let required = policy.required.max(1) as usize;
        Ok(match ledger::evaluate(&here, digest, required) {
            Evaluation::Satisfied { by, .. } => by.into_iter().map(|a| a.login).collect(),
            _ => Vec::new(),
        })
    }

    /// `facts` without the approvals of `digest` whose approvers may no
    /// longer approve under `policy` (write access lost, no longer listed
    /// or in a listed team): the forge is asked again whenever a run uses
    /// an approval, and each one dropped is noted in the record, so the
    /// run says why it waits.
    async fn still_counting(
        &self,
        drive: &mut Drive<'_>,
        (gate, passed): (&str, bool),
        facts: Vec<Fact>,
        digest: &str,
        policy: &Policy,
    ) -> Result<Vec<Fact>> {
        // An approval expires `approval_ttl` after it was given, unless the
        // run already went through its gate with it.
        let ttl = policy.approval_ttl_ms().filter(|_| !passed);
        let now = chrono::Utc::now().timestamp_millis();
        let mut expired = BTreeSet::new();
        for fact in &facts {
            let approval = &fact.fact;
            if approval.kind == FactKind::Approved
                && approval.digest == digest
                && crate::gate::policy::expired(approval.at, ttl, now)
            {
                let lapsed = crate::apply::Lapsed {
                    gate: gate.to_owned(),
                    by: approval.actor.login.clone(),
                    why: format!(
                        "it expired at {} (`[policy] approval_ttl` is {})",
                        apply_report::utc(approval.at.saturating_add(ttl.unwrap_or(0))),
                        policy.approval_ttl.as_deref().unwrap_or("?")
                    ),
                };
                if !drive.run.record.lapsed.contains(&lapsed) {
                    drive.run.record.lapsed.push(lapsed);
                }
                expired.insert(fact.seq);
            }
        }
        let facts: Vec<Fact> = facts
            .into_iter()
            .filter(|f| !expired.contains(&f.seq))
            .collect();
        // Every standing approver of `digest`, however many are required.
        let standing = match ledger::evaluate(&facts, digest, usize::MAX) {
            Evaluation::Waiting { have, .. } | Evaluation::Satisfied { by: have, .. } => have,
            Evaluation::Mismatch { .. } => Vec::new(),
        };
        let mut dropped = BTreeSet::new();
        for actor in standing {
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
                    let who = self
                        .candidate(drive.client, &drive.run.repo, &user, policy)
                        .await
                        .with_context(|| {
                            format!("checking again whether @{} may approve", actor.login)
                        })?;
                    drive.asked.insert(key, who.clone());
                    who
                }
            };
            if let Err(why) = crate::gate::policy::may_still_approve(policy, &who.as_candidate()) {
                let lapsed = crate::apply::Lapsed {
                    gate: gate.to_owned(),
                    by: actor.login.clone(),
                    why: crate::gate::policy::lapsed_reason(&why),
                };
                tracing::info!(gate, by = %actor.login, why = %lapsed.why, "an approval no longer counts");
                if !drive.run.record.lapsed.contains(&lapsed) {
                    drive.run.record.lapsed.push(lapsed);
                }
                dropped.insert(actor.id);
            }
        }
        Ok(facts
            .into_iter()
            .filter(|f| {
                !(f.fact.kind == FactKind::Approved
                    && f.fact.digest == digest
                    && dropped.contains(&f.fact.actor.id))
            })
            .collect())
    }

    async fn stages(&self, drive: &mut Drive<'_>, bench: &mut Workbench) -> Result<()> {
        for (stage, waves) in drive.run.record.layout.clone() {
            let all: Vec<&String> = waves.iter().flatten().collect();
            // A member that stood down ended on purpose: its stage is done.
            let done = |r: &AttemptRecord| {
                all.iter().all(|m| {
                    let state = r.root_state(m);
                    state.is_applied()
                        || matches!(
                            state,
                            MemberState::Unaffected | MemberState::StoodDown { .. }
                        )
                })
            };
            if done(&drive.run.record) {
                continue;
            }
            let gate = gate_of(drive.base.as_ref(), &stage);
            if self.stage_gate(drive, bench, &stage, &waves, gate).await? == Step::Stop {
                return Ok(());
            }
            for (i, wave) in waves.iter().enumerate() {
                drive.run.record.at = Some((stage.clone(), i + 1));
                if self.wave(drive, bench, &stage, wave).await? == Step::Stop {
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

    /// A stage whose gate asks for its own approval waits for `/approve
    /// <stage>` of its set digest: its plans on the merge commit, made when
    /// the run reaches it. `on-destructive` asks only when one of them is.
    async fn stage_gate(
        &self,
        drive: &mut Drive<'_>,
        bench: &mut Workbench,
        stage: &str,
        waves: &[Vec<String>],
        gate: GatePolicy,
    ) -> Result<Step> {
        if gate == GatePolicy::Never
            || drive
                .run
                .record
                .stages
                .get(stage)
                .is_some_and(|g| !g.approved_by.is_empty())
        {
            return Ok(Step::Continue);
        }
        let mut previewed: Vec<MemberOutcome> = Vec::new();
        for wave in waves {
            let pending: Vec<String> = wave
                .iter()
                .filter(|m| !drive.run.record.state(m).is_applied())
                .filter(|m| drive.run.record.state(m) != MemberState::Unaffected)
                .cloned()
                .collect();
            bench.plan_wave(&pending).await?;
            previewed.extend(pending.iter().filter_map(|m| bench.outcome(m).cloned()));
        }
        let failed: Vec<&MemberOutcome> = previewed.iter().filter(|o| o.plan.is_none()).collect();
        if !failed.is_empty() {
            // The stage's set cannot be shown whole: nothing of it applies.
            for outcome in failed {
                let error = outcome.error.clone().unwrap_or_else(|| "no plan".into());
                drive.run.record.set(
                    &outcome.member,
                    MemberState::Failed {
                        error: format!("planning on the merge commit failed: {error}"),
                    },
                );
            }
            return Ok(Step::Stop);
        }
        let destructive = previewed
            .iter()
            .any(|o| o.plan.as_ref().is_some_and(|p| p.destructive));
        let nothing_changes = previewed
            .iter()
            .all(|o| o.plan.as_ref().is_some_and(|p| p.is_empty()));
        if !stage_needs_approval(gate, destructive, nothing_changes) {
            if nothing_changes && gate != GatePolicy::Never {
                drive.run.record.gates_skipped.insert(stage.to_owned());
            }
            return Ok(Step::Continue);
        }
        let set = engine::change_set_of(&previewed)?;
        let gate_id = GateId::of(drive.run.pr, Some(stage)).to_string();
        let known = drive.run.record.stages.get(stage);
        let now = chrono::Utc::now().timestamp_millis();
        if known.is_none_or(|g| g.change_set.digest != set.digest || g.expired) {
            let expires_at = stage_timeout(drive.base.as_ref(), stage)
                .map(|t| now.saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX)));
            drive.run.record.stages.insert(
                stage.to_owned(),
                StageGate {
                    gate: gate_id.clone(),
                    change_set: set.clone(),
                    approved_by: Vec::new(),
                    mismatch: None,
                    opened_at: now,
                    expires_at,
                    expired: false,
                },
            );
        }
        let opened_at = drive.run.record.stages[stage].opened_at;
        let policy = drive.stage_policy(stage);
        let by = self
            .run_gate_approvers(drive, (&gate_id, opened_at, false), &set.digest, &policy)
            .await?;
        let mismatch = self
            .gate_mismatch(&drive.run, &gate_id, &set.digest)
            .await?;
        drive
            .run
            .record
            .stages
            .get_mut(stage)
            .expect("inserted")
            .mismatch = mismatch.filter(|_| by.is_empty());
        if !by.is_empty() {
            drive
                .run
                .record
                .stages
                .get_mut(stage)
                .expect("inserted")
                .approved_by = by;
            return Ok(Step::Continue);
        }
        let gate = drive.run.record.stages.get_mut(stage).expect("inserted");
        if let Some(at) = gate.expires_at.filter(|at| now >= *at) {
            // Nobody approved in time: the stage fails, and `/retry` opens
            // a fresh gate (approvals from before it do not count).
            gate.expired = true;
            for outcome in &previewed {
                drive.run.record.set(
                    &outcome.member,
                    MemberState::Failed {
                        error: format!(
                            "stage {stage}'s gate expired at {} with no `/approve {stage}` (its `timeout` on the base); `/retry` opens a fresh gate",
                            apply_report::utc(at)
                        ),
                    },
                );
            }
            return Ok(Step::Stop);
        }
        for outcome in &previewed {
            drive.run.record.set(
                &outcome.member,
                MemberState::Waiting {
                    reason: format!("stage {stage} waits for `/approve {stage}`"),
                },
            );
        }
        drive.run.record.wait = Some(Wait::Stage {
            stage: stage.to_owned(),
            gate: gate_id,
            digest: set.digest,
        });
        Ok(Step::Stop)
    }

    /// One wave: what is left of it is locked, planned again on the merge
    /// commit, checked against the approvals and applied; the locks are
    /// let go whatever happens, and runs queued behind them resume.
    async fn wave(
        &self,
        drive: &mut Drive<'_>,
        bench: &mut Workbench,
        stage: &str,
        wave: &[String],
    ) -> Result<Step> {
        let mut pending = Vec::new();
        let now = chrono::Utc::now().timestamp_millis();
        for member in wave {
            let state = drive.run.record.state(member);
            let goes_on = match &state {
                // Held: tried again once its time came.
                MemberState::Held { retry_at, .. } => now >= *retry_at,
                // Blocked: goes on once what blocked it has (a holder let go).
                MemberState::Blocked { by } => {
                    drive.run.record.state(by).is_applied()
                        || drive.run.record.state(by) == MemberState::Unaffected
                }
                _ => !state.stops_downstream(),
            };
            if state.is_applied() || state == MemberState::Unaffected || !goes_on {
                continue;
            }
            let component = member
                .parse::<MemberId>()
                .ok()
                .and_then(|m| bench.config().component(m.component()))
                .ok_or_else(|| anyhow!("{member} is not a component of the merge commit"))?;
            if let Some(root) = stopped_upstream(component, stage, &drive.run.record) {
                drive
                    .run
                    .record
                    .set(member, MemberState::Blocked { by: root });
                continue;
            }
            pending.push(member.clone());
        }
        if pending.is_empty() {
            return Ok(Step::Continue);
        }
        let repo = drive.run.repo.clone();
        if let Some((member, holder)) = self
            .store
            .lock_members(&repo.id, drive.run.id, &pending)
            .await?
        {
            for m in &pending {
                drive.run.record.set(
                    m,
                    MemberState::Waiting {
                        reason: format!("queued behind pull request #{}", holder.0),
                    },
                );
            }
            drive.run.record.wait = Some(Wait::Lock {
                member,
                pr: holder.0,
            });
            return Ok(Step::Stop);
        }
        let step = self.locked_wave(drive, bench, stage, &pending).await;
        self.release_locks(&drive.run).await?;
        step
    }

    /// Lets go of a run's member locks and resumes the runs queued behind them.
    async fn release_locks(&self, run: &ApplyRunRecord) -> Result<()> {
        let queued = self.store.unlock_members(&run.repo.id, run.id).await?;
        for waiting in queued {
            self.enqueue_resume(&waiting.repo, waiting.pr).await?;
        }
        Ok(())
    }

    async fn locked_wave(
        &self,
        drive: &mut Drive<'_>,
        bench: &mut Workbench,
        stage: &str,
        pending: &[String],
    ) -> Result<Step> {
        self.publish_run(drive.client, &mut drive.run, &drive.plan)
            .await?;
        if self.earlier_applies_may_run(drive, pending).await? {
            return Ok(Step::Stop);
        }
        bench.plan_wave(pending).await?;
        let mut ready = Vec::new();
        let mut uncovered = Vec::new();
        let mut filled = Vec::new();
        for member in pending {
            let outcome = bench.outcome(member).expect("planned above").clone();
            let Some(plan) = &outcome.plan else {
                let error = outcome.error.clone().unwrap_or_else(|| "no plan".into());
                drive.run.record.set(
                    member,
                    MemberState::Failed {
                        error: format!("planning on the merge commit failed: {error}"),
                    },
                );
                continue;
            };
            if let MemberState::Applying { .. } = drive.run.record.state(member) {
                if plan.is_empty() {
                    // Its apply finished before a crash: nothing is left to do.
                    let outputs = plan.outputs.known.clone();
                    self.applied(drive, bench, member, &plan.plan_digest, outputs, Some("its apply had finished before a restart; planned again, nothing was left to change")).await?;
                    continue;
                }
            }
            match self.coverage(drive, stage, &outcome) {
                Coverage::Covered => {
                    if let Some(was) = drive.approved.member(member) {
                        filled.extend(
                            was.unknown_inputs
                                .iter()
                                .filter(|i| outcome.known_inputs().contains_key(*i))
                                .map(|i| format!("{member}.{i}")),
                        );
                    }
                    ready.push(outcome);
                }
                Coverage::NotCovered(reason) => uncovered.push((outcome, reason)),
            }
        }
        if !uncovered.is_empty() {
            self.open_round(drive, stage, &uncovered, Vec::new())?;
            for (outcome, reason) in &uncovered {
                drive.run.record.set(
                    &outcome.member,
                    MemberState::Waiting {
                        reason: format!("not covered: {reason}"),
                    },
                );
            }
            for outcome in &ready {
                drive.run.record.set(
                    &outcome.member,
                    MemberState::Waiting {
                        reason: "its wave waits for the plans that moved".into(),
                    },
                );
            }
            return Ok(Step::Stop);
        }
        if !filled.is_empty() {
            let covered: Vec<(MemberOutcome, String)> =
                ready.iter().map(|o| (o.clone(), String::new())).collect();
            self.open_round(drive, stage, &covered, filled)?;
        }
        if let Some(step) = self.denied(drive, &ready).await? {
            return Ok(step);
        }
        for outcome in ready {
            if self
                .apply_member(drive, bench, stage, &outcome.member)
                .await?
                == Step::Stop
            {
                return Ok(Step::Stop);
            }
        }
        Ok(Step::Continue)
    }

    /// Whether an apply of one of `pending` that a stopped server left
    /// `applying` may still be running (on this host its process is looked
    /// at; elsewhere its deadline tells). Then the run waits, and a job to
    /// look again is queued for when it may be gone: a member is never
    /// planned, let alone applied, while an earlier apply of it may run.
    async fn earlier_applies_may_run(
        &self,
        drive: &mut Drive<'_>,
        pending: &[String],
    ) -> Result<bool> {
        let here = process::host_id();
        let now = chrono::Utc::now().timestamp_millis();
        let mut first_look: Option<(String, i64)> = None;
        for member in pending {
            let MemberState::Applying { attempt, .. } = drive.run.record.state(member) else {
                continue;
            };
            let alive = attempt
                .as_ref()
                .filter(|a| a.host == here)
                .and_then(|a| a.process.as_ref())
                .map(process::is_alive);
            if let EarlierAttempt::MayRun { until } =
                earlier_attempt(attempt.as_ref(), &here, now, alive)
            {
                tracing::warn!(
                    member,
                    until,
                    "an earlier apply may still be running; waiting for it to end"
                );
                if first_look.as_ref().is_none_or(|(_, at)| until < *at) {
                    first_look = Some((member.clone(), until));
                }
            }
        }
        let Some((member, until)) = first_look else {
            return Ok(false);
        };
        drive.run.record.wait = Some(Wait::EarlierAttempt { member, until });
        let task = Task::Apply {
            repo: drive.run.repo.clone(),
            pr: drive.run.pr,
        };
        self.store.enqueue_at(task.into_job(), until).await?;
        Ok(true)
    }

    /// Whether a fresh plan in `stage` is covered by what a person approved
    /// for that stage: an approved round, else the stage's own set (gated
    /// stages) or the pull request's. Under `on-destructive`, a plan that
    /// deletes or replaces is covered only by an approval given in the stage.
    fn coverage(&self, drive: &Drive<'_>, stage: &str, outcome: &MemberOutcome) -> Coverage {
        let plan = outcome
            .plan
            .as_ref()
            .expect("only planned members are checked");
        let inputs = outcome.known_inputs();
        let fresh = FreshPlan {
            plan,
            inputs: &inputs,
        };
        let (base, rounds) = drive.run.record.approved_sets(&drive.approved, stage);
        if covered_by_any(&rounds, &fresh) == Coverage::Covered {
            return Coverage::Covered;
        }
        let gated = drive.run.record.stages.contains_key(stage);
        match covered_by_any(&base, &fresh) {
            Coverage::Covered
                if gate_of(drive.base.as_ref(), stage) == GatePolicy::OnDestructive
                    && !gated
                    && plan.destructive =>
            {
                Coverage::NotCovered(format!(
                    "{}: it now deletes or replaces, and stage {stage}'s gate is on-destructive",
                    plan.member
                ))
            }
            other => other,
        }
    }

    /// Records a round: covered (`reasons` empty, `filled` says what became
    /// known), or waiting at its own gate for an approval of its digest. A
    /// round with the same digest as one recorded is that round again.
    fn open_round(
        &self,
        drive: &mut Drive<'_>,
        stage: &str,
        members: &[(MemberOutcome, String)],
        filled: Vec<String>,
    ) -> Result<()> {
        let outcomes: Vec<MemberOutcome> = members.iter().map(|(o, _)| o.clone()).collect();
        let set = engine::change_set_of(&outcomes)?;
        let reasons: Vec<String> = members
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(_, r)| r.clone())
            .collect();
        let record = &mut drive.run.record;
        let number = match record
            .rounds
            .iter()
            .find(|r| r.change_set.digest == set.digest)
        {
            Some(known) => known.number,
            None => {
                let number = record.next_round();
                record.rounds.push(Round {
                    number,
                    gate: GateId::Round(drive.run.pr, number).to_string(),
                    stage: stage.to_owned(),
                    change_set: set.clone(),
                    reasons: reasons.clone(),
                    filled,
                    approved_by: Vec::new(),
                    mismatch: None,
                });
                number
            }
        };
        if !reasons.is_empty() {
            record.wait = Some(Wait::Round {
                round: number,
                gate: GateId::Round(drive.run.pr, number).to_string(),
                digest: set.digest,
            });
        }
        Ok(())
    }

    /// A plan the policy denied stops its wave unless an override by an
    /// overrider stands (read from the ledger on every job: a revoke counts)
    /// for exactly that plan digest.
    async fn denied(&self, drive: &mut Drive<'_>, ready: &[MemberOutcome]) -> Result<Option<Step>> {
        let gate = GateId::Override(drive.run.pr).to_string();
        let facts = self
            .store
            .gate_facts(&drive.run.repo.id.ledger_key(), &gate)
            .await?;
        let mut denials = Vec::new();
        for outcome in ready {
            let plan = outcome.plan.as_ref().expect("ready members are planned");
            drive.run.record.overrides.remove(&outcome.member);
            if plan.denied.is_empty() {
                continue;
            }
            // An override given in this run, or during review (bound to the
            // plan the pull request showed: it counts only when the fresh
            // plan has exactly that digest).
            let for_member: Vec<Fact> = facts
                .iter()
                .filter(|f| {
                    matches!(f.fact.kind, FactKind::Revoked | FactKind::Spent)
                        || (f.fact.data.get("member") == Some(&json!(outcome.member))
                            && f.fact
                                .data
                                .get("run")
                                .is_none_or(|run| *run == json!(drive.run.id)))
                })
                .cloned()
                .collect();
            if let Evaluation::Satisfied { .. } =
                ledger::evaluate(&for_member, &plan.plan_digest, 1)
            {
                drive
                    .run
                    .record
                    .overrides
                    .insert(outcome.member.clone(), plan.plan_digest.clone());
                continue;
            }
            denials.push(crate::apply::Denial {
                member: outcome.member.clone(),
                digest: plan.plan_digest.clone(),
                rules: plan.denied.clone(),
            });
        }
        if denials.is_empty() {
            return Ok(None);
        }
        let named: Vec<&str> = denials.iter().map(|d| d.member.as_str()).collect();
        for o in ready {
            drive.run.record.set(
                &o.member,
                MemberState::Waiting {
                    reason: format!("the policy denied the plan of {}", named.join(", ")),
                },
            );
        }
        let first = denials.remove(0);
        drive.run.record.wait = Some(Wait::Override {
            member: first.member,
            gate,
            digest: first.digest,
            rules: first.rules,
            also: denials,
        });
        Ok(Some(Step::Stop))
    }

    /// Applies one member: the record says `applying` before the command
    /// starts and what became of it after; `replan` plans again (checked
    /// for coverage again) at most [`MAX_REPLANS`] times.
    async fn apply_member(
        &self,
        drive: &mut Drive<'_>,
        bench: &mut Workbench,
        stage: &str,
        member: &str,
    ) -> Result<Step> {
        loop {
            let plan = bench
                .outcome(member)
                .and_then(|o| o.plan.clone())
                .expect("a member is planned before it applies");
            if plan.is_empty() {
                let outputs = plan.outputs.known.clone();
                self.applied(
                    drive,
                    bench,
                    member,
                    &plan.plan_digest,
                    outputs,
                    Some("nothing to change"),
                )
                .await?;
                return Ok(Step::Continue);
            }
            // Where and until when the command may run, saved before it
            // starts and again once its process is known: a server that
            // resumes this run waits for it to be gone before planning again.
            let started_at = chrono::Utc::now().timestamp_millis();
            let lifetime =
                i64::try_from(bench.apply_lifetime(member).as_millis()).unwrap_or(i64::MAX);
            let mut attempt = CommandAttempt {
                host: process::host_id(),
                started_at,
                deadline: started_at.saturating_add(lifetime),
                process: None,
            };
            let applying = |attempt: &CommandAttempt| MemberState::Applying {
                plan_digest: plan.plan_digest.clone(),
                attempt: Some(attempt.clone()),
            };
            drive.run.record.set(member, applying(&attempt));
            self.store.save_apply_run(&drive.run).await?;
            self.publish_run(drive.client, &mut drive.run, &drive.plan)
                .await?;
            let (started, mut started_process) = tokio::sync::mpsc::unbounded_channel();
            let run = {
                let running = bench.apply(member, Some(started));
                tokio::pin!(running);
                loop {
                    tokio::select! {
                        run = &mut running => break run,
                        Some(process) = started_process.recv() => {
                            attempt.process = Some(process);
                            drive.run.record.set(member, applying(&attempt));
                            self.store.save_apply_run(&drive.run).await?;
                        }
                    }
                }
            };
            let state = match run.outcome {
                ApplyOutcome::Applied(outputs) => {
                    drive.run.record.replans.remove(member);
                    self.applied(drive, bench, member, &plan.plan_digest, outputs, None)
                        .await?;
                    return Ok(Step::Continue);
                }
                ApplyOutcome::Replan(reason) => {
                    let count = drive
                        .run
                        .record
                        .replans
                        .entry(member.to_owned())
                        .or_default();
                    *count += 1;
                    if *count > MAX_REPLANS {
                        MemberState::Failed {
                            error: format!(
                                "its apply command asked to plan again {MAX_REPLANS} times in a row{}",
                                reason.map(|r| format!(" (last: {r})")).unwrap_or_default()
                            ),
                        }
                    } else {
                        drive.run.record.set(member, MemberState::NotStarted);
                        self.store.save_apply_run(&drive.run).await?;
                        bench.plan_wave(&[member.to_owned()]).await?;
                        let outcome = bench.outcome(member).expect("planned").clone();
                        if outcome.plan.is_none() {
                            MemberState::Failed {
                                error: format!(
                                    "planning again after `replan` failed: {}",
                                    outcome.error.unwrap_or_default()
                                ),
                            }
                        } else if let Coverage::NotCovered(reason) =
                            self.coverage(drive, stage, &outcome)
                        {
                            self.open_round(
                                drive,
                                stage,
                                &[(outcome, reason.clone())],
                                Vec::new(),
                            )?;
                            drive.run.record.set(
                                member,
                                MemberState::Waiting {
                                    reason: format!("not covered after `replan`: {reason}"),
                                },
                            );
                            return Ok(Step::Stop);
                        } else if let Some(step) = self.denied(drive, &[outcome]).await? {
                            return Ok(step);
                        } else {
                            continue;
                        }
                    }
                }
                ApplyOutcome::Held(holder) => {
                    let tries = match drive.run.record.state(member) {
                        MemberState::Held { tries, .. } => tries + 1,
                        _ => 1,
                    };
                    let retry_at = chrono::Utc::now().timestamp_millis()
                        + held_backoff(self.options.held_retry, tries);
                    if drive.run.record.wait.is_none() {
                        drive.run.record.wait = Some(Wait::Holder {
                            member: member.to_owned(),
                            holder: holder.clone(),
                            until: retry_at,
                        });
                    }
                    let task = Task::Apply {
                        repo: drive.run.repo.clone(),
                        pr: drive.run.pr,
                    };
                    self.store.enqueue_at(task.into_job(), retry_at).await?;
                    MemberState::Held {
                        holder,
                        tries,
                        retry_at,
                    }
                }
                ApplyOutcome::StoodDown(reason) => MemberState::StoodDown { reason },
                ApplyOutcome::Failed(error) => MemberState::Failed { error },
            };
            tracing::warn!(member, state = %state.label(), "apply did not complete");
            drive.run.record.set(member, state);
            self.store.save_apply_run(&drive.run).await?;
            return Ok(Step::Continue);
        }
    }

    /// Records a member as applied: the attempt record, the deployed estate,
    /// and the outputs its downstreams read from now on.
    async fn applied(
        &self,
        drive: &mut Drive<'_>,
        bench: &mut Workbench,
        member: &str,
        plan_digest: &str,
        outputs: Map<String, Value>,
        note: Option<&str>,
    ) -> Result<()> {
        // The estate first: a crash before the record is saved leaves the
        // member `applying`, planned again (empty) and recorded once more.
        // When no command ran and the plan knows no outputs, what was
        // recorded before still stands.
        if note.is_none() || !outputs.is_empty() {
            self.store
                .record_deployed(&drive.run.repo.id, member, &outputs, drive.run.id)
                .await?;
        }
        drive.run.record.set(
            member,
            MemberState::Applied {
                plan_digest: plan_digest.to_owned(),
                outputs: outputs.clone(),
                note: note.map(str::to_owned),
            },
        );
        self.store.save_apply_run(&drive.run).await?;
        bench.record_applied(member, outputs);
        // The override that let it through lets nothing through again.
        if let Some(digest) = drive.run.record.overrides.get(member).cloned() {
            self.store
                .append_fact(NewFact {
                    repo: drive.run.repo.id.ledger_key(),
                    gate: GateId::Override(drive.run.pr).to_string(),
                    kind: FactKind::Spent,
                    digest,
                    actor: Actor {
                        id: 0,
                        login: drive.client.bot_login().await?,
                    },
                    at: chrono::Utc::now().timestamp_millis(),
                    source: Source::Wavegate,
                    data: json!({ "run": drive.run.id, "member": member }),
                })
                .await?;
        }
        Ok(())
    }

    /// An applied run spends the approvals it used: none of them lets
    /// anything through again.
    async fn spend_approvals(&self, drive: &Drive<'_>) -> Result<()> {
        let record = &drive.run.record;
        let mut spent = vec![(
            GateId::Pr(drive.run.pr).to_string(),
            drive.run.digest.clone(),
        )];
        spent.extend(
            record
                .stages
                .values()
                .filter(|g| !g.approved_by.is_empty())
                .map(|g| (g.gate.clone(), g.change_set.digest.clone())),
        );
        spent.extend(
            record
                .rounds
                .iter()
                .filter(|r| !r.approved_by.is_empty())
                .map(|r| (r.gate.clone(), r.change_set.digest.clone())),
        );
        let actor = Actor {
            id: 0,
            login: drive.client.bot_login().await?,
        };
        for (gate, digest) in spent {
            self.store
                .append_fact(NewFact {
                    repo: drive.run.repo.id.ledger_key(),
                    gate,
                    kind: FactKind::Spent,
                    digest,
                    actor: actor.clone(),
                    at: chrono::Utc::now().timestamp_millis(),
                    source: Source::Wavegate,
                    data: json!({ "run": drive.run.id, "merge": drive.run.merge_sha.as_str() }),
                })
                .await?;
        }
        Ok(())
    }

    /// The report with the run's section, and the `wavegate/apply` check on
    /// the merge commit; the run is saved with its check.
    pub(super) async fn publish_run(
        &self,
        client: &ForgeClient,
        run: &mut ApplyRunRecord,
        plan: &PlanRecord,
    ) -> Result<()> {
        let view = RunView {
            merge_sha: run.merge_sha.as_str(),
            status: run.status,
            record: &run.record,
        };
        let section = apply_report::render(&view);
        let title = apply_report::title(&view);
        let body = format!("{}\n\n{}", plan.report.trim_end(), section);
        let known = self.store.pr(&run.repo.id, run.pr).await?;
        let comment_id = client
            .upsert_report(
                &run.repo,
                run.pr,
                known.as_ref().and_then(|r| r.report_comment_id),
                crate::report::REPORT_MARKER,
                &body,
            )
            .await?;
        if let Some(known) = known.filter(|k| k.report_comment_id != Some(comment_id)) {
            if let Some(head) = known.report_head.clone() {
                self.store
                    .set_pr_report(
                        &run.repo.id,
                        run.pr,
                        crate::store::PrReport {
                            head_sha: head,
                            digest: known.report_digest.clone(),
                            comment_id: Some(comment_id),
                            check_id: known.check_id,
                            status: known.report_status.clone().unwrap_or_default(),
                        },
                    )
                    .await?;
            }
        }
        let state = match run.status {
            RunStatus::Running => CheckState::InProgress,
            RunStatus::Waiting if run.record.wait.as_ref().is_some_and(Wait::needs_a_person) => {
                CheckState::ActionRequired
            }
            // A lock, a holder or an earlier apply: it goes on by itself.
            RunStatus::Waiting => CheckState::InProgress,
            RunStatus::Failed => CheckState::Failure,
            RunStatus::Applied => CheckState::Success,
            RunStatus::Ended => CheckState::Neutral,
        };
        let report = CheckReport {
            name: APPLY_CHECK_NAME,
            state,
            title,
            summary: body,
            details_url: None,
        };
        let check_id = client
            .publish_check(&run.repo, &run.merge_sha, run.check_id, &report)
            .await?;
        run.check_id = check_id.or(run.check_id);
        self.store.save_apply_run(run).await
    }
}

/// The stopped members, named, for the summary.
/// What the run's wait asks of a person, for its `pending` fact: the gate,
/// the digest, the members it covers and a description. None for waits that
/// end by themselves.
fn pending_of(
    run: &ApplyRunRecord,
    approved: &ChangeSet,
) -> Option<(String, String, Vec<String>, String)> {
    let names =
        |set: &ChangeSet| -> Vec<String> { set.members.iter().map(|m| m.member.clone()).collect() };
    let pr = run.pr;
    match run.record.wait.as_ref()? {
        Wait::PrApproval { gate, digest } => Some((
            gate.clone(),
            digest.clone(),
            names(approved),
            format!("merged pull request {pr} waits for an approval of its change set"),
        )),
        Wait::Stage { stage, gate, digest } => Some((
            gate.clone(),
            digest.clone(),
            run.record.stages.get(stage).map(|g| names(&g.change_set)).unwrap_or_default(),
            format!("stage {stage} of pull request {pr} waits for `/approve {stage}` of its plans on the merge commit"),
        )),
        Wait::Round { round, gate, digest } => Some((
            gate.clone(),
            digest.clone(),
            run.record
                .rounds
                .iter()
                .find(|r| r.number == *round)
                .map(|r| names(&r.change_set))
                .unwrap_or_default(),
            format!("round {round} of pull request {pr}: plans that moved since they were approved"),
        )),
        wait @ Wait::Override { gate, digest, .. } => {
            let denials = wait.denials();
            Some((
                gate.clone(),
                digest.clone(),
                denials.iter().map(|d| d.member.clone()).collect(),
                format!(
                    "the policy denied {}; an overrider may let each through",
                    denials
                        .iter()
                        .map(|d| format!("{}'s plan {} ({})", d.member, d.digest, d.rules.join(", ")))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        }
        Wait::Lock { .. } | Wait::EarlierAttempt { .. } | Wait::Holder { .. } => None,
    }
}

/// The last word of a run that applied: everything, or everything the
/// merge changes, naming the approved members it does not.
fn applied_summary(run: &ApplyRunRecord) -> String {
    let untouched: Vec<String> = run
        .record
        .members
        .iter()
        .filter(|(_, state)| **state == MemberState::Unaffected)
        .map(|(member, _)| format!("`{member}`"))
        .collect();
    if untouched.is_empty() {
        return format!(
            "Applied on {}: every member of the approved change is deployed.",
            run.merge_sha.short()
        );
    }
    format!(
        "Applied on {}: every member the merge changes is deployed. Not applied: {}, approved when planned but unchanged by the merge against {} (the target before it), so there was nothing to apply.",
        run.merge_sha.short(),
        untouched.join(", "),
        run.base_sha.short()
    )
}

/// The members that failed, for telling a new failure from one said before.
fn failed_members(record: &AttemptRecord) -> BTreeSet<String> {
    record
        .members
        .iter()
        .filter(|(_, s)| matches!(s, MemberState::Failed { .. }))
        .map(|(m, _)| m.clone())
        .collect()
}

/// The last word of a run a member of which stood down: neither applied
/// whole nor failed.
fn ended_summary(run: &ApplyRunRecord) -> String {
    let stood: Vec<String> = run
        .record
        .members
        .iter()
        .filter_map(|(m, s)| match s {
            MemberState::StoodDown { reason } => Some(format!("`{m}` stood down ({reason})")),
            _ => None,
        })
        .collect();
    format!(
        "The apply on {} ended: {}, so it and what depends on it were not applied. Everything else the merge changes is deployed.",
        run.merge_sha.short(),
        stood.join("; ")
    )
}

fn stopped_members(record: &AttemptRecord) -> String {
    let stopped: Vec<String> = record
        .members
        .iter()
        .filter(|(_, s)| matches!(s, MemberState::Failed { .. }))
        .map(|(m, s)| format!("`{m}` {}", s.label()))
        .collect();
    if stopped.is_empty() {
        "a member could not be planned".into()
    } else {
        stopped.join("; ")
    }
}

/// The base's raw config (for stage gates): None when missing or unreadable,
/// which reads as the strictest gates.
/// The config at `commit` as written (`None`: none there, or it does not
/// parse, which gates read as their strictest); an error when git could
/// not read it, so the job is retried instead of deciding on a guess.
fn raw_config_at(mirror: &std::path::Path, commit: &CommitSha) -> Result<Option<RawRepoConfig>> {
    let text = git::read_file(mirror, commit.as_str(), CONFIG_FILE)
        .with_context(|| format!("reading {CONFIG_FILE} at {}", commit.short()))?;
    Ok(text.and_then(|t| RepoConfig::parse_raw(CONFIG_FILE, &t).ok()))
}
