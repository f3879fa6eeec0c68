//! Git content for jobs: one bare mirror per repository under the data dir,
//! fetched by commit sha with the `git` CLI. The plan engine checks out its
//! own throw-away worktrees from the mirror and removes them after the job.
//!
//! The forge credential travels as an `Authorization` header in git's own
//! configuration environment (`GIT_CONFIG_COUNT`), never in a URL, an argument
//! or a log line; plan commands run with a cleared environment and never see it.

use crate::config::settings::Secret;
use crate::forge::{CommitSha, RepoId};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::process::Command;

/// Where the mirrors live; fetches into one mirror are serialised.
#[derive(Clone)]
pub struct Workspace {
    root: PathBuf,
    locks: Arc<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
}

/// What to fetch and how to authenticate.
pub struct FetchRequest<'a> {
    pub repo: &'a RepoId,
    /// Where each commit can be fetched from (a fork's head comes from the fork).
    pub sources: Vec<(&'a str, &'a CommitSha)>,
    /// The value of an `Authorization` header for http(s) remotes.
    pub auth: Option<&'a Secret>,
}

impl Workspace {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join("mirrors"),
            locks: Arc::default(),
        }
    }

    /// `mirrors/<forge>/<owner>/<name>.git`, with anything odd in the names replaced.
    pub fn mirror_path(&self, repo: &RepoId) -> PathBuf {
        let clean = |part: &str| -> String {
            let cleaned: String = part
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            cleaned.trim_start_matches('.').to_owned()
        };
        self.root
            .join(repo.forge.as_str())
            .join(clean(repo.owner()))
            .join(format!("{}.git", clean(repo.name())))
    }

    /// Makes sure every requested commit is in the repository's mirror and
    /// returns the mirror's path.
    pub async fn fetch(&self, request: &FetchRequest<'_>) -> Result<PathBuf> {
        let mirror = self.mirror_path(request.repo);
        let lock = self
            .locks
            .lock()
            .expect("workspace lock poisoned")
            .entry(mirror.clone())
            .or_default()
            .clone();
        let _guard = lock.lock().await;

        if !mirror.join("HEAD").exists() {
            tokio::fs::create_dir_all(&mirror)
                .await
                .with_context(|| format!("cannot create the mirror {}", mirror.display()))?;
            git(&mirror, None)
                .args(["init", "--bare", "--quiet"])
                .status_ok("create the mirror")
                .await?;
        }
        // Worktrees of a job whose server died are gone from disk; forget them.
        git(&mirror, None)
            .args(["worktree", "prune"])
            .status_ok("prune stale worktrees")
            .await?;
        for (url, sha) in &request.sources {
            if has_commit(&mirror, sha).await {
                continue;
            }
            fetch_commit(&mirror, url, sha, request.auth).await?;
        }
        Ok(mirror)
    }
}

async fn has_commit(mirror: &Path, sha: &CommitSha) -> bool {
    git(mirror, None)
        .args(["cat-file", "-e", &format!("{sha}^{{commit}}")])
        .output()
        .await
        .is_ok_and(|o| o.status.success())
}

/// Fetches one commit by sha; servers that refuse unadvertised shas get the
/// branches and pull-request refs fetched instead.
async fn fetch_commit(
    mirror: &Path,
    url: &str,
    sha: &CommitSha,
    auth: Option<&Secret>,
) -> Result<()> {
    let by_sha = fetching(
        git(mirror, auth.map(|a| (url, a)))
            .args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--end-of-options",
                url,
            ])
            .arg(format!("+{sha}:refs/wavegate/{sha}")),
    )
    .await?;
    if by_sha.status.success() && has_commit(mirror, sha).await {
        return Ok(());
    }
    let refs = fetching(
        git(mirror, auth.map(|a| (url, a)))
            .args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--prune",
                "--no-write-fetch-head",
                "--end-of-options",
                url,
            ])
            // Into wavegate's own namespace: nothing of another remote's
            // branches ever lands in the mirror's.
            .args([
                "+refs/heads/*:refs/wavegate/heads/*",
                "+refs/pull/*/head:refs/wavegate/pull/*",
            ]),
    )
    .await?;
    if has_commit(mirror, sha).await {
        return Ok(());
    }
    let why = if refs.status.success() {
        String::from_utf8_lossy(&by_sha.stderr).trim().to_owned()
    } else {
        String::from_utf8_lossy(&refs.stderr).trim().to_owned()
    };
    bail!(
        "commit {sha} could not be fetched from {}: {}",
        redact_url(url),
        if why.is_empty() {
            "the remote does not have it"
        } else {
            &why
        }
    )
}

/// A fetch that stalls is killed: a fetch holds its mirror's lock.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

async fn fetching(command: &mut Command) -> Result<std::process::Output> {
    match tokio::time::timeout(FETCH_TIMEOUT, command.output()).await {
        Ok(output) => output.context("cannot run git fetch; is git installed?"),
        Err(_) => bail!(
            "git fetch took longer than {} minutes and was stopped",
            FETCH_TIMEOUT.as_secs() / 60
        ),
    }
}

/// A URL's scheme, host (without any user or password) and path.
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
fn redact_url(url: &str) -> String {
    url_parts(url).map_or_else(
        || url.to_owned(),
        |(scheme, host, path)| format!("{scheme}://{host}{path}"),
    )
}

