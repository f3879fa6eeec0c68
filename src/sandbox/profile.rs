//! Execution profiles: what the operator lets one stage's commands see and
//! use (credentials, state, tool paths, network, limits, setup), defined in
//! the server's profiles file (`WAVEGATE_PROFILES`), never in a repository.
//! A repository's base branch only picks profiles by name
//! (`[[stage]] profile`); without a profiles file the `WAVEGATE_SANDBOX_*`
//! settings are the one profile, `default`.

use super::Network;
use anyhow::{bail, Context as _, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The profile a stage without `profile` uses.
pub const DEFAULT_PROFILE: &str = "default";

/// The longest timeout a repository may set when its profile says nothing.
pub(crate) const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The profiles file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfiles {
    #[serde(default)]
    profile: BTreeMap<String, RawProfile>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default)]
    env: BTreeMap<String, RawEnvValue>,
    #[serde(default)]
    read: Vec<PathBuf>,
    #[serde(default)]
    state: Vec<PathBuf>,
    #[serde(default)]
    write: Vec<PathBuf>,
    network: Option<String>,
    memory: Option<String>,
    processes: Option<u64>,
    disk: Option<String>,
    cpu_time: Option<String>,
    max_timeout: Option<String>,
    #[serde(default)]
    setup: Vec<Vec<String>>,
    repos: Option<Vec<String>>,
    executor: Option<String>,
    workflow: Option<String>,
    runner: Option<Vec<String>>,
    environment: Option<String>,
    #[serde(default)]
    id_tokens: BTreeMap<String, String>,
    queue_timeout: Option<String>,
}

/// A variable's value: a literal, or one of the server's own variables.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawEnvValue {
    Literal(String),
    FromEnv(FromEnv),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FromEnv {
    from_env: String,
}

/// What a command of one profile may use at most; `None`: no limit of
/// that kind (beyond the host's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Limits {
    /// Bytes of memory.
    pub(crate) memory: Option<u64>,
    /// Processes and threads at once.
    pub(crate) processes: Option<u64>,
    /// Bytes the command may write: its private `/tmp` in all, and any one file.
    pub(crate) disk: Option<u64>,
    /// Seconds of CPU.
    pub(crate) cpu_time: Option<u64>,
}

/// A limit that stopped a command, as a report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum LimitHit {
    Memory(u64),
    Processes(u64),
    Disk(u64),
    CpuTime(u64),
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Memory(bytes) => write!(f, "its memory limit of {}", bytes_text(*bytes)),
            LimitHit::Processes(n) => write!(f, "its process limit of {n}"),
            LimitHit::Disk(bytes) => write!(f, "its disk limit of {}", bytes_text(*bytes)),
            LimitHit::CpuTime(secs) => write!(
                f,
                "its CPU time limit of {}",
                crate::model::time::humanize(Duration::from_secs(*secs))
            ),
        }
    }
}

/// Which of `limits` stopped a command that exited with `code` (a signal
/// `s` reads as `128 + s`, as a shell and bubblewrap pass it on) after
/// printing `output`: the signal the kernel sends at a CPU or file-size
/// limit, or the error a program prints when the kernel refused it memory,
/// a process or disk space.
pub(crate) fn limit_hit(limits: &Limits, code: i32, output: &str) -> Option<LimitHit> {
    const SIGXCPU: i32 = 24;
    const SIGXFSZ: i32 = 25;
    let said = |needles: &[&str]| needles.iter().any(|n| output.contains(n));
    if code == 0 {
        return None;
    }
    if let Some(secs) = limits.cpu_time {
        if code == 128 + SIGXCPU || code == -SIGXCPU {
            return Some(LimitHit::CpuTime(secs));
        }
    }
    if let Some(bytes) = limits.disk {
        if code == 128 + SIGXFSZ
            || code == -SIGXFSZ
            || said(&[
                "No space left on device",
                "File too large",
                "File size limit exceeded",
                "ENOSPC",
                "EFBIG",
            ])
        {
            return Some(LimitHit::Disk(bytes));
        }
    }
    if let Some(bytes) = limits.memory {
        if said(&[
            "MemoryError",
            "Cannot allocate memory",
            "out of memory",
            "Out of memory",
            "bad_alloc",
            "ENOMEM",
        ]) {
            return Some(LimitHit::Memory(bytes));
        }
    }
    if let Some(n) = limits.processes {
        if said(&[
            "Resource temporarily unavailable",
            "fork: retry",
            "Cannot fork",
            "can't fork",
            "EAGAIN",
        ]) {
            return Some(LimitHit::Processes(n));
        }
    }
    None
}

