//! A member, one component in one stage (`app@prod`), and a stage's name.
//! Component and stage names are letters, digits, `-`, `_` and `.` (the
//! config refuses others), so `@` splits a member unambiguously.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

/// A stage's name, as `[[stage]] name` spells it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StageName(String);

impl StageName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A map or set keyed by stage names is read with a `&str`.
impl Borrow<str> for StageName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for StageName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for StageName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for StageName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for StageName {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<StageName> for str {
    fn eq(&self, other: &StageName) -> bool {
        self == other.0
    }
}

impl PartialEq<StageName> for &str {
    fn eq(&self, other: &StageName) -> bool {
        *self == other.0
    }
}

impl PartialEq<StageName> for String {
    fn eq(&self, other: &StageName) -> bool {
        *self == other.0
    }
}

/// A stage written as a literal in a unit test: `"prod".into()`.
#[cfg(test)]
impl From<&str> for StageName {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<StageName> for String {
    fn from(stage: StageName) -> Self {
        stage.0
    }
}

/// One component in one stage: `component@stage`. Held as its name, and
/// ordered, compared and hashed as that name is, so a list or map of members
/// sorts exactly as the same names did as strings (reports and digests over
/// sorted members do not move), and a map keyed by members is read with a
/// `&str` ([`Borrow`]).
#[derive(Clone, Deserialize)]
#[serde(try_from = "String")]
pub struct MemberId {
    name: String,
    /// Where the `@` is in `name`.
    at: usize,
}

impl MemberId {
    /// `component@stage` of a component and stage the config has checked
    /// (names of letters, digits, `-`, `_` and `.`).
    pub(crate) fn of(component: &str, stage: &str) -> Self {
        debug_assert!(!component.contains('@') && !stage.contains('@'));
        Self {
            name: Self::name_of(component, stage),
            at: component.len(),
        }
    }

    /// The member's name without building one: `component@stage`.
    pub(crate) fn name_of(component: &str, stage: &str) -> String {
        format!("{component}@{stage}")
    }

    pub(crate) fn component(&self) -> &str {
        &self.name[..self.at]
    }

    pub(crate) fn stage(&self) -> &str {
        &self.name[self.at + 1..]
    }

    /// `component@stage`.
    pub(crate) fn as_str(&self) -> &str {
        &self.name
    }
}

impl PartialEq for MemberId {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for MemberId {}

impl std::hash::Hash for MemberId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl PartialOrd for MemberId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MemberId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

impl Borrow<str> for MemberId {
    fn borrow(&self) -> &str {
        &self.name
    }
}

impl AsRef<str> for MemberId {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

/// Compares with a member as written (`app@prod`), without building one.
impl PartialEq<str> for MemberId {
    fn eq(&self, other: &str) -> bool {
        self.name == other
    }
}

impl PartialEq<&str> for MemberId {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

impl PartialEq<String> for MemberId {
    fn eq(&self, other: &String) -> bool {
        &self.name == other
    }
}

impl PartialEq<MemberId> for String {
    fn eq(&self, other: &MemberId) -> bool {
        *self == other.name
    }
}

impl PartialEq<MemberId> for str {
    fn eq(&self, other: &MemberId) -> bool {
        self == other.name
    }
}

impl PartialEq<MemberId> for &str {
    fn eq(&self, other: &MemberId) -> bool {
        *self == other.name
    }
}

impl FromStr for MemberId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('@') {
            Some((component, stage))
                if !component.is_empty() && !stage.is_empty() && !stage.contains('@') =>
            {
                Ok(Self {
                    name: text.to_owned(),
                    at: component.len(),
                })
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

/// A member written as a literal in a unit test: `"app@dev".into()`.
#[cfg(test)]
impl From<&str> for MemberId {
    fn from(text: &str) -> Self {
        text.parse()
            .expect("a test's member is written component@stage")
    }
}

impl From<MemberId> for String {
    fn from(member: MemberId) -> Self {
        member.name
    }
}

impl Serialize for MemberId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.name, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_and_writes_component_at_stage() {
        let member: MemberId = "app@prod".parse().unwrap();
        assert_eq!((member.component(), member.stage()), ("app", "prod"));
        assert_eq!(member.to_string(), "app@prod");
        assert_eq!(member, *"app@prod");
        for bad in ["app", "@prod", "app@", "a@b@c", ""] {
            let error = bad.parse::<MemberId>().unwrap_err();
            assert!(error.contains("component@stage"), "{bad}: {error}");
        }
        let json = serde_json::to_string(&member).unwrap();
        assert_eq!(json, "\"app@prod\"");
        assert_eq!(serde_json::from_str::<MemberId>(&json).unwrap(), member);
    }

    #[test]
    fn a_stage_name_reads_and_writes_as_its_name() {
        let stage = StageName::new("eu-west.1");
        assert_eq!(stage.to_string(), "eu-west.1");
        assert_eq!(stage, "eu-west.1");
        let json = serde_json::to_string(&stage).unwrap();
        assert_eq!(json, "\"eu-west.1\"");
        assert_eq!(serde_json::from_str::<StageName>(&json).unwrap(), stage);
        let by_stage: std::collections::BTreeMap<StageName, u8> =
            [(StageName::new("prod"), 1), (stage, 2)]
                .into_iter()
                .collect();
        assert_eq!(
            serde_json::to_string(&by_stage).unwrap(),
            r#"{"eu-west.1":2,"prod":1}"#
        );
        assert_eq!(by_stage.get("prod"), Some(&1));
    }

    #[test]
    fn members_sort_as_their_names_do() {
        let names = ["dns@prod", "app@prod", "app-edge@dev", "app@dev"];
        let mut members: Vec<MemberId> = names.iter().map(|m| m.parse().unwrap()).collect();
        members.sort();
        let mut sorted_names = names.to_vec();
        sorted_names.sort();
        let sorted: Vec<&str> = members.iter().map(MemberId::as_str).collect();
        assert_eq!(sorted, sorted_names);
        assert_eq!(sorted, ["app-edge@dev", "app@dev", "app@prod", "dns@prod"]);
        let by_member: std::collections::BTreeMap<MemberId, u8> =
            members.into_iter().zip(0..).collect();
        assert_eq!(by_member.get("app@dev"), Some(&1));
    }
}

/// A dependency wave as every report names it: `prod · wave 2`, numbered
/// within its stage from 1 (the terminal report, the comment, the run's
/// table and its check say the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaveName<'a> {
    pub stage: &'a str,
    pub number: usize,
}

impl fmt::Display for WaveName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} · wave {}", self.stage, self.number)
    }
}

impl WaveName<'_> {
    /// The name of each of `waves` (stages in order, each stage's layers in
    /// order, as a derivation lists them), numbered within its stage.
    pub fn of_each(waves: &[Vec<MemberId>]) -> Vec<WaveName<'_>> {
        let mut names: Vec<WaveName<'_>> = Vec::with_capacity(waves.len());
        for wave in waves {
            let stage = wave.first().map_or("", MemberId::stage);
            let number = match names.last() {
                Some(last) if last.stage == stage => last.number + 1,
                _ => 1,
            };
            names.push(WaveName { stage, number });
        }
        names
    }
}

