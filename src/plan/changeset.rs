//! The change set: every member's outcome and plan digest, bound into the one
//! digest a pull-request approval names; and set digests over member lists.

use super::canonical::{digest_value, is_digest};
use super::planfile::{Counts, MemberPlan};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

pub const CHANGE_SET_VERSION: u32 = 1;

/// What became of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberStatus {
    Planned,
    PlanFailed,
    Blocked,
}

/// One member's line in the change set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangeSetMember {
    pub member: String,
    pub status: MemberStatus,
    pub plan_digest: Option<String>,
    /// The member's own input names whose values are not known yet.
    pub unknown_inputs: Vec<String>,
    /// The input values the plan read, by the member's own input names.
    pub inputs: Map<String, Value>,
    /// The full plan (absent unless planned), kept so coverage can compare against it.
    pub plan: Option<MemberPlan>,
}

impl ChangeSetMember {
    pub fn counts(&self) -> Counts {
        self.plan
            .as_ref()
            .map(MemberPlan::counts)
            .unwrap_or_default()
    }
}

/// The document an approval binds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeSet {
    pub version: u32,
    /// Sorted by member name.
    pub members: Vec<ChangeSetMember>,
    pub digest: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChangeSetError {
    #[error("member `{0}` appears twice; a set names each member once")]
    DuplicateMember(String),
    #[error("change set record is not valid: {0}")]
    Malformed(String),
    #[error("change set record carries digest {carried} but its content digests to {actual}; it was altered and is not trusted")]
    DigestMismatch { carried: String, actual: String },
    #[error("{0}")]
    MemberPlan(String),
}

impl ChangeSet {
    pub fn new(mut members: Vec<ChangeSetMember>) -> Result<Self, ChangeSetError> {
        members.sort_by(|a, b| a.member.cmp(&b.member));
        if let Some(pair) = members.windows(2).find(|w| w[0].member == w[1].member) {
            return Err(ChangeSetError::DuplicateMember(pair[0].member.clone()));
        }
        let mut set = Self {
            version: CHANGE_SET_VERSION,
            members,
            digest: String::new(),
        };
        set.digest = set.compute_digest();
        Ok(set)
    }

    /// The digest covers each member's name, status, plan digest, unknown and
    /// known inputs: what was planned, not the prose around it.
    pub fn compute_digest(&self) -> String {
        let members: Vec<Value> = self
            .members
            .iter()
            .map(|m| {
                json!({
                    "member": m.member,
                    "status": m.status,
                    "planDigest": m.plan_digest,
                    "unknownInputs": m.unknown_inputs,
                    "inputs": m.inputs,
                })
            })
            .collect();
        digest_value(&json!({"version": self.version, "members": members}))
    }

    /// Re-verifies a record read back: its digest, every member plan's digest,
    /// and that each member's plan digest is its plan's.
    pub fn verify(&self) -> Result<(), ChangeSetError> {
        let actual = self.compute_digest();
        if actual != self.digest {
            return Err(ChangeSetError::DigestMismatch {
                carried: self.digest.clone(),
                actual,
            });
        }
        let mut names = BTreeSet::new();
        for m in &self.members {
            if !names.insert(&m.member) {
                return Err(ChangeSetError::DuplicateMember(m.member.clone()));
            }
            if let Some(plan) = &m.plan {
                plan.verify().map_err(ChangeSetError::MemberPlan)?;
                if m.plan_digest.as_deref() != Some(plan.plan_digest.as_str())
                    || plan.member != m.member
                {
                    return Err(ChangeSetError::MemberPlan(format!(
                        "{}: the stored plan is not the one its digest names",
                        m.member
                    )));
                }
            }
        }
        Ok(())
    }

    /// Parses and verifies a stored change set.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ChangeSetError> {
        let set: Self =
            serde_json::from_slice(bytes).map_err(|e| ChangeSetError::Malformed(e.to_string()))?;
        set.verify()?;
        Ok(set)
    }

    pub fn member(&self, name: &str) -> Option<&ChangeSetMember> {
        self.members.iter().find(|m| m.member == name)
    }
}

