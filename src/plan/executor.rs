//! The seam between what a command is and where it runs. The engine
//! describes every command (a member's plan, apply or outputs, a group's
//! call, a hook, a discovery, a pricing) as a [`Job`]: serialisable, naming
//! the commit, the operator's profile by name, the argv, the limits and the
//! files the command starts with. An executor runs it and answers with a
//! [`Finished`]: how it ended, what it printed, and every file it left in
//! its files directory. The engine never reads or writes a command's
//! directories itself, and never hands a job a secret: the executor takes
//! the profile's secrets, the repository's pass-through variables and the
//! profile's setup from where it runs. So an executor on another machine
//! (the forge's CI) fits the same seam; [`LocalExecutor`], the sandbox on
//! the server's own host, is the first, and a [`RemoteExecutor`] (the
//! forge's CI, `crate::dispatch`) takes the jobs of the profiles that say
//! `executor = "actions"`: [`Executors`] sends each job where its profile
//! runs.

use super::live::Console;
use super::runner::{self, Cancel, CommandOutcome, CommandSpec, Setup, SpawnError};
use crate::model::{MemberId, StageName};
use crate::sandbox::process::ProcessId;
use crate::sandbox::profile::Limits;
use crate::sandbox::{files, CommandKind, Confinement, Profile, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most a job's files may hold in all, in either direction: what a
/// member's commands carry from one to the next (its plan file, a binary
/// plan beside it) is read into the server's memory.
pub(crate) const MAX_CARRIED_BYTES: u64 = 256 * 1024 * 1024;
/// The most files and directories a job may leave in its files directory.
const MAX_CARRIED_ENTRIES: usize = 10_000;

/// One command, as any executor runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Job {
    /// Unique among its workbench's jobs at a time.
    pub(crate) name: JobName,
    /// Prefix of every log line, e.g. `[plan] app@dev`.
    pub(crate) label: String,
    pub(crate) kind: CommandKind,
    /// The member it is of (a group's call and a stage's hook are of none).
    pub(crate) member: Option<MemberId>,
    /// The stage whose profile it runs with (its setup is the stage's).
    pub(crate) stage: Option<StageName>,
    /// The commit whose tree it runs in (the layout's `root`).
    pub(crate) commit: String,
    /// The operator's profile, by name: its paths, network, secrets and
    /// setup are the executor's to apply.
    pub(crate) profile: String,
    /// The profile's limits when the job was made.
    pub(crate) limits: Limits,
    /// Paths in it are the layout's; a relative program path with a slash
    /// is the root's.
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: PathBuf,
    /// Variables the executor passes on from its own environment (the base
    /// branch's `env` list), when set there.
    pub(crate) pass_env: Vec<String>,
    /// The stage's `variables`: literals, never secrets.
    pub(crate) variables: Vec<(String, String)>,
    /// wavegate's own (`WAVEGATE_MEMBER`, …).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    /// The repository asked for longer than the profile's `max_timeout`:
    /// `timeout` is that maximum.
    pub(crate) timeout_capped: bool,
    /// What of its output is kept.
    pub(crate) output_cap: usize,
    /// What its files directory holds when it starts.
    pub(crate) files: Files,
}

/// How a job ended, and what it left.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Finished {
    pub(crate) outcome: CommandOutcome,
    /// Everything in its files directory when it ended, or why that could
    /// not be carried back.
    pub(crate) files: Result<Files, String>,
    /// The forge's page of the run it ran in, when it ran on the forge's CI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ran_on: Option<String>,
}

/// A job's name: `kind/what` (`plan/app@dev`, `hook/prod.before.x`), safe
/// as a path under an executor's directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(crate) struct JobName(String);

impl JobName {
    /// `kind/what`, with any character of `what` that is no name's
    /// replaced by `_`.
    pub(crate) fn new(kind: &str, what: &str) -> Self {
        let clean = |text: &str| -> String {
            let text: String = text
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "@._:-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            match text.as_str() {
                "" | "." | ".." => format!("_{text}"),
                _ => text,
            }
        };
        Self(format!("{}/{}", clean(kind), clean(what)))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobName {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        let (kind, what) = text
            .split_once('/')
            .ok_or_else(|| format!("job name `{text}` is not `kind/what`"))?;
        let name = Self::new(kind, what);
        if name.0 == text {
            Ok(name)
        } else {
            Err(format!("job name `{text}` is not safe as a path"))
        }
    }
}

