//! Every command wavegate runs on a repository's behalf (plan, apply,
//! outputs) is code from that repository, so it runs in a sandbox the
//! operator controls and the repository cannot loosen (docs/operations.md):
//! bubblewrap in an unprivileged user namespace with its own pid, mount, ipc,
//! uts and network namespaces, a fresh `/proc`, a private `/tmp` and `HOME`,
//! no capabilities, dying with the server. It sees a fresh copy of the
//! commit, its own files, the system's read-only directories and the paths
//! the operator lists: never the data dir, the mirrors, the database, the
//! keys, the server's environment or memory, another job, or host loopback
//! services.
//!
//! `WAVEGATE_SANDBOX=none` is the explicit opt-out. With `bwrap` and no
//! working bubblewrap nothing runs: every launch fails, saying why.

mod bwrap;
mod cgroup;
pub(crate) mod files;
#[allow(unsafe_code)]
mod net;
#[allow(unsafe_code)]
mod overlay;
pub(crate) mod process;
pub mod profile;
#[allow(unsafe_code)]
pub(crate) mod spawn;
pub(crate) mod trees;

pub use profile::{Profile, Profiles};

use anyhow::{bail, Result};
use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How commands are isolated (`WAVEGATE_SANDBOX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Bwrap,
    /// No sandbox: commands run as the server's own user.
    None,
}

/// What network a sandboxed command has (`WAVEGATE_SANDBOX_NETWORK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Network {
    /// Its own loopback only.
    None,
    /// Outbound connections, never to the host or metadata addresses.
    Egress,
    /// The host's network, loopback services included.
    Host,
}

impl Network {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Egress => "egress",
            Network::Host => "host",
        }
    }
}

/// The operator's sandbox settings; the repository has no say in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub(crate) mode: Mode,
    /// What each stage's commands may see and use; `default` is made of
    /// the `WAVEGATE_SANDBOX_READ`, `_APPLY_WRITE` and `_NETWORK` settings
    /// unless the profiles file defines it.
    pub(crate) profiles: Profiles,
    /// Whether commands' memory and process limits may be held by cgroups
    /// (`WAVEGATE_SANDBOX_CGROUPS=auto`, the default) or by rlimits alone (`off`).
    pub(crate) cgroups: bool,
    /// Bytes of commits' trees kept in the shared tree cache
    /// (`WAVEGATE_TREE_CACHE_SIZE`); `None` (`off`): each job copies its tree.
    pub(crate) tree_cache: Option<u64>,
}

/// What the tree cache keeps unless told otherwise: the `5GiB`
/// `WAVEGATE_TREE_CACHE_SIZE` declares (the tests hold the two together).
const DEFAULT_TREE_CACHE: u64 = 5 << 30;

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            mode: Mode::Bwrap,
            profiles: Profiles::default(),
            cgroups: true,
            tree_cache: Some(DEFAULT_TREE_CACHE),
        }
    }
}

/// The sandbox's settings as the operator declares them, one field a
/// variable, before they are checked; the server's own declaration
/// (`config::vars`) takes them in, so they are read, listed and known to
/// the start-up warning with the rest.
#[derive(clap::Args, Clone, Debug)]
pub struct SandboxVars {
    /// `bwrap` (bubblewrap), or `none`: commands run unsandboxed, as the
    /// server's user (a warning at start and in every report's footer).
    #[arg(
        long,
        env = "WAVEGATE_SANDBOX",
        value_name = "MODE",
        default_value = "bwrap"
    )]
    pub sandbox: String,
    /// The operator's execution profiles file, an absolute path: what each
    /// profile's commands see and use.
    #[arg(long, env = "WAVEGATE_PROFILES", value_name = "FILE")]
    pub profiles: Option<PathBuf>,
    /// The `default` profile's `read` (unless the profiles file defines
    /// `[profile.default]`): host paths bound read-only into every command,
    /// `:`-separated.
    #[arg(long, env = "WAVEGATE_SANDBOX_READ", value_name = "PATHS")]
    pub sandbox_read: Option<String>,
    /// The `default` profile's `state` (likewise): host paths bound
    /// read-write into apply commands and read-only into the others,
    /// `:`-separated.
    #[arg(long, env = "WAVEGATE_SANDBOX_APPLY_WRITE", value_name = "PATHS")]
    pub sandbox_apply_write: Option<String>,
    /// The `default` profile's `network` (likewise): `none` (unset: the
    /// sandbox's own loopback only), `egress` (outbound only) or `host`.
    #[arg(long, env = "WAVEGATE_SANDBOX_NETWORK", value_name = "NETWORK")]
    pub sandbox_network: Option<String>,
    /// `auto`: profiles' memory and process limits are held by cgroups
    /// where the server may make them, else by rlimits; `off`: rlimits only.
    #[arg(
        long,
        env = "WAVEGATE_SANDBOX_CGROUPS",
        value_name = "MODE",
        default_value = "auto"
    )]
    pub sandbox_cgroups: String,
    /// How much of commits' trees the shared tree cache keeps (`5GiB`,
    /// `512MiB`, `10GB`), or `off` to copy each job's tree.
    #[arg(
        long,
        env = "WAVEGATE_TREE_CACHE_SIZE",
        value_name = "SIZE",
        default_value = "5GiB"
    )]
    pub tree_cache_size: String,
}

