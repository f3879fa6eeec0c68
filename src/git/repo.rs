//! What a job reads from a repository: resolve revisions, read a file at a
//! revision, list changed paths, find the target before a merge, and write
//! a commit's files into a fresh directory. Blocking; async callers run
//! these off the runtime's threads.
//!
//! Changed paths come from `git diff`, never a forge API, so there is no cap
//! on how many files a change may touch.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, Output};

fn git(repo: &Path) -> Command {
    super::command::git(repo, None)
}

fn run(mut command: Command, what: &str) -> Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("cannot run git to {what}; is git installed?"))?;
    if !output.status.success() {
        bail!(
            "git could not {what}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

/// Whether `repo` is a git repository (a checkout or a bare mirror).
pub fn is_repository(repo: &Path) -> bool {
    let mut command = git(repo);
    command.args(["rev-parse", "--git-dir"]);
    command.output().is_ok_and(|o| o.status.success()) && repo.exists()
}

/// The commit a revision names, as a full sha.
pub fn resolve(repo: &Path, rev: &str) -> Result<String> {
    if rev.starts_with('-') {
        bail!("`{rev}` is not a revision");
    }
    let mut command = git(repo);
    command
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"));
    let output = command
        .output()
        .context("cannot run git; is git installed?")?;
    if !output.status.success() {
        bail!("`{rev}` does not name a commit in {}", repo.display());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The text of `path` at `commit`: `None` only when git says `commit` has
/// no such file. Anything else that goes wrong (no such commit, a broken or
/// missing repository, git failing) is an error, never an absent file: a
/// base config nobody could read must not pass for one that is not there.
pub fn read_file(repo: &Path, commit: &str, path: &str) -> Result<Option<String>> {
    if commit.starts_with('-') {
        bail!("`{commit}` is not a revision");
    }
    let mut list = git(repo);
    list.args([
        "ls-tree",
        "-z",
        "--full-tree",
        "--end-of-options",
        commit,
        "--",
        path,
    ]);
    let listed = run(list, &format!("look for {path} at {commit}"))?;
    let entry = listed.stdout.split(|b| *b == 0).find(|e| !e.is_empty());
    let Some(entry) = entry else {
        return Ok(None);
    };
    // `<mode> <type> <object>\t<path>`
    let entry = String::from_utf8_lossy(entry);
    let mut fields = entry.split(['\t', ' ']);
    let (_mode, kind, object) = (fields.next(), fields.next(), fields.next());
    let (Some("blob"), Some(object)) = (kind, object) else {
        bail!("{path} at {commit} is not a file ({entry})");
    };
    let mut show = git(repo);
    show.args(["cat-file", "blob", object]);
    let output = run(show, &format!("read {path} at {commit}"))?;
    let text = String::from_utf8(output.stdout)
        .with_context(|| format!("{path} at {commit} is not UTF-8"))?;
    Ok(Some(text))
}

/// Every file's path at `commit`, sorted.
pub fn list_files(repo: &Path, commit: &str) -> Result<Vec<String>> {
    if commit.starts_with('-') {
        bail!("`{commit}` is not a revision");
    }
    let mut command = git(repo);
    command.args([
        "ls-tree",
        "-r",
        "-z",
        "--name-only",
        "--full-tree",
        "--end-of-options",
        commit,
    ]);
    let output = run(command, &format!("list the files at {commit}"))?;
    Ok(sorted_paths(&output.stdout))
}

/// The paths git wrote separated by NUL (`-z`), sorted.
fn sorted_paths(stdout: &[u8]) -> Vec<String> {
    let mut paths: Vec<String> = stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    paths.sort();
    paths
}

/// Paths that differ between the merge base of `base` and `head`, and `head`.
/// Renames are not detected, so a rename counts on both sides.
pub fn changed_paths(repo: &Path, base: &str, head: &str) -> Result<Vec<String>> {
    let mut command = git(repo);
    command
        .args(["diff", "--name-only", "-z", "--no-renames", "--no-ext-diff"])
        .arg(format!("{base}...{head}"));
    let output = run(command, &format!("diff {base}...{head}"))?;
    Ok(sorted_paths(&output.stdout))
}

/// The target branch as it was just before `merge` landed the pull request
/// whose head is `head` and that was planned against `base`, whatever the
/// merge method:
/// - a merge commit: its first parent;
/// - fast-forward (`merge` is `head`): the newest commit on `head`'s first
///   parent line that is not one of the pull request's;
/// - squash or rebase (`merge` is a new commit made of the pull request's):
///   walking back from `merge`'s first parent past every commit whose patch
///   is one of the pull request's (a rebase re-creates each), the first that
///   is not. A squash stops at once.
///
/// The run's base is this commit: the gates and policy it reads, and the
/// fan-out against it, are the target's before the merge, never a state an
/// earlier commit of the pull request made.
pub fn target_before_merge(repo: &Path, merge: &str, head: &str, base: &str) -> Result<String> {
    let merge = resolve(repo, merge)?;
    let head = resolve(repo, head)?;
    let base = resolve(repo, base)?;
    let parents = parents_of(repo, &merge)?;
    if merge == head {
        let own = rev_list(repo, &[&head, &format!("^{base}")])?;
        let mut at = head.clone();
        while own.contains(&at) {
            at = parents_of(repo, &at)?
                .into_iter()
                .next()
                .with_context(|| format!("{at} has no parent before the pull request's commits"))?;
        }
        return Ok(at);
    }
    if parents.len() >= 2 {
        return Ok(parents[0].clone());
    }
    let own: std::collections::HashSet<String> =
        patch_ids(repo, &["--no-merges", &head, &format!("^{base}")])?
            .into_iter()
            .map(|(_, id)| id)
            .collect();
    let mut at = parents
        .into_iter()
        .next()
        .with_context(|| format!("the merge {merge} has no parent"))?;
    loop {
        let patch = patch_ids(repo, &["-n1", &at])?;
        match patch.first() {
            Some((_, id)) if own.contains(id) => {
                at = parents_of(repo, &at)?
                    .into_iter()
                    .next()
                    .with_context(|| format!("{at} has no parent"))?;
            }
            _ => return Ok(at),
        }
    }
}

fn parents_of(repo: &Path, commit: &str) -> Result<Vec<String>> {
    let mut command = git(repo);
    command.args(["rev-list", "--parents", "-n1", "--end-of-options", commit]);
    let output = run(command, &format!("read the parents of {commit}"))?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .skip(1)
        .map(str::to_owned)
        .collect())
}

fn rev_list(repo: &Path, args: &[&str]) -> Result<std::collections::HashSet<String>> {
    let mut command = git(repo);
    command.arg("rev-list").args(args);
    let output = run(command, "list commits")?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// `(commit, stable patch id)` of the commits `git log ARGS` lists (a
/// commit without changes has none and is left out).
fn patch_ids(repo: &Path, args: &[&str]) -> Result<Vec<(String, String)>> {
    let mut log = git(repo);
    log.args([
        "log",
        "-p",
        "--no-color",
        "--no-ext-diff",
        "--format=commit %H",
    ])
    .args(args);
    let patches = run(log, "read the pull request's patches")?;
    let mut id = git(repo);
    id.args(["patch-id", "--stable"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = id
        .spawn()
        .context("cannot run git patch-id; is git installed?")?;
    let mut stdin = child.stdin.take().expect("piped");
    let feeding = std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut stdin, &patches.stdout);
    });
    let output = child
        .wait_with_output()
        .context("git patch-id did not finish")?;
    let _ = feeding.join();
    if !output.status.success() {
        bail!(
            "git could not compute patch ids: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, commit)| (commit.to_owned(), id.to_owned()))
        .collect())
}

/// Writes the files of `commit` into `dest`, a new directory: a plain copy
/// with no `.git` that leads back to the repository. `index` is a scratch
/// file for git's index (the repository's own is never touched).
pub fn export_tree(repo: &Path, commit: &str, dest: &Path, index: &Path) -> Result<()> {
    std::fs::create_dir(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let mut read = git(repo);
    read.env("GIT_INDEX_FILE", index)
        .args(["read-tree", "--end-of-options", commit]);
    run(read, &format!("read the tree of {commit}"))?;
    let mut checkout = git(repo);
    checkout
        .env("GIT_INDEX_FILE", index)
        .arg("--work-tree")
        .arg(dest)
        .args([
            "-c",
            "core.bare=false",
            "checkout-index",
            "--all",
            "--force",
        ]);
    run(checkout, &format!("write the files of {commit}"))?;
    let _ = std::fs::remove_file(index);
    Ok(())
}
