//! What the scenarios are told in: a stateful fake GitHub/Forgejo over
//! HTTP, webhook bodies built from the forges' published examples, a check
//! of recorded requests against the forges' API descriptions, a database
//! link a test can cut, a notification receiver that checks signatures,
//! the bundled example as a fixture (`common`) and the `Bot` harness
//! around the real `wavegate serve` (`bot`). The benches that
//! drive a server include it with `#[path]`.

pub mod bot;
pub mod common;
pub mod conformance;
pub mod fake_forge;
pub mod issue;
pub mod login;
pub mod outage;
pub mod payloads;
pub mod pr;
pub mod receiver;
pub mod redact;
pub mod runner;

pub use conformance::conformance_violations;
pub use fake_forge::{FakeForge, RecordedRequest, RepoHandle};
pub use payloads::{
    forgejo_comment, forgejo_issue_comment, forgejo_pull_request, forgejo_pushed_by,
    forgejo_review_approved, github_comment, github_issue_comment, github_pull_request,
    github_pushed_by, github_review, sign_forgejo, sign_github,
};

/// Runs `git -C dir ARGS` as a test's own hand would (no global config, a
/// fixed author), failing the test with git's error.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
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
