//! The repository's `wavegate.toml` (docs/configuration.md): parsing, validation, and
//! which components a change to the file itself touches.
//!
//! Every mistake becomes a [`ConfigError`] naming the file, the field and the
//! fix, because the person reading it is a reviewer in a PR comment. The
//! file as written is `raw.rs`; each section's checks are in its own file.

pub use super::check::ConfigError;
use super::check::{check_name, join_path, parse_duration, Template};
use super::cost::{self, CostCommands, RawCost};
use super::discover::{self, Discoverer, Unit};
use super::glob::Pattern;
use super::groups::{self, Groups};
use super::hooks::{self, Hooks, RawHooks};
pub use super::raw::{ComponentKind, CONFIG_FILE};
pub(crate) use super::raw::{
    GatePolicy, GateScope, NotifyEvent, Policy, RawRego, RawRepoConfig, RawStage,
};
use super::raw::{Notify, RawComponent, RawDefaults};
use crate::model::canonical::{canonical_json_with, NumberForm};
use crate::model::{DependencyGraph, GateId, Money, StageName};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Placeholders an argv template may use.
pub(crate) const PLACEHOLDERS: &[&str] = &[
    "component",
    "stage",
    "dir",
    "root",
    "plan_file",
    "outputs_file",
    "inputs_file",
    "carry_file",
];

pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A validated stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub name: StageName,
    /// `Always` when the file does not say: the strictest reading.
    pub(crate) gate: GatePolicy,
    /// How long its gate waits for `/approve <stage>`; forever when unset.
    pub(crate) timeout: Option<Duration>,
    /// Its profile, job groups and variables.
    pub(crate) execution: super::execution::StageExecution,
}

/// One input: the member's own name for an upstream component's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub upstream: String,
    pub output: String,
    /// `build:<component>.<output>`: an artifact the upstream build
    /// publishes when it applies. While the build is in the change its value
    /// is left to the build (never fixed in the plan a person approves), so
    /// it moving is not a change; the build's own plan binds it.
    pub build: bool,
}

/// A validated component with every default resolved.
#[derive(Debug, Clone)]
pub struct Component {
    pub name: String,
    /// As written, `{component}` filled in; `{stage}` may remain: see [`Component::dir_in`].
    pub dir: String,
    /// Patterns that select the component in every stage it runs in.
    pub(crate) paths: Vec<Pattern>,
    /// Patterns written with `{stage}`: each selects only its stage's member.
    pub(crate) stage_paths: Vec<(StageName, Pattern)>,
    /// The files its commands run or read ([`command_files`]): a change to
    /// one selects it like a change under `paths`, so that no command
    /// applies a script no plan ran.
    pub(crate) files: Vec<Pattern>,
    /// Those written with `{stage}`, each for its stage's member only.
    pub(crate) stage_files: Vec<(StageName, Pattern)>,
    pub(crate) depends_on: Vec<String>,
    pub inputs: Vec<Input>,
    pub stages: Vec<StageName>,
    pub plan: Vec<String>,
    pub apply: Option<Vec<String>>,
    pub(crate) outputs: Option<Vec<String>>,
    pub(crate) timeout: Duration,
    /// Patterns of the lines of a successful plan's output the report
    /// leaves out (`quiet`).
    pub(crate) quiet: Vec<String>,
    pub kind: ComponentKind,
    /// A unit a discovery found: what the digests bind of its finding.
    pub(crate) discovered: Option<Value>,
}

/// A validated `wavegate.toml`.
#[derive(Debug, Clone)]
pub struct RepoConfig {
    pub(crate) raw: RawRepoConfig,
    pub(crate) ignore: Vec<Pattern>,
    pub stages: Vec<Stage>,
    /// In file order.
    pub components: Vec<Component>,
    pub(crate) policy: Policy,
    /// Environment variables passed through to every command.
    pub(crate) env: Vec<String>,
    /// `branches` as written: where merges apply (`None`: the default branch).
    pub(crate) branches: Option<Vec<String>>,
    pub(crate) notify: Option<Notify>,
    pub(crate) hooks: Hooks,
    pub(crate) cost: CostCommands,
    /// Components that find their units at plan time; none left once
    /// [`RepoConfig::with_units`] put the units in their place.
    pub(crate) discoverers: Vec<Discoverer>,
    pub(crate) groups: Groups,
    /// `[defaults] timeout`, or wavegate's: what a component without its own gets.
    pub(crate) default_timeout: Duration,
    pub(crate) drift: super::drift::DriftRules,
}

