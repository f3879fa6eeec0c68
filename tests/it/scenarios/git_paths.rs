//! Changed paths come from `git diff` of a real repository: a rename counts on
//! both sides, and the diff is against the merge base.

use crate::support::git;
use std::path::Path;
use std::process::Command;

#[test]
fn a_rename_counts_on_both_sides_and_the_base_moving_on_does_not_count() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(repo.join("infra/old")).unwrap();
    std::fs::write(repo.join("infra/old/main.tf"), "resource {}\n").unwrap();
    std::fs::write(repo.join("shared.txt"), "a\n").unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "base"]);
    git(repo, &["checkout", "-q", "-b", "feature"]);
    git(repo, &["mv", "infra/old", "infra/new"]);
    std::fs::write(repo.join("name with space.tf"), "x\n").unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "rename"]);
    git(repo, &["checkout", "-q", "main"]);
    std::fs::write(repo.join("shared.txt"), "b\n").unwrap();
    git(repo, &["commit", "-q", "-am", "main moves on"]);

    let paths = wavegate::git::changed_paths(repo, "main", "feature").unwrap();
    assert_eq!(
        paths,
        vec![
            "infra/new/main.tf",
            "infra/old/main.tf",
            "name with space.tf"
        ]
    );
}

/// A file that is not there and a file that could not be read are two
/// answers: only git saying the commit has no such path is "absent".
#[test]
fn an_absent_file_and_an_unreadable_one_are_different_answers() {
    use wavegate::git::read_file;
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("wavegate.toml"), "[policy]\n").unwrap();
    std::fs::create_dir(repo.join("infra")).unwrap();
    std::fs::write(repo.join("infra/main.tf"), "x\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "one"]);

    assert_eq!(
        read_file(&repo, "main", "wavegate.toml")
            .unwrap()
            .as_deref(),
        Some("[policy]\n")
    );
    assert_eq!(read_file(&repo, "main", "absent.toml").unwrap(), None);
    assert!(
        read_file(&repo, "main", "infra").is_err(),
        "a directory is not a file"
    );
    let unknown = read_file(&repo, &"1".repeat(40), "wavegate.toml").unwrap_err();
    assert!(
        unknown
            .to_string()
            .contains("git could not look for wavegate.toml"),
        "{unknown:#}"
    );

    // The repository's objects gone (a broken or half-copied mirror).
    std::fs::rename(repo.join(".git/objects"), dir.path().join("objects")).unwrap();
    let broken = read_file(&repo, "main", "wavegate.toml").unwrap_err();
    assert!(
        broken.to_string().starts_with("git could not"),
        "{broken:#}"
    );
    assert!(
        read_file(&repo, "main", "absent.toml").is_err(),
        "not \"absent\" when nothing could be read"
    );
    assert!(read_file(Path::new("/nonexistent/repo"), "main", "wavegate.toml").is_err());
}

fn rev(dir: &Path, rev: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", rev])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A repository whose `main` moved on after `pr` (two commits) branched off;
/// answers (dir, the planned base, the PR's head, main before the merge).
fn two_commit_pr() -> (tempfile::TempDir, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("wavegate.toml"), "gate = \"always\"\n").unwrap();
    std::fs::write(repo.join("app.tf"), "small\n").unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "base"]);
    let base = rev(repo, "HEAD");
    git(repo, &["checkout", "-q", "-b", "pr"]);
    std::fs::write(repo.join("wavegate.toml"), "gate = \"never\"\n").unwrap();
    git(repo, &["commit", "-q", "-am", "loosen the gate"]);
    std::fs::write(repo.join("app.tf"), "large\n").unwrap();
    git(repo, &["commit", "-q", "-am", "grow the app"]);
    let head = rev(repo, "HEAD");
    git(repo, &["checkout", "-q", "main"]);
    std::fs::write(repo.join("notes.md"), "main moved on\n").unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "main moves on"]);
    let before = rev(repo, "HEAD");
    (dir, base, head, before)
}