impl From<JobName> for String {
    fn from(name: JobName) -> String {
        name.0
    }
}

impl std::fmt::Display for JobName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an executor puts a job's things, for the paths in its argv and
/// files: the commit's tree, its files directory and its HOME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) root: PathBuf,
    pub(crate) files: PathBuf,
    pub(crate) home: PathBuf,
}

/// The files of a job's files directory, by path relative to it (`/`
/// between directories).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Files(BTreeMap<String, Entry>);

/// One thing in a files directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Entry {
    File(#[serde(with = "base64_bytes")] Vec<u8>),
    /// A regular file with an executable bit set: written back executable.
    Executable(#[serde(with = "base64_bytes")] Vec<u8>),
    /// Not a regular file (a link, a pipe): never read, never carried on,
    /// but named when a file the bot reads is one.
    NotRegular(String),
}

impl Files {
    pub(crate) fn insert(&mut self, name: impl Into<String>, bytes: Vec<u8>) {
        self.0.insert(name.into(), Entry::File(bytes));
    }

    pub(crate) fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.iter().any(|(file, _)| file == name)
    }

    /// The regular files, by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.0.iter().filter_map(|(name, entry)| match entry {
            Entry::File(bytes) | Entry::Executable(bytes) => {
                Some((name.as_str(), bytes.as_slice()))
            }
            Entry::NotRegular(_) => None,
        })
    }

    /// The files under `dir/`, named relative to it.
    pub(crate) fn under(&self, dir: &str) -> Files {
        let prefix = format!("{dir}/");
        Files(
            self.0
                .iter()
                .filter_map(|(name, entry)| {
                    Some((name.strip_prefix(&prefix)?.to_owned(), entry.clone()))
                })
                .collect(),
        )
    }

    /// `name`, as a command left it: a regular file of at most `cap` bytes.
    pub(crate) fn read(&self, name: &str, cap: u64) -> Result<&[u8], files::FileError> {
        match self.0.get(name) {
            None => Err(files::FileError::Missing),
            Some(Entry::NotRegular(kind)) => {
                Err(files::FileError::NotRegular(files::kind_named(kind)))
            }
            Some(Entry::File(bytes) | Entry::Executable(bytes)) if bytes.len() as u64 > cap => {
                Err(files::FileError::TooLarge { cap })
            }
            Some(Entry::File(bytes) | Entry::Executable(bytes)) => Ok(bytes),
        }
    }

    /// Reads everything in `dir` (never following a link, reading no more
    /// than [`MAX_CARRIED_BYTES`]): what a command left for the next.
    pub(crate) fn collect(dir: &Path) -> Result<Files, String> {
        let mut found = Files::default();
        let mut pending = vec![String::new()];
        let mut entries = 0usize;
        let mut total = 0u64;
        while let Some(sub) = pending.pop() {
            let path = if sub.is_empty() {
                dir.to_owned()
            } else {
                dir.join(&sub)
            };
            let listing = match std::fs::read_dir(&path) {
                Ok(listing) => listing,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && sub.is_empty() => {
                    return Ok(found)
                }
                Err(e) => return Err(format!("cannot list {}: {e}", path.display())),
            };
            for entry in listing {
                let entry = entry.map_err(|e| format!("cannot list {}: {e}", path.display()))?;
                entries += 1;
                if entries > MAX_CARRIED_ENTRIES {
                    return Err(format!(
                        "it left more than {MAX_CARRIED_ENTRIES} files in its files directory, more than wavegate carries; keep what the next command does not need in HOME or /tmp"
                    ));
                }
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let relative = if sub.is_empty() {
                    name.clone()
                } else {
                    format!("{sub}/{name}")
                };
                let kind = entry
                    .file_type()
                    .map_err(|e| format!("cannot read {relative}: {e}"))?;
                if kind.is_dir() {
                    pending.push(relative);
                    continue;
                }
                // Not followed: a link's own mode says nothing.
                let executable = kind.is_file()
                    && entry.metadata().is_ok_and(|m| {
                        std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
                    });
                let bytes = match files::read_file(&path, &name, MAX_CARRIED_BYTES - total) {
                    Ok(bytes) => bytes,
                    Err(files::FileError::NotRegular(kind)) => {
                        found.0.insert(relative, Entry::NotRegular(kind.to_owned()));
                        continue;
                    }
                    Err(files::FileError::Missing) => continue,
                    Err(files::FileError::TooLarge { .. }) => {
                        return Err(format!(
                            "it left more than {} in its files directory, more than wavegate carries from one command to the next; keep large files (downloads, caches) in HOME or /tmp",
                            crate::sandbox::profile::bytes_text(MAX_CARRIED_BYTES)
                        ))
                    }
                    Err(e) => return Err(format!("cannot read {relative}: {e}")),
                };
                total += bytes.len() as u64;
                let entry = if executable {
                    Entry::Executable(bytes)
                } else {
                    Entry::File(bytes)
                };
                found.0.insert(relative, entry);
            }
        }
        Ok(found)
    }

    /// Writes the regular files into `dir` (created, and its directories).
    pub(crate) fn write_into(&self, dir: &Path) -> Result<(), String> {
        for (name, entry) in &self.0 {
            let (bytes, executable) = match entry {
                Entry::File(bytes) => (bytes, false),
                Entry::Executable(bytes) => (bytes, true),
                Entry::NotRegular(_) => continue,
            };
            let (sub, file) = match name.rsplit_once('/') {
                Some((sub, file)) => (Some(sub), file),
                None => (None, name.as_str()),
            };
            let parent = match sub {
                Some(sub) if sub.split('/').all(|c| !matches!(c, "" | "." | "..")) => dir.join(sub),
                Some(_) => return Err(format!("`{name}` is not a path inside a files directory")),
                None => dir.to_owned(),
            };
            std::fs::create_dir_all(&parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            files::write_file(&parent, file, bytes)
                .map_err(|e| format!("cannot write the job's {name}: {e}"))?;
            if executable {
                // Just created by us, in a directory we just made: no link.
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(parent.join(file), std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("cannot make the job's {name} executable: {e}"))?;
            }
        }
        Ok(())
    }
}

