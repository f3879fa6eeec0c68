//! Coverage (docs/plan-files.md): whether an approval of one change set also covers a
//! fresh plan of a member. One function serves a resume, a round and a stage.
//!
//! A fresh plan is covered when it is the approved plan, or when it differs
//! only where the approved plan said it could not know yet.

use super::changeset::{ChangeSet, ChangeSetMember, MemberStatus};
use super::path::ValuePath;
use super::planfile::MemberPlan;
use crate::model::canonical::CanonicalJson;
use crate::model::MemberId;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Coverage {
    Covered,
    /// One line naming the member, and the address and path that moved.
    NotCovered(String),
}

/// A member's fresh plan with the inputs it read.
pub(crate) struct FreshPlan<'a> {
    pub(crate) plan: &'a MemberPlan,
    pub(crate) inputs: &'a Map<String, Value>,
    /// What its discovery found now, for a unit a discovery found.
    pub(crate) discovered: Option<&'a Value>,
    /// Members this run applied already: an approved group whose members
    /// applied part way plans the rest as a smaller group.
    pub(crate) applied: Option<&'a std::collections::BTreeSet<MemberId>>,
}

pub(crate) fn coverage(approved: &ChangeSet, fresh: &FreshPlan<'_>) -> Coverage {
    let member = fresh.plan.member.as_str();
    let not = |reason: String| Coverage::NotCovered(format!("{member}: {reason}"));
    let Some(was) = approved.member(member) else {
        return not(format!(
            "not in the approved change set {}",
            approved.digest
        ));
    };
    let Some(was_plan) = was
        .plan
        .as_ref()
        .filter(|_| was.status == MemberStatus::Planned)
    else {
        return not("the approved change set has no plan for it".into());
    };
    if was.discovered.as_ref() != fresh.discovered {
        let show = |d: Option<&Value>| d.map_or("not discovered".to_owned(), Value::to_string);
        return not(format!(
            "its unit was discovered otherwise: {} when approved, {} now",
            show(was.discovered.as_ref()),
            show(fresh.discovered)
        ));
    }
    if let Some(moved) = regrouped(was_plan, fresh) {
        return not(moved);
    }
    // The plans themselves are compared, not their digests: equal digests do
    // not prove equal plans (RFC 8785 binds integers beyond 2^53 as doubles),
    // and an approved set of version 1 digested numbers with another rule.
    match first_difference(was, was_plan, fresh) {
        Some(reason) => not(reason),
        None => Coverage::Covered,
    }
}

/// Why `fresh` is not planned with the mates the approved plan had (less
/// those applied since), if it is not: a plan made with other mates is
/// not the one approved, whatever it says.
fn regrouped(was: &MemberPlan, fresh: &FreshPlan<'_>) -> Option<String> {
    let member = &fresh.plan.member;
    let alone = || vec![member.clone()];
    // Mates applied since (a crash's, planned again with nothing to change)
    // are left out of both sides alike.
    let left = |members: &[MemberId]| -> Vec<MemberId> {
        let left: Vec<MemberId> = members
            .iter()
            .filter(|m| *m == member || fresh.applied.is_none_or(|a| !a.contains(*m)))
            .cloned()
            .collect();
        if left.len() > 1 {
            left
        } else {
            alone()
        }
    };
    let now = fresh
        .plan
        .group
        .as_ref()
        .map_or_else(alone, |g| left(&g.members));
    let expected = was.group.as_ref().map_or_else(alone, |g| left(&g.members));
    if expected == now {
        return None;
    }
    Some(match &was.group {
        Some(group) if now.len() > 1 => format!(
            "the approved plan grouped {}, and the round groups {}",
            group.members.join(", "),
            now.join(", ")
        ),
        Some(group) => format!(
            "the approved plan grouped {}, and the round plans {member} without that group",
            group.members.join(", ")
        ),
        None => format!(
            "the round groups {}, which the approved plan did not",
            now.join(", ")
        ),
    })
}

