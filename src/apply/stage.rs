//! The apply machine at a stage's gate, as a pure `step(observation) ->
//! effects` like a wave's (`machine`): whether the stage asks for its own
//! approval (`always`, or `on-destructive` when a plan deletes or
//! replaces; never when nothing changes), the set of its plans on the merge
//! commit that an `/approve <stage>` binds, a gate opened afresh when that
//! set moves or expired, its timeout, and the wait.

use super::hooks::{self, HooksResult};
use super::machine::{Effect, Step};
use super::{stage_needs_approval, AttemptRecord, MemberState, Mismatch, StageGate, Wait};
use crate::config::hooks::Moment;
use crate::config::repo::GatePolicy;
use crate::model::{DigestOver, GateId, PrNumber};
use crate::plan::changeset::{ChangeSet, ChangeSetError};
use crate::plan::engine::{change_set_of, MemberOutcome};
use std::time::Duration;

/// What the machine knows of the stage.
#[derive(Debug, Clone)]
pub(crate) struct StageSpec<'a> {
    pub(crate) pr: PrNumber,
    pub(crate) stage: &'a str,
    /// The stage's waves on the merge commit, in order.
    pub(crate) waves: &'a [Vec<String>],
    /// Its gate and how long its wait may last, as the base sets them.
    pub(crate) gate: GatePolicy,
    pub(crate) timeout: Option<Duration>,
    /// Which members the stage's set digest binds (`[policy] digest_over`).
    pub(crate) digest_over: DigestOver,
    /// The stage has `after.plan` hooks: it is planned even when its gate
    /// asks for nothing, and the hooks are asked to run on its plans
    /// before the gate decides.
    pub(crate) after_plan_hooks: bool,
}

/// What the worker saw, answering the machine's last effect.
#[derive(Debug, Clone)]
pub(crate) enum StageObservation {
    /// The run reached the stage at `now` (unix ms).
    Reached { now: i64 },
    /// [`Effect::Preview`]'s members, planned on the merge commit wave by wave.
    Previewed { outcomes: Vec<MemberOutcome> },
    /// [`Effect::CountApprovals`]: who approved the digest there (empty
    /// while too few did), and the newest standing approval of another
    /// digest at the gate.
    Counted {
        by: Vec<String>,
        mismatch: Option<Mismatch>,
        now: i64,
    },
    /// [`Effect::Hooks`]: what the stage's `after.plan` hooks came to.
    Hooked(HooksResult),
}

/// A stage's gate, from reaching the stage to the gate's decision in this job.
#[derive(Debug)]
pub(crate) struct StageMachine<'a> {
    spec: StageSpec<'a>,
    now: i64,
    previewed: Vec<MemberOutcome>,
    /// Whether the gate asks for the stage's own approval in this job.
    asks: bool,
}