impl SandboxSettings {
    /// Checks the settings `vars` declare. `env` is the server's
    /// environment, where the profiles file's `from_env` secrets are read.
    pub fn from_vars(vars: &SandboxVars, env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let mode = match vars.sandbox.to_ascii_lowercase().as_str() {
            "bwrap" => Mode::Bwrap,
            "none" => Mode::None,
            other => bail!(
                "WAVEGATE_SANDBOX=`{other}` is not a sandbox; use `bwrap` (the default: bubblewrap) or `none` (commands run unsandboxed, as the server's user)"
            ),
        };
        let network = match vars.sandbox_network.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("none") => Network::None,
            Some("egress") => Network::Egress,
            Some("host") => Network::Host,
            Some(other) => bail!(
                "WAVEGATE_SANDBOX_NETWORK=`{other}` is not a network; use `none` (the default: no network), `egress` (outbound only, e.g. for Terraform providers) or `host` (the host's network, its loopback services included)"
            ),
        };
        let paths = |name: &str, list: &Option<String>| -> Result<Vec<PathBuf>> {
            let Some(list) = list else {
                return Ok(Vec::new());
            };
            list.split(':')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let path = PathBuf::from(p);
                    if !path.is_absolute() {
                        bail!("{name}: `{p}` is not an absolute path; list absolute host paths separated by `:`");
                    }
                    if !path.exists() {
                        bail!("{name}: `{p}` does not exist on this host; create it or take it off the list");
                    }
                    Ok(path)
                })
                .collect()
        };
        let read = paths("WAVEGATE_SANDBOX_READ", &vars.sandbox_read)?;
        let apply_write = paths("WAVEGATE_SANDBOX_APPLY_WRITE", &vars.sandbox_apply_write)?;
        let settings_given =
            !read.is_empty() || !apply_write.is_empty() || vars.sandbox_network.is_some();
        let default = Profile::from_sandbox_settings(read, apply_write, network);
        let profiles = match &vars.profiles {
            Some(path) => {
                if !path.is_absolute() {
                    bail!("WAVEGATE_PROFILES: `{}` is not an absolute path; name the operator's profiles file from `/`, e.g. /etc/wavegate/profiles.toml", path.display());
                }
                Profiles::load(path, env, default, settings_given)?
            }
            None => Profiles::only(default),
        };
        let cgroups = match vars.sandbox_cgroups.to_ascii_lowercase().as_str() {
            "auto" => true,
            "off" => false,
            other => bail!(
                "WAVEGATE_SANDBOX_CGROUPS=`{other}` is not a setting; use `auto` (the default: cgroups hold memory and process limits where the server may make them) or `off` (resource limits alone)"
            ),
        };
        let tree_cache = match vars.tree_cache_size.as_str() {
            "off" => None,
            size => Some(profile::parse_bytes(size).map_err(|why| {
                anyhow::anyhow!("WAVEGATE_TREE_CACHE_SIZE: {why}, or `off` to copy each job's tree")
            })?),
        };
        Ok(Self {
            mode,
            profiles,
            cgroups,
            tree_cache,
        })
    }

    /// The execution profiles: the profiles file's, and `default`.
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// Refuses operator paths that would show commands what they must never
    /// see: `secrets` are (what, path) pairs such as the data dir, the
    /// database file, the App key; `jobs` is where each job's tree lives (a
    /// path above it would show every job).
    pub(crate) fn check_exposure(&self, secrets: &[(&str, &Path)], jobs: &Path) -> Result<()> {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
        for profile in self.profiles.iter() {
            for (what, path) in profile.paths() {
                let name = match (profile.from_settings, what) {
                    (true, "read") => "WAVEGATE_SANDBOX_READ".to_owned(),
                    (true, _) => "WAVEGATE_SANDBOX_APPLY_WRITE".to_owned(),
                    (false, _) => format!("`[profile.{}] {what}`", profile.name),
                };
                let bound = canonical(path);
                for (what, secret) in secrets {
                    let secret = canonical(secret);
                    if secret.starts_with(&bound) || bound.starts_with(&secret) {
                        bail!(
                            "{name}: `{}` would let every command see {what} ({}); list narrower paths that hold only tools or state",
                            path.display(),
                            secret.display()
                        );
                    }
                }
                let inside_a_job = bound
                    .strip_prefix(canonical(jobs))
                    .ok()
                    .and_then(|rest| rest.components().next())
                    .is_some_and(|first| {
                        first
                            .as_os_str()
                            .to_string_lossy()
                            .starts_with("wavegate-job-")
                    });
                if inside_a_job {
                    bail!(
                        "{name}: `{}` is inside a job's directory, which its commands alone may see; list paths of your own",
                        path.display()
                    );
                }
                if canonical(jobs).starts_with(&bound) {
                    bail!(
                        "{name}: `{}` holds every job's checkout ({}), so one job's command would see another's; list narrower paths",
                        path.display(),
                        jobs.display()
                    );
                }
            }
        }
        Ok(())
    }
}

