//! Plans a change end to end: resolve the revisions, read the config, derive
//! the fan-out, check out the head, plan each wave's members (bounded
//! concurrency), resolve their inputs, and bind the result into a change set.
//!
//! A member that fails to plan blocks only its own downstream members; the
//! rest go on. Nothing here talks to a forge or a store.

use super::changeset::{ChangeSetError, MemberStatus};
use super::cost::{self, StageCost};
use super::executor::{
    Control, Executors, Files, Finished, Job, JobName, LocalExecutor, LocalTree, RemoteExecutor,
};
use super::fanout::{self, member_name, Derivation, FanOutInput, SkipReason, Skipped};
use super::hook_run::{read_hold, HookCall, HookRan, HOLD_EXIT};
pub(crate) use super::outcome::{change_set_of, ApplyOutcome, InputSource, ResolvedInput};
pub use super::outcome::{MemberOutcome, PlannedChange};
use super::planfile::{MemberPlan, PlanFileError, MAX_PLAN_FILE_BYTES};
use super::preview::{self, Preview};
use super::runner::{self, Cancel, CommandOutcome};
use super::tail::OutputTail;
use crate::config::cost::{CostCommand, CostCommands};
use crate::config::discover::{read_units, Discoverer, Unit, MAX_UNITS_FILE_BYTES};
use crate::config::execution::StageExecution;
use crate::config::groups::Batch;
use crate::config::hooks::Hook;
use crate::config::repo::{config_changed_components, Component};
use crate::config::{ConfigError, RepoConfig, CONFIG_FILE};
use crate::git;
use crate::model::{DigestOver, MemberId, Money, StageName};
use crate::sandbox::{files, CommandKind, Profile, Sandbox};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

mod group;

/// Outputs an earlier apply recorded per member (the store provides them later).
pub(crate) trait RecordedOutputs: Send + Sync {
    fn outputs(&self, member: &str) -> Option<Map<String, Value>>;
}

/// Outputs given by the caller, by member, taken on trust (`--outputs FILE`).
pub(crate) type SeededOutputs = BTreeMap<String, Map<String, Value>>;

#[derive(Clone)]
pub struct PlanOptions {
    pub(crate) repo: PathBuf,
    pub(crate) base: String,
    pub(crate) head: String,
    pub stage: Option<String>,
    pub seeded: SeededOutputs,
    pub(crate) recorded: Option<Arc<dyn RecordedOutputs>>,
    /// Plans running at once within a wave.
    pub concurrency: usize,
    pub(crate) output_cap: usize,
    /// See `WAVEGATE_HEARTBEAT`; `None`: no heartbeat.
    pub heartbeat: Option<Duration>,
    /// Where every command runs.
    pub(crate) sandbox: Arc<Sandbox>,
    /// Stops the commands when the job is given up.
    pub(crate) cancel: Cancel,
    /// The repository (`owner/name`) planned, for profiles the operator
    /// keeps for some repositories; `None` (the local CLI): not checked.
    pub(crate) repository: Option<String>,
    /// The head is merged (an apply run): its config is the base branch's
    /// own, and chooses the profiles and timeouts. Otherwise the base's does.
    pub(crate) merged: bool,
    /// The base may pick execution profiles for a pull request's plans: it
    /// is a branch whose merges apply, and the head is no fork's. Otherwise
    /// (anyone who can push a branch could write its `wavegate.toml`, and a
    /// fork's code is a stranger's) every stage plans with `default`.
    pub(crate) base_picks_profiles: bool,
    /// `apply --local`, which an operator runs on their own checkout: every
    /// member runs, as if every component changed, and its plans, the
    /// first step of this process's own applies, run with the applies'
    /// profile and access to the state (a member's first plan may have to
    /// create its state's place).
    pub(crate) bootstrap: bool,
    /// A drift check: every member of `stage` is planned, as if every
    /// component changed, each with its stage's plan profile.
    pub(crate) every_member: bool,
    /// A drift run: only these members of those `every_member` selects run.
    pub(crate) only_members: Option<Arc<std::collections::BTreeSet<MemberId>>>,
    /// A targeted `/plan`: what it names, and the earlier plans of this
    /// commit the other members keep.
    pub(crate) kept: Option<Arc<super::targets::KeptPlans>>,
    /// What the operator's central configuration imposes on the
    /// repository (`WAVEGATE_REPOS_CONFIG`): merged into its file, base
    /// and head alike.
    pub imposed: Arc<crate::config::operator::Imposed>,
    /// Where the commands' output is shown live and kept; `None` (the
    /// CLI): the log and the report only.
    pub(crate) console: Option<super::live::Console>,
    /// Where jobs of profiles with `executor = "actions"` run; `None` (the
    /// CLI): such a job fails, saying so.
    pub(crate) remote: Option<Arc<dyn RemoteExecutor>>,
}

impl PlanOptions {
    pub fn new(
        repo: impl Into<PathBuf>,
        base: impl Into<String>,
        head: impl Into<String>,
        sandbox: Arc<Sandbox>,
    ) -> Self {
        Self {
            repo: repo.into(),
            base: base.into(),
            head: head.into(),
            stage: None,
            seeded: SeededOutputs::new(),
            recorded: None,
            concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            output_cap: runner::DEFAULT_OUTPUT_CAP,
            heartbeat: Some(crate::config::DEFAULT_HEARTBEAT),
            sandbox,
            cancel: Cancel::default(),
            repository: None,
            merged: false,
            base_picks_profiles: true,
            bootstrap: false,
            every_member: false,
            only_members: None,
            kept: None,
            imposed: Default::default(),
            console: None,
            remote: None,
        }
    }
}

/// Outputs files are small: a map of names to values.
const MAX_OUTPUTS_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Why a change could not be planned at all (as opposed to a member failing).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// Reads config and paths and derives the fan-out, without running anything.
pub(crate) struct Prepared {
    pub(crate) base: String,
    pub(crate) head: String,
    pub(crate) config: RepoConfig,
    pub(crate) derivation: Derivation,
    /// The environment variables commands get passed on: the base branch's
    /// `env` list (a pull request cannot widen its own), none when the base
    /// has no readable config.
    pub(crate) base_env: Vec<String>,
    /// Which members the change set's digest binds, as the base's policy
    /// says (every member when the base has no readable config).
    pub(crate) digest_over: DigestOver,
    /// The base's cost commands and `[policy] max_monthly_increase`: a pull
    /// request does not choose how its cost is reckoned.
    pub(crate) costs: CostCommands,
    pub(crate) max_increase: Option<Money>,
    pub(crate) preview: Preview,
    /// What the fan-out is derived from (again, once units are discovered).
    changed: Vec<String>,
    base_text: Option<String>,
    /// Each stage's profile choice, as the choosing config says (see
    /// [`PlanOptions::merged`]).
    execution: BTreeMap<StageName, StageExecution>,
    /// The base's plan timeouts; `None` when the head is merged.
    plan_timeouts: Option<BaseTimeouts>,
    /// Why the base's profile choices were set aside, for the report.
    profiles_note: Option<String>,
    /// The base's `[[policy.rego]]`, its files read at the base commit.
    policies: Arc<super::rego::RegoPolicies>,
    /// Which settings the operator's central configuration gave, for the report.
    operator_note: Option<String>,
}

impl Prepared {
    /// Names the head's `env` adds to the base's: passed on only once merged.
    pub(crate) fn env_added_by_head(&self) -> Vec<String> {
        self.config
            .env
            .iter()
            .filter(|name| !self.base_env.contains(name))
            .cloned()
            .collect()
    }
}

