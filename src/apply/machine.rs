//! The apply machine for one wave of a run: a pure `step(observation) ->
//! effects`. It owns the wave's transitions — which members go on, the lock,
//! an earlier apply that may still run, plans that failed, coverage and
//! rounds, denials and overrides, and each member's apply and what came of
//! it (applied, replan, held, stood down, failed) — and changes the attempt
//! record as it decides.
//!
//! The worker feeds it what it saw (the lock, the plans, a command's start
//! and end) and carries out the effects in the order returned; the record is
//! saved exactly where an effect says so. That is how "the record says
//! `applying` before the apply command starts" and "the estate is recorded
//! before the record says `applied`" are properties of an effect list,
//! tested here without a process, a store or a forge.

pub(crate) use super::effect::{Effect, Step};
use super::hooks::{self, HooksResult};
use super::{
    covered_by_any, earlier_attempt, held_backoff, stopped_upstream, AttemptRecord, CommandAttempt,
    Denial, EarlierAttempt, MemberState, Wait, ELSEWHERE, MAX_REPLANS,
};
use crate::config::groups::Groups;
use crate::config::hooks::Moment;
use crate::config::repo::GatePolicy;
use crate::gate::counting::{Evaluation, Scope, Tally};
use crate::gate::ledger::Fact;
use crate::model::{Digest, DigestOver, GateId, MemberId, PrNumber, UnixMs};
use crate::plan::changeset::{ChangeSet, ChangeSetError};
use crate::plan::coverage::{Coverage, FreshPlan};
use crate::plan::outcome::{change_set_of, ApplyOutcome, MemberOutcome};
use crate::plan::tail::OutputTail;
use crate::sandbox::process::ProcessId;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// What the machine knows of the run for the whole wave.
#[derive(Debug, Clone)]
pub(crate) struct WaveSpec<'a> {
    /// The run's id: overrides given in another run do not count in this one.
    pub(crate) run: i64,
    pub(crate) pr: PrNumber,
    pub(crate) stage: &'a str,
    /// The wave's own gate (1-based), for a stage approved wave by wave
    /// (`gate_scope = "wave"`); `None`: the stage's gate holds it.
    pub(crate) gated_wave: Option<u32>,
    /// The wave's members, in order.
    pub(crate) members: &'a [MemberId],
    /// Each member's upstreams in this stage, on the merge commit.
    pub(crate) upstreams: BTreeMap<MemberId, Vec<MemberId>>,
    /// The pull request's approved change set.
    pub(crate) approved: &'a ChangeSet,
    /// The stage's gate, as the base sets it.
    pub(crate) gate: GatePolicy,
    /// Which members a round's digest binds (`[policy] digest_over`).
    pub(crate) digest_over: DigestOver,
    /// This host (`sandbox::process::host_id`), written into each attempt.
    pub(crate) host: &'a str,
    /// This server's process, written into each attempt.
    pub(crate) server: Option<ProcessId>,
    /// The longest each member's apply command may live.
    pub(crate) lifetimes: BTreeMap<MemberId, Duration>,
    /// Members whose apply command runs on the forge's CI: their attempt
    /// names no host or process of the bot's, so only its deadline tells
    /// that it is over (a restarted bot never takes a server gone here for
    /// a command gone there).
    pub(crate) elsewhere: BTreeSet<MemberId>,
    /// How soon a held member is tried again the first time.
    pub(crate) held_retry: Duration,
    /// At most this many apply commands run at once (`apply_concurrency`,
    /// at least 1); a group's call is one.
    pub(crate) concurrency: usize,
    /// The merge commit's groups: mates queued together apply with one call.
    pub(crate) groups: &'a Groups,
    /// The stage has `before.apply` hooks: they run on the wave's plans
    /// once those are covered and allowed, before its first apply starts.
    pub(crate) before_apply_hooks: bool,
    /// The stage has `after.apply` hooks: they run once the wave's applies
    /// ended, on the members that applied in this job.
    pub(crate) after_apply_hooks: bool,
}

/// What the worker saw, answering the machine's last effect.
#[derive(Debug, Clone)]
pub(crate) enum Observation {
    /// The run reached the wave at `now` (unix ms).
    Reached { now: UnixMs },
    /// [`Effect::Lock`] took every lock. `alive`: for each member caught
    /// `applying` by a command started on this host, whether its process
    /// (before that was known, the server that started it) is still there.
    Locked {
        alive: BTreeMap<MemberId, bool>,
        now: UnixMs,
    },
    /// [`Effect::Lock`] found `member` locked by the run of pull request `pr`.
    LockHeld { member: MemberId, pr: PrNumber },
    /// [`Effect::Plan`]'s members, planned on the merge commit, with every
    /// fact of the run's override gate as the ledger holds it now.
    Planned {
        outcomes: Vec<MemberOutcome>,
        overrides: Vec<Fact>,
        now: UnixMs,
    },
    /// `member`'s apply command ([`Effect::Apply`]) started as `process`.
    Started {
        member: MemberId,
        process: ProcessId,
    },
    /// `member`'s apply command ended, having printed `printed` and carried
    /// `carry` (`{"carry": …}` in its outputs file).
    Ended {
        member: MemberId,
        outcome: ApplyOutcome,
        printed: Option<OutputTail>,
        carry: Option<Map<String, Value>>,
        /// The forge's page of the CI run it ran in, when it ran there.
        ran_on: Option<String>,
        now: UnixMs,
    },
    /// [`Effect::Replan`]'s member, planned again, with the override gate's facts.
    Replanned {
        outcome: Box<MemberOutcome>,
        overrides: Vec<Fact>,
        now: UnixMs,
    },
    /// [`Effect::Hooks`]: what the moment's hooks came to.
    Hooked { result: HooksResult, now: UnixMs },
}

/// A member whose apply is under way, and the plan it applies.
#[derive(Debug, Clone)]
struct Current {
    outcome: MemberOutcome,
    /// The digest of the plan it applies (only planned members apply).
    plan_digest: Digest,
    attempt: CommandAttempt,
    /// How many applies in a row were answered `held` before this one.
    held_before: u32,
}

/// One wave of a run, from reaching it to its end in this job.
#[derive(Debug)]
pub(crate) struct WaveMachine<'a> {
    spec: WaveSpec<'a>,
    /// The members that go on in this job (asked to be locked).
    pending: Vec<MemberId>,
    locked: bool,
    /// Covered, allowed and not yet applied, in order.
    queue: VecDeque<MemberOutcome>,
    /// The members whose apply commands run now (at most `concurrency`
    /// commands).
    running: BTreeMap<MemberId, Current>,
    /// Of `running`, those applied by a group's call, with the call's first member.
    in_group_call: BTreeMap<MemberId, MemberId>,
    /// Members whose apply asked to plan again. Each is planned again once
    /// no apply runs, and nothing new starts before: a re-plan that is not
    /// covered stops the wave as it would one member at a time.
    replans: VecDeque<MemberId>,
    /// The moment whose hooks were asked to run, until they answer.
    hooking: Option<Moment>,
    /// Whether the `after.apply` hooks ran (once per wave and job).
    after_applied: bool,
}

impl<'a> WaveMachine<'a> {
    pub(crate) fn new(spec: WaveSpec<'a>) -> Self {
        WaveMachine {
            spec,
            pending: Vec::new(),
            locked: false,
            queue: VecDeque::new(),
            running: BTreeMap::new(),
            in_group_call: BTreeMap::new(),
            replans: VecDeque::new(),
            hooking: None,
            after_applied: false,
        }
    }

    /// Whether the wave holds its members' locks (the worker lets go of
    /// them if it cannot carry the wave to its end).
    pub(crate) fn holds_locks(&self) -> bool {
        self.locked
    }

    /// Takes in one observation, changes `record` accordingly and returns
    /// what the worker does next. Errs only when a set of plans cannot be
    /// built into a change set (an internal error: the job is retried).
    pub(crate) fn step(
        &mut self,
        record: &mut AttemptRecord,
        observation: Observation,
    ) -> Result<Vec<Effect>, ChangeSetError> {
        let mut effects = Vec::new();
        match observation {
            Observation::Reached { now } => self.reached(record, now, &mut effects),
            Observation::LockHeld { member, pr } => {
                for m in &self.pending {
                    record.set(
                        m,
                        MemberState::Waiting {
                            reason: format!("queued behind pull request {pr}"),
                        },
                    );
                }
                record.wait = Some(Wait::Lock { member, pr });
                effects.push(Effect::Done(Step::Stop));
            }
            Observation::Locked { alive, now } => {
                self.locked = true;
                effects.push(Effect::Publish);
                match self.earlier_apply(record, &alive, now) {
                    Some(until) => self.stop_and(&mut effects, Some(until)),
                    None => effects.push(Effect::Plan(self.pending.clone())),
                }
            }
            Observation::Planned {
                outcomes,
                overrides,
                now,
            } => self.planned(record, outcomes, &overrides, now, &mut effects)?,
            Observation::Started { member, process } => {
                // A command that ends before its start is told is just ended.
                if let Some(current) = self.running.get_mut(&member) {
                    current.attempt.process = Some(process);
                    let state = applying(current);
                    record.set(&member, state);
                    effects.push(Effect::Save);
                }
            }
            Observation::Ended {
                member,
                outcome,
                printed,
                carry,
                ran_on,
                now,
            } => {
                match printed {
                    Some(tail) => record.printed.insert(member.clone(), tail),
                    None => record.printed.remove(&member),
                };
                match ran_on {
                    Some(url) => record.ran_on.insert(member.clone(), url),
                    None => record.ran_on.remove(&member),
                };
                // Kept until an apply carries something else: a later
                // command of the member, after a crash or `/retry`, reads it.
                if let Some(carry) = carry {
                    record.carried.insert(member.clone(), carry.clone());
                    effects.push(Effect::Carry {
                        member: member.clone(),
                        carry,
                    });
                }
                self.ended(record, &member, outcome, now, &mut effects);
            }
            Observation::Replanned {
                outcome,
                overrides,
                now,
            } => self.replanned(record, *outcome, &overrides, now, &mut effects)?,
            Observation::Hooked { result, now } => self.hooked(record, result, now, &mut effects),
        }
        Ok(effects)
    }