/// What a command is for; apply commands alone may write the apply paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CommandKind {
    Plan,
    Apply,
    Outputs,
    /// A hook of the team's own: it reads the commit and writes only its own files.
    Hook,
    /// A cost command: like a hook, it reads the commit and the plans and
    /// writes only its own files.
    Cost,
}

impl CommandKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CommandKind::Plan => "plan",
            CommandKind::Apply => "apply",
            CommandKind::Outputs => "outputs",
            CommandKind::Hook => "hook",
            CommandKind::Cost => "cost",
        }
    }
}

/// What one command may write besides its private `/tmp`, each bound at the
/// same path inside as outside (so `{plan_file}` means the same to both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confinement {
    pub(crate) kind: CommandKind,
    /// The fresh copy of the commit.
    pub(crate) tree: PathBuf,
    /// The member's plan, inputs and outputs files.
    pub(crate) files: PathBuf,
    /// Its private `HOME`, empty at first.
    pub(crate) home: PathBuf,
    /// What its profile's setup left for the stage's commands (tools,
    /// logins), read-only to them.
    pub(crate) setup: Option<PathBuf>,
    /// The cached tree of the commit, seen at `tree` through a private
    /// writable layer (`tree` itself an empty directory); `None`: `tree`
    /// is a copy of the job's own.
    pub(crate) lower: Option<PathBuf>,
}

impl Confinement {
    /// A plan command's confinement in `dir`: `tree`, `files` and `home`
    /// created empty there.
    pub(crate) fn create_in(dir: &Path) -> std::io::Result<Self> {
        let confinement = Self {
            kind: CommandKind::Plan,
            tree: dir.join("tree"),
            files: dir.join("files"),
            home: dir.join("home"),
            setup: None,
            lower: None,
        };
        for path in [&confinement.tree, &confinement.files, &confinement.home] {
            std::fs::create_dir(path)?;
        }
        Ok(confinement)
    }
}

/// One command to start.
pub(crate) struct Launch<'a> {
    pub(crate) argv: &'a [String],
    pub(crate) cwd: &'a Path,
    /// The whole environment the command sees.
    pub(crate) env: &'a [(String, String)],
    /// When the runner kills it; the sandbox kills it a little later
    /// itself, should the server be unable to.
    pub(crate) timeout: Duration,
    pub(crate) confinement: &'a Confinement,
    /// What it may see and use besides its own files.
    pub(crate) profile: &'a Profile,
}

/// A started command, what keeps its network up, its cgroup, and the
/// mount point of its writable layer.
pub(crate) struct Launched {
    pub(crate) child: Child,
    network: Option<net::Attached>,
    cgroup: Option<cgroup::CommandCgroup>,
    layer: Option<PathBuf>,
}

impl Launched {
    /// The profile's limit the kernel stopped the command at, by the
    /// cgroup's own count (memory and processes, where cgroups hold them).
    pub(crate) fn limit_hit(&self, limits: &profile::Limits) -> Option<profile::LimitHit> {
        self.cgroup.as_ref().and_then(|c| c.hit(limits))
    }