/// One `{member, planDigest}` pair of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetItem {
    pub member: String,
    pub plan_digest: String,
}

/// The digest over a list of members and their plan digests, in any order;
/// a member named twice is refused, since a set has one plan per member.
pub fn set_digest(items: &[SetItem]) -> Result<String, ChangeSetError> {
    let mut sorted: Vec<&SetItem> = items.iter().collect();
    sorted.sort_by(|a, b| a.member.cmp(&b.member));
    if let Some(pair) = sorted.windows(2).find(|w| w[0].member == w[1].member) {
        return Err(ChangeSetError::DuplicateMember(pair[0].member.clone()));
    }
    if let Some(bad) = sorted.iter().find(|i| !is_digest(&i.plan_digest)) {
        return Err(ChangeSetError::Malformed(format!(
            "{}: `{}` is not a sha256 digest",
            bad.member, bad.plan_digest
        )));
    }
    Ok(digest_value(
        &serde_json::to_value(sorted).expect("set items serialise"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(member: &str, body: &str) -> ChangeSetMember {
        let plan = MemberPlan::parse(member, body.as_bytes()).unwrap();
        ChangeSetMember {
            member: member.into(),
            status: MemberStatus::Planned,
            plan_digest: Some(plan.plan_digest.clone()),
            unknown_inputs: vec![],
            inputs: Map::new(),
            plan: Some(plan),
        }
    }

    const CREATE: &str =
        r#"{"entries": [{"address": "x", "action": "create", "after": {"n": 1}}]}"#;

    #[test]
    fn one_member_moving_moves_only_its_digest_and_the_set_digest() {
        let a = ChangeSet::new(vec![planned("b@dev", CREATE), planned("a@dev", CREATE)]).unwrap();
        let b = ChangeSet::new(vec![
            planned("a@dev", CREATE),
            planned("b@dev", &CREATE.replace("1", "2")),
        ])
        .unwrap();
        assert_eq!(a.members[0].member, "a@dev", "sorted by member");
        assert_eq!(a.members[0].plan_digest, b.members[0].plan_digest);
        assert_ne!(a.members[1].plan_digest, b.members[1].plan_digest);
        assert_ne!(a.digest, b.digest);
        assert_eq!(
            a.digest,
            ChangeSet::new(vec![planned("a@dev", CREATE), planned("b@dev", CREATE)])
                .unwrap()
                .digest
        );
    }

    #[test]
    fn duplicates_are_refused() {
        let e =
            ChangeSet::new(vec![planned("a@dev", CREATE), planned("a@dev", CREATE)]).unwrap_err();
        assert_eq!(e, ChangeSetError::DuplicateMember("a@dev".into()));
        let item = SetItem {
            member: "a@dev".into(),
            plan_digest: planned("a@dev", CREATE).plan_digest.unwrap(),
        };
        assert!(set_digest(&[item.clone(), item.clone()]).is_err());
        let other = SetItem {
            member: "b@dev".into(),
            ..item.clone()
        };
        assert_eq!(
            set_digest(&[item.clone(), other.clone()]).unwrap(),
            set_digest(&[other, item]).unwrap()
        );
    }

    #[test]
    fn a_record_read_back_is_verified() {
        let set = ChangeSet::new(vec![planned("a@dev", CREATE)]).unwrap();
        let text = serde_json::to_string(&set).unwrap();
        assert_eq!(ChangeSet::from_json(text.as_bytes()).unwrap(), set);
        let tampered = text.replace("\"planned\"", "\"blocked\"");
        assert!(matches!(
            ChangeSet::from_json(tampered.as_bytes()),
            Err(ChangeSetError::DigestMismatch { .. })
        ));
        let plan_tampered = text.replace("\"n\":1", "\"n\":9");
        assert!(matches!(
            ChangeSet::from_json(plan_tampered.as_bytes()),
            Err(ChangeSetError::MemberPlan(_))
        ));
        assert!(matches!(
            ChangeSet::from_json(b"{}"),
            Err(ChangeSetError::Malformed(_))
        ));
    }
}
