//! The apply machine at a stage's gate, as a pure `step(observation) ->
//! effects` like a wave's (`machine`): whether the stage asks for its own
//! approval (`always`, or `on-destructive` when a plan deletes or
//! replaces; never when nothing changes), the set of its plans on the merge
//! commit that an `/approve <stage>` binds, a gate opened afresh when that
//! set moves or expired, its timeout, and the wait; and the stage's cost
//! (`cost@<stage>`): bound into its set, covered only by an approval of the
//! same figures (else a round), denied above `max_monthly_increase` until
//! an override of exactly that cost.

use super::hooks::{self, HooksResult};
use super::machine::{Effect, Step};
use super::{
    covered_by_any, stage_needs_approval, AttemptRecord, MemberState, Mismatch, StageGate, Wait,
};
use crate::config::hooks::Moment;
use crate::config::repo::GatePolicy;
use crate::gate::counting::{Evaluation, Scope, Tally};
use crate::gate::ledger::Fact;
use crate::model::{DigestOver, GateId, MemberId, PrNumber, StageName, UnixMs};
use crate::plan::changeset::{ChangeSet, ChangeSetError, MemberStatus};
use crate::plan::cost::StageCost;
use crate::plan::coverage::{Coverage, FreshPlan};
use crate::plan::outcome::{change_set_of, MemberOutcome};
use crate::plan::preview::Approvers;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the machine knows of the stage.
#[derive(Debug, Clone)]
pub(crate) struct StageSpec<'a> {
    pub(crate) run: i64,
    pub(crate) pr: PrNumber,
    /// The pull request's approved change set.
    pub(crate) approved: &'a ChangeSet,
    pub(crate) stage: &'a str,
    /// For a stage approved wave by wave (`gate_scope = "wave"`), the wave
    /// (1-based) whose gate this is: `waves` is then that wave alone.
    pub(crate) wave: Option<u32>,
    /// The stage's waves on the merge commit, in order (or the one wave).
    pub(crate) waves: &'a [Vec<MemberId>],
    /// Its gate and how long its wait may last, as the base sets them.
    pub(crate) gate: GatePolicy,
    pub(crate) timeout: Option<Duration>,
    /// Which members the stage's set digest binds (`[policy] digest_over`).
    pub(crate) digest_over: DigestOver,
    /// The stage has `after.plan` hooks: it is planned even when its gate
    /// asks for nothing, and the hooks are asked to run on its plans
    /// before the gate decides.
    pub(crate) after_plan_hooks: bool,
    /// The stage has a cost command: it is planned and priced in every job.
    pub(crate) priced: bool,
    /// Who may approve its gate, as the base's policy for it says.
    pub(crate) approvers: Approvers,
    /// Each member's upstreams in this stage, on the merge commit.
    pub(crate) upstreams: BTreeMap<MemberId, Vec<MemberId>>,
}

/// What the worker saw, answering the machine's last effect.
#[derive(Debug, Clone)]
pub(crate) enum StageObservation {
    /// The run reached the stage at `now` (unix ms).
    Reached { now: UnixMs },
    /// [`Effect::Preview`]'s members, planned on the merge commit wave by wave.
    Previewed { outcomes: Vec<MemberOutcome> },
    /// [`Effect::CountApprovals`]: who approved the digest there (empty
    /// while too few did), and the newest standing approval of another
    /// digest at the gate.
    Counted {
        by: Vec<String>,
        mismatch: Option<Mismatch>,
        now: UnixMs,
    },
    /// [`Effect::Hooks`]: what the stage's `after.plan` hooks came to.
    Hooked(HooksResult),
    /// [`Effect::Price`]: the stage's cost, and every fact of the override
    /// gate (an override of a denied cost, a revoke or a spend).
    Priced {
        cost: Box<StageCost>,
        overrides: Vec<Fact>,
    },
}

/// A stage's gate, from reaching the stage to the gate's decision in this job.
#[derive(Debug)]
pub(crate) struct StageMachine<'a> {
    spec: StageSpec<'a>,
    now: UnixMs,
    previewed: Vec<MemberOutcome>,
    /// Whether the gate asks for the stage's own approval in this job.
    asks: bool,
    /// Whether the stage is priced in this job: it has a cost command and
    /// its cost has not let it through yet in the run.
    pricing: bool,
    cost: Option<StageCost>,
    overrides: Vec<Fact>,
}

impl<'a> StageMachine<'a> {
    pub(crate) fn new(spec: StageSpec<'a>) -> Self {
        StageMachine {
            spec,
            now: UnixMs::EPOCH,
            previewed: Vec::new(),
            asks: false,
            pricing: false,
            cost: None,
            overrides: Vec::new(),
        }
    }