    /// Ends the helpers and removes the cgroup once the command has ended.
    pub(crate) async fn finish(&mut self) {
        if let Some(network) = &mut self.network {
            network.stop();
        }
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove().await;
        }
        if let Some(layer) = self.layer.take() {
            // Empty out here: the layer was mounted in the command's namespace.
            let _ = std::fs::remove_dir(layer);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    /// The sandbox cannot run here; nothing runs unsandboxed instead.
    #[error("the sandbox is unavailable, so no command runs: {0}")]
    Unavailable(String),
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect the sandbox's network: {0}")]
    Network(String),
    /// The profile limits commands and this host cannot enforce it.
    #[error("{0}")]
    Limits(String),
    /// The server could not give the command its cgroup or its view of
    /// the tree: the server's problem, not the command's.
    #[error("the server could not set up the command's sandbox (joining its cgroup, or mounting its private view of the commit's tree): {0}; the operator checks that the server may make user namespaces and mounts in them and manage its cgroups, or sets WAVEGATE_TREE_CACHE_SIZE=off and WAVEGATE_SANDBOX_CGROUPS=off")]
    Setup(std::io::Error),
}

/// How far past the runner's own timeout the sandbox kills a command itself.
const BACKSTOP_GRACE: Duration = Duration::from_secs(15);

/// The sandbox as probed at start: ready, off, or unavailable (and why).
pub struct Sandbox {
    settings: SandboxSettings,
    state: State,
}

enum State {
    Off,
    Ready(Box<Ready>),
    Unavailable(String),
}

struct Ready {
    bwrap: PathBuf,
    /// coreutils' `timeout`, for the backstop.
    timeout: Option<PathBuf>,
    /// util-linux's `prlimit`, which sets a profile's limits inside the sandbox.
    prlimit: Option<PathBuf>,
    /// The cgroups commands get, or why none.
    cgroups: Result<cgroup::Cgroups, String>,
    /// wavegate's own executable, shown to commands as
    /// [`OWN_BINARY_DIR`]`/wavegate` (for `wavegate adapt` in their scripts).
    own_binary: Option<PathBuf>,
    /// The shared cache of commits' trees, once a command was seen to get a
    /// private view of one; why not otherwise (each job copies its tree).
    trees: Result<trees::TreeCache, String>,
    layout: bwrap::HostLayout,
    egress: Option<net::EgressTools>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Sandbox {
    /// No sandbox: commands run as the server's user (an explicit opt-out).
    pub fn off() -> Self {
        Self {
            settings: SandboxSettings {
                mode: Mode::None,
                ..SandboxSettings::default()
            },
            state: State::Off,
        }
    }

    /// Finds bubblewrap (and the egress tools) and starts one sandbox to
    /// see that this host lets it: what fails is kept as the reason.
    pub async fn probe(settings: SandboxSettings) -> Self {
        if settings.mode == Mode::None {
            return Self {
                settings,
                state: State::Off,
            };
        }
        let state = match Self::locate(&settings) {
            Err(problem) => State::Unavailable(problem),
            Ok(ready) => {
                let mut sandbox = Self {
                    settings,
                    state: State::Ready(Box::new(ready)),
                };
                if let Err(problem) = sandbox.try_once(None).await {
                    sandbox.state = State::Unavailable(problem);
                    return sandbox;
                }
                let trees = sandbox.try_trees().await;
                if let State::Ready(ready) = &mut sandbox.state {
                    ready.trees = trees;
                }
                return sandbox;
            }
        };
        Self { settings, state }
    }

    fn locate(settings: &SandboxSettings) -> Result<Ready, String> {
        let bwrap = find_program("bwrap").ok_or(
            "bubblewrap (`bwrap`) is not installed; install it (`apt-get install bubblewrap`), or set WAVEGATE_SANDBOX=none to run commands unsandboxed",
        )?;
        let egress = if settings
            .profiles
            .iter()
            .any(|p| p.network == Network::Egress)
        {
            Some(net::EgressTools::locate()?)
        } else {
            None
        };
        let cgroups = if settings.cgroups {
            cgroup::Cgroups::detect()
        } else {
            Err("WAVEGATE_SANDBOX_CGROUPS=off".to_owned())
        };
        if let Ok(cgroups) = &cgroups {
            let swept = cgroups.sweep();
            if swept > 0 {
                tracing::info!("removed {swept} command cgroups an earlier server left behind");
            }
        }
        Ok(Ready {
            bwrap,
            timeout: find_program("timeout"),
            prlimit: find_program("prlimit"),
            cgroups,
            own_binary: std::env::current_exe().and_then(std::fs::canonicalize).ok(),
            trees: Err("not tried yet".into()),
            layout: bwrap::HostLayout::read(),
            egress,
        })
    }

    /// Opens the tree cache once a command was seen to read a tree through
    /// a private layer and write it without changing the tree.
    async fn try_trees(&self) -> Result<trees::TreeCache, String> {
        let Some(cap) = self.settings.tree_cache else {
            return Err("WAVEGATE_TREE_CACHE_SIZE=off".into());
        };
        let dir = tempfile::Builder::new()
            .prefix("wavegate-probe-")
            .tempdir()
            .map_err(|e| format!("cannot create a directory to try a tree's view in: {e}"))?;
        let lower = dir.path().join("lower");
        std::fs::create_dir(&lower)
            .and_then(|()| std::fs::write(lower.join("file"), "cached\n"))
            .map_err(|e| format!("cannot create a tree to try: {e}"))?;
        self.try_once(Some(&lower)).await.map_err(|why| {
            format!("a command cannot see a private view of a cached tree here: {why}")
        })?;
        if std::fs::read_to_string(lower.join("file")).ok().as_deref() != Some("cached\n")
            || lower.join("new").exists()
        {
            return Err("a command's writes reached the cached tree".into());
        }
        trees::TreeCache::open(&trees::cache_dir(), cap).map_err(|e| format!("{e:#}"))
    }

    /// The shared cache of commits' trees, when commands get private views of them.
    pub(crate) fn trees(&self) -> Option<&trees::TreeCache> {
        match &self.state {
            State::Ready(ready) => ready.trees.as_ref().ok(),
            State::Off | State::Unavailable(_) => None,
        }
    }

    /// Runs `true` in a sandbox such as every command gets (with `lower`:
    /// reads it through a private view and writes that view).
    async fn try_once(&self, lower: Option<&Path>) -> Result<(), String> {
        let dir = tempfile::Builder::new()
            .prefix("wavegate-probe-")
            .tempdir()
            .map_err(|e| format!("cannot create a directory to try the sandbox in: {e}"))?;
        let mut confinement = Confinement::create_in(dir.path())
            .map_err(|e| format!("cannot create a directory to try the sandbox in: {e}"))?;
        confinement.lower = lower.map(Path::to_owned);
        let argv: Vec<String> = match lower {
            None => vec!["true".to_owned()],
            Some(_) => ["sh", "-c", "read -r line < file && [ \"$line\" = cached ] && echo written > file && echo new > new"]
                .map(str::to_owned)
                .to_vec(),
        };
        let env = [("PATH".to_owned(), default_path())];
        let launched = self
            .launch(&Launch {
                argv: &argv,
                cwd: &confinement.tree,
                env: &env,
                timeout: Duration::from_secs(30),
                confinement: &confinement,
                // No operator path: one missing now (a state volume not yet
                // mounted) fails the jobs that need it, not the sandbox.
                profile: &Profile::default(),
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut launched = launched;
        let output = tokio::time::timeout(Duration::from_secs(30), async {
            let mut stderr = Vec::new();
            if let Some(mut pipe) = launched.child.stderr.take() {
                let _ = tokio::io::AsyncReadExt::read_to_end(&mut pipe, &mut stderr).await;
            }
            (launched.child.wait().await, stderr)
        })
        .await;
        launched.finish().await;
        match output {
            Ok((Ok(status), _)) if status.success() => Ok(()),
            Ok((status, stderr)) => Err(format!(
                "bubblewrap cannot create its sandbox on this host ({}: {}); allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone=1 where the kernel has it; in a container, a seccomp profile that permits unshare: docs/deployment.md says what a cluster must allow), or set WAVEGATE_SANDBOX=none to run commands unsandboxed",
                status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                String::from_utf8_lossy(&stderr).trim()
            )),
            Err(_) => Err("bubblewrap did not finish a trial run within 30s".into()),
        }
    }

    /// The operator's execution profiles.
    pub(crate) fn profiles(&self) -> &Profiles {
        &self.settings.profiles
    }

    /// Why no command can run, when the sandbox is on but unavailable.
    pub fn problem(&self) -> Option<&str> {
        match &self.state {
            State::Unavailable(problem) => Some(problem),
            State::Off | State::Ready(_) => None,
        }
    }

    /// The PATH commands get: the server's, with `wavegate` itself first
    /// (in the sandbox, where it is shown at [`OWN_BINARY_DIR`]; unsandboxed,
    /// its own directory).
    pub(crate) fn command_path(&self) -> String {
        let own = match &self.state {
            State::Ready(ready) if ready.own_binary.is_some() => Some(OWN_BINARY_DIR.to_owned()),
            State::Ready(_) | State::Unavailable(_) => None,
            State::Off => std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.display().to_string())),
        };
        match own {
            Some(dir) => format!("{dir}:{}", default_path()),
            None => default_path(),
        }
    }

    /// Those of `limits` no cgroup holds here (all of them unsandboxed).
    pub(crate) fn limits_by_rlimit(&self, limits: &profile::Limits) -> profile::Limits {
        match &self.state {
            State::Ready(ready) => ready.rlimited(limits),
            State::Off | State::Unavailable(_) => *limits,
        }
    }

    /// What holds the profiles' limits: `cgroup-v2`, `cgroup-v1`,
    /// `rlimits`, or `none` (no sandbox, or no way to).
    pub(crate) fn limits_mechanism(&self) -> &'static str {
        match &self.state {
            State::Ready(ready) => ready.limits_mechanism(),
            State::Off | State::Unavailable(_) => "none",
        }
    }

