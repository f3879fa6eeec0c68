//! Cost in the digest: what a stage's `cost` command (Infracost, or the
//! team's own) says its plans cost a month, read from the file it writes,
//! judged against `[policy] max_monthly_increase`, and bound as the extra
//! member `cost@<stage>` of the change set and the stage's sets: an approval
//! given at one cost does not cover a plan at another.
//!
//! The file is Infracost's JSON (`infracost breakdown --format json`), of
//! which only this is read: `currency`, and per project its `name` (the
//! member, `component@stage`), `breakdown.totalMonthlyCost` and
//! `pastBreakdown.totalMonthlyCost` (what it costs before the change).

use crate::model::canonical::digest_value;
use crate::model::{Digest, MemberId, Money, StageName};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub(crate) use crate::config::cost::COST_COMPONENT;

/// The policy rule a stage's cost is denied by when it rises too much.
pub(crate) const INCREASE_RULE: &str = "max_monthly_increase";

/// The most a cost file may hold.
pub(crate) const MAX_COST_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Whether a denial of `member` by `rules` is a stage's cost rising too
/// much (rather than a plan the policy denied).
pub(crate) fn is_cost_denial(member: &MemberId, rules: &[String]) -> bool {
    member.component() == COST_COMPONENT && rules == [INCREASE_RULE]
}

/// Whether a round's reason is a stage's cost that moved.
pub(crate) fn is_cost_reason(reason: &str) -> bool {
    reason.starts_with(&format!("{COST_COMPONENT}@"))
}

/// The cost member of `stage`.
pub(crate) fn cost_member(stage: &str) -> MemberId {
    MemberId::of(COST_COMPONENT, stage)
}

/// One member's monthly cost with the change, and without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemberCost {
    pub(crate) monthly: Money,
    pub(crate) past: Money,
}

impl MemberCost {
    pub(crate) fn increase(&self) -> Money {
        self.monthly.saturating_sub(self.past)
    }
}

/// What a cost file says: the currency and each priced member's figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Figures {
    pub(crate) currency: String,
    pub(crate) members: BTreeMap<String, MemberCost>,
}

/// A stage's cost, as the change set records it and its digest binds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct StageCost {
    /// `cost@<stage>`.
    pub(crate) member: MemberId,
    pub(crate) stage: StageName,
    #[serde(default)]
    pub(crate) currency: String,
    /// The members the file priced; one it left out is not priced.
    #[serde(default)]
    pub(crate) members: BTreeMap<String, MemberCost>,
    /// The policy rules that deny it (`max_monthly_increase`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) denied: Vec<String>,
    /// The cap it was judged by, for the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_increase: Option<Money>,
    /// Why there are no figures: the command failed or its file did not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    pub(crate) digest: Digest,
}

impl StageCost {
    /// The stage's figures judged by the policy's cap: denied when the
    /// monthly cost rises by more than `max_increase`.
    pub(crate) fn priced(stage: &str, figures: Figures, max_increase: Option<Money>) -> Self {
        let mut cost = StageCost {
            member: cost_member(stage),
            stage: StageName::new(stage),
            currency: figures.currency,
            members: figures.members,
            denied: Vec::new(),
            max_increase,
            error: None,
            digest: Digest::repeated('0'),
        };
        if max_increase.is_some_and(|max| cost.increase() > max) {
            cost.denied.push(INCREASE_RULE.to_owned());
        }
        cost.digest = cost.compute_digest();
        cost
    }

    /// A stage whose cost could not be had, and why.
    pub(crate) fn failed(stage: &str, error: String) -> Self {
        let mut cost = StageCost {
            member: cost_member(stage),
            stage: StageName::new(stage),
            currency: String::new(),
            members: BTreeMap::new(),
            denied: Vec::new(),
            max_increase: None,
            error: Some(error),
            digest: Digest::repeated('0'),
        };
        cost.digest = cost.compute_digest();
        cost
    }

    pub(crate) fn total(&self) -> Money {
        self.members.values().map(|m| m.monthly).sum()
    }

    pub(crate) fn past_total(&self) -> Money {
        self.members.values().map(|m| m.past).sum()
    }

    pub(crate) fn increase(&self) -> Money {
        self.total().saturating_sub(self.past_total())
    }

