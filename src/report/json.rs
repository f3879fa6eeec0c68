//! The JSON report: a stable, documented shape (`schema/report.schema.json`).

use crate::config::groups::Fallback;
use crate::model::{Digest, MemberId, Money};
use crate::plan::changeset::MemberStatus;
use crate::plan::cost::StageCost;
use crate::plan::fanout::Skipped;
use crate::plan::outcome::{InputSource, PlannedChange, ResolvedInput};
use crate::plan::planfile::Counts;
use serde::Serialize;
use std::collections::BTreeMap;

pub(crate) const REPORT_VERSION: u32 = 1;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonReport<'a> {
    pub(crate) version: u32,
    /// The change-set digest: what `/approve` binds.
    pub(crate) digest: &'a Digest,
    /// `changing` when the digest binds only the members that change something.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) digest_over: Option<&'static str>,
    /// The members the digest leaves out then.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) unbound: Vec<&'a str>,
    pub(crate) derivation_digest: &'a Digest,
    pub(crate) base: &'a str,
    pub(crate) head: &'a str,
    pub(crate) waves: &'a [Vec<MemberId>],
    pub(crate) selected: &'a BTreeMap<String, String>,
    pub(crate) members: Vec<JsonMember<'a>>,
    pub(crate) skipped: &'a [Skipped],
    pub(crate) indeterminate: &'a [String],
    pub(crate) seeded: &'a [String],
    pub(crate) notes: &'a [String],
    /// Each priced stage's cost (`cost@<stage>`), which the digest binds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) costs: Vec<JsonCost<'a>>,
    /// The groups planned with one call, each in one wave of its stage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<JsonGroup<'a>>,
    /// Members of groups that planned on their own, with why.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) fallbacks: &'a [Fallback],
}

/// A group's members in one stage, planned with one call.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonGroup<'a> {
    pub(crate) group: &'a str,
    pub(crate) stage: &'a str,
    /// Which of the stage's waves (from 1).
    pub(crate) wave: usize,
    pub(crate) members: &'a [MemberId],
    /// The group's digest, which each member's plan digest binds; none when it failed.
    pub(crate) digest: Option<&'a Digest>,
    pub(crate) error: Option<&'a str>,
    /// Each member's reads of its mates, which the group's apply computes.
    pub(crate) reads: Vec<JsonGroupRead<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonGroupRead<'a> {
    pub(crate) member: &'a str,
    pub(crate) input: &'a str,
    /// `component.output` of the mate.
    pub(crate) reads: &'a str,
    /// Whether the mate's plan knew the value (then it is bound).
    pub(crate) known: bool,
}