    /// Commands run unsandboxed (`WAVEGATE_SANDBOX=none`).
    pub(crate) fn is_off(&self) -> bool {
        matches!(self.state, State::Off)
    }

    /// How far past its timeout a command may still be alive at most.
    pub(crate) fn deadline_grace(&self) -> Duration {
        BACKSTOP_GRACE + Duration::from_secs(5)
    }

    /// One line for the start-up log and `/readyz`.
    pub(crate) fn describe(&self) -> String {
        match &self.state {
            State::Off => {
                "off (WAVEGATE_SANDBOX=none): commands run unsandboxed, as the server's user".into()
            }
            State::Ready(ready) => {
                let profiles: Vec<String> = self
                    .settings
                    .profiles
                    .iter()
                    .map(|p| p.describe())
                    .collect();
                let why = match &ready.cgroups {
                    Ok(_) => String::new(),
                    Err(why) => format!(" (no cgroups: {why})"),
                };
                let trees = match &ready.trees {
                    Ok(_) => "one cached tree per commit, a private layer per command".to_owned(),
                    Err(why) => format!("a copy of the tree per job ({why})"),
                };
                format!(
                    "bubblewrap, limits held by {}{why}; {trees}; profiles {}",
                    ready.limits_mechanism(),
                    profiles.join("; ")
                )
            }
            State::Unavailable(problem) => format!("unavailable: {problem}"),
        }
    }