    /// Takes in one observation, changes `record` accordingly and returns
    /// what the worker does next: `Preview`, `CountApprovals` or `Done`.
    pub(crate) fn step(
        &mut self,
        record: &mut AttemptRecord,
        observation: StageObservation,
    ) -> Result<Vec<Effect>, ChangeSetError> {
        let stage = self.spec.stage;
        Ok(match observation {
            StageObservation::Reached { now } => {
                self.now = now;
                record.stand_down_after(stage, self.spec.waves, &self.spec.upstreams);
                let key = self.key();
                // What is left to apply: not a member that failed or is
                // blocked (it waits for `/retry`), nor one that applied.
                let pending: Vec<Vec<MemberId>> = self
                    .spec
                    .waves
                    .iter()
                    .map(|wave| {
                        wave.iter()
                            .filter(|m| {
                                let state = record.state(m);
                                !state.is_applied()
                                    && state != MemberState::Unaffected
                                    && !state.stops_downstream()
                                    && !self.upstream_stopped(m, record)
                            })
                            .cloned()
                            .collect()
                    })
                    .collect();
                // A member the stage was not decided over (it failed to
                // plan then, and was retried) makes it decide afresh.
                let decided = record
                    .stage_decided
                    .get(&key)
                    .is_none_or(|over| pending.iter().flatten().all(|m| over.contains(m)));
                let approved = decided
                    && record
                        .stages
                        .get(&key)
                        .is_some_and(|g| !g.approved_by.is_empty());
                self.asks = self.spec.gate != GatePolicy::Never && !approved;
                self.pricing =
                    self.spec.priced && !(decided && record.costs_passed.contains_key(stage));
                let nothing_left = pending.iter().all(Vec::is_empty);
                if nothing_left || (!self.asks && !self.spec.after_plan_hooks && !self.pricing) {
                    return Ok(vec![Effect::Done(Step::Continue)]);
                }
                vec![Effect::Preview(pending)]
            }
            StageObservation::Previewed { outcomes } => self.previewed(record, outcomes)?,
            StageObservation::Hooked(result) => {
                let members: Vec<MemberId> =
                    self.previewed.iter().map(|o| o.member.clone()).collect();
                match hooks::settle(record, Moment::AfterPlan, &members, result, Step::Continue) {
                    Some(step) => vec![Effect::Done(step)],
                    None => self.planned(record)?,
                }
            }
            StageObservation::Priced { cost, overrides } => {
                if let Some(error) = &cost.error {
                    for outcome in &self.previewed {
                        record.set(
                            &outcome.member,
                            MemberState::Failed {
                                error: format!(
                                    "stage {stage}'s cost command failed on the merge commit: {error}"
                                ),
                            },
                        );
                    }
                    return Ok(vec![Effect::Done(Step::Stop)]);
                }
                self.cost = Some(*cost);
                self.overrides = overrides;
                self.decide(record)?
            }
            StageObservation::Counted { by, mismatch, now } => {
                self.counted(record, by, mismatch, now)?
            }
        })
    }

    /// The stage's plans: a member whose plan failed fails, and those that
    /// depend on it are blocked by it (seeds 001: a failure blocks only its
    /// subtree); the stage is decided over the members that planned. It
    /// goes on, or opens its gate on their set (afresh when the set moved
    /// or the gate expired) and asks who approved it.
    fn previewed(
        &mut self,
        record: &mut AttemptRecord,
        outcomes: Vec<MemberOutcome>,
    ) -> Result<Vec<Effect>, ChangeSetError> {
        let mut planned = Vec::new();
        for outcome in outcomes {
            if outcome.plan.is_some() {
                planned.push(outcome);
                continue;
            }
            let blocked_by = outcome
                .blocked_by
                .as_deref()
                .filter(|_| outcome.status == MemberStatus::Blocked)
                .and_then(|by| by.parse::<MemberId>().ok());
            let state = match blocked_by {
                Some(by) => MemberState::Blocked { by },
                None => {
                    let error = outcome.error.clone().unwrap_or_else(|| "no plan".into());
                    MemberState::Failed {
                        error: format!("planning on the merge commit failed: {error}"),
                    }
                }
            };
            record.set(&outcome.member, state);
        }
        if planned.is_empty() {
            return Ok(vec![Effect::Done(Step::Stop)]);
        }
        // Added to, never narrowed: a later preview of what is left (for
        // hooks or a cost) does not make members decided before undecided.
        // Coverage still holds each against the gate's current set.
        record
            .stage_decided
            .entry(self.key())
            .or_default()
            .extend(planned.iter().map(|o| o.member.clone()));
        self.previewed = planned;
        if self.spec.after_plan_hooks {
            let members = self.previewed.iter().map(|o| o.member.clone()).collect();
            return Ok(vec![Effect::Hooks {
                moment: Moment::AfterPlan,
                members,
            }]);
        }
        self.planned(record)
    }

    /// Whether an upstream of `member` in the stage failed, was held or
    /// stood down (an earlier wave's, at a stage approved wave by wave):
    /// the member is not planned for the gate, whose set would show a plan
    /// made without that upstream's outputs; the wave blocks it.
    fn upstream_stopped(&self, member: &MemberId, record: &AttemptRecord) -> bool {
        let upstreams = self.spec.upstreams.get(member).map(Vec::as_slice);
        super::stopped_upstream(upstreams.unwrap_or_default(), record).is_some()
    }

    /// Where the record keeps this gate: by the stage, or the stage's wave.
    fn key(&self) -> String {
        crate::model::stage_gate_key(self.spec.stage, self.spec.wave)
    }

    /// "stage prod's gate", or "the gate of stage prod's wave 2".
    fn gate_of(&self) -> String {
        match self.spec.wave {
            Some(wave) => format!("the gate of stage {}'s wave {wave}", self.spec.stage),
            None => format!("stage {}'s gate", self.spec.stage),
        }
    }

    /// The stage's plans are made (and its after.plan hooks passed): they
    /// are priced where the stage has a cost command, else the gate decides.
    fn planned(&mut self, record: &mut AttemptRecord) -> Result<Vec<Effect>, ChangeSetError> {
        if self.pricing && !self.previewed.is_empty() {
            let members = self.previewed.iter().map(|o| o.member.clone()).collect();
            return Ok(vec![Effect::Price(members)]);
        }
        self.decide(record)
    }

    /// The stage's set on the merge commit: its plans and its cost.
    fn set(&self) -> Result<ChangeSet, ChangeSetError> {
        change_set_of(&self.previewed, self.spec.digest_over)?
            .with_costs(self.cost.iter().cloned().collect())
    }