fn groups(change: &PlannedChange) -> Vec<JsonGroup<'_>> {
    change
        .derivation
        .groups
        .iter()
        .map(|g| {
            let outcomes: Vec<_> = change.group_outcomes(g).collect();
            JsonGroup {
                group: &g.group,
                stage: g.stage.as_str(),
                wave: g.wave,
                members: &g.members,
                digest: change.group_digest(g),
                error: outcomes.iter().find_map(|o| o.error.as_deref()),
                reads: outcomes
                    .iter()
                    .flat_map(|o| {
                        o.inputs
                            .iter()
                            .filter(|(_, i)| i.source == InputSource::Group)
                            .map(move |(name, i)| JsonGroupRead {
                                member: o.member.as_str(),
                                input: name,
                                reads: &i.reference,
                                known: i.value.is_some(),
                            })
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A stage's monthly cost with the change, before it and the difference,
/// per member and in total.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonCost<'a> {
    pub(crate) member: &'a str,
    pub(crate) stage: &'a str,
    pub(crate) currency: &'a str,
    pub(crate) monthly: Money,
    pub(crate) past: Money,
    pub(crate) increase: Money,
    pub(crate) members: Vec<JsonMemberCost<'a>>,
    pub(crate) denied: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_monthly_increase: Option<Money>,
    pub(crate) error: Option<&'a str>,
    pub(crate) digest: &'a Digest,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonMemberCost<'a> {
    pub(crate) member: &'a str,
    pub(crate) monthly: Money,
    pub(crate) past: Money,
    pub(crate) increase: Money,
}

fn cost(cost: &StageCost) -> JsonCost<'_> {
    JsonCost {
        member: cost.member.as_str(),
        stage: cost.stage.as_str(),
        currency: &cost.currency,
        monthly: cost.total(),
        past: cost.past_total(),
        increase: cost.increase(),
        members: cost
            .members
            .iter()
            .map(|(member, c)| JsonMemberCost {
                member,
                monthly: c.monthly,
                past: c.past,
                increase: c.increase(),
            })
            .collect(),
        denied: &cost.denied,
        max_monthly_increase: cost.max_increase,
        error: cost.error.as_deref(),
        digest: &cost.digest,
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonMember<'a> {
    pub(crate) member: &'a str,
    pub(crate) component: &'a str,
    pub(crate) stage: &'a str,
    pub(crate) status: MemberStatus,
    pub(crate) plan_digest: Option<&'a Digest>,
    pub(crate) counts: Counts,
    pub(crate) destructive: bool,
    /// Every address the plan deletes or replaces, as `address (action)`.
    pub(crate) destructive_addresses: Vec<String>,
    pub(crate) empty: bool,
    /// The plan lists no resources: its summary is bound and its apply always runs.
    pub(crate) opaque: bool,
    pub(crate) unknown_inputs: Vec<String>,
    /// Inputs a build in the change publishes when it applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) build_inputs: Vec<String>,
    /// Reads of group-mates whose plans did not know the value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) group_inputs: Vec<String>,
    /// Values of sensitive inputs are left out.
    pub(crate) inputs: BTreeMap<String, ResolvedInput>,
    pub(crate) denied: &'a [crate::model::Untrusted],
    pub(crate) error: Option<&'a str>,
    pub(crate) blocked_by: Option<&'a str>,
}

pub(crate) fn report(change: &PlannedChange) -> JsonReport<'_> {
    let members = change
        .members
        .iter()
        .map(|m| JsonMember {
            member: m.member.as_str(),
            component: &m.component,
            stage: m.stage.as_str(),
            status: m.status,
            plan_digest: m.plan.as_ref().map(|p| &p.plan_digest),
            counts: m.plan.as_ref().map(|p| p.counts()).unwrap_or_default(),
            destructive: m.plan.as_ref().is_some_and(|p| p.destructive),
            destructive_addresses: m
                .plan
                .as_ref()
                .map(super::entries::destructive_addresses)
                .unwrap_or_default(),
            empty: m.plan.as_ref().is_some_and(|p| p.is_empty()),
            opaque: m.plan.as_ref().is_some_and(|p| p.opaque),
            unknown_inputs: m
                .inputs
                .iter()
                .filter(|(_, i)| i.source == InputSource::Unknown)
                .map(|(n, _)| n.clone())
                .collect(),
            build_inputs: m.build_inputs(),
            group_inputs: m.group_inputs(),
            inputs: m
                .inputs
                .iter()
                .map(|(name, input)| {
                    let mut shown = input.clone();
                    if shown.sensitive {
                        shown.value = None;
                    }
                    (name.clone(), shown)
                })
                .collect(),
            denied: m.plan.as_ref().map_or(&[][..], |p| &p.denied[..]),
            error: m.error.as_deref(),
            blocked_by: m.blocked_by.as_deref(),
        })
        .collect();
    JsonReport {
        version: REPORT_VERSION,
        digest: &change.change_set.digest,
        digest_over: (!change.change_set.over.is_all()).then_some("changing"),
        unbound: change
            .change_set
            .members
            .iter()
            .filter(|m| !change.change_set.binds(m))
            .map(|m| m.member.as_str())
            .collect(),
        derivation_digest: &change.derivation.digest,
        base: &change.base,
        head: &change.head,
        waves: &change.derivation.waves,
        selected: &change.derivation.selected,
        members,
        skipped: &change.skipped,
        indeterminate: &change.derivation.indeterminate,
        seeded: &change.seeded,
        notes: &change.notes,
        costs: change.change_set.costs.iter().map(cost).collect(),
        groups: groups(change),
        fallbacks: &change.derivation.fallbacks,
    }
}

pub fn to_string(change: &PlannedChange) -> String {
    serde_json::to_string_pretty(&report(change)).expect("the report serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::changeset::ChangeSet;
    use crate::plan::fanout::Derivation;
    use crate::plan::outcome::MemberOutcome;

    #[test]
    fn a_sensitive_input_is_reported_without_its_value() {
        let input = |sensitive| ResolvedInput {
            reference: "db.password".into(),
            upstream: "db@dev".into(),
            source: InputSource::Planned,
            value: Some(serde_json::json!("hunter2")),
            why: None,
            sensitive,
        };
        let member = MemberOutcome {
            member: "app@dev".into(),
            component: "app".into(),
            stage: "dev".into(),
            status: MemberStatus::Blocked,
            plan: None,
            error: Some("blocked".into()),
            blocked_by: Some("db@dev".into()),
            inputs: BTreeMap::from([
                ("password".into(), input(true)),
                ("user".into(), input(false)),
            ]),
            output: String::new(),
            discovered: None,
            ran_on: None,
        };
        let change = PlannedChange {
            base: "a".repeat(40),
            head: "b".repeat(40),
            derivation: Derivation {
                selected: BTreeMap::new(),
                members: vec![],
                waves: vec![],
                skipped: vec![],
                indeterminate: vec![],
                groups: Vec::new(),
                fallbacks: Vec::new(),
                digest: Digest::repeated('0'),
            },
            members: vec![member],
            skipped: vec![],
            seeded: vec![],
            notes: vec![],
            unsandboxed: false,
            change_set: ChangeSet::new(vec![]).unwrap(),
            preview: crate::plan::preview::Preview::strictest(&"a".repeat(40), &[]),
        };
        let text = to_string(&change);
        assert_eq!(
            text.matches("hunter2").count(),
            1,
            "only the non-sensitive input shows its value: {text}"
        );
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            report["members"][0]["inputs"]["password"]["sensitive"],
            true
        );
        assert!(report["members"][0]["inputs"]["password"]
            .get("value")
            .is_none());
    }
}
