//! What happens after merge, as the base branch decides it: each stage's gate
//! and who may approve it, who may approve the pull request, and which of the
//! pull request's own edits to those settings count only once it is merged.
//!
//! Read from the base's `wavegate.toml` with the same rules the gates use
//! (`gate_of`, `stage_policy`): a file or stage missing at the base reads as
//! the strictest setting. Pure: the engine hands in the texts it read.

use crate::config::repo::{
    gate_of, gate_scope_of, stage_policy, GatePolicy, GateScope, Policy, RawRepoConfig, RepoConfig,
    CONFIG_FILE,
};
use crate::model::{MemberId, StageName};
use serde::{Deserialize, Serialize};

/// The base branch's config as the gates will read it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "problem")]
pub(crate) enum BaseConfig {
    Read,
    /// No `wavegate.toml` at the base: every gate `always`, the default policy.
    Absent,
    /// It does not parse: every gate `always`, approvals refused until fixed.
    Invalid(String),
}

/// Who may approve one gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Approvers {
    /// Empty: anyone with write access.
    pub(crate) approvers: Vec<String>,
    pub(crate) required: u32,
    pub(crate) author_may: bool,
    pub(crate) pusher_may: bool,
    pub(crate) reviews_count: bool,
    /// `[policy] approval_ttl` as written.
    pub(crate) ttl: Option<String>,
}

impl Approvers {
    pub(crate) fn of(policy: &Policy) -> Self {
        Self {
            approvers: policy.approvers.clone(),
            required: policy.required,
            author_may: policy.allow_self_approval,
            pusher_may: policy.allow_pusher_approval,
            reviews_count: policy.review_approvals,
            ttl: policy.approval_ttl.clone(),
        }
    }
}

/// One stage of the change, in stage order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StagePreview {
    pub(crate) name: StageName,
    /// Indices into the derivation's waves that belong to this stage.
    pub(crate) waves: Vec<usize>,
    pub(crate) gate: GatePolicy,
    /// The base names this stage with a gate; otherwise `always` is the strictest reading.
    pub(crate) gate_at_base: bool,
    /// The base approves the stage one dependency wave at a time
    /// (`gate_scope = "wave"`), each wave at its own gate.
    pub(crate) per_wave: bool,
    pub(crate) approvers: Approvers,
    /// The stage's own approvers differ from `[policy]`.
    pub(crate) own_approvers: bool,
    /// `[[stage]] timeout` at the base, as written.
    pub(crate) timeout: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Preview {
    pub(crate) base: String,
    pub(crate) base_config: BaseConfig,
    pub(crate) pull_request: Approvers,
    pub(crate) stages: Vec<StagePreview>,
    /// What the pull request edits that decides who may let a change
    /// through: counts only after merge. Each names the setting and both values.
    pub(crate) edits: Vec<String>,
}

impl Preview {
    /// A preview of `waves` where every stage is gated `always` by the
    /// default policy, stages named by their members: for renderer tests.
    #[cfg(test)]
    pub(crate) fn strictest(base: &str, waves: &[Vec<MemberId>]) -> Self {
        let approvers = Approvers::of(&Policy::default());
        let mut stages: Vec<StagePreview> = Vec::new();
        for (i, wave) in waves.iter().enumerate() {
            let Some(member) = wave.first() else {
                continue;
            };
            let name = member.stage();
            match stages.iter_mut().find(|s| s.name == name) {
                Some(stage) => stage.waves.push(i),
                None => stages.push(StagePreview {
                    name: StageName::new(name),
                    waves: vec![i],
                    gate: GatePolicy::Always,
                    gate_at_base: true,
                    per_wave: false,
                    approvers: approvers.clone(),
                    own_approvers: false,
                    timeout: None,
                }),
            }
        }
        Self {
            base: base.to_owned(),
            base_config: BaseConfig::Read,
            pull_request: approvers,
            stages,
            edits: Vec::new(),
        }
    }