    /// The gate let the stage through: its cost, where it has one, must be
    /// one a person approved (else a round waits for the new figures) and
    /// one the policy allows or an overrider let through (else the stage
    /// waits for `/override cost@<stage>`).
    fn go_on(&mut self, record: &mut AttemptRecord) -> Result<Vec<Effect>, ChangeSetError> {
        let Some(cost) = self.cost.clone() else {
            return Ok(vec![Effect::Done(Step::Continue)]);
        };
        let stage = self.spec.stage;
        let (base, rounds) = record.approved_sets(self.spec.approved, stage, self.spec.wave);
        let approved: Vec<&ChangeSet> = base.iter().chain(&rounds).copied().collect();
        if !approved
            .iter()
            .filter_map(|set| set.cost(stage))
            .any(|was| cost.same_as(was))
        {
            let reason = match approved.iter().find_map(|set| set.cost(stage)) {
                Some(was) => cost.moved_from(was),
                None => format!(
                    "{}: the approved plan was not priced; the stage now costs {} {} a month",
                    cost.member,
                    cost.total(),
                    cost.currency
                ),
            };
            // Approving the round approves the plans it shows too: each
            // that moved says so beside the cost.
            let mut reasons = vec![reason.clone()];
            reasons.extend(
                self.previewed
                    .iter()
                    .filter_map(|o| self.moved(o, &approved)),
            );
            let set = self.set()?;
            record.open_round((self.spec.pr, stage), set, reasons, Vec::new());
            for outcome in &self.previewed {
                record.set(
                    &outcome.member,
                    MemberState::Waiting {
                        reason: format!("not covered: {reason}"),
                    },
                );
            }
            return Ok(vec![Effect::Done(Step::Stop)]);
        }
        let passed = |record: &mut AttemptRecord| {
            record
                .costs_passed
                .insert(stage.to_owned(), cost.digest.clone());
        };
        if cost.denied.is_empty() || record.overrides.get(&cost.member) == Some(&cost.digest) {
            passed(record);
            return Ok(vec![Effect::Done(Step::Continue)]);
        }
        let scope = Scope::Override {
            member: cost.member.as_str(),
            run: self.spec.run,
        };
        if let Evaluation::Satisfied { .. } =
            Tally::new(&self.overrides, scope).evaluate(&cost.digest, 1)
        {
            record
                .overrides
                .insert(cost.member.clone(), cost.digest.clone());
            passed(record);
            // Saved before it is spent: a crash between the two leaves an
            // override that still counts, never one spent and forgotten.
            return Ok(vec![
                Effect::Save,
                Effect::SpendOverride {
                    member: cost.member.clone(),
                    digest: cost.digest.clone(),
                },
                Effect::Done(Step::Continue),
            ]);
        }
        let max = cost.max_increase.map_or("?".into(), |m| m.to_string());
        for outcome in &self.previewed {
            record.set(
                &outcome.member,
                MemberState::Waiting {
                    reason: format!(
                        "the policy denied {}: the monthly cost rises by {} {}, more than `max_monthly_increase` ({max})",
                        cost.member,
                        cost.increase(),
                        cost.currency
                    ),
                },
            );
        }
        record.wait = Some(Wait::Override {
            member: cost.member.clone(),
            gate: GateId::Override(self.spec.pr),
            digest: cost.digest.clone(),
            rules: cost.denied.clone(),
            also: Vec::new(),
        });
        Ok(vec![Effect::Done(Step::Stop)])
    }

    /// Why `outcome`'s plan is not covered by `approved`, if it is not (a
    /// plan that changes nothing needs nothing under `digest_over =
    /// "changing"`).
    fn moved(&self, outcome: &MemberOutcome, approved: &[&ChangeSet]) -> Option<String> {
        let plan = outcome.plan.as_ref()?;
        if self.spec.digest_over == DigestOver::Changing && plan.is_empty() {
            return None;
        }
        let inputs = outcome.known_inputs();
        let fresh = FreshPlan {
            plan,
            inputs: &inputs,
            discovered: outcome.discovered.as_ref(),
            applied: None,
        };
        match covered_by_any(approved, &fresh) {
            Coverage::Covered => None,
            Coverage::NotCovered(reason) => Some(reason),
        }
    }

    /// Whether the stage's plans need its own approval; if so, opens its
    /// gate on their set (afresh when the set moved or the gate expired)
    /// and asks who approved it.
    fn decide(&mut self, record: &mut AttemptRecord) -> Result<Vec<Effect>, ChangeSetError> {
        if !self.asks {
            return self.go_on(record);
        }
        let key = self.key();
        let outcomes = &self.previewed;
        let destructive = outcomes
            .iter()
            .any(|o| o.plan.as_ref().is_some_and(|p| p.destructive));
        let nothing_changes = outcomes
            .iter()
            .all(|o| o.plan.as_ref().is_some_and(|p| p.is_empty()));
        if !stage_needs_approval(self.spec.gate, destructive, nothing_changes) {
            if nothing_changes && self.spec.gate != GatePolicy::Never {
                record.gates_skipped.insert(key);
            }
            return self.go_on(record);
        }
        let set = self.set()?;
        let known = record.stages.get(&key);
        if known.is_none_or(|g| g.change_set.digest != set.digest || g.expired) {
            let expires_at = self.spec.timeout.map(|t| self.now + t);
            let opened = self.opened(set, expires_at);
            record.stages.insert(key.clone(), opened);
        }
        let gate = &record.stages[&key];
        Ok(vec![Effect::CountApprovals {
            gate: gate.gate.clone(),
            digest: gate.change_set.digest.clone(),
        }])
    }

    /// The gate opened on `change_set`, with who may approve it and how its
    /// plans compare with the ones reviewed in the pull request.
    fn opened(&self, change_set: ChangeSet, expires_at: Option<UnixMs>) -> StageGate {
        let reviewed = [self.spec.approved];
        let unlike_reviewed = self
            .previewed
            .iter()
            .filter_map(|outcome| self.moved(outcome, &reviewed))
            .collect();
        StageGate {
            gate: GateId::of_stage(self.spec.pr, self.spec.stage, self.spec.wave),
            change_set,
            approved_by: Vec::new(),
            mismatch: None,
            opened_at: self.now,
            expires_at,
            expired: false,
            approvers: Some(self.spec.approvers.clone()),
            unlike_reviewed: Some(unlike_reviewed),
        }
    }