/// Runs jobs of profiles with `executor = "actions"` on the forge's CI,
/// through the bot's store and forge client, which the plan engine does
/// not know. The job's paths are [`remote_layout`]'s; its output goes to
/// `console` as a local command's does.
pub(crate) trait RemoteExecutor: Send + Sync {
    fn run<'a>(
        &'a self,
        job: Job,
        profile: Arc<Profile>,
        cancel: Cancel,
        console: Option<Console>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Finished, SpawnError>> + Send + 'a>,
    >;
}

/// Where a job that runs elsewhere finds its things: a runner puts its
/// checkout, the job's files and its HOME there (or writes its own paths
/// for these in the job).
pub(crate) fn remote_layout() -> Layout {
    Layout {
        root: PathBuf::from("/wavegate-job/tree"),
        files: PathBuf::from("/wavegate-job/files"),
        home: PathBuf::from("/wavegate-job/home"),
    }
}

impl Job {
    /// The job with `from`'s paths written as `to`'s, wherever its argv,
    /// working directory, variables and text files (a group's members
    /// file) name them.
    pub(crate) fn relocated(&self, from: &Layout, to: &Layout) -> Job {
        let pairs = [
            (
                from.files.display().to_string(),
                to.files.display().to_string(),
            ),
            (
                from.home.display().to_string(),
                to.home.display().to_string(),
            ),
            (
                from.root.display().to_string(),
                to.root.display().to_string(),
            ),
        ];
        let text = |value: &str| -> String {
            pairs.iter().fold(value.to_owned(), |value, (from, to)| {
                value.replace(from, to)
            })
        };
        let files = Files(
            self.files
                .0
                .iter()
                .map(|(name, entry)| {
                    let moved = |bytes: &Vec<u8>| match std::str::from_utf8(bytes) {
                        Ok(content)
                            if pairs
                                .iter()
                                .any(|(from, _)| content.contains(from.as_str())) =>
                        {
                            text(content).into_bytes()
                        }
                        _ => bytes.clone(),
                    };
                    let entry = match entry {
                        Entry::File(bytes) => Entry::File(moved(bytes)),
                        Entry::Executable(bytes) => Entry::Executable(moved(bytes)),
                        other => other.clone(),
                    };
                    (name.clone(), entry)
                })
                .collect(),
        );
        Job {
            files,
            argv: self.argv.iter().map(|a| text(a)).collect(),
            cwd: PathBuf::from(text(&self.cwd.display().to_string())),
            env: self
                .env
                .iter()
                .map(|(name, value)| (name.clone(), text(value)))
                .collect(),
            ..self.clone()
        }
    }
}