impl RepoConfig {
    /// Parses and validates the text of `file`.
    pub fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        let raw = Self::parse_raw(file, text)?;
        Self::validate(file, raw)
    }

    /// [`RepoConfig::parse`] with what the operator imposes on the
    /// repository merged in.
    pub fn parse_with(
        file: &str,
        text: &str,
        imposed: &super::operator::Imposed,
    ) -> Result<Self, ConfigError> {
        let raw = Self::parse_raw_with(file, text, imposed)?;
        Self::validate(file, raw)
    }

    /// [`RepoConfig::parse_raw`] with what the operator imposes merged in:
    /// the file is read as it is first (its own mistakes with their lines),
    /// then with the operator's defaults under it, its locked keys
    /// checked and its hooks after the file's own.
    pub(crate) fn parse_raw_with(
        file: &str,
        text: &str,
        imposed: &super::operator::Imposed,
    ) -> Result<RawRepoConfig, ConfigError> {
        if imposed.is_empty() {
            return Self::parse_raw(file, text);
        }
        Self::parse_toml(file, text)?;
        let own: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
            file: file.into(),
            field: String::new(),
            problem: e.message().trim().to_owned(),
            fix: "correct the TOML".into(),
        })?;
        let (merged, from) = imposed.merge(own).map_err(|e| ConfigError {
            file: file.into(),
            ..e
        })?;
        let mut raw =
            RawRepoConfig::deserialize(toml::Value::Table(merged)).map_err(|e| ConfigError {
                file: file.into(),
                field: String::new(),
                problem: format!(
                    "with the operator's settings ({}) merged in, the file does not read: {}",
                    from.source,
                    e.message().trim()
                ),
                fix: "ask the operator: their defaults or hooks do not fit this file".into(),
            })?;
        raw.from_operator = Some(from);
        super::terraform::desugar(&mut raw).map_err(|e| ConfigError {
            file: file.into(),
            ..e
        })?;
        Ok(raw)
    }

    /// Parses without validating: used to compare the base config, which may be broken.
    pub(crate) fn parse_raw(file: &str, text: &str) -> Result<RawRepoConfig, ConfigError> {
        let mut raw = Self::parse_toml(file, text)?;
        super::terraform::desugar(&mut raw).map_err(|e| ConfigError {
            file: file.into(),
            ..e
        })?;
        Ok(raw)
    }

    fn parse_toml(file: &str, text: &str) -> Result<RawRepoConfig, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| {
                    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                    format!("line {line}: ")
                })
                .unwrap_or_default();
            let message = e.message().trim().to_owned();
            let fix = if message.contains("unknown field") {
                "use only the fields in the wavegate.toml reference (docs/configuration.md); check the spelling"
                    .to_owned()
            } else {
                "correct the TOML at that line".to_owned()
            };
            ConfigError {
                file: file.into(),
                field: String::new(),
                problem: format!("{location}{message}"),
                fix,
            }
        })
    }

    /// Checks everything the file cannot say through its types alone.
    pub(crate) fn validate(file: &str, raw: RawRepoConfig) -> Result<Self, ConfigError> {
        let err = |field: String, problem: String, fix: &str| ConfigError {
            file: file.to_owned(),
            field,
            problem,
            fix: fix.to_owned(),
        };

        let ignore = compile_patterns(&raw.ignore, "ignore", &err)?;
        if let Some(branches) = &raw.branches {
            check_branches(branches, &err)?;
        }
        if let Some(notify) = &raw.notify {
            check_notify(notify, &err)?;
        }
        check_apply_concurrency(raw.apply_concurrency, "apply_concurrency".into(), &err)?;

        let stages = validate_stages(&raw.stages, &err)?;
        let drift = super::drift::validate(raw.drift.as_ref(), &raw.stages, &err)?;

        let defaults = &raw.defaults;
        let default_timeout = default_timeout(defaults, &err)?;
        let discoverers = discover::discoverers(&raw, default_timeout, &err)?;
        let declared: Vec<RawComponent> = raw
            .components
            .iter()
            .filter(|c| c.discover.is_none())
            .cloned()
            .collect();
        check_defaults(defaults, &err)?;

        let mut index_of: HashMap<&str, usize> = HashMap::new();
        for (i, c) in declared.iter().enumerate() {
            let field = format!("component[{i}].name");
            check_name(&c.name, &field, &err)?;
            if index_of.insert(&c.name, i).is_some() {
                return Err(err(
                    field,
                    format!("component `{}` is defined twice", c.name),
                    "give each component a distinct name",
                ));
            }
        }

        let known = Known {
            declared: &declared,
            index_of: &index_of,
            stages: &stages,
            defaults,
            default_timeout,
        };
        let components = declared
            .iter()
            .enumerate()
            .map(|(i, c)| validate_component(i, c, &known, &err))
            .collect::<Result<Vec<_>, _>>()?;

        let graph = DependencyGraph::new(
            components
                .iter()
                .map(|c| (c.name.as_str(), c.depends_on.iter().map(String::as_str))),
        );
        if let Some(cycle) = graph.find_cycle() {
            let first = cycle[0];
            let i = index_of[first];
            return Err(err(
                format!("component[{i}] ({first}).depends_on"),
                format!("dependency cycle: {}", cycle.join(" → ")),
                "remove one of these depends_on edges; dependencies must form a DAG",
            ));
        }
        let discovering: BTreeMap<&str, Option<&str>> = raw
            .components
            .iter()
            .filter(|c| c.discover.is_some())
            .map(|c| (c.name.as_str(), c.group.as_deref()))
            .collect();
        let groups = groups::validate(
            &raw.groups,
            &declared,
            &discovering,
            &graph,
            default_timeout,
            &err,
        )?;
        check_inputs_are_upstream(&components, &graph, &err)?;

        let policy = raw.policy.clone().unwrap_or_default();
        if let Some(ttl) = &policy.approval_ttl {
            parse_duration(ttl).map_err(|p| {
                err(
                    "policy.approval_ttl".into(),
                    p,
                    "use a number and a unit, e.g. `72h`, or leave it out so approvals do not expire",
                )
            })?;
        }
        if policy.required == 0 {
            return Err(err(
                "policy.required".into(),
                "is 0, so nothing would ever need an approval".into(),
                "set it to 1 or more",
            ));
        }
        let stage_hooks: Vec<(String, Option<&RawHooks>)> = raw
            .stages
            .iter()
            .map(|s| (s.name.clone(), s.hooks.as_ref()))
            .collect();
        let hooks = hooks::validate(raw.hooks.as_ref(), &stage_hooks, &err)?;
        let stage_costs: Vec<(String, Option<&RawCost>)> = raw
            .stages
            .iter()
            .map(|s| (s.name.clone(), s.cost.as_ref()))
            .collect();
        let names: Vec<String> = components.iter().map(|c| c.name.clone()).collect();
        let cost = cost::validate(raw.cost.as_ref(), &stage_costs, &names, &err)?;
        check_wave_gates_unpriced(&raw.stages, &cost, &err)?;
        check_rego(&policy.rego, &stages, &err)?;
        if policy.max_monthly_increase.is_some_and(|m| m < Money::ZERO) {
            return Err(err(
                "policy.max_monthly_increase".into(),
                "is below zero, so every change would be denied".into(),
                "set 0 or more (`0`: any increase is denied), or leave it out",
            ));
        }
        if !discoverers.is_empty() {
            check_templates(file, &raw, &err)?;
        }
        check_stage_execution(&stages, &components, &groups, &err)?;
        Ok(Self {
            hooks,
            cost,
            discoverers,
            groups,
            ignore,
            stages,
            components,
            policy,
            env: defaults.env.clone(),
            default_timeout,
            branches: raw.branches.clone(),
            notify: raw.notify.clone(),
            drift,
            raw,
        })
    }

    /// This config with each discovering component's units in its place
    /// (`found`, by discoverer), validated as if written out: names unique,
    /// every dependency known, no cycle. The file as written is kept.
    pub(crate) fn with_units(
        &self,
        file: &str,
        found: &BTreeMap<String, Vec<Unit>>,
    ) -> Result<Self, ConfigError> {
        let discovered = |problem: String| {
            ConfigError {
            file: file.to_owned(),
            field: "component.discover".into(),
            problem,
            fix: "make the discover command report each unit once, with dependencies on units it reports or components the file declares".into(),
        }
        };
        let expanded = discover::expand(&self.raw, found).map_err(discovered)?;
        let mut config = Self::validate(file, expanded).map_err(|e| {
            discovered(format!(
                "the units discovered do not make a valid config: {}: {}",
                e.field, e.problem
            ))
        })?;
        let index: HashMap<String, usize> = config
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        for (by, units) in found {
            for unit in units {
                if let Some(&i) = index.get(&unit.name) {
                    config.components[i].discovered = Some(unit.bound(by));
                }
            }
        }
        config.raw = self.raw.clone();
        Ok(config)
    }

    /// The Terraform workspace a member of `[terraform]`'s root modules
    /// plans in (`default` for a directory per stage); `None` for any
    /// other component.
    pub(crate) fn terraform_workspace(&self, component: &Component, stage: &str) -> Option<String> {
        let terraform = self.raw.terraform.as_ref()?;
        let by = component.discovered.as_ref()?.get("by")?.as_str()?;
        if by != super::terraform::COMPONENT {
            return None;
        }
        let per_dir = terraform.stage_dirs.as_deref().is_some_and(|pattern| {
            super::terraform::StageDirs::new(pattern)
                .ok()
                .and_then(|dirs| dirs.split(&component.dir_in(stage)))
                .is_some()
        });
        Some(if per_dir {
            "default".into()
        } else {
            stage.to_owned()
        })
    }

    /// What the operator's central configuration gave this file: where
    /// from, and the keys.
    pub fn from_operator(&self) -> Option<&super::raw::FromOperator> {
        self.raw
            .from_operator
            .as_ref()
            .filter(|f| !f.keys.is_empty())
    }

    pub fn component(&self, name: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.name == name)
    }

    /// Every execution profile the file names is one the server defines
    /// and lets `repository` use (unchecked when `None`): a config error
    /// otherwise, naming the stage's field and the profiles that exist.
    pub fn check_profiles(
        &self,
        profiles: &crate::sandbox::Profiles,
        repository: Option<&str>,
    ) -> Result<(), ConfigError> {
        for (i, stage) in self.stages.iter().enumerate() {
            for (field, name) in stage
                .execution
                .named(&format!("stage[{i}] ({})", stage.name))
            {
                if let Err(problem) = profiles.resolve(name, repository) {
                    return Err(ConfigError {
                        file: CONFIG_FILE.into(),
                        field,
                        problem,
                        fix: "name a profile the server defines (`wavegate config check --profiles FILE` lists them)".into(),
                    });
                }
            }
        }
        Ok(())
    }

    pub(crate) fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.name == name)
    }
}

/// The policy and stage gates to enforce, read from the BASE config: a missing
/// or broken base file, or a stage it lacks, reads as the strictest setting.
pub(crate) fn gate_of(base: Option<&RawRepoConfig>, stage: &str) -> GatePolicy {
    base.and_then(|b| b.stages.iter().find(|s| s.name == stage))
        .and_then(|s| s.gate)
        .unwrap_or(GatePolicy::Always)
}

/// What one approval at a stage's gate covers, read from the BASE config:
/// the whole stage unless its entry says `"wave"`.
pub(crate) fn gate_scope_of(base: Option<&RawRepoConfig>, stage: &str) -> GateScope {
    base.and_then(|b| b.stages.iter().find(|s| s.name == stage))
        .and_then(|s| s.gate_scope)
        .unwrap_or_default()
}