    /// Approved: the stage goes on. Past its timeout: its members fail, and
    /// `/retry` opens a fresh gate. Else the stage waits at its gate.
    fn counted(
        &mut self,
        record: &mut AttemptRecord,
        by: Vec<String>,
        mismatch: Option<Mismatch>,
        now: UnixMs,
    ) -> Result<Vec<Effect>, ChangeSetError> {
        let gate = record
            .stages
            .get_mut(&self.key())
            .expect("opened before counting");
        gate.mismatch = mismatch.filter(|_| by.is_empty());
        if !by.is_empty() {
            gate.approved_by = by;
            return self.go_on(record);
        }
        let (gate_id, digest) = (gate.gate.clone(), gate.change_set.digest.clone());
        let (what, approve) = (self.gate_of(), gate_id.approve_words());
        if let Some(at) = gate.expires_at.filter(|at| now >= *at) {
            gate.expired = true;
            for outcome in &self.previewed {
                record.set(
                    &outcome.member,
                    MemberState::Failed {
                        error: format!(
                            "{what} expired at {} with no `{approve}` (its `timeout` on the base); `/retry` opens a fresh gate",
                            at
                        ),
                    },
                );
            }
            return Ok(vec![Effect::Done(Step::Stop)]);
        }
        let waits = match self.spec.wave {
            Some(wave) => format!("wave {wave} of stage {}", self.spec.stage),
            None => format!("stage {}", self.spec.stage),
        };
        for outcome in &self.previewed {
            record.set(
                &outcome.member,
                MemberState::Waiting {
                    reason: format!("{waits} waits for `{approve}`"),
                },
            );
        }
        record.wait = Some(Wait::Stage {
            stage: StageName::new(self.spec.stage),
            gate: gate_id,
            digest,
        });
        Ok(vec![Effect::Done(Step::Stop)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::tests::{outcome, override_fact, plan, set_of};
    use crate::gate::ledger::FactKind;
    use crate::model::time::in_tests::{millis, unix};
    use crate::model::Digest;
    use crate::plan::cost::{Figures, MemberCost};
    use crate::plan::planfile::MemberPlan;

    const NOW: UnixMs = unix(1_000_000);

    fn waves() -> Vec<Vec<MemberId>> {
        vec![
            vec!["network@prod".parse().unwrap()],
            vec!["app@prod".parse().unwrap()],
        ]
    }

    fn machine(waves: &[Vec<MemberId>], gate: GatePolicy) -> StageMachine<'_> {
        StageMachine::new(StageSpec {
            run: 3,
            pr: PrNumber(7),
            approved: Box::leak(Box::new(set_of(&[]))),
            stage: "prod",
            wave: None,
            waves,
            gate,
            timeout: Some(Duration::from_secs(3600)),
            digest_over: DigestOver::All,
            after_plan_hooks: false,
            priced: false,
            approvers: Approvers::of(&crate::config::repo::Policy::default()),
            upstreams: BTreeMap::new(),
        })
    }

    /// A stage with a cost command, its pull request approved at `approved`.
    fn priced<'a>(
        waves: &'a [Vec<MemberId>],
        gate: GatePolicy,
        approved: &'a ChangeSet,
    ) -> StageMachine<'a> {
        let mut m = machine(waves, gate);
        m.spec.approved = approved;
        m.spec.priced = true;
        m
    }

    /// `app@prod` at `monthly` a month (100.00 before), judged by `max`.
    fn cost(monthly: &str, max: Option<&str>) -> StageCost {
        let figures = Figures {
            currency: "USD".into(),
            members: [(
                "app@prod".to_owned(),
                MemberCost {
                    monthly: monthly.parse().unwrap(),
                    past: "100".parse().unwrap(),
                },
            )]
            .into(),
        };
        StageCost::priced("prod", figures, max.map(|m| m.parse().unwrap()))
    }

    /// The stage's two plans, approved with the pull request at `monthly`
    /// (judged by `max`), and the record of its run.
    fn approved_at(
        monthly: &str,
        max: Option<&str>,
    ) -> (MemberPlan, MemberPlan, ChangeSet, AttemptRecord) {
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let approved = set_of(&[&net, &app])
            .with_costs(vec![cost(monthly, max)])
            .unwrap();
        let record = AttemptRecord {
            pr_approved_by: vec!["erin".into()],
            ..AttemptRecord::default()
        };
        (net, app, approved, record)
    }

    fn priced_at(cost: StageCost, overrides: Vec<Fact>) -> StageObservation {
        StageObservation::Priced {
            cost: Box::new(cost),
            overrides,
        }
    }

    /// Reaches the stage and previews `plans`: what the machine asks next.
    fn preview(
        m: &mut StageMachine<'_>,
        record: &mut AttemptRecord,
        plans: &[&MemberPlan],
    ) -> Vec<Effect> {
        let reached = m
            .step(record, StageObservation::Reached { now: NOW })
            .unwrap();
        assert_eq!(reached, [Effect::Preview(waves())]);
        let outcomes = plans.iter().map(|p| outcome(p)).collect();
        m.step(record, StageObservation::Previewed { outcomes })
            .unwrap()
    }

    fn counted(by: &[&str], mismatch: Option<Mismatch>, now: UnixMs) -> StageObservation {
        StageObservation::Counted {
            by: by.iter().map(|b| (*b).to_owned()).collect(),
            mismatch,
            now,
        }
    }