/// One execution profile, checked. Its `Debug` names its variables, never
/// their values.
#[derive(Clone, PartialEq, Eq)]
pub struct Profile {
    pub(crate) name: String,
    /// Variables every command of the profile gets, values resolved.
    pub(crate) env: Vec<(String, String)>,
    /// The values taken from the server's environment: redacted wherever
    /// a command prints them, whatever their name.
    pub(crate) secrets: Vec<String>,
    /// The server's variables they were taken from: never passed on by a
    /// repository's `env` list.
    pub(crate) secret_sources: Vec<String>,
    /// Host paths bound read-only.
    pub(crate) read: Vec<PathBuf>,
    /// Host paths a plan reads and an apply writes; each must exist when a job starts.
    pub(crate) state: Vec<PathBuf>,
    /// Host paths bound read-write into apply commands, and into no other.
    pub(crate) write: Vec<PathBuf>,
    pub(crate) network: Network,
    pub(crate) limits: Limits,
    /// The longest timeout a repository may give a command of this profile.
    pub(crate) max_timeout: Duration,
    /// Commands run once per job before the stage's first command.
    pub(crate) setup: Vec<Vec<String>>,
    /// The repositories (`owner/name`) that may use it; `None`: every one.
    pub(crate) repos: Option<Vec<String>>,
    /// Made of the `WAVEGATE_SANDBOX_*` variables, not the profiles file.
    pub(crate) from_settings: bool,
    /// Where its commands run.
    pub(crate) executor: Executor,
}

/// Where a profile's commands run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Executor {
    /// In the sandbox on the server's own host.
    #[default]
    Local,
    /// On the forge's CI: each job is a run of the base branch's workflow.
    Actions(ActionsProfile),
}

/// `executor = "actions"`: which workflow runs a job, on which runners, in
/// which of the forge's environments (whose secrets and protection rules
/// apply), with which OIDC tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionsProfile {
    /// The workflow file's path in the repository (`.github/workflows/…`,
    /// `.forgejo/workflows/…`), read from the base branch.
    pub(crate) workflow: String,
    /// The labels a runner must have.
    pub(crate) runner: Vec<String>,
    pub(crate) environment: Option<String>,
    /// Variable name → audience: the command finds an OIDC token of the run
    /// for that audience in that variable (GitHub only).
    pub(crate) id_tokens: BTreeMap<String, String>,
    /// How long a dispatched run may wait for a runner to take it.
    pub(crate) queue_timeout: Duration,
}

impl ActionsProfile {
    /// The workflow file's name, as the forges' dispatch calls take it.
    pub(crate) fn workflow_file(&self) -> &str {
        self.workflow.rsplit('/').next().unwrap_or(&self.workflow)
    }
}

/// How long a dispatched run waits for a runner unless the profile says.
pub(crate) const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Default for Profile {
    /// No paths, no network, no limits but the default `max_timeout`.
    fn default() -> Self {
        Self::from_sandbox_settings(Vec::new(), Vec::new(), Network::None)
    }
}

impl Profile {
    /// The profile of the `WAVEGATE_SANDBOX_*` settings: their read paths,
    /// their apply-writable paths as state, their network, no limits but
    /// the default `max_timeout`.
    pub(crate) fn from_sandbox_settings(
        read: Vec<PathBuf>,
        apply_write: Vec<PathBuf>,
        network: Network,
    ) -> Self {
        Self {
            name: DEFAULT_PROFILE.into(),
            env: Vec::new(),
            secrets: Vec::new(),
            secret_sources: Vec::new(),
            read,
            state: apply_write,
            write: Vec::new(),
            network,
            limits: Limits::default(),
            max_timeout: DEFAULT_MAX_TIMEOUT,
            setup: Vec::new(),
            repos: None,
            from_settings: true,
            executor: Executor::Local,
        }
    }

    /// Whether `repo` (`owner/name`) may use this profile.
    pub(crate) fn allows(&self, repo: &str) -> bool {
        self.repos
            .as_ref()
            .is_none_or(|repos| repos.iter().any(|r| r.eq_ignore_ascii_case(repo)))
    }

    /// Every host path the profile shows a command, with the setting that names it.
    pub(crate) fn paths(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        self.read
            .iter()
            .map(|p| ("read", p.as_path()))
            .chain(self.state.iter().map(|p| ("state", p.as_path())))
            .chain(self.write.iter().map(|p| ("write", p.as_path())))
    }

