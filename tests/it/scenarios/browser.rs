//! The pages in a real browser: Debian's chromium, driven by playwright-core
//! (`tests/browser/pages.mjs`, installed by `scripts/test.sh`), against the
//! real binary and the fake forge. Each step is one run of the script
//! against a server this test set up for it. Without node, the script's
//! packages or chromium the test fails saying what to install: it never
//! passes without a browser having looked.
//!
//! `WAVEGATE_SCREENSHOTS=<dir>` saves each main page there (the docs'
//! screenshots are made so).

use crate::support::bot::*;
use crate::support::login::*;
use crate::support::pr::*;
use std::path::{Path, PathBuf};
use wavegate::gate::ledger::FactKind;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

fn chromium() -> PathBuf {
    let path =
        PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned()));
    assert!(
        path.is_file(),
        "no chromium at {}: the browser tests need Debian's chromium (`apt-get install chromium`; scripts/test.sh installs it) or CHROMIUM naming one",
        path.display()
    );
    path
}

/// Runs `step` of the browser script against `bot`; fails with what the
/// script printed.
async fn in_the_browser(bot: &Bot, step: &str) {
    in_the_browser_telling(bot, step, |_| {}).await
}

/// Runs `step`, calling `told` with each line the script prints on its
/// standard output as it prints it (`saw: …`: the test's cue to go on).
async fn in_the_browser_telling(bot: &Bot, step: &str, mut told: impl FnMut(&str)) {
    use tokio::io::AsyncBufReadExt as _;
    let dir = browser_dir();
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed in {}: run `npm ci --prefix tests/browser` (scripts/test.sh does)",
        dir.display()
    );
    // Chromium sandboxes its pages only for an unprivileged user (as root it
    // would have to run without), so as root the browser runs as `nobody`.
    let home = tempfile::tempdir().unwrap();
    let mut command = if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut command = tokio::process::Command::new("runuser");
        command.args(["-u", "nobody", "--", "env"]);
        command.arg(format!("HOME={}", home.path().display()));
        command.arg("node");
        command
    } else {
        tokio::process::Command::new("node")
    };
    command
        .arg(dir.join("pages.mjs"))
        .arg(step)
        .env("WAVEGATE_URL", bot.url(""))
        .env("CHROMIUM", chromium())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap_or_else(|e| {
        panic!("node cannot be run ({e}): the browser tests need Node.js 20 or later")
    });
    let mut stderr = child.stderr.take().unwrap();
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
            .await
            .unwrap();
        text
    });
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = String::new();
    let ran = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            told(&line);
            said.push_str(&line);
            said.push('\n');
        }
        child.wait().await.unwrap()
    })
    .await
    .unwrap_or_else(|_| panic!("the browser step {step} did not end within 2 minutes"));
    said.push_str(&errors.await.unwrap());
    assert!(ran.success(), "the browser step {step} failed:\n{said}");
}

#[tokio::test]
async fn in_a_browser_a_reader_logs_in_sees_the_pull_request_and_is_refused_another_repository() {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    bot.register_login_clients();
    let _other = planned_pr_on_forgejo(&bot, 2).await;
    let merged = approved_pr(&bot, 1).await;
    bot.forge.set_permission(&merged.repo, "erin", "read");
    merged.merge().await;
    in_the_browser(&bot, "read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_lines_of_a_slow_apply_appear_before_it_ends() {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    bot.register_login_clients();
    let pr = approved_pr(&bot, 1).await;
    bot.forge.set_permission(&pr.repo, "erin", "read");
    bot.pause_apply("dev", "app", "before");
    pr.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;
    let mut resumed = false;
    in_the_browser_telling(&bot, "live", |line| {
        if line == "saw: paused" {
            assert!(
                bot.apply_paused("dev", "app"),
                "the page showed the line while the apply was still paused"
            );
            bot.resume_apply("dev", "app");
            resumed = true;
        }
    })
    .await;
    assert!(resumed, "the browser never saw the paused apply's line");
    bot.settle().await;
}

#[tokio::test]
async fn in_a_browser_an_admin_releases_a_stale_lock_and_a_reader_may_not() {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    bot.register_login_clients();
    let pr = approved_pr(&bot, 6).await;
    bot.forge.set_permission(&pr.repo, "ada-admin", "admin");
    bot.forge.set_permission(&pr.repo, "erin", "read");
    pr.merge().await;
    super::operate::leave_a_stale_lock(&bot, 6).await;
    in_the_browser(&bot, "operate").await;
    let facts = bot
        .store()
        .await
        .repo_facts("github:acme/infra")
        .await
        .unwrap();
    let released: Vec<&str> = facts
        .iter()
        .filter(|fact| fact.fact.kind == FactKind::LockReleased)
        .map(|fact| fact.fact.actor.login.as_str())
        .collect();
    assert_eq!(released, ["ada-admin"], "one release, by the admin");
    bot.settle().await;
}