#[test]
fn the_target_before_a_merge_is_found_whatever_the_merge_method() {
    use wavegate::git::target_before_merge;
    for method in ["merge commit", "squash", "rebase"] {
        let (dir, base, head, before) = two_commit_pr();
        let repo = dir.path();
        match method {
            "merge commit" => git(repo, &["merge", "-q", "--no-ff", "-m", "merge", "pr"]),
            "squash" => {
                git(repo, &["merge", "-q", "--squash", "pr"]);
                git(repo, &["commit", "-q", "-m", "squashed"]);
            }
            _ => {
                git(repo, &["checkout", "-q", "pr"]);
                git(repo, &["rebase", "-q", "main"]);
                git(repo, &["checkout", "-q", "main"]);
                git(repo, &["merge", "-q", "--ff-only", "pr"]);
            }
        }
        let merge = rev(repo, "main");
        assert_eq!(
            target_before_merge(repo, &merge, &head, &base).unwrap(),
            before,
            "{method}"
        );
        if method == "rebase" {
            assert_ne!(
                rev(repo, "main^1"),
                before,
                "a rebase's first parent is the PR's own commit"
            );
        }
    }

    // Fast-forward: the PR's head itself lands on main.
    let (dir, base, _, _) = two_commit_pr();
    let repo = dir.path();
    git(repo, &["reset", "-q", "--hard", &base]);
    git(repo, &["merge", "-q", "--ff-only", "pr"]);
    let head = rev(repo, "pr");
    assert_eq!(rev(repo, "main"), head);
    assert_eq!(
        target_before_merge(repo, &head, &head, &base).unwrap(),
        base
    );
}

/// A directory per environment is one component with `{stage}` in its `dir`:
/// a change under `envs/prod/app` plans `app@prod` only, in that directory,
/// with the real binary and the sandbox on.
#[test]
fn a_directory_per_environment_plans_only_the_environment_that_changed() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    std::fs::write(
        repo.join("wavegate.toml"),
        r#"[defaults]
plan = ["python3", "{root}/plan.py", "{plan_file}", "{dir}"]

[[stage]]
name = "dev"
gate = "never"

[[stage]]
name = "prod"

[[component]]
name = "app"
dir = "envs/{stage}/{component}"
"#,
    )
    .unwrap();
    // Writes one entry naming the directory it ran in, as the report will show it.
    std::fs::write(
        repo.join("plan.py"),
        "import json, os, sys\n\
         json.dump({'entries': [{'address': 'local_file.size', 'action': 'update',\n\
         'before': {'size': 'small'}, 'after': {'dir': sys.argv[2], 'size': open('size').read().strip()}}]},\n\
         open(sys.argv[1], 'w'))\n",
    )
    .unwrap();
    for stage in ["dev", "prod"] {
        std::fs::create_dir_all(repo.join(format!("envs/{stage}/app"))).unwrap();
        std::fs::write(repo.join(format!("envs/{stage}/app/size")), "small\n").unwrap();
    }
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "base"]);
    git(repo, &["checkout", "-q", "-b", "bigger-prod"]);
    std::fs::write(repo.join("envs/prod/app/size"), "large\n").unwrap();
    git(repo, &["commit", "-q", "-am", "prod gets bigger"]);

    let out = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["plan", "--repo"])
        .arg(repo)
        .args(["--base", "main", "--head", "bigger-prod", "--json"])
        .env("WAVEGATE_SANDBOX", "bwrap")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["waves"],
        serde_json::json!([["app@prod"]]),
        "{stderr}"
    );
    assert_eq!(report["indeterminate"], serde_json::json!([]));
    assert!(
        stderr.contains("size: \"small\" → \"large\""),
        "the plan ran in envs/prod/app: {stderr}"
    );
    assert!(
        stderr.contains("dir: (none) → \"envs/prod/app\""),
        "{{dir}} is the stage's directory: {stderr}"
    );
}
