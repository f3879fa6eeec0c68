//! What a run makes of its hooks, decided without running anything: the
//! digest a hook's own gate binds, the verdict on one call (passed, failed,
//! waiting for an approval of its failure, or holding the stage on another
//! gate), and what a moment's result does to the run's record (members
//! failed or waiting, the wait, whether the stage goes on).
//!
//! The worker runs the commands (`worker::handlers::hooks`) and asks the
//! ledger who approved; everything it then does to the run comes from here.

use super::effect::Step;
use super::{AttemptRecord, MemberState, Wait};
use crate::config::hooks::{Hook, Moment, OnFailure};
use crate::model::canonical::digest_value;
use crate::model::{Digest, GateId, MemberId, PrNumber};
pub(crate) use crate::plan::hook_run::{HoldRequest, HookCall, HookRan, HOLD_EXIT};
use crate::plan::tail::OutputTail;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A member a hook is told of, with the digest of its latest plan (its
/// approved one while nothing was planned yet in the job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HookMember {
    pub(crate) member: MemberId,
    pub(crate) plan_digest: Option<Digest>,
}

/// What one call of a hook comes to, before the ledger is asked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Passed,
    Failed(String),
    /// It failed, and its failure waits for an approval of `digest` at its gate.
    Approvable {
        gate: GateId,
        digest: Digest,
    },
    /// It holds the stage on another gate until `digest` is approved there.
    Hold {
        gate: GateId,
        request: HoldRequest,
    },
}

/// The digest an approval of a hook's failure binds: the hook, where it
/// ran and the plans it was shown. The same failure on the same plans is
/// the same digest in a later job, so an approval of it stands.
pub(crate) fn hook_digest(call: &HookCall, members: &[HookMember]) -> Digest {
    digest_value(&json!({
        "hook": call.name,
        "moment": call.moment.as_str(),
        "stage": call.stage,
        "member": call.member,
        "members": members,
    }))
}

/// The verdict on one call. `hold_approved`: the hold this call made
/// before, now approved (it ran told so, in `WAVEGATE_HOLD_APPROVED`).
pub(crate) fn judge(
    pr: PrNumber,
    hook: &Hook,
    call: &HookCall,
    members: &[HookMember],
    ran: &HookRan,
    hold_approved: Option<&(GateId, Digest)>,
) -> Verdict {
    let label = call.label();
    if ran.exit == Some(0) {
        return Verdict::Passed;
    }
    if ran.exit == Some(HOLD_EXIT) {
        if let Some(why) = hook.moment.may_hold() {
            return Verdict::Failed(format!(
                "{label} exited {HOLD_EXIT} to hold the stage, which it cannot at {}: {why}",
                hook.moment
            ));
        }
        return match &ran.hold {
            Some(Ok(request)) => {
                let gate = GateId::Hook(pr, request.gate.clone());
                if hold_approved.is_some_and(|(g, d)| *g == gate && *d == request.digest) {
                    Verdict::Failed(format!(
                        "{label} held the stage again on `{gate}` at `{}`, which is approved; it must pass once `WAVEGATE_HOLD_APPROVED` says so",
                        request.digest
                    ))
                } else {
                    Verdict::Hold {
                        gate,
                        request: request.clone(),
                    }
                }
            }
            Some(Err(why)) => Verdict::Failed(format!(
                "{label} exited {HOLD_EXIT} to hold the stage, but its hold file {why}; write {{\"gate\": \"<name>\", \"digest\": \"sha256:<64 hex>\", \"members\": [..]}} to the file named in WAVEGATE_HOLD"
            )),
            None => Verdict::Failed(format!(
                "{label} exited {HOLD_EXIT} to hold the stage but wrote nothing to the file named in WAVEGATE_HOLD; write {{\"gate\", \"digest\", \"members\"}} there, or exit with another status to fail"
            )),
        };
    }
    let mut why = format!("{label} failed: {}", ran.described);
    if let Some(tail) = &ran.printed {
        why.push_str(&format!("; last output:\n{}", tail.text));
    }
    match hook.on_failure {
        OnFailure::Fail => Verdict::Failed(why),
        OnFailure::Approve => Verdict::Approvable {
            gate: GateId::Hook(pr, hook.name.clone()),
            digest: hook_digest(call, members),
        },
    }
}

/// What became of one call, as the record and the report keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub(crate) enum HookState {
    Passed,
    Failed {
        why: String,
    },
    /// It waits at `gate` for an approval of `digest`: its own failure's
    /// (`hold: false`) or another gate's it asked for.
    Held {
        gate: GateId,
        digest: Digest,
        #[serde(default)]
        hold: bool,
    },
    /// Its failure was approved, or its hold released.
    Approved {
        gate: GateId,
        digest: Digest,
        by: Vec<String>,
    },
}

