//! The change set: every member's outcome and plan digest, bound into the one
//! digest a pull-request approval names; and set digests over member lists.
//!
//! A change set carries the version it was written with, and the version
//! names how its digests (its own and its member plans') spell numbers
//! ([`number_form`]): version 1 wrote integers exactly, version 2 writes every
//! number as RFC 8785 does. New sets are version 2; a stored set is verified
//! with the rule of its own version, so records written before keep
//! verifying. The canonical module's doc says why plan digests need no
//! version of their own.

use super::cost::StageCost;
use super::planfile::{Counts, MemberPlan};
use crate::model::canonical::{digest_value_with, NumberForm};
use crate::model::{Digest, DigestOver, MemberId};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// The version new change sets are written with.
pub(crate) const CHANGE_SET_VERSION: u32 = 2;

/// How the digests of a change set of `version` spell numbers: version 1
/// wrote integers that fit 64 bits exactly, version 2 writes every number as
/// RFC 8785 (ECMAScript) does.
pub(crate) fn number_form(version: u32) -> Result<NumberForm, ChangeSetError> {
    match version {
        1 => Ok(NumberForm::Version1),
        2 => Ok(NumberForm::Ecmascript),
        other => Err(ChangeSetError::UnknownVersion(other)),
    }
}

/// What became of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum MemberStatus {
    Planned,
    PlanFailed,
    Blocked,
}

/// One member's line in the change set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ChangeSetMember {
    pub(crate) member: MemberId,
    pub(crate) status: MemberStatus,
    pub(crate) plan_digest: Option<Digest>,
    /// The member's own input names whose values are not known yet.
    pub(crate) unknown_inputs: Vec<String>,
    /// Its inputs a build in the change publishes when it applies: left to
    /// the build (its own plan binds them), so their values may move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) build_inputs: Vec<String>,
    /// Its reads of group-mates whose plans did not know the value: the
    /// group's apply computes them, so their values may move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) group_inputs: Vec<String>,
    /// The input values the plan read, by the member's own input names.
    pub(crate) inputs: Map<String, Value>,
    /// For a unit a discovery found: what it found (bound when present, so
    /// a unit found otherwise at apply is not covered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) discovered: Option<Value>,
    /// The full plan (absent unless planned), kept so coverage can compare against it.
    pub(crate) plan: Option<MemberPlan>,
    /// The forge's page of the CI run it was planned in: where it ran, not
    /// what was planned, so no digest binds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ran_on: Option<String>,
}

impl ChangeSetMember {
    pub(crate) fn counts(&self) -> Counts {
        self.plan
            .as_ref()
            .map(MemberPlan::counts)
            .unwrap_or_default()
    }
}

/// The document an approval binds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChangeSet {
    pub(crate) version: u32,
    /// Sorted by member name.
    pub(crate) members: Vec<ChangeSetMember>,
    /// Which of `members` the digest binds (all unless the base's policy
    /// says `changing`); a set of every member writes nothing here, so its
    /// record and digest are as before the setting existed.
    #[serde(default, skip_serializing_if = "DigestOver::is_all")]
    pub(crate) over: DigestOver,
    /// Each stage's cost where a cost command is set (`cost@<stage>`, by
    /// stage): extra members the digest binds; none writes nothing, so a
    /// set without is as before costs existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) costs: Vec<StageCost>,
    pub(crate) digest: Digest,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ChangeSetError {
    #[error("member `{0}` appears twice; a set names each member once")]
    DuplicateMember(MemberId),
    #[cfg(test)]
    #[error("change set record is not valid: {0}")]
    Malformed(String),
    #[error("change set record carries digest {carried} but its content digests to {actual}; it was altered and is not trusted")]
    DigestMismatch { carried: Digest, actual: Digest },
    #[error("{0}")]
    MemberPlan(String),
    #[error("`{0}` is both a member and a stage's cost; no component may be named `cost` where a cost command is set")]
    CostClash(MemberId),
    #[error("the cost {member} carries digest {carried} but its figures digest to {actual}; it was altered and is not trusted")]
    CostMismatch {
        member: MemberId,
        carried: Digest,
        actual: Digest,
    },
    #[error("change set record has version {0}, which this wavegate cannot verify (it reads versions 1 and {CHANGE_SET_VERSION}); run the wavegate release that wrote it, or a newer one")]
    UnknownVersion(u32),
}