    #[test]
    fn a_stage_without_a_gate_or_already_approved_goes_on_without_planning() {
        let waves = waves();
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Never);
        let reached = StageObservation::Reached { now: NOW };
        assert_eq!(
            m.step(&mut record, reached.clone()).unwrap(),
            [Effect::Done(Step::Continue)]
        );

        let mut m = machine(&waves, GatePolicy::Always);
        let set = preview(
            &mut m,
            &mut record,
            &[&plan("network@prod", "n"), &plan("app@prod", "a")],
        );
        assert!(matches!(set[..], [Effect::CountApprovals { .. }]));
        m.step(&mut record, counted(&["erin"], None, NOW)).unwrap();
        let mut m = machine(&waves, GatePolicy::Always);
        assert_eq!(
            m.step(&mut record, reached).unwrap(),
            [Effect::Done(Step::Continue)]
        );
    }

    #[test]
    fn after_plan_hooks_see_the_stages_plans_before_its_gate_decides_even_one_that_asks_nothing() {
        let waves = waves();
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let previewed = |m: &mut StageMachine<'_>, record: &mut AttemptRecord| {
            assert_eq!(
                m.step(record, StageObservation::Reached { now: NOW })
                    .unwrap(),
                [Effect::Preview(waves.clone())],
                "planned for the hooks"
            );
            let outcomes = [&net, &app].iter().map(|p| outcome(p)).collect();
            m.step(record, StageObservation::Previewed { outcomes })
                .unwrap()
        };
        let hooks = Effect::Hooks {
            moment: Moment::AfterPlan,
            members: vec!["network@prod".into(), "app@prod".into()],
        };
        for gate in [GatePolicy::Never, GatePolicy::Always] {
            let mut record = AttemptRecord::default();
            let mut m = machine(&waves, gate);
            m.spec.after_plan_hooks = true;
            assert_eq!(
                previewed(&mut m, &mut record),
                std::slice::from_ref(&hooks),
                "{gate:?}"
            );
            assert!(
                record.stages.is_empty(),
                "no gate opened before the hooks passed"
            );
            let next = m
                .step(&mut record, StageObservation::Hooked(HooksResult::Passed))
                .unwrap();
            match gate {
                GatePolicy::Never => assert_eq!(next, [Effect::Done(Step::Continue)]),
                _ => assert!(
                    matches!(next[..], [Effect::CountApprovals { .. }]),
                    "{next:?}"
                ),
            }
        }
        // A failing one stops the stage with its members failed, and no gate opens.
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        m.spec.after_plan_hooks = true;
        previewed(&mut m, &mut record);
        let failed = HooksResult::Failed("the after.plan hook `vet` failed".into());
        assert_eq!(
            m.step(&mut record, StageObservation::Hooked(failed))
                .unwrap(),
            [Effect::Done(Step::Stop)]
        );
        assert!(record.stages.is_empty());
        assert!(matches!(
            record.state("app@prod"),
            MemberState::Failed { .. }
        ));
    }

    #[test]
    fn a_stage_approved_wave_by_wave_holds_each_wave_at_its_own_gate_bound_to_that_waves_plans() {
        let waves = waves();
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let mut record = AttemptRecord::default();
        // Wave 1 alone: its gate binds network@prod's plan only.
        let mut first = machine(&waves[..1], GatePolicy::Always);
        first.spec.wave = Some(1);
        let reached = first
            .step(&mut record, StageObservation::Reached { now: NOW })
            .unwrap();
        assert_eq!(reached, [Effect::Preview(waves[..1].to_vec())]);
        let outcomes = vec![outcome(&net)];
        let asked = first
            .step(&mut record, StageObservation::Previewed { outcomes })
            .unwrap();
        let gate = record.stages["prod wave 1"].clone();
        assert_eq!(gate.gate.to_string(), "pr-7-prod-wave-1");
        assert_eq!(gate.change_set.digest, set_of(&[&net]).digest);
        assert_eq!(
            asked,
            [Effect::CountApprovals {
                gate: gate.gate.clone(),
                digest: gate.change_set.digest.clone(),
            }]
        );
        first.step(&mut record, counted(&[], None, NOW)).unwrap();
        assert_eq!(
            record.state("network@prod"),
            MemberState::Waiting {
                reason: "wave 1 of stage prod waits for `/approve prod wave 1`".into()
            }
        );
        assert_eq!(
            record.wait,
            Some(Wait::Stage {
                stage: "prod".into(),
                gate: gate.gate.clone(),
                digest: gate.change_set.digest.clone(),
            })
        );
        assert!(
            !record.stages.contains_key("prod"),
            "the stage as a whole has no gate"
        );

        // Approved, wave 1 goes on; wave 2 then asks on its own set.
        let mut first = machine(&waves[..1], GatePolicy::Always);
        first.spec.wave = Some(1);
        first
            .step(&mut record, StageObservation::Reached { now: NOW })
            .unwrap();
        first
            .step(
                &mut record,
                StageObservation::Previewed {
                    outcomes: vec![outcome(&net)],
                },
            )
            .unwrap();
        assert_eq!(
            first
                .step(&mut record, counted(&["erin"], None, NOW))
                .unwrap(),
            [Effect::Done(Step::Continue)]
        );
        let mut second = machine(&waves[1..], GatePolicy::Always);
        second.spec.wave = Some(2);
        second
            .step(&mut record, StageObservation::Reached { now: NOW })
            .unwrap();
        let asked = second
            .step(
                &mut record,
                StageObservation::Previewed {
                    outcomes: vec![outcome(&app)],
                },
            )
            .unwrap();
        let gate = &record.stages["prod wave 2"];
        assert_eq!(gate.gate.to_string(), "pr-7-prod-wave-2");
        assert_eq!(gate.change_set.digest, set_of(&[&app]).digest);
        assert!(matches!(asked[..], [Effect::CountApprovals { .. }]));
        assert_eq!(record.stages["prod wave 1"].approved_by, ["erin"]);
        // A wave-2 member whose upstream failed to apply in wave 1 is not
        // planned for wave 2's gate: its plan would lack that upstream.
        let mut after_failure = record.clone();
        after_failure.stages.remove("prod wave 2");
        after_failure.set(
            &"network@prod".into(),
            MemberState::Failed {
                error: "apply failed".into(),
            },
        );
        let mut second = machine(&waves[1..], GatePolicy::Always);
        second.spec.wave = Some(2);
        second.spec.upstreams = [("app@prod".into(), vec!["network@prod".into()])].into();
        assert_eq!(
            second
                .step(&mut after_failure, StageObservation::Reached { now: NOW })
                .unwrap(),
            [Effect::Done(Step::Continue)],
            "nothing of wave 2 to decide over"
        );
        // Resumed, the approved wave 1 does not ask again.
        let mut first = machine(&waves[..1], GatePolicy::Always);
        first.spec.wave = Some(1);
        assert_eq!(
            first
                .step(&mut record, StageObservation::Reached { now: NOW })
                .unwrap(),
            [Effect::Done(Step::Continue)]
        );
    }

    #[test]
    fn an_always_gate_waits_for_an_approval_of_the_set_of_its_plans() {
        let waves = waves();
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        let asked = preview(&mut m, &mut record, &[&net, &app]);
        let gate = record.stages["prod"].clone();
        assert_eq!(
            (
                gate.gate.to_string().as_str(),
                gate.opened_at,
                gate.expires_at
            ),
            ("pr-7-prod", NOW, Some(NOW + millis(3_600_000)))
        );
        assert_eq!(
            asked,
            [Effect::CountApprovals {
                gate: "pr-7-prod".parse().unwrap(),
                digest: gate.change_set.digest.clone(),
            }]
        );
        let earlier = Mismatch {
            by: "erin".into(),
            digest: crate::model::Digest::repeated('e'),
        };
        let done = m
            .step(&mut record, counted(&[], Some(earlier.clone()), NOW))
            .unwrap();
        assert_eq!(done, [Effect::Done(Step::Stop)]);
        assert_eq!(
            record.wait,
            Some(Wait::Stage {
                stage: "prod".into(),
                gate: "pr-7-prod".parse().unwrap(),
                digest: gate.change_set.digest.clone()
            })
        );
        assert_eq!(record.stages["prod"].mismatch, Some(earlier));
        assert_eq!(
            record.state("app@prod").label(),
            "waiting: stage prod waits for `/approve prod`"
        );
        assert_eq!(
            record.stages["prod"].approvers.as_ref().map(|a| a.required),
            Some(1),
            "the gate says who may approve it"
        );

        // Approved: it goes on, and the mismatch is no longer shown.
        let mut m = machine(&waves, GatePolicy::Always);
        preview(&mut m, &mut record, &[&net, &app]);
        let earlier = Mismatch {
            by: "erin".into(),
            digest: crate::model::Digest::repeated('e'),
        };
        let done = m
            .step(&mut record, counted(&["carol"], Some(earlier), NOW))
            .unwrap();
        assert_eq!(done, [Effect::Done(Step::Continue)]);
        assert_eq!(record.stages["prod"].approved_by, ["carol"]);
        assert_eq!(record.stages["prod"].mismatch, None);
    }

    #[test]
    fn the_gate_opens_afresh_when_its_set_moves_and_stays_open_while_it_does_not() {
        let waves = waves();
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        preview(&mut m, &mut record, &[&plan("app@prod", "a")]);
        m.step(&mut record, counted(&[], None, NOW)).unwrap();

        let later = StageObservation::Reached {
            now: NOW + millis(10),
        };
        let same = vec![outcome(&plan("app@prod", "a"))];
        let mut m = machine(&waves, GatePolicy::Always);
        m.step(&mut record, later.clone()).unwrap();
        m.step(&mut record, StageObservation::Previewed { outcomes: same })
            .unwrap();
        assert_eq!(
            record.stages["prod"].opened_at, NOW,
            "the same set: the same gate"
        );

        let moved = vec![outcome(&plan("app@prod", "z"))];
        let mut m = machine(&waves, GatePolicy::Always);
        m.step(&mut record, later).unwrap();
        m.step(&mut record, StageObservation::Previewed { outcomes: moved })
            .unwrap();
        assert_eq!(
            record.stages["prod"].opened_at,
            NOW + millis(10),
            "approvals before it do not count"
        );
    }

    #[test]
    fn on_destructive_asks_only_when_a_plan_deletes_and_nothing_to_change_skips_the_gate() {
        let waves = waves();
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::OnDestructive);
        let calm = preview(&mut m, &mut record, &[&plan("app@prod", "a")]);
        assert_eq!(calm, [Effect::Done(Step::Continue)]);

        let gone = MemberPlan::parse(
            &"app@prod".into(),
            br#"{"summary": "", "entries": [{"address": "x", "action": "delete"}]}"#,
        )
        .unwrap();
        let mut m = machine(&waves, GatePolicy::OnDestructive);
        assert!(matches!(
            preview(&mut m, &mut record, &[&gone])[..],
            [Effect::CountApprovals { .. }]
        ));

        let quiet = MemberPlan::parse(
            &"app@prod".into(),
            br#"{"summary": "", "entries": [], "empty": true}"#,
        )
        .unwrap();
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        assert_eq!(
            preview(&mut m, &mut record, &[&quiet]),
            [Effect::Done(Step::Continue)]
        );
        assert!(record.gates_skipped.contains("prod"));
    }

    #[test]
    fn a_failed_plan_blocks_its_subtree_and_the_gate_is_decided_over_the_members_that_planned() {
        // network@prod and dns@prod are wave 1; app@prod (on network) wave 2.
        let waves: Vec<Vec<MemberId>> = vec![
            vec!["network@prod".into(), "dns@prod".into()],
            vec!["app@prod".into()],
        ];
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        m.step(&mut record, StageObservation::Reached { now: NOW })
            .unwrap();
        let dns = plan("dns@prod", "a");
        let failed = MemberOutcome {
            plan: None,
            status: MemberStatus::PlanFailed,
            error: Some("exit 2".into()),
            ..outcome(&plan("network@prod", "n"))
        };
        let blocked = MemberOutcome {
            plan: None,
            status: MemberStatus::Blocked,
            error: Some("blocked: upstream network@prod failed to plan".into()),
            blocked_by: Some("network@prod".into()),
            ..outcome(&plan("app@prod", "b"))
        };
        let previewed = StageObservation::Previewed {
            outcomes: vec![failed, outcome(&dns), blocked],
        };
        let asked = m.step(&mut record, previewed).unwrap();
        let [Effect::CountApprovals { digest, .. }] = &asked[..] else {
            panic!("the gate asks for its approval: {asked:?}");
        };
        assert_eq!(*digest, set_of(&[&dns]).digest, "the set of what planned");
        assert_eq!(
            record.state("network@prod").label(),
            "failed: planning on the merge commit failed: exit 2"
        );
        assert_eq!(record.state("app@prod").label(), "blocked by network@prod");
        assert_eq!(
            m.step(&mut record, counted(&["erin"], None, NOW)).unwrap(),
            [Effect::Done(Step::Continue)],
            "approved, what planned goes on"
        );

        // A later job (an approval elsewhere) asks nothing again and plans
        // nothing that failed.
        let mut m = machine(&waves, GatePolicy::Always);
        assert_eq!(
            m.step(&mut record, StageObservation::Reached { now: NOW })
                .unwrap(),
            [Effect::Done(Step::Continue)]
        );
        // `/retry`: what failed is planned again, and the stage decides
        // afresh over what is left, so nothing applies past its gate
        // unapproved.
        record.reset_for_retry();
        let mut m = machine(&waves, GatePolicy::Always);
        assert_eq!(
            m.step(&mut record, StageObservation::Reached { now: NOW })
                .unwrap(),
            [Effect::Preview(vec![
                vec!["network@prod".into(), "dns@prod".into()],
                vec!["app@prod".into()]
            ])]
        );
        let (net, app) = (plan("network@prod", "n"), plan("app@prod", "b"));
        let previewed = StageObservation::Previewed {
            outcomes: vec![outcome(&net), outcome(&dns), outcome(&app)],
        };
        let asked = m.step(&mut record, previewed).unwrap();
        assert!(
            matches!(&asked[..], [Effect::CountApprovals { digest, .. }] if *digest == set_of(&[&net, &dns, &app]).digest)
        );
        assert!(record.stages["prod"].approved_by.is_empty(), "a fresh gate");
    }

    #[test]
    fn an_unapproved_gate_past_its_timeout_fails_the_stage_and_a_failed_plan_stops_it() {
        let waves = waves();
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        preview(&mut m, &mut record, &[&plan("app@prod", "a")]);
        let late = counted(&[], None, NOW + millis(3_600_000));
        assert_eq!(
            m.step(&mut record, late).unwrap(),
            [Effect::Done(Step::Stop)]
        );
        assert!(record.stages["prod"].expired);
        assert!(record
            .state("app@prod")
            .label()
            .starts_with("failed: stage prod's gate expired at"));

        let mut broken = outcome(&plan("app@prod", "a"));
        broken.plan = None;
        broken.error = Some("exit 2".into());
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        m.step(&mut record, StageObservation::Reached { now: NOW })
            .unwrap();
        let previewed = StageObservation::Previewed {
            outcomes: vec![broken],
        };
        assert_eq!(
            m.step(&mut record, previewed).unwrap(),
            [Effect::Done(Step::Stop)]
        );
        assert_eq!(
            record.state("app@prod").label(),
            "failed: planning on the merge commit failed: exit 2"
        );
    }

    #[test]
    fn a_priced_stage_is_planned_and_priced_even_ungated_and_goes_on_at_the_approved_cost() {
        let waves = waves();
        let (net, app, approved, mut record) = approved_at("120", None);
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        assert_eq!(
            preview(&mut m, &mut record, &[&net, &app]),
            [Effect::Price(vec![
                "network@prod".into(),
                "app@prod".into()
            ])]
        );
        let effects = m
            .step(&mut record, priced_at(cost("120", None), vec![]))
            .unwrap();
        assert_eq!(effects, [Effect::Done(Step::Continue)]);
        assert!(record.rounds.is_empty() && record.wait.is_none());
    }

    #[test]
    fn a_cost_that_moved_since_the_approval_waits_for_a_round_naming_the_old_and_new_figures() {
        let waves = waves();
        let (net, app, approved, mut record) = approved_at("120", None);
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        preview(&mut m, &mut record, &[&net, &app]);
        let effects = m
            .step(&mut record, priced_at(cost("900", None), vec![]))
            .unwrap();
        assert_eq!(effects, [Effect::Done(Step::Stop)]);
        let round = &record.rounds[0];
        assert_eq!(
            round.reasons,
            ["cost@prod: the monthly cost moved from 120.00 USD to 900.00 USD (+780.00) since the approved plan: app@prod 120.00 → 900.00"]
        );
        assert_eq!(round.change_set.cost("prod"), Some(&cost("900", None)));
        assert_eq!(
            round.change_set.members.len(),
            2,
            "with the plans it was shown"
        );
        assert_eq!(
            record.wait,
            Some(Wait::Round {
                round: round.number,
                gate: round.gate.clone(),
                digest: round.change_set.digest.clone()
            })
        );
        assert!(matches!(
            record.state("app@prod"),
            MemberState::Waiting { reason } if reason.starts_with("not covered: cost@prod")
        ));

        // Once the round is approved, the same figures go on; others do not.
        record.rounds[0].approved_by = vec!["erin".into()];
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        preview(&mut m, &mut record, &[&net, &app]);
        let effects = m
            .step(&mut record, priced_at(cost("900", None), vec![]))
            .unwrap();
        assert_eq!(effects, [Effect::Done(Step::Continue)]);
        assert_eq!(record.costs_passed["prod"], cost("900", None).digest);
        // Before anything of it applied (a new run of the same record),
        // another cost is another round.
        record.costs_passed.clear();
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        preview(&mut m, &mut record, &[&net, &app]);
        m.step(&mut record, priced_at(cost("901", None), vec![]))
            .unwrap();
        assert_eq!(record.rounds.len(), 2, "another cost, another round");
    }

    #[test]
    fn a_gated_stage_binds_its_cost_in_the_set_its_approval_names() {
        let waves = waves();
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let approved = set_of(&[&net, &app])
            .with_costs(vec![cost("120", None)])
            .unwrap();
        let mut record = AttemptRecord::default();
        let mut m = priced(&waves, GatePolicy::Always, &approved);
        preview(&mut m, &mut record, &[&net, &app]);
        let effects = m
            .step(&mut record, priced_at(cost("900", None), vec![]))
            .unwrap();
        let gate = &record.stages["prod"];
        assert_eq!(gate.change_set.cost("prod"), Some(&cost("900", None)));
        assert_ne!(gate.change_set.digest, set_of(&[&net, &app]).digest);
        assert!(
            matches!(effects[..], [Effect::CountApprovals { ref digest, .. }] if *digest == gate.change_set.digest)
        );
        // `/approve prod` of that set approved the cost too: no round.
        let effects = m.step(&mut record, counted(&["erin"], None, NOW)).unwrap();
        assert_eq!(effects, [Effect::Done(Step::Continue)]);
        assert!(record.rounds.is_empty());
    }

    #[test]
    fn a_cost_above_the_cap_waits_for_an_override_of_exactly_it_which_is_spent_once() {
        let waves = waves();
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let dear = cost("900", Some("500"));
        assert_eq!(dear.denied, ["max_monthly_increase"]);
        let approved = set_of(&[&net, &app])
            .with_costs(vec![dear.clone()])
            .unwrap();
        let base = AttemptRecord {
            pr_approved_by: vec!["erin".into()],
            ..AttemptRecord::default()
        };
        let run = |record: &mut AttemptRecord, overrides: Vec<Fact>| {
            let mut m = priced(&waves, GatePolicy::Never, &approved);
            preview(&mut m, record, &[&net, &app]);
            m.step(record, priced_at(dear.clone(), overrides)).unwrap()
        };
        let mut record = base.clone();
        assert_eq!(run(&mut record, vec![]), [Effect::Done(Step::Stop)]);
        assert_eq!(
            record.wait,
            Some(Wait::Override {
                member: "cost@prod".into(),
                gate: "pr-7-override".parse().unwrap(),
                digest: dear.digest.clone(),
                rules: vec!["max_monthly_increase".into()],
                also: vec![],
            })
        );
        assert!(matches!(
            record.state("app@prod"),
            MemberState::Waiting { reason } if reason.contains("rises by 800.00 USD, more than `max_monthly_increase` (500.00)")
        ));

        let other = override_fact("cost@prod", &Digest::repeated('9'), FactKind::Approved);
        let mut record = base.clone();
        assert_eq!(run(&mut record, vec![other]), [Effect::Done(Step::Stop)]);

        let given = override_fact("cost@prod", &dear.digest, FactKind::Approved);
        let mut record = base.clone();
        assert_eq!(
            run(&mut record, vec![given]),
            [
                Effect::Save,
                Effect::SpendOverride {
                    member: "cost@prod".into(),
                    digest: dear.digest.clone()
                },
                Effect::Done(Step::Continue)
            ]
        );
        // A later job of the run (the override spent, part of the stage
        // applied) does not price what is left of it again: it goes on.
        assert_eq!(record.costs_passed["prod"], dear.digest);
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        let reached = m.step(&mut record, StageObservation::Reached { now: NOW });
        assert_eq!(reached.unwrap(), [Effect::Done(Step::Continue)]);
    }

    #[test]
    fn a_cost_command_that_fails_fails_the_stage_with_its_error() {
        let waves = waves();
        let (net, app) = (plan("network@prod", "a"), plan("app@prod", "b"));
        let approved = set_of(&[&net, &app])
            .with_costs(vec![cost("120", None)])
            .unwrap();
        let mut record = AttemptRecord::default();
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        preview(&mut m, &mut record, &[&net, &app]);
        let failed = StageCost::failed("prod", "the cost command exited with status 2".into());
        let effects = m.step(&mut record, priced_at(failed, vec![])).unwrap();
        assert_eq!(effects, [Effect::Done(Step::Stop)]);
        assert_eq!(
            record.state("network@prod"),
            MemberState::Failed {
                error: "stage prod's cost command failed on the merge commit: the cost command exited with status 2".into()
            }
        );
    }

    #[test]
    fn a_cost_round_names_every_plan_that_moved_beside_the_cost() {
        let waves = waves();
        let (net, _, approved, mut record) = approved_at("120", None);
        let mut m = priced(&waves, GatePolicy::Never, &approved);
        let drifted = plan("app@prod", "c");
        preview(&mut m, &mut record, &[&net, &drifted]);
        m.step(&mut record, priced_at(cost("900", None), vec![]))
            .unwrap();
        let reasons = &record.rounds[0].reasons;
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].starts_with("cost@prod: the monthly cost moved"));
        assert!(reasons[1].starts_with("app@prod: "), "{reasons:?}");
    }
}
