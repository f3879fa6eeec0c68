//! Git content for jobs: one bare mirror per repository under the data dir,
//! fetched by commit sha with the `git` CLI. The plan engine checks out its
//! own throw-away worktrees from the mirror and removes them after the job.
//!
//! The forge credential travels as an `Authorization` header scoped to the
//! remote's host, in a sealed in-memory file that only the fetching git
//! inherits (`include.path=/proc/self/fd/N`): never in a URL, an argument, an
//! environment variable or a log line. No hook in a mirror ever runs, and no
//! sandboxed command ever sees a mirror.

use super::command::{git_async as git, redact_url, Credential};
use crate::config::settings::Secret;
use crate::model::{CommitSha, RepoId};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::process::Command;

/// Where the mirrors live; fetches into one mirror are serialised.
#[derive(Clone)]
pub struct Workspace {
    root: PathBuf,
    locks: Arc<Mutex<HashMap<PathBuf, Arc<MirrorLock>>>>,
}

/// One mirror's lock; what it guards says whether this process has pruned
/// the mirror's worktrees yet.
type MirrorLock = tokio::sync::Mutex<bool>;

/// What to fetch and how to authenticate.
pub struct FetchRequest<'a> {
    pub(crate) repo: &'a RepoId,
    /// Where each commit can be fetched from (a fork's head comes from the fork).
    pub(crate) sources: Vec<(&'a str, &'a CommitSha)>,
    /// The value of an `Authorization` header for http(s) remotes.
    pub(crate) auth: Option<&'a Secret>,
}

