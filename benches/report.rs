//! Time from webhook to report on the bundled example (`cargo bench --bench
//! report`): a `wavegate serve` (release binary, fake forge, the example's
//! real plan subprocesses) gets a signed `pull_request` opened delivery, and
//! the clock stops when the report comment is on the fake forge. Every
//! command runs in the sandbox, as in production.
//!
//! The baseline, in the same rounds, is the plan itself: the release
//! binary's `wavegate plan --markdown` on the same change (the server's
//! repository, `main` against the PR's branch, every command in the
//! sandbox), a subprocess timed from spawn to exit; the two take turns, so
//! whatever else the machine does lands on both alike. The server's mirror
//! is warm by then (the warm-up round filled it), as for any pull request of
//! a repository the bot planned before.
//!
//! Both get the system's PATH (`/usr/local/bin:/usr/bin:/bin`).
//! Knob: `REPORT_ROUNDS` (default 15).

// The integration tests' support (the `Bot` harness, the fake forge); this
// bench uses a part of it, the tests the rest.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "shared/report_time.rs"]
mod report_time;

use std::time::{Duration, Instant};

/// Opens PR `number` (its own head: `change` plus a note the fan-out
/// ignores) and answers how long until its report was posted.
async fn webhook_to_report(
    bot: &mut support::bot::Bot,
    repo: &support::RepoHandle,
    number: u64,
) -> Duration {
    let branch = format!("bench-{number}");
    let note = format!("docs/bench-{number}.md");
    bot.example
        .branch(&branch, "change", &[(note.as_str(), Some("bench\n"))]);
    report_time::time_to_report(bot, repo, number, &branch, Duration::from_secs(120)).await
}

/// `wavegate plan` of `main..branch` in `bot`'s repository, as a person
/// would run it beside the bot (sandboxed, the system's PATH), end to end.
fn plan_by_hand(bot: &support::bot::Bot, branch: &str, path: &str) -> Duration {
    let started = Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args([
            "plan",
            "--markdown",
            "--base",
            "main",
            "--head",
            branch,
            "--repo",
        ])
        .arg(&bot.example.repo)
        .env_clear()
        .env("PATH", path)
        .env("HOME", bot.dir.path())
        .env("WAVEGATE_LOG", "warn")
        .env("ESTATE_DIR", &bot.example.estate)
        .env("WAVEGATE_SANDBOX", "bwrap")
        .env("WAVEGATE_SANDBOX_APPLY_WRITE", &bot.example.estate)
        .output()
        .expect("wavegate plan runs");
    let took = started.elapsed();
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).contains("sha256:"),
        "wavegate plan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    took
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: u64 = std::env::var("REPORT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The system's PATH for both: inside the sandbox a version manager's
        // shims under HOME are out of sight.
        let system_path = "/usr/local/bin:/usr/bin:/bin";
        let mut bot =
            support::bot::Bot::start_with(&[("WAVEGATE_LOG", "warn"), ("PATH", system_path)])
                .await;
        let repo = bot.github_repo();
        let (mut served, mut by_hand) = (Vec::new(), Vec::new());
        // One warm-up (the first fetch fills the mirror).
        for n in 0..=rounds {
            let a = webhook_to_report(&mut bot, &repo, n + 1).await;
            let b = plan_by_hand(&bot, &format!("bench-{}", n + 1), system_path);
            if n > 0 {
                served.push(a);
                by_hand.push(b);
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (served, by_hand) = (median(served), median(by_hand));
        println!("webhook → report on the example estate (the `change` branch: its plan and outputs commands), every command in the sandbox, median of {rounds} pull requests each:");
        println!("  wavegate plan of the same change (baseline): {:>7.1} ms", ms(by_hand));
        println!("  serve, webhook to report:                    {:>7.1} ms", ms(served));
        println!("  serve − plan: {:+.1} ms, ratio {:.2}", ms(served) - ms(by_hand), served.as_secs_f64() / by_hand.as_secs_f64());
    });
}