    /// The paths a job needs before any command runs: each `state` path
    /// (and every other path the profile names) exists. A plan that could
    /// not see its state would plan against nothing, so the job fails
    /// first, naming the path and the setting.
    pub(crate) fn check_paths(&self) -> Result<(), String> {
        for (what, path) in self.paths() {
            if !path.exists() {
                return Err(format!(
                    "the `{what}` path `{}` of execution profile `{}` does not exist on this host, so the command did not run (a plan that cannot see its state would plan against nothing); create it, or correct `[profile.{}] {what}` in the server's profiles file",
                    path.display(),
                    self.name,
                    self.name
                ));
            }
        }
        Ok(())
    }

    /// One line for `/readyz` and the start-up log.
    pub(crate) fn describe(&self) -> String {
        let mut parts = vec![format!("network {}", self.network.as_str())];
        for (what, list) in [
            ("read", &self.read),
            ("state", &self.state),
            ("write", &self.write),
        ] {
            if !list.is_empty() {
                let joined: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
                parts.push(format!("{what} {}", joined.join(":")));
            }
        }
        let l = &self.limits;
        if let Some(b) = l.memory {
            parts.push(format!("memory {}", bytes_text(b)));
        }
        if let Some(n) = l.processes {
            parts.push(format!("processes {n}"));
        }
        if let Some(b) = l.disk {
            parts.push(format!("disk {}", bytes_text(b)));
        }
        if let Some(s) = l.cpu_time {
            parts.push(format!("cpu_time {s}s"));
        }
        parts.push(format!(
            "max_timeout {}",
            crate::model::time::humanize(self.max_timeout)
        ));
        if !self.env.is_empty() {
            let names: Vec<&str> = self.env.iter().map(|(n, _)| n.as_str()).collect();
            parts.push(format!("env {}", names.join(",")));
        }
        format!("{}: {}", self.name, parts.join(", "))
    }
}

/// The operator's profiles, by name; `default` is always there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profiles {
    /// The file they were read from; `None`: the `WAVEGATE_SANDBOX_*` settings alone.
    pub(crate) file: Option<PathBuf>,
    by_name: BTreeMap<String, Arc<Profile>>,
}

impl Default for Profiles {
    fn default() -> Self {
        Self::only(Profile::default())
    }
}

impl Profiles {
    /// Just `default`.
    pub(crate) fn only(default: Profile) -> Self {
        Self {
            file: None,
            by_name: BTreeMap::from([(DEFAULT_PROFILE.to_owned(), Arc::new(default))]),
        }
    }

    /// Just `profile`, under its own name (a runner's one job's).
    pub(crate) fn only_named(profile: Profile) -> Self {
        Self {
            file: None,
            by_name: BTreeMap::from([(profile.name.clone(), Arc::new(profile))]),
        }
    }