    /// Starts a command as this sandbox allows.
    pub(crate) async fn launch(&self, launch: &Launch<'_>) -> Result<Launched, LaunchError> {
        let ready = match &self.state {
            State::Unavailable(problem) => return Err(LaunchError::Unavailable(problem.clone())),
            State::Off => return self.launch_unsandboxed(launch),
            State::Ready(ready) => ready,
        };
        let passwd = data_fd(&bwrap::passwd())?;
        let group = data_fd(&bwrap::group())?;
        let profile = launch.profile;
        let limiter = ready.limiter(profile)?;
        let cgroup = match &ready.cgroups {
            Ok(cgroups) => cgroups.create(&profile.limits).map_err(|e| {
                LaunchError::Limits(format!(
                    "cannot make the cgroup that holds execution profile `{}`'s limits: {e}",
                    profile.name
                ))
            })?,
            Err(_) => None,
        };
        let join = cgroup
            .as_ref()
            .map(cgroup::CommandCgroup::procs_files)
            .unwrap_or_default();
        let (overlay, layer) = match &launch.confinement.lower {
            Some(lower) => {
                let layer = layer_dir(&launch.confinement.tree).map_err(spawn_error("bwrap"))?;
                let spec = overlay::OverlaySpec::new(
                    lower,
                    &launch.confinement.tree,
                    &layer,
                    profile.limits.disk,
                )
                .map_err(spawn_error("bwrap"))?;
                (Some(spec), Some(layer))
            }
            None => (None, None),
        };
        let egress = match profile.network {
            Network::Egress => ready.egress.as_ref(),
            Network::None | Network::Host => None,
        };
        let dns = egress.and_then(|e| e.dns.as_ref());
        let resolv = dns.map(|d| data_fd(&d.resolv_conf)).transpose()?;
        let sync = match egress {
            Some(_) => Some((
                pipe().map_err(spawn_error("bwrap"))?,
                pipe().map_err(spawn_error("bwrap"))?,
            )),
            None => None,
        };
        let fds = bwrap::DataFds {
            passwd: passwd.as_raw_fd(),
            group: group.as_raw_fd(),
            resolv: resolv.as_ref().map(OwnedFd::as_raw_fd),
            // bwrap writes its info to the first pipe and waits on the second.
            sync: sync
                .as_ref()
                .map(|((_, info_w), (block_r, _))| (info_w.as_raw_fd(), block_r.as_raw_fd())),
        };
        let backstop = ready
            .timeout
            .as_deref()
            .map(|t| (t, launch.timeout + BACKSTOP_GRACE));
        let args: Vec<OsString> = bwrap::arguments(
            &ready.layout,
            &fds,
            &bwrap::Invocation {
                argv: launch.argv,
                cwd: launch.cwd,
                confinement: launch.confinement,
                profile,
                backstop,
                limiter: limiter
                    .as_ref()
                    .map(|(path, limits)| (path.as_path(), *limits)),
                own_binary: ready.own_binary.as_deref(),
            },
        );
        let mut inherit: Vec<RawFd> = vec![fds.passwd, fds.group];
        inherit.extend(fds.resolv);
        if let Some((info_w, block_r)) = fds.sync {
            inherit.extend([info_w, block_r]);
        }
        let mut command = Command::new(&ready.bwrap);
        command
            .args(args)
            .current_dir("/")
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        piped(&mut command);
        let set_up = overlay.is_some() || !join.is_empty();
        let child = match spawn::spawn_in(command, &inherit, join, overlay) {
            Ok(child) => child,
            Err(e) => {
                if let Some(layer) = &layer {
                    let _ = std::fs::remove_dir(layer);
                }
                // bwrap itself missing is ENOENT from exec; the rest of what
                // fails before exec is the cgroup or the overlay.
                return Err(if set_up && e.kind() != std::io::ErrorKind::NotFound {
                    LaunchError::Setup(e)
                } else {
                    spawn_error("bwrap")(e)
                });
            }
        };
        drop((passwd, group, resolv));
        let network = match (sync, egress) {
            (Some(((info_r, info_w), (block_r, block_w))), Some(tools)) => {
                drop((info_w, block_r));
                Some(net::attach(tools, info_r, block_w).await?)
            }
            _ => None,
        };
        Ok(Launched {
            child,
            network,
            cgroup,
            layer,
        })
    }