/// A git command on the mirror; `auth` is the remote's URL and the
/// `Authorization` value git sends to that host only.
fn git(mirror: &Path, auth: Option<(&str, &Secret)>) -> Command {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(mirror)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ASKPASS", "true")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_TRACE")
        .env_remove("GIT_TRACE_CURL")
        .env_remove("GIT_TRACE_PACKET")
        .env_remove("GIT_CURL_VERBOSE")
        .env_remove("GIT_CONFIG_PARAMETERS")
        .kill_on_drop(true);
    for name in crate::plan::git::server_settings_in_env() {
        command.env_remove(name);
    }
    // A transfer slower than 1 KB/s for a minute is given up on.
    let mut config = vec![
        ("http.lowSpeedLimit".to_owned(), "1000".to_owned()),
        ("http.lowSpeedTime".to_owned(), "60".to_owned()),
    ];
    if let Some((url, header)) = auth {
        if let Some(origin) = origin(url) {
            config.push((
                format!("http.{origin}.extraHeader"),
                format!("Authorization: {}", header.expose()),
            ));
        }
    }
    command.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (n, (key, value)) in config.into_iter().enumerate() {
        command
            .env(format!("GIT_CONFIG_KEY_{n}"), key)
            .env(format!("GIT_CONFIG_VALUE_{n}"), value);
    }
    command
}

trait StatusOk {
    async fn status_ok(&mut self, what: &str) -> Result<()>;
}

impl StatusOk for Command {
    async fn status_ok(&mut self, what: &str) -> Result<()> {
        let output = self
            .output()
            .await
            .context("cannot run git; is git installed?")?;
        if !output.status.success() {
            bail!(
                "git could not {what}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::ForgeKind;
    use std::process::Command as StdCommand;

    fn sh(dir: &Path, script: &str) -> String {
        let out = StdCommand::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn sha(text: &str) -> CommitSha {
        CommitSha::parse(text).unwrap()
    }

    #[tokio::test]
    async fn a_file_remote_is_mirrored_by_sha_including_unadvertised_commits() {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        std::fs::create_dir(&origin).unwrap();
        sh(
            &origin,
            "git init -q -b main && echo a > a && git add a && git commit -qm one",
        );
        let first = sh(&origin, "git rev-parse HEAD");
        // A commit only a pull-request ref points at: not a branch.
        sh(&origin, "echo b > b && git add b && git commit -qm two && git update-ref refs/pull/7/head HEAD && git reset -q --hard HEAD~1");
        let pr_head = sh(&origin, "git rev-parse refs/pull/7/head");

        let workspace = Workspace::new(&tmp.path().join("data"));
        let repo = RepoId::new(ForgeKind::GitHub, "acme/infra");
        let url = format!("file://{}", origin.display());
        let (first, pr_head) = (sha(&first), sha(&pr_head));
        let mirror = workspace
            .fetch(&FetchRequest {
                repo: &repo,
                sources: vec![(&url, &first), (&url, &pr_head)],
                auth: None,
            })
            .await
            .unwrap();
        assert_eq!(
            mirror,
            tmp.path().join("data/mirrors/github/acme/infra.git")
        );
        assert!(has_commit(&mirror, &first).await);
        assert!(has_commit(&mirror, &pr_head).await);
        assert!(crate::plan::git::is_repository(&mirror));

        // Fetching again is a no-op, and a commit nobody has is a clear error.
        let missing = sha(&"0".repeat(40));
        let err = workspace
            .fetch(&FetchRequest {
                repo: &repo,
                sources: vec![(&url, &first), (&url, &missing)],
                auth: None,
            })
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("commit {missing} could not be fetched")),
            "{err}"
        );
    }

    #[test]
    fn odd_names_cannot_escape_the_mirror_root() {
        let workspace = Workspace::new(Path::new("/data"));
        let path = workspace.mirror_path(&RepoId::new(ForgeKind::Forgejo, "../../etc/passwd"));
        assert!(
            path.starts_with("/data/mirrors/forgejo"),
            "{}",
            path.display()
        );
        assert!(!path
            .components()
            .any(|c| c == std::path::Component::ParentDir));
    }

    #[test]
    fn the_token_travels_in_gits_config_environment_never_in_arguments() {
        let secret = Secret::new("Basic c2VjcmV0LXRva2Vu");
        let command = git(
            Path::new("/m"),
            Some(("https://git.example/o/r.git", &secret)),
        );
        let std = command.as_std();
        assert!(std
            .get_args()
            .all(|a| !a.to_string_lossy().contains("c2VjcmV0")));
        let envs: Vec<_> = std.get_envs().collect();
        let env = |name: &str| {
            envs.iter()
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| *v)
                .map(|v| v.to_string_lossy().into_owned())
        };
        assert_eq!(env("GIT_CONFIG_COUNT").as_deref(), Some("3"));
        assert_eq!(
            env("GIT_CONFIG_KEY_2").as_deref(),
            Some("http.https://git.example/.extraHeader"),
            "the header goes to the remote's host only"
        );
        assert_eq!(
            env("GIT_CONFIG_VALUE_2").as_deref(),
            Some("Authorization: Basic c2VjcmV0LXRva2Vu")
        );
        assert!(
            envs.iter().any(|(k, v)| *k == "GIT_TRACE" && v.is_none()),
            "tracing that could print the header is off"
        );
        let anonymous = git(Path::new("/m"), None);
        assert!(anonymous
            .as_std()
            .get_envs()
            .all(|(_, v)| !v.is_some_and(|v| v.to_string_lossy().contains("Authorization"))));
    }

    #[test]
    fn urls_in_messages_lose_their_credentials() {
        assert_eq!(
            redact_url("https://x:tok@host/o/r.git"),
            "https://host/o/r.git"
        );
        assert_eq!(redact_url("https://host/o/r.git"), "https://host/o/r.git");
        assert_eq!(redact_url("file:///tmp/r"), "file:///tmp/r");
    }
}