/// The policy a stage's gate and its rounds are judged by, read from the
/// BASE config: `[policy]` with the stage's own `approvers`, `required` and
/// `review_approvals` where its entry sets them.
pub(crate) fn stage_policy(base: Option<&RawRepoConfig>, policy: &Policy, stage: &str) -> Policy {
    let mut policy = policy.clone();
    let Some(entry) = base.and_then(|b| b.stages.iter().find(|s| s.name == stage)) else {
        return policy;
    };
    if let Some(approvers) = &entry.approvers {
        policy.approvers = approvers.clone();
    }
    if let Some(required) = entry.required {
        policy.required = required.max(1);
    }
    if let Some(reviews) = entry.review_approvals {
        policy.review_approvals = reviews;
    }
    policy
}

/// How many members of a wave apply at once when the file does not say.
pub(crate) const DEFAULT_APPLY_CONCURRENCY: usize = 4;
/// The most `apply_concurrency` may ask for: each apply is a sandboxed
/// process with its own copy of the member's files.
const MAX_APPLY_CONCURRENCY: u32 = 64;

/// The `[[stage]]` entries: at least one, names usable and distinct, each
/// one's gate, timeout, apply concurrency and execution checked.
fn validate_stages(
    raw: &[RawStage],
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Vec<Stage>, ConfigError> {
    if raw.is_empty() {
        return Err(err(
            "stage".into(),
            "no stages are defined".into(),
            "add at least one [[stage]] with a `name`, e.g. `[[stage]]\\nname = \"dev\"`",
        ));
    }
    let mut stages = Vec::new();
    for (i, s) in raw.iter().enumerate() {
        let field = format!("stage[{i}].name");
        check_name(&s.name, &field, err)?;
        if GateId::is_reserved_stage_name(&s.name) {
            return Err(err(
                field,
                format!("`{}` is not a stage name wavegate can use: its gate would read as another kind (`pr-<n>-{}`)", s.name, s.name),
                "rename the stage (`override`, `round-<n>`, `hook-<name>` and `<name>-wave-<n>` name a pull request's override, re-plan rounds, hook gates and the gates of a stage's waves)",
            ));
        }
        if stages.iter().any(|x: &Stage| x.name == s.name) {
            return Err(err(
                field,
                format!("stage `{}` is defined twice", s.name),
                "give each stage a distinct name",
            ));
        }
        let at = |f: &str| format!("stage[{i}] ({}).{f}", s.name);
        if s.required == Some(0) {
            return Err(err(
                at("required"),
                "is 0, so nothing would ever need an approval".into(),
                "set it to 1 or more, or leave it out to use `[policy] required`",
            ));
        }
        let timeout =
            match &s.timeout {
                Some(t) => Some(parse_duration(t).map_err(|p| {
                    err(at("timeout"), p, "use a number and a unit: ms, s, m, h, d")
                })?),
                None => None,
            };
        check_apply_concurrency(s.apply_concurrency, at("apply_concurrency"), err)?;
        if s.gate_scope == Some(GateScope::Wave) && s.gate == Some(GatePolicy::Never) {
            return Err(err(
                at("gate_scope"),
                "is \"wave\", but the stage's gate is \"never\": there is no gate to hold its waves at".into(),
                "leave `gate_scope` out, or set `gate` to \"always\" or \"on-destructive\"",
            ));
        }
        let execution = super::execution::check_stage(
            s.profile.as_ref(),
            s.jobs.as_deref(),
            s.variables.as_ref(),
            &|f: &str| at(f),
            &err,
        )?;
        stages.push(Stage {
            name: StageName::new(s.name.clone()),
            gate: s.gate.unwrap_or(GatePolicy::Always),
            timeout,
            execution,
        });
    }
    Ok(stages)
}

/// A stage's cost binds all of its plans at once, so a stage priced by a
/// cost command is approved as a whole.
fn check_wave_gates_unpriced(
    raw: &[RawStage],
    cost: &cost::CostCommands,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, s) in raw.iter().enumerate() {
        if s.gate_scope == Some(GateScope::Wave) && cost.at(&s.name).is_some() {
            return Err(err(
                format!("stage[{i}] ({}).gate_scope", s.name),
                "is \"wave\", but the stage has a cost command, whose figures bind the whole stage at once".into(),
                "leave `gate_scope` out: a stage approved wave by wave cannot be priced, by a `cost` of its own or the top level's `[cost]`",
            ));
        }
    }
    Ok(())
}

/// `[defaults] timeout`, or the built-in default.
fn default_timeout(
    defaults: &RawDefaults,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Duration, ConfigError> {
    Ok(match &defaults.timeout {
        Some(t) => parse_duration(t).map_err(|p| {
            err(
                "defaults.timeout".into(),
                p,
                "use a number and a unit: ms, s, m, h, d",
            )
        })?,
        None => DEFAULT_TIMEOUT,
    })
}

/// `[defaults]`' commands and pass-through variable names.
fn check_defaults(
    defaults: &RawDefaults,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (name, argv) in [
        ("plan", &defaults.plan),
        ("apply", &defaults.apply),
        ("outputs", &defaults.outputs),
    ] {
        if let Some(argv) = argv {
            check_argv(argv, &format!("defaults.{name}"), err)?;
        }
    }
    for (i, var) in defaults.env.iter().enumerate() {
        if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(err(
                format!("defaults.env[{i}]"),
                format!("`{var}` is not an environment variable name"),
                "use letters, digits and `_` only",
            ));
        }
        if var.starts_with("WAVEGATE_") {
            return Err(err(format!("defaults.env[{i}]"), format!("`{var}` is wavegate's own"), "wavegate sets WAVEGATE_* for commands itself and never passes its own settings on; pick another name"));
        }
    }
    Ok(())
}

/// What a component is checked against: the file's declared components
/// (by index), its stages and its `[defaults]`.
struct Known<'a> {
    declared: &'a [RawComponent],
    index_of: &'a HashMap<&'a str, usize>,
    stages: &'a [Stage],
    defaults: &'a RawDefaults,
    default_timeout: Duration,
}