    /// The pull request edits `[policy]` (the approvals section says so too).
    pub(crate) fn edits_policy(&self) -> bool {
        self.edits.iter().any(|e| e.starts_with("`[policy]`"))
    }
}

/// The preview of `head`'s stages for `waves`, judged by the base config
/// `base_text` (`None`: absent) at commit `base`.
pub(crate) fn preview(
    base: &str,
    base_text: Option<&str>,
    head: &RepoConfig,
    waves: &[Vec<MemberId>],
    imposed: &crate::config::operator::Imposed,
) -> Preview {
    let (base_config, raw, policy) = match base_text {
        None => (BaseConfig::Absent, None, Policy::default()),
        Some(text) => match RepoConfig::parse_with(CONFIG_FILE, text, imposed) {
            Ok(config) => (BaseConfig::Read, Some(config.raw), config.policy),
            Err(e) => (BaseConfig::Invalid(e.to_string()), None, Policy::default()),
        },
    };
    let stages = head
        .stages
        .iter()
        .filter_map(|stage| {
            let in_stage: Vec<usize> = waves
                .iter()
                .enumerate()
                .filter(|(_, wave)| wave.iter().any(|m| m.stage() == stage.name))
                .map(|(i, _)| i)
                .collect();
            if in_stage.is_empty() {
                return None;
            }
            let entry = raw
                .as_ref()
                .and_then(|r| r.stages.iter().find(|s| s.name == stage.name));
            let own = stage_policy(raw.as_ref(), &policy, stage.name.as_str());
            Some(StagePreview {
                name: stage.name.clone(),
                waves: in_stage,
                gate: gate_of(raw.as_ref(), stage.name.as_str()),
                gate_at_base: entry.is_some_and(|e| e.gate.is_some()),
                per_wave: gate_scope_of(raw.as_ref(), stage.name.as_str()) == GateScope::Wave,
                own_approvers: own.approvers != policy.approvers
                    || own.required != policy.required
                    || own.review_approvals != policy.review_approvals,
                approvers: Approvers::of(&own),
                timeout: entry.and_then(|e| e.timeout.clone()),
            })
        })
        .collect();
    Preview {
        base: base.to_owned(),
        edits: edits(raw.as_ref(), &policy, head),
        base_config,
        pull_request: Approvers::of(&policy),
        stages,
    }
}