    fn launch_unsandboxed(&self, launch: &Launch<'_>) -> Result<Launched, LaunchError> {
        let mut command = Command::new(&launch.argv[0]);
        command
            .args(&launch.argv[1..])
            .current_dir(launch.cwd)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        piped(&mut command);
        let child = spawn::spawn(command, &[]).map_err(|source| LaunchError::Spawn {
            program: launch.argv[0].clone(),
            source,
        })?;
        Ok(Launched {
            child,
            network: None,
            cgroup: None,
            layer: None,
        })
    }
}

impl Ready {
    /// How limits are held here, for the log, `/readyz` and `/metrics`:
    /// `cgroup-v2` or `cgroup-v1` (memory and processes; rlimits for disk
    /// and CPU time), else `rlimits`, else `none`.
    fn limits_mechanism(&self) -> &'static str {
        match (&self.cgroups, &self.prlimit) {
            (Ok(cgroups), _) => cgroups.mechanism(),
            (Err(_), Some(_)) => "rlimits",
            (Err(_), None) => "none",
        }
    }

    /// Those of `limits` no cgroup holds here: rlimits hold them.
    fn rlimited(&self, limits: &profile::Limits) -> profile::Limits {
        let mut rlimited = *limits;
        if let Ok(cgroups) = &self.cgroups {
            if cgroups.holds_memory() {
                rlimited.memory = None;
            }
            if cgroups.holds_processes() {
                rlimited.processes = None;
            }
        }
        rlimited
    }