    /// Reads the profiles file at `path`; `get` looks up the server's
    /// variables (`from_env`); `default` is the `WAVEGATE_SANDBOX_*`
    /// settings' profile, used when the file defines no `default` of its own.
    pub(crate) fn load(
        path: &Path,
        get: &dyn Fn(&str) -> Option<String>,
        default: Profile,
        settings_given: bool,
    ) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "WAVEGATE_PROFILES: cannot read `{}`; point it at the operator's profiles file",
                path.display()
            )
        })?;
        let mut profiles = Self::parse(path, &text, get)?;
        if profiles.by_name.contains_key(DEFAULT_PROFILE) {
            if settings_given {
                bail!(
                    "{}: `[profile.default]` and the WAVEGATE_SANDBOX_READ, WAVEGATE_SANDBOX_APPLY_WRITE or WAVEGATE_SANDBOX_NETWORK variables both say what the default profile shows; keep one (move the variables' paths into `[profile.default]`)",
                    path.display()
                );
            }
        } else {
            profiles
                .by_name
                .insert(DEFAULT_PROFILE.into(), Arc::new(default));
        }
        Ok(profiles)
    }

    /// Parses and checks the profiles file's `text`.
    pub(crate) fn parse(
        file: &Path,
        text: &str,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let file_name = file.display().to_string();
        let raw: RawProfiles = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!("line {}: ", text[..s.start.min(text.len())].matches('\n').count() + 1))
                .unwrap_or_default();
            anyhow::anyhow!(
                "{file_name}: {line}{}; fix: write each profile as `[profile.NAME]` with only the fields docs/operations.md lists (env, read, state, write, network, memory, processes, disk, cpu_time, max_timeout, setup, repos; and executor, workflow, runner, environment, id_tokens, queue_timeout)",
                e.message().trim()
            )
        })?;
        let mut by_name = BTreeMap::new();
        for (name, raw) in raw.profile {
            let profile = check_profile(&file_name, &name, raw, get)?;
            by_name.insert(name, Arc::new(profile));
        }
        Ok(Self {
            file: Some(file.to_owned()),
            by_name,
        })
    }

    /// Every profile's secret values: no command's output shows any of them.
    pub(crate) fn all_secrets(&self) -> Vec<String> {
        self.by_name
            .values()
            .flat_map(|p| p.secrets.iter().cloned())
            .collect()
    }

    /// Whether `name` is a server variable a profile takes a secret from.
    pub(crate) fn is_secret_source(&self, name: &str) -> bool {
        self.by_name
            .values()
            .any(|p| p.secret_sources.iter().any(|s| s == name))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Profile>> {
        self.by_name.get(name)
    }

    pub(crate) fn default_profile(&self) -> &Arc<Profile> {
        &self.by_name[DEFAULT_PROFILE]
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Profile>> {
        self.by_name.values()
    }

    /// The names, quoted, for an error that lists what exists.
    pub fn names(&self) -> String {
        let names: Vec<String> = self.by_name.keys().map(|n| format!("`{n}`")).collect();
        names.join(", ")
    }

    /// The profile `name` as `repo` may use it, or why not: a name the
    /// operator did not define, or one kept for other repositories.
    pub(crate) fn resolve(&self, name: &str, repo: Option<&str>) -> Result<&Arc<Profile>, String> {
        let profile = self.get(name).ok_or_else(|| {
            format!(
                "execution profile `{name}` is not defined on this server (it has {}); use one of those, or ask the operator to add `[profile.{name}]` to the server's profiles file",
                self.names()
            )
        })?;
        if let Some(repo) = repo {
            if !profile.allows(repo) {
                return Err(format!(
                    "execution profile `{name}` is not for this repository ({repo}): the operator keeps it for {}; use another profile, or ask the operator to add {repo} to its `repos`",
                    profile.repos.as_deref().unwrap_or_default().join(", ")
                ));
            }
        }
        Ok(profile)
    }
}

fn check_profile(
    file: &str,
    name: &str,
    mut raw: RawProfile,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Profile> {
    let at = |field: &str| format!("{file}: `profile.{name}.{field}`");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("{file}: `[profile.{name}]`: a profile's name is letters, digits, `-` and `_`; rename it");
    }
    let executor = check_executor(&at, &mut raw)?;
    if name == DEFAULT_PROFILE && executor != Executor::Local {
        bail!(
            "{}: the default profile runs what no stage picks a profile for, forks' plans among them, so it runs on the server's host; give the forge's CI a profile of its own and pick it in `[[stage]] profile`",
            at("executor")
        );
    }
    let mut env = Vec::new();
    let mut secrets = Vec::new();
    let mut secret_sources = Vec::new();
    for (var, value) in raw.env {
        if !is_variable_name(&var) {
            bail!("{}: `{var}` is not a variable name; use letters, digits and `_`, not starting with a digit", at("env"));
        }
        if is_reserved_variable(&var) {
            bail!(
                "{}: `{var}` is set by wavegate itself; choose another name",
                at("env")
            );
        }
        let value = match value {
            RawEnvValue::Literal(value) => value,
            RawEnvValue::FromEnv(FromEnv { from_env }) => {
                let value = get(&from_env).ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}.{var}: `from_env = \"{from_env}\"` but {from_env} is not set in the server's environment; set it (e.g. from the secret store), or take the variable out",
                        at("env")
                    )
                })?;
                secrets.push(value.clone());
                secret_sources.push(from_env);
                value
            }
        };
        env.push((var, value));
    }
    for (field, list) in [
        ("read", &raw.read),
        ("state", &raw.state),
        ("write", &raw.write),
    ] {
        for path in list {
            if !path.is_absolute() {
                bail!(
                    "{}: `{}` is not an absolute path; name host paths from `/`",
                    at(field),
                    path.display()
                );
            }
            if path == Path::new("/") {
                bail!(
                    "{}: `/` would show commands the whole host; name the directories they need",
                    at(field)
                );
            }
        }
    }
    let network = match raw.network.as_deref() {
        None | Some("none") => Network::None,
        Some("egress") => Network::Egress,
        Some("host") => Network::Host,
        Some(other) => bail!(
            "{}: `{other}` is not a network; use `none` (no network), `egress` (outbound only) or `host` (the host's network)",
            at("network")
        ),
    };
    let bytes = |field: &str, text: &Option<String>| -> Result<Option<u64>> {
        text.as_deref()
            .map(|t| parse_bytes(t).map_err(|why| anyhow::anyhow!("{}: {why}", at(field))))
            .transpose()
    };
    let memory = bytes("memory", &raw.memory)?;
    let disk = bytes("disk", &raw.disk)?;
    let cpu_time = raw
        .cpu_time
        .as_deref()
        .map(|t| {
            crate::model::time::parse_duration(t)
                .map(|d| d.as_secs().max(1))
                .map_err(|why| anyhow::anyhow!("{}: {why}", at("cpu_time")))
        })
        .transpose()?;
    if raw.processes == Some(0) {
        bail!("{}: 0 would let no command start; give the most processes a command may run at once, e.g. 256", at("processes"));
    }
    let max_timeout = match raw.max_timeout.as_deref() {
        Some(t) => crate::model::time::parse_duration(t)
            .map_err(|why| anyhow::anyhow!("{}: {why}", at("max_timeout")))?,
        None => DEFAULT_MAX_TIMEOUT,
    };
    for (i, argv) in raw.setup.iter().enumerate() {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            bail!("{}[{i}]: a setup command is an argv list with the program first, e.g. [\"tfenv\", \"use\", \"1.11.0\"]", at("setup"));
        }
    }
    if let Some(repos) = &raw.repos {
        for repo in repos {
            if repo.split('/').count() < 2 || repo.split('/').any(str::is_empty) {
                bail!(
                    "{}: `{repo}` is not a repository; write `owner/name`",
                    at("repos")
                );
            }
        }
    }
    Ok(Profile {
        name: name.to_owned(),
        env,
        secrets,
        secret_sources,
        read: raw.read,
        state: raw.state,
        write: raw.write,
        network,
        limits: Limits {
            memory,
            processes: raw.processes,
            disk,
            cpu_time,
        },
        max_timeout,
        setup: raw.setup,
        repos: raw.repos,
        from_settings: false,
        executor,
    })
}