impl ChangeSet {
    /// A set whose digest binds every member.
    #[cfg(test)]
    pub(crate) fn new(members: Vec<ChangeSetMember>) -> Result<Self, ChangeSetError> {
        Self::binding(members, DigestOver::All)
    }

    /// A set whose digest binds the members `over` says.
    pub(crate) fn binding(
        mut members: Vec<ChangeSetMember>,
        over: DigestOver,
    ) -> Result<Self, ChangeSetError> {
        members.sort_by(|a, b| a.member.cmp(&b.member));
        if let Some(pair) = members.windows(2).find(|w| w[0].member == w[1].member) {
            return Err(ChangeSetError::DuplicateMember(pair[0].member.clone()));
        }
        let mut set = Self {
            version: CHANGE_SET_VERSION,
            members,
            over,
            costs: Vec::new(),
            // Computed from the members just below.
            digest: Digest::repeated('0'),
        };
        set.digest = set.compute_digest()?;
        Ok(set)
    }

    /// The set with these stages' costs bound too (replacing any it had).
    pub(crate) fn with_costs(mut self, mut costs: Vec<StageCost>) -> Result<Self, ChangeSetError> {
        costs.sort_by(|a, b| a.member.cmp(&b.member));
        if let Some(pair) = costs.windows(2).find(|w| w[0].member == w[1].member) {
            return Err(ChangeSetError::DuplicateMember(pair[0].member.clone()));
        }
        self.costs = costs;
        self.check_costs()?;
        self.digest = self.compute_digest()?;
        Ok(self)
    }

    /// The cost of `stage`, when the set binds one.
    pub(crate) fn cost(&self, stage: &str) -> Option<&StageCost> {
        self.costs.iter().find(|c| c.stage == stage)
    }

