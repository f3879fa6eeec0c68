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

/// A file that is not there and a file that could not be read are two
/// answers: only git saying the commit has no such path is "absent".
#[test]
fn an_absent_file_and_an_unreadable_one_are_different_answers() {
    use wavegate::plan::git::read_file;
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