pub(crate) fn prepare(options: &PlanOptions) -> Result<Prepared, PlanError> {
    let repo = &options.repo;
    if !git::is_repository(repo) {
        return Err(PlanError::Usage(format!(
            "{} is not a git repository; pass --repo DIR of a checkout",
            repo.display()
        )));
    }
    let base =
        git::resolve(repo, &options.base).map_err(|e| PlanError::Usage(format!("--base: {e}")))?;
    let head =
        git::resolve(repo, &options.head).map_err(|e| PlanError::Usage(format!("--head: {e}")))?;
    let head_text = git::read_file(repo, &head, CONFIG_FILE)?.ok_or_else(|| ConfigError {
        file: CONFIG_FILE.into(),
        field: String::new(),
        problem: format!(
            "there is no {CONFIG_FILE} at the head commit {}",
            &head[..12]
        ),
        fix: format!("add a {CONFIG_FILE} at the repository root (see docs/configuration.md)"),
    })?;
    let config = RepoConfig::parse_with(CONFIG_FILE, &head_text, &options.imposed)?;
    let changed = git::changed_paths(repo, &base, &head)?;
    let base_text = git::read_file(repo, &base, CONFIG_FILE)?;
    let base_config = base_text
        .as_deref()
        .and_then(|t| RepoConfig::parse_with(CONFIG_FILE, t, &options.imposed).ok());
    let base_env = base_config
        .as_ref()
        .map(|c| c.env.clone())
        .unwrap_or_default();
    let digest_over = base_config
        .as_ref()
        .map_or(DigestOver::All, |c| c.policy.digest_over);
    let max_increase = base_config
        .as_ref()
        .and_then(|c| c.policy.max_monthly_increase);
    config.check_profiles(options.sandbox.profiles(), options.repository.as_deref())?;
    let choosing = if options.merged {
        Some(&config)
    } else if options.base_picks_profiles {
        base_config.as_ref()
    } else {
        None
    };
    let set_aside = !options.merged
        && !options.base_picks_profiles
        && base_config.as_ref().is_some_and(|c| {
            c.stages.iter().any(|s| {
                s.execution.profile != crate::config::execution::ProfileChoice::default_profile()
                    || !s.execution.jobs.is_empty()
            })
        });
    let profiles_note = set_aside.then(|| {
        "every stage planned with the server's `default` execution profile: the base branch names others, and profiles are picked only for the repository's own pull requests into a branch whose merges apply".to_owned()
    });
    let execution = choosing
        .map(|c| {
            c.stages
                .iter()
                .map(|s| (s.name.clone(), s.execution.clone()))
                .collect()
        })
        .unwrap_or_default();
    let plan_timeouts = match (options.merged, &base_config) {
        (true, _) => None,
        (false, Some(base)) => Some(BaseTimeouts::of_config(base)),
        (false, None) => Some(BaseTimeouts {
            by_component: HashMap::new(),
            by_discoverer: HashMap::new(),
            by_group: HashMap::new(),
            default: crate::config::repo::DEFAULT_TIMEOUT,
        }),
    };
    let policies_at = |commit: &str, rego: &[crate::config::repo::RawRego]| {
        let listed = git::list_files(repo, commit).map_err(|e| format!("{e:#}"))?;
        super::rego::RegoPolicies::load(rego, &listed, |path| {
            git::read_file(repo, commit, path)
                .map_err(|e| format!("{e:#}"))?
                .ok_or_else(|| format!("{path} is not at {commit}"))
        })
    };
    // A change to the policies must leave them working: once merged,
    // they judge every later change.
    let rego_patterns: Vec<crate::config::glob::Pattern> = config
        .policy
        .rego
        .iter()
        .flat_map(|r| &r.files)
        .filter_map(|p| crate::config::glob::Pattern::new(p).ok())
        .collect();
    if changed
        .iter()
        .any(|path| rego_patterns.iter().any(|p| p.matches(path)))
    {
        policies_at(&head, &config.policy.rego).map_err(|e| {
            PlanError::Usage(format!(
                "this change breaks the Rego policies, which would then judge every later change: {e}"
            ))
        })?;
    }
    // The base's policies judge; ones that cannot deny every plan, saying
    // why, so that the change fixing them can still be planned.
    let policies = match base_config.as_ref().map(|c| c.policy.rego.as_slice()) {
        Some(rego) if !rego.is_empty() => {
            policies_at(&base, rego).unwrap_or_else(|e| super::rego::RegoPolicies::unable(&e))
        }
        _ => Default::default(),
    };
    let costs = base_config.map(|c| c.cost).unwrap_or_default();
    let (mut derivation, preview) =
        derive(options, &base, base_text.as_deref(), &config, &changed)?;
    if let Some(only) = &options.only_members {
        derivation.keep_only(only);
    }
    let operator_note = config
        .raw
        .from_operator
        .as_ref()
        .filter(|from| !from.keys.is_empty())
        .map(|from| {
            let keys: Vec<String> = from.keys.iter().map(|k| format!("`{k}`")).collect();
            format!(
                "Set by the operator's central configuration, not this repository's file ({}): {}",
                from.source,
                keys.join(", ")
            )
        });
    Ok(Prepared {
        operator_note,
        execution,
        plan_timeouts,
        profiles_note,
        policies: Arc::new(policies),
        base,
        head,
        config,
        derivation,
        base_env,
        digest_over,
        costs,
        max_increase,
        preview,
        changed,
        base_text,
    })
}

/// A targeted `/plan`: the members it does not name (nor reads what they
/// plan) keep their plans of this commit, said in a note. A target that
/// names nothing here plans everything, saying why: the report stays whole.
fn keep_untargeted(prepared: &Prepared, bench: &mut Workbench, kept: &super::targets::KeptPlans) {
    let members = &prepared.derivation.members;
    let targeted = match super::targets::targeted(&prepared.config, members, &kept.only) {
        Ok(targeted) => targeted,
        Err(why) => {
            bench
                .notes
                .push(format!("⚠️ {why}: everything was planned again"));
            return;
        }
    };
    // A group plans its mates together, and a cost command prices its
    // stage's plan files: neither keeps part of what it covers.
    if members
        .iter()
        .any(|m| prepared.config.groups.of(m.component()).is_some())
    {
        bench.notes.push(format!(
            "`/plan {}`: this change plans components in a `[[group]]`, whose mates plan together, so everything was planned again",
            kept.only.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
        ));
        return;
    }
    let priced = |m: &MemberId| prepared.costs.at(m.stage()).is_some();
    let keeping: Vec<&MemberId> = members
        .iter()
        .filter(|m| !targeted.contains(*m) && !priced(m) && kept.plans.contains_key(*m))
        .collect();
    for member in &keeping {
        bench
            .kept
            .insert((*member).clone(), kept.plans[*member].clone());
    }
    let names = |list: Vec<&MemberId>| {
        list.iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let asked: Vec<String> = kept.only.iter().map(|t| t.to_string()).collect();
    let planned: Vec<&MemberId> = members.iter().filter(|m| !keeping.contains(m)).collect();
    let mut note = format!(
        "`/plan {}` planned {} again",
        asked.join(" "),
        names(planned)
    );
    if !keeping.is_empty() {
        note.push_str(&format!(
            "; {} kept from the earlier plan of this commit (`{}`), and the digest binds them as shown",
            names(keeping),
            &kept.commit[..kept.commit.len().min(12)]
        ));
    }
    bench.notes.push(note);
}

/// The fan-out of `changed` under `config`, and what happens after merge.
fn derive(
    options: &PlanOptions,
    base: &str,
    base_text: Option<&str>,
    config: &RepoConfig,
    changed: &[String],
) -> Result<(Derivation, Preview), PlanError> {
    let config_changed = if options.bootstrap || options.every_member {
        config.components.iter().map(|c| c.name.clone()).collect()
    } else if changed.iter().any(|p| p == CONFIG_FILE) {
        let base_raw = base_text
            .and_then(|t| RepoConfig::parse_raw_with(CONFIG_FILE, t, &options.imposed).ok());
        config_changed_components(base_raw.as_ref(), config)
    } else {
        Default::default()
    };
    let derivation = fanout::derive(&FanOutInput {
        config,
        changed_paths: changed,
        config_changed: &config_changed,
        stage: options.stage.as_deref(),
    })
    .map_err(|e| PlanError::Usage(format!("--stage: {e}")))?;
    let preview = preview::preview(base, base_text, config, &derivation.waves, &options.imposed);
    Ok((derivation, preview))
}

impl Prepared {
    /// A workbench of the commit planned, with this config.
    pub(crate) fn workbench(&self, options: &PlanOptions) -> Result<Workbench, PlanError> {
        let mut bench = Workbench::open(
            options.clone(),
            self.config.clone(),
            self.base_env.clone(),
            &self.head,
        )?;
        bench.digest_over = self.digest_over;
        bench.execution = self.execution.clone();
        bench.plan_timeouts = self.plan_timeouts.clone();
        bench.policies = self.policies.clone();
        bench.notes.extend(self.profiles_note.clone());
        bench.notes.extend(self.operator_note.clone());
        Ok(bench)
    }

    /// Runs each discovering component's command on `bench`'s commit, puts
    /// the units it found in its place and derives the fan-out again; the
    /// workbench plans with the config that names them. A discovery that
    /// fails, or finds units that do not make a valid config, is said with
    /// what it printed.
    pub(crate) async fn discover(
        &mut self,
        options: &PlanOptions,
        bench: &mut Workbench,
    ) -> Result<(), PlanError> {
        if self.config.discoverers.is_empty() {
            return Ok(());
        }
        let mut found = BTreeMap::new();
        for discoverer in self.config.discoverers.clone() {
            let units = bench.run_discover(&discoverer).await.map_err(|e| {
                PlanError::Usage(format!(
                    "component `{}` could not discover its units: {e}",
                    discoverer.name
                ))
            })?;
            let mut note = format!(
                "`{}` discovered {} unit{}",
                discoverer.name,
                units.len(),
                if units.len() == 1 { "" } else { "s" }
            );
            if !units.is_empty() {
                let shown: Vec<String> = units
                    .iter()
                    .take(20)
                    .map(|u| format!("`{}`", u.name))
                    .collect();
                let more = if units.len() > 20 { ", …" } else { "" };
                note.push_str(&format!(": {}{more}", shown.join(", ")));
            }
            bench.notes.push(note);
            found.insert(discoverer.name.clone(), units);
        }
        self.config = self.config.with_units(CONFIG_FILE, &found)?;
        bench.config = self.config.clone();
        (self.derivation, self.preview) = derive(
            options,
            &self.base,
            self.base_text.as_deref(),
            &self.config,
            &self.changed,
        )?;
        Ok(())
    }
}

/// The fan-out of the change between `options.base` and `options.head`,
/// with the units discovering components find on the head: what would be
/// planned, without planning it.
pub async fn derive_change(options: &PlanOptions) -> Result<Derivation, PlanError> {
    let mut prepared = prepare(options)?;
    if !prepared.config.discoverers.is_empty() {
        let mut bench = prepared.workbench(options)?;
        prepared.discover(options, &mut bench).await?;
    }
    Ok(prepared.derivation)
}

/// Plans the change between `options.base` and `options.head`.
pub async fn plan_change(options: &PlanOptions) -> Result<PlannedChange, PlanError> {
    let mut prepared = prepare(options)?;
    let added = prepared.env_added_by_head();
    let mut bench = prepared.workbench(options)?;
    prepared.discover(options, &mut bench).await?;
    check_seeded(&options.seeded, &prepared.config)?;
    if !added.is_empty() {
        bench.notes.push(format!(
            "{CONFIG_FILE} here passes on {} to commands; the list is read from the base branch, so commands get {} only once this is merged",
            quoted(&added),
            if added.len() == 1 { "it" } else { "them" }
        ));
    }
    if let Some(kept) = &options.kept {
        keep_untargeted(&prepared, &mut bench, kept);
    }
    for wave in &prepared.derivation.waves {
        bench.plan_wave(wave).await?;
    }
    let mut costs = Vec::new();
    for stage in &bench.config.stages {
        let Some(command) = prepared.costs.at(stage.name.as_str()) else {
            continue;
        };
        let members: Vec<MemberId> = prepared
            .derivation
            .members
            .iter()
            .filter(|m| m.stage() == stage.name)
            .cloned()
            .collect();
        if members.is_empty() {
            continue;
        }
        let unplanned: Vec<&MemberId> = members
            .iter()
            .filter(|m| bench.outcome(m).is_none_or(|o| o.plan.is_none()))
            .collect();
        costs.push(if unplanned.is_empty() {
            bench
                .run_cost(
                    stage.name.as_str(),
                    command,
                    &members,
                    prepared.max_increase,
                )
                .await
        } else {
            let names: Vec<&str> = unplanned.iter().map(|m| m.as_str()).collect();
            StageCost::failed(
                stage.name.as_str(),
                format!("not priced: {} did not plan", names.join(", ")),
            )
        });
    }
    let Workbench {
        mut outcomes,
        seeded_used,
        seeded_outputs_read,
        mut notes,
        ..
    } = bench;
    let unread: Vec<String> = options
        .seeded
        .iter()
        .flat_map(|(member, outputs)| outputs.keys().map(move |name| (member, name)))
        .filter(|(member, name)| {
            !seeded_outputs_read.contains(&((*member).clone(), (*name).clone()))
        })
        .map(|(member, name)| format!("`{member}.{name}`"))
        .collect();
    if !unread.is_empty() {
        notes.push(format!(
            "⚠️ seeded outputs no plan read: {}; no member planned here reads them (a misspelt name, or a member outside this change or stage?)",
            unread.join(", ")
        ));
    }
    let members: Vec<MemberOutcome> = prepared
        .derivation
        .members
        .iter()
        .filter_map(|m| outcomes.remove(m.as_str()))
        .collect();
    let mut skipped = prepared.derivation.skipped.clone();
    for m in members.iter().filter(|m| m.status == MemberStatus::Blocked) {
        skipped.push(Skipped {
            component: m.component.clone(),
            reason: SkipReason::Blocked,
            member: Some(m.member.clone()),
            blocked_by: m.blocked_by.clone(),
        });
    }
    let change_set = change_set_of(&members, prepared.digest_over)
        .and_then(|set| set.with_costs(costs))
        .map_err(|e| match e {
            ChangeSetError::CostClash(member) => PlanError::Usage(format!(
                "`{member}` is a member here and the base's cost member of its stage; rename the component `{}`",
                cost::COST_COMPONENT
            )),
            other => PlanError::Internal(other.into()),
        })?;
    Ok(PlannedChange {
        base: prepared.base,
        head: prepared.head,
        derivation: prepared.derivation,
        members,
        skipped,
        seeded: seeded_used.into_iter().collect(),
        notes,
        change_set,
        unsandboxed: options.sandbox.is_off(),
        preview: prepared.preview,
    })
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_seeded(seeded: &SeededOutputs, config: &RepoConfig) -> Result<(), PlanError> {
    for member in seeded.keys() {
        let known = member.parse::<MemberId>().is_ok_and(|member| {
            config
                .component(member.component())
                .is_some_and(|c| c.stages.iter().any(|s| member.stage() == s.as_str()))
        });
        if !known {
            return Err(PlanError::Usage(format!(
                "--outputs: `{member}` is not a member of this repository; keys are component@stage, e.g. `network@dev`"
            )));
        }
    }
    Ok(())
}

/// Parses an `--outputs` document: `{"net@dev": {"vpc_id": "vpc-1"}}`.
pub fn parse_seeded(text: &str) -> Result<SeededOutputs, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err(
            "must be a JSON object mapping component@stage to that member's outputs".into(),
        );
    };
    map.into_iter()
        .map(|(member, outputs)| match outputs {
            Value::Object(o) if super::terraform::is_wrapped_outputs(&o) => Err(format!(
                "`{member}` maps to {WRAPPED_WHAT}; {}",
                super::terraform::WRAPPED_OUTPUTS_FIX
            )),
            Value::Object(o) => Ok((member, o)),
            other => Err(format!(
                "`{member}` must map to an object of outputs, found {}",
                super::planfile::kind_of(&other)
            )),
        })
        .collect()
}