impl Workspace {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join("mirrors"),
            locks: Arc::default(),
        }
    }

    /// `mirrors/<forge>/<owner>/<name>.git`, with anything odd in the names replaced.
    pub(crate) fn mirror_path(&self, repo: &RepoId) -> PathBuf {
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

    /// The repository's mirror, created if new, and its lock held.
    async fn open(&self, repo: &RepoId) -> Result<(PathBuf, tokio::sync::OwnedMutexGuard<bool>)> {
        let mirror = self.mirror_path(repo);
        let lock = self
            .locks
            .lock()
            .expect("workspace lock poisoned")
            .entry(mirror.clone())
            .or_default()
            .clone();
        let mut pruned = lock.lock_owned().await;

        if !mirror.join("HEAD").exists() {
            tokio::fs::create_dir_all(&mirror)
                .await
                .with_context(|| format!("cannot create the mirror {}", mirror.display()))?;
            git(&mirror, None)
                .args(["init", "--bare", "--quiet"])
                .status_ok("create the mirror")
                .await?;
        }
        // Worktrees of a job whose server died are gone from disk; forget
        // them, once per process (this process's jobs remove their own).
        if !*pruned {
            git(&mirror, None)
                .args(["worktree", "prune"])
                .status_ok("prune stale worktrees")
                .await?;
            *pruned = true;
        }
        Ok((mirror, pruned))
    }

    /// Makes sure every requested commit is in the repository's mirror and
    /// returns the mirror's path.
    pub(crate) async fn fetch(&self, request: &FetchRequest<'_>) -> Result<PathBuf> {
        let (mirror, _locked) = self.open(request.repo).await?;
        for (url, sha) in &request.sources {
            if has_commit(&mirror, sha).await {
                continue;
            }
            fetch_commit(&mirror, url, sha, request.auth).await?;
        }
        Ok(mirror)
    }

    /// Fetches `branch` as the remote at `url` has it now into the mirror
    /// and answers the commit it is at.
    pub(crate) async fn fetch_branch(
        &self,
        repo: &RepoId,
        url: &str,
        branch: &str,
        auth: Option<&Secret>,
    ) -> Result<CommitSha> {
        let (mirror, _locked) = self.open(repo).await?;
        let credential = match auth {
            Some(header) => Credential::new(url, header)?,
            None => None,
        };
        let local = format!("refs/wavegate/branches/{branch}");
        let refspec = format!("+refs/heads/{branch}:{local}");
        let fetched = fetch_one(&mirror, credential.as_ref(), url, &refspec).await?;
        if !fetched.status.success() {
            bail!(
                "branch `{branch}` could not be fetched from {}: {}",
                redact_url(url),
                String::from_utf8_lossy(&fetched.stderr).trim()
            );
        }
        let head = git(&mirror, None)
            .args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{local}^{{commit}}"))
            .output()
            .await
            .context("cannot run git rev-parse")?;
        if !head.status.success() {
            bail!(
                "branch `{branch}` was fetched but cannot be read in the mirror: {}",
                String::from_utf8_lossy(&head.stderr).trim()
            );
        }
        let sha = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        CommitSha::parse(&sha)
            .map_err(|e| anyhow::anyhow!("branch `{branch}` fetched, but its head reads as {e}"))
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
    let credential = match auth {
        Some(header) => Credential::new(url, header)?,
        None => None,
    };
    let refspec = format!("+{sha}:refs/wavegate/{sha}");
    let by_sha = fetch_one(mirror, credential.as_ref(), url, &refspec).await?;
    if by_sha.status.success() && has_commit(mirror, sha).await {
        return Ok(());
    }
    let refs = fetching(
        git(mirror, credential.as_ref())
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

/// Fetches one refspec from `url` into the mirror, writing nothing else.
async fn fetch_one(
    mirror: &Path,
    credential: Option<&Credential>,
    url: &str,
    refspec: &str,
) -> Result<std::process::Output> {
    fetching(
        git(mirror, credential)
            .args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--end-of-options",
                url,
            ])
            .arg(refspec),
    )
    .await
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
    use crate::model::ForgeKind;
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

    /// A repository `origin` in a fresh temp dir, `main` at one commit.
    fn origin_with_one_commit() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        std::fs::create_dir(&origin).unwrap();
        sh(
            &origin,
            "git init -q -b main && echo a > a && git add a && git commit -qm one",
        );
        (tmp, origin)
    }

    fn sha(text: &str) -> CommitSha {
        CommitSha::parse(text).unwrap()
    }

    #[tokio::test]
    async fn a_file_remote_is_mirrored_by_sha_including_unadvertised_commits() {
        let (tmp, origin) = origin_with_one_commit();
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
        assert!(crate::git::is_repository(&mirror));

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

    #[tokio::test]
    async fn a_branch_is_fetched_as_the_remote_has_it_now() {
        let (tmp, origin) = origin_with_one_commit();
        let workspace = Workspace::new(&tmp.path().join("data"));
        let repo = RepoId::new(ForgeKind::GitHub, "acme/infra");
        let url = format!("file://{}", origin.display());
        let first = workspace
            .fetch_branch(&repo, &url, "main", None)
            .await
            .unwrap();
        assert_eq!(first, sha(&sh(&origin, "git rev-parse main")));

        sh(&origin, "echo b > b && git add b && git commit -qm two");
        let moved = workspace
            .fetch_branch(&repo, &url, "main", None)
            .await
            .unwrap();
        assert_eq!(moved, sha(&sh(&origin, "git rev-parse main")));
        assert_ne!(moved, first);
        assert!(has_commit(&workspace.mirror_path(&repo), &moved).await);

        let err = workspace
            .fetch_branch(&repo, &url, "trunk", None)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("branch `trunk` could not be fetched"), "{err}");
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

    /// What one HTTP request to a listener carried, answered 404.
    async fn first_request_to(listener: tokio::net::TcpListener) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await.unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buffer[..n]);
        }
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        String::from_utf8_lossy(&head).into_owned()
    }

    #[tokio::test]
    async fn the_token_reaches_the_remote_and_no_argument_or_environment_holds_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/o/r.git", listener.local_addr().unwrap());
        let served = tokio::spawn(first_request_to(listener));
        let mirror = tempfile::tempdir().unwrap();
        sh(mirror.path(), "git init -q --bare");
        let secret = Secret::new("Basic c2VjcmV0LXRva2Vu");
        let credential = Credential::new(&url, &secret).unwrap().unwrap();

        let command = git(mirror.path(), Some(&credential));
        let std = command.as_std();
        let everything: Vec<String> = std
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .chain(
                std.get_envs()
                    .filter_map(|(_, v)| v.map(|v| v.to_string_lossy().into_owned())),
            )
            .collect();
        assert!(
            everything.iter().all(|a| !a.contains("c2VjcmV0")),
            "{everything:?}"
        );
        assert!(std.get_args().any(|a| a == "core.hooksPath=/dev/null"));

        let sha = sha(&"1".repeat(40));
        let _ = fetch_commit(mirror.path(), &url, &sha, Some(&secret)).await;
        let request = served.await.unwrap();
        assert!(
            request
                .to_ascii_lowercase()
                .contains("authorization: basic c2vjcmv0lxrva2vu"),
            "the remote got the header: {request}"
        );
    }

    #[tokio::test]
    async fn the_token_goes_to_the_remotes_host_only() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/o/r.git", listener.local_addr().unwrap());
        let served = tokio::spawn(first_request_to(listener));
        let mirror = tempfile::tempdir().unwrap();
        sh(mirror.path(), "git init -q --bare");
        // A credential scoped to another host.
        let credential = Credential::new("https://git.example/o/r.git", &Secret::new("Basic abc"))
            .unwrap()
            .unwrap();
        let _ = git(mirror.path(), Some(&credential))
            .args(["fetch", "--quiet", &url, "main"])
            .output()
            .await;
        let request = served.await.unwrap();
        assert!(
            !request.to_ascii_lowercase().contains("authorization"),
            "{request}"
        );
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