impl HookState {
    /// The word the ledger fact and the report use.
    pub(crate) fn word(&self) -> &'static str {
        match self {
            HookState::Passed => "passed",
            HookState::Failed { .. } => "failed",
            HookState::Held { .. } => "held",
            HookState::Approved { .. } => "approved",
        }
    }
}

/// The latest call of one hook in the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HookRecord {
    #[serde(flatten)]
    pub(crate) call: HookCall,
    pub(crate) state: HookState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) printed: Option<OutputTail>,
}

/// What a moment's hooks came to, all of them together: the first one that
/// did not pass (or was not approved) decides, and the ones after it did not run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HooksResult {
    Passed,
    Failed(String),
    Waits(Wait),
}

/// Keeps a call's outcome, replacing the call's earlier one.
pub(crate) fn remember(record: &mut AttemptRecord, hook: HookRecord) {
    record.hooks.retain(|h| h.call != hook.call);
    record.hooks.push(hook);
}

/// The hold this call made before, if the record still has it.
pub(crate) fn earlier_hold(record: &AttemptRecord, call: &HookCall) -> Option<(GateId, Digest)> {
    record
        .hooks
        .iter()
        .find(|h| h.call == *call)
        .and_then(|h| match &h.state {
            HookState::Held {
                gate,
                digest,
                hold: true,
            } => Some((gate.clone(), digest.clone())),
            _ => None,
        })
}

/// What the result of `moment`'s hooks does to `members` of the stage (the
/// ones not yet applied are changed): `None` when the stage goes on. At
/// `after.gate`, `gate_step` is what the gate decided: a failing hook stops
/// a stage that would have gone on and leaves a waiting one waiting. At
/// `after.apply` the members have applied: the failure is the run's.
pub(crate) fn settle(
    record: &mut AttemptRecord,
    moment: Moment,
    members: &[MemberId],
    result: HooksResult,
    gate_step: Step,
) -> Option<Step> {
    let open: Vec<&MemberId> = members
        .iter()
        .filter(|m| {
            let state = record.state(m);
            !state.is_applied() && state != MemberState::Unaffected
        })
        .collect();
    match result {
        HooksResult::Passed => None,
        HooksResult::Failed(why) => {
            if moment == Moment::AfterGate && gate_step == Step::Stop {
                return Some(Step::Stop);
            }
            if moment != Moment::AfterApply {
                for member in open {
                    record.set(member, MemberState::Failed { error: why.clone() });
                }
            }
            Some(Step::Stop)
        }
        HooksResult::Waits(wait) => {
            let reason = match &wait {
                Wait::Hook {
                    hook,
                    hold: true,
                    gate,
                    ..
                } => {
                    format!("the {moment} hook `{hook}` holds the stage on `{gate}`")
                }
                Wait::Hook { hook, .. } => {
                    format!("the {moment} hook `{hook}` failed; its failure waits for an approval")
                }
                _ => format!("a {moment} hook waits"),
            };
            for member in open {
                record.set(
                    member,
                    MemberState::Waiting {
                        reason: reason.clone(),
                    },
                );
            }
            record.wait = Some(wait);
            Some(Step::Stop)
        }
    }
}

/// The hook failures that stand against the run by themselves (`after.apply`
/// hooks': every member they ran after had applied).
pub(crate) fn failures_after_apply(record: &AttemptRecord) -> impl Iterator<Item = &HookRecord> {
    record.hooks.iter().filter(|h| {
        h.call.moment == Moment::AfterApply && matches!(h.state, HookState::Failed { .. })
    })
}

/// The first of them.
pub(crate) fn failed_after_apply(record: &AttemptRecord) -> Option<&HookRecord> {
    failures_after_apply(record).next()
}