/// A worktree of one commit with scratch space for its members' files. It
/// plans members wave by wave, each reading its upstreams' outputs from
/// (in order) what they applied in this run, their plans made here, the
/// caller's seeded outputs, the deployed estate and the recorded outputs;
/// and it applies a member with the plan file its latest plan wrote.
pub(crate) struct Workbench {
    options: PlanOptions,
    config: RepoConfig,
    /// What commands get passed on from the server's environment.
    base_env: Vec<String>,
    /// The job's directory: `tree/` (a fresh copy of the commit, no `.git`),
    /// and per member `files/` and `home/`.
    scratch: tempfile::TempDir,
    outcomes: HashMap<MemberId, MemberOutcome>,
    applied: HashMap<MemberId, Map<String, Value>>,
    /// Outputs read from the deployed estate, per member: Ok(outputs) or why not.
    deployed: HashMap<String, Result<Map<String, Value>, String>>,
    seeded_used: std::collections::BTreeSet<String>,
    /// (member, output) of every seeded output a plan read.
    seeded_outputs_read: std::collections::BTreeSet<(String, String)>,
    notes: Vec<String>,
    /// What each member's applies carried for its later commands (`{carry_file}`).
    carried: HashMap<MemberId, Map<String, Value>>,
    /// Which members the digests bind (a group's digest too).
    digest_over: DigestOver,
    /// Each stage's profiles, as the choosing config says.
    execution: BTreeMap<StageName, StageExecution>,
    /// The base's plan timeouts (a pull request's plan); `None`: the config's own.
    plan_timeouts: Option<BaseTimeouts>,
    /// The base's Rego policies, which judge every plan read.
    policies: Arc<super::rego::RegoPolicies>,
    /// Members a targeted `/plan` does not plan again: their plans of
    /// this commit, kept.
    kept: HashMap<MemberId, MemberPlan>,
    /// The commit, resolved: what every job names.
    commit: String,
    /// Where the commands run.
    executor: Arc<Executors>,
    /// The cached tree commands see through a layer of their own, held
    /// against eviction while the job lives; `None`: the commit's files are
    /// the job's own copy.
    cached: Option<crate::sandbox::trees::CachedTree>,
}

struct Ready {
    outcome: MemberOutcome,
    job: Job,
    /// `quiet`: what of a successful plan's output the report leaves out.
    quiet: Vec<String>,
}

/// One plan command of a wave: a member's own, or a group's for its mates.
enum Call {
    Member(Box<Ready>),
    Group(Box<group::GroupCall>),
}

impl Call {
    fn job(&self) -> &Job {
        match self {
            Call::Member(ready) => &ready.job,
            Call::Group(call) => &call.job,
        }
    }
}

/// An apply command's outcome and its (redacted, capped) output.
#[derive(Debug, Clone)]
pub(crate) struct ApplyRun {
    pub(crate) outcome: ApplyOutcome,
    pub(crate) output: String,
    /// `{"carry": {...}}` in its outputs file, whatever the outcome: what
    /// the member's later commands get in `{carry_file}`.
    pub(crate) carry: Option<Map<String, Value>>,
    /// The forge's page of the run it ran in, when it ran on the forge's CI.
    pub(crate) ran_on: Option<String>,
}

impl Workbench {
    /// Writes the files of `commit` of `options.repo` into a fresh job
    /// directory; `base_env` names what commands get passed on.
    pub(crate) fn open(
        options: PlanOptions,
        config: RepoConfig,
        base_env: Vec<String>,
        commit: &str,
    ) -> Result<Self, PlanError> {
        // The server's own: its commands leave there what no other user of
        // the host may read or run (plans, inputs; under a server running as
        // root, set-user-id programs owned by root).
        let scratch = tempfile::Builder::new()
            .prefix(&job_dir_prefix(std::process::id()))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .map_err(anyhow::Error::from)?;
        let tree = scratch.path().join("tree");
        let index = scratch.path().join("index");
        // Commands see the cached tree through a private layer each; where
        // they cannot, the job copies the tree for itself.
        let commit = git::resolve(&options.repo, commit)?;
        let cached = match options.sandbox.trees() {
            Some(trees) => {
                let cached = trees
                    .tree(&commit, |dest| {
                        git::export_tree(&options.repo, &commit, dest, &index)
                    })
                    .map_err(|e| e.context("putting the commit's tree into the tree cache"))?;
                std::fs::create_dir(&tree).map_err(anyhow::Error::from)?;
                Some(cached)
            }
            None => {
                git::export_tree(&options.repo, &commit, &tree, &index)?;
                None
            }
        };
        let executor = LocalExecutor::new(
            Arc::clone(&options.sandbox),
            LocalTree {
                commit: commit.clone(),
                tree,
                lower: cached.as_ref().map(|c| c.path.clone()),
                dir: scratch.path().join("executor"),
            },
            options.heartbeat,
            options.cancel.clone(),
            options.console.clone(),
        );
        let executor = Executors {
            local: executor,
            remote: options.remote.clone(),
        };
        Ok(Self {
            commit,
            executor: Arc::new(executor),
            cached,
            options,
            config,
            base_env,
            scratch,
            outcomes: HashMap::new(),
            applied: HashMap::new(),
            deployed: HashMap::new(),
            seeded_used: Default::default(),
            seeded_outputs_read: Default::default(),
            notes: Vec::new(),
            carried: HashMap::new(),
            digest_over: DigestOver::All,
            execution: BTreeMap::new(),
            plan_timeouts: None,
            policies: Default::default(),
            kept: HashMap::new(),
        })
    }

    pub(crate) fn config(&self) -> &RepoConfig {
        &self.config
    }

    /// `asked`, the head's timeout for a command, at most what the base
    /// allows for the same (`base`) in a pull request's run, so it cannot
    /// lengthen its own; in an apply run the config's own.
    fn bounded(&self, asked: Duration, base: impl FnOnce(&BaseTimeouts) -> Duration) -> Duration {
        match &self.plan_timeouts {
            Some(timeouts) => asked.min(base(timeouts)),
            None => asked,
        }
    }