/// Component `i` as declared, checked: its dependencies, stages, dir and
/// paths, commands, timeout, quiet patterns and inputs.
fn validate_component(
    i: usize,
    c: &RawComponent,
    known: &Known<'_>,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Component, ConfigError> {
    let Known {
        declared,
        index_of,
        stages,
        defaults,
        default_timeout,
    } = *known;
    let at = |f: &str| format!("component[{i}] ({}).{f}", c.name);
    for (j, d) in c.depends_on.iter().enumerate() {
        if !index_of.contains_key(d.as_str()) {
            return Err(err(
                at(&format!("depends_on[{j}]")),
                format!("unknown component `{d}`"),
                &format!("name one of: {}", names(declared)),
            ));
        }
    }
    let stage_names: Vec<StageName> = match &c.stages {
        Some(list) if list.is_empty() => {
            return Err(err(
                at("stages"),
                "is empty, so this component never runs".into(),
                "list at least one stage, or leave `stages` out for every stage",
            ))
        }
        Some(list) => {
            for (j, s) in list.iter().enumerate() {
                if !stages.iter().any(|x| x.name == *s) {
                    let known: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
                    return Err(err(
                        at(&format!("stages[{j}]")),
                        format!("unknown stage `{s}`"),
                        &format!("name one of: {}", known.join(", ")),
                    ));
                }
            }
            // Stage order is the file's, whatever order the component lists them in.
            stages
                .iter()
                .filter(|x| list.iter().any(|s| x.name == *s))
                .map(|x| x.name.clone())
                .collect()
        }
        None => stages.iter().map(|s| s.name.clone()).collect(),
    };
    let dir = fill_path(&c.dir, &c.name, None)
        .map_err(|p| err(at("dir"), p, PATH_PLACEHOLDER_FIX))?
        .trim_end_matches('/')
        .to_owned();
    for stage in &stage_names {
        let expanded = fill_path(&dir, &c.name, Some(stage.as_str()))
            .map_err(|p| err(at("dir"), p, PATH_PLACEHOLDER_FIX))?;
        check_dir(&expanded).map_err(|p| {
            err(
                at("dir"),
                p,
                "give the directory relative to the repository root, e.g. `infra/app`",
            )
        })?;
    }
    let written: Vec<String> = match &c.paths {
        Some(p) if p.is_empty() => {
            return Err(err(
                at("paths"),
                "is empty, so no change could ever select this component".into(),
                "list at least one pattern, or leave `paths` out to use `<dir>/**`",
            ))
        }
        Some(p) => p.clone(),
        None => vec![format!("{dir}/**")],
    };
    let mut paths = Vec::new();
    let mut stage_paths = Vec::new();
    for (j, text) in written.iter().enumerate() {
        let field = if c.paths.is_some() {
            at(&format!("paths[{j}]"))
        } else {
            at("dir")
        };
        let compile = |text: &str| {
            Pattern::new(text).map_err(|p| {
                err(
                    field.clone(),
                    p,
                    "write a pattern relative to the repository root, e.g. `infra/app/**`",
                )
            })
        };
        let text = fill_path(text, &c.name, None)
            .map_err(|p| err(field.clone(), p, PATH_PLACEHOLDER_FIX))?;
        if text.contains(STAGE_PLACEHOLDER) {
            for stage in &stage_names {
                let pattern = compile(&text.replace(STAGE_PLACEHOLDER, stage.as_str()))?;
                stage_paths.push((stage.clone(), pattern));
            }
        } else {
            paths.push(compile(&text)?);
        }
    }
    let plan = match (&c.plan, &defaults.plan) {
            (Some(argv), _) => {
                check_argv(argv, &at("plan"), err)?;
                argv.clone()
            }
            (None, Some(argv)) => argv.clone(),
            (None, None) => return Err(err(at("plan"), "no plan command: neither the component nor [defaults] sets `plan`".into(), "set `plan = [\"./ci/plan.sh\", \"{component}\", \"{stage}\", \"{plan_file}\"]` in [defaults] or on the component")),
        };
    let apply = resolve_argv(&c.apply, &defaults.apply, &at("apply"), err)?;
    let outputs = resolve_argv(&c.outputs, &defaults.outputs, &at("outputs"), err)?;
    let timeout = match &c.timeout {
        Some(t) => parse_duration(t)
            .map_err(|p| err(at("timeout"), p, "use a number and a unit: ms, s, m, h, d"))?,
        None => default_timeout,
    };
    let quiet = match c.quiet.as_ref().or(defaults.quiet.as_ref()) {
        Some(raw) => raw.patterns().map_err(|(problem, fix)| {
            let field = if c.quiet.is_some() {
                at("quiet")
            } else {
                "defaults.quiet".into()
            };
            err(field, problem, fix)
        })?,
        None => Vec::new(),
    };
    let inputs = component_inputs(c, &at, (declared, index_of), err)?;
    let commands = [Some(&plan), apply.as_ref(), outputs.as_ref()];
    let (files, stage_files) =
        command_files(c, defaults, (&dir, &stage_names), commands, &at, err)?;
    Ok(Component {
        name: c.name.clone(),
        dir,
        paths,
        stage_paths,
        files,
        stage_files,
        depends_on: c.depends_on.clone(),
        inputs,
        stages: stage_names,
        plan,
        apply,
        outputs,
        timeout,
        quiet,
        kind: c.kind.unwrap_or_default(),
        discovered: None,
    })
}

/// Patterns that select a component in every stage, and those (written
/// with `{stage}`) that select one stage's member only.
type Claims = (Vec<Pattern>, Vec<(StageName, Pattern)>);

/// The files a component's commands run or read, as patterns that select
/// it when they change: each file its `plan`, `apply` and `outputs` argv
/// names in the repository (`{root}/ci/plan.sh`; a program `ci/plan.sh` or
/// `./ci/plan.sh` from the root, where commands find it; an argument `./x`
/// or `../x` from its `dir`, where they run), and the `shared` patterns (`[defaults]`' and its own). One
/// written with `{stage}` selects only its stage's member.
fn command_files(
    c: &RawComponent,
    defaults: &RawDefaults,
    (dir, stage_names): (&str, &[StageName]),
    commands: [Option<&Vec<String>>; 3],
    at: &impl Fn(&str) -> String,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Claims, ConfigError> {
    // Named in argv: a word that does not make a pattern names no file.
    let mut texts: Vec<(Option<String>, String)> = commands
        .into_iter()
        .flatten()
        .flat_map(|argv| argv.iter().enumerate())
        .filter_map(|(i, word)| repository_file((i == 0, word), &c.name, dir))
        .map(|path| (None, path))
        .collect();
    for (field, list) in [
        ("defaults.shared".to_owned(), &defaults.shared),
        (at("shared"), &c.shared),
    ] {
        for (j, text) in list.iter().enumerate() {
            let field = format!("{field}[{j}]");
            let text = fill_path(text, &c.name, None)
                .map_err(|p| err(field.clone(), p, PATH_PLACEHOLDER_FIX))?;
            texts.push((Some(field), text));
        }
    }
    let (mut files, mut stage_files) = (Vec::new(), Vec::new());
    for (field, text) in texts {
        let compile = |text: &str| match (Pattern::new(text), &field) {
            (Ok(pattern), _) => Ok(Some(pattern)),
            (Err(_), None) => Ok(None),
            (Err(problem), Some(field)) => Err(err(
                field.clone(),
                problem,
                "write a pattern relative to the repository root, e.g. `ci/lib/**`",
            )),
        };
        if text.contains(STAGE_PLACEHOLDER) {
            for stage in stage_names {
                if let Some(pattern) = compile(&text.replace(STAGE_PLACEHOLDER, stage.as_str()))? {
                    stage_files.push((stage.clone(), pattern));
                }
            }
        } else if let Some(pattern) = compile(&text)? {
            files.push(pattern);
        }
    }
    Ok((files, stage_files))
}

/// The repository path a command's word names, if it names one: after
/// `{root}/`; the program (`first`) given with a `/` from the root, as the
/// executor starts it; another word starting `./` or `../` from the
/// component's `dir`, the command's working directory. With no placeholder
/// but `{component}` and `{stage}`, and not above the root.
fn repository_file((first, word): (bool, &str), component: &str, dir: &str) -> Option<String> {
    let word = word.replace("{component}", component);
    let relative = match word.strip_prefix("{root}/") {
        Some(rest) => rest.to_owned(),
        None if first && word.contains('/') && !word.starts_with(['/', '{']) => word.clone(),
        None if word.starts_with("./") || word.starts_with("../") => format!("{dir}/{word}"),
        None => return None,
    };
    if relative.replace(STAGE_PLACEHOLDER, "").contains(['{', '}']) {
        return None;
    }
    join_path("", &relative).filter(|path| !path.is_empty())
}

/// A component's `inputs`: each `component.output` (or `build:…` of a
/// build) of a declared component.
fn component_inputs(
    c: &RawComponent,
    at: &impl Fn(&str) -> String,
    (declared, index_of): (&[RawComponent], &HashMap<&str, usize>),
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Vec<Input>, ConfigError> {
    let mut inputs = Vec::new();
    for (name, reference) in &c.inputs {
        let field = at(&format!("inputs.{name}"));
        let (build, plain) = match reference.strip_prefix("build:") {
            Some(rest) => (true, rest),
            None => (false, reference.as_str()),
        };
        let Some((upstream, output)) = plain
            .split_once('.')
            .filter(|(u, o)| !u.is_empty() && !o.is_empty())
        else {
            return Err(err(
                field,
                format!("`{reference}` is not `component.output`"),
                "write the upstream component and its output, e.g. `network.vpc_id`",
            ));
        };
        if !index_of.contains_key(upstream) {
            return Err(err(
                field,
                format!("unknown component `{upstream}`"),
                &format!("name one of: {}", names(declared)),
            ));
        }
        let upstream_kind = declared[index_of[upstream]].kind.unwrap_or_default();
        if build && upstream_kind != ComponentKind::Build {
            return Err(err(
                    field,
                    format!("`{reference}` reads a build artifact, but `{upstream}` is not a build"),
                    &format!("declare `{upstream}` with `kind = \"build\"`, or read a plain output as `{plain}`"),
                ));
        }
        inputs.push(Input {
            name: name.clone(),
            upstream: upstream.to_owned(),
            output: output.to_owned(),
            build,
        });
    }
    Ok(inputs)
}

/// Each input reads a component upstream of its own.
fn check_inputs_are_upstream(
    components: &[Component],
    graph: &DependencyGraph<'_>,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, c) in components.iter().enumerate() {
        let upstream = graph.upstream_closure(i);
        for input in &c.inputs {
            if !upstream.contains(input.upstream.as_str()) {
                return Err(err(
                    format!("component[{i}] ({}).inputs.{}", c.name, input.name),
                    format!(
                        "reads `{}.{}` but `{}` is not upstream of `{}`",
                        input.upstream, input.output, input.upstream, c.name
                    ),
                    &format!("add `{}` to `depends_on` of `{}`", input.upstream, c.name),
                ));
            }
        }
    }
    Ok(())
}

/// Each stage's job groups cover its members once, and a `[[group]]`'s
/// mates run with one profile in it.
fn check_stage_execution(
    stages: &[Stage],
    components: &[Component],
    groups: &Groups,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, stage) in stages.iter().enumerate() {
        let members = components
            .iter()
            .filter(|c| c.stages.contains(&stage.name))
            .map(|c| c.name.as_str());
        let at = |f: &str| format!("stage[{i}] ({}).{f}", stage.name);
        super::execution::check_coverage(&stage.execution, members, &at, err)?;
        // One call plans (and applies) a group's mates with one profile.
        for group in &groups.all {
            let mates = group.components.iter().filter(|c| {
                components
                    .iter()
                    .any(|x| &x.name == *c && x.stages.contains(&stage.name))
            });
            super::execution::check_group_profiles(
                &stage.execution,
                &group.name,
                mates,
                &at,
                &err,
            )?;
        }
    }
    Ok(())
}