/// The JSON a hook finds in `WAVEGATE_HOLD_APPROVED` once its hold was approved.
pub(crate) fn hold_approved_json(gate: &GateId, digest: &Digest, by: &[String]) -> Value {
    json!({ "gate": gate.to_string(), "digest": digest, "approved_by": by })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::hook_run::read_hold;
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn a_hook(moment: Moment, on_failure: OnFailure) -> Hook {
        Hook {
            name: "guard".into(),
            moment,
            command: vec!["./guard".into()],
            on_failure,
            per_member: false,
            timeout: Duration::from_secs(60),
        }
    }

    fn call(moment: Moment) -> HookCall {
        HookCall {
            stage: "prod".into(),
            moment,
            name: "guard".into(),
            member: None,
        }
    }

    fn shown() -> Vec<HookMember> {
        vec![HookMember {
            member: "app@prod".into(),
            plan_digest: Some(Digest::repeated('a')),
        }]
    }

    fn exited(code: i32) -> HookRan {
        HookRan {
            exit: Some(code),
            described: format!("the hook exited with status {code}"),
            hold: None,
            printed: OutputTail::of("checking\nno change window now\n"),
        }
    }

    fn judged(moment: Moment, on_failure: OnFailure, ran: &HookRan) -> Verdict {
        let hook = a_hook(moment, on_failure);
        judge(PrNumber(7), &hook, &call(moment), &shown(), ran, None)
    }

    #[test]
    fn a_hook_that_exits_zero_passes_and_one_that_fails_says_which_and_what_it_printed() {
        let moment = Moment::BeforeApply;
        assert_eq!(judged(moment, OnFailure::Fail, &exited(0)), Verdict::Passed);
        let Verdict::Failed(why) = judged(moment, OnFailure::Fail, &exited(1)) else {
            panic!("a failure fails");
        };
        assert_eq!(
            why,
            "the before.apply hook `guard` failed: the hook exited with status 1; last output:\nchecking\nno change window now"
        );
    }

    #[test]
    fn an_approvable_failure_waits_at_the_hooks_gate_for_a_digest_of_exactly_what_it_was_shown() {
        let moment = Moment::AfterPlan;
        let Verdict::Approvable { gate, digest } = judged(moment, OnFailure::Approve, &exited(2))
        else {
            panic!("an approvable failure");
        };
        assert_eq!(gate.to_string(), "pr-7-hook-guard");
        assert_eq!(
            digest,
            hook_digest(&call(moment), &shown()),
            "the same failure, the same digest"
        );
        let mut moved = shown();
        moved[0].plan_digest = Some(Digest::repeated('b'));
        assert_ne!(
            digest,
            hook_digest(&call(moment), &moved),
            "another plan, another digest"
        );
        let mut elsewhere = call(moment);
        elsewhere.stage = "dev".into();
        assert_ne!(
            digest,
            hook_digest(&elsewhere, &shown()),
            "another stage, another digest"
        );
    }

    #[test]
    fn exit_three_holds_on_the_gate_the_hold_file_names_or_fails_saying_what_is_wrong() {
        let request = HoldRequest {
            gate: "split-queues".into(),
            digest: Digest::repeated('c'),
            members: vec!["app@prod".into()],
        };
        let held = HookRan {
            hold: Some(Ok(request.clone())),
            ..exited(HOLD_EXIT)
        };
        let gate = GateId::Hook(PrNumber(7), "split-queues".into());
        assert_eq!(
            judged(Moment::BeforePlan, OnFailure::Fail, &held),
            Verdict::Hold {
                gate: gate.clone(),
                request: request.clone()
            }
        );
        // Once that digest was approved, holding on it again is a failure.
        let hook = a_hook(Moment::BeforePlan, OnFailure::Fail);
        let approved = (gate, request.digest.clone());
        let again = judge(
            PrNumber(7),
            &hook,
            &call(Moment::BeforePlan),
            &shown(),
            &held,
            Some(&approved),
        );
        assert!(matches!(again, Verdict::Failed(why) if why.contains("which is approved")));
        // Where nothing is left to hold, exit 3 is a failure.
        let Verdict::Failed(why) = judged(Moment::AfterApply, OnFailure::Fail, &held) else {
            panic!("no hold after the apply");
        };
        assert!(why.contains("nothing is left to hold"), "{why}");
        // A hold file that is missing or does not read says so.
        let missing = judged(Moment::BeforePlan, OnFailure::Fail, &exited(HOLD_EXIT));
        assert!(
            matches!(missing, Verdict::Failed(why) if why.contains("wrote nothing to the file named in WAVEGATE_HOLD"))
        );
        for (text, expected) in [
            ("{", "does not read"),
            (
                r#"{"gate": "Split Queues", "digest": "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}"#,
                "names a gate wavegate cannot use",
            ),
            (
                r#"{"gate": "q", "digest": "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", "members": ["app"]}"#,
                "lists `app`, which is not a member",
            ),
            (r#"{"gate": "q", "digest": "abc"}"#, "does not read"),
        ] {
            let e = read_hold(text).unwrap_err();
            assert!(e.contains(expected), "{text}: {e}");
        }
        assert_eq!(
            read_hold(
                r#"{"gate": "split-queues", "digest": "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", "members": ["app@prod"]}"#
            ),
            Ok(request)
        );
    }

    fn record_with(members: &[(&str, MemberState)]) -> AttemptRecord {
        let mut record = AttemptRecord::default();
        for (m, s) in members {
            record.set(&(*m).into(), s.clone());
        }
        record
    }

    fn applied() -> MemberState {
        MemberState::Applied {
            plan_digest: Digest::repeated('a'),
            outputs: Default::default(),
            note: None,
        }
    }

    #[test]
    fn a_failure_before_the_apply_fails_the_members_not_yet_applied_and_stops_the_stage() {
        let members: [MemberId; 2] = ["app@prod".into(), "dns@prod".into()];
        for moment in [Moment::BeforePlan, Moment::AfterPlan, Moment::BeforeApply] {
            let mut record = record_with(&[("app@prod", applied())]);
            let step = settle(
                &mut record,
                moment,
                &members,
                HooksResult::Failed("the hook failed".into()),
                Step::Continue,
            );
            assert_eq!(step, Some(Step::Stop), "{moment}");
            assert!(
                record.state("app@prod").is_applied(),
                "{moment}: applied stays applied"
            );
            assert_eq!(
                record.state("dns@prod"),
                MemberState::Failed {
                    error: "the hook failed".into()
                }
            );
        }
        let mut record = AttemptRecord::default();
        let passed = settle(
            &mut record,
            Moment::BeforePlan,
            &members,
            HooksResult::Passed,
            Step::Continue,
        );
        assert_eq!(passed, None, "a stage whose hooks passed goes on");
    }

    #[test]
    fn a_failing_after_gate_hook_stops_a_stage_that_would_go_on_and_leaves_a_waiting_one_waiting() {
        let members: [MemberId; 1] = ["app@prod".into()];
        let failed = || HooksResult::Failed("the after.gate hook failed".into());
        let mut record = AttemptRecord::default();
        let waiting = MemberState::Waiting {
            reason: "stage prod waits".into(),
        };
        record.set(&"app@prod".into(), waiting.clone());
        let step = settle(
            &mut record,
            Moment::AfterGate,
            &members,
            failed(),
            Step::Stop,
        );
        assert_eq!(step, Some(Step::Stop));
        assert_eq!(record.state("app@prod"), waiting, "still waiting");

        let mut record = AttemptRecord::default();
        let step = settle(
            &mut record,
            Moment::AfterGate,
            &members,
            failed(),
            Step::Continue,
        );
        assert_eq!(step, Some(Step::Stop));
        assert!(matches!(
            record.state("app@prod"),
            MemberState::Failed { .. }
        ));
    }

    #[test]
    fn a_failing_after_apply_hook_fails_the_run_and_retry_forgets_it() {
        let members: [MemberId; 1] = ["app@prod".into()];
        let mut record = record_with(&[("app@prod", applied())]);
        let why = "the after.apply hook `smoke` failed".to_owned();
        let step = settle(
            &mut record,
            Moment::AfterApply,
            &members,
            HooksResult::Failed(why.clone()),
            Step::Continue,
        );
        assert_eq!(step, Some(Step::Stop));
        assert!(record.state("app@prod").is_applied());
        remember(
            &mut record,
            HookRecord {
                call: call(Moment::AfterApply),
                state: HookState::Failed { why },
                printed: None,
            },
        );
        let all: BTreeSet<MemberId> = members.iter().cloned().collect();
        assert_eq!(
            super::super::settled_status(&record, &all),
            super::super::RunStatus::Failed
        );
        record.reset_for_retry();
        assert_eq!(
            super::super::settled_status(&record, &all),
            super::super::RunStatus::Applied
        );
    }

    #[test]
    fn a_hook_that_waits_makes_its_members_wait_on_its_gate_and_an_earlier_hold_is_found_again() {
        let members: [MemberId; 1] = ["app@prod".into()];
        let gate = GateId::Hook(PrNumber(7), "split-queues".into());
        let wait = Wait::Hook {
            stage: "prod".into(),
            moment: Moment::BeforePlan,
            hook: "migrate".into(),
            gate: gate.clone(),
            digest: Digest::repeated('c'),
            members: members.to_vec(),
            hold: true,
        };
        let mut record = AttemptRecord::default();
        let step = settle(
            &mut record,
            Moment::BeforePlan,
            &members,
            HooksResult::Waits(wait.clone()),
            Step::Continue,
        );
        assert_eq!(step, Some(Step::Stop));
        assert_eq!(record.wait, Some(wait));
        assert_eq!(
            record.state("app@prod"),
            MemberState::Waiting {
                reason:
                    "the before.plan hook `migrate` holds the stage on `pr-7-hook-split-queues`"
                        .into()
            }
        );
        let mut migrate = call(Moment::BeforePlan);
        migrate.name = "migrate".into();
        assert_eq!(earlier_hold(&record, &migrate), None);
        let held = HookState::Held {
            gate: gate.clone(),
            digest: Digest::repeated('c'),
            hold: true,
        };
        remember(
            &mut record,
            HookRecord {
                call: migrate.clone(),
                state: held,
                printed: None,
            },
        );
        assert_eq!(
            earlier_hold(&record, &migrate),
            Some((gate, Digest::repeated('c')))
        );
        remember(
            &mut record,
            HookRecord {
                call: migrate.clone(),
                state: HookState::Passed,
                printed: None,
            },
        );
        assert_eq!(record.hooks.len(), 1, "one record per call");
        assert_eq!(earlier_hold(&record, &migrate), None);
    }
}