    /// The commit's files where the server reads them: the cached tree, or
    /// the job's copy.
    fn files_root(&self) -> PathBuf {
        match &self.cached {
            Some(cached) => cached.path.clone(),
            None => self.scratch.path().join("tree"),
        }
    }

    /// Runs one of the job's own commands (`what`, for its errors): what
    /// it left in its files directory and the end of what it printed when
    /// it succeeded, else why not with that end.
    async fn run_own(&self, job: &Job, what: &str) -> Result<(Files, String), String> {
        let finished = self
            .executor
            .run(job, Control::default())
            .await
            .map_err(|e| format!("{what} could not start: {e}"))?;
        let ran = &finished.outcome;
        let tail = ran.tail(10);
        if !ran.succeeded() {
            return Err(runner::with_last_output(ran.describe(what), &tail));
        }
        match finished.files {
            Ok(files) => Ok((files, tail)),
            Err(why) => Err(runner::with_last_output(format!("{what}: {why}"), &tail)),
        }
    }

    /// Where the server keeps what a member's commands carry from one to
    /// the next (its plan file, what its plan left beside it).
    fn member_dir(&self, name: &str) -> PathBuf {
        self.scratch.path().join("members").join(name)
    }

    /// Keeps `files`, what a command of `member` left, for its next commands.
    fn keep_files(&self, member: &MemberId, files: &Files) -> Result<(), String> {
        let dir = self.member_dir(member.as_str());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .and_then(|()| files.write_into(&dir).map_err(std::io::Error::other))
            .map_err(|e| format!("cannot keep the files of {member}: {e}"))
    }

    /// Forgets what `member`'s earlier commands left: it plans afresh, and
    /// until that plan is made nothing (a hook, a pricing) reads an older one.
    fn forget_files(&self, member: &MemberId) {
        let _ = std::fs::remove_dir_all(self.member_dir(member.as_str()));
    }

    /// What `member`'s commands left for its next ones.
    fn kept_files(&self, member: &MemberId) -> Result<Files, String> {
        Files::collect(&self.member_dir(member.as_str()))
            .map_err(|e| format!("cannot read the kept files of {member}: {e}"))
    }

    /// The plan file `member`'s latest plan here wrote.
    fn kept_plan(&self, member: &MemberId) -> Result<Vec<u8>, String> {
        files::read_file(
            &self.member_dir(member.as_str()),
            PLAN_FILE,
            MAX_PLAN_FILE_BYTES,
        )
        .map_err(|e| format!("{member} has no plan file ({e}); it must be planned first"))
    }

    /// The latest outcome of a member planned here.
    pub(crate) fn outcome(&self, member: &MemberId) -> Option<&MemberOutcome> {
        self.outcomes.get(member)
    }

    /// What an apply of `member` carried: its later commands read it from `{carry_file}`.
    pub(crate) fn carry(&mut self, member: &MemberId, carry: Map<String, Value>) {
        self.carried.insert(member.clone(), carry);
    }

    /// Outputs a member applied in this run: what its downstreams read from now on.
    pub(crate) fn record_applied(&mut self, member: &MemberId, outputs: Map<String, Value>) {
        self.applied.insert(member.clone(), outputs);
    }

    /// The longest an apply command of `member` may live: its timeout, and
    /// the grace after which the sandbox ends it itself.
    pub(crate) fn apply_lifetime(&self, member: &MemberId) -> Duration {
        let grace = self.options.sandbox.deadline_grace();
        let own = self
            .config
            .component(member.component())
            .map_or(Duration::ZERO, |c| c.timeout)
            + grace;
        // It may apply with its group's call, which has the group's timeout.
        self.group_lifetime(member.component())
            .map_or(own, |group| group.max(own))
    }

    /// How long `member`'s apply may wait for a runner, when its profile
    /// runs it on the forge's CI; `None`: it runs here.
    pub(crate) fn applies_elsewhere(&self, member: &MemberId) -> Option<Duration> {
        let at = Where::member(member.component(), member.stage());
        match &self.profile_for(CommandKind::Apply, at).ok()?.executor {
            crate::sandbox::profile::Executor::Actions(actions) => Some(actions.queue_timeout),
            crate::sandbox::profile::Executor::Local => None,
        }
    }

    /// Runs `member`'s apply command with the plan file its latest plan here
    /// wrote; `started` hears which process it is once it started.
    pub(crate) async fn apply(
        &self,
        member: &MemberId,
        started: Option<tokio::sync::mpsc::UnboundedSender<crate::sandbox::process::ProcessId>>,
    ) -> ApplyRun {
        let failed = |why: String| ApplyRun {
            outcome: ApplyOutcome::Failed(why),
            output: String::new(),
            carry: None,
            ran_on: None,
        };
        let stage = member.stage();
        let Some(component) = self.config.component(member.component()) else {
            return failed(format!(
                "{member} is not a member of this repository's {CONFIG_FILE}"
            ));
        };
        let Some(template) = &component.apply else {
            return failed(format!(
                "component {} has no apply command; set `apply` in [defaults] or on the component in {CONFIG_FILE}",
                component.name
            ));
        };
        let mut files = match self.kept_files(member) {
            Ok(files) => files,
            Err(why) => return failed(why),
        };
        if !files.contains(PLAN_FILE) {
            return failed(format!(
                "{member} has no plan file to apply; it must be planned first"
            ));
        }
        files.remove(OUTPUTS_FILE);
        let name = JobName::new("apply", member.as_str());
        let job = match self.member_job(CommandKind::Apply, component, stage, template, name, files)
        {
            Ok(job) => job,
            Err(why) => return failed(why),
        };
        let finished = match self
            .executor
            .run(&job, Control { started, tap: None })
            .await
        {
            Ok(finished) => finished,
            Err(e) => {
                return ApplyRun {
                    ran_on: e.ran_on(),
                    ..failed(e.to_string())
                }
            }
        };
        let (run, ran_on) = (finished.outcome, finished.ran_on);
        let files = match finished.files {
            Ok(files) => files,
            // What the plan left stays kept: nothing came back to replace it.
            Err(why) if run.succeeded() => {
                return ApplyRun {
                    outcome: ApplyOutcome::Failed(format!(
                        "the apply command exited 0, but what it left could not be handed back ({why}), so its outputs are not known; it may have applied: look, then `/retry` (a plan that changes nothing applies nothing)"
                    )),
                    output: run.output,
                    carry: None,
                    ran_on,
                }
            }
            Err(_) => return failed_apply(run, None, ran_on),
        };
        if let Err(why) = self.keep_files(member, &files) {
            tracing::warn!(target: "wavegate::plan", "{why}");
        }
        let carry = read_carry(&files);
        if !run.succeeded() {
            return failed_apply(run, carry, ran_on);
        }
        ApplyRun {
            outcome: read_apply_outcome(&files),
            output: run.output,
            carry,
            ran_on,
        }
    }

    /// Runs one call of a hook in the sandbox, in the copy of the commit
    /// (read-only), with its own files: `{members_file}`, a copy of the
    /// member's latest plan file here as `{plan_file}` (per-member calls),
    /// the decision file (`after.gate`) and the hold file it may write.
    pub(crate) async fn run_hook(&self, run: HookCommand<'_>) -> HookRan {
        let HookCommand {
            call,
            hook,
            members_json,
            decision,
            env: extra,
        } = run;
        let not_run = |why: String| HookRan {
            exit: None,
            described: why,
            hold: None,
            printed: None,
        };
        let mut name = format!("hook.{}.{}.{}", call.stage, call.moment, call.name);
        if let Some(member) = &call.member {
            name.push('.');
            name.push_str(member.as_str());
        }
        let name = JobName::new("hook", &name);
        let layout = self.executor.layout(&name);
        let decided = decision.is_some();
        let mut files = Files::default();
        files.insert(MEMBERS_FILE, members_json);
        if let Some(decision) = decision {
            files.insert(DECISION_FILE, decision);
        }
        if let Some(member) = &call.member {
            if let Ok(bytes) = self.kept_plan(member) {
                files.insert(PLAN_FILE, bytes);
            }
        }
        let root = layout.root.clone();
        let path = |file: &str| layout.files.join(file).display().to_string();
        let member = call.member.as_ref().map_or("", MemberId::as_str);
        let fill = |arg: &String| {
            arg.replace("{members_file}", &path(MEMBERS_FILE))
                .replace("{plan_file}", &path(PLAN_FILE))
                .replace("{member}", member)
                .replace("{stage}", call.stage.as_str())
                .replace("{root}", &root.display().to_string())
        };
        let argv: Vec<String> = hook.command.iter().map(fill).collect();
        let mut env = vec![
            ("WAVEGATE_HOOK".to_owned(), call.moment.to_string()),
            ("WAVEGATE_HOOK_NAME".to_owned(), call.name.clone()),
            ("WAVEGATE_STAGE".to_owned(), call.stage.to_string()),
            ("WAVEGATE_MEMBERS_FILE".to_owned(), path(MEMBERS_FILE)),
            ("WAVEGATE_HOLD".to_owned(), path(HOLD_FILE)),
        ];
        if let Some(member) = &call.member {
            env.push(("WAVEGATE_MEMBER".to_owned(), member.to_string()));
        }
        if decided {
            env.push(("WAVEGATE_DECISION".to_owned(), path(DECISION_FILE)));
        }
        env.extend(extra);
        let label = format!("[hook] {} {}", call.moment, call.name);
        let command = (argv, root, env);
        let at = match &call.member {
            Some(member) => Where::member(member.component(), call.stage.as_str()),
            None => Where::stage(call.stage.as_str()),
        };
        let job = match self.job(
            (CommandKind::Hook, at),
            (name, label),
            command,
            files,
            hook.timeout,
        ) {
            Ok(job) => job,
            Err(why) => return not_run(why),
        };
        let finished = match self.executor.run(&job, Control::default()).await {
            Ok(finished) => finished,
            Err(e) => return not_run(format!("the hook could not start: {e}")),
        };
        let ran = finished.outcome;
        let exit = match ran.termination {
            runner::Termination::Exited(code) => Some(code),
            _ => None,
        };
        let hold = (exit == Some(HOLD_EXIT)).then(|| {
            let left = finished.files.as_ref().map_err(Clone::clone)?;
            match left.read(HOLD_FILE, MAX_HOLD_FILE_BYTES) {
                Ok(bytes) => std::str::from_utf8(bytes)
                    .map_err(|_| "is not UTF-8".to_owned())
                    .and_then(read_hold),
                Err(files::FileError::Missing) => Err("was not written".to_owned()),
                Err(e) => Err(e.to_string()),
            }
        });
        HookRan {
            exit,
            described: ran.describe("the hook"),
            hold,
            printed: OutputTail::of(&ran.output),
        }
    }