fn check_apply_concurrency(
    value: Option<u32>,
    field: String,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    match value {
        Some(0) => Err(err(
            field,
            "is 0, so no member would ever apply".into(),
            "set it to 1 (one member at a time) or more, or leave it out for the default of 4",
        )),
        Some(n) if n > MAX_APPLY_CONCURRENCY => Err(err(
            field,
            format!("is {n}, more than the {MAX_APPLY_CONCURRENCY} applies wavegate runs at once"),
            "set it to 64 or less",
        )),
        _ => Ok(()),
    }
}

/// How many members of one of a stage's waves apply at once, read from
/// the BASE config: the stage's own `apply_concurrency`, else the top
/// level's, else 4.
pub(crate) fn apply_concurrency_of(base: Option<&RawRepoConfig>, stage: &str) -> usize {
    let Some(base) = base else {
        return DEFAULT_APPLY_CONCURRENCY;
    };
    base.stages
        .iter()
        .find(|s| s.name == stage)
        .and_then(|s| s.apply_concurrency)
        .or(base.apply_concurrency)
        .map_or(DEFAULT_APPLY_CONCURRENCY, |n| {
            usize::try_from(n.clamp(1, MAX_APPLY_CONCURRENCY)).unwrap_or(1)
        })
}

/// How long a stage's gate waits, read from the BASE config (`None`: it
/// waits until approved).
pub(crate) fn stage_timeout(base: Option<&RawRepoConfig>, stage: &str) -> Option<Duration> {
    base.and_then(|b| b.stages.iter().find(|s| s.name == stage))
        .and_then(|s| s.timeout.as_deref())
        .and_then(|t| parse_duration(t).ok())
}

/// Components whose behaviour a change to the config file itself touches:
/// their own entry changed, or a `[defaults]` field they use, or a stage they
/// run in. With no readable base every component counts as changed.
pub(crate) fn config_changed_components(
    base: Option<&RawRepoConfig>,
    head: &RepoConfig,
) -> BTreeSet<String> {
    let Some(base) = base else {
        return head.components.iter().map(|c| c.name.clone()).collect();
    };
    let fingerprint = |v: &dyn erased::Ser| v.canonical();
    let stages_changed = |stages: &[StageName]| {
        stages.iter().any(|s| {
            let b = base.stages.iter().find(|x| x.name == *s);
            let h = head.raw.stages.iter().find(|x| x.name == *s);
            fingerprint(&b) != fingerprint(&h)
        })
    };
    let base_entries: HashMap<&str, &RawComponent> = base
        .components
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let (bd, hd) = (&base.defaults, &head.raw.defaults);
    let mut changed = BTreeSet::new();
    for c in &head.raw.components {
        let entry_changed = base_entries
            .get(c.name.as_str())
            .is_none_or(|b| fingerprint(*b) != fingerprint(c));
        let uses = |own: bool, base_field: &dyn erased::Ser, head_field: &dyn erased::Ser| {
            !own && fingerprint(base_field) != fingerprint(head_field)
        };
        let defaults_changed = uses(c.plan.is_some(), &bd.plan, &hd.plan)
            || uses(c.apply.is_some(), &bd.apply, &hd.apply)
            || uses(c.outputs.is_some(), &bd.outputs, &hd.outputs)
            || uses(c.timeout.is_some(), &bd.timeout, &hd.timeout)
            || fingerprint(&bd.env) != fingerprint(&hd.env);
        let stage_changed = head
            .component(&c.name)
            .is_some_and(|hc| stages_changed(&hc.stages));
        if entry_changed || defaults_changed || stage_changed {
            changed.insert(c.name.clone());
        }
    }
    // A group whose entry changed (its commands, its timeout, who is in
    // it) changes how each of its components plans.
    for group in &head.groups.all {
        let b = base.groups.iter().find(|g| g.name == group.name);
        let h = head.raw.groups.iter().find(|g| g.name == group.name);
        if fingerprint(&b) != fingerprint(&h) {
            changed.extend(group.components.iter().cloned());
        }
    }
    // So does a group the head no longer has, for the components it listed.
    for group in &base.groups {
        if head.groups.all.iter().all(|g| g.name != group.name) {
            changed.extend(
                group
                    .components
                    .iter()
                    .filter(|c| head.component(c).is_some())
                    .cloned(),
            );
        }
    }
    // A discovering entry that changed changes every unit it found; so
    // does a change to a stage a unit runs in.
    let units: Vec<String> = head
        .components
        .iter()
        .filter(|c| {
            c.discovered
                .as_ref()
                .and_then(|d| d["by"].as_str())
                .is_some_and(|by| changed.contains(by) || stages_changed(&c.stages))
        })
        .map(|c| c.name.clone())
        .collect();
    changed.extend(units);
    changed
}

mod erased {
    //! Lets `config_changed_components` compare fields of different types by
    //! their canonical JSON, integers written exactly: a comparison must tell
    //! every two values apart, which RFC 8785's doubles do not beyond 2^53.
    pub(crate) trait Ser {
        fn canonical(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn canonical(&self) -> String {
            super::canonical_json_with(
                &serde_json::to_value(self).unwrap_or_default(),
                super::NumberForm::Version1,
            )
        }
    }
}

/// Checks each discovering component as written, as a unit of its own
/// would be (named after it, in a directory of its name): its name, its
/// inputs, stages and commands, before any discovery runs.
fn check_templates(
    file: &str,
    raw: &RawRepoConfig,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, c) in raw.components.iter().enumerate() {
        check_name(&c.name, &format!("component[{i}].name"), err)?;
    }
    let probe: BTreeMap<String, Vec<Unit>> = raw
        .components
        .iter()
        .filter(|c| c.discover.is_some())
        .map(|c| {
            let unit = Unit {
                name: c.name.clone(),
                dir: c.name.clone(),
                depends_on: Vec::new(),
                paths: None,
                stages: None,
                group: None,
                inputs: None,
            };
            (c.name.clone(), vec![unit])
        })
        .collect();
    let expanded = discover::expand(raw, &probe).map_err(|p| {
        err(
            "component.discover".into(),
            p,
            "correct the discovering component",
        )
    })?;
    RepoConfig::validate(file, expanded).map(|_| ())
}

