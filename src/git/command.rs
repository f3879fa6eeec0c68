//! The one way wavegate starts git: hooks, fsmonitor and system config
//! off, no prompt, none of the operator's `GIT_*` tracing or config
//! injection, none of the server's own `WAVEGATE_*` settings (checkout
//! filters and hooks would run as git's children), and a remote's
//! credential handed to this git alone, in a sealed in-memory file.

use crate::config::settings::Secret;
use anyhow::{bail, Context, Result};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;

/// Settings every git wavegate runs gets: nothing in a repository (a hook,
/// an fsmonitor program) ever runs inside the server's own git.
pub(crate) const NO_HOOKS: [&str; 4] = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
];

/// The names of wavegate's own `WAVEGATE_*` variables in this process's
/// environment: what a git child must not inherit.
pub(crate) fn server_settings_in_env() -> impl Iterator<Item = std::ffi::OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_string_lossy().starts_with("WAVEGATE_"))
}

/// A git command on `repo`; `credential` (a remote's `Authorization`
/// header) is inherited by this git alone, started while `credential` lives.
pub(crate) fn git(repo: &Path, credential: Option<&Credential>) -> Command {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(repo)
        .args(NO_HOOKS)
        // A transfer slower than 1 KB/s for a minute is given up on.
        .args([
            "-c",
            "http.lowSpeedLimit=1000",
            "-c",
            "http.lowSpeedTime=60",
        ])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ASKPASS", "true");
    for name in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_TRACE",
        "GIT_TRACE_CURL",
        "GIT_TRACE_PACKET",
        "GIT_CURL_VERBOSE",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
    ] {
        command.env_remove(name);
    }
    for name in server_settings_in_env() {
        command.env_remove(name);
    }
    if let Some(credential) = credential {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&credential.file);
        command
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "include.path")
            .env("GIT_CONFIG_VALUE_0", format!("/proc/self/fd/{fd}"));
        // SAFETY: fcntl is async-signal-safe; it lets this child (and the
        // remote helper it starts) keep the descriptor across exec. It is
        // open in the child: the command is started while `credential` lives.
        unsafe {
            command.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                Ok(())
            });
        }
    }
    command
}

/// [`git`] for async callers: killed if the caller stops waiting.
pub(crate) fn git_async(repo: &Path, credential: Option<&Credential>) -> tokio::process::Command {
    let mut command = tokio::process::Command::from(git(repo, credential));
    command.kill_on_drop(true);
    command
}

fn url_parts(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    Some((scheme, host, path))
}

/// `scheme://host/` of a URL: what git scopes per-host settings by.
fn origin(url: &str) -> Option<String> {
    url_parts(url).map(|(scheme, host, _)| format!("{scheme}://{host}/"))
}

/// A URL as it may appear in a message: without any user or password part.
pub(crate) fn redact_url(url: &str) -> String {
    url_parts(url).map_or_else(
        || url.to_owned(),
        |(scheme, host, path)| format!("{scheme}://{host}{path}"),
    )
}

/// The `Authorization` header for one remote, as git configuration in a
/// sealed in-memory file. Only the git given it inherits the descriptor
/// (it is close-on-exec everywhere else), and git reads it through
/// `/proc/self/fd`, so the token is in no argument and no environment.
pub(crate) struct Credential {
    file: std::os::fd::OwnedFd,
}

impl Credential {
    pub(crate) fn new(url: &str, header: &Secret) -> Result<Option<Self>> {
        use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
        use std::io::Write as _;
        let Some(origin) = origin(url) else {
            return Ok(None);
        };
        let value = header.expose();
        if value.contains(['\n', '\r', '"', '\\']) || origin.contains(['"', '\\', '\n']) {
            bail!(
                "the credential for {} cannot be handed to git",
                redact_url(url)
            );
        }
        let config = format!("[http \"{origin}\"]\n\textraHeader = Authorization: {value}\n");
        let file = memfd_create(
            c"wavegate-git-credential",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(std::io::Error::from)
        .context("cannot hold the git credential in memory")?;
        std::fs::File::from(file.try_clone()?)
            .write_all(config.as_bytes())
            .context("cannot hold the git credential in memory")?;
        let seals = SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL;
        let _ = fcntl_add_seals(&file, seals);
        Ok(Some(Self { file }))
    }
}