fn first_difference(
    was: &ChangeSetMember,
    was_plan: &MemberPlan,
    fresh: &FreshPlan<'_>,
) -> Option<String> {
    for (name, value) in &was.inputs {
        match fresh.inputs.get(name) {
            Some(now) if now == value => {}
            Some(now) => return Some(format!("input {name} moved from {value} to {now}")),
            None => return Some(format!("input {name} was {value} and is now unknown")),
        }
    }
    for name in fresh.inputs.keys() {
        let left_open = was.unknown_inputs.contains(name)
            || was.build_inputs.contains(name)
            || was.group_inputs.contains(name);
        if !was.inputs.contains_key(name) && !left_open {
            return Some(format!("input {name} was not read by the approved plan"));
        }
    }
    let now = fresh.plan;
    if was_plan.denied != now.denied {
        let names = |denied: &[crate::model::Untrusted]| {
            let quoted: Vec<String> = denied.iter().map(|r| format!("`{}`", r.as_str())).collect();
            format!("[{}]", quoted.join(", "))
        };
        return Some(format!(
            "policy denials changed from {} to {}",
            names(&was_plan.denied),
            names(&now.denied)
        ));
    }
    if was_plan.opaque || now.opaque {
        return opaque_difference(was_plan, now);
    }
    let before: BTreeMap<&str, _> = was_plan
        .entries
        .iter()
        .map(|e| (e.address.as_str(), e))
        .collect();
    let after: BTreeMap<&str, _> = now
        .entries
        .iter()
        .map(|e| (e.address.as_str(), e))
        .collect();
    if let Some(added) = after.keys().find(|a| !before.contains_key(*a)) {
        return Some(format!("address {added} was added"));
    }
    if let Some(removed) = before.keys().find(|a| !after.contains_key(*a)) {
        return Some(format!("address {removed} was removed"));
    }
    for (address, e) in &after {
        let a = before[address];
        if a.action != e.action {
            return Some(format!(
                "address {address} changed action from {} to {}",
                a.action.as_str(),
                e.action.as_str()
            ));
        }
        if a.forced_by != e.forced_by {
            return Some(format!(
                "address {address} is replaced because of {} where the approved plan said {}",
                listed(&e.forced_by),
                listed(&a.forced_by)
            ));
        }
        // What the address is now was shown to the reviewer as the other side
        // of every change; if it moved, the approved change is not this one.
        if let Some(p) = moved_path_of(&a.before, &e.before, &[]) {
            return Some(format!(
                "address {address} path {} moved before the change (drift since the approved plan)",
                show(&p)
            ));
        }
        let unknown = a.unknown_paths();
        if let Some(p) = e.unknown_paths().iter().find(|p| !within(p, &unknown)) {
            return Some(format!("address {address} path {} became unknown", show(p)));
        }
        if let Some(p) = moved_path_of(&a.after, &e.after, &unknown) {
            return Some(format!("address {address} path {} moved", show(&p)));
        }
    }
    let unknown_outputs = was_plan.outputs.unknown_paths();
    if let Some(p) = now
        .outputs
        .unknown_paths()
        .iter()
        .find(|p| !within(p, &unknown_outputs))
    {
        return Some(format!("output {} became unknown", show(p)));
    }
    let as_value = |m: &Map<String, Value>| Value::Object(m.clone());
    if let Some(p) = moved_path(
        &as_value(&was_plan.outputs.known),
        &as_value(&now.outputs.known),
        &ValuePath::root(),
        &unknown_outputs,
    ) {
        return Some(format!("output {} moved", show(&p)));
    }
    if was_plan.destructive != now.destructive {
        return Some(format!(
            "the plan now says destructive: {} (the approved plan said {})",
            now.destructive, was_plan.destructive
        ));
    }
    None
}

/// An opaque plan lists nothing to compare, so only the exact plan covers it.
fn opaque_difference(was: &MemberPlan, now: &MemberPlan) -> Option<String> {
    let what = |p: &MemberPlan| {
        if p.opaque {
            "lists no resources"
        } else {
            "lists its resources"
        }
    };
    if was.opaque != now.opaque {
        return Some(format!(
            "the approved plan {} and the fresh plan {}",
            what(was),
            what(now)
        ));
    }
    if was.summary != now.summary {
        return Some(
            "the summary of this opaque plan (it lists no resources) moved; only its exact plan is covered"
                .into(),
        );
    }
    if was.outputs != now.outputs || was.destructive != now.destructive {
        return Some(
            "the outputs of this opaque plan (it lists no resources) moved; only its exact plan is covered"
                .into(),
        );
    }
    None
}

