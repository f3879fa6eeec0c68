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
    let dir = browser_dir();
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed in {}: run `npm ci --prefix tests/browser` (scripts/test.sh does)",
        dir.display()
    );
    let mut command = tokio::process::Command::new("node");
    command
        .arg(dir.join("pages.mjs"))
        .arg(step)
        .env("WAVEGATE_URL", bot.url(""))
        .env("CHROMIUM", chromium())
        .kill_on_drop(true);
    let ran = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("the browser step {step} did not end within 2 minutes"))
        .unwrap_or_else(|e| {
            panic!("node cannot be run ({e}): the browser tests need Node.js 20 or later")
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(
        ran.status.success(),
        "the browser step {step} failed:\n{said}"
    );
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
