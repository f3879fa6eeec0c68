//! The sandbox as an operator meets it: a server whose bubblewrap is
//! missing starts, says what is wrong and runs nothing; `wavegate plan`
//! runs the same sandbox unless told `--no-sandbox`. (What a sandboxed
//! command cannot do, and what a server set to `WAVEGATE_SANDBOX=none`
//! says and lets through, is told in scenarios/attacks.rs.)

use crate::support::common::Example;
use crate::support::{bot::*, redact::redact};

/// A directory for PATH with git and python3 but no bubblewrap.
fn path_without_bubblewrap() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for program in ["git", "python3", "sh"] {
        // The system's own first: a version manager's shim needs more than this PATH.
        let found = std::iter::once(std::path::PathBuf::from("/usr/bin"))
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap()))
            .map(|d| d.join(program))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{program} on PATH"));
        std::os::unix::fs::symlink(found, dir.path().join(program)).unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_bubblewrap_the_server_starts_says_why_and_runs_nothing() {
    let path = path_without_bubblewrap();
    let path_text = path.path().display().to_string();
    let bot = Bot::start_unready(&[("PATH", &path_text)]).await;

    let ready = bot.http.get(bot.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let why = ready.text().await.unwrap();
    assert!(
        why.starts_with("the sandbox is unavailable, so no plan or apply command can run: bubblewrap (`bwrap`) is not installed; install it (`apt-get install bubblewrap`), or set WAVEGATE_SANDBOX=none"),
        "{why}"
    );
    assert!(
        bot.log().contains("the sandbox is unavailable, so no plan or apply command will run until it is fixed: bubblewrap (`bwrap`) is not installed"),
        "{}",
        bot.log()
    );

    // A pull request is told, and nothing of its code runs.
    let pr = bot.opened(&bot.github_repo(), 41, "change").await;
    insta::assert_snapshot!(redact(&pr.report()), @r"
    <!-- wavegate:report -->
    ## wavegate plan

    ❌ **wavegate's sandbox is unavailable on its server**

    Plan commands are code from the pull request, and this server runs them only in its sandbox, which cannot start: bubblewrap (`bwrap`) is not installed; install it (`apt-get install bubblewrap`), or set WAVEGATE\_SANDBOX=none to run commands unsandboxed. Nothing was run.

    **What to do:** the server's operator fixes the sandbox (or sets `WAVEGATE_SANDBOX=none` knowingly) and restarts wavegate; then comment `/plan`.
    ");
    assert_eq!(pr.plan_state(), "failure");
    assert!(bot.plans_run().is_empty(), "no plan command ran");
}

#[test]
fn wavegate_plan_runs_the_same_sandbox_unless_told_not_to() {
    let example = Example::deployed();
    let path = path_without_bubblewrap();
    let repo = example.repo.display().to_string();
    let plan = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args([
                "plan", "--repo", &repo, "--base", "main", "--head", "change",
            ])
            .args(extra)
            .env("PATH", path.path())
            .env("ESTATE_DIR", &example.estate)
            .output()
            .unwrap()
    };
    let refused = plan(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("plan commands run in the sandbox, as the bot runs them, and bubblewrap (`bwrap`) is not installed")
            && stderr.contains("or pass --no-sandbox to run them as yourself"),
        "{stderr}"
    );

    let unsandboxed = plan(&["--no-sandbox"]);
    let stderr = String::from_utf8_lossy(&unsandboxed.stderr);
    assert_eq!(unsandboxed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "note: commands ran without a sandbox (--no-sandbox or WAVEGATE_SANDBOX=none)"
        ),
        "{stderr}"
    );
}