    /// Runs a discovering component's command in the sandbox, in the copy
    /// of the commit (read-only, its working directory the root): it writes
    /// the units it found to `{units_file}`.
    pub(crate) async fn run_discover(&self, discoverer: &Discoverer) -> Result<Vec<Unit>, String> {
        let name = JobName::new("discover", &discoverer.name);
        let layout = self.executor.layout(&name);
        let root = layout.root.clone();
        let units_file = layout.files.join(UNITS_FILE).display().to_string();
        let fill = |arg: &String| {
            arg.replace("{units_file}", &units_file)
                .replace("{component}", &discoverer.name)
                .replace("{root}", &root.display().to_string())
        };
        let argv: Vec<String> = discoverer.command.iter().map(fill).collect();
        let env = vec![
            ("WAVEGATE_COMPONENT".to_owned(), discoverer.name.clone()),
            ("WAVEGATE_UNITS_FILE".to_owned(), units_file.clone()),
        ];
        let command = (argv, root, env);
        let label = format!("[discover] {}", discoverer.name);
        let timeout = self.bounded(discoverer.timeout, |base| {
            base.of_discoverer(&discoverer.name)
        });
        let at = self
            .discovery_stage(discoverer)
            .map(Where::stage)
            .unwrap_or_default();
        let job = self.job(
            (CommandKind::Plan, at),
            (name, label),
            command,
            Files::default(),
            timeout,
        )?;
        let (left, tail) = self.run_own(&job, "the discover command").await?;
        let with_output = |error: String| runner::with_last_output(error, &tail);
        let bytes = left.read(UNITS_FILE, MAX_UNITS_FILE_BYTES).map_err(|e| {
            with_output(format!(
                "its units file: {e}; write the list of units to `{{units_file}}`"
            ))
        })?;
        read_units(bytes).map_err(with_output)
    }

    /// The stage a discovery runs as (its profile and variables): it runs
    /// once for every stage its component runs in, so as the first of them
    /// when they all plan with the same profile; else as none, with the
    /// server's `default` profile.
    fn discovery_stage(&self, discoverer: &Discoverer) -> Option<&str> {
        let mut stages = self
            .config
            .stages
            .iter()
            .map(|s| s.name.as_str())
            .filter(|s| {
                discoverer
                    .stages
                    .as_ref()
                    .is_none_or(|only| only.iter().any(|o| o == s))
            });
        let plans_with = |stage: &str| {
            self.profile_for(CommandKind::Plan, Where::stage(stage))
                .ok()
                .map(|profile| profile.name.clone())
        };
        let first = stages.next()?;
        let profile = plans_with(first)?;
        stages
            .all(|stage| plans_with(stage).as_ref() == Some(&profile))
            .then_some(first)
    }

    /// Prices `members` of `stage` with its cost command, in the sandbox and
    /// the copy of the commit (read-only): `{members_file}` lists each with
    /// its plan digest and a copy of its latest plan file here; the command
    /// writes Infracost's JSON to `{cost_file}`. Judged by `max_increase`.
    pub(crate) async fn run_cost(
        &self,
        stage: &str,
        command: &CostCommand,
        members: &[MemberId],
        max_increase: Option<Money>,
    ) -> StageCost {
        match self.price(stage, command, members).await {
            Ok(figures) => StageCost::priced(stage, figures, max_increase),
            Err(why) => StageCost::failed(stage, why),
        }
    }

    async fn price(
        &self,
        stage: &str,
        command: &CostCommand,
        members: &[MemberId],
    ) -> Result<cost::Figures, String> {
        let name = JobName::new("cost", stage);
        let layout = self.executor.layout(&name);
        let mut files = Files::default();
        let mut listed = Vec::new();
        for member in members {
            let plan_file = format!("{member}.plan.json");
            let bytes = self
                .kept_plan(member)
                .map_err(|e| format!("nothing to price: {e}"))?;
            files.insert(plan_file.clone(), bytes);
            let digest = self
                .outcomes
                .get(member.as_str())
                .and_then(|o| o.plan.as_ref())
                .map(|p| p.plan_digest.clone());
            listed.push(serde_json::json!({
                "member": member,
                "planDigest": digest,
                "planFile": layout.files.join(&plan_file).display().to_string(),
            }));
        }
        files.insert(
            MEMBERS_FILE,
            serde_json::to_vec_pretty(&listed).expect("JSON serialises"),
        );
        let root = layout.root.clone();
        let path = |file: &str| layout.files.join(file).display().to_string();
        let fill = |arg: &String| {
            arg.replace("{members_file}", &path(MEMBERS_FILE))
                .replace("{cost_file}", &path(COST_FILE))
                .replace("{stage}", stage)
                .replace("{root}", &root.display().to_string())
        };
        let argv: Vec<String> = command.command.iter().map(fill).collect();
        let env = vec![
            ("WAVEGATE_STAGE".to_owned(), stage.to_owned()),
            ("WAVEGATE_MEMBERS_FILE".to_owned(), path(MEMBERS_FILE)),
            ("WAVEGATE_COST_FILE".to_owned(), path(COST_FILE)),
        ];
        let job = self.job(
            (CommandKind::Cost, Where::stage(stage)),
            (name, format!("[cost] {stage}")),
            (argv, root, env),
            files,
            command.timeout,
        )?;
        let (left, _) = self.run_own(&job, "the cost command").await?;
        let bytes = left
            .read(COST_FILE, cost::MAX_COST_FILE_BYTES)
            .map_err(|e| {
                format!("the cost file {COST_FILE}: {e}; write Infracost's JSON to `{{cost_file}}`")
            })?;
        cost::read_cost_file(bytes, members)
    }

    /// Plans `wave`'s members (their upstreams planned or applied already):
    /// each on its own, and the mates of a group (`[[group]]`) with one call.
    pub(crate) async fn plan_wave(&mut self, wave: &[MemberId]) -> Result<(), PlanError> {
        let groups = self.config.groups.clone();
        let batches = groups.batches(wave);
        // The group and mates of each member that plans with a group.
        let mut mates_of: HashMap<&str, (&str, &[MemberId])> = HashMap::new();
        for batch in &batches {
            if let Batch::Group { group, members, .. } = batch {
                for member in members {
                    mates_of.insert(member.as_str(), (group.name.as_str(), members));
                }
            }
        }
        let mut calls = Vec::new();
        let mut grouped: HashMap<MemberId, MemberOutcome> = HashMap::new();
        for id in wave {
            let stage = id.stage();
            let component = self
                .config
                .component(id.component())
                .expect("derived members name configured components")
                .clone();
            let mut outcome = MemberOutcome {
                member: id.clone(),
                component: component.name.clone(),
                stage: StageName::new(stage),
                status: MemberStatus::Planned,
                plan: None,
                error: None,
                blocked_by: None,
                inputs: BTreeMap::new(),
                output: String::new(),
                discovered: component.discovered.clone(),
                ran_on: None,
            };
            if let Some(plan) = self.kept.get(id).cloned() {
                if !mates_of.contains_key(id.as_str()) {
                    for input in &component.inputs {
                        let resolved = self.resolve_input(input, stage).await;
                        outcome.inputs.insert(input.name.clone(), resolved);
                    }
                    outcome.plan = Some(plan);
                    self.outcomes.insert(id.clone(), outcome);
                    continue;
                }
            }
            if let Some(root) = self.failed_upstream(&component, stage) {
                outcome.status = MemberStatus::Blocked;
                outcome.error = Some(format!("blocked: upstream {root} failed to plan"));
                outcome.blocked_by = Some(root);
                self.outcomes.insert(id.clone(), outcome);
                continue;
            }
            let group = mates_of.get(id.as_str()).copied();
            for input in &component.inputs {
                let upstream = member_name(&input.upstream, stage);
                let resolved = match group {
                    Some((name, mates)) if mates.iter().any(|m| *m == upstream) => {
                        group::read_of_mate(input, &upstream, name)
                    }
                    _ => self.resolve_input(input, stage).await,
                };
                outcome.inputs.insert(input.name.clone(), resolved);
            }
            if group.is_some() {
                grouped.insert(id.clone(), outcome);
                continue;
            }
            match self.prepare_member(&component, stage, &outcome) {
                Ok(job) => calls.push(Call::Member(Box::new(Ready {
                    outcome,
                    job,
                    quiet: component.quiet.clone(),
                }))),
                Err(e) => {
                    outcome.status = MemberStatus::PlanFailed;
                    outcome.error = Some(e);
                    self.outcomes.insert(id.clone(), outcome);
                }
            }
        }
        for batch in batches {
            if let Batch::Group {
                group,
                stage,
                members,
            } = batch
            {
                if let Some(call) =
                    self.prepare_group(group, stage.as_str(), &members, &mut grouped)
                {
                    calls.push(Call::Group(Box::new(call)));
                }
            }
        }

        let limit = Arc::new(Semaphore::new(self.options.concurrency.max(1)));
        let mut running = tokio::task::JoinSet::new();
        for (i, call) in calls.iter().enumerate() {
            let job = call.job().clone();
            let executor = Arc::clone(&self.executor);
            let limit = Arc::clone(&limit);
            running.spawn(async move {
                let _permit = limit
                    .acquire_owned()
                    .await
                    .expect("semaphore is never closed");
                (i, executor.run(&job, Control::default()).await)
            });
        }
        // Each result is settled as it comes, so what a call handed back is
        // kept on disk and let go before the next (a wave holds at most
        // `concurrency` calls' files in memory).
        let mut calls: Vec<Option<Call>> = calls.into_iter().map(Some).collect();
        while let Some(joined) = running.join_next().await {
            let (i, result) = joined.map_err(|e| anyhow::anyhow!("a plan task panicked: {e}"))?;
            match calls[i].take().expect("each call reports once") {
                Call::Member(ready) => self.settle_member(*ready, result),
                Call::Group(call) => self.settle_group(*call, result),
            }
        }
        Ok(())
    }