    /// The wave's members that go on in this job: not applied, not
    /// unaffected, not stopped (a held one once its time came, a blocked one
    /// once what blocked it applied); one whose upstream stopped is marked
    /// blocked by it instead. Any left are asked to be locked.
    fn reached(&mut self, record: &mut AttemptRecord, now: UnixMs, effects: &mut Vec<Effect>) {
        self.pending.clear();
        for member in self.spec.members {
            let state = record.state(member);
            let goes_on = match &state {
                MemberState::Held { retry_at, .. } => now >= *retry_at,
                MemberState::Blocked { by } => {
                    let by = record.state(by);
                    by.is_applied() || by == MemberState::Unaffected
                }
                _ => !state.stops_downstream(),
            };
            if state.is_applied() || state == MemberState::Unaffected || !goes_on {
                continue;
            }
            let upstreams = self
                .spec
                .upstreams
                .get(member)
                .map_or(&[][..], Vec::as_slice);
            match stopped_upstream(upstreams, record)
                .or_else(|| waiting_upstream(upstreams, self.spec.members, record))
            {
                Some(root) => record.set(member, MemberState::Blocked { by: root }),
                None => self.pending.push(member.clone()),
            }
        }
        if self.pending.is_empty() {
            if !self.ask_after_apply(record, effects) {
                effects.push(Effect::Done(Step::Continue));
            }
        } else {
            effects.push(Effect::Lock(self.pending.clone()));
        }
    }

    /// When an apply of a pending member that a stopped server left
    /// `applying` may still run (on this host its process tells, elsewhere
    /// its deadline), the run waits and looks again at the first time one
    /// may be gone: a member is never planned, let alone applied, while an
    /// earlier apply of it may run.
    fn earlier_apply(
        &self,
        record: &mut AttemptRecord,
        alive: &BTreeMap<MemberId, bool>,
        now: UnixMs,
    ) -> Option<UnixMs> {
        let mut first: Option<(MemberId, UnixMs)> = None;
        for member in &self.pending {
            let MemberState::Applying { attempt, .. } = record.state(member) else {
                continue;
            };
            let alive = alive.get(member).copied();
            if let EarlierAttempt::MayRun { until } =
                earlier_attempt(attempt.as_ref(), self.spec.host, now, alive)
            {
                if first.as_ref().is_none_or(|(_, at)| until < *at) {
                    first = Some((member.clone(), until));
                }
            }
        }
        let (member, until) = first?;
        record.wait = Some(Wait::EarlierAttempt { member, until });
        Some(until)
    }

    /// The wave's plans: a member whose plan failed fails; one caught
    /// `applying` whose plan is now empty had applied before a crash; the
    /// rest must be covered by an approval (else it waits for a round, and
    /// its wave-mates go on) and allowed by the policy or an override (else
    /// the wave waits for one); then they apply, up to `concurrency` at once.
    fn planned(
        &mut self,
        record: &mut AttemptRecord,
        outcomes: Vec<MemberOutcome>,
        overrides: &[Fact],
        now: UnixMs,
        effects: &mut Vec<Effect>,
    ) -> Result<(), ChangeSetError> {
        let mut ready = Vec::new();
        let mut uncovered = Vec::new();
        let mut filled = Vec::new();
        for outcome in outcomes {
            let Some(plan) = &outcome.plan else {
                let error = outcome.error.clone().unwrap_or_else(|| "no plan".into());
                record.set(
                    &outcome.member,
                    MemberState::Failed {
                        error: format!("planning on the merge commit failed: {error}"),
                    },
                );
                continue;
            };
            if let MemberState::Applying { .. } = record.state(&outcome.member) {
                if plan.is_empty() {
                    let (digest, outputs) = (plan.plan_digest.clone(), plan.outputs.known.clone());
                    applied(
                        record,
                        &outcome.member,
                        &digest,
                        outputs,
                        Some(FINISHED_BEFORE),
                        effects,
                    );
                    continue;
                }
            }
            match self.coverage(record, &outcome) {
                Coverage::Covered => {
                    if let Some(was) = self.spec.approved.member(&outcome.member) {
                        let known = outcome.known_inputs();
                        filled.extend(
                            was.unknown_inputs
                                .iter()
                                .filter(|i| known.contains_key(*i))
                                .map(|i| format!("{}.{i}", outcome.member)),
                        );
                    }
                    ready.push(outcome);
                }
                Coverage::NotCovered(reason) => uncovered.push((outcome, reason)),
            }
        }
        // A plan that moved waits for its round (its dependents with it);
        // its wave-mates go on. The run waits at one gate at a time: plans
        // that moved after it started waiting in this job wait for that
        // first, then for a round of their own.
        if !uncovered.is_empty() {
            let earlier = record.wait.as_ref().map(|wait| match wait {
                Wait::Round { round, .. } => format!("an approval of round {round}"),
                _ => "what it waits for now".to_owned(),
            });
            if earlier.is_none() {
                self.open_round(record, &uncovered, Vec::new())?;
            }
            for (outcome, reason) in &uncovered {
                let reason = match &earlier {
                    None => format!("not covered: {reason}"),
                    Some(wait) => format!(
                        "not covered: {reason}; its round opens once the run no longer waits for {wait}"
                    ),
                };
                record.set(&outcome.member, MemberState::Waiting { reason });
            }
            // A group applies with one call: its mates wait with it.
            let groups = self.spec.groups;
            let mut going = Vec::new();
            for outcome in ready {
                let mate = uncovered
                    .iter()
                    .map(|(waiting, _)| &waiting.member)
                    .find(|waiting| groups.together(&outcome.member, waiting));
                let Some(mate) = mate else {
                    going.push(outcome);
                    continue;
                };
                record.set(
                    &outcome.member,
                    MemberState::Waiting {
                        reason: format!(
                            "its group-mate {mate} waits, and the group applies with one call"
                        ),
                    },
                );
            }
            ready = going;
        }
        if !filled.is_empty() {
            let covered: Vec<(MemberOutcome, String)> =
                ready.iter().map(|o| (o.clone(), String::new())).collect();
            self.open_round(record, &covered, filled)?;
        }
        if self.denied(record, &ready, overrides) {
            self.stop_and(effects, None);
            return Ok(());
        }
        let members: Vec<MemberId> = ready.iter().map(|o| o.member.clone()).collect();
        self.queue = ready.into();
        if self.spec.before_apply_hooks && !members.is_empty() {
            self.hooking = Some(Moment::BeforeApply);
            effects.push(Effect::Hooks {
                moment: Moment::BeforeApply,
                members,
            });
            return Ok(());
        }
        self.fill(record, now, effects);
        Ok(())
    }

    /// What the hooks asked for came to: the wave goes on (its applies
    /// start, or it ends), or stops as `hooks::settle` says.
    fn hooked(
        &mut self,
        record: &mut AttemptRecord,
        result: HooksResult,
        now: UnixMs,
        effects: &mut Vec<Effect>,
    ) {
        let Some(moment) = self.hooking.take() else {
            return;
        };
        let members: Vec<MemberId> = match moment {
            Moment::AfterApply => self.after_apply_due(record),
            _ => self.queue.iter().map(|o| o.member.clone()).collect(),
        };
        match hooks::settle(record, moment, &members, result, Step::Continue) {
            Some(_) => {
                effects.push(Effect::Save);
                self.stop_and(effects, None);
            }
            None => {
                if moment == Moment::AfterApply {
                    for member in &members {
                        record.after_apply_due.remove(member);
                    }
                    effects.push(Effect::Save);
                }
                self.fill(record, now, effects);
            }
        }
    }

    /// The wave's members that applied and whose `after.apply` hooks have
    /// not passed yet (in an earlier job too: a crash, a stop, a failure).
    fn after_apply_due(&self, record: &AttemptRecord) -> Vec<MemberId> {
        self.spec
            .members
            .iter()
            .filter(|m| record.after_apply_due.contains(*m))
            .cloned()
            .collect()
    }

    /// Asks for the `after.apply` hooks, once per job, while members of
    /// the wave are due them.
    fn ask_after_apply(&mut self, record: &AttemptRecord, effects: &mut Vec<Effect>) -> bool {
        let due = self.after_apply_due(record);
        if !self.spec.after_apply_hooks || self.after_applied || due.is_empty() {
            return false;
        }
        self.after_applied = true;
        self.hooking = Some(Moment::AfterApply);
        effects.push(Effect::Hooks {
            moment: Moment::AfterApply,
            members: due,
        });
        true
    }

    /// Starts applies while fewer than `concurrency` run (a member whose
    /// plan changes nothing counts as applied at once): the members started
    /// together are saved (and shown) `applying` before any of their
    /// commands starts. A re-plan asked for waits until no apply runs, and
    /// is then the question asked. The wave ends once nothing runs and
    /// nothing is left.
    fn fill(&mut self, record: &mut AttemptRecord, now: UnixMs, effects: &mut Vec<Effect>) {
        if !self.replans.is_empty() {
            if self.running.is_empty() {
                let member = self.replans.pop_front().expect("not empty");
                effects.push(Effect::Replan(member));
            }
            return;
        }
        let mut started = Vec::new();
        while self.commands_running() < self.spec.concurrency.max(1) {
            let Some(outcome) = self.queue.pop_front() else {
                break;
            };
            // A member planned with its group applies with its group's
            // call, even when its mates had nothing left to change.
            let grouped = outcome.plan.as_ref().is_some_and(|p| p.group.is_some());
            let mut call = vec![outcome];
            let first = call[0].member.clone();
            call.extend(self.queued_mates(&first));
            let members: Vec<MemberId> = call
                .into_iter()
                .filter_map(|outcome| self.start(record, outcome, now, effects))
                .collect();
            match members.len() {
                0 => {}
                1 if !grouped => started.extend(members.into_iter().map(Effect::Apply)),
                _ => {
                    for member in &members {
                        self.in_group_call
                            .insert(member.clone(), members[0].clone());
                    }
                    started.push(Effect::ApplyGroup(members));
                }
            }
        }
        if !started.is_empty() {
            effects.extend([Effect::Save, Effect::Publish]);
            effects.extend(started);
        } else if self.running.is_empty() {
            if self.ask_after_apply(record, effects) {
                return;
            }
            if self.locked {
                effects.push(Effect::Unlock);
            }
            effects.push(Effect::Done(Step::Continue));
        }
    }