/// `executor` and the fields that go with it. A profile that runs on the
/// forge's CI names no path of the server's host and takes no secret from
/// the server's environment: its commands get their credentials where they
/// run (the forge environment's secrets, OIDC).
fn check_executor(at: &dyn Fn(&str) -> String, raw: &mut RawProfile) -> Result<Executor> {
    let actions_fields = [
        ("workflow", raw.workflow.is_some()),
        ("runner", raw.runner.is_some()),
        ("environment", raw.environment.is_some()),
        ("id_tokens", !raw.id_tokens.is_empty()),
        ("queue_timeout", raw.queue_timeout.is_some()),
    ];
    match raw.executor.as_deref() {
        None | Some("local") => {
            if let Some((field, _)) = actions_fields.iter().find(|(_, set)| *set) {
                bail!(
                    "{}: is for profiles that run on the forge's CI; add `executor = \"actions\"`, or take it out",
                    at(field)
                );
            }
            Ok(Executor::Local)
        }
        Some("actions") => {
            for (field, list) in [("read", &raw.read), ("state", &raw.state), ("write", &raw.write)] {
                if !list.is_empty() {
                    bail!(
                        "{}: names paths of the server's host, which commands on the forge's CI never see; keep state where the runner reaches it (a remote backend) and take `{field}` out",
                        at(field)
                    );
                }
            }
            if let Some((var, _)) = raw
                .env
                .iter()
                .find(|(_, value)| matches!(value, RawEnvValue::FromEnv(_)))
            {
                bail!(
                    "{}.{var}: a profile that runs on the forge's CI takes no secret from the server's environment; give it to the workflow's environment (its secrets, or an OIDC role through `id_tokens`) and take `from_env` out",
                    at("env")
                );
            }
            let workflow = raw.workflow.take().ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: `executor = \"actions\"` needs the workflow that runs its jobs; add `workflow = \".github/workflows/wavegate.yml\"` (`wavegate init actions` prints one)",
                    at("workflow")
                )
            })?;
            if !is_workflow_path(&workflow) {
                bail!(
                    "{}: `{workflow}` is not a workflow file; write its path in the repository, e.g. `.github/workflows/wavegate.yml` or `.forgejo/workflows/wavegate.yml`",
                    at("workflow")
                );
            }
            let runner = raw.runner.take().unwrap_or_default();
            if runner.is_empty() || runner.iter().any(|l| l.trim().is_empty()) {
                bail!(
                    "{}: name the labels of the runners that may run these jobs, e.g. `runner = [\"self-hosted\", \"prod\"]`",
                    at("runner")
                );
            }
            if raw.environment.as_deref().is_some_and(|e| e.trim().is_empty()) {
                bail!("{}: name the forge's environment, or take it out", at("environment"));
            }
            for (var, audience) in &raw.id_tokens {
                if !is_variable_name(var) || is_reserved_variable(var) {
                    bail!(
                        "{}: `{var}` is not a variable a command may be given; use letters, digits and `_`, not `PATH`, `HOME` or `WAVEGATE_…`",
                        at("id_tokens")
                    );
                }
                if audience.trim().is_empty() {
                    bail!(
                        "{}.{var}: give the audience the token is for, e.g. `sts.amazonaws.com`",
                        at("id_tokens")
                    );
                }
            }
            let queue_timeout = match raw.queue_timeout.as_deref() {
                Some(t) => crate::model::time::parse_duration(t)
                    .map_err(|why| anyhow::anyhow!("{}: {why}", at("queue_timeout")))?,
                None => DEFAULT_QUEUE_TIMEOUT,
            };
            Ok(Executor::Actions(ActionsProfile {
                workflow,
                runner,
                environment: raw.environment.take(),
                id_tokens: std::mem::take(&mut raw.id_tokens),
                queue_timeout,
            }))
        }
        Some(other) => bail!(
            "{}: `{other}` is not an executor; use `local` (the sandbox on the server's host) or `actions` (the forge's CI)",
            at("executor")
        ),
    }
}