    /// What the digest binds: each member's monthly cost, the currency,
    /// the denial and whether it failed (not the error's wording, nor the
    /// figures before the change, which are what the base costs).
    pub(crate) fn bound(&self) -> Value {
        let monthly: BTreeMap<&str, Money> = self
            .members
            .iter()
            .map(|(m, c)| (m.as_str(), c.monthly))
            .collect();
        json!({
            "member": self.member,
            "cost": {
                "currency": self.currency,
                "monthly": monthly,
                "denied": self.denied,
                "failed": self.error.is_some(),
            },
        })
    }

    pub(crate) fn compute_digest(&self) -> Digest {
        digest_value(&self.bound())
    }

    /// Whether this is the cost `was` was: the same bound figures.
    pub(crate) fn same_as(&self, was: &StageCost) -> bool {
        self.member == was.member && self.bound() == was.bound()
    }

    /// Why an approval of `was` does not cover this cost: the totals and
    /// each member whose monthly figure moved.
    pub(crate) fn moved_from(&self, was: &StageCost) -> String {
        let currency = |c: &StageCost| {
            if c.currency.is_empty() {
                String::new()
            } else {
                format!(" {}", c.currency)
            }
        };
        let mut moved: Vec<String> = Vec::new();
        let names: std::collections::BTreeSet<&String> =
            self.members.keys().chain(was.members.keys()).collect();
        for name in names {
            let before = was.members.get(name).map(|c| c.monthly);
            let now = self.members.get(name).map(|c| c.monthly);
            if before != now {
                let show = |m: Option<Money>| m.map_or("not priced".to_owned(), |m| m.to_string());
                moved.push(format!("{name} {} → {}", show(before), show(now)));
            }
        }
        let mut reason = format!(
            "{}: the monthly cost moved from {}{} to {}{} ({}) since the approved plan",
            self.member,
            was.total(),
            currency(was),
            self.total(),
            currency(self),
            self.total().saturating_sub(was.total()).signed()
        );
        if !moved.is_empty() {
            reason.push_str(&format!(": {}", moved.join(", ")));
        }
        if was.currency != self.currency {
            reason.push_str(&format!(
                "; the currency moved from `{}` to `{}`",
                was.currency, self.currency
            ));
        }
        if was.denied != self.denied {
            reason.push_str(&format!(
                "; policy denials changed from {:?} to {:?}",
                was.denied, self.denied
            ));
        }
        if let Some(error) = &self.error {
            reason = format!("{}: its cost could not be had: {error}", self.member);
        } else if was.error.is_some() {
            reason = format!(
                "{}: the approved plan could not be priced; the stage now costs {}{} a month",
                self.member,
                self.total(),
                currency(self)
            );
        }
        reason
    }
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    projects: Vec<RawProject>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProject {
    name: String,
    #[serde(default)]
    breakdown: Option<RawBreakdown>,
    #[serde(default)]
    past_breakdown: Option<RawBreakdown>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBreakdown {
    #[serde(default)]
    total_monthly_cost: Money,
}

/// Reads a cost file for `members`: each project named after one of them,
/// once. What is wrong is said with what to write instead.
pub(crate) fn read_cost_file(bytes: &[u8], members: &[MemberId]) -> Result<Figures, String> {
    let raw: RawFile = serde_json::from_slice(bytes).map_err(|e| {
        format!("the cost file is not Infracost's JSON ({e}); write {{\"currency\": \"USD\", \"projects\": [{{\"name\": \"<component@stage>\", \"breakdown\": {{\"totalMonthlyCost\": \"12.50\"}}, \"pastBreakdown\": {{\"totalMonthlyCost\": \"10.00\"}}}}]}}")
    })?;
    let mut figures = Figures {
        currency: raw.currency.unwrap_or_default(),
        members: BTreeMap::new(),
    };
    for project in raw.projects {
        if !members.iter().any(|m| *m == project.name) {
            let names: Vec<&str> = members.iter().map(MemberId::as_str).collect();
            return Err(format!(
                "the cost file prices `{}`, which is not one of the stage's members ({}); name each project after its member (`name` in Infracost's config file)",
                project.name,
                names.join(", ")
            ));
        }
        let cost = MemberCost {
            monthly: project
                .breakdown
                .map_or(Money::ZERO, |b| b.total_monthly_cost),
            past: project
                .past_breakdown
                .map_or(Money::ZERO, |b| b.total_monthly_cost),
        };
        if figures.members.insert(project.name.clone(), cost).is_some() {
            return Err(format!(
                "the cost file prices `{}` twice; give each member one project",
                project.name
            ));
        }
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> Vec<MemberId> {
        vec![MemberId::of("app", "prod"), MemberId::of("db", "prod")]
    }

    fn file(app: &str, app_past: &str) -> String {
        json!({
            "version": "0.2",
            "currency": "USD",
            "totalMonthlyCost": "ignored",
            "projects": [
                {"name": "app@prod", "breakdown": {"totalMonthlyCost": app, "resources": []},
                 "pastBreakdown": {"totalMonthlyCost": app_past}},
                {"name": "db@prod", "breakdown": {"totalMonthlyCost": "30"}, "pastBreakdown": null},
            ],
        })
        .to_string()
    }

    fn priced(app: &str, max: Option<&str>) -> StageCost {
        let figures = read_cost_file(file(app, "100").as_bytes(), &members()).unwrap();
        StageCost::priced("prod", figures, max.map(|m| m.parse().unwrap()))
    }

    #[test]
    fn infracost_json_is_read_per_member_and_totalled() {
        let cost = priced("120.004", None);
        assert_eq!(cost.member, "cost@prod");
        assert_eq!(cost.currency, "USD");
        assert_eq!(cost.members["app@prod"].monthly.to_string(), "120.00");
        assert_eq!(cost.members["db@prod"].past, Money::ZERO, "a new project");
        assert_eq!(
            (cost.total().to_string(), cost.past_total().to_string()),
            ("150.00".into(), "100.00".into())
        );
        assert_eq!(cost.increase().signed(), "+50.00");
        assert!(cost.denied.is_empty());
    }

    #[test]
    fn the_digest_binds_the_monthly_figures_and_the_denial_not_what_the_base_costs() {
        let at_120 = priced("120", None);
        assert_eq!(at_120.digest, priced("120.001", None).digest, "to the cent");
        assert_ne!(at_120.digest, priced("900", None).digest);
        let past_moved = read_cost_file(file("120", "90").as_bytes(), &members())
            .map(|f| StageCost::priced("prod", f, None));
        assert_eq!(past_moved.unwrap().digest, at_120.digest);
        let denied = priced("120", Some("40"));
        assert_eq!(denied.denied, [INCREASE_RULE]);
        assert_ne!(denied.digest, at_120.digest, "the denial is bound");
        assert!(
            priced("120", Some("50")).denied.is_empty(),
            "at the cap is allowed"
        );
        assert_ne!(
            StageCost::failed("prod", "x".into()).digest,
            StageCost::priced("prod", Figures::default(), None).digest
        );
    }

    #[test]
    fn a_moved_cost_names_the_old_and_new_figures() {
        let reason = priced("900", None).moved_from(&priced("120", None));
        assert_eq!(
            reason,
            "cost@prod: the monthly cost moved from 150.00 USD to 930.00 USD (+780.00) since the approved plan: app@prod 120.00 → 900.00"
        );
        assert!(priced("120", None).same_as(&priced("120", None)));
        assert!(!priced("900", None).same_as(&priced("120", None)));
    }

    #[test]
    fn a_file_that_does_not_read_says_what_to_write() {
        for (text, expected) in [
            ("not json", "is not Infracost's JSON"),
            (
                r#"{"projects": [{"name": "web@prod"}]}"#,
                "prices `web@prod`, which is not one of the stage's members",
            ),
            (
                r#"{"projects": [{"name": "app@prod"}, {"name": "app@prod"}]}"#,
                "prices `app@prod` twice",
            ),
            (
                r#"{"projects": [{"name": "app@prod", "breakdown": {"totalMonthlyCost": "a lot"}}]}"#,
                "`a lot` is not an amount",
            ),
        ] {
            let e = read_cost_file(text.as_bytes(), &members()).unwrap_err();
            assert!(e.contains(expected), "{text}: {e}");
        }
    }
}