fn listed(paths: &[String]) -> String {
    if paths.is_empty() {
        "nothing named".into()
    } else {
        paths.join(", ")
    }
}

fn within(path: &ValuePath, unknown: &[ValuePath]) -> bool {
    unknown.iter().any(|u| path.starts_with(u))
}

fn show(path: &ValuePath) -> String {
    if path.0.is_empty() {
        "(the whole value)".into()
    } else {
        path.to_string()
    }
}

/// [`moved_path`] of two values held as text: equal texts are equal
/// values, and only values that differ are read into trees.
fn moved_path_of(a: &CanonicalJson, b: &CanonicalJson, unknown: &[ValuePath]) -> Option<ValuePath> {
    if a == b {
        return None;
    }
    moved_path(&a.to_value(), &b.to_value(), &ValuePath::root(), unknown)
}

/// The first path at which `a` and `b` differ outside `unknown`, if any.
fn moved_path(a: &Value, b: &Value, at: &ValuePath, unknown: &[ValuePath]) -> Option<ValuePath> {
    if within(at, unknown) {
        return None;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let null = Value::Null;
                moved_path(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &at.child_key(k),
                    unknown,
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| moved_path(p, q, &at.child_index(i), unknown)),
        _ if a == b => None,
        _ => Some(at.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const APPROVED: &str = r#"{
        "entries": [
            {"address": "aws_vpc.main", "action": "update", "after": {"cidr": "10.0.0.0/16", "id": null, "tags": {"a": "1"}}, "unknown": ["id"]},
            {"address": "aws_subnet.a", "action": "create", "after": {"vpc": null, "zone": "a"}, "unknown": ["vpc"]}
        ],
        "outputs": {"known": {"name": "main"}, "unknown": ["vpc_id"]}
    }"#;

    fn approved_set(unknown_inputs: &[&str], inputs: Value) -> ChangeSet {
        let plan = MemberPlan::parse(&"net@dev".into(), APPROVED.as_bytes()).unwrap();
        let other = MemberPlan::parse(&"app@dev".into(), br#"{"entries": []}"#).unwrap();
        let member =
            |plan: MemberPlan, unknown: Vec<String>, inputs: Map<String, Value>| ChangeSetMember {
                member: plan.member.clone(),
                status: MemberStatus::Planned,
                plan_digest: Some(plan.plan_digest.clone()),
                unknown_inputs: unknown,
                build_inputs: vec![],
                group_inputs: vec![],
                discovered: None,
                inputs,
                plan: Some(plan),
                ran_on: None,
            };
        ChangeSet::new(vec![
            member(
                plan,
                unknown_inputs.iter().map(|s| s.to_string()).collect(),
                inputs.as_object().unwrap().clone(),
            ),
            member(other, vec![], Map::new()),
        ])
        .unwrap()
    }

    /// A change set of one plan that read no inputs.
    fn set_of(plan: MemberPlan) -> ChangeSet {
        ChangeSet::new(vec![ChangeSetMember {
            member: plan.member.clone(),
            status: MemberStatus::Planned,
            plan_digest: Some(plan.plan_digest.clone()),
            unknown_inputs: vec![],
            build_inputs: vec![],
            group_inputs: vec![],
            discovered: None,
            inputs: Map::new(),
            plan: Some(plan),
            ran_on: None,
        }])
        .unwrap()
    }

    fn check(fresh_text: &str, inputs: Value) -> Coverage {
        check_against(
            &approved_set(&["subnet"], json!({"region": "eu"})),
            fresh_text,
            inputs,
        )
    }

    fn check_against(set: &ChangeSet, fresh_text: &str, inputs: Value) -> Coverage {
        let plan = MemberPlan::parse(&"net@dev".into(), fresh_text.as_bytes()).unwrap();
        coverage(
            set,
            &FreshPlan {
                plan: &plan,
                inputs: inputs.as_object().unwrap(),
                discovered: None,
                applied: None,
            },
        )
    }

    fn reason(c: Coverage) -> String {
        match c {
            Coverage::NotCovered(r) => r,
            Coverage::Covered => panic!("expected not covered"),
        }
    }

    #[test]
    fn a_build_input_may_be_known_at_apply_where_the_approved_plan_left_it_to_the_build() {
        let fresh = r#"{
            "entries": [
                {"address": "aws_vpc.main", "action": "update", "after": {"cidr": "10.0.0.0/16", "id": null, "tags": {"a": "1"}}, "unknown": ["id"]},
                {"address": "aws_subnet.a", "action": "create", "after": {"vpc": "vpc-1", "zone": "a"}}
            ],
            "outputs": {"known": {"name": "main"}, "unknown": ["vpc_id"]}
        }"#;
        let inputs = json!({"region": "eu", "image": "sha256:abc"});
        // Read by the approved plan as neither known nor unknown: not covered.
        let plain = approved_set(&["subnet"], json!({"region": "eu"}));
        assert_eq!(
            check_against(&plain, fresh, inputs.clone()),
            Coverage::NotCovered("net@dev: input image was not read by the approved plan".into())
        );
        // Left to the build that publishes it: its value now is no change.
        let mut built = plain.clone();
        let net = built.members.iter_mut().find(|m| m.member == "net@dev");
        net.expect("in the set").build_inputs = vec!["image".into()];
        assert_eq!(check_against(&built, fresh, inputs), Coverage::Covered);
    }

    #[test]
    fn a_plan_made_with_other_group_mates_is_not_covered_unless_they_applied() {
        use crate::plan::planfile::GroupBinding;
        let grouped = |plan: &mut MemberPlan, mates: &[&str]| {
            let members: Vec<MemberId> = mates.iter().map(|m| (*m).into()).collect();
            let own: Vec<(MemberId, crate::model::Digest)> = members
                .iter()
                .map(|m| (m.clone(), crate::model::Digest::repeated('1')))
                .collect();
            plan.group = Some(GroupBinding {
                name: "stack".into(),
                members,
                digest: GroupBinding::digest_of("stack", &own),
            });
            plan.plan_digest = plan.compute_digest();
        };
        let mut approved = MemberPlan::parse(&"net@dev".into(), APPROVED.as_bytes()).unwrap();
        grouped(&mut approved, &["db@dev", "net@dev"]);
        let set = set_of(approved);
        let inputs = Map::new();
        let check = |fresh: &MemberPlan, applied: Option<&std::collections::BTreeSet<MemberId>>| {
            coverage(
                &set,
                &FreshPlan {
                    plan: fresh,
                    inputs: &inputs,
                    discovered: None,
                    applied,
                },
            )
        };
        let mut same = MemberPlan::parse(&"net@dev".into(), APPROVED.as_bytes()).unwrap();
        grouped(&mut same, &["db@dev", "net@dev"]);
        assert_eq!(check(&same, None), Coverage::Covered);

        let mut other = MemberPlan::parse(&"net@dev".into(), APPROVED.as_bytes()).unwrap();
        grouped(&mut other, &["app@dev", "net@dev"]);
        assert_eq!(
            reason(check(&other, None)),
            "net@dev: the approved plan grouped db@dev, net@dev, and the round groups app@dev, net@dev"
        );

        let alone = MemberPlan::parse(&"net@dev".into(), APPROVED.as_bytes()).unwrap();
        assert_eq!(
            reason(check(&alone, None)),
            "net@dev: the approved plan grouped db@dev, net@dev, and the round plans net@dev without that group"
        );
        let db_applied: std::collections::BTreeSet<MemberId> = ["db@dev".into()].into();
        assert_eq!(
            check(&alone, Some(&db_applied)),
            Coverage::Covered,
            "what is left of the group after db applied is net alone: its plan is compared as any"
        );

        let ungrouped = set_of(MemberPlan::parse(&"net@dev".into(), APPROVED.as_bytes()).unwrap());
        assert_eq!(
            reason(coverage(
                &ungrouped,
                &FreshPlan {
                    plan: &same,
                    inputs: &inputs,
                    discovered: None,
                    applied: None,
                }
            )),
            "net@dev: the round groups db@dev, net@dev, which the approved plan did not"
        );
    }

    #[test]
    fn an_identical_plan_is_covered() {
        assert_eq!(check(APPROVED, json!({"region": "eu"})), Coverage::Covered);
    }

    #[test]
    fn filling_only_unknown_paths_is_covered() {
        let fresh = APPROVED
            .replace(r#""id": null"#, r#""id": "vpc-1""#)
            .replace(r#""unknown": ["id"]"#, r#""unknown": []"#);
        let fresh = fresh
            .replace(r#""unknown": ["vpc_id"]"#, r#""unknown": []"#)
            .replace(
                r#""known": {"name": "main"}"#,
                r#""known": {"name": "main", "vpc_id": "vpc-1"}"#,
            );
        assert_eq!(check(&fresh, json!({"region": "eu"})), Coverage::Covered);
    }

    #[test]
    fn an_unknown_input_filled_is_covered() {
        let fresh = APPROVED
            .replace(r#""vpc": null"#, r#""vpc": "vpc-1""#)
            .replace(r#""unknown": ["vpc"]"#, "\"unknown\": []");
        assert_eq!(
            check(&fresh, json!({"region": "eu", "subnet": "s-1"})),
            Coverage::Covered
        );
    }

    #[test]
    fn a_known_input_moving_is_not_covered() {
        assert_eq!(
            reason(check(APPROVED, json!({"region": "us"}))),
            r#"net@dev: input region moved from "eu" to "us""#
        );
    }

    #[test]
    fn an_added_or_removed_address_is_not_covered() {
        let added = APPROVED.replace(
            r#""entries": ["#,
            r#""entries": [{"address": "aws_eip.x", "action": "create"},"#,
        );
        assert_eq!(
            reason(check(&added, json!({"region": "eu"}))),
            "net@dev: address aws_eip.x was added"
        );
        let removed = r#"{"entries": [{"address": "aws_vpc.main", "action": "update", "after": {"cidr": "10.0.0.0/16", "id": null, "tags": {"a": "1"}}, "unknown": ["id"]}],
            "outputs": {"known": {"name": "main"}, "unknown": ["vpc_id"]}}"#;
        assert_eq!(
            reason(check(removed, json!({"region": "eu"}))),
            "net@dev: address aws_subnet.a was removed"
        );
    }

    #[test]
    fn a_changed_action_is_not_covered() {
        let fresh = APPROVED.replace(r#""action": "update""#, r#""action": "replace""#);
        assert_eq!(
            reason(check(&fresh, json!({"region": "eu"}))),
            "net@dev: address aws_vpc.main changed action from update to replace"
        );
    }

    #[test]
    fn a_known_value_moving_is_not_covered() {
        let fresh = APPROVED.replace(r#""a": "1""#, r#""a": "2""#);
        assert_eq!(
            reason(check(&fresh, json!({"region": "eu"}))),
            "net@dev: address aws_vpc.main path tags.a moved"
        );
    }

    #[test]
    fn an_output_moving_is_not_covered() {
        let fresh = APPROVED.replace(r#""name": "main""#, r#""name": "other""#);
        assert_eq!(
            reason(check(&fresh, json!({"region": "eu"}))),
            "net@dev: output name moved"
        );
    }

    #[test]
    fn drift_before_the_change_is_not_covered() {
        let with_before = |cidr: &str| {
            APPROVED.replace(
                r#""action": "update", "after""#,
                &format!(r#""action": "update", "before": {{"cidr": "{cidr}"}}, "after""#),
            )
        };
        let plan =
            MemberPlan::parse(&"net@dev".into(), with_before("10.9.0.0/16").as_bytes()).unwrap();
        let set = set_of(plan);
        assert_eq!(
            check_against(&set, &with_before("10.9.0.0/16"), json!({})),
            Coverage::Covered
        );
        assert_eq!(
            reason(check_against(&set, &with_before("10.8.0.0/16"), json!({}))),
            "net@dev: address aws_vpc.main path cidr moved before the change (drift since the approved plan)"
        );
    }

    #[test]
    fn an_opaque_plan_is_covered_only_by_itself() {
        let approved = |summary: &str| {
            let plan = MemberPlan::parse(
                &"net@dev".into(),
                json!({"summary": summary, "outputs": {"unknown": ["v"]}})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
            set_of(plan)
        };
        let set = approved("run 0042_add_index");
        let same = r#"{"summary": "run 0042_add_index", "outputs": {"unknown": ["v"]}}"#;
        assert_eq!(check_against(&set, same, json!({})), Coverage::Covered);
        assert_eq!(
            reason(check_against(
                &set,
                r#"{"summary": "run 0042_add_index and 0043_drop_users", "outputs": {"unknown": ["v"]}}"#,
                json!({})
            )),
            "net@dev: the summary of this opaque plan (it lists no resources) moved; only its exact plan is covered"
        );
        assert_eq!(
            reason(check_against(
                &set,
                r#"{"summary": "run 0042_add_index", "outputs": {"known": {"v": 1}}}"#,
                json!({})
            )),
            "net@dev: the outputs of this opaque plan (it lists no resources) moved; only its exact plan is covered",
            "an unknown output of an opaque plan is not a place where it may move"
        );
        assert_eq!(
            reason(check_against(
                &set,
                r#"{"summary": "run 0042_add_index", "empty": true}"#,
                json!({})
            )),
            "net@dev: the approved plan lists no resources and the fresh plan lists its resources"
        );
    }

    #[test]
    fn what_forces_a_replacement_is_compared() {
        let replace = |forced: &str| {
            format!(
                r#"{{"entries": [{{"address": "db", "action": "replace", "after": {{"v": "15"}}, "forced_by": [{forced}]}}]}}"#
            )
        };
        let plan = MemberPlan::parse(&"net@dev".into(), replace(r#""v""#).as_bytes()).unwrap();
        let set = set_of(plan);
        assert_eq!(
            reason(check_against(&set, &replace(r#""v", "zone""#), json!({}))),
            "net@dev: address db is replaced because of v, zone where the approved plan said v"
        );
    }

    #[test]
    fn a_member_not_in_the_approved_set_is_not_covered() {
        let set = approved_set(&[], json!({}));
        let plan = MemberPlan::parse(&"dns@prod".into(), br#"{"entries": []}"#).unwrap();
        let r = reason(coverage(
            &set,
            &FreshPlan {
                plan: &plan,
                inputs: &Map::new(),
                discovered: None,
                applied: None,
            },
        ));
        assert_eq!(
            r,
            format!("dns@prod: not in the approved change set {}", set.digest)
        );
    }

    #[test]
    fn equal_digests_are_not_taken_for_equal_plans() {
        // RFC 8785 binds 2^53 + 1 as 2^53: the digests agree, the values do not.
        let big = |n: &str| {
            APPROVED.replace(
                r#""tags": {"a": "1"}"#,
                &format!(r#""tags": {{"a": "1"}}, "limit": {n}"#),
            )
        };
        let approved =
            MemberPlan::parse(&"net@dev".into(), big("9007199254740993").as_bytes()).unwrap();
        let fresh =
            MemberPlan::parse(&"net@dev".into(), big("9007199254740992").as_bytes()).unwrap();
        assert_eq!(approved.plan_digest, fresh.plan_digest);
        let set = set_of(approved);
        assert_eq!(
            reason(check_against(&set, &big("9007199254740992"), json!({}))),
            "net@dev: address aws_vpc.main path limit moved"
        );
        assert_eq!(
            check_against(&set, &big("9007199254740993"), json!({})),
            Coverage::Covered
        );
    }

    #[test]
    fn a_set_approved_at_version_1_covers_the_same_plan_digested_at_version_2() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/changeset/v1-record.json");
        let set = ChangeSet::from_json(&std::fs::read(path).unwrap()).unwrap();
        let stored = set.members[0].plan.as_ref().unwrap();
        let plan_file = json!({"entries": stored.entries, "outputs": stored.outputs});
        let fresh =
            MemberPlan::parse(&"app@prod".into(), plan_file.to_string().as_bytes()).unwrap();
        assert_ne!(
            fresh.plan_digest, stored.plan_digest,
            "the rules differ here"
        );
        assert_eq!(
            coverage(
                &set,
                &FreshPlan {
                    plan: &fresh,
                    inputs: &set.members[0].inputs,
                    discovered: None,
                    applied: None,
                },
            ),
            Coverage::Covered
        );
    }
}