/// Sends each job where its profile runs: the sandbox here, or the
/// forge's CI.
pub(crate) struct Executors {
    pub(crate) local: LocalExecutor,
    pub(crate) remote: Option<Arc<dyn RemoteExecutor>>,
}

impl Executors {
    /// Where `name`'s files and HOME will be, and the tree, as the engine
    /// writes them into a job (a remote job's are rewritten on its way).
    pub(crate) fn layout(&self, name: &JobName) -> Layout {
        self.local.layout(name)
    }

    pub(crate) async fn run(&self, job: &Job, control: Control) -> Result<Finished, SpawnError> {
        let profile = match self.local.sandbox.profiles().get(&job.profile) {
            Some(profile) if profile.executor != crate::sandbox::profile::Executor::Local => {
                Arc::clone(profile)
            }
            _ => return self.local.run(job, control).await,
        };
        let Some(remote) = &self.remote else {
            return Err(SpawnError::Profile(format!(
                "execution profile `{}` runs its commands on the forge's CI, which only the bot dispatches to; here (the command line) pick a local profile with --profiles, or let the bot plan the pull request",
                profile.name
            )));
        };
        let job = job.relocated(&self.local.layout(&job.name), &remote_layout());
        let profile = if profile.limits == job.limits {
            profile
        } else {
            Arc::new(Profile {
                limits: job.limits,
                ..Profile::clone(&profile)
            })
        };
        remote
            .run(
                job,
                profile,
                self.local.cancel.clone(),
                self.local.console.clone(),
            )
            .await
    }
}

/// What a caller tells an executor besides the job.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// Hears which process the command is once it started (an apply's
    /// attempt record keeps it).
    pub(crate) started: Option<tokio::sync::mpsc::UnboundedSender<ProcessId>>,
    /// Hears each line the command prints (not its profile's setup's).
    pub(crate) tap: Option<runner::LineTap>,
}

/// Runs jobs in the sandbox on the server's own host, in a tree of one
/// commit: each job in a fresh files directory and HOME of its own under
/// the executor's directory, each profile's setup once per stage.
pub(crate) struct LocalExecutor {
    pub(crate) sandbox: Arc<Sandbox>,
    commit: String,
    /// Where commands see the commit's files.
    tree: PathBuf,
    /// The cached tree seen at `tree` through a private layer per command;
    /// `None`: `tree` is a copy of the executor's own.
    lower: Option<PathBuf>,
    /// The executor's own directory: `jobs/`, `home/` and `setup/` under it.
    dir: PathBuf,
    heartbeat: Option<Duration>,
    pub(crate) cancel: Cancel,
    /// Where its commands' output is shown and kept.
    console: Option<Console>,
    /// Each (stage, profile)'s setup, made when first needed.
    setups: Mutex<HashMap<(String, String), Arc<Setup>>>,
}

/// What [`LocalExecutor::new`] is given.
pub(crate) struct LocalTree {
    pub(crate) commit: String,
    pub(crate) tree: PathBuf,
    pub(crate) lower: Option<PathBuf>,
    /// A directory of the executor's own.
    pub(crate) dir: PathBuf,
}

impl LocalExecutor {
    pub(crate) fn new(
        sandbox: Arc<Sandbox>,
        at: LocalTree,
        heartbeat: Option<Duration>,
        cancel: Cancel,
        console: Option<Console>,
    ) -> Self {
        Self {
            sandbox,
            commit: at.commit,
            tree: at.tree,
            lower: at.lower,
            dir: at.dir,
            heartbeat,
            cancel,
            console,
            setups: Mutex::default(),
        }
    }