    fn check_costs(&self) -> Result<(), ChangeSetError> {
        for cost in &self.costs {
            if self.member(&cost.member).is_some() {
                return Err(ChangeSetError::CostClash(cost.member.clone()));
            }
            let actual = cost.compute_digest();
            if actual != cost.digest {
                return Err(ChangeSetError::CostMismatch {
                    member: cost.member.clone(),
                    carried: cost.digest.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }

    /// Whether the digest binds `member`: every member does, except under
    /// `changing` one whose plan changes nothing.
    pub(crate) fn binds(&self, member: &ChangeSetMember) -> bool {
        self.over.is_all() || !member.plan.as_ref().is_some_and(MemberPlan::is_empty)
    }

    /// The digest covers each bound member's name, status, plan digest,
    /// unknown, build and known inputs: what was planned, not the prose around it
    /// (and, under `changing`, says so); then each stage's cost as one more
    /// member. Numbers are written as the set's version says.
    pub(crate) fn compute_digest(&self) -> Result<Digest, ChangeSetError> {
        let numbers = number_form(self.version)?;
        let members: Vec<Value> = self
            .members
            .iter()
            .filter(|m| self.binds(m))
            .map(|m| {
                let mut bound = json!({
                    "member": m.member,
                    "status": m.status,
                    "planDigest": m.plan_digest,
                    "unknownInputs": m.unknown_inputs,
                    "inputs": m.inputs,
                });
                // Only when there are any: every digest without stays as it was.
                if !m.build_inputs.is_empty() {
                    bound["buildInputs"] = json!(m.build_inputs);
                }
                if !m.group_inputs.is_empty() {
                    bound["groupInputs"] = json!(m.group_inputs);
                }
                if let Some(discovered) = &m.discovered {
                    bound["discovered"] = discovered.clone();
                }
                bound
            })
            .chain(self.costs.iter().map(StageCost::bound))
            .collect();
        let mut document = json!({"version": self.version, "members": members});
        if !self.over.is_all() {
            document["over"] = json!(self.over);
        }
        Ok(digest_value_with(&document, numbers))
    }

    /// Re-verifies a record read back: its digest, every member plan's digest,
    /// and that each member's plan digest is its plan's, each with the number
    /// rule of the set's version.
    pub(crate) fn verify(&self) -> Result<(), ChangeSetError> {
        let numbers = number_form(self.version)?;
        self.check_costs()?;
        let actual = self.compute_digest()?;
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
                plan.verify_with(numbers)
                    .map_err(ChangeSetError::MemberPlan)?;
                if m.plan_digest.as_ref() != Some(&plan.plan_digest) || plan.member != m.member {
                    return Err(ChangeSetError::MemberPlan(format!(
                        "{}: the stored plan is not the one its digest names",
                        m.member
                    )));
                }
            }
        }
        Ok(())
    }

    #[cfg(test)]
    /// Parses and verifies a stored change set.
    pub(crate) fn from_json(bytes: &[u8]) -> Result<Self, ChangeSetError> {
        let set: Self =
            serde_json::from_slice(bytes).map_err(|e| ChangeSetError::Malformed(e.to_string()))?;
        set.verify()?;
        Ok(set)
    }

    /// A member's line, by its name or its id.
    pub(crate) fn member(&self, name: impl AsRef<str>) -> Option<&ChangeSetMember> {
        let name = name.as_ref();
        self.members.iter().find(|m| m.member == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(member: &str, body: &str) -> ChangeSetMember {
        let plan = MemberPlan::parse(&member.into(), body.as_bytes()).unwrap();
        ChangeSetMember {
            member: member.into(),
            status: MemberStatus::Planned,
            plan_digest: Some(plan.plan_digest.clone()),
            unknown_inputs: vec![],
            build_inputs: vec![],
            group_inputs: vec![],
            discovered: None,
            inputs: Map::new(),
            plan: Some(plan),
            ran_on: None,
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

    const NO_OP: &str =
        r#"{"entries": [{"address": "y", "action": "no-op", "after": {"arn": "arn:1"}}]}"#;

    #[test]
    fn under_changing_a_member_that_changes_nothing_is_left_out_of_the_digest() {
        let set = |no_op: &str, create: &str, over| {
            ChangeSet::binding(
                vec![planned("a@dev", create), planned("b@dev", no_op)],
                over,
            )
            .unwrap()
        };
        let moved_no_op = NO_OP.replace("arn:1", "arn:2");
        let changing = set(NO_OP, CREATE, DigestOver::Changing);
        assert!(changing.binds(&changing.members[0]));
        assert!(!changing.binds(&changing.members[1]));
        assert_eq!(
            changing.digest,
            set(&moved_no_op, CREATE, DigestOver::Changing).digest,
            "the no-op member moving moves nothing"
        );
        assert_ne!(
            changing.digest,
            set(NO_OP, &CREATE.replace("1", "2"), DigestOver::Changing).digest,
            "a changing member moving still does"
        );

        let all = set(NO_OP, CREATE, DigestOver::All);
        assert_ne!(
            all.digest,
            set(&moved_no_op, CREATE, DigestOver::All).digest
        );
        assert_ne!(all.digest, changing.digest, "the setting is bound too");
        assert_eq!(
            ChangeSet::binding(vec![planned("a@dev", CREATE)], DigestOver::All)
                .unwrap()
                .digest,
            ChangeSet::new(vec![planned("a@dev", CREATE)])
                .unwrap()
                .digest,
        );

        // A record keeps what it binds, and reads back verified.
        let text = serde_json::to_string(&changing).unwrap();
        assert!(text.contains(r#""over":"changing""#), "{text}");
        assert!(!serde_json::to_string(&all).unwrap().contains("over"));
        assert_eq!(ChangeSet::from_json(text.as_bytes()).unwrap(), changing);
    }

    #[test]
    fn duplicates_are_refused() {
        let e =
            ChangeSet::new(vec![planned("a@dev", CREATE), planned("a@dev", CREATE)]).unwrap_err();
        assert_eq!(e, ChangeSetError::DuplicateMember("a@dev".into()));
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

    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/changeset")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// `v1-record.json` was written by `make_v1_record.py`, independently of
    /// this code, as version 1 stored a set: integers beyond 2^53 exact.
    #[test]
    fn a_version_1_record_written_before_still_verifies() {
        let bytes = fixture("v1-record.json");
        let set = ChangeSet::from_json(&bytes).unwrap();
        assert_eq!(set.version, 1);
        // Version 1 told 2^53 + 1 from 2^53, and still does for its records.
        let text = String::from_utf8(bytes).unwrap();
        let moved = text.replace("9007199254740993", "9007199254740992");
        assert_ne!(moved, text);
        assert!(matches!(
            ChangeSet::from_json(moved.as_bytes()),
            Err(ChangeSetError::MemberPlan(_))
        ));
        // The same content read as version 2 is not what was digested.
        let relabelled = text.replacen("\"version\": 1", "\"version\": 2", 1);
        assert!(matches!(
            ChangeSet::from_json(relabelled.as_bytes()),
            Err(ChangeSetError::DigestMismatch { .. })
        ));
    }

    /// A new set of the same plan is version 2, and its digests are the ones
    /// an independent JCS computes (`make_v2_expected.js`: JavaScript's own
    /// JSON with sorted keys).
    #[test]
    fn a_new_set_is_version_2_and_any_jcs_derives_its_digests() {
        let stored: Value = serde_json::from_slice(&fixture("v1-record.json")).unwrap();
        let expected: Value = serde_json::from_slice(&fixture("v2-expected.json")).unwrap();
        let member = &stored["members"][0];
        let plan_file = json!({
            "summary": member["plan"]["summary"],
            "entries": member["plan"]["entries"],
            "outputs": member["plan"]["outputs"],
        });
        let plan = MemberPlan::parse(&"app@prod".into(), plan_file.to_string().as_bytes()).unwrap();
        assert_eq!(plan.plan_digest, expected["planDigest"].as_str().unwrap());
        assert_ne!(
            plan.plan_digest,
            member["planDigest"].as_str().unwrap(),
            "the big integers move the plan digest between the rules"
        );
        let set = ChangeSet::new(vec![ChangeSetMember {
            inputs: member["inputs"].as_object().unwrap().clone(),
            ..planned("app@prod", &plan_file.to_string())
        }])
        .unwrap();
        assert_eq!(set.version, CHANGE_SET_VERSION);
        assert_eq!(CHANGE_SET_VERSION, 2);
        assert_eq!(set.digest, expected["setDigest"].as_str().unwrap());
        let text = serde_json::to_string(&set).unwrap();
        assert_eq!(ChangeSet::from_json(text.as_bytes()).unwrap(), set);
    }

    #[test]
    fn plans_without_big_integers_digest_alike_under_both_versions() {
        let plan = planned("a@dev", CREATE).plan.unwrap();
        assert_eq!(
            plan.compute_digest_with(NumberForm::Version1),
            plan.plan_digest
        );
    }

    #[test]
    fn a_version_this_release_does_not_know_is_refused_by_name() {
        let mut set = ChangeSet::new(vec![planned("a@dev", CREATE)]).unwrap();
        set.version = 3;
        let error = set.verify().unwrap_err();
        assert_eq!(error, ChangeSetError::UnknownVersion(3));
        let text = error.to_string();
        assert!(
            text.contains("version 3") && text.contains("reads versions 1 and 2"),
            "{text}"
        );
    }

    fn priced(monthly: &str) -> StageCost {
        let figures = crate::plan::cost::Figures {
            currency: "USD".into(),
            members: [(
                "a@dev".to_owned(),
                crate::plan::cost::MemberCost {
                    monthly: monthly.parse().unwrap(),
                    past: crate::model::Money::ZERO,
                },
            )]
            .into(),
        };
        StageCost::priced("dev", figures, None)
    }

    #[test]
    fn a_stages_cost_is_one_more_member_the_digest_binds() {
        let plain = ChangeSet::new(vec![planned("a@dev", CREATE)]).unwrap();
        let at_120 = plain.clone().with_costs(vec![priced("120")]).unwrap();
        let at_900 = plain.clone().with_costs(vec![priced("900")]).unwrap();
        assert_ne!(at_120.digest, plain.digest);
        assert_ne!(
            at_120.digest, at_900.digest,
            "a cost moving moves the digest"
        );
        assert_eq!(at_120.cost("dev").unwrap().member, "cost@dev");
        assert!(!serde_json::to_string(&plain).unwrap().contains("costs"));

        let text = serde_json::to_string(&at_120).unwrap();
        assert_eq!(ChangeSet::from_json(text.as_bytes()).unwrap(), at_120);
        let tampered = text.replace(r#""monthly":"120.00""#, r#""monthly":"12.00""#);
        assert_ne!(tampered, text);
        assert!(matches!(
            ChangeSet::from_json(tampered.as_bytes()),
            Err(ChangeSetError::CostMismatch { .. })
        ));

        let clash = ChangeSet::new(vec![planned("cost@dev", CREATE)])
            .unwrap()
            .with_costs(vec![priced("1")]);
        assert_eq!(
            clash.unwrap_err(),
            ChangeSetError::CostClash("cost@dev".into())
        );
    }
}
