//! Changed paths come from `git diff` of a real repository: a rename counts on
//! both sides, and the diff is against the merge base.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

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

    let paths = wavegate::plan::git::changed_paths(repo, "main", "feature").unwrap();
    assert_eq!(
        paths,
        vec![
            "infra/new/main.tf",
            "infra/old/main.tf",
            "name with space.tf"
        ]
    );
}