impl<'a> StageMachine<'a> {
    pub(crate) fn new(spec: StageSpec<'a>) -> Self {
        StageMachine {
            spec,
            now: 0,
            previewed: Vec::new(),
            asks: false,
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
                let approved = record
                    .stages
                    .get(stage)
                    .is_some_and(|g| !g.approved_by.is_empty());
                self.asks = self.spec.gate != GatePolicy::Never && !approved;
                if !self.asks && !self.spec.after_plan_hooks {
                    return Ok(vec![Effect::Done(Step::Continue)]);
                }
                let pending = self
                    .spec
                    .waves
                    .iter()
                    .map(|wave| {
                        wave.iter()
                            .filter(|m| {
                                let state = record.state(m);
                                !state.is_applied() && state != MemberState::Unaffected
                            })
                            .cloned()
                            .collect()
                    })
                    .collect();
                vec![Effect::Preview(pending)]
            }
            StageObservation::Previewed { outcomes } => self.previewed(record, outcomes)?,
            StageObservation::Hooked(result) => {
                let members: Vec<String> =
                    self.previewed.iter().map(|o| o.member.clone()).collect();
                match hooks::settle(record, Moment::AfterPlan, &members, result, Step::Continue) {
                    Some(step) => vec![Effect::Done(step)],
                    None => self.decide(record)?,
                }
            }
            StageObservation::Counted { by, mismatch, now } => {
                self.counted(record, by, mismatch, now)
            }
        })
    }

    /// The stage's plans: one that failed fails the stage (its set cannot
    /// be shown whole); otherwise the stage goes on, or opens its gate on
    /// their set (afresh when the set moved or the gate expired) and asks
    /// who approved it.
    fn previewed(
        &mut self,
        record: &mut AttemptRecord,
        outcomes: Vec<MemberOutcome>,
    ) -> Result<Vec<Effect>, ChangeSetError> {
        let failed: Vec<&MemberOutcome> = outcomes.iter().filter(|o| o.plan.is_none()).collect();
        if !failed.is_empty() {
            for outcome in failed {
                let error = outcome.error.clone().unwrap_or_else(|| "no plan".into());
                record.set(
                    &outcome.member,
                    MemberState::Failed {
                        error: format!("planning on the merge commit failed: {error}"),
                    },
                );
            }
            return Ok(vec![Effect::Done(Step::Stop)]);
        }
        self.previewed = outcomes;
        if self.spec.after_plan_hooks {
            let members = self.previewed.iter().map(|o| o.member.clone()).collect();
            return Ok(vec![Effect::Hooks {
                moment: Moment::AfterPlan,
                members,
            }]);
        }
        self.decide(record)
    }

    /// Whether the stage's plans need its own approval; if so, opens its
    /// gate on their set (afresh when the set moved or the gate expired)
    /// and asks who approved it.
    fn decide(&mut self, record: &mut AttemptRecord) -> Result<Vec<Effect>, ChangeSetError> {
        if !self.asks {
            return Ok(vec![Effect::Done(Step::Continue)]);
        }
        let stage = self.spec.stage;
        let outcomes = &self.previewed;
        let destructive = outcomes
            .iter()
            .any(|o| o.plan.as_ref().is_some_and(|p| p.destructive));
        let nothing_changes = outcomes
            .iter()
            .all(|o| o.plan.as_ref().is_some_and(|p| p.is_empty()));
        if !stage_needs_approval(self.spec.gate, destructive, nothing_changes) {
            if nothing_changes && self.spec.gate != GatePolicy::Never {
                record.gates_skipped.insert(stage.to_owned());
            }
            return Ok(vec![Effect::Done(Step::Continue)]);
        }
        let set = change_set_of(outcomes, self.spec.digest_over)?;
        let known = record.stages.get(stage);
        if known.is_none_or(|g| g.change_set.digest != set.digest || g.expired) {
            let lasts = |t: Duration| i64::try_from(t.as_millis()).unwrap_or(i64::MAX);
            let expires_at = self.spec.timeout.map(|t| self.now.saturating_add(lasts(t)));
            record
                .stages
                .insert(stage.to_owned(), self.opened(set, expires_at));
        }
        let gate = &record.stages[stage];
        Ok(vec![Effect::CountApprovals {
            gate: gate.gate.clone(),
            digest: gate.change_set.digest.clone(),
            since: gate.opened_at,
        }])
    }

    fn opened(&self, change_set: ChangeSet, expires_at: Option<i64>) -> StageGate {
        StageGate {
            gate: GateId::of(self.spec.pr, Some(self.spec.stage)),
            change_set,
            approved_by: Vec::new(),
            mismatch: None,
            opened_at: self.now,
            expires_at,
            expired: false,
        }
    }

    /// Approved: the stage goes on. Past its timeout: its members fail, and
    /// `/retry` opens a fresh gate. Else the stage waits at its gate.
    fn counted(
        &mut self,
        record: &mut AttemptRecord,
        by: Vec<String>,
        mismatch: Option<Mismatch>,
        now: i64,
    ) -> Vec<Effect> {
        let stage = self.spec.stage;
        let gate = record
            .stages
            .get_mut(stage)
            .expect("opened before counting");
        gate.mismatch = mismatch.filter(|_| by.is_empty());
        if !by.is_empty() {
            gate.approved_by = by;
            return vec![Effect::Done(Step::Continue)];
        }
        let (gate_id, digest) = (gate.gate.clone(), gate.change_set.digest.clone());
        if let Some(at) = gate.expires_at.filter(|at| now >= *at) {
            gate.expired = true;
            for outcome in &self.previewed {
                record.set(
                    &outcome.member,
                    MemberState::Failed {
                        error: format!(
                            "stage {stage}'s gate expired at {} with no `/approve {stage}` (its `timeout` on the base); `/retry` opens a fresh gate",
                            crate::model::utc(at)
                        ),
                    },
                );
            }
            return vec![Effect::Done(Step::Stop)];
        }
        for outcome in &self.previewed {
            record.set(
                &outcome.member,
                MemberState::Waiting {
                    reason: format!("stage {stage} waits for `/approve {stage}`"),
                },
            );
        }
        record.wait = Some(Wait::Stage {
            stage: stage.to_owned(),
            gate: gate_id,
            digest,
        });
        vec![Effect::Done(Step::Stop)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::tests::{outcome, plan};
    use crate::plan::planfile::MemberPlan;

    const NOW: i64 = 1_000_000;

    fn waves() -> Vec<Vec<String>> {
        vec![vec!["network@prod".into()], vec!["app@prod".into()]]
    }

    fn machine(waves: &[Vec<String>], gate: GatePolicy) -> StageMachine<'_> {
        StageMachine::new(StageSpec {
            pr: PrNumber(7),
            stage: "prod",
            waves,
            gate,
            timeout: Some(Duration::from_secs(3600)),
            digest_over: DigestOver::All,
            after_plan_hooks: false,
        })
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

    fn counted(by: &[&str], mismatch: Option<Mismatch>, now: i64) -> StageObservation {
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
        let set = preview(&mut m, &mut record, &[&plan("app@prod", "a")]);
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
            ("pr-7-prod", NOW, Some(NOW + 3_600_000))
        );
        assert_eq!(
            asked,
            [Effect::CountApprovals {
                gate: "pr-7-prod".parse().unwrap(),
                digest: gate.change_set.digest.clone(),
                since: NOW
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

        let later = StageObservation::Reached { now: NOW + 10 };
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
            NOW + 10,
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
            "app@prod",
            br#"{"summary": "", "entries": [{"address": "x", "action": "delete"}]}"#,
        )
        .unwrap();
        let mut m = machine(&waves, GatePolicy::OnDestructive);
        assert!(matches!(
            preview(&mut m, &mut record, &[&gone])[..],
            [Effect::CountApprovals { .. }]
        ));

        let quiet = MemberPlan::parse(
            "app@prod",
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
    fn an_unapproved_gate_past_its_timeout_fails_the_stage_and_a_failed_plan_stops_it() {
        let waves = waves();
        let mut record = AttemptRecord::default();
        let mut m = machine(&waves, GatePolicy::Always);
        preview(&mut m, &mut record, &[&plan("app@prod", "a")]);
        let late = counted(&[], None, NOW + 3_600_000);
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
}
