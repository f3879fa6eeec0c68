//! The bundled example as a test fixture: a real git repository built by
//! `examples/estate/make-repo.sh` in a temp dir, a simulated estate deployed
//! to `main` by its own plan/apply scripts, and the real `wavegate` binary.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tempfile::TempDir;

/// How a forge lands a pull request on its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMethod {
    MergeCommit,
    Squash,
    /// Every commit re-created on the target ("rebase and merge").
    Rebase,
    /// The head itself becomes the target's head (Forgejo's fast-forward only).
    FastForward,
}

pub struct Example {
    _dir: TempDir,
    pub repo: PathBuf,
    pub estate: PathBuf,
}

/// What one `wavegate` run gave.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn member<'a>(report: &'a Value, name: &str) -> &'a Value {
        report["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["member"] == name)
            .unwrap_or_else(|| panic!("no member {name} in {report:#}"))
    }
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/estate")
}

fn check(output: Output, what: &str) -> Output {
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

impl Example {
    /// The example repository with `main` deployed to a fresh estate.
    pub fn deployed() -> Self {
        let example = Self::undeployed();
        let base = example._dir.path().join("base");
        std::fs::create_dir(&base).unwrap();
        let archive = check(example.git(&["archive", "main"]), "git archive");
        let mut tar = Command::new("tar")
            .args(["-xf", "-", "-C"])
            .arg(&base)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
        assert!(tar.wait().unwrap().success());
        check(
            Command::new("python3")
                .arg(example_dir().join("bootstrap.py"))
                .arg(&base)
                .env("ESTATE_DIR", &example.estate)
                .output()
                .unwrap(),
            "bootstrap.py",
        );
        example
    }

    /// The example repository with nothing deployed.
    pub fn undeployed() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let estate = dir.path().join("estate");
        std::fs::create_dir(&estate).unwrap();
        check(
            Command::new("sh")
                .arg(example_dir().join("make-repo.sh"))
                .arg(&repo)
                .output()
                .unwrap(),
            "make-repo.sh",
        );
        Self {
            _dir: dir,
            repo,
            estate,
        }
    }

    pub fn git(&self, args: &[&str]) -> Output {
        git_in(&self.repo, args)
    }

    /// Commits `files` (path → content, `None` deletes) on a new branch `name` made from `from`.
    pub fn branch(&self, name: &str, from: &str, files: &[(&str, Option<&str>)]) {
        check(
            self.git(&["checkout", "-q", "-B", name, from]),
            "git checkout",
        );
        for (path, content) in files {
            let full = self.repo.join(path);
            match content {
                Some(text) => {
                    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                    std::fs::write(&full, text).unwrap();
                }
                None => std::fs::remove_file(&full).unwrap(),
            }
        }
        check(self.git(&["add", "-A"]), "git add");
        check(self.git(&["commit", "-q", "-m", name]), "git commit");
        check(
            self.git(&["checkout", "-q", "--detach", "main"]),
            "git checkout main",
        );
    }

    /// Merges `branch` into `main` with a merge commit (`--no-ff`); returns its sha.
    pub fn merge(&self, branch: &str, message: &str) -> String {
        self.merge_as(MergeMethod::MergeCommit, branch, message)
    }

    /// Merges `branch` into `target` with a merge commit; returns its sha.
    pub fn merge_into(&self, target: &str, branch: &str, message: &str) -> String {
        check(self.git(&["checkout", "-q", target]), "git checkout");
        check(
            self.git(&["merge", "-q", "--no-ff", "-m", message, branch]),
            "git merge",
        );
        let sha = check(self.git(&["rev-parse", "HEAD"]), "git rev-parse").stdout;
        check(
            self.git(&["checkout", "-q", "--detach", "main"]),
            "git checkout --detach main",
        );
        String::from_utf8(sha).unwrap().trim().to_owned()
    }

    /// Lands `branch` on `main` as a forge's merge button would; returns
    /// `main`'s new head (for a rebase, the last re-created commit).
    pub fn merge_as(&self, method: MergeMethod, branch: &str, message: &str) -> String {
        check(self.git(&["checkout", "-q", "main"]), "git checkout main");
        let merged = match method {
            MergeMethod::MergeCommit => {
                self.git(&["merge", "-q", "--no-ff", "-m", message, branch])
            }
            MergeMethod::Squash => {
                let squashed = self.git(&["merge", "-q", "--squash", branch]);
                if squashed.status.success() {
                    self.git(&["commit", "-q", "-m", message])
                } else {
                    squashed
                }
            }
            MergeMethod::Rebase => {
                let landed = format!("{branch}-rebased");
                check(
                    self.git(&["checkout", "-q", "-B", &landed, branch]),
                    "git checkout",
                );
                let rebased = self.git(&["rebase", "-q", "main"]);
                check(self.git(&["checkout", "-q", "main"]), "git checkout main");
                if rebased.status.success() {
                    self.git(&["merge", "-q", "--ff-only", &landed])
                } else {
                    self.git(&["rebase", "--abort"]);
                    rebased
                }
            }
            MergeMethod::FastForward => self.git(&["merge", "-q", "--ff-only", branch]),
        };
        if !merged.status.success() {
            self.git(&["merge", "--abort"]);
            self.git(&["checkout", "-q", "--detach", "main"]);
            panic!(
                "landing {branch} on main ({method:?}) failed:\n{}{}",
                String::from_utf8_lossy(&merged.stdout),
                String::from_utf8_lossy(&merged.stderr)
            );
        }
        check(
            self.git(&["checkout", "-q", "--detach", "main"]),
            "git checkout --detach main",
        );
        let sha = check(self.git(&["rev-parse", "main"]), "git rev-parse").stdout;
        String::from_utf8(sha).unwrap().trim().to_owned()
    }

    pub fn read(&self, rev: &str, path: &str) -> String {
        String::from_utf8(check(self.git(&["show", &format!("{rev}:{path}")]), "git show").stdout)
            .unwrap()
    }

    /// Runs `wavegate ARGS` with the estate in the environment.
    pub fn wavegate(&self, args: &[&str]) -> Run {
        self.wavegate_with(&[], args)
    }

    /// [`Example::wavegate`] with `env` besides.
    pub fn wavegate_with(&self, env: &[(&str, &str)], args: &[&str]) -> Run {
        let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(args)
            .envs(env.iter().copied())
            .env("ESTATE_DIR", &self.estate)
            .env("WAVEGATE_LOG", "info")
            // As the bot runs them: sandboxed, the estate read-only to plans.
            .env("WAVEGATE_SANDBOX", "bwrap")
            .env("WAVEGATE_SANDBOX_APPLY_WRITE", &self.estate)
            .output()
            .unwrap();
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `wavegate plan --repo REPO --base BASE --head HEAD --json EXTRA…`.
    pub fn plan(&self, base: &str, head: &str, extra: &[&str]) -> Run {
        let repo = self.repo.display().to_string();
        let mut args = vec![
            "plan", "--repo", &repo, "--base", base, "--head", head, "--json",
        ];
        args.extend_from_slice(extra);
        self.wavegate(&args)
    }

    pub fn worktrees(&self) -> usize {
        String::from_utf8(self.git(&["worktree", "list", "--porcelain"]).stdout)
            .unwrap()
            .matches("worktree ")
            .count()
    }
}

/// Copies the directory `from` to `to`, files and subdirectories.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Runs git in `repo` with no user or system config and fixed identities and
/// dates, so the same files always make the same commits.
pub fn git_in(repo: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .env("GIT_AUTHOR_DATE", "2026-01-02T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-02T00:00:00Z")
        .output()
        .unwrap()
}
