//! Runs a stage's hooks at one moment for the apply machine: each call in
//! the sandbox through the workbench, who approved a hook's failure or
//! hold asked of the ledger, each outcome kept in the record and appended
//! as a `hook` fact. What the outcome does to the run is
//! `crate::apply::hooks`'s to decide.

use super::{run_gate_approvers, Drive};
use crate::apply::hooks::{
    self, hold_approved_json, HookCall, HookMember, HookRecord, HookState, HooksResult, Verdict,
};
use crate::apply::{AttemptRecord, Wait};
use crate::config::hooks::Moment;
use crate::gate::ledger::{FactData, FactKind};
use crate::model::{Digest, GateId, MemberId, StageName, UnixMs};
use crate::plan::engine::{HookCommand, Workbench};
use crate::report::apply::line_to_copy;
use crate::store::Store;
use crate::worker::ctx::Forge;
use crate::worker::handlers::gate::append_own_fact;
use anyhow::Result;
use serde_json::{json, Value};

/// What a stage's gate decided, as its `after.gate` hooks are told.
pub(super) struct GateDecision {
    pub(super) status: &'static str,
    /// The wave (1-based) the gate holds, for a stage approved wave by wave.
    pub(super) wave: Option<u32>,
    pub(super) gate: Option<GateId>,
    pub(super) digest: Option<Digest>,
    pub(super) waiting_since: Option<UnixMs>,
    pub(super) approve: Option<String>,
    pub(super) json: Value,
}

impl GateDecision {
    /// What stage `stage`'s gate decided (or its `wave`'s, for a stage
    /// approved wave by wave; the stage machine went on with `went_on`),
    /// read from the record it left.
    pub(super) fn of(
        record: &AttemptRecord,
        (stage, wave): (&str, Option<u32>),
        went_on: bool,
    ) -> Self {
        let key = crate::model::stage_gate_key(stage, wave);
        let gate = record.stages.get(&key);
        let waiting = match &record.wait {
            Some(wait @ Wait::Stage { gate, .. })
                if gate.stage_gate_key().as_ref() == Some(&key) =>
            {
                Some(wait)
            }
            _ => None,
        };
        let status = match (went_on, gate) {
            (true, Some(g)) if !g.approved_by.is_empty() => "approved",
            (true, _) => "not-required",
            (false, _) if waiting.is_some() => "waiting",
            (false, _) => "refused",
        };
        let approve = waiting.and_then(line_to_copy);
        let gate_id = gate.map(|g| g.gate.clone());
        let digest = gate.map(|g| g.change_set.digest.clone());
        let waiting_since = waiting.and(gate).map(|g| g.opened_at);
        let json = json!({
            "status": status,
            "stage": stage,
            "wave": wave,
            "gate": gate_id.as_ref().map(ToString::to_string),
            "digest": digest,
            "approved_by": gate.map(|g| g.approved_by.clone()).unwrap_or_default(),
            "pending": waiting.map(|wait| json!({
                "gate": gate_id.as_ref().map(ToString::to_string),
                "digest": digest,
                "members": record.members_of_wait(wait).unwrap_or_default(),
                "since": waiting_since,
            })),
            "mismatch": gate
                .and_then(|g| g.mismatch.as_ref())
                .map(|m| json!({"approved": m.digest, "by": m.by})),
            "approve": approve,
        });
        GateDecision {
            status,
            wave,
            gate: gate_id,
            digest,
            waiting_since,
            approve,
            json,
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![("WAVEGATE_GATE_STATUS".to_owned(), self.status.to_owned())];
        let mut put = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                env.push((name.to_owned(), value));
            }
        };
        put("WAVEGATE_GATE", self.gate.as_ref().map(ToString::to_string));
        put("WAVEGATE_GATE_WAVE", self.wave.map(|w| w.to_string()));
        put(
            "WAVEGATE_GATE_DIGEST",
            self.digest.as_ref().map(ToString::to_string),
        );
        put(
            "WAVEGATE_GATE_WAITING_SINCE",
            self.waiting_since.map(|at| at.to_string()),
        );
        put("WAVEGATE_GATE_APPROVE", self.approve.clone());
        env
    }
}

