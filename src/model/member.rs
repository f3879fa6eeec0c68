//! A member, one component in one stage (`app@prod`), and a stage's name.
//! Component and stage names are letters, digits, `-`, `_` and `.` (the
//! config refuses others), so `@` splits a member unambiguously.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A stage's name, as `[[stage]] name` spells it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StageName(String);

impl StageName {
    pub(crate) fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for StageName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// One component in one stage: `component@stage`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MemberId {
    component: String,
    stage: StageName,
}

impl MemberId {
    pub(crate) fn new(component: impl Into<String>, stage: impl Into<String>) -> Self {
        Self {
            component: component.into(),
            stage: StageName::new(stage),
        }
    }

    /// The member's name without building one: `component@stage`.
    pub(crate) fn name_of(component: &str, stage: &str) -> String {
        format!("{component}@{stage}")
    }

    pub(crate) fn component(&self) -> &str {
        &self.component
    }

    pub(crate) fn stage(&self) -> &StageName {
        &self.stage
    }
}

/// Compares with a member as written (`app@prod`), without building one.
impl PartialEq<str> for MemberId {
    fn eq(&self, other: &str) -> bool {
        other.split_once('@') == Some((self.component.as_str(), self.stage.as_str()))
    }
}

impl FromStr for MemberId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('@') {
            Some((component, stage))
                if !component.is_empty() && !stage.is_empty() && !stage.contains('@') =>
            {
                Ok(Self::new(component, stage))
            }
            _ => Err(format!(
                "`{text}` is not a member: write it `component@stage`, like `app@prod`"
            )),
        }
    }
}

impl TryFrom<String> for MemberId {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<MemberId> for String {
    fn from(member: MemberId) -> Self {
        member.to_string()
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Self::name_of(&self.component, self.stage.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_and_writes_component_at_stage() {
        let member: MemberId = "app@prod".parse().unwrap();
        assert_eq!(
            (member.component(), member.stage().as_str()),
            ("app", "prod")
        );
        assert_eq!(member.to_string(), "app@prod");
        assert_eq!(member, MemberId::new("app", "prod"));
        for bad in ["app", "@prod", "app@", "a@b@c", ""] {
            let error = bad.parse::<MemberId>().unwrap_err();
            assert!(error.contains("component@stage"), "{bad}: {error}");
        }
        let json = serde_json::to_string(&member).unwrap();
        assert_eq!(json, "\"app@prod\"");
        assert_eq!(serde_json::from_str::<MemberId>(&json).unwrap(), member);
    }

    #[test]
    fn members_sort_by_component_then_stage() {
        let mut members: Vec<MemberId> = ["dns@prod", "app@prod", "app@dev"]
            .iter()
            .map(|m| m.parse().unwrap())
            .collect();
        members.sort();
        let sorted: Vec<String> = members.iter().map(ToString::to_string).collect();
        assert_eq!(sorted, ["app@dev", "app@prod", "dns@prod"]);
    }
}
