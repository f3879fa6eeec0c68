//! `wavegate.toml` as written: its name and the fields of every part of
//! it, deserialized and not yet checked (`repo.rs` checks them). A
//! section whose checks read only its own fields (`[hooks]`, `[cost]`,
//! `quiet`, a stage's profile) keeps them in its own file; those of
//! `[[group]]`, `[terraform]` and what the operator gave the file are here,
//! because their checks read the rest of the file.

use super::check::parse_duration;
use super::cost::RawCost;
use super::hooks::RawHooks;
use crate::model::{DigestOver, Money};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Where the repo config lives, relative to the repository root.
pub const CONFIG_FILE: &str = "wavegate.toml";

fn default_ignore() -> Vec<String> {
    vec!["**/*.md".into(), "docs/**".into()]
}

/// The file as written. Field names are the documented ones; anything else is refused.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRepoConfig {
    #[serde(default = "default_ignore")]
    pub(crate) ignore: Vec<String>,
    #[serde(default)]
    pub(crate) defaults: RawDefaults,
    #[serde(default, rename = "stage")]
    pub(crate) stages: Vec<RawStage>,
    #[serde(default, rename = "component")]
    pub(crate) components: Vec<RawComponent>,
    /// Components planned with one call and applied with one call.
    #[serde(default, rename = "group", skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<RawGroup>,
    #[serde(default)]
    pub(crate) policy: Option<Policy>,
    /// The base branches whose merged pull requests start an apply run; read
    /// from the default branch's file only (`None`: the default branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) branches: Option<Vec<String>>,
    /// Who hears of runs that wait, are refused, applied or failed; read
    /// from the base like `[policy]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) notify: Option<Notify>,
    /// How many members of one wave apply at once (each stage may set its
    /// own); read from the base like `[policy]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) apply_concurrency: Option<u32>,
    /// Commands of the team's own around every stage's plan, gate and
    /// apply; read from the base like `[policy]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hooks: Option<RawHooks>,
    /// The command that prices every stage's plans; read from the base
    /// like `[policy]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost: Option<RawCost>,
    /// A Terraform or OpenTofu repository planned by wavegate's own
    /// commands: it stands for a discovering component, `terraform`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) terraform: Option<RawTerraform>,
    /// How often stages are planned against what is deployed; read from
    /// the default branch only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) drift: Option<RawDrift>,
    /// What the operator's central configuration gave this file
    /// (`WAVEGATE_REPOS_CONFIG`), for the report; never written in it.
    #[serde(skip)]
    pub(crate) from_operator: Option<FromOperator>,
}

/// `[notify]`: the targets (each defined in the server's environment,
/// never here) and the events they hear of.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Notify {
    pub(crate) to: Vec<String>,
    #[serde(default = "NotifyEvent::all")]
    pub(crate) events: Vec<NotifyEvent>,
}

/// What a run does that a notification tells of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NotifyEvent {
    /// A gate waits for an approval.
    Waiting,
    /// A plan moved, was denied or is held: the run will not go on as approved.
    Refused,
    /// Everything the merge changes is deployed.
    Applied,
    /// The run failed.
    Failed,
    /// A drift check found new drift, or drift that changed.
    Drift,
}