    /// Where `name`'s files and HOME will be, and the tree.
    pub(crate) fn layout(&self, name: &JobName) -> Layout {
        Layout {
            root: self.tree.clone(),
            files: self.dir.join("jobs").join(name.as_str()),
            home: self.dir.join("home").join(name.as_str()),
        }
    }

    /// Runs `job` in the sandbox with its profile, from fresh directories
    /// holding its files, and reads back everything it left there.
    pub(crate) async fn run(&self, job: &Job, control: Control) -> Result<Finished, SpawnError> {
        if job.commit != self.commit {
            return Err(SpawnError::Sandbox(format!(
                "this executor holds the tree of commit {}, not {}",
                self.commit, job.commit
            )));
        }
        let profile = self.profile_of(job)?;
        let layout = self.layout(&job.name);
        for dir in [&layout.files, &layout.home] {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).map_err(|e| {
                SpawnError::Sandbox(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        job.files
            .write_into(&layout.files)
            .map_err(SpawnError::Sandbox)?;
        let setup = match &job.stage {
            Some(stage) if !profile.setup.is_empty() => Some(
                self.setup_of(stage.as_str(), &profile, job)
                    .map_err(SpawnError::Sandbox)?,
            ),
            _ => None,
        };
        let setup_dir = setup.as_ref().map(|(_, dir)| dir.clone());
        let mut argv = job.argv.clone();
        if argv.is_empty() {
            return Err(SpawnError::Sandbox("the job has no command".into()));
        }
        if argv[0].contains('/') && !Path::new(&argv[0]).is_absolute() {
            argv[0] = self.tree.join(&argv[0]).display().to_string();
        }
        let mut env = self.env_of(job, &profile, &layout.home, setup_dir.as_deref());
        env.extend(job.env.iter().cloned());
        let spec = CommandSpec {
            label: job.label.clone(),
            kind: job.kind,
            argv,
            cwd: job.cwd.clone(),
            env,
            timeout: job.timeout,
            timeout_capped: job.timeout_capped,
            profile,
            heartbeat: self.heartbeat,
            output_cap: job.output_cap,
            sandbox: Arc::clone(&self.sandbox),
            confinement: Confinement {
                kind: job.kind,
                tree: self.tree.clone(),
                files: layout.files.clone(),
                home: layout.home.clone(),
                setup: setup_dir,
                lower: self.lower.clone(),
            },
            cancel: self.cancel.clone(),
            setup: setup.map(|(setup, _)| setup),
            started: control.started,
            console: self.console.clone(),
            tap: control.tap,
        };
        let outcome = runner::run_command(&spec).await?;
        let files = Files::collect(&layout.files);
        let _ = std::fs::remove_dir_all(&layout.files);
        let _ = std::fs::remove_dir_all(&layout.home);
        Ok(Finished {
            outcome,
            files,
            ran_on: None,
        })
    }

    /// The job's profile with the job's limits; one whose paths are
    /// missing here fails the job before anything runs.
    fn profile_of(&self, job: &Job) -> Result<Arc<Profile>, SpawnError> {
        let profiles = self.sandbox.profiles();
        let profile = profiles.get(&job.profile).ok_or_else(|| {
            SpawnError::Profile(format!(
                "this server has no execution profile `{}` (it has {})",
                job.profile,
                profiles.names()
            ))
        })?;
        profile.check_paths().map_err(SpawnError::Profile)?;
        Ok(if profile.limits == job.limits {
            Arc::clone(profile)
        } else {
            Arc::new(Profile {
                limits: job.limits,
                ..Profile::clone(profile)
            })
        })
    }

    /// The environment of a command of `job` with `profile`: `PATH` (what
    /// the setup installed first), `HOME`, the job's pass-through list (a
    /// variable a profile takes a secret from reaches only that profile's
    /// commands, as its own `env` names it), the stage's `variables`, the
    /// profile's `env` (`{setup_dir}` filled in) and `WAVEGATE_SETUP_DIR`.
    fn env_of(
        &self,
        job: &Job,
        profile: &Profile,
        home: &Path,
        setup_dir: Option<&Path>,
    ) -> Vec<(String, String)> {
        let path = self.sandbox.command_path();
        let path = match setup_dir {
            Some(dir) => format!("{}:{path}", dir.join("bin").display()),
            None => path,
        };
        let mut env = vec![
            ("PATH".to_owned(), path),
            ("HOME".to_owned(), home.display().to_string()),
        ];
        let profiles = self.sandbox.profiles();
        for name in &job.pass_env {
            if profiles.is_secret_source(name) {
                continue;
            }
            if let Ok(value) = std::env::var(name) {
                env.push((name.clone(), value));
            }
        }
        env.extend(job.variables.iter().cloned());
        let setup_text = setup_dir
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        env.extend(
            profile
                .env
                .iter()
                .map(|(name, value)| (name.clone(), value.replace("{setup_dir}", &setup_text))),
        );
        if let Some(dir) = setup_dir {
            env.push(("WAVEGATE_SETUP_DIR".to_owned(), dir.display().to_string()));
        }
        env
    }

    /// `profile`'s setup for `stage`, made the first time a job asks for
    /// it, and the directory it leaves its tools and logins in
    /// (`{setup_dir}`; its `bin/` first on the stage's PATH).
    fn setup_of(
        &self,
        stage: &str,
        profile: &Arc<Profile>,
        job: &Job,
    ) -> Result<(Arc<Setup>, PathBuf), String> {
        let mut setups = self
            .setups
            .lock()
            .expect("the setups lock is never poisoned");
        let key = (stage.to_owned(), profile.name.clone());
        let dir = JobName::new("setup", &format!("{stage}.{}", profile.name));
        let dir = self.dir.join(dir.as_str());
        if let Some(setup) = setups.get(&key) {
            return Ok((Arc::clone(setup), dir));
        }
        let home = dir.join("home");
        for made in [&dir, &home, &dir.join("bin")] {
            std::fs::create_dir_all(made)
                .map_err(|e| format!("cannot create {}: {e}", made.display()))?;
        }
        let dir_text = dir.display().to_string();
        let mut env = self.env_of(job, profile, &home, Some(&dir));
        env.push(("WAVEGATE_STAGE".to_owned(), stage.to_owned()));
        let commands = profile
            .setup
            .iter()
            .map(|argv| CommandSpec {
                label: format!("[setup] {stage} {}", profile.name),
                kind: CommandKind::Plan,
                argv: argv
                    .iter()
                    .map(|a| a.replace("{setup_dir}", &dir_text))
                    .collect(),
                cwd: self.tree.clone(),
                env: env.clone(),
                timeout: profile.max_timeout,
                timeout_capped: false,
                profile: Arc::clone(profile),
                heartbeat: self.heartbeat,
                output_cap: job.output_cap,
                sandbox: Arc::clone(&self.sandbox),
                // The setup writes its directory; later commands only read it.
                confinement: Confinement {
                    kind: CommandKind::Plan,
                    tree: self.tree.clone(),
                    files: dir.clone(),
                    home: home.clone(),
                    setup: None,
                    lower: self.lower.clone(),
                },
                cancel: self.cancel.clone(),
                setup: None,
                started: None,
                console: self.console.clone(),
                tap: None,
            })
            .collect();
        let what = format!(
            "the setup of execution profile `{}` for stage `{stage}` failed, so none of the stage's commands with it ran",
            profile.name
        );
        let setup = Arc::new(Setup::new(what, commands));
        setups.insert(key, Arc::clone(&setup));
        Ok((setup, dir))
    }
}

mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::profile::Profiles;
    use crate::sandbox::testing;

    /// A job as the engine makes one: `script` run by `sh` in the tree,
    /// starting with `files`, paths of `layout`.
    fn job(layout: &Layout, script: &str, files: Files) -> Job {
        Job {
            name: JobName::new("plan", "app@dev"),
            label: "[plan] app@dev".into(),
            kind: CommandKind::Plan,
            member: Some("app@dev".parse().unwrap()),
            stage: Some("dev".into()),
            commit: "c0ffee".into(),
            profile: "default".into(),
            limits: Limits::default(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: layout.root.clone(),
            pass_env: vec!["WAVEGATE_TEST_PASSED_ON".into()],
            variables: vec![("REGION".into(), "eu-west-1".into())],
            env: vec![("WAVEGATE_FILES".into(), layout.files.display().to_string())],
            timeout: Duration::from_secs(30),
            timeout_capped: false,
            output_cap: 64 * 1024,
            files,
        }
    }

    /// An executor of commit `c0ffee`, its tree `dir/tree` (empty).
    fn executor_in(sandbox: Arc<Sandbox>, dir: &Path) -> LocalExecutor {
        let tree = dir.join("tree");
        std::fs::create_dir(&tree).unwrap();
        let at = LocalTree {
            commit: "c0ffee".into(),
            tree,
            lower: None,
            dir: dir.join("executor"),
        };
        LocalExecutor::new(sandbox, at, None, Cancel::default(), None)
    }

    #[test]
    fn a_job_sent_elsewhere_names_the_paths_it_finds_there_in_its_text_files_too() {
        let here = Layout {
            root: "/tmp/wavegate-job-1/tree".into(),
            files: "/tmp/wavegate-job-1/executor/jobs/plan/app@dev".into(),
            home: "/tmp/wavegate-job-1/executor/home/plan/app@dev".into(),
        };
        let mut files = Files::default();
        let members = format!(
            r#"{{"members": [{{"planFile": "{}/app@dev/plan.json", "path": "{}/app"}}]}}"#,
            here.files.display(),
            here.root.display()
        );
        files.insert("members.json", members.into_bytes());
        let binary = vec![0xff, 0xfe, b'/', b't', b'm', b'p'];
        files.insert("plan.bin", binary.clone());
        let job = job(&here, "cat {root}", files).relocated(&here, &remote_layout());
        assert_eq!(job.cwd, PathBuf::from("/wavegate-job/tree"));
        assert_eq!(
            job.env,
            [(
                "WAVEGATE_FILES".to_owned(),
                "/wavegate-job/files".to_owned()
            )]
        );
        assert_eq!(
            String::from_utf8(job.files.read("members.json", 1 << 20).unwrap().to_vec()).unwrap(),
            r#"{"members": [{"planFile": "/wavegate-job/files/app@dev/plan.json", "path": "/wavegate-job/tree/app"}]}"#
        );
        assert_eq!(
            job.files.read("plan.bin", 1 << 20).unwrap(),
            binary.as_slice()
        );
        let back = job.relocated(&remote_layout(), &here);
        assert_eq!(back.cwd, here.root);
    }

    #[tokio::test]
    async fn a_job_runs_from_its_description_alone_and_hands_back_every_file_it_left() {
        let sandbox = testing::bwrap().await;
        let dir = tempfile::tempdir().unwrap();
        let executor = executor_in(sandbox, dir.path());
        std::fs::write(dir.path().join("tree/main.tf"), "# the commit's file").unwrap();
        let layout = executor.layout(&JobName::new("plan", "app@dev"));
        let mut files = Files::default();
        files.insert("inputs.json", br#"{"known": {}}"#.to_vec());
        files.insert("kept/tfplan", b"binary plan".to_vec());
        let script = r#"cat main.tf
            cd "$WAVEGATE_FILES" && cat inputs.json kept/tfplan && echo " $REGION"
            echo '{"plan": 1}' > plan.json && mkdir -p more && echo deep > more/show.json
            ln -s /etc/passwd linked.json
            printf '#!/bin/sh\necho kept\n' > run.sh && chmod +x run.sh"#;
        let made = job(&layout, script, files);
        // What the engine hands an executor is all the executor needs: it
        // goes through JSON (as it will to the forge's CI) and runs as is.
        let sent = serde_json::to_string(&made).unwrap();
        let received: Job = serde_json::from_str(&sent).unwrap();
        assert_eq!(received, made);
        let finished = executor.run(&received, Control::default()).await.unwrap();
        let finished: Finished =
            serde_json::from_str(&serde_json::to_string(&finished).unwrap()).unwrap();
        assert!(finished.outcome.succeeded(), "{}", finished.outcome.output);
        assert!(
            finished
                .outcome
                .output
                .contains(r#"{"known": {}}binary plan eu-west-1"#),
            "{}",
            finished.outcome.output
        );
        assert!(finished.outcome.output.contains("# the commit's file"));
        let left = finished.files.unwrap();
        let names: Vec<&str> = left.iter().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            [
                "inputs.json",
                "kept/tfplan",
                "more/show.json",
                "plan.json",
                "run.sh"
            ]
        );
        // What the next job starts with is as executable as it was left.
        let again = tempfile::tempdir().unwrap();
        left.write_into(again.path()).unwrap();
        let mode = |name: &str| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::metadata(again.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!((mode("run.sh"), mode("plan.json")), (0o755, 0o644));
        assert_eq!(left.read("plan.json", 100).unwrap(), b"{\"plan\": 1}\n");
        assert_eq!(
            left.read("linked.json", 100).unwrap_err().to_string(),
            "it is a symbolic link, not a regular file; write the file itself (wavegate never follows a link there)"
        );
        assert!(matches!(
            left.read("plan.json", 3),
            Err(files::FileError::TooLarge { cap: 3 })
        ));
        // Its directories go with it; the next job of the member starts
        // from what was handed back, nothing else.
        assert!(!layout.files.exists() && !layout.home.exists());
        assert_eq!(left.under("more").iter().count(), 1);
    }

    #[tokio::test]
    async fn a_job_names_its_profile_and_never_carries_the_profiles_secrets() {
        let profiles = Profiles::parse(
            Path::new("/etc/wavegate/profiles.toml"),
            "[profile.prod]\nenv = { TF_TOKEN = { from_env = \"PROD_TOKEN\" } }",
            &|name| (name == "PROD_TOKEN").then(|| "t0k3n-of-prod".to_owned()),
        )
        .unwrap();
        let sandbox = testing::bwrap_with(crate::sandbox::SandboxSettings {
            profiles,
            ..crate::sandbox::SandboxSettings::default()
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let executor = executor_in(sandbox, dir.path());
        let layout = executor.layout(&JobName::new("plan", "app@dev"));
        let made = Job {
            profile: "prod".into(),
            ..job(
                &layout,
                "echo \"token ${#TF_TOKEN} long\"",
                Files::default(),
            )
        };
        let sent = serde_json::to_string(&made).unwrap();
        assert!(!sent.contains("t0k3n-of-prod"), "{sent}");
        assert!(sent.contains(r#""profile":"prod""#), "{sent}");
        // The executor takes the secret from where it runs.
        let finished = executor.run(&made, Control::default()).await.unwrap();
        assert!(
            finished.outcome.output.contains("token 13 long"),
            "{}",
            finished.outcome.output
        );
        // A job for another commit, or with a profile this executor does
        // not have, never runs.
        let elsewhere = Job {
            commit: "beef".into(),
            ..made.clone()
        };
        let e = executor
            .run(&elsewhere, Control::default())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "this executor holds the tree of commit c0ffee, not beef"
        );
        let unknown = Job {
            profile: "staging".into(),
            ..made
        };
        let e = executor
            .run(&unknown, Control::default())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "this server has no execution profile `staging` (it has `prod`)"
        );
    }

    #[test]
    fn a_job_name_is_a_safe_path_and_a_forged_one_is_refused() {
        assert_eq!(
            JobName::new("hook", "prod.before.a b/../c").as_str(),
            "hook/prod.before.a_b_.._c"
        );
        assert_eq!(JobName::new("plan", "..").as_str(), "plan/_..");
        let read = |text: &str| serde_json::from_value::<JobName>(serde_json::json!(text));
        assert!(read("plan/app@dev").is_ok());
        assert!(read("plan/../../etc").is_err());
        assert!(read("plan").is_err());
    }

    #[test]
    fn files_carried_back_are_bounded_in_number() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_CARRIED_ENTRIES {
            std::fs::write(dir.path().join(i.to_string()), "").unwrap();
        }
        let e = Files::collect(dir.path()).unwrap_err();
        assert!(e.starts_with("it left more than 10000 files"), "{e}");
        let e = Files::default();
        let mut bad = e.clone();
        bad.insert("../escape", b"x".to_vec());
        assert!(bad.write_into(dir.path()).is_err());
        let mut bad = e;
        bad.insert("sub/../../escape", b"x".to_vec());
        assert_eq!(
            bad.write_into(dir.path()).unwrap_err(),
            "`sub/../../escape` is not a path inside a files directory"
        );
    }
}