    /// How many apply commands run: a group's call counts once.
    fn commands_running(&self) -> usize {
        let calls: std::collections::BTreeSet<&MemberId> = self.in_group_call.values().collect();
        self.running.len() - self.in_group_call.len() + calls.len()
    }

    /// Takes `member`'s group-mates of its stage out of the queue, when its
    /// group applies with one call.
    fn queued_mates(&mut self, member: &MemberId) -> Vec<MemberOutcome> {
        let groups = self.spec.groups;
        if groups.is_empty() {
            return Vec::new();
        }
        let (mates, rest): (VecDeque<MemberOutcome>, VecDeque<MemberOutcome>) = self
            .queue
            .drain(..)
            .partition(|o| groups.together(member, &o.member));
        self.queue = rest;
        mates.into()
    }

    /// Makes one planned member `applying` (not yet saved) and returns it,
    /// or counts it as applied at once when its plan changes nothing.
    fn start(
        &mut self,
        record: &mut AttemptRecord,
        outcome: MemberOutcome,
        now: UnixMs,
        effects: &mut Vec<Effect>,
    ) -> Option<MemberId> {
        let plan = outcome.plan.as_ref().expect("only planned members apply");
        let member = outcome.member.clone();
        if plan.is_empty() {
            let (digest, outputs) = (plan.plan_digest.clone(), plan.outputs.known.clone());
            applied(
                record,
                &member,
                &digest,
                outputs,
                Some(NOTHING_TO_CHANGE),
                effects,
            );
            return None;
        }
        let lifetime = self
            .spec
            .lifetimes
            .get(&member)
            .copied()
            .unwrap_or_default();
        let held_before = match record.state(&member) {
            MemberState::Held { tries, .. } => tries,
            _ => 0,
        };
        let current = Current {
            plan_digest: plan.plan_digest.clone(),
            outcome,
            attempt: if self.spec.elsewhere.contains(&member) {
                CommandAttempt {
                    host: ELSEWHERE.to_owned(),
                    started_at: now,
                    deadline: now + lifetime,
                    process: None,
                    server: None,
                }
            } else {
                CommandAttempt {
                    host: self.spec.host.to_owned(),
                    started_at: now,
                    deadline: now + lifetime,
                    process: None,
                    server: self.spec.server.clone(),
                }
            },
            held_before,
        };
        record.set(&member, applying(&current));
        self.running.insert(member.clone(), current);
        Some(member)
    }

    /// What became of a member's apply command. Whatever it was, the
    /// wave's other applies go on.
    fn ended(
        &mut self,
        record: &mut AttemptRecord,
        member: &MemberId,
        outcome: ApplyOutcome,
        now: UnixMs,
        effects: &mut Vec<Effect>,
    ) {
        let Some(current) = self.running.remove(member) else {
            return;
        };
        self.in_group_call.remove(member);
        let member = current.outcome.member.clone();
        let digest = current.plan_digest.clone();
        let state = match outcome {
            ApplyOutcome::Applied(outputs) => {
                record.replans.remove(&member);
                if self.spec.after_apply_hooks {
                    // Saved with its `applied`: the hooks are owed it until they pass.
                    record.after_apply_due.insert(member.clone());
                }
                applied(record, &member, &digest, outputs, None, effects);
                self.fill(record, now, effects);
                return;
            }
            ApplyOutcome::Replan(reason) => {
                let count = record.replans.entry(member.clone()).or_default();
                *count += 1;
                if *count > MAX_REPLANS {
                    MemberState::Failed {
                        error: format!(
                            "its apply command asked to plan again {MAX_REPLANS} times in a row{}",
                            reason.map(|r| format!(" (last: {r})")).unwrap_or_default()
                        ),
                    }
                } else {
                    record.set(&member, MemberState::NotStarted);
                    self.replans.push_back(member);
                    effects.push(Effect::Save);
                    self.fill(record, now, effects);
                    return;
                }
            }
            ApplyOutcome::Held(holder) => {
                let tries = current.held_before + 1;
                let retry_at = now + held_backoff(self.spec.held_retry, tries);
                if record.wait.is_none() {
                    record.wait = Some(Wait::Holder {
                        member: member.clone(),
                        holder: holder.clone(),
                        until: retry_at,
                    });
                }
                effects.push(Effect::ResumeAt(retry_at));
                MemberState::Held {
                    holder,
                    tries,
                    retry_at,
                }
            }
            ApplyOutcome::StoodDown(reason) => MemberState::StoodDown { reason },
            ApplyOutcome::Failed(error) => MemberState::Failed { error },
            ApplyOutcome::NotReached(reason) => MemberState::NotReached { reason },
        };
        record.set(&member, state);
        effects.push(Effect::Save);
        self.fill(record, now, effects);
    }

    /// The member planned again after `replan` (no apply runs now): checked
    /// for coverage and the policy again, then applied first, before the
    /// members still queued (or the wave waits).
    fn replanned(
        &mut self,
        record: &mut AttemptRecord,
        outcome: MemberOutcome,
        overrides: &[Fact],
        now: UnixMs,
        effects: &mut Vec<Effect>,
    ) -> Result<(), ChangeSetError> {
        if outcome.plan.is_none() {
            record.set(
                &outcome.member,
                MemberState::Failed {
                    error: format!(
                        "planning again after `replan` failed: {}",
                        outcome.error.clone().unwrap_or_default()
                    ),
                },
            );
            effects.push(Effect::Save);
            self.fill(record, now, effects);
            return Ok(());
        }
        if let Coverage::NotCovered(reason) = self.coverage(record, &outcome) {
            let member = outcome.member.clone();
            self.open_round(record, &[(outcome, reason.clone())], Vec::new())?;
            record.set(
                &member,
                MemberState::Waiting {
                    reason: format!("not covered after `replan`: {reason}"),
                },
            );
            self.stop_and(effects, None);
            return Ok(());
        }
        if self.denied(record, std::slice::from_ref(&outcome), overrides) {
            self.stop_and(effects, None);
            return Ok(());
        }
        self.queue.push_front(outcome);
        self.fill(record, now, effects);
        Ok(())
    }

    /// The wave stops here in this job (it only does while no apply runs):
    /// the locks go, a job to look again is queued when one is due, and
    /// the run stops. Members still queued stay as they were, and the next
    /// job plans them again.
    fn stop_and(&mut self, effects: &mut Vec<Effect>, resume_at: Option<UnixMs>) {
        debug_assert!(self.running.is_empty(), "stopped while applying");
        self.queue.clear();
        self.replans.clear();
        effects.extend(resume_at.map(Effect::ResumeAt));
        if self.locked {
            effects.push(Effect::Unlock);
        }
        effects.push(Effect::Done(Step::Stop));
    }

    /// Whether a fresh plan is covered by what a person approved for the
    /// stage: an approved round, else the stage's own set (gated stages) or
    /// the pull request's. Under `on-destructive`, a plan that deletes or
    /// replaces is covered only by an approval given in the stage. Under
    /// `digest_over = "changing"`, a plan that changes nothing needs no
    /// approval: no digest binds it, and its apply has nothing to do.
    fn coverage(&self, record: &AttemptRecord, outcome: &MemberOutcome) -> Coverage {
        let plan = outcome
            .plan
            .as_ref()
            .expect("only planned members are checked");
        if self.spec.digest_over == DigestOver::Changing && plan.is_empty() {
            return Coverage::Covered;
        }
        let inputs = outcome.known_inputs();
        let applied: std::collections::BTreeSet<MemberId> = record
            .members
            .iter()
            .filter(|(_, s)| s.is_applied())
            .map(|(m, _)| m.clone())
            .collect();
        let fresh = FreshPlan {
            plan,
            inputs: &inputs,
            discovered: outcome.discovered.as_ref(),
            applied: Some(&applied),
        };
        let stage = self.spec.stage;
        let wave = self.spec.gated_wave;
        let (base, rounds) = record.approved_sets(self.spec.approved, stage, wave);
        if covered_by_any(&rounds, &fresh) == Coverage::Covered {
            return Coverage::Covered;
        }
        let gated = record
            .stages
            .contains_key(&crate::model::stage_gate_key(stage, wave));
        match covered_by_any(&base, &fresh) {
            Coverage::Covered
                if self.spec.gate == GatePolicy::OnDestructive && !gated && plan.destructive =>
            {
                Coverage::NotCovered(format!(
                    "{}: it now deletes or replaces, and stage {stage}'s gate is on-destructive",
                    plan.member
                ))
            }
            other => other,
        }
    }

    /// Records a round: covered (no reasons; `filled` says what became
    /// known), or waiting at its own gate for an approval of its digest. A
    /// round with the digest of one recorded is that round again.
    fn open_round(
        &self,
        record: &mut AttemptRecord,
        members: &[(MemberOutcome, String)],
        filled: Vec<String>,
    ) -> Result<(), ChangeSetError> {
        let outcomes: Vec<MemberOutcome> = members.iter().map(|(o, _)| o.clone()).collect();
        let set = change_set_of(&outcomes, self.spec.digest_over)?;
        let reasons: Vec<String> = members
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(_, r)| r.clone())
            .collect();
        record.open_round((self.spec.pr, self.spec.stage), set, reasons, filled);
        Ok(())
    }

    /// Whether a plan the policy denied stops the wave: it does unless an
    /// override stands for exactly that plan digest (given in this run, or
    /// during review for the plan the pull request showed). `overrides`:
    /// every fact of the override gate, so a revoke or a spend counts.
    fn denied(
        &self,
        record: &mut AttemptRecord,
        ready: &[MemberOutcome],
        overrides: &[Fact],
    ) -> bool {
        let mut denials = Vec::new();
        for outcome in ready {
            let plan = outcome.plan.as_ref().expect("ready members are planned");
            record.overrides.remove(&outcome.member);
            if plan.denied.is_empty() {
                continue;
            }
            let scope = Scope::Override {
                member: outcome.member.as_str(),
                run: self.spec.run,
            };
            if let Evaluation::Satisfied { .. } =
                Tally::new(overrides, scope).evaluate(&plan.plan_digest, 1)
            {
                record
                    .overrides
                    .insert(outcome.member.clone(), plan.plan_digest.clone());
                continue;
            }
            denials.push(Denial {
                member: outcome.member.clone(),
                digest: plan.plan_digest.clone(),
                rules: plan.denied_rules(),
            });
        }
        if denials.is_empty() {
            return false;
        }
        let named: Vec<&str> = denials.iter().map(|d| d.member.as_str()).collect();
        for o in ready {
            record.set(
                &o.member,
                MemberState::Waiting {
                    reason: format!("the policy denied the plan of {}", named.join(", ")),
                },
            );
        }
        let first = denials.remove(0);
        record.wait = Some(Wait::Override {
            member: first.member,
            gate: GateId::Override(self.spec.pr),
            digest: first.digest,
            rules: first.rules,
            also: denials,
        });
        true
    }
}