/// The head's settings that differ from the base's, for gates and policy.
fn edits(base: Option<&RawRepoConfig>, base_policy: &Policy, head: &RepoConfig) -> Vec<String> {
    let mut edits = Vec::new();
    for stage in &head.raw.stages {
        let at_base = base.and_then(|b| b.stages.iter().find(|s| s.name == stage.name));
        let was = gate_of(base, &stage.name);
        let now = stage.gate.unwrap_or(GatePolicy::Always);
        if was != now {
            edits.push(format!(
                "`{}`'s gate: `{}` at the base, `{}` here",
                stage.name,
                was.as_str(),
                now.as_str()
            ));
        }
        let settings = |s: Option<&crate::config::repo::RawStage>| {
            s.map(|s| {
                (
                    s.approvers.clone(),
                    s.required,
                    s.review_approvals,
                    s.timeout.clone(),
                )
            })
            .unwrap_or_default()
        };
        let scope = gate_scope_of(base, &stage.name);
        if scope != stage.gate_scope.unwrap_or_default() {
            edits.push(format!(
                "`{}`'s gate scope (approved {} at the base)",
                stage.name,
                match scope {
                    GateScope::Stage => "as a whole",
                    GateScope::Wave => "wave by wave",
                }
            ));
        }
        if settings(at_base) != settings(Some(stage)) {
            edits.push(format!(
                "`{}`'s approvers, required count, reviews or timeout",
                stage.name
            ));
        }
    }
    if head.policy != *base_policy {
        edits.push("`[policy]` (approvers, required count, who may approve)".to_owned());
    }
    edits
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[defaults]
plan = ["./plan"]
[[stage]]
name = "dev"
gate = "never"
[[stage]]
name = "prod"
gate = "always"
approvers = ["alice", "team:sre"]
required = 2
timeout = "24h"
[[component]]
name = "app"
dir = "app"
[policy]
approvers = ["bob"]
"#;

    fn head(text: &str) -> RepoConfig {
        RepoConfig::parse(CONFIG_FILE, text).unwrap()
    }

    fn waves() -> Vec<Vec<MemberId>> {
        vec![
            vec!["app@dev".parse().unwrap()],
            vec!["app@prod".parse().unwrap()],
        ]
    }

    #[test]
    fn each_stage_shows_the_bases_gate_and_approvers() {
        let p = preview(
            "b".repeat(40).as_str(),
            Some(BASE),
            &head(BASE),
            &waves(),
            &Default::default(),
        );
        assert_eq!(p.base_config, BaseConfig::Read);
        assert_eq!(p.stages.len(), 2);
        let (dev, prod) = (&p.stages[0], &p.stages[1]);
        assert_eq!(
            (dev.gate, dev.gate_at_base, &dev.waves[..]),
            (GatePolicy::Never, true, &[0][..])
        );
        assert!(!dev.own_approvers);
        assert_eq!(prod.gate, GatePolicy::Always);
        assert!(prod.own_approvers);
        assert_eq!(prod.approvers.approvers, ["alice", "team:sre"]);
        assert_eq!(prod.approvers.required, 2);
        assert_eq!(prod.timeout.as_deref(), Some("24h"));
        assert_eq!(p.pull_request.approvers, ["bob"]);
        assert!(p.edits.is_empty());
    }

    #[test]
    fn a_pull_request_that_loosens_its_gate_or_policy_is_told_it_counts_after_merge() {
        let loosened = BASE
            .replace("gate = \"always\"", "gate = \"never\"")
            .replace("approvers = [\"bob\"]", "approvers = [\"mallory\"]");
        let p = preview(
            "b",
            Some(BASE),
            &head(&loosened),
            &waves(),
            &Default::default(),
        );
        assert_eq!(p.stages[1].gate, GatePolicy::Always, "the base decides");
        assert_eq!(
            p.edits,
            [
                "`prod`'s gate: `always` at the base, `never` here",
                "`[policy]` (approvers, required count, who may approve)"
            ]
        );
        assert!(p.edits_policy());
    }

    #[test]
    fn a_stage_the_base_approves_wave_by_wave_is_previewed_so_and_a_change_to_that_counts_after_merge(
    ) {
        let per_wave = BASE.replace(
            "timeout = \"24h\"",
            "timeout = \"24h\"\ngate_scope = \"wave\"",
        );
        let p = preview(
            "b",
            Some(&per_wave),
            &head(&per_wave),
            &waves(),
            &Default::default(),
        );
        assert_eq!((p.stages[0].per_wave, p.stages[1].per_wave), (false, true));
        assert!(p.edits.is_empty());
        let p = preview(
            "b",
            Some(&per_wave),
            &head(BASE),
            &waves(),
            &Default::default(),
        );
        assert!(p.stages[1].per_wave, "the base decides");
        assert_eq!(
            p.edits,
            ["`prod`'s gate scope (approved wave by wave at the base)"]
        );
    }

    #[test]
    fn a_base_without_a_config_or_with_a_broken_one_reads_as_the_strictest() {
        let p = preview("b", None, &head(BASE), &waves(), &Default::default());
        assert_eq!(p.base_config, BaseConfig::Absent);
        assert!(p
            .stages
            .iter()
            .all(|s| s.gate == GatePolicy::Always && !s.gate_at_base));
        assert!(p.pull_request.approvers.is_empty());
        let p = preview(
            "b",
            Some("[[stage]]\nname = 1"),
            &head(BASE),
            &waves(),
            &Default::default(),
        );
        assert!(matches!(p.base_config, BaseConfig::Invalid(_)));
        assert!(p.stages.iter().all(|s| s.gate == GatePolicy::Always));
    }
}
