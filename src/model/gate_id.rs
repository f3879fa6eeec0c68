//! Where an approval is recorded in the ledger: a pull request's gate
//! (`pr-42`), a stage's after merge (`pr-42-prod`), one dependency wave's of
//! a stage gated wave by wave (`pr-42-prod-wave-2`), a round of re-planned
//! members (`pr-42-round-2`) and an override of a denied plan
//! (`pr-42-override`). These names are stored in every fact, so their
//! spelling never changes; the config reserves `override`, `round-<n>`,
//! `hook-…` and `…-wave-<n>` as stage names so that every name reads back
//! as the gate it was written for.

use super::ids::PrNumber;
use super::member::StageName;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GateId {
    /// The pull request's change set.
    Pr(PrNumber),
    /// A stage's own approval of its plans on the merge commit.
    Stage(PrNumber, StageName),
    /// The approval of one dependency wave (1-based) of a stage gated wave
    /// by wave (`gate_scope = "wave"`), of that wave's plans on the merge
    /// commit.
    Wave(PrNumber, StageName, u32),
    /// Members re-planned after merge whose plans moved (the `n`th round).
    Round(PrNumber, u32),
    /// An override of a policy's denial.
    Override(PrNumber),
    /// A hook's own gate (`on_failure = "approve"`), or the gate a hook
    /// holds a stage on: named by the hook, or by what it wrote.
    Hook(PrNumber, String),
}

impl GateId {
    /// The pull request's gate, or `stage`'s when given.
    pub(crate) fn of(pr: PrNumber, stage: Option<&str>) -> Self {
        match stage {
            Some(stage) => Self::Stage(pr, StageName::new(stage)),
            None => Self::Pr(pr),
        }
    }

    #[cfg(test)]
    pub(crate) fn pr(&self) -> PrNumber {
        match self {
            Self::Pr(pr)
            | Self::Stage(pr, _)
            | Self::Wave(pr, _, _)
            | Self::Round(pr, _)
            | Self::Override(pr)
            | Self::Hook(pr, _) => *pr,
        }
    }

    /// The gate of a stage after merge: the stage's own, or with `wave`
    /// (1-based) that wave's of a stage gated wave by wave.
    pub(crate) fn of_stage(pr: PrNumber, stage: &str, wave: Option<u32>) -> Self {
        match wave {
            Some(wave) => Self::Wave(pr, StageName::new(stage), wave),
            None => Self::Stage(pr, StageName::new(stage)),
        }
    }

    /// What a reviewer writes to approve at this gate, before the digest:
    /// `/approve prod`, `/approve prod wave 2`; `/approve` at the others
    /// (the run binds it to the gate it waits at).
    pub(crate) fn approve_words(&self) -> String {
        match self {
            Self::Stage(_, stage) => approve_stage_words(stage.as_str(), None),
            Self::Wave(_, stage, wave) => approve_stage_words(stage.as_str(), Some(*wave)),
            _ => "/approve".to_owned(),
        }
    }

    /// Where the run's record keeps this gate, for a stage's or a wave's.
    pub(crate) fn stage_gate_key(&self) -> Option<String> {
        match self {
            Self::Stage(_, stage) => Some(stage_gate_key(stage.as_str(), None)),
            Self::Wave(_, stage, wave) => Some(stage_gate_key(stage.as_str(), Some(*wave))),
            _ => None,
        }
    }

    /// Whether `name` may be a stage's: not one a gate of another kind ends in.
    pub(crate) fn is_reserved_stage_name(name: &str) -> bool {
        name == "override"
            || round_number(name).is_some()
            || name.starts_with("hook-")
            || stage_wave(name).is_some()
    }
}

fn round_number(suffix: &str) -> Option<u32> {
    canonical_number(suffix.strip_prefix("round-")?)
}

/// `<stage>-wave-<n>`, as a wave's gate ends: the stage (not empty) and `n`.
fn stage_wave(suffix: &str) -> Option<(&str, u32)> {
    let (stage, wave) = suffix.rsplit_once("-wave-")?;
    Some((stage, canonical_number(wave)?)).filter(|(stage, _)| !stage.is_empty())
}

/// What a reviewer writes to approve `stage`'s gate after merge, or one
/// wave's of it, before the digest.
pub(crate) fn approve_stage_words(stage: &str, wave: Option<u32>) -> String {
    match wave {
        Some(wave) => format!("/approve {stage} wave {wave}"),
        None => format!("/approve {stage}"),
    }
}

/// Where [`crate::apply::AttemptRecord`] keeps a stage gate: by its stage's
/// name, or `<stage> wave <n>` for one wave's (a space, which no stage name
/// has).
pub(crate) fn stage_gate_key(stage: &str, wave: Option<u32>) -> String {
    match wave {
        Some(wave) => format!("{stage} wave {wave}"),
        None => stage.to_owned(),
    }
}