#[cfg(test)]
mod wave_name_tests {
    use super::*;

    #[test]
    fn waves_are_numbered_within_their_stage() {
        let waves: Vec<Vec<MemberId>> = vec![
            vec!["net@dev".into()],
            vec!["app@dev".into()],
            vec!["net@prod".into()],
            vec!["app@prod".into(), "db@prod".into()],
        ];
        let names: Vec<String> = WaveName::of_each(&waves)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "dev · wave 1",
                "dev · wave 2",
                "prod · wave 1",
                "prod · wave 2"
            ]
        );
    }
}

/// What `/plan` names to plan again, as Atlantis' `plan` flags do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "by", content = "name")]
pub enum PlanTarget {
    /// `app` (or `-p app`): each of the component's members in the change.
    Component(String),
    /// `app@prod`: that member.
    Member(MemberId),
    /// `-d envs/prod/app`: the members planned in that directory.
    Dir(String),
    /// `-w prod`: the members of the stage of that name (a workspace per stage).
    Workspace(String),
}

impl fmt::Display for PlanTarget {
    /// As `/plan` reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Component(name) => f.write_str(name),
            Self::Member(member) => write!(f, "{member}"),
            Self::Dir(dir) => write!(f, "-d {dir}"),
            Self::Workspace(workspace) => write!(f, "-w {workspace}"),
        }
    }
}

/// What one drift issue is about: one member, or a whole stage when the
/// base tells a stage's drift in one issue (`[drift] issues = "stage"`).
/// Spelled as the member (`net@prod`) or the stage (`prod`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DriftSubject {
    Member(MemberId),
    Stage(StageName),
}

impl DriftSubject {
    pub fn stage(&self) -> &str {
        match self {
            Self::Member(member) => member.stage(),
            Self::Stage(stage) => stage.as_str(),
        }
    }

    /// Whether `member`'s drift is told in this subject's issue.
    pub fn covers(&self, member: &MemberId) -> bool {
        match self {
            Self::Member(own) => own == member,
            Self::Stage(stage) => member.stage() == stage.as_str(),
        }
    }
}

impl fmt::Display for DriftSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Member(member) => member.fmt(f),
            Self::Stage(stage) => f.write_str(stage.as_str()),
        }
    }
}

impl FromStr for DriftSubject {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.contains('@') {
            return text.parse().map(Self::Member);
        }
        if text.is_empty() {
            return Err("a drift subject is a member `component@stage` or a stage".into());
        }
        Ok(Self::Stage(StageName::new(text)))
    }
}