impl NotifyEvent {
    pub(crate) fn all() -> Vec<Self> {
        vec![
            Self::Waiting,
            Self::Refused,
            Self::Applied,
            Self::Failed,
            Self::Drift,
        ]
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Refused => "refused",
            Self::Applied => "applied",
            Self::Failed => "failed",
            Self::Drift => "drift",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub(crate) plan: Option<Vec<String>>,
    pub(crate) apply: Option<Vec<String>>,
    pub(crate) outputs: Option<Vec<String>>,
    pub(crate) timeout: Option<String>,
    #[serde(default)]
    pub(crate) env: Vec<String>,
    /// Lines of a successful plan's output the report leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) quiet: Option<super::quiet::RawQuiet>,
    /// Patterns of files every component's commands read besides those
    /// their argv names (a library the scripts source): a change to one
    /// selects every component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shared: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStage {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) gate: Option<GatePolicy>,
    /// What one approval of the stage covers: the whole stage (the default),
    /// or one dependency wave of it (`"wave"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gate_scope: Option<GateScope>,
    /// Who may approve this stage's gate and rounds; `[policy] approvers` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approvers: Option<Vec<String>>,
    /// Distinct approvers this stage's gate and rounds need; `[policy] required` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) required: Option<u32>,
    /// Whether approving reviews count at this stage's gate and rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) review_approvals: Option<bool>,
    /// How long this stage's gate waits for `/approve <stage>` before it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<String>,
    /// How many members of one of this stage's waves apply at once; the top
    /// level's `apply_concurrency` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) apply_concurrency: Option<u32>,
    /// This stage's own hooks, after the top level's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hooks: Option<RawHooks>,
    /// The command that prices this stage's plans, instead of the top level's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost: Option<RawCost>,
    /// The server's execution profile the stage's commands run with; read
    /// from the base like `[policy]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) profile: Option<super::execution::RawProfileChoice>,
    /// Members with a profile of their own; read from the base like `profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jobs: Option<Vec<super::execution::RawJobGroup>>,
    /// Non-secret literals every command of the stage gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variables: Option<BTreeMap<String, String>>,
    /// How often the stage is checked for drift (`"off"`: never); `[drift]
    /// every` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) drift: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawComponent {
    pub(crate) name: String,
    /// Where its commands run; empty for a component that discovers its units.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) dir: String,
    /// A command that finds the component's units at plan time, instead
    /// of a `dir`: each becomes a component of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) discover: Option<Vec<String>>,
    pub(crate) paths: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) depends_on: Vec<String>,
    #[serde(default)]
    pub(crate) inputs: BTreeMap<String, String>,
    pub(crate) stages: Option<Vec<String>>,
    pub(crate) plan: Option<Vec<String>>,
    pub(crate) apply: Option<Vec<String>>,
    pub(crate) outputs: Option<Vec<String>>,
    pub(crate) timeout: Option<String>,
    /// `build`: it builds and publishes artifacts (an image, a package)
    /// that other components read as `build:<component>.<output>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<ComponentKind>,
    /// The `[[group]]` it plans and applies with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
    /// Lines of a successful plan's output the report leaves out, instead
    /// of `[defaults]`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) quiet: Option<super::quiet::RawQuiet>,
    /// Patterns of files its commands read besides those their argv names,
    /// after `[defaults]`' `shared`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shared: Vec<String>,
}

/// What a component is: infrastructure (the default) or a build whose
/// apply publishes an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ComponentKind {
    #[default]
    Infra,
    Build,
}

/// When a stage waits for its own approval even if the PR approval covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum GatePolicy {
    Always,
    OnDestructive,
    Never,
}

impl GatePolicy {
    /// As `wavegate.toml` writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GatePolicy::Always => "always",
            GatePolicy::OnDestructive => "on-destructive",
            GatePolicy::Never => "never",
        }
    }
}

impl fmt::Display for GatePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one approval at a stage's gate lets through: the stage's plans on
/// the merge commit, or one dependency wave's at a time (seeds 001's gated
/// waves), each bound to its own set digest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum GateScope {
    #[default]
    Stage,
    Wave,
}

/// Who may let a change through. Read from the base branch only.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Policy {
    #[serde(default)]
    pub(crate) approvers: Vec<String>,
    #[serde(default = "one")]
    pub(crate) required: u32,
    #[serde(default)]
    pub(crate) allow_self_approval: bool,
    #[serde(default)]
    pub(crate) allow_forks: bool,
    #[serde(default)]
    pub(crate) overriders: Vec<String>,
    #[serde(default)]
    pub(crate) review_approvals: bool,
    /// Whether whoever pushed the pull request's current head may approve
    /// it. By default they are treated like its author.
    #[serde(default)]
    pub(crate) allow_pusher_approval: bool,
    /// How long an approval counts after it was given (`"72h"`); forever when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approval_ttl: Option<String>,
    /// Which members the set digests bind: `all`, or `changing` (a member
    /// whose plan changes nothing is left out).
    #[serde(default, skip_serializing_if = "DigestOver::is_all")]
    pub(crate) digest_over: DigestOver,
    /// The most a stage's monthly cost may rise (`"500"`, in the cost
    /// command's currency); more is denied until an overrider lets it through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_monthly_increase: Option<Money>,
    /// Rego policies every member's plan is judged by (`[[policy.rego]]`),
    /// read from the base like the rest of `[policy]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) rego: Vec<RawRego>,
}

