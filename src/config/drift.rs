//! `[drift]` and each stage's `drift`: how often the default branch's head
//! is planned against what is deployed, stage by stage, and whether a
//! drifted stage gets one issue per member or one for the stage. Read from
//! the default branch only: a pull request never changes the schedule.

use super::check::ConfigError;
use super::raw::{DriftIssues, RawDrift, RawStage};
use crate::model::time::parse_duration;
use crate::model::StageName;
use std::collections::BTreeMap;
use std::time::Duration;

/// The drift schedule as validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DriftRules {
    /// The stages checked, each with its interval (a stage that is off is absent).
    pub(crate) every: BTreeMap<StageName, Duration>,
    pub(crate) issues: DriftIssues,
}

impl DriftRules {
    /// Every stage checked, each with its interval, at least `floor`.
    pub(crate) fn checked(&self, floor: Duration) -> Vec<(StageName, Duration)> {
        self.every
            .iter()
            .map(|(stage, every)| (stage.clone(), (*every).max(floor)))
            .collect()
    }

    /// How often `stage` is checked, at least `floor` (the operator's
    /// `WAVEGATE_DRIFT_MIN_INTERVAL`); `None`: never.
    pub(crate) fn interval(&self, stage: &str, floor: Duration) -> Option<Duration> {
        self.every.get(stage).map(|every| (*every).max(floor))
    }
}

/// A stage's `drift`: `"off"` or how often.
fn stage_setting(text: &str) -> Result<Option<Duration>, String> {
    if text.trim() == "off" {
        return Ok(None);
    }
    parse_duration(text).map(Some)
}

pub(crate) fn validate(
    raw: Option<&RawDrift>,
    stages: &[RawStage],
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<DriftRules, ConfigError> {
    const FIX: &str = "write how often, with a unit (`6h`, `30m`, `1d`), or `\"off\"`";
    let every = match raw.and_then(|d| d.every.as_deref()) {
        Some(text) => {
            stage_setting(text).map_err(|problem| err("drift.every".into(), problem, FIX))?
        }
        None => None,
    };
    let mut rules = DriftRules {
        every: BTreeMap::new(),
        issues: raw.and_then(|d| d.issues).unwrap_or_default(),
    };
    for (i, stage) in stages.iter().enumerate() {
        let own = match stage.drift.as_deref() {
            Some(text) => Some(stage_setting(text).map_err(|problem| {
                err(format!("stage[{i}] ({}).drift", stage.name), problem, FIX)
            })?),
            None => None,
        };
        if let Some(interval) = own.unwrap_or(every) {
            rules
                .every
                .insert(StageName::new(stage.name.clone()), interval);
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Result<DriftRules, String> {
        crate::config::RepoConfig::parse("wavegate.toml", text)
            .map(|c| c.drift)
            .map_err(|e| e.to_string())
    }

    const COMPONENT: &str =
        "[[component]]\nname = \"net\"\ndir = \"net\"\nplan = [\"true\"]\napply = [\"true\"]\n";

    #[test]
    fn every_stage_is_checked_as_the_top_level_says_unless_it_says_otherwise() {
        let text = format!(
            "[drift]\nevery = \"6h\"\n[[stage]]\nname = \"dev\"\ndrift = \"off\"\n[[stage]]\nname = \"prod\"\ndrift = \"30m\"\n[[stage]]\nname = \"qa\"\n{COMPONENT}"
        );
        let rules = rules(&text).unwrap();
        assert_eq!(rules.interval("dev", Duration::ZERO), None);
        assert_eq!(
            rules.interval("prod", Duration::ZERO),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(
            rules.interval("qa", Duration::ZERO),
            Some(Duration::from_secs(6 * 3600))
        );
        assert_eq!(rules.issues, DriftIssues::Member);
    }

    #[test]
    fn the_operators_floor_raises_a_shorter_interval() {
        let text = format!("[drift]\nevery = \"1m\"\n[[stage]]\nname = \"dev\"\n{COMPONENT}");
        let rules = rules(&text).unwrap();
        assert_eq!(
            rules.interval("dev", Duration::from_secs(900)),
            Some(Duration::from_secs(900))
        );
    }

    #[test]
    fn without_drift_nothing_is_checked_and_a_stage_may_ask_for_itself() {
        let text = format!("[[stage]]\nname = \"dev\"\n[[stage]]\nname = \"prod\"\ndrift = \"1d\"\n[drift]\nissues = \"stage\"\n{COMPONENT}");
        let rules = rules(&text).unwrap();
        assert_eq!(rules.interval("dev", Duration::ZERO), None);
        assert_eq!(
            rules.interval("prod", Duration::ZERO),
            Some(Duration::from_secs(86400))
        );
        assert_eq!(rules.issues, DriftIssues::Stage);
    }

    #[test]
    fn a_setting_that_does_not_read_names_its_field_and_the_fix() {
        let text = format!("[[stage]]\nname = \"prod\"\ndrift = \"often\"\n{COMPONENT}");
        let error = rules(&text).unwrap_err();
        assert!(error.contains("stage[0] (prod).drift"), "{error}");
        assert!(error.contains("`\"off\"`"), "{error}");
        let text = format!("[drift]\nissues = \"repo\"\n[[stage]]\nname = \"prod\"\n{COMPONENT}");
        let error = rules(&text).unwrap_err();
        assert!(error.contains("repo"), "{error}");
    }
}