/// An upstream of an earlier wave (not a group-mate in `wave`) that still
/// waits when a later wave is reached: its plan moved, and it waits for
/// its round. Its dependents wait with it, blocked by it until it applied.
fn waiting_upstream(
    upstreams: &[MemberId],
    wave: &[MemberId],
    record: &AttemptRecord,
) -> Option<MemberId> {
    upstreams
        .iter()
        .filter(|upstream| !wave.contains(upstream))
        .find(|upstream| {
            matches!(
                record.members.get(*upstream),
                Some(MemberState::Waiting { .. })
            )
        })
        .cloned()
}

const NOTHING_TO_CHANGE: &str = "nothing to change";
const FINISHED_BEFORE: &str =
    "its apply had finished before a restart; planned again, nothing was left to change";

fn applying(current: &Current) -> MemberState {
    MemberState::Applying {
        plan_digest: current.plan_digest.clone(),
        attempt: Some(current.attempt.clone()),
    }
}

/// The member applied: the deployed estate first (a crash before the record
/// is saved leaves it `applying`, planned again and recorded once more;
/// when no command ran and the plan knows no outputs, what was recorded
/// before stands), then the record, then the outputs later plans read, then
/// the override that let it through is spent.
fn applied(
    record: &mut AttemptRecord,
    member: &MemberId,
    plan_digest: &Digest,
    outputs: Map<String, Value>,
    note: Option<&str>,
    effects: &mut Vec<Effect>,
) {
    if note.is_none() || !outputs.is_empty() {
        effects.push(Effect::RecordDeployed {
            member: member.clone(),
            outputs: outputs.clone(),
        });
    }
    record.set(
        member,
        MemberState::Applied {
            plan_digest: plan_digest.clone(),
            outputs: outputs.clone(),
            note: note.map(str::to_owned),
        },
    );
    effects.push(Effect::Save);
    effects.push(Effect::ReadOutputs {
        member: member.clone(),
        outputs,
    });
    if let Some(digest) = record.overrides.get(member) {
        effects.push(Effect::SpendOverride {
            member: member.clone(),
            digest: digest.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::tests::{outcome, override_fact, plan, set_of};
    use crate::gate::ledger::FactKind;
    use crate::model::time::in_tests::{millis, unix};
    use crate::plan::changeset::MemberStatus;
    use crate::plan::planfile::MemberPlan;
    use serde_json::json;

    const NOW: UnixMs = unix(1_000_000);
    const HOST: &str = "host-a";
    const SERVER: ProcessId = ProcessId { pid: 2, start: 1 };

    fn empty_plan(member: &str) -> MemberPlan {
        MemberPlan::parse(
            &member.into(),
            br#"{"summary": "", "entries": [], "empty": true}"#,
        )
        .unwrap()
    }

    fn destructive_plan(member: &str) -> MemberPlan {
        let text =
            r#"{"summary": "", "entries": [{"address": "aws_vpc.main", "action": "delete"}]}"#;
        MemberPlan::parse(&member.into(), text.as_bytes()).unwrap()
    }

    /// A wave of `members` in stage dev of pull request 7, run 3, whose
    /// approved change set is `approved` (approved by erin), applied one
    /// member at a time unless a test sets `concurrency`.
    struct Harness {
        members: Vec<MemberId>,
        approved: ChangeSet,
        upstreams: BTreeMap<MemberId, Vec<MemberId>>,
        gate: GatePolicy,
        digest_over: DigestOver,
        concurrency: usize,
        /// The stage's hooks around applies: (before.apply, after.apply).
        hooks: (bool, bool),
        /// The merge commit's groups (none unless a test sets them).
        groups: Groups,
        /// Members whose applies run on the forge's CI.
        elsewhere: BTreeSet<MemberId>,
        record: AttemptRecord,
    }

    impl Harness {
        fn new(members: &[&str], approved: &[&MemberPlan]) -> Self {
            let record = AttemptRecord {
                pr_approved_by: vec!["erin".into()],
                ..AttemptRecord::default()
            };
            Harness {
                members: members.iter().map(|m| (*m).into()).collect(),
                approved: set_of(approved),
                upstreams: BTreeMap::new(),
                gate: GatePolicy::Always,
                digest_over: DigestOver::All,
                concurrency: 1,
                hooks: (false, false),
                groups: Groups::default(),
                elsewhere: BTreeSet::new(),
                record,
            }
        }

        fn machine(&self) -> WaveMachine<'_> {
            WaveMachine::new(WaveSpec {
                run: 3,
                pr: PrNumber(7),
                stage: "dev",
                gated_wave: None,
                members: &self.members,
                upstreams: self.upstreams.clone(),
                approved: &self.approved,
                gate: self.gate,
                digest_over: self.digest_over,
                host: HOST,
                server: Some(SERVER),
                lifetimes: self
                    .members
                    .iter()
                    .map(|m| (m.clone(), Duration::from_secs(60)))
                    .collect(),
                elsewhere: self.elsewhere.clone(),
                held_retry: Duration::from_secs(30),
                concurrency: self.concurrency,
                groups: &self.groups,
                before_apply_hooks: self.hooks.0,
                after_apply_hooks: self.hooks.1,
            })
        }
    }

    fn step(
        machine: &mut WaveMachine<'_>,
        record: &mut AttemptRecord,
        o: Observation,
    ) -> Vec<Effect> {
        machine.step(record, o).unwrap()
    }

    /// Reached, locked and planned: what the machine asks once the wave's plans are in.
    fn to_planned(
        machine: &mut WaveMachine<'_>,
        record: &mut AttemptRecord,
        plans: &[&MemberPlan],
        overrides: Vec<Fact>,
    ) -> Vec<Effect> {
        let members: Vec<MemberId> = plans.iter().map(|p| p.member.clone()).collect();
        assert_eq!(
            step(machine, record, Observation::Reached { now: NOW }),
            [Effect::Lock(members.clone())]
        );
        let locked = Observation::Locked {
            alive: BTreeMap::new(),
            now: NOW,
        };
        assert_eq!(
            step(machine, record, locked),
            [Effect::Publish, Effect::Plan(members)]
        );
        let planned = Observation::Planned {
            outcomes: plans.iter().map(|p| outcome(p)).collect(),
            overrides,
            now: NOW,
        };
        step(machine, record, planned)
    }

    fn ended(member: &str, outcome: ApplyOutcome) -> Observation {
        Observation::Ended {
            member: member.into(),
            outcome,
            printed: None,
            carry: None,
            ran_on: None,
            now: NOW + millis(5_000),
        }
    }

    fn outputs(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect()
    }

    #[test]
    fn before_apply_hooks_run_on_the_covered_plans_before_any_apply_and_after_apply_ones_once_the_wave_applied(
    ) {
        let net = plan("network@dev", "10.0.0.0/16");
        let mut h = Harness::new(&["network@dev"], &[&net]);
        h.hooks = (true, true);
        let mut record = h.record.clone();
        let mut machine = h.machine();
        let wave: Vec<MemberId> = vec!["network@dev".into()];
        assert_eq!(
            to_planned(&mut machine, &mut record, &[&net], vec![]),
            [Effect::Hooks {
                moment: Moment::BeforeApply,
                members: wave.clone()
            }],
            "nothing is applying yet"
        );
        assert_eq!(record.state("network@dev"), MemberState::NotStarted);
        let passed = |now| Observation::Hooked {
            result: HooksResult::Passed,
            now,
        };
        assert_eq!(
            step(&mut machine, &mut record, passed(NOW)),
            [
                Effect::Save,
                Effect::Publish,
                Effect::Apply("network@dev".into())
            ]
        );
        let effects = step(
            &mut machine,
            &mut record,
            ended("network@dev", ApplyOutcome::Applied(outputs(&[]))),
        );
        assert_eq!(
            effects.last(),
            Some(&Effect::Hooks {
                moment: Moment::AfterApply,
                members: wave
            }),
            "{effects:?}"
        );
        assert!(
            !effects.contains(&Effect::Unlock),
            "the locks are held while it runs"
        );
        assert!(
            record.after_apply_due.contains("network@dev"),
            "owed, and saved so"
        );
        assert_eq!(
            step(&mut machine, &mut record, passed(NOW + millis(6_000))),
            [Effect::Save, Effect::Unlock, Effect::Done(Step::Continue)]
        );
        assert!(record.after_apply_due.is_empty());
    }

    #[test]
    fn after_apply_hooks_owed_by_an_earlier_job_run_before_the_wave_counts_as_done() {
        let net = plan("network@dev", "10.0.0.0/16");
        let mut h = Harness::new(&["network@dev"], &[&net]);
        h.hooks = (false, true);
        let mut record = h.record.clone();
        record.set(
            &"network@dev".into(),
            MemberState::Applied {
                plan_digest: net.plan_digest.clone(),
                outputs: outputs(&[]),
                note: None,
            },
        );
        // It applied, and the job ended (a crash, a failing hook) before its hooks passed.
        record.after_apply_due.insert("network@dev".into());
        let mut machine = h.machine();
        let wave: Vec<MemberId> = vec!["network@dev".into()];
        let hooks = Effect::Hooks {
            moment: Moment::AfterApply,
            members: wave,
        };
        assert_eq!(
            step(&mut machine, &mut record, Observation::Reached { now: NOW }),
            std::slice::from_ref(&hooks)
        );
        let failed = Observation::Hooked {
            result: HooksResult::Failed("the after.apply hook `smoke` failed".into()),
            now: NOW,
        };
        assert_eq!(
            step(&mut machine, &mut record, failed),
            [Effect::Save, Effect::Done(Step::Stop)]
        );
        assert!(record.after_apply_due.contains("network@dev"), "still owed");
        let mut machine = h.machine();
        step(&mut machine, &mut record, Observation::Reached { now: NOW });
        let passed = Observation::Hooked {
            result: HooksResult::Passed,
            now: NOW,
        };
        assert_eq!(
            step(&mut machine, &mut record, passed),
            [Effect::Save, Effect::Done(Step::Continue)]
        );
        assert!(record.after_apply_due.is_empty());
    }

    #[test]
    fn a_before_apply_hook_that_fails_or_waits_stops_the_wave_with_nothing_applied() {
        let net = plan("network@dev", "10.0.0.0/16");
        let mut h = Harness::new(&["network@dev"], &[&net]);
        h.hooks = (true, false);
        let wait = Wait::Hook {
            stage: "dev".into(),
            moment: Moment::BeforeApply,
            hook: "window".into(),
            gate: GateId::Hook(PrNumber(7), "window".into()),
            digest: Digest::repeated('e'),
            members: vec!["network@dev".into()],
            hold: false,
        };
        for result in [
            HooksResult::Failed("the before.apply hook `window` failed".into()),
            HooksResult::Waits(wait.clone()),
        ] {
            let mut record = h.record.clone();
            let mut machine = h.machine();
            to_planned(&mut machine, &mut record, &[&net], vec![]);
            let hooked = Observation::Hooked {
                result: result.clone(),
                now: NOW,
            };
            assert_eq!(
                step(&mut machine, &mut record, hooked),
                [Effect::Save, Effect::Unlock, Effect::Done(Step::Stop)],
                "{result:?}"
            );
            match result {
                HooksResult::Waits(_) => {
                    assert_eq!(record.wait, Some(wait.clone()));
                    assert!(matches!(
                        record.state("network@dev"),
                        MemberState::Waiting { .. }
                    ));
                }
                _ => assert!(matches!(
                    record.state("network@dev"),
                    MemberState::Failed { .. }
                )),
            }
        }
    }

    #[test]
    fn a_failing_after_apply_hook_stops_the_run_after_the_wave_with_its_members_applied() {
        let net = plan("network@dev", "10.0.0.0/16");
        let mut h = Harness::new(&["network@dev"], &[&net]);
        h.hooks = (false, true);
        let mut record = h.record.clone();
        let mut machine = h.machine();
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        step(
            &mut machine,
            &mut record,
            ended("network@dev", ApplyOutcome::Applied(outputs(&[]))),
        );
        let failed = Observation::Hooked {
            result: HooksResult::Failed("the after.apply hook `smoke` failed".into()),
            now: NOW,
        };
        assert_eq!(
            step(&mut machine, &mut record, failed),
            [Effect::Save, Effect::Unlock, Effect::Done(Step::Stop)]
        );
        assert!(record.state("network@dev").is_applied());
    }

    #[test]
    fn an_apply_on_the_forges_ci_names_no_process_of_the_bot_so_only_its_deadline_ends_it() {
        let net = plan("network@dev", "10.0.0.0/16");
        let mut h = Harness::new(&["network@dev"], &[&net]);
        h.elsewhere.insert("network@dev".into());
        let mut record = h.record.clone();
        let mut machine = h.machine();
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        let MemberState::Applying {
            attempt: Some(attempt),
            ..
        } = record.state("network@dev")
        else {
            panic!("saved applying before its job is dispatched");
        };
        assert_eq!(
            attempt,
            CommandAttempt {
                host: ELSEWHERE.into(),
                started_at: NOW,
                deadline: NOW + millis(60_000),
                process: None,
                server: None,
            }
        );
        // A restarted bot on the same host, its old server gone, still
        // waits for the run's deadline.
        assert_eq!(
            earlier_attempt(Some(&attempt), HOST, NOW + millis(1_000), Some(false)),
            EarlierAttempt::MayRun {
                until: NOW + millis(60_000)
            }
        );
    }

    #[test]
    fn a_member_is_saved_applying_before_its_command_starts_and_the_estate_before_applied() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let mut record = h.record.clone();
        let mut machine = h.machine();
        assert_eq!(
            to_planned(&mut machine, &mut record, &[&net], vec![]),
            [
                Effect::Save,
                Effect::Publish,
                Effect::Apply("network@dev".into())
            ]
        );
        let expected_attempt = CommandAttempt {
            host: HOST.into(),
            started_at: NOW,
            deadline: NOW + millis(60_000),
            process: None,
            server: Some(SERVER),
        };
        assert_eq!(
            record.state("network@dev"),
            MemberState::Applying {
                plan_digest: net.plan_digest.clone(),
                attempt: Some(expected_attempt.clone()),
            }
        );

        let process = ProcessId { pid: 42, start: 9 };
        let started = Observation::Started {
            member: "network@dev".into(),
            process: process.clone(),
        };
        assert_eq!(step(&mut machine, &mut record, started), [Effect::Save]);
        let MemberState::Applying { attempt, .. } = record.state("network@dev") else {
            panic!("still applying");
        };
        assert_eq!(attempt.unwrap().process, Some(process));

        let out = outputs(&[("vpc_id", "vpc-1")]);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("network@dev", ApplyOutcome::Applied(out.clone()))
            ),
            [
                Effect::RecordDeployed {
                    member: "network@dev".into(),
                    outputs: out.clone()
                },
                Effect::Save,
                Effect::ReadOutputs {
                    member: "network@dev".into(),
                    outputs: out.clone()
                },
                Effect::Unlock,
                Effect::Done(Step::Continue),
            ]
        );
        assert_eq!(
            record.state("network@dev"),
            MemberState::Applied {
                plan_digest: net.plan_digest.clone(),
                outputs: out,
                note: None
            }
        );
    }

    /// `member` planned and applied once more, printing and carrying nothing.
    fn apply_again_silently(h: &Harness, record: &mut AttemptRecord, member: &MemberPlan) {
        let mut machine = h.machine();
        record.set(&member.member, MemberState::NotStarted);
        to_planned(&mut machine, record, &[member], vec![]);
        step(
            &mut machine,
            record,
            ended("network@dev", ApplyOutcome::Applied(Map::new())),
        );
    }

    #[test]
    fn what_an_apply_printed_is_saved_with_its_result_and_a_silent_one_replaces_it() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        let printed = OutputTail::of("Apply complete! Resources: 1 added.\n");
        let effects = step(
            &mut machine,
            &mut record,
            Observation::Ended {
                member: "network@dev".into(),
                outcome: ApplyOutcome::Failed("exit 1".into()),
                printed: printed.clone(),
                carry: None,
                ran_on: None,
                now: NOW + millis(5_000),
            },
        );
        assert_eq!(record.printed.get("network@dev"), printed.as_ref());
        let saved = effects.iter().position(|e| *e == Effect::Save);
        assert!(saved.is_some(), "kept in the saved record: {effects:?}");

        // The next apply printed nothing: the old output is not shown as its.
        apply_again_silently(&h, &mut record, &net);
        assert_eq!(record.printed.get("network@dev"), None);
    }

    #[test]
    fn the_ci_run_an_apply_ran_in_is_saved_with_its_result_and_an_apply_here_forgets_it() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        let run = "https://github.com/acme/infra/actions/runs/7";
        let effects = step(
            &mut machine,
            &mut record,
            Observation::Ended {
                member: "network@dev".into(),
                outcome: ApplyOutcome::Failed("the runner went away".into()),
                printed: None,
                carry: None,
                ran_on: Some(run.into()),
                now: NOW + millis(5_000),
            },
        );
        assert_eq!(
            record.ran_on.get("network@dev").map(String::as_str),
            Some(run)
        );
        assert!(effects.contains(&Effect::Save), "{effects:?}");

        // Retried on the bot's host: the old run is not shown as its.
        apply_again_silently(&h, &mut record, &net);
        assert_eq!(record.ran_on.get("network@dev"), None);
    }

    #[test]
    fn what_an_apply_carries_is_saved_for_the_members_later_commands_until_it_carries_more() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        let carry = outputs(&[("step", "2 of 3")]);
        let effects = step(
            &mut machine,
            &mut record,
            Observation::Ended {
                member: "network@dev".into(),
                outcome: ApplyOutcome::Failed("exit 1".into()),
                printed: None,
                carry: Some(carry.clone()),
                ran_on: None,
                now: NOW + millis(5_000),
            },
        );
        let told = effects.iter().position(|e| {
            matches!(e, Effect::Carry { member, carry: c } if member == "network@dev" && *c == carry)
        });
        let saved = effects.iter().position(|e| *e == Effect::Save);
        assert!(told.is_some() && saved.is_some(), "{effects:?}");
        assert_eq!(record.carried.get("network@dev"), Some(&carry));

        // An apply that carries nothing keeps what was carried before.
        apply_again_silently(&h, &mut record, &net);
        assert_eq!(record.carried.get("network@dev"), Some(&carry));
    }

    #[test]
    fn a_plan_that_changes_nothing_counts_as_applied_without_a_command() {
        let quiet = empty_plan("dns@dev");
        let h = Harness::new(&["dns@dev"], &[&quiet]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&quiet], vec![]);
        assert_eq!(
            effects,
            [
                Effect::Save,
                Effect::ReadOutputs {
                    member: "dns@dev".into(),
                    outputs: Map::new()
                },
                Effect::Unlock,
                Effect::Done(Step::Continue),
            ],
            "no command, and the estate recorded before stands"
        );
        assert_eq!(
            record.state("dns@dev").label(),
            "applied (nothing to change)"
        );
    }

    #[test]
    fn under_digest_over_changing_a_plan_that_changes_nothing_needs_no_approval() {
        // Approved as planned on the head; on the merge commit its no-op moved.
        let approved = MemberPlan::parse(
            &"dns@dev".into(),
            br#"{"summary": "", "entries": [{"address": "a", "action": "no-op", "after": {"arn": "1"}}]}"#,
        )
        .unwrap();
        let moved = MemberPlan::parse(
            &"dns@dev".into(),
            br#"{"summary": "", "entries": [{"address": "a", "action": "no-op", "after": {"arn": "2"}}]}"#,
        )
        .unwrap();
        let mut h = Harness::new(&["dns@dev"], &[&approved]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        assert_eq!(
            to_planned(&mut machine, &mut record, &[&moved], vec![]),
            [Effect::Unlock, Effect::Done(Step::Continue)],
            "under `all` it moved, so a round waits"
        );
        assert_eq!(record.rounds.len(), 1);
        h.digest_over = DigestOver::Changing;
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&moved], vec![]);
        assert_eq!(effects.last(), Some(&Effect::Done(Step::Continue)));
        assert_eq!(
            record.state("dns@dev").label(),
            "applied (nothing to change)"
        );
        assert!(record.rounds.is_empty());
    }

    #[test]
    fn a_member_caught_applying_whose_plan_is_now_empty_had_applied_before_a_crash() {
        let quiet = empty_plan("dns@dev");
        let h = Harness::new(&["dns@dev"], &[&plan("dns@dev", "x")]);
        let mut record = h.record.clone();
        // Caught applying by a server that stopped, its deadline long past.
        record.set(
            &"dns@dev".into(),
            MemberState::Applying {
                plan_digest: Digest::repeated('0'),
                attempt: Some(CommandAttempt {
                    host: "host-b".into(),
                    started_at: NOW - millis(10_000),
                    deadline: NOW - millis(1),
                    process: None,
                    server: None,
                }),
            },
        );
        let mut machine = h.machine();
        let effects = to_planned(&mut machine, &mut record, &[&quiet], vec![]);
        assert!(!effects.iter().any(|e| matches!(e, Effect::Apply(_))));
        assert!(record
            .state("dns@dev")
            .label()
            .starts_with("applied (its apply had finished before a restart"));
    }

    #[test]
    fn an_earlier_apply_that_may_still_run_holds_the_wave_until_it_cannot() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let caught = |host: &str, process: Option<ProcessId>| MemberState::Applying {
            plan_digest: net.plan_digest.clone(),
            attempt: Some(CommandAttempt {
                host: host.into(),
                started_at: NOW - millis(1_000),
                deadline: NOW + millis(50_000),
                process,
                server: None,
            }),
        };
        let locked = |alive: &[(&str, bool)]| Observation::Locked {
            alive: alive.iter().map(|(m, a)| ((*m).into(), *a)).collect(),
            now: NOW,
        };

        // Started on another host: only its deadline tells.
        let mut record = h.record.clone();
        record.set(&"network@dev".into(), caught("host-b", None));
        let mut machine = h.machine();
        step(&mut machine, &mut record, Observation::Reached { now: NOW });
        assert_eq!(
            step(&mut machine, &mut record, locked(&[])),
            [
                Effect::Publish,
                Effect::ResumeAt(NOW + millis(50_000)),
                Effect::Unlock,
                Effect::Done(Step::Stop)
            ]
        );
        assert_eq!(
            record.wait,
            Some(Wait::EarlierAttempt {
                member: "network@dev".into(),
                until: NOW + millis(50_000)
            })
        );

        // Started here, and its process is gone: planned again at once.
        let mut record = h.record.clone();
        let process = ProcessId { pid: 5, start: 1 };
        record.set(&"network@dev".into(), caught(HOST, Some(process)));
        let mut machine = h.machine();
        step(&mut machine, &mut record, Observation::Reached { now: NOW });
        assert_eq!(
            step(&mut machine, &mut record, locked(&[("network@dev", false)])),
            [Effect::Publish, Effect::Plan(vec!["network@dev".into()])]
        );
    }

    #[test]
    fn a_lock_held_by_another_run_queues_the_wave_behind_it() {
        let h = Harness::new(&["network@dev", "dns@dev"], &[]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        step(&mut machine, &mut record, Observation::Reached { now: NOW });
        let held = Observation::LockHeld {
            member: "dns@dev".into(),
            pr: PrNumber(5),
        };
        assert_eq!(
            step(&mut machine, &mut record, held),
            [Effect::Done(Step::Stop)],
            "nothing was locked, so nothing is let go"
        );
        assert_eq!(
            record.state("network@dev").label(),
            "waiting: queued behind pull request #5"
        );
        assert_eq!(
            record.wait,
            Some(Wait::Lock {
                member: "dns@dev".into(),
                pr: PrNumber(5)
            })
        );
    }

    #[test]
    fn a_plan_that_moved_waits_for_its_round_while_its_wave_mates_apply() {
        let (net, dns) = (plan("network@dev", "10.0.0.0/16"), plan("dns@dev", "a"));
        let h = Harness::new(&["network@dev", "dns@dev"], &[&net, &dns]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let moved = plan("network@dev", "10.9.0.0/16");
        let effects = to_planned(&mut machine, &mut record, &[&moved, &dns], vec![]);
        assert_eq!(
            effects.last(),
            Some(&Effect::Apply("dns@dev".into())),
            "dns@dev does not depend on what moved: it applies now"
        );
        let round = &record.rounds[0];
        assert_eq!(
            (round.number, round.gate.to_string().as_str()),
            (2, "pr-7-round-2")
        );
        assert!(!round.covered());
        assert_eq!(round.change_set.members.len(), 1, "only the moved plan");
        assert_eq!(
            record.wait,
            Some(Wait::Round {
                round: 2,
                gate: "pr-7-round-2".parse().unwrap(),
                digest: round.change_set.digest.clone()
            })
        );
        assert!(record
            .state("network@dev")
            .label()
            .starts_with("waiting: not covered: network@dev"));
        assert_eq!(record.state("dns@dev").label(), "applying");
        let effects = step(
            &mut machine,
            &mut record,
            ended("dns@dev", ApplyOutcome::Applied(Map::new())),
        );
        assert_eq!(effects.last(), Some(&Effect::Done(Step::Continue)));

        // The same moved plan again (in a later job: the wait taken as it
        // starts) is the same round, not a new one.
        record.wait = None;
        let mut machine = h.machine();
        to_planned(&mut machine, &mut record, &[&moved], vec![]);
        assert_eq!(record.rounds.len(), 1);
        assert!(matches!(record.wait, Some(Wait::Round { round: 2, .. })));
    }

    #[test]
    fn what_depends_on_a_moved_plan_waits_with_it_and_a_later_move_waits_for_the_first_round() {
        // network@dev moved in wave 1; app@dev (on it) and dns@dev (not)
        // are wave 2.
        let (net, app, dns) = (
            plan("network@dev", "10.0.0.0/16"),
            plan("app@dev", "a"),
            plan("dns@dev", "a"),
        );
        let mut h = Harness::new(&["app@dev", "dns@dev"], &[&net, &app, &dns]);
        h.upstreams
            .insert("app@dev".into(), vec!["network@dev".into()]);
        let mut record = h.record.clone();
        let moved = plan("network@dev", "10.9.0.0/16");
        {
            let mut first = h.machine();
            first.spec.members = Box::leak(Box::new(["network@dev".into()]));
            to_planned(&mut first, &mut record, &[&moved], vec![]);
        }
        assert!(matches!(record.wait, Some(Wait::Round { round: 2, .. })));
        let mut machine = h.machine();
        let reached = step(
            &mut machine,
            &mut record,
            Observation::Reached { now: unix(0) },
        );
        assert_eq!(reached, [Effect::Lock(vec!["dns@dev".into()])]);
        assert_eq!(record.state("app@dev").label(), "blocked by network@dev");
        assert_eq!(
            record.root_state("app@dev").label(),
            record.state("network@dev").label(),
            "it waits for what it waits on"
        );
        // dns@dev moved too: the run already waits for round 2, so it waits
        // for that first, with no round of its own yet.
        let dns_moved = plan("dns@dev", "b");
        let locked = Observation::Locked {
            alive: BTreeMap::new(),
            now: unix(0),
        };
        assert_eq!(
            step(&mut machine, &mut record, locked),
            [Effect::Publish, Effect::Plan(vec!["dns@dev".into()])]
        );
        let planned = Observation::Planned {
            outcomes: vec![outcome(&dns_moved)],
            overrides: vec![],
            now: unix(0),
        };
        assert_eq!(
            step(&mut machine, &mut record, planned),
            [Effect::Unlock, Effect::Done(Step::Continue)]
        );
        assert_eq!(record.rounds.len(), 1);
        assert!(matches!(record.wait, Some(Wait::Round { round: 2, .. })));
        assert!(
            record.state("dns@dev").label().ends_with(
                "its round opens once the run no longer waits for an approval of round 2"
            ),
            "{}",
            record.state("dns@dev").label()
        );
    }

    #[test]
    fn under_on_destructive_a_plan_that_deletes_needs_an_approval_in_its_stage() {
        let gone = destructive_plan("network@dev");
        let mut h = Harness::new(&["network@dev"], &[&gone]);
        h.gate = GatePolicy::OnDestructive;
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&gone], vec![]);
        assert_eq!(effects, [Effect::Unlock, Effect::Done(Step::Continue)]);
        assert_eq!(
            record.rounds[0].reasons,
            ["network@dev: it now deletes or replaces, and stage dev's gate is on-destructive"]
        );

        // Under `always` the pull request's approval of the same plan covers it.
        h.gate = GatePolicy::Always;
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&gone], vec![]);
        assert_eq!(effects.last(), Some(&Effect::Apply("network@dev".into())));
    }

    #[test]
    fn a_denied_plan_waits_for_an_override_of_exactly_its_digest_which_is_spent_once_applied() {
        let mut db = plan("db@dev", "a");
        db.denied = vec!["no-public-buckets".into()];
        let h = Harness::new(&["db@dev"], &[&db]);

        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&db], vec![]);
        assert_eq!(effects, [Effect::Unlock, Effect::Done(Step::Stop)]);
        assert_eq!(
            record.wait,
            Some(Wait::Override {
                member: "db@dev".into(),
                gate: "pr-7-override".parse().unwrap(),
                digest: db.plan_digest.clone(),
                rules: vec!["no-public-buckets".into()],
                also: vec![]
            })
        );

        // An override of another digest does not let it through.
        let other = override_fact("db@dev", &Digest::repeated('9'), FactKind::Approved);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&db], vec![other]);
        assert_eq!(effects, [Effect::Unlock, Effect::Done(Step::Stop)]);

        // One of its digest does, and is spent once the member applied.
        let given = override_fact("db@dev", &db.plan_digest, FactKind::Approved);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&db], vec![given.clone()]);
        assert_eq!(effects.last(), Some(&Effect::Apply("db@dev".into())));
        let effects = step(
            &mut machine,
            &mut record,
            ended("db@dev", ApplyOutcome::Applied(Map::new())),
        );
        assert!(effects.contains(&Effect::SpendOverride {
            member: "db@dev".into(),
            digest: db.plan_digest.clone()
        }));

        // A revoke after it stops it counting.
        let mut revoked = override_fact("db@dev", &db.plan_digest, FactKind::Revoked);
        revoked.seq = 2;
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&db], vec![given, revoked]);
        assert_eq!(effects, [Effect::Unlock, Effect::Done(Step::Stop)]);
    }

    #[test]
    fn replan_plans_again_applies_the_new_plan_and_fails_after_the_limit() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        for round in 1..=MAX_REPLANS {
            let asked = ended(
                "network@dev",
                ApplyOutcome::Replan(Some("state moved".into())),
            );
            assert_eq!(
                step(&mut machine, &mut record, asked),
                [Effect::Save, Effect::Replan("network@dev".into())],
                "replan {round}"
            );
            assert_eq!(record.state("network@dev"), MemberState::NotStarted);
            let replanned = Observation::Replanned {
                outcome: Box::new(outcome(&net)),
                overrides: vec![],
                now: NOW,
            };
            assert_eq!(
                step(&mut machine, &mut record, replanned),
                [
                    Effect::Save,
                    Effect::Publish,
                    Effect::Apply("network@dev".into())
                ]
            );
        }
        let effects = step(
            &mut machine,
            &mut record,
            ended("network@dev", ApplyOutcome::Replan(None)),
        );
        assert_eq!(
            effects,
            [Effect::Save, Effect::Unlock, Effect::Done(Step::Continue)]
        );
        assert_eq!(
            record.state("network@dev").label(),
            format!("failed: its apply command asked to plan again {MAX_REPLANS} times in a row")
        );
    }

    #[test]
    fn a_replan_that_moves_the_plan_waits_for_its_round() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        step(
            &mut machine,
            &mut record,
            ended("network@dev", ApplyOutcome::Replan(None)),
        );
        let replanned = Observation::Replanned {
            outcome: Box::new(outcome(&plan("network@dev", "10.1.0.0/16"))),
            overrides: vec![],
            now: NOW,
        };
        assert_eq!(
            step(&mut machine, &mut record, replanned),
            [Effect::Unlock, Effect::Done(Step::Stop)]
        );
        assert!(record
            .state("network@dev")
            .label()
            .starts_with("waiting: not covered after `replan`"));
        assert!(matches!(record.wait, Some(Wait::Round { round: 2, .. })));
    }

    #[test]
    fn a_held_member_is_tried_again_later_and_later_while_it_stays_held() {
        let net = plan("network@dev", "10.0.0.0/16");
        let h = Harness::new(&["network@dev"], &[&net]);
        let mut record = h.record.clone();
        let mut machine = h.machine();
        to_planned(&mut machine, &mut record, &[&net], vec![]);
        let first_end = NOW + millis(5_000);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("network@dev", ApplyOutcome::Held("terraform lock".into()))
            ),
            [
                Effect::ResumeAt(first_end + millis(30_000)),
                Effect::Save,
                Effect::Unlock,
                Effect::Done(Step::Continue)
            ]
        );
        assert_eq!(
            record.wait,
            Some(Wait::Holder {
                member: "network@dev".into(),
                holder: "terraform lock".into(),
                until: first_end + millis(30_000)
            })
        );

        // Before its time, the next job leaves it be.
        record.wait = None;
        let mut machine = h.machine();
        let early = Observation::Reached {
            now: first_end + millis(29_999),
        };
        assert_eq!(
            step(&mut machine, &mut record, early),
            [Effect::Done(Step::Continue)]
        );

        // At its time it applies again; held once more, it waits twice as long.
        let mut machine = h.machine();
        let due = first_end + millis(30_000);
        step(&mut machine, &mut record, Observation::Reached { now: due });
        step(
            &mut machine,
            &mut record,
            Observation::Locked {
                alive: BTreeMap::new(),
                now: due,
            },
        );
        let planned = Observation::Planned {
            outcomes: vec![outcome(&net)],
            overrides: vec![],
            now: due,
        };
        step(&mut machine, &mut record, planned);
        let held_again = Observation::Ended {
            member: "network@dev".into(),
            outcome: ApplyOutcome::Held("terraform lock".into()),
            printed: None,
            carry: None,
            ran_on: None,
            now: due,
        };
        let effects = step(&mut machine, &mut record, held_again);
        assert_eq!(effects[0], Effect::ResumeAt(due + millis(60_000)));
        assert!(matches!(
            record.state("network@dev"),
            MemberState::Held { tries: 2, .. }
        ));
    }

    #[test]
    fn a_failure_stops_its_downstream_in_later_waves_but_not_its_wave_mates() {
        let (net, dns) = (plan("network@dev", "a"), plan("dns@dev", "b"));
        let h = Harness::new(&["network@dev", "dns@dev"], &[&net, &dns]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &[&net, &dns], vec![]);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("network@dev", ApplyOutcome::Failed("exit 1".into()))
            ),
            [
                Effect::Save,
                Effect::Save,
                Effect::Publish,
                Effect::Apply("dns@dev".into())
            ]
        );
        step(
            &mut machine,
            &mut record,
            ended("dns@dev", ApplyOutcome::StoodDown("frozen".into())),
        );
        assert_eq!(record.state("dns@dev").label(), "stood down: frozen");

        // The next wave: app depends on network (failed), web on dns (stood down).
        let mut next = Harness::new(&["app@dev", "web@dev"], &[]);
        next.upstreams = BTreeMap::from([
            ("app@dev".into(), vec!["network@dev".into()]),
            ("web@dev".into(), vec!["dns@dev".into()]),
        ]);
        let mut machine = next.machine();
        assert_eq!(
            step(&mut machine, &mut record, Observation::Reached { now: NOW }),
            [Effect::Done(Step::Continue)]
        );
        assert_eq!(record.state("app@dev").label(), "blocked by network@dev");
        assert_eq!(record.state("web@dev").label(), "blocked by dns@dev");
    }

    fn applied_effects(member: &str) -> [Effect; 3] {
        [
            Effect::RecordDeployed {
                member: member.into(),
                outputs: Map::new(),
            },
            Effect::Save,
            Effect::ReadOutputs {
                member: member.into(),
                outputs: Map::new(),
            },
        ]
    }

    /// A wave of `members`, each with a plan of its own, applied
    /// `concurrency` at a time.
    fn wide(members: &[&str], concurrency: usize) -> (Vec<MemberPlan>, Harness) {
        let plans: Vec<MemberPlan> = members.iter().map(|m| plan(m, m)).collect();
        let refs: Vec<&MemberPlan> = plans.iter().collect();
        let mut h = Harness::new(members, &refs);
        h.concurrency = concurrency;
        (plans, h)
    }

    fn applies(members: &[&str]) -> Vec<Effect> {
        let mut effects = vec![Effect::Save, Effect::Publish];
        effects.extend(members.iter().map(|m| Effect::Apply((*m).into())));
        effects
    }

    /// [`wide`], with `a` and `b` grouped ([`stacked`]).
    fn stacked_wide(members: &[&str], concurrency: usize) -> (Vec<MemberPlan>, Harness) {
        let (plans, mut h) = wide(members, concurrency);
        h.groups = stacked();
        (plans, h)
    }

    /// Groups `a` and `b` (`stack`), as a merge commit's config would.
    fn stacked() -> Groups {
        crate::config::RepoConfig::parse(
            "wavegate.toml",
            r#"
[defaults]
plan = ["./plan", "{plan_file}"]
[[stage]]
name = "dev"
[[group]]
name = "stack"
components = ["a", "b"]
plan = ["./stack", "{members_file}"]
apply = ["./stack", "{members_file}"]
[[component]]
name = "a"
dir = "a"
[[component]]
name = "b"
dir = "b"
[[component]]
name = "c"
dir = "c"
"#,
        )
        .unwrap()
        .groups
    }

    #[test]
    fn a_group_mate_of_a_moved_plan_waits_with_it_and_the_rest_applies() {
        let (plans, h) = stacked_wide(&["a@dev", "b@dev", "c@dev"], 2);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let moved = plan("a@dev", "10.9.9.0/24");
        let effects = to_planned(
            &mut machine,
            &mut record,
            &[&moved, &plans[1], &plans[2]],
            vec![],
        );
        assert_eq!(
            effects.last(),
            Some(&Effect::Apply("c@dev".into())),
            "c alone: b applies only with a, in the group's one call"
        );
        assert!(record
            .state("a@dev")
            .label()
            .starts_with("waiting: not covered"));
        assert_eq!(
            record.state("b@dev").label(),
            "waiting: its group-mate a@dev waits, and the group applies with one call"
        );
    }

    #[test]
    fn a_groups_mates_apply_with_one_call_that_counts_as_one_command() {
        let (plans, h) = stacked_wide(&["a@dev", "b@dev", "c@dev"], 2);
        let refs: Vec<&MemberPlan> = plans.iter().collect();
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        assert_eq!(
            to_planned(&mut machine, &mut record, &refs, vec![]),
            [
                Effect::Save,
                Effect::Publish,
                Effect::ApplyGroup(vec!["a@dev".into(), "b@dev".into()]),
                Effect::Apply("c@dev".into()),
            ],
            "the group's call and c's command: two commands, all saved applying first"
        );
        for member in ["a@dev", "b@dev", "c@dev"] {
            assert_eq!(record.state(member).label(), "applying");
        }
        let effects = step(
            &mut machine,
            &mut record,
            ended("a@dev", ApplyOutcome::Applied(Map::new())),
        );
        assert_eq!(effects, applied_effects("a@dev").to_vec());
        let reached = "group `stack`'s apply did not reach it before it failed";
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("b@dev", ApplyOutcome::NotReached(reached.into()))
            ),
            [Effect::Save]
        );
        let b = record.state("b@dev");
        assert_eq!(b.label(), format!("not started: {reached}"));
        assert!(b.stops_downstream(), "what reads b cannot go on");
        assert_eq!(
            stopped_upstream(&["b@dev".into()], &record),
            Some("b@dev".into())
        );
        let effects = step(
            &mut machine,
            &mut record,
            ended("c@dev", ApplyOutcome::Applied(Map::new())),
        );
        assert_eq!(
            effects.last(),
            Some(&Effect::Done(Step::Continue)),
            "{effects:?}"
        );
    }

    #[test]
    fn a_member_planned_with_its_group_applies_with_the_groups_call_even_alone() {
        let bind = |mut plan: MemberPlan| {
            let mates: [MemberId; 2] = ["a@dev".into(), "b@dev".into()];
            let own: Vec<(MemberId, Digest)> = mates
                .iter()
                .map(|m| (m.clone(), Digest::repeated('1')))
                .collect();
            plan.group = Some(crate::plan::planfile::GroupBinding {
                name: "stack".into(),
                members: mates.to_vec(),
                digest: crate::plan::planfile::GroupBinding::digest_of("stack", &own),
            });
            plan.plan_digest = plan.compute_digest();
            plan
        };
        let a = bind(empty_plan("a@dev"));
        let b = bind(plan("b@dev", "10.0.0.0/16"));
        let mut h = Harness::new(&["a@dev", "b@dev"], &[&a, &b]);
        h.groups = stacked();
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let effects = to_planned(&mut machine, &mut record, &[&a, &b], vec![]);
        assert_eq!(
            effects[effects.len() - 3..],
            [
                Effect::Save,
                Effect::Publish,
                Effect::ApplyGroup(vec!["b@dev".into()])
            ],
            "a had nothing to change; b's plan is the group's, so the group's call applies it: {effects:?}"
        );
        assert_eq!(record.state("a@dev").label(), "applied (nothing to change)");
    }

    #[test]
    fn a_lone_mate_applies_with_its_own_command_and_the_group_waits_for_a_free_slot() {
        let (plans, h) = stacked_wide(&["c@dev", "a@dev", "b@dev"], 1);
        let refs: Vec<&MemberPlan> = plans.iter().collect();
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        assert_eq!(
            to_planned(&mut machine, &mut record, &refs, vec![]),
            applies(&["c@dev"])
        );
        let mut expected = applied_effects("c@dev").to_vec();
        expected.extend([
            Effect::Save,
            Effect::Publish,
            Effect::ApplyGroup(vec!["a@dev".into(), "b@dev".into()]),
        ]);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("c@dev", ApplyOutcome::Applied(Map::new()))
            ),
            expected
        );
    }

    #[test]
    fn a_wide_wave_applies_up_to_its_concurrency_at_once_each_saved_applying_before_it_starts() {
        let (plans, h) = wide(&["a@dev", "b@dev", "c@dev", "d@dev"], 2);
        let refs: Vec<&MemberPlan> = plans.iter().collect();
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        assert_eq!(
            to_planned(&mut machine, &mut record, &refs, vec![]),
            applies(&["a@dev", "b@dev"]),
            "both saved applying in one save, before either command starts"
        );
        let labels = |record: &AttemptRecord| -> Vec<String> {
            ["a@dev", "b@dev", "c@dev", "d@dev"]
                .iter()
                .map(|m| record.state(m).label())
                .collect()
        };
        assert_eq!(
            labels(&record),
            ["applying", "applying", "not started", "not started"]
        );

        let started = |member: &str, pid| Observation::Started {
            member: member.into(),
            process: ProcessId { pid, start: 1 },
        };
        assert_eq!(
            step(&mut machine, &mut record, started("b@dev", 8)),
            [Effect::Save]
        );
        assert_eq!(
            step(&mut machine, &mut record, started("a@dev", 7)),
            [Effect::Save]
        );

        // b ends first: its place goes to c, while a still runs.
        let mut expected = applied_effects("b@dev").to_vec();
        expected.extend(applies(&["c@dev"]));
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("b@dev", ApplyOutcome::Applied(Map::new()))
            ),
            expected
        );
        assert_eq!(
            labels(&record),
            ["applying", "applied", "applying", "not started"]
        );
        let MemberState::Applying { attempt, .. } = record.state("a@dev") else {
            panic!("a still applies");
        };
        assert_eq!(
            attempt.unwrap().process,
            Some(ProcessId { pid: 7, start: 1 })
        );

        let mut expected = applied_effects("a@dev").to_vec();
        expected.extend(applies(&["d@dev"]));
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("a@dev", ApplyOutcome::Applied(Map::new()))
            ),
            expected
        );
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("d@dev", ApplyOutcome::Applied(Map::new()))
            ),
            applied_effects("d@dev"),
            "c still runs, so the wave is not over"
        );
        let mut expected = applied_effects("c@dev").to_vec();
        expected.extend([Effect::Unlock, Effect::Done(Step::Continue)]);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("c@dev", ApplyOutcome::Applied(Map::new()))
            ),
            expected
        );
    }

    #[test]
    fn a_failure_hold_or_stand_down_of_one_member_leaves_its_wave_mates_applying() {
        let (plans, h) = wide(&["a@dev", "b@dev", "c@dev", "d@dev"], 4);
        let refs: Vec<&MemberPlan> = plans.iter().collect();
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        assert_eq!(
            to_planned(&mut machine, &mut record, &refs, vec![]),
            applies(&["a@dev", "b@dev", "c@dev", "d@dev"])
        );
        let end = NOW + millis(5_000);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("a@dev", ApplyOutcome::Failed("exit 1".into()))
            ),
            [Effect::Save]
        );
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("b@dev", ApplyOutcome::Held("terraform lock".into()))
            ),
            [Effect::ResumeAt(end + millis(30_000)), Effect::Save]
        );
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("c@dev", ApplyOutcome::StoodDown("frozen".into()))
            ),
            [Effect::Save]
        );
        let mut expected = applied_effects("d@dev").to_vec();
        expected.extend([Effect::Unlock, Effect::Done(Step::Continue)]);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("d@dev", ApplyOutcome::Applied(Map::new()))
            ),
            expected
        );
        let labels: Vec<String> = ["a@dev", "b@dev", "c@dev", "d@dev"]
            .iter()
            .map(|m| record.state(m).label())
            .collect();
        assert_eq!(labels[0], "failed: exit 1");
        assert!(labels[1].starts_with("held"), "{}", labels[1]);
        assert_eq!(labels[2], "stood down: frozen");
        assert_eq!(labels[3], "applied");
    }

    #[test]
    fn a_replan_waits_until_no_apply_runs_and_nothing_new_starts_before_it() {
        let (plans, h) = wide(&["a@dev", "b@dev", "c@dev"], 2);
        let refs: Vec<&MemberPlan> = plans.iter().collect();
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        to_planned(&mut machine, &mut record, &refs, vec![]);
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("a@dev", ApplyOutcome::Replan(None))
            ),
            [Effect::Save],
            "b still runs: no re-plan yet, and c does not start"
        );
        let mut expected = applied_effects("b@dev").to_vec();
        expected.push(Effect::Replan("a@dev".into()));
        assert_eq!(
            step(
                &mut machine,
                &mut record,
                ended("b@dev", ApplyOutcome::Applied(Map::new()))
            ),
            expected
        );
        assert_eq!(record.state("c@dev"), MemberState::NotStarted);
        let replanned = Observation::Replanned {
            outcome: Box::new(outcome(&plans[0])),
            overrides: vec![],
            now: NOW,
        };
        assert_eq!(
            step(&mut machine, &mut record, replanned),
            applies(&["a@dev", "c@dev"]),
            "the re-planned member first, then the queue"
        );
    }

    #[test]
    fn after_a_crash_mid_wave_what_had_applied_counts_and_the_rest_apply_once_more() {
        let (plans, h) = wide(&["a@dev", "b@dev", "c@dev"], 3);
        let mut record = h.record.clone();
        // A server killed with a and b applying here; c had not started.
        for (member, pid) in [("a@dev", 11), ("b@dev", 12)] {
            record.set(
                &member.into(),
                MemberState::Applying {
                    plan_digest: plans[0].plan_digest.clone(),
                    attempt: Some(CommandAttempt {
                        host: HOST.into(),
                        started_at: NOW - millis(1_000),
                        deadline: NOW + millis(50_000),
                        process: Some(ProcessId { pid, start: 1 }),
                        server: None,
                    }),
                },
            );
        }
        let mut machine = h.machine();
        step(&mut machine, &mut record, Observation::Reached { now: NOW });
        let gone = Observation::Locked {
            alive: BTreeMap::from([("a@dev".into(), false), ("b@dev".into(), false)]),
            now: NOW,
        };
        let members: Vec<MemberId> = ["a@dev", "b@dev", "c@dev"].map(MemberId::from).to_vec();
        assert_eq!(
            step(&mut machine, &mut record, gone),
            [Effect::Publish, Effect::Plan(members)]
        );
        // a's apply had finished (its plan is empty now); b's had not.
        let planned = Observation::Planned {
            outcomes: vec![
                outcome(&empty_plan("a@dev")),
                outcome(&plans[1]),
                outcome(&plans[2]),
            ],
            overrides: vec![],
            now: NOW,
        };
        let effects = step(&mut machine, &mut record, planned);
        assert_eq!(
            effects
                .iter()
                .filter(|e| matches!(e, Effect::Apply(_)))
                .collect::<Vec<_>>(),
            [
                &Effect::Apply("b@dev".into()),
                &Effect::Apply("c@dev".into())
            ]
        );
        assert!(record
            .state("a@dev")
            .label()
            .starts_with("applied (its apply had finished before a restart"));
    }

    #[test]
    fn a_plan_that_failed_on_the_merge_commit_fails_its_member() {
        let net = plan("network@dev", "a");
        let h = Harness::new(&["network@dev"], &[&net]);
        let (mut record, mut machine) = (h.record.clone(), h.machine());
        let mut broken = outcome(&net);
        broken.plan = None;
        broken.status = MemberStatus::PlanFailed;
        broken.error = Some("exit 2".into());
        step(&mut machine, &mut record, Observation::Reached { now: NOW });
        step(
            &mut machine,
            &mut record,
            Observation::Locked {
                alive: BTreeMap::new(),
                now: NOW,
            },
        );
        let planned = Observation::Planned {
            outcomes: vec![broken],
            overrides: vec![],
            now: NOW,
        };
        assert_eq!(
            step(&mut machine, &mut record, planned),
            [Effect::Unlock, Effect::Done(Step::Continue)]
        );
        assert_eq!(
            record.state("network@dev").label(),
            "failed: planning on the merge commit failed: exit 2"
        );
    }
}