/// `[[policy.rego]]`: Rego files, and the rule whose messages deny a plan.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRego {
    /// Patterns of `.rego` files at the base commit.
    pub(crate) files: Vec<String>,
    /// The rule whose set of messages denies a plan; `data.wavegate.deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) query: Option<String>,
    /// The stages whose plans it judges; every stage when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stages: Option<Vec<String>>,
}

impl Policy {
    /// How long an approval counts (`None`: approvals do not expire).
    pub(crate) fn approval_ttl(&self) -> Option<std::time::Duration> {
        parse_duration(self.approval_ttl.as_deref()?).ok()
    }
}

fn one() -> u32 {
    1
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            approvers: Vec::new(),
            required: 1,
            allow_self_approval: false,
            allow_forks: false,
            overriders: Vec::new(),
            review_approvals: false,
            allow_pusher_approval: false,
            approval_ttl: None,
            digest_over: DigestOver::All,
            max_monthly_increase: None,
            rego: Vec::new(),
        }
    }
}

/// `[[group]]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGroup {
    pub(crate) name: String,
    /// Its components (a component may instead say `group = "<name>"`;
    /// a discovering component stands for every unit it finds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) components: Vec<String>,
    pub(crate) plan: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) apply: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<String>,
}

/// `[terraform]` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTerraform {
    /// `terraform` (the default) or `tofu`: the program the commands run,
    /// found on the commands' `PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) binary: Option<String>,
    /// The stages of a root outside `stage_dirs`.
    #[serde(default, skip_serializing_if = "StagesBy::is_workspace")]
    pub(crate) stages: StagesBy,
    /// Where a directory per stage lives (`envs/{stage}`): a root under
    /// `envs/dev/` runs in stage `dev` only, in the default workspace, and
    /// `envs/dev/dns` and `envs/prod/dns` are one component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stage_dirs: Option<String>,
    /// Directories never searched for roots (patterns), besides hidden
    /// ones and `.terraform`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ignore: Vec<String>,
    /// Roots with settings of their own; a listed directory is a root even
    /// when its files declare no backend.
    #[serde(default, rename = "root", skip_serializing_if = "Vec::is_empty")]
    pub(crate) roots: Vec<RawRoot>,
}

/// Which stages a root outside `stage_dirs` runs in.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum StagesBy {
    /// Every stage, each in the workspace of its name.
    #[default]
    Workspace,
    /// The stages it has a `<stage>.tfvars` for, each in the workspace of
    /// its name.
    VarFile,
}

impl StagesBy {
    fn is_workspace(&self) -> bool {
        *self == StagesBy::Workspace
    }
}

/// `[[terraform.root]]`: one root's own settings.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoot {
    pub(crate) dir: String,
    /// Its component's name, instead of the one wavegate derives from `dir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// Roots it applies after (names or directories), besides those whose
    /// state it reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) depends_on: Vec<String>,
    /// Upstream outputs passed as variables (`vpc_id = "network.vpc_id"`);
    /// each upstream is a dependency.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) inputs: BTreeMap<String, String>,
    /// The stages it runs in, instead of what `stages` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stages: Option<Vec<String>>,
}

/// The keys the operator gave a repository, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FromOperator {
    pub source: String,
    /// Dotted keys taken from the operator's defaults or locked to them,
    /// and the hook moments it added hooks to.
    pub keys: Vec<String>,
}

/// `[drift]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDrift {
    /// How often every stage is checked, unless it says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) every: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issues: Option<DriftIssues>,
}

/// Where a stage's drift is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DriftIssues {
    /// One issue per drifted member (the default).
    #[default]
    Member,
    /// One issue per drifted stage, its members a checklist.
    Stage,
}