    /// What a member's plan call came to: planned (its plan file read, and
    /// what it left kept for its apply), or failed with why.
    fn settle_member(&mut self, r: Ready, result: Result<Finished, runner::SpawnError>) {
        let mut outcome = r.outcome;
        match result {
            Err(e) => {
                outcome.status = MemberStatus::PlanFailed;
                outcome.error = Some(e.to_string());
                outcome.ran_on = e.ran_on();
            }
            Ok(Finished {
                outcome: run,
                files,
                ran_on,
            }) => {
                outcome.ran_on = ran_on;
                outcome.output = run.output.clone();
                if !run.succeeded() {
                    outcome.status = MemberStatus::PlanFailed;
                    outcome.error = Some(run.failure("the plan command"));
                } else {
                    let read = files
                        .map_err(|why| format!("the plan command: {why}"))
                        .and_then(|files| {
                            let written = self.executor.layout(&r.job.name).files;
                            let plan = read_plan_file(&outcome.member, &files, &written)
                                .map_err(|e| e.to_string())?;
                            self.keep_files(&outcome.member, &files)?;
                            self.judged(plan)
                        });
                    match read {
                        Ok(plan) => {
                            outcome.plan = Some(plan);
                            outcome.output =
                                crate::config::quiet::quieted(&outcome.output, &r.quiet);
                        }
                        Err(e) => {
                            outcome.status = MemberStatus::PlanFailed;
                            outcome.error = Some(e);
                        }
                    }
                }
            }
        }
        if let Some(e) = &outcome.error {
            tracing::warn!(target: "wavegate::plan", "{} failed to plan: {e}", outcome.member);
        }
        self.outcomes.insert(outcome.member.clone(), outcome);
    }

    /// `plan` with the messages the base's Rego policies deny it with among
    /// its denials.
    fn judged(&self, mut plan: MemberPlan) -> Result<MemberPlan, String> {
        if !self.policies.is_empty() {
            plan.deny(self.policies.judge(&plan)?);
        }
        Ok(plan)
    }

    /// The failed member a member's upstreams in this change lead back to, if any.
    fn failed_upstream(&self, component: &Component, stage: &str) -> Option<String> {
        component.depends_on.iter().find_map(|d| {
            let upstream = self.outcomes.get(member_name(d, stage).as_str())?;
            match upstream.status {
                MemberStatus::PlanFailed => Some(upstream.member.to_string()),
                MemberStatus::Blocked => upstream.blocked_by.clone(),
                MemberStatus::Planned => None,
            }
        })
    }

    async fn resolve_input(
        &mut self,
        input: &crate::config::repo::Input,
        stage: &str,
    ) -> ResolvedInput {
        let upstream = member_name(&input.upstream, stage);
        let resolved = |source, value: Option<Value>, why: Option<String>| ResolvedInput {
            reference: format!("{}.{}", input.upstream, input.output),
            upstream: upstream.clone(),
            source,
            value,
            why,
            sensitive: false,
        };
        if let Some(applied) = self.applied.get(upstream.as_str()) {
            return match applied.get(&input.output) {
                Some(v) => resolved(InputSource::Applied, Some(v.clone()), None),
                None => resolved(
                    InputSource::Unknown,
                    None,
                    Some(format!(
                        "{upstream} applied without an output {}",
                        input.output
                    )),
                ),
            };
        }
        if input.build && self.outcomes.contains_key(upstream.as_str()) {
            return resolved(
                InputSource::Build,
                None,
                Some(format!(
                    "the build {upstream} publishes it when it applies; its own plan binds it"
                )),
            );
        }
        if let Some(planned) = self
            .outcomes
            .get(upstream.as_str())
            .filter(|o| o.plan.is_some())
        {
            let plan = planned
                .plan
                .as_ref()
                .expect("a planned upstream has a plan");
            return match plan.outputs.fully_known(&input.output) {
                Some(v) => ResolvedInput {
                    sensitive: plan.outputs.sensitive.contains(&input.output),
                    ..resolved(InputSource::Planned, Some(v.clone()), None)
                },
                None if plan.outputs.mentions(&input.output) => resolved(
                    InputSource::Unknown,
                    None,
                    Some(format!(
                        "{upstream} knows {} only after it applies",
                        input.output
                    )),
                ),
                None => resolved(
                    InputSource::Unknown,
                    None,
                    Some(format!(
                        "the plan of {upstream} does not list output {}",
                        input.output
                    )),
                ),
            };
        }
        if let Some(v) = self
            .options
            .seeded
            .get(&upstream)
            .and_then(|o| o.get(&input.output))
        {
            self.seeded_used.insert(upstream.clone());
            self.seeded_outputs_read
                .insert((upstream.clone(), input.output.clone()));
            return resolved(InputSource::Seeded, Some(v.clone()), None);
        }
        let deployed = self.deployed_outputs(&input.upstream, stage).await;
        if let Ok(outputs) = &deployed {
            if let Some(v) = outputs.get(&input.output) {
                return resolved(InputSource::Deployed, Some(v.clone()), None);
            }
        }
        if let Some(v) = self
            .options
            .recorded
            .as_ref()
            .and_then(|r| r.outputs(&upstream))
            .and_then(|o| o.get(&input.output).cloned())
        {
            return resolved(InputSource::Recorded, Some(v), None);
        }
        let why = match deployed {
            Ok(_) => format!("{upstream} is not in this change, and neither --outputs, its outputs command nor an earlier apply knows {}", input.output),
            Err(e) => format!("{upstream} is not in this change, nothing seeded or recorded knows {}, and {e}", input.output),
        };
        resolved(InputSource::Unknown, None, Some(why))
    }

    /// Runs the upstream's `outputs` command once per member and remembers the answer.
    async fn deployed_outputs(
        &mut self,
        component: &str,
        stage: &str,
    ) -> Result<Map<String, Value>, String> {
        let member = member_name(component, stage);
        if let Some(known) = self.deployed.get(&member) {
            return known.clone();
        }
        let result = self.run_outputs_command(component, stage).await;
        if let Err(e) = &result {
            self.notes
                .push(format!("outputs of {member} could not be read: {e}"));
        }
        self.deployed.insert(member, result.clone());
        result
    }