/// Runs `stage`'s hooks at `moment` for `members`, the top level's
/// first, until one neither passes nor is approved: that one's result
/// is the moment's. `decision`: the gate's, for `after.gate`.
pub(super) async fn run_hooks(
    (store, forge): (&Store, Forge<'_>),
    (drive, bench): (&mut Drive, &Workbench),
    (stage, moment): (&str, Moment),
    (members, decision): (&[MemberId], Option<&GateDecision>),
) -> Result<HooksResult> {
    let hooks = drive.rules.hooks(stage, moment);
    if hooks.is_empty() || members.is_empty() {
        return Ok(HooksResult::Passed);
    }
    let listed: Vec<HookMember> = members
        .iter()
        .map(|m| HookMember {
            member: m.clone(),
            plan_digest: bench
                .outcome(m)
                .and_then(|o| o.plan.as_ref())
                .map(|p| p.plan_digest.clone())
                .or_else(|| drive.approved.member(m).and_then(|c| c.plan_digest.clone())),
        })
        .collect();
    let policy = drive.stage_policy(stage);
    let pr = drive.run.pr;
    for hook in &hooks {
        let call = |member: Option<&MemberId>| HookCall {
            stage: StageName::new(stage),
            moment,
            name: hook.name.clone(),
            member: member.cloned(),
        };
        let calls: Vec<(HookCall, Vec<HookMember>)> = if hook.per_member {
            listed
                .iter()
                .map(|m| (call(Some(&m.member)), vec![m.clone()]))
                .collect()
        } else {
            vec![(call(None), listed.clone())]
        };
        for (call, shown) in calls {
            let mut released = None;
            if let Some((gate, digest)) = hooks::earlier_hold(&drive.run.record, &call) {
                let by =
                    run_gate_approvers((store, forge), drive, (&gate, false), (&digest, &policy))
                        .await?;
                if !by.is_empty() {
                    released = Some((gate, digest, by));
                }
            }
            // A hold on a digest already approved in this run is
            // released at once: the hook runs again, told so.
            let (ran, verdict) = loop {
                let mut env = decision.map(GateDecision::env).unwrap_or_default();
                if let Some((gate, digest, by)) = &released {
                    let approved = hold_approved_json(gate, digest, by).to_string();
                    env.push(("WAVEGATE_HOLD_APPROVED".to_owned(), approved));
                }
                let members_json = serde_json::to_vec_pretty(&shown).expect("members serialise");
                let decision_json =
                    decision.map(|d| serde_json::to_vec_pretty(&d.json).expect("JSON serialises"));
                let ran = bench
                    .run_hook(HookCommand {
                        call: &call,
                        hook,
                        members_json,
                        decision: decision_json,
                        env,
                    })
                    .await;
                let hold = released.as_ref().map(|(g, d, _)| (g.clone(), d.clone()));
                let verdict = hooks::judge(pr, hook, &call, &shown, &ran, hold.as_ref());
                if let (Verdict::Hold { gate, request }, None) = (&verdict, &released) {
                    let asked = (&request.digest, &policy);
                    let by =
                        run_gate_approvers((store, forge), drive, (gate, false), asked).await?;
                    if !by.is_empty() {
                        released = Some((gate.clone(), request.digest.clone(), by));
                        continue;
                    }
                }
                break (ran, verdict);
            };
            let (state, result) = match verdict {
                Verdict::Passed => match released {
                    Some((gate, digest, by)) => (HookState::Approved { gate, digest, by }, None),
                    None => (HookState::Passed, None),
                },
                Verdict::Failed(why) => (
                    HookState::Failed { why: why.clone() },
                    Some(HooksResult::Failed(why)),
                ),
                Verdict::Approvable { gate, digest } => {
                    let by = run_gate_approvers(
                        (store, forge),
                        drive,
                        (&gate, false),
                        (&digest, &policy),
                    )
                    .await?;
                    if by.is_empty() {
                        let wait = hook_wait(&call, &gate, &digest, members, false);
                        let state = HookState::Held {
                            gate,
                            digest,
                            hold: false,
                        };
                        (state, Some(HooksResult::Waits(wait)))
                    } else {
                        (HookState::Approved { gate, digest, by }, None)
                    }
                }
                Verdict::Hold { gate, request } => {
                    let on: Vec<MemberId> = if request.members.is_empty() {
                        members.to_vec()
                    } else {
                        request.members.clone()
                    };
                    let wait = hook_wait(&call, &gate, &request.digest, &on, true);
                    let state = HookState::Held {
                        gate,
                        digest: request.digest,
                        hold: true,
                    };
                    (state, Some(HooksResult::Waits(wait)))
                }
            };
            tracing::info!(stage, %moment, hook = %call.name, member = ?call.member, outcome = state.word(), "hook ran");
            record_hook((store, forge), drive, (&call, &shown), &state).await?;
            hooks::remember(
                &mut drive.run.record,
                HookRecord {
                    call,
                    state,
                    printed: ran.printed,
                },
            );
            if let Some(result) = result {
                return Ok(result);
            }
        }
    }
    Ok(HooksResult::Passed)
}

/// Appends the `hook` fact of one call's outcome: at the gate it waits
/// at or was approved at, else at the hook's own gate, with the digest
/// of what it was shown.
async fn record_hook(
    (store, forge): (&Store, Forge<'_>),
    drive: &Drive,
    (call, shown): (&HookCall, &[HookMember]),
    state: &HookState,
) -> Result<()> {
    let (gate, digest) = match state {
        HookState::Held { gate, digest, .. } | HookState::Approved { gate, digest, .. } => {
            (gate.clone(), digest.clone())
        }
        HookState::Passed | HookState::Failed { .. } => (
            GateId::Hook(drive.run.pr, call.name.clone()),
            hooks::hook_digest(call, shown),
        ),
    };
    let mut data = FactData::in_run(drive.run.id, &drive.run.merge_sha);
    data.outcome = Some(state.word().to_owned());
    data.description = Some(format!("{} in stage {}", call.label(), call.stage));
    data.member = call.member.clone();
    if let HookState::Failed { why } = state {
        data.reason = Some(why.clone());
    }
    append_own_fact(store, forge, (gate, FactKind::Hook, &digest), data).await
}

fn hook_wait(
    call: &HookCall,
    gate: &GateId,
    digest: &Digest,
    members: &[MemberId],
    hold: bool,
) -> Wait {
    Wait::Hook {
        stage: call.stage.clone(),
        moment: call.moment,
        hook: call.name.clone(),
        gate: gate.clone(),
        digest: digest.clone(),
        members: members.to_vec(),
        hold,
    }
}