fn names(components: &[RawComponent]) -> String {
    components
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `[[policy.rego]]`: files named by valid patterns, a `data.` rule, and
/// stages the file has. (The files themselves are read, and compiled, at
/// the base commit when a change is planned.)
fn check_rego(
    rego: &[RawRego],
    stages: &[Stage],
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, entry) in rego.iter().enumerate() {
        let at = |f: &str| format!("policy.rego[{i}].{f}");
        if entry.files.is_empty() {
            return Err(err(
                at("files"),
                "names no file, so no plan would be judged".into(),
                "list the policies' files, e.g. `files = [\"policy/*.rego\"]`",
            ));
        }
        for (j, text) in entry.files.iter().enumerate() {
            Pattern::new(text).map_err(|p| {
                err(
                    format!("policy.rego[{i}].files[{j}]"),
                    p,
                    "write a path pattern relative to the repository root, e.g. `policy/*.rego`",
                )
            })?;
        }
        if let Some(query) = &entry.query {
            if !query.starts_with("data.") || query.contains(char::is_whitespace) {
                return Err(err(
                    at("query"),
                    format!("`{query}` is not a rule of the policies"),
                    "name the rule whose messages deny a plan, e.g. `data.wavegate.deny` (the default)",
                ));
            }
        }
        for stage in entry.stages.iter().flatten() {
            if !stages.iter().any(|s| &s.name == stage) {
                return Err(err(
                    at("stages"),
                    format!("there is no stage `{stage}`"),
                    "name stages the file declares, or leave `stages` out to judge every stage",
                ));
            }
        }
    }
    Ok(())
}

/// `branches`: at least one, each a plain branch name (what a pull
/// request's base is called, not a ref or a pattern), none twice.
fn check_branches(
    branches: &[String],
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    if branches.is_empty() {
        return Err(err(
            "branches".into(),
            "is empty, so no merge would ever be applied".into(),
            "name the branches whose merges apply, e.g. `branches = [\"main\"]`, or leave it out to apply merges into the default branch",
        ));
    }
    for (i, branch) in branches.iter().enumerate() {
        let field = format!("branches[{i}]");
        let odd = branch.is_empty()
            || branch.starts_with(['-', '/'])
            || branch.starts_with("refs/")
            || branch.ends_with(['/', '.'])
            || branch.contains("..")
            || branch
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c));
        if odd {
            return Err(err(
                field,
                format!("`{branch}` is not a branch name"),
                "write the branch as a pull request's base names it, e.g. `main` or `release/2026` (no `refs/heads/`, no patterns)",
            ));
        }
        if branches[..i].contains(branch) {
            return Err(err(
                field,
                format!("`{branch}` is listed twice"),
                "list each branch once",
            ));
        }
    }
    Ok(())
}

/// `[notify]`: at least one target, each a name the server's environment
/// can define (`WAVEGATE_NOTIFY_<NAME>_URL`), none twice; events none twice.
fn check_notify(
    notify: &Notify,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    if notify.to.is_empty() {
        return Err(err(
            "notify.to".into(),
            "is empty, so no one would hear of anything".into(),
            "name a target the server defines, e.g. `to = [\"infra-alerts\"]` (WAVEGATE_NOTIFY_INFRA_ALERTS_URL on the server), or remove [notify]",
        ));
    }
    for (i, target) in notify.to.iter().enumerate() {
        let field = format!("notify.to[{i}]");
        if target.is_empty()
            || !target
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        {
            return Err(err(
                field,
                format!("`{target}` is not a target name"),
                "use letters, digits, `-` and `_`: the server defines the target as WAVEGATE_NOTIFY_<NAME>_URL",
            ));
        }
        if notify.to[..i]
            .iter()
            .any(|t| notify_env_name(t) == notify_env_name(target))
        {
            return Err(err(
                field,
                format!(
                    "`{target}` is listed twice (as WAVEGATE_NOTIFY_{}_URL)",
                    notify_env_name(target)
                ),
                "list each target once",
            ));
        }
    }
    for (i, event) in notify.events.iter().enumerate() {
        if notify.events[..i].contains(event) {
            return Err(err(
                format!("notify.events[{i}]"),
                format!("`{}` is listed twice", event.as_str()),
                "list each event once",
            ));
        }
    }
    Ok(())
}

/// How a notify target's name reads in the server's variables:
/// `infra-alerts` is `INFRA_ALERTS` (`WAVEGATE_NOTIFY_INFRA_ALERTS_URL`).
pub(crate) fn notify_env_name(target: &str) -> String {
    target.to_ascii_uppercase().replace('-', "_")
}

const STAGE_PLACEHOLDER: &str = "{stage}";
const PATH_PLACEHOLDER_FIX: &str =
    "only `{stage}` and `{component}` may appear in `dir` and `paths`; remove the braces or use one of them";

/// Fills `{component}` (and `{stage}` when given) in a `dir` or `paths`
/// entry; any other `{…}` is refused, since it would be matched literally.
fn fill_path(text: &str, component: &str, stage: Option<&str>) -> Result<String, String> {
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(format!("`{text}` has a `{{` that is never closed"));
        };
        let name = &rest[open + 1..open + close];
        if name != "stage" && name != "component" {
            return Err(format!("unknown placeholder `{{{name}}}` in `{text}`"));
        }
        rest = &rest[open + close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("`{text}` has a `}}` with no `{{`"));
    }
    let filled = text.replace("{component}", component);
    Ok(match stage {
        Some(stage) => filled.replace(STAGE_PLACEHOLDER, stage),
        None => filled,
    })
}

impl Component {
    /// The component's directory in `stage`: `dir` with `{stage}` filled in.
    pub(crate) fn dir_in(&self, stage: &str) -> String {
        self.dir.replace(STAGE_PLACEHOLDER, stage)
    }
}

fn check_dir(dir: &str) -> Result<(), String> {
    if dir.is_empty() {
        return Err("is empty".into());
    }
    if dir.starts_with('/') {
        return Err(format!("`{dir}` is absolute"));
    }
    if dir.split('/').any(|s| s == "..") {
        return Err(format!("`{dir}` leaves the repository through `..`"));
    }
    Ok(())
}

fn check_argv(
    argv: &[String],
    field: &str,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    let template = Template {
        what: None,
        allowed: PLACEHOLDERS,
        example: "[\"./ci/plan.sh\", \"{component}\", \"{plan_file}\"]",
        also: "",
        needs: None,
    };
    template
        .check(argv)
        .map_err(|(problem, fix)| err(field.into(), problem, &fix))
}