    async fn run_outputs_command(
        &self,
        component: &str,
        stage: &str,
    ) -> Result<Map<String, Value>, String> {
        let Some(component) = self.config.component(component) else {
            return Err(format!("{component} is not a component"));
        };
        let Some(template) = &component.outputs else {
            return Err("it has no outputs command".into());
        };
        let member = member_name(&component.name, stage);
        let name = JobName::new("outputs", member.as_str());
        let job = self.member_job(
            CommandKind::Outputs,
            component,
            stage,
            template,
            name,
            Files::default(),
        )?;
        let finished = self
            .executor
            .run(&job, Control::default())
            .await
            .map_err(|e| e.to_string())?;
        if !finished.outcome.succeeded() {
            return Err(finished.outcome.describe("its outputs command"));
        }
        let left = finished
            .files
            .map_err(|why| format!("its outputs command: {why}"))?;
        let bytes = left
            .read(OUTPUTS_FILE, MAX_OUTPUTS_FILE_BYTES)
            .map_err(|e| format!("its outputs file cannot be read: {e}"))?;
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) if super::terraform::is_wrapped_outputs(&map) => Err(format!(
                "its outputs command wrote {WRAPPED_WHAT}; {}",
                super::terraform::WRAPPED_OUTPUTS_FIX
            )),
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err("its outputs command wrote JSON that is not an object".into()),
            Err(e) => Err(format!(
                "its outputs command wrote a file that is not JSON ({e})"
            )),
        }
    }

    /// The plan job of a member: its inputs file and what it carries; no
    /// plan file (one left by an earlier plan never passes for this one's).
    fn prepare_member(
        &self,
        component: &Component,
        stage: &str,
        outcome: &MemberOutcome,
    ) -> Result<Job, String> {
        self.forget_files(&outcome.member);
        let inputs = serde_json::json!({"known": outcome.known_inputs(), "unknown": outcome.unknown_to_the_plan()});
        let mut files = Files::default();
        files.insert(
            INPUTS_FILE,
            serde_json::to_vec_pretty(&inputs).expect("inputs serialise"),
        );
        let name = JobName::new("plan", outcome.member.as_str());
        self.member_job(
            CommandKind::Plan,
            component,
            stage,
            &component.plan,
            name,
            files,
        )
    }

    /// A member's `kind` command from `template`, starting with `files`
    /// and what the member's applies carried (`{carry_file}`).
    fn member_job(
        &self,
        kind: CommandKind,
        component: &Component,
        stage: &str,
        template: &[String],
        name: JobName,
        mut files: Files,
    ) -> Result<Job, String> {
        let layout = self.executor.layout(&name);
        let dir = component.dir_in(stage);
        let cwd = resolve_dir((&layout.root, &self.files_root()), component, &dir)?;
        let member = member_name(&component.name, stage);
        let root_text = layout.root.display().to_string();
        let file = |name: &str| layout.files.join(name).display().to_string();
        let carried = self.carried.get(member.as_str());
        files.insert(
            CARRY_FILE,
            serde_json::to_vec_pretty(&carried.cloned().unwrap_or_default())
                .expect("a JSON object serialises"),
        );
        let fill = |arg: &str| {
            arg.replace("{component}", &component.name)
                .replace("{stage}", stage)
                .replace("{dir}", &dir)
                .replace("{root}", &root_text)
                .replace("{plan_file}", &file(PLAN_FILE))
                .replace("{outputs_file}", &file(OUTPUTS_FILE))
                .replace("{inputs_file}", &file(INPUTS_FILE))
                .replace("{carry_file}", &file(CARRY_FILE))
        };
        let argv: Vec<String> = template.iter().map(|a| fill(a)).collect();
        let env = vec![
            ("WAVEGATE_COMPONENT".to_owned(), component.name.clone()),
            ("WAVEGATE_STAGE".to_owned(), stage.to_owned()),
            ("WAVEGATE_MEMBER".to_owned(), member.clone()),
        ];
        let label = format!("[{}] {member}", kind.as_str());
        let timeout = self.bounded(component.timeout, |base| base.of(&component.name));
        let access = match kind {
            CommandKind::Plan if self.options.bootstrap => CommandKind::Apply,
            other => other,
        };
        self.job(
            (access, Where::member(&component.name, stage)),
            (name, label),
            (argv, cwd, env),
            files,
            timeout,
        )
    }

    /// The operator's profile for `kind` commands at `at`: the stage's (or
    /// its job group's) as the choosing config names it, resolved against
    /// the server's profiles; `default` outside a stage.
    fn profile_for(&self, kind: CommandKind, at: Where<'_>) -> Result<Arc<Profile>, String> {
        let profiles = self.options.sandbox.profiles();
        let Some(stage) = at.stage else {
            return Ok(Arc::clone(profiles.default_profile()));
        };
        let choice = match self.execution.get(stage) {
            Some(execution) => match at.component {
                Some(component) => execution.choice_for(component),
                None => &execution.profile,
            },
            None => return Ok(Arc::clone(profiles.default_profile())),
        };
        let name = match kind {
            CommandKind::Apply => &choice.apply,
            CommandKind::Plan | CommandKind::Outputs | CommandKind::Hook | CommandKind::Cost => {
                &choice.plan
            }
        };
        profiles
            .resolve(name, self.options.repository.as_deref())
            .map(Arc::clone)
            .map_err(|why| format!("stage `{stage}` cannot run its commands: {why}"))
    }

    /// A command as a job for the executor, starting with `files`, with
    /// the operator's profile for `at` (by name; the executor applies its
    /// paths, network, secrets and setup). It passes on the base branch's
    /// `env` list (a pull request cannot ask for more) and the stage's
    /// `variables`. The timeout is at most the profile's `max_timeout`,
    /// and a plan's is the base's (a pull request cannot lengthen its own).
    /// Fails, before anything runs, when the profile cannot be used here.
    fn job(
        &self,
        (kind, at): (CommandKind, Where<'_>),
        (name, label): (JobName, String),
        (argv, cwd, env): (Vec<String>, PathBuf, Vec<(String, String)>),
        files: Files,
        timeout: Duration,
    ) -> Result<Job, String> {
        let profile = self.profile_for(kind, at)?;
        let variables = at
            .stage
            .and_then(|s| self.config.stage(s))
            .map(|stage| stage.execution.variables.clone())
            .unwrap_or_default();
        let member = at
            .component
            .zip(at.stage)
            .map(|(component, stage)| MemberId::of(component, stage));
        Ok(Job {
            name,
            label,
            kind,
            member,
            stage: at.stage.map(StageName::new),
            commit: self.commit.clone(),
            profile: profile.name.clone(),
            limits: profile.limits,
            argv,
            cwd,
            pass_env: self.base_env.clone(),
            variables,
            env,
            timeout: timeout.min(profile.max_timeout),
            timeout_capped: timeout > profile.max_timeout,
            output_cap: self.options.output_cap,
            files,
        })
    }
}

/// Where in the change a command runs: which stage's profile it gets, and
/// which component's job group.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Where<'a> {
    pub(crate) stage: Option<&'a str>,
    pub(crate) component: Option<&'a str>,
}

impl<'a> Where<'a> {
    pub(crate) fn stage(stage: &'a str) -> Self {
        Self {
            stage: Some(stage),
            component: None,
        }
    }

    pub(crate) fn member(component: &'a str, stage: &'a str) -> Self {
        Self {
            stage: Some(stage),
            component: Some(component),
        }
    }
}

/// The timeouts of the base branch's config: a pull request's commands
/// (plans, outputs, discoveries, group calls) run for as long as the base
/// allows at most, never as long as the head asks.
#[derive(Debug, Clone)]
pub(crate) struct BaseTimeouts {
    by_component: HashMap<String, Duration>,
    by_discoverer: HashMap<String, Duration>,
    by_group: HashMap<String, Duration>,
    default: Duration,
}

impl BaseTimeouts {
    fn of_config(config: &RepoConfig) -> Self {
        Self {
            by_component: config
                .components
                .iter()
                .map(|c| (c.name.clone(), c.timeout))
                .collect(),
            by_discoverer: config
                .discoverers
                .iter()
                .map(|d| (d.name.clone(), d.timeout))
                .collect(),
            by_group: config
                .groups
                .all
                .iter()
                .map(|g| (g.name.clone(), g.timeout))
                .collect(),
            default: config.default_timeout,
        }
    }

    fn of(&self, component: &str) -> Duration {
        self.by_component
            .get(component)
            .copied()
            .unwrap_or(self.default)
    }

    fn of_discoverer(&self, name: &str) -> Duration {
        self.by_discoverer
            .get(name)
            .copied()
            .unwrap_or(self.default)
    }

    fn of_group(&self, name: &str) -> Duration {
        self.by_group.get(name).copied().unwrap_or(self.default)
    }
}

/// A component's `dir` where commands see the tree (`root`), checked where
/// the server reads it (`files`): it must not leave the tree (through `..`
/// or a link committed in the repository).
fn resolve_dir(
    (root, files): (&Path, &Path),
    component: &Component,
    dir: &str,
) -> Result<PathBuf, String> {
    let leaves = || {
        format!(
        "directory `{}` of component {} leaves the repository (through a symbolic link); point `dir` in {CONFIG_FILE} at a directory inside it",
        dir, component.name
    )
    };
    if Path::new(dir).components().any(|c| {
        !matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    }) {
        return Err(leaves());
    }
    let resolved = match std::fs::canonicalize(files.join(dir)) {
        Ok(resolved) => resolved,
        Err(_) => return Err(format!("directory `{}` of component {} does not exist at this commit; fix `dir` in {CONFIG_FILE}", dir, component.name)),
    };
    let files =
        std::fs::canonicalize(files).map_err(|e| format!("cannot read the checkout: {e}"))?;
    if !resolved.starts_with(&files) {
        return Err(leaves());
    }
    if !resolved.is_dir() {
        return Err(format!(
            "`{}` of component {} is not a directory; fix `dir` in {CONFIG_FILE}",
            dir, component.name
        ));
    }
    Ok(root.join(dir))
}

/// How the job directories of process `pid` are named in the temp dir.
fn job_dir_prefix(pid: u32) -> String {
    format!("{JOB_DIR_PREFIX}{pid}-")
}

const JOB_DIR_PREFIX: &str = "wavegate-job-";