/// `.github/workflows/NAME.yml` (or `.yaml`; `.forgejo/`, `.gitea/`).
fn is_workflow_path(path: &str) -> bool {
    let Some((dir, file)) = path.rsplit_once('/') else {
        return false;
    };
    matches!(
        dir,
        ".github/workflows" | ".forgejo/workflows" | ".gitea/workflows"
    ) && (file.ends_with(".yml") || file.ends_with(".yaml"))
        && file.len() > 4
        && file
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// A variable name a shell and every tool can read.
pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Variables wavegate sets for every command: no profile or stage may override them.
pub(crate) fn is_reserved_variable(name: &str) -> bool {
    matches!(name, "PATH" | "HOME") || name.starts_with("WAVEGATE_")
}

/// Parses a size such as `2GiB`, `512MiB`, `1G` or `1048576` (bytes):
/// binary units (`KiB`, `MiB`, `GiB`, `TiB`, also written `K`, `M`, `G`,
/// `T`) and decimal ones (`kB`, `MB`, `GB`, `TB`).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => 1 << 10,
        "m" | "mi" | "mib" => 1 << 20,
        "g" | "gi" | "gib" => 1 << 30,
        "t" | "ti" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "`{text}` is not a size; write it like `2GiB`, `512MiB` or `10GB`"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size; write it like `2GiB`, `512MiB` or `10GB`"))?;
    let bytes = (value * scale as f64).round();
    if bytes < 1.0 || !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!(
            "`{text}` is no size a command can live in; give more than zero bytes"
        ));
    }
    Ok(bytes as u64)
}