fn resolve_argv(
    own: &Option<Vec<String>>,
    default: &Option<Vec<String>>,
    field: &str,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Option<Vec<String>>, ConfigError> {
    match own {
        Some(argv) => {
            check_argv(argv, field, err)?;
            Ok(Some(argv.clone()))
        }
        None => Ok(default.clone()),
    }
}

fn compile_patterns(
    texts: &[String],
    field: &str,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Vec<Pattern>, ConfigError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Pattern::new(t).map_err(|p| {
                err(
                    format!("{field}[{i}]"),
                    p,
                    "write a pattern relative to the repository root, e.g. `infra/app/**`",
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[defaults]
plan = ["./ci/plan.sh", "{component}", "{stage}", "{plan_file}"]
timeout = "10m"
[[stage]]
name = "dev"
gate = "never"
[[stage]]
name = "prod"
[[component]]
name = "network"
dir = "infra/network"
paths = ["infra/network/**", "modules/net/**"]
[[component]]
name = "app"
dir = "infra/app/"
depends_on = ["network"]
inputs = { vpc_id = "network.vpc_id" }
stages = ["prod", "dev"]
timeout = "90s"
[policy]
approvers = ["alice"]
"#;

    fn error_of(text: &str) -> String {
        RepoConfig::parse("wavegate.toml", text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_build_input_reads_an_artifact_of_a_build_component_and_only_of_one() {
        let with_build = |kind: &str| {
            format!(
                "[defaults]\nplan = [\"p\"]\n[[stage]]\nname = \"dev\"\n[[component]]\nname = \"image\"\ndir = \"build/image\"\n{kind}\n[[component]]\nname = \"web\"\ndir = \"infra/web\"\ndepends_on = [\"image\"]\ninputs = {{ image = \"build:image.digest\", tag = \"image.tag\" }}\n"
            )
        };
        let c = RepoConfig::parse("wavegate.toml", &with_build("kind = \"build\"")).unwrap();
        assert_eq!(c.component("image").unwrap().kind, ComponentKind::Build);
        assert_eq!(c.component("web").unwrap().kind, ComponentKind::Infra);
        let inputs: Vec<(&str, bool)> = c
            .component("web")
            .unwrap()
            .inputs
            .iter()
            .map(|i| (i.name.as_str(), i.build))
            .collect();
        assert_eq!(inputs, [("image", true), ("tag", false)]);
        let e = error_of(&with_build(""));
        assert!(
            e.contains("`component[1] (web).inputs.image`: `build:image.digest` reads a build artifact, but `image` is not a build; fix: declare `image` with `kind = \"build\"`"),
            "{e}"
        );
        let e = error_of(&with_build("kind = \"docker\""));
        assert!(e.contains("unknown variant `docker`"), "{e}");
    }

    #[test]
    fn a_good_config_resolves_defaults() {
        let c = RepoConfig::parse("wavegate.toml", GOOD).unwrap();
        assert_eq!(
            c.stages[1].gate,
            GatePolicy::Always,
            "a stage without a gate is the strictest"
        );
        let app = c.component("app").unwrap();
        assert_eq!(app.dir, "infra/app");
        assert_eq!(
            app.stages,
            vec!["dev", "prod"],
            "file order of stages, not the component's"
        );
        assert_eq!(app.timeout, Duration::from_secs(90));
        assert_eq!(app.paths[0].as_str(), "infra/app/**");
        assert_eq!(
            c.component("network").unwrap().timeout,
            Duration::from_secs(600)
        );
        assert_eq!(
            app.inputs,
            vec![Input {
                name: "vpc_id".into(),
                upstream: "network".into(),
                output: "vpc_id".into(),
                build: false,
            }]
        );
        assert_eq!(c.ignore.len(), 2);
        assert_eq!(c.policy.required, 1);
    }

    #[test]
    fn stage_and_component_placeholders_fill_dir_and_paths() {
        let c = RepoConfig::parse(
            "wavegate.toml",
            &GOOD.replace("dir = \"infra/app/\"", "dir = \"envs/{stage}/{component}\""),
        )
        .unwrap();
        let app = c.component("app").unwrap();
        assert_eq!(app.dir, "envs/{stage}/app");
        assert_eq!(app.dir_in("prod"), "envs/prod/app");
        assert!(app.paths.is_empty());
        let stage_paths: Vec<(&str, &str)> = app
            .stage_paths
            .iter()
            .map(|(s, p)| (s.as_str(), p.as_str()))
            .collect();
        assert_eq!(
            stage_paths,
            [("dev", "envs/dev/app/**"), ("prod", "envs/prod/app/**")]
        );
    }

    #[test]
    fn a_brace_that_is_no_placeholder_is_refused_where_it_would_be_taken_literally() {
        let e = error_of(&GOOD.replace("dir = \"infra/app/\"", "dir = \"envs/{env}/app\""));
        assert!(
            e.contains("`component[1] (app).dir`: unknown placeholder `{env}` in `envs/{env}/app`"),
            "{e}"
        );
        assert!(e.contains("only `{stage}` and `{component}`"), "{e}");
        let e = error_of(&GOOD.replace("\"modules/net/**\"", "\"modules/{net/**\""));
        assert!(e.contains("never closed"), "{e}");
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let e = error_of(&GOOD.replace("depends_on = [\"network\"]", "dependson = [\"network\"]"));
        assert!(e.starts_with("wavegate.toml: line "), "{e}");
        assert!(e.contains("unknown field `dependson`"), "{e}");
        assert!(e.contains("fix:"), "{e}");
    }

    #[test]
    fn a_cycle_is_named_as_its_path() {
        let text = GOOD.replace(
            "name = \"network\"\n",
            "name = \"network\"\ndepends_on = [\"app\"]\n",
        );
        let e = error_of(&text);
        assert!(
            e.contains("dependency cycle: network → app → network"),
            "{e}"
        );
        assert!(e.contains("`component[0] (network).depends_on`"), "{e}");
    }

    #[test]
    fn each_mistake_names_its_field() {
        let cases = [
            (
                GOOD.replace("depends_on = [\"network\"]", "depends_on = [\"netwrk\"]"),
                "`component[1] (app).depends_on[0]`: unknown component `netwrk`",
            ),
            (
                GOOD.replace("name = \"app\"", "name = \"network\""),
                "`component[1].name`: component `network` is defined twice",
            ),
            (
                GOOD.replace("name = \"prod\"", "name = \"override\""),
                "`stage[1].name`: `override` is not a stage name wavegate can use",
            ),
            (
                GOOD.replace("name = \"prod\"", "name = \"round-2\""),
                "its gate would read as another kind (`pr-<n>-round-2`)",
            ),
            (
                GOOD.replace("timeout = \"10m\"", "timeout = \"10m\"\nshared = [\"/ci/**\"]"),
                "`defaults.shared[0]`: `/ci/**` starts with `/`",
            ),
            (
                GOOD.replace("timeout = \"90s\"", "timeout = \"90s\"\nshared = [\"ci/{env}.sh\"]"),
                "`component[1] (app).shared[0]`: unknown placeholder `{env}`",
            ),
            (
                GOOD.replace("timeout = \"90s\"", "timeout = \"soon\""),
                "`component[1] (app).timeout`: `soon` is not a duration",
            ),
            (
                GOOD.replace("timeout = \"10m\"", "timeout = \"ten minutes\""),
                "`defaults.timeout`",
            ),
            (
                GOOD.replace(
                    "plan = [\"./ci/plan.sh\", \"{component}\", \"{stage}\", \"{plan_file}\"]",
                    "plan = []",
                ),
                "`defaults.plan`: the command is empty",
            ),
            (
                GOOD.replace("{plan_file}", "{planfile}"),
                "unknown placeholder `{planfile}`",
            ),
            (
                GOOD.replace("stages = [\"prod\", \"dev\"]", "stages = [\"qa\"]"),
                "`component[1] (app).stages[0]`: unknown stage `qa`",
            ),
            (
                GOOD.replace("network.vpc_id", "vpc_id"),
                "is not `component.output`",
            ),
            (
                GOOD.replace("dir = \"infra/app/\"", "dir = \"../app\""),
                "leaves the repository",
            ),
            (
                GOOD.replace("approvers = [\"alice\"]", "required = 0"),
                "`policy.required`",
            ),
            (
                GOOD.replace(
                    "paths = [\"infra/network/**\", \"modules/net/**\"]",
                    "paths = [\"/abs/**\"]",
                ),
                "`component[0] (network).paths[0]`",
            ),
            (
                GOOD.replace("approvers = [\"alice\"]", "approval_ttl = \"a week\""),
                "`policy.approval_ttl`: `a week` is not a duration",
            ),
            (
                GOOD.replace("gate = \"never\"", "gate = \"sometimes\""),
                "unknown variant `sometimes`",
            ),
            (
                format!("branches = []\n{GOOD}"),
                "`branches`: is empty, so no merge would ever be applied",
            ),
            (
                format!("branches = [\"main\", \"refs/heads/release\"]\n{GOOD}"),
                "`branches[1]`: `refs/heads/release` is not a branch name",
            ),
            (
                format!("branches = [\"release-*\"]\n{GOOD}"),
                "`branches[0]`: `release-*` is not a branch name",
            ),
            (
                format!("branches = [\"main\", \"main\"]\n{GOOD}"),
                "`branches[1]`: `main` is listed twice",
            ),
            (
                format!("{GOOD}\n[notify]\nto = []\n"),
                "`notify.to`: is empty",
            ),
            (
                format!("{GOOD}\n[notify]\nto = [\"#infra\"]\n"),
                "`notify.to[0]`: `#infra` is not a target name",
            ),
            (
                format!("{GOOD}\n[notify]\nto = [\"infra-alerts\", \"INFRA_ALERTS\"]\n"),
                "`notify.to[1]`: `INFRA_ALERTS` is listed twice (as WAVEGATE_NOTIFY_INFRA_ALERTS_URL)",
            ),
            (
                format!("{GOOD}\n[notify]\nto = [\"ops\"]\nevents = [\"applied\", \"stood-down\"]\n"),
                "unknown variant `stood-down`, expected one of `waiting`, `refused`, `applied`, `failed`",
            ),
            (
                format!("{GOOD}\n[notify]\nto = [\"ops\"]\nevents = [\"failed\", \"failed\"]\n"),
                "`notify.events[1]`: `failed` is listed twice",
            ),
        ];
        for (text, expected) in cases {
            let e = error_of(&text);
            assert!(e.contains(expected), "expected `{expected}` in: {e}");
            assert!(e.contains("fix: "), "{e}");
        }
    }

    #[test]
    fn an_input_must_read_an_upstream() {
        let text = GOOD.replace("depends_on = [\"network\"]\n", "");
        let e = error_of(&text);
        assert!(e.contains("`component[1] (app).inputs.vpc_id`"), "{e}");
        assert!(e.contains("add `network` to `depends_on` of `app`"), "{e}");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("m5").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_duration(" 2m ").unwrap(), Duration::from_secs(120));
    }

    #[test]
    fn config_changes_select_what_they_touch() {
        let base = RepoConfig::parse_raw("wavegate.toml", GOOD).unwrap();
        let head_of = |text: &str| RepoConfig::parse("wavegate.toml", text).unwrap();
        let same = head_of(GOOD);
        assert!(config_changed_components(Some(&base), &same).is_empty());
        let app_entry = head_of(&GOOD.replace("timeout = \"90s\"", "timeout = \"95s\""));
        assert_eq!(
            config_changed_components(Some(&base), &app_entry),
            BTreeSet::from(["app".to_owned()])
        );
        // app overrides its timeout, so only network uses the default.
        let default_timeout = head_of(&GOOD.replace("timeout = \"10m\"", "timeout = \"11m\""));
        assert_eq!(
            config_changed_components(Some(&base), &default_timeout),
            BTreeSet::from(["network".to_owned()])
        );
        let stage = head_of(&GOOD.replace("gate = \"never\"", "gate = \"on-destructive\""));
        assert_eq!(config_changed_components(Some(&base), &stage).len(), 2);
        assert_eq!(config_changed_components(None, &same).len(), 2);
    }

    #[test]
    fn a_stage_may_name_its_own_approvers_count_reviews_and_timeout() {
        let text = GOOD.replace(
            "name = \"prod\"\n",
            "name = \"prod\"\napprovers = [\"team:sre\"]\nrequired = 2\nreview_approvals = true\ntimeout = \"2h\"\n",
        );
        let config = RepoConfig::parse("wavegate.toml", &text).unwrap();
        assert_eq!(
            config.stage("prod").unwrap().timeout,
            Some(Duration::from_secs(7200))
        );
        let base = RepoConfig::parse_raw("wavegate.toml", &text).unwrap();
        let prod = stage_policy(Some(&base), &config.policy, "prod");
        assert_eq!(prod.approvers, ["team:sre"]);
        assert_eq!(prod.required, 2);
        assert!(prod.review_approvals);
        assert_eq!(prod.allow_self_approval, config.policy.allow_self_approval);
        let dev = stage_policy(Some(&base), &config.policy, "dev");
        assert_eq!(
            dev, config.policy,
            "a stage that says nothing reads [policy]"
        );
        assert_eq!(
            stage_timeout(Some(&base), "prod"),
            Some(Duration::from_secs(7200))
        );
        assert_eq!(stage_timeout(Some(&base), "dev"), None);
        assert_eq!(stage_policy(None, &config.policy, "prod"), config.policy);

        for (field, bad, expected) in [
            (
                "required = 2",
                "required = 0",
                "`stage[1] (prod).required`: is 0",
            ),
            (
                "timeout = \"2h\"",
                "timeout = \"soon\"",
                "`stage[1] (prod).timeout`: `soon` is not a duration",
            ),
        ] {
            let e = error_of(&text.replace(field, bad));
            assert!(e.contains(expected), "expected `{expected}` in: {e}");
            assert!(e.contains("fix: "), "{e}");
        }
    }

    #[test]
    fn a_stage_may_be_approved_wave_by_wave_where_a_gate_holds_it_and_no_cost_binds_it() {
        let text = GOOD.replace(
            "name = \"prod\"\n",
            "name = \"prod\"\ngate_scope = \"wave\"\n",
        );
        let base = RepoConfig::parse_raw("wavegate.toml", &text).unwrap();
        RepoConfig::parse("wavegate.toml", &text).unwrap();
        assert_eq!(gate_scope_of(Some(&base), "prod"), GateScope::Wave);
        assert_eq!(gate_scope_of(Some(&base), "dev"), GateScope::Stage);
        assert_eq!(gate_scope_of(None, "prod"), GateScope::Stage);

        let never = GOOD.replace(
            "gate = \"never\"",
            "gate = \"never\"\ngate_scope = \"wave\"",
        );
        let e = error_of(&never);
        assert!(
            e.contains(
                "`stage[0] (dev).gate_scope`: is \"wave\", but the stage's gate is \"never\""
            ),
            "{e}"
        );
        let priced = format!("{text}[cost]\ncommand = [\"./price.sh\", \"{{cost_file}}\"]\n");
        let e = error_of(&priced);
        assert!(
            e.contains(
                "`stage[1] (prod).gate_scope`: is \"wave\", but the stage has a cost command"
            ),
            "{e}"
        );
        let e = error_of(&GOOD.replace("name = \"prod\"", "name = \"prod-wave-2\""));
        assert!(e.contains("(`pr-<n>-prod-wave-2`)"), "{e}");
        let e = error_of(&text.replace("gate_scope = \"wave\"", "gate_scope = \"waves\""));
        assert!(e.contains("expected `stage` or `wave`"), "{e}");
    }

    #[test]
    fn a_commands_word_names_a_repository_file_from_the_root_or_its_dir() {
        let file = |word| repository_file((false, word), "app", "infra/{stage}/app");
        let program = |word| repository_file((true, word), "app", "infra/{stage}/app");
        assert_eq!(program("./ci/plan.sh").as_deref(), Some("ci/plan.sh"));
        assert_eq!(program("ci/plan.sh").as_deref(), Some("ci/plan.sh"));
        assert_eq!(program("terraform"), None, "found on PATH");
        assert_eq!(program("/usr/bin/python3"), None);
        assert_eq!(file("{root}/ci/plan.sh").as_deref(), Some("ci/plan.sh"));
        assert_eq!(
            file("{root}/ci/{component}.py").as_deref(),
            Some("ci/app.py")
        );
        assert_eq!(file("../../../ci/./lib.sh").as_deref(), Some("ci/lib.sh"));
        assert_eq!(
            file("./run.sh").as_deref(),
            Some("infra/{stage}/app/run.sh")
        );
        for none in [
            "terraform",
            "{plan_file}",
            "{root}/x/{plan_file}",
            "../../../../etc/passwd",
            "--chdir={root}/x",
            "{root}/",
        ] {
            assert_eq!(file(none), None, "{none}");
        }
    }

    #[test]
    fn gates_come_from_the_base_and_default_to_always() {
        let base = RepoConfig::parse_raw("wavegate.toml", GOOD).unwrap();
        assert_eq!(gate_of(Some(&base), "dev"), GatePolicy::Never);
        assert_eq!(gate_of(Some(&base), "prod"), GatePolicy::Always);
        assert_eq!(gate_of(Some(&base), "staging"), GatePolicy::Always);
        assert_eq!(gate_of(None, "dev"), GatePolicy::Always);
    }
}