/// Removes the job directories in `temp` that processes no longer running
/// left behind (a server killed mid-job cannot remove its own); answers how
/// many. Directories of a running process (another replica's) are left.
pub(crate) fn sweep_stale_job_dirs(temp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !crate::sandbox::process::left_by_a_dead_process(&entry.file_name(), JOB_DIR_PREFIX) {
            continue;
        }
        let own = entry.metadata().is_ok_and(|m| {
            std::os::unix::fs::MetadataExt::uid(&m) == rustix::process::geteuid().as_raw()
                && m.is_dir()
        });
        if own && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The plan file a plan command wrote: a regular file, not a link, within the cap.
/// An apply command that did not exit 0, and what it carried.
fn failed_apply(
    run: CommandOutcome,
    carry: Option<Map<String, Value>>,
    ran_on: Option<String>,
) -> ApplyRun {
    ApplyRun {
        outcome: ApplyOutcome::Failed(run.failure("the apply command")),
        output: run.output,
        carry,
        ran_on,
    }
}

/// The plan file a plan command left in `files` (its files directory,
/// `written` where it ran).
fn read_plan_file(
    member: &MemberId,
    files: &Files,
    written: &Path,
) -> Result<MemberPlan, PlanFileError> {
    match files.read(PLAN_FILE, MAX_PLAN_FILE_BYTES) {
        Ok(bytes) => MemberPlan::parse_owned(member, bytes.to_vec()),
        Err(files::FileError::Missing) => Err(PlanFileError::Missing {
            path: written.join(PLAN_FILE).display().to_string(),
        }),
        Err(files::FileError::TooLarge { .. }) => Err(PlanFileError::Invalid(format!(
            "the plan file is larger than {MAX_PLAN_FILE_BYTES} bytes (256 MiB), as much as wavegate reads: split the component"
        ))),
        Err(e) => Err(PlanFileError::Invalid(format!("the plan file cannot be read: {e}"))),
    }
}

/// How an outputs file holding `terraform output -json` unflattened is named.
const WRAPPED_WHAT: &str = "`terraform output -json` as it prints it (every output wrapped in `value`, `type` and `sensitive`), which would give every downstream input the wrapper instead of the value";

/// Reads what an apply command that exited 0 wrote to `{outputs_file}`.
fn read_apply_outcome(files: &Files) -> ApplyOutcome {
    let map = match outputs_object(files) {
        Ok(map) => map,
        Err(OutputsFileError::Missing) => return ApplyOutcome::Failed(
            "the apply command exited 0 but wrote no outputs file; it must write a JSON object to {outputs_file} (`{}` when there are no outputs)".into()
        ),
        Err(OutputsFileError::Unreadable(e)) => return ApplyOutcome::Failed(format!(
            "the apply command's outputs file cannot be read: {e}"
        )),
        Err(OutputsFileError::NotAnObject(kind)) => return ApplyOutcome::Failed(format!(
            "the apply command wrote {kind} to its outputs file; it must be a JSON object of outputs or an outcome"
        )),
        Err(OutputsFileError::NotJson(e)) => return ApplyOutcome::Failed(format!(
            "the apply command wrote an outputs file that is not JSON ({e})"
        )),
    };
    // What it carries is read by `read_carry`; it is no output.
    let mut map = map;
    map.remove("carry");
    if super::terraform::is_wrapped_outputs(&map) {
        return ApplyOutcome::Failed(format!(
            "the apply command wrote {WRAPPED_WHAT} to its outputs file; {}",
            super::terraform::WRAPPED_OUTPUTS_FIX
        ));
    }
    let text_of = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
    match map.get("outcome").and_then(Value::as_str) {
        None => ApplyOutcome::Applied(map),
        Some("replan") => ApplyOutcome::Replan(text_of("reason")),
        Some("held") => ApplyOutcome::Held(
            map.get("holder")
                .map(readable)
                .unwrap_or_else(|| "another run".into()),
        ),
        Some("stood-down") => {
            ApplyOutcome::StoodDown(text_of("reason").unwrap_or_else(|| "no reason given".into()))
        }
        Some(other) => ApplyOutcome::Failed(format!(
            "the apply command wrote outcome `{other}`; the outcomes are `replan`, `held` and `stood-down`"
        )),
    }
}

/// Why an outputs file does not read as a JSON object.
enum OutputsFileError {
    Missing,
    Unreadable(String),
    NotJson(String),
    /// What it is instead (`a string`, `an array`, …).
    NotAnObject(&'static str),
}

/// The JSON object an apply command wrote to `{outputs_file}`.
fn outputs_object(files: &Files) -> Result<Map<String, Value>, OutputsFileError> {
    let bytes = match files.read(OUTPUTS_FILE, MAX_OUTPUTS_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(files::FileError::Missing) => return Err(OutputsFileError::Missing),
        Err(e) => return Err(OutputsFileError::Unreadable(e.to_string())),
    };
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(OutputsFileError::NotAnObject(super::planfile::kind_of(
            &other,
        ))),
        Err(e) => Err(OutputsFileError::NotJson(e.to_string())),
    }
}

/// The `carry` object an apply command wrote to `{outputs_file}`, whether it
/// succeeded or not (a failed apply may leave what a retry needs). A
/// `carry` that is no object carries nothing, and the log says so; the
/// apply's outcome stands (it may have applied).
fn read_carry(files: &Files) -> Option<Map<String, Value>> {
    match outputs_object(files).ok()?.remove("carry")? {
        Value::Object(carry) => Some(carry),
        other => {
            tracing::warn!(
                "an apply command wrote `carry` as {} to its outputs file; it must be a JSON object, so nothing is carried",
                super::planfile::kind_of(&other)
            );
            None
        }
    }
}

/// A value an apply command wrote, as a person reads it: a string as it
/// is, an object as `key value` pairs (`{"run": "github:123"}` is `run
/// github:123`), anything else as JSON.
fn readable(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Object(map) if !map.is_empty() => map
            .iter()
            .map(|(key, value)| match value {
                Value::String(text) => format!("{key} {text}"),
                other => format!("{key} {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

const PLAN_FILE: &str = "plan.json";
const OUTPUTS_FILE: &str = "outputs.json";
const INPUTS_FILE: &str = "inputs.json";
const CARRY_FILE: &str = "carry.json";
const MEMBERS_FILE: &str = "members.json";
const COST_FILE: &str = "cost.json";
const UNITS_FILE: &str = "units.json";
const DECISION_FILE: &str = "decision.json";
const HOLD_FILE: &str = "hold.json";
const MAX_HOLD_FILE_BYTES: u64 = 64 * 1024;

/// One call of a hook for [`Workbench::run_hook`].
pub(crate) struct HookCommand<'a> {
    pub(crate) call: &'a HookCall,
    pub(crate) hook: &'a Hook,
    /// The JSON list of members and their plan digests (`{members_file}`).
    pub(crate) members_json: Vec<u8>,
    /// `after.gate`'s decision (`WAVEGATE_DECISION`).
    pub(crate) decision: Option<Vec<u8>>,
    /// What the moment adds to the environment (the gate's decision, an
    /// approved hold).
    pub(crate) env: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_apply_carries_is_read_whatever_its_outcome_and_is_no_output() {
        let mut left = Files::default();
        let mut write = |text: &str| {
            left.insert(OUTPUTS_FILE, text.as_bytes().to_vec());
            left.clone()
        };
        let files = write(r#"{"vpc_id": "vpc-1", "carry": {"step": 2}}"#);
        assert_eq!(
            read_apply_outcome(&files),
            ApplyOutcome::Applied(serde_json::from_str(r#"{"vpc_id": "vpc-1"}"#).unwrap())
        );
        assert_eq!(
            read_carry(&files),
            serde_json::from_str(r#"{"step": 2}"#).ok()
        );
        // A failed apply (exit 1) may leave only its carry.
        let files = write(r#"{"carry": {"done": ["a", "b"]}}"#);
        assert_eq!(
            read_carry(&files),
            serde_json::from_str(r#"{"done": ["a", "b"]}"#).ok()
        );
        // A carry that is no object carries nothing; the apply still applied.
        let files = write(r#"{"vpc_id": "vpc-1", "carry": "step 2"}"#);
        assert_eq!(read_carry(&files), None);
        assert!(matches!(
            read_apply_outcome(&files),
            ApplyOutcome::Applied(_)
        ));
        // The carry is no output, so it hides no wrapped ones either.
        let files = write(
            r#"{"vpc_id": {"sensitive": false, "type": "string", "value": "v"}, "carry": {}}"#,
        );
        assert!(matches!(
            read_apply_outcome(&files),
            ApplyOutcome::Failed(_)
        ));
        assert_eq!(read_carry(&Files::default()), None);
    }

    #[test]
    fn an_apply_answers_outputs_or_one_of_the_outcomes_and_anything_else_fails_clearly() {
        let read = |text: Option<&str>| {
            let mut left = Files::default();
            if let Some(text) = text {
                left.insert(OUTPUTS_FILE, text.as_bytes().to_vec());
            }
            read_apply_outcome(&left)
        };
        let outputs = serde_json::json!({"vpc_id": "vpc-1"});
        assert_eq!(
            read(Some(&outputs.to_string())),
            ApplyOutcome::Applied(outputs.as_object().unwrap().clone())
        );
        assert_eq!(
            read(Some(r#"{"outcome": "replan", "reason": "lock let go"}"#)),
            ApplyOutcome::Replan(Some("lock let go".into()))
        );
        assert_eq!(
            read(Some(
                r#"{"outcome": "held", "holder": {"run": "github:123"}}"#
            )),
            ApplyOutcome::Held("run github:123".into())
        );
        assert_eq!(
            read(Some(
                r#"{"outcome": "stood-down", "reason": "a newer push"}"#
            )),
            ApplyOutcome::StoodDown("a newer push".into())
        );
        let failed = |outcome: ApplyOutcome| match outcome {
            ApplyOutcome::Failed(why) => why,
            other => panic!("expected a failure, got {other:?}"),
        };
        assert!(failed(read(None)).contains("wrote no outputs file"));
        assert!(failed(read(Some("[1]"))).contains("must be a JSON object"));
        assert!(failed(read(Some("{"))).contains("not JSON"));
        assert!(failed(read(Some(r#"{"outcome": "later"}"#)))
            .contains("`later`; the outcomes are `replan`, `held` and `stood-down`"));
        let wrapped = failed(read(Some(
            r#"{"vpc_id": {"sensitive": false, "type": "string", "value": "vpc-1"}}"#,
        )));
        assert!(
            wrapped.contains("`terraform output -json` as it prints it")
                && wrapped.contains("wavegate adapt terraform-outputs"),
            "{wrapped}"
        );
        assert_eq!(
            read(Some("{}")),
            ApplyOutcome::Applied(Map::new()),
            "no outputs is flat"
        );
    }

    #[test]
    fn seeded_outputs_are_parsed_with_clear_errors() {
        let ok = parse_seeded(r#"{"net@dev": {"vpc_id": "vpc-1"}}"#).unwrap();
        assert_eq!(ok["net@dev"]["vpc_id"], "vpc-1");
        assert!(parse_seeded("[]")
            .unwrap_err()
            .contains("must be a JSON object"));
        assert!(parse_seeded(r#"{"net@dev": 3}"#)
            .unwrap_err()
            .contains("`net@dev` must map to an object of outputs, found a number"));
        assert!(parse_seeded("{").unwrap_err().contains("not valid JSON"));
        assert!(parse_seeded(
            r#"{"net@dev": {"vpc_id": {"value": "vpc-1", "type": "string", "sensitive": false}}}"#
        )
        .unwrap_err()
        .contains("wavegate adapt terraform-outputs"));
    }

    #[test]
    fn job_dirs_of_processes_gone_are_swept_and_running_ones_kept() {
        let temp = tempfile::tempdir().unwrap();
        let mine = temp
            .path()
            .join(format!("{}abc", job_dir_prefix(std::process::id())));
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = gone.id();
        gone.wait().unwrap();
        let stale = temp.path().join(format!("{}xyz", job_dir_prefix(dead_pid)));
        let unrelated = temp.path().join("wavegate-jobless");
        for dir in [&mine, &stale, &unrelated] {
            std::fs::create_dir_all(dir.join("tree")).unwrap();
        }
        assert_eq!(sweep_stale_job_dirs(temp.path()), 1);
        assert!(mine.exists(), "a running process's job stays");
        assert!(!stale.exists(), "a dead process's job is removed");
        assert!(unrelated.exists());
    }
}