    /// `prlimit` and the limits of `profile` it sets (those no cgroup
    /// holds), if any; an error when the profile sets limits this host
    /// has no way to hold.
    fn limiter(
        &self,
        profile: &Profile,
    ) -> Result<Option<(PathBuf, profile::Limits)>, LaunchError> {
        let limits = self.rlimited(&profile.limits);
        if limits == profile::Limits::default() {
            return Ok(None);
        }
        match &self.prlimit {
            Some(prlimit) => Ok(Some((prlimit.clone(), limits))),
            None => Err(LaunchError::Limits(format!(
                "execution profile `{}` limits its commands and this host cannot hold it: `prlimit` (util-linux) is not installed; install it, or take the limits out of the profile",
                profile.name
            ))),
        }
    }
}

/// A fresh, empty directory beside `tree` for one command's writable layer.
fn layer_dir(tree: &Path) -> std::io::Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let parent = tree.parent().unwrap_or(tree).join("layers");
    std::fs::create_dir_all(&parent)?;
    let dir = parent.join(
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_string(),
    );
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// stdin closed, stdout and stderr piped, its own process group (killed
/// whole at the timeout), and killed if the runner lets go of it.
fn piped(command: &mut Command) {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
}

fn spawn_error(program: &str) -> impl Fn(std::io::Error) -> LaunchError + '_ {
    move |source| LaunchError::Spawn {
        program: program.to_owned(),
        source,
    }
}

/// Why a sandboxed command never started, from how it ended: bwrap's own
/// complaint (exit 1, "bwrap: …"), or the deadline backstop's (exit 126 or
/// 127, "timeout: failed to run command '…': No such file or directory").
pub(crate) fn launch_failure(code: i32, output: &str) -> Option<String> {
    let line = |needle: &str| output.lines().find(|l| l.contains(needle));
    match code {
        1 => output
            .lines()
            .find(|l| l.starts_with("bwrap: "))
            .map(str::to_owned),
        126 | 127 => line("timeout: failed to run command '")
            .map(|l| l.rsplit_once("': ").map_or(l, |(_, why)| why).to_owned()),
        _ => None,
    }
}

/// Where a sandboxed command finds `wavegate` itself, first on its PATH.
pub(crate) const OWN_BINARY_DIR: &str = "/run/wavegate/bin";

/// The PATH commands get when the server has none.
pub(crate) fn default_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

/// A program on the server's PATH, or in the administrator's directories
/// PATH may lack (`ip` lives in `/usr/sbin`).
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
}

/// A pipe whose ends are both close-on-exec: (read, write).
pub(crate) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// A descriptor bwrap reads `content` from (`--ro-bind-data`).
fn data_fd(content: &str) -> Result<OwnedFd, LaunchError> {
    use std::io::Write as _;
    let (read, write) = pipe().map_err(spawn_error("bwrap"))?;
    // Small enough for the pipe's buffer: written whole before bwrap starts.
    std::fs::File::from(write)
        .write_all(content.as_bytes())
        .map_err(spawn_error("bwrap"))?;
    Ok(read)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod testing {
    //! A job directory and a working sandbox for the crate's own tests.
    use super::*;
    use std::sync::Arc;

    /// A job's directories: its tree, its files and its HOME.
    pub(crate) struct Job {
        /// Kept so the directory lives as long as the job.
        pub(crate) _dir: tempfile::TempDir,
        pub(crate) confinement: Confinement,
    }

    impl Default for Job {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Job {
        pub(crate) fn new() -> Self {
            let dir = tempfile::Builder::new()
                .prefix("wavegate-test-job-")
                .tempdir()
                .unwrap();
            let confinement = Confinement::create_in(dir.path()).unwrap();
            Self {
                _dir: dir,
                confinement,
            }
        }
    }

    /// Settings whose one profile, `default`, is `profile`.
    pub(crate) fn settings_with(profile: Profile) -> SandboxSettings {
        SandboxSettings {
            profiles: Profiles::only(profile),
            ..SandboxSettings::default()
        }
    }

    /// bubblewrap as production runs it; the tests need it installed.
    pub(crate) async fn bwrap() -> Arc<Sandbox> {
        bwrap_with(SandboxSettings::default()).await
    }

    pub(crate) async fn bwrap_with(settings: SandboxSettings) -> Arc<Sandbox> {
        let sandbox = Sandbox::probe(settings).await;
        if let Some(problem) = sandbox.problem() {
            panic!("the tests run commands in the sandbox, as production does: {problem} (scripts/test.sh installs bubblewrap)");
        }
        Arc::new(sandbox)
    }
}
