//! What planning a member came to, and what an apply said: the outcomes
//! the plan engine produces and the apply rules and reports read. Plain
//! data with no process, git or sandbox behind it, so the pure machines
//! (`apply`) and the reports depend on this, never on the engine that runs
//! the commands.

use super::changeset::{ChangeSet, ChangeSetError, ChangeSetMember, MemberStatus};
use super::fanout::{Derivation, Skipped, WaveGroup};
use super::planfile::MemberPlan;
use super::preview::Preview;
use crate::model::{Digest, DigestOver, MemberId, StageName};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Where an input's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum InputSource {
    /// What the upstream applied earlier in this apply run.
    Applied,
    /// The upstream's plan in this change.
    Planned,
    /// The caller's `--outputs`, taken on trust.
    Seeded,
    /// The upstream's `outputs` command: what is deployed now.
    Deployed,
    /// What wavegate recorded when it last applied the upstream.
    Recorded,
    /// Nothing could say; passed to the plan as unknown.
    Unknown,
    /// An artifact a build in this change publishes when it applies
    /// (`build:<component>.<output>`): passed to the plan as unknown, and
    /// bound by the build's own plan, never by this one.
    Build,
    /// An output of a mate the member plans with in one group call: the
    /// group computes it. Known when the mate's plan knows it; never an
    /// unknown input, never a reason to hold the member back.
    Group,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResolvedInput {
    /// `component.output`.
    pub(crate) reference: String,
    pub(crate) upstream: String,
    pub(crate) source: InputSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<Value>,
    /// For an unknown input: why no value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<String>,
    /// The upstream marks this output secret: reports show no value.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) sensitive: bool,
}

/// What became of one member.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberOutcome {
    pub(crate) member: MemberId,
    pub(crate) component: String,
    pub(crate) stage: StageName,
    pub(crate) status: MemberStatus,
    pub(crate) plan: Option<MemberPlan>,
    pub(crate) error: Option<String>,
    pub(crate) blocked_by: Option<String>,
    pub(crate) inputs: BTreeMap<String, ResolvedInput>,
    /// The command's output, redacted and capped.
    pub(crate) output: String,
    /// What its discovery found, for a unit a discovery found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) discovered: Option<Value>,
    /// The forge's page of the CI run its plan ran in (`executor = "actions"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ran_on: Option<String>,
}

impl MemberOutcome {
    /// The names of its inputs that `keep` keeps.
    fn inputs_where(&self, keep: impl Fn(&ResolvedInput) -> bool) -> Vec<String> {
        self.inputs
            .iter()
            .filter(|(_, input)| keep(input))
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub(crate) fn unknown_inputs(&self) -> Vec<String> {
        self.inputs_where(|i| i.source == InputSource::Unknown)
    }

    /// The inputs a build in the change publishes (`build:` inputs whose
    /// build is planned here and not yet applied).
    pub(crate) fn build_inputs(&self) -> Vec<String> {
        self.inputs_where(|i| i.source == InputSource::Build)
    }

    /// Its reads of group-mates whose plans did not know the value: the
    /// group's apply computes them, so they may move.
    pub(crate) fn group_inputs(&self) -> Vec<String> {
        self.inputs_where(|i| i.source == InputSource::Group && i.value.is_none())
    }

    /// What the member's command is told it cannot know: the unknown
    /// inputs, the build inputs and the reads of its group-mates that no
    /// plan of the mate knew (all of them, before the group's plan call).
    pub(crate) fn unknown_to_the_plan(&self) -> Vec<String> {
        self.inputs_where(|i| {
            i.value.is_none()
                && matches!(
                    i.source,
                    InputSource::Unknown | InputSource::Build | InputSource::Group
                )
        })
    }

    pub(crate) fn known_inputs(&self) -> Map<String, Value> {
        self.inputs
            .iter()
            .filter_map(|(n, i)| i.value.clone().map(|v| (n.clone(), v)))
            .collect()
    }
}

/// A planned change.
#[derive(Debug, Clone)]
pub struct PlannedChange {
    pub(crate) base: String,
    pub(crate) head: String,
    pub(crate) derivation: Derivation,
    /// In wave order.
    pub members: Vec<MemberOutcome>,
    /// Components not running (unaffected, not in stage) and members blocked.
    pub(crate) skipped: Vec<Skipped>,
    /// Members whose outputs were seeded by the caller and read by some plan.
    pub(crate) seeded: Vec<String>,
    /// Things worth telling the reader that are not a member's own status.
    pub(crate) notes: Vec<String>,
    pub(crate) change_set: ChangeSet,
    /// The commands ran without a sandbox (`WAVEGATE_SANDBOX=none`).
    pub(crate) unsandboxed: bool,
    /// What happens after merge, as the base decides it.
    pub(crate) preview: Preview,
}

impl PlannedChange {
    pub fn any_failed(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.status == MemberStatus::PlanFailed)
            || self.change_set.costs.iter().any(|c| c.error.is_some())
    }

    /// The fan-out in one line: `fan-out: 3 selected, 1 unaffected, 0
    /// indeterminate`.
    pub(crate) fn fan_out_line(&self) -> String {
        let unaffected = self
            .skipped
            .iter()
            .filter(|s| s.reason == super::fanout::SkipReason::Unaffected)
            .count();
        format!(
            "fan-out: {} selected, {unaffected} unaffected, {} indeterminate",
            self.derivation.selected.len(),
            self.derivation.indeterminate.len()
        )
    }

    /// The outcomes of `group`'s members that ran, in the group's order.
    pub(crate) fn group_outcomes<'a>(
        &'a self,
        group: &'a WaveGroup,
    ) -> impl Iterator<Item = &'a MemberOutcome> + 'a {
        group
            .members
            .iter()
            .filter_map(|m| self.members.iter().find(|o| &o.member == m))
    }

    /// The digest `group`'s members' plans bind; none when the group's call
    /// did not plan them.
    pub(crate) fn group_digest<'a>(&'a self, group: &'a WaveGroup) -> Option<&'a Digest> {
        self.group_outcomes(group)
            .find_map(|o| Some(&o.plan.as_ref()?.group.as_ref()?.digest))
    }
}

/// The change set binding these members' outcomes.
pub(crate) fn change_set_of(
    members: &[MemberOutcome],
    over: DigestOver,
) -> Result<ChangeSet, ChangeSetError> {
    ChangeSet::binding(
        members
            .iter()
            .map(|m| ChangeSetMember {
                member: m.member.clone(),
                status: m.status,
                plan_digest: m.plan.as_ref().map(|p| p.plan_digest.clone()),
                unknown_inputs: m.unknown_inputs(),
                build_inputs: m.build_inputs(),
                group_inputs: m.group_inputs(),
                inputs: m.known_inputs(),
                discovered: m.discovered.clone(),
                plan: m.plan.clone(),
                ran_on: m.ran_on.clone(),
            })
            .collect(),
        over,
    )
}

/// What an apply command said.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ApplyOutcome {
    /// Exit 0 with the member's outputs.
    Applied(Map<String, Value>),
    /// `{"outcome": "replan"}`: plan again and apply that plan.
    Replan(Option<String>),
    /// `{"outcome": "held", "holder": ...}`: another run holds the target.
    Held(String),
    /// `{"outcome": "stood-down", "reason": ...}`.
    StoodDown(String),
    /// Anything else, with what the operator needs to know.
    Failed(String),
    /// A group's apply never reached the member (it failed before).
    NotReached(String),
}