/// A number as `Display` writes it: digits, no leading zero, so that a name
/// reads back as the gate that prints it.
fn canonical_number<T: FromStr>(digits: &str) -> Option<T> {
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

impl fmt::Display for GateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pr(pr) => write!(f, "pr-{}", pr.0),
            Self::Stage(pr, stage) => write!(f, "pr-{}-{stage}", pr.0),
            Self::Wave(pr, stage, wave) => write!(f, "pr-{}-{stage}-wave-{wave}", pr.0),
            Self::Round(pr, round) => write!(f, "pr-{}-round-{round}", pr.0),
            Self::Override(pr) => write!(f, "pr-{}-override", pr.0),
            Self::Hook(pr, name) => write!(f, "pr-{}-hook-{name}", pr.0),
        }
    }
}

impl FromStr for GateId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("`{text}` is not a gate (`pr-<n>`, `pr-<n>-<stage>`, `pr-<n>-<stage>-wave-<n>`, `pr-<n>-round-<n>`, `pr-<n>-override` or `pr-<n>-hook-<name>`)")
        };
        let rest = text.strip_prefix("pr-").ok_or_else(bad)?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let pr = PrNumber(canonical_number(&rest[..digits]).ok_or_else(bad)?);
        let suffix = &rest[digits..];
        if suffix.is_empty() {
            return Ok(Self::Pr(pr));
        }
        let suffix = suffix
            .strip_prefix('-')
            .filter(|s| !s.is_empty())
            .ok_or_else(bad)?;
        Ok(if suffix == "override" {
            Self::Override(pr)
        } else if let Some(name) = suffix.strip_prefix("hook-").filter(|n| !n.is_empty()) {
            Self::Hook(pr, name.to_owned())
        } else if let Some(round) = round_number(suffix) {
            Self::Round(pr, round)
        } else if let Some((stage, wave)) = stage_wave(suffix) {
            Self::Wave(pr, StageName::new(stage), wave)
        } else {
            Self::Stage(pr, StageName::new(suffix))
        })
    }
}

impl Serialize for GateId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GateId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gate_reads_back_as_the_gate_it_was_written_for() {
        let pr = PrNumber(42);
        for (gate, name) in [
            (GateId::Pr(pr), "pr-42"),
            (GateId::Stage(pr, StageName::new("prod")), "pr-42-prod"),
            (
                GateId::Stage(pr, StageName::new("eu-west.1")),
                "pr-42-eu-west.1",
            ),
            (GateId::Round(pr, 2), "pr-42-round-2"),
            (GateId::Override(pr), "pr-42-override"),
            (
                GateId::Hook(pr, "change-window".into()),
                "pr-42-hook-change-window",
            ),
            (
                GateId::Stage(pr, StageName::new("round-x")),
                "pr-42-round-x",
            ),
            (
                GateId::Stage(pr, StageName::new("round-01")),
                "pr-42-round-01",
            ),
            (
                GateId::Wave(pr, StageName::new("prod"), 2),
                "pr-42-prod-wave-2",
            ),
            (
                GateId::Wave(pr, StageName::new("eu-west"), 12),
                "pr-42-eu-west-wave-12",
            ),
            (
                GateId::Stage(pr, StageName::new("prod-wave-02")),
                "pr-42-prod-wave-02",
            ),
            (GateId::Stage(pr, StageName::new("wave-2")), "pr-42-wave-2"),
        ] {
            assert_eq!(gate.to_string(), name);
            assert_eq!(name.parse::<GateId>().unwrap(), gate, "{name}");
            assert_eq!(gate.pr(), pr);
        }
        assert_eq!(GateId::of(pr, Some("prod")).to_string(), "pr-42-prod");
        assert_eq!(GateId::of(pr, None), GateId::Pr(pr));
        assert_eq!(
            GateId::of_stage(pr, "prod", Some(3)).approve_words(),
            "/approve prod wave 3"
        );
        assert_eq!(
            GateId::of_stage(pr, "prod", None).approve_words(),
            "/approve prod"
        );
        assert_eq!(stage_gate_key("prod", Some(3)), "prod wave 3");
        assert_eq!(stage_gate_key("prod", None), "prod");
    }

    #[test]
    fn other_names_are_not_gates() {
        for bad in [
            "", "pr-", "pr-x", "42", "pr-42-", "pr-42x", "issue-42", "pr-042",
        ] {
            assert!(bad.parse::<GateId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn override_and_rounds_are_reserved_as_stage_names() {
        for reserved in ["override", "round-1", "round-12", "hook-x", "prod-wave-1"] {
            assert!(GateId::is_reserved_stage_name(reserved), "{reserved}");
        }
        for free in [
            "prod",
            "round",
            "round-",
            "round-x",
            "round-01",
            "overrides",
            "wave-1",
            "prod-wave-",
            "prod-wave-01",
        ] {
            assert!(!GateId::is_reserved_stage_name(free), "{free}");
        }
    }
}