/// `2 GiB`, `512 MiB`, `1536 KiB`, `100 bytes`: exact where it can be.
pub(crate) fn bytes_text(bytes: u64) -> String {
    for (unit, scale) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= scale && bytes % scale == 0 {
            return format!("{} {unit}", bytes / scale);
        }
    }
    if bytes >= 1 << 20 {
        return format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64);
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Profiles> {
        let env = |name: &str| (name == "PROD_TF_TOKEN").then(|| "s3cr3t-token-value".to_owned());
        Profiles::parse(Path::new("/etc/wavegate/profiles.toml"), text, &env)
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_profile_reads_its_credentials_paths_network_and_limits() {
        let profiles = parse(
            r#"
            [profile.prod-read]
            env = { AWS_PROFILE = "prod-read", TF_TOKEN = { from_env = "PROD_TF_TOKEN" } }
            read = ["/etc/wavegate/aws/prod-read"]
            state = ["/srv/state/prod"]
            network = "egress"
            memory = "2GiB"
            processes = 256
            disk = "1GiB"
            cpu_time = "10m"
            max_timeout = "20m"
            setup = [["tfenv", "use", "1.11.0"]]
            repos = ["acme/infra"]
            "#,
        )
        .unwrap();
        let p = profiles.get("prod-read").unwrap();
        assert_eq!(
            p.env,
            vec![
                ("AWS_PROFILE".to_owned(), "prod-read".to_owned()),
                ("TF_TOKEN".to_owned(), "s3cr3t-token-value".to_owned())
            ]
        );
        assert_eq!(p.secrets, vec!["s3cr3t-token-value".to_owned()]);
        assert!(
            !format!("{p:?} {profiles:?}").contains("s3cr3t"),
            "no secret in what a log may print"
        );
        assert_eq!(p.network, Network::Egress);
        assert_eq!(
            p.limits,
            Limits {
                memory: Some(2 << 30),
                processes: Some(256),
                disk: Some(1 << 30),
                cpu_time: Some(600)
            }
        );
        assert_eq!(p.max_timeout, Duration::from_secs(1200));
        assert!(p.allows("acme/infra") && p.allows("ACME/Infra") && !p.allows("acme/web"));
        assert_eq!(
            p.describe(),
            "prod-read: network egress, read /etc/wavegate/aws/prod-read, state /srv/state/prod, memory 2 GiB, processes 256, disk 1 GiB, cpu_time 600s, max_timeout 20m, env AWS_PROFILE,TF_TOKEN"
        );
    }

    #[test]
    fn each_mistake_names_the_file_the_field_and_the_fix() {
        for (text, expected) in [
            ("[profile.p]\nmemroy = \"1G\"", "unknown field `memroy`"),
            (
                "[profile.p]\nmemory = \"lots\"",
                "`profile.p.memory`: `lots` is not a size",
            ),
            (
                "[profile.p]\nread = [\"relative/dir\"]",
                "`profile.p.read`: `relative/dir` is not an absolute path",
            ),
            (
                "[profile.p]\nwrite = [\"/\"]",
                "`/` would show commands the whole host",
            ),
            (
                "[profile.p]\nnetwork = \"internet\"",
                "`internet` is not a network",
            ),
            (
                "[profile.p]\nenv = { T = { from_env = \"UNSET\" } }",
                "UNSET is not set in the server's environment",
            ),
            (
                "[profile.p]\nenv = { PATH = \"/x\" }",
                "`PATH` is set by wavegate itself",
            ),
            (
                "[profile.p]\nenv = { \"1X\" = \"x\" }",
                "`1X` is not a variable name",
            ),
            ("[profile.p]\nprocesses = 0", "0 would let no command start"),
            (
                "[profile.p]\nmax_timeout = \"0s\"",
                "`profile.p.max_timeout`: `0s` is zero",
            ),
            (
                "[profile.p]\nsetup = [[]]",
                "`profile.p.setup`[0]: a setup command is an argv list",
            ),
            (
                "[profile.p]\nrepos = [\"infra\"]",
                "`infra` is not a repository; write `owner/name`",
            ),
            ("[profile.\"a b\"]", "a profile's name is letters, digits"),
        ] {
            let e = error(text);
            assert!(e.starts_with("/etc/wavegate/profiles.toml: "), "{e}");
            assert!(e.contains(expected), "{text}: {e}");
        }
    }

    #[test]
    fn a_profile_on_the_forges_ci_names_its_workflow_runners_environment_and_tokens() {
        let profiles = parse(
            r#"
            [profile.prod]
            executor = "actions"
            workflow = ".github/workflows/wavegate.yml"
            runner = ["self-hosted", "prod"]
            environment = "production"
            id_tokens = { AWS_WEB_IDENTITY_TOKEN = "sts.amazonaws.com" }
            env = { AWS_REGION = "eu-west-1" }
            max_timeout = "30m"
            queue_timeout = "5m"
            [profile.dev]
            "#,
        )
        .unwrap();
        let Executor::Actions(actions) = &profiles.get("prod").unwrap().executor else {
            panic!("prod runs on the forge's CI");
        };
        assert_eq!(actions.workflow_file(), "wavegate.yml");
        assert_eq!(actions.runner, ["self-hosted", "prod"]);
        assert_eq!(actions.environment.as_deref(), Some("production"));
        assert_eq!(
            actions.id_tokens["AWS_WEB_IDENTITY_TOKEN"],
            "sts.amazonaws.com"
        );
        assert_eq!(actions.queue_timeout, Duration::from_secs(300));
        assert_eq!(profiles.get("dev").unwrap().executor, Executor::Local);
    }

    #[test]
    fn a_profile_on_the_forges_ci_that_would_need_the_servers_host_is_refused() {
        let actions = "[profile.p]\nexecutor = \"actions\"\nrunner = [\"prod\"]\n";
        let workflow = "workflow = \".github/workflows/wavegate.yml\"\n";
        for (text, expected) in [
            (
                actions.to_owned(),
                "`profile.p.workflow`: `executor = \"actions\"` needs the workflow",
            ),
            (
                format!("{actions}workflow = \"wavegate.yml\""),
                "`wavegate.yml` is not a workflow file",
            ),
            (
                format!("{actions}workflow = \".github/workflows/../x.yml\""),
                "is not a workflow file",
            ),
            (
                format!("[profile.p]\nexecutor = \"actions\"\n{workflow}"),
                "`profile.p.runner`: name the labels",
            ),
            (
                format!("{actions}{workflow}state = [\"/srv/state\"]"),
                "`profile.p.state`: names paths of the server's host",
            ),
            (
                format!("{actions}{workflow}env = {{ T = {{ from_env = \"PROD_TF_TOKEN\" }} }}"),
                "takes no secret from the server's environment",
            ),
            (
                format!("{actions}{workflow}id_tokens = {{ PATH = \"sts.amazonaws.com\" }}"),
                "`profile.p.id_tokens`: `PATH` is not a variable",
            ),
            (
                format!("{actions}{workflow}id_tokens = {{ AWS = \" \" }}"),
                "give the audience",
            ),
            (
                "[profile.p]\nrunner = [\"prod\"]".to_owned(),
                "`profile.p.runner`: is for profiles that run on the forge's CI",
            ),
            (
                format!("[profile.default]\nexecutor = \"actions\"\nrunner = [\"x\"]\n{workflow}"),
                "`profile.default.executor`: the default profile runs what no stage picks a profile for",
            ),
            (
                "[profile.p]\nexecutor = \"ci\"".to_owned(),
                "`ci` is not an executor",
            ),
        ] {
            let e = error(&text);
            assert!(e.starts_with("/etc/wavegate/profiles.toml: "), "{e}");
            assert!(e.contains(expected), "{text}: {e}");
        }
    }

    #[test]
    fn a_name_the_operator_did_not_define_or_keeps_for_others_is_refused_naming_what_exists() {
        let profiles = parse("[profile.dev]\n[profile.prod]\nrepos = [\"acme/infra\"]").unwrap();
        let e = profiles.resolve("staging", None).unwrap_err();
        assert!(
            e.contains("`staging` is not defined on this server (it has `dev`, `prod`)"),
            "{e}"
        );
        let e = profiles.resolve("prod", Some("acme/web")).unwrap_err();
        assert!(e.contains("keeps it for acme/infra"), "{e}");
        assert!(profiles.resolve("prod", Some("acme/infra")).is_ok());
    }

    #[test]
    fn without_a_default_in_the_file_the_sandbox_settings_are_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("profiles.toml");
        std::fs::write(&file, "[profile.prod]\nstate = [\"/srv\"]").unwrap();
        let settings = Profile::from_sandbox_settings(vec!["/opt".into()], vec![], Network::Host);
        let profiles = Profiles::load(&file, &|_| None, settings.clone(), true).unwrap();
        assert_eq!(**profiles.default_profile(), settings);

        std::fs::write(&file, "[profile.default]\nread = [\"/opt\"]").unwrap();
        let e = Profiles::load(&file, &|_| None, settings.clone(), true).unwrap_err();
        assert!(e.to_string().contains("keep one"), "{e}");
        let own = Profiles::load(&file, &|_| None, settings, false).unwrap();
        assert_eq!(own.default_profile().read, vec![PathBuf::from("/opt")]);
    }

    #[test]
    fn a_missing_state_path_is_named_with_its_setting() {
        let profiles = parse("[profile.prod]\nstate = [\"/nonexistent/wavegate-state\"]").unwrap();
        let e = profiles.get("prod").unwrap().check_paths().unwrap_err();
        assert!(
            e.starts_with("the `state` path `/nonexistent/wavegate-state` of execution profile `prod` does not exist"),
            "{e}"
        );
        assert!(e.contains("`[profile.prod] state`"), "{e}");
    }

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("10GB"), Ok(10_000_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("2 gigs").is_err());
        assert_eq!(bytes_text(2 << 30), "2 GiB");
        assert_eq!(bytes_text(1536 << 10), "1536 KiB");
        assert_eq!(bytes_text(100), "100 bytes");
    }
}
