//! Jobs on the forge's CI against the same jobs on the bot's host (`cargo
//! bench --bench actions`): two `wavegate serve`s, each with the fake
//! forge, plan the same pull requests of the bundled example (`change`:
//! app@dev, then app@prod and dns@prod, one after the other). On the baseline server prod's
//! profile is local; on the other it says `executor = "actions"`, so each
//! of prod's four plans is a workflow run that the fake runner (the real
//! `wavegate job run`, its own checkout and sandbox) takes. The two take
//! turns, so whatever else the machine does lands on both alike. The clock
//! runs from the `opened` webhook to the report with its digest.
//!
//! What the bot does per dispatched job is counted from what the fake forge
//! recorded (its Actions calls) and what the job's record goes through.
//! Knob: `ACTIONS_ROUNDS` (default 10).

// The integration tests' support (the `Bot` harness, the fake forge, the
// fake runner); this bench uses a part of it, the tests the rest.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "shared/report_time.rs"]
mod report_time;

use std::time::Duration;
use support::bot::Bot;

const PROD_STAGE: &str = "name = \"prod\"\ngate = \"always\"\n";

/// `main` with prod on profile `prod` and the workflow committed.
fn set_up(bot: &Bot) {
    let workflow = bot
        .example
        .wavegate(&[
            "init",
            "actions",
            "--forge",
            "github",
            "--server",
            &format!("http://127.0.0.1:{}", bot.port),
        ])
        .stdout;
    let base = bot
        .example
        .read("main", "wavegate.toml")
        .replace(PROD_STAGE, &format!("{PROD_STAGE}profile = \"prod\"\n"));
    bot.example.branch(
        "main",
        "main",
        &[
            ("wavegate.toml", Some(&base)),
            (".github/workflows/wavegate.yml", Some(&workflow)),
        ],
    );
}

/// Opens PR `number` (`change` plus a note) and answers how long until
/// its report, with its digest, was posted.
async fn webhook_to_report(bot: &Bot, repo: &support::RepoHandle, number: u64) -> Duration {
    let branch = format!("bench-{number}");
    let note = format!("docs/bench-{number}.md");
    let toml = bot
        .example
        .read("change", "wavegate.toml")
        .replace(PROD_STAGE, &format!("{PROD_STAGE}profile = \"prod\"\n"));
    bot.example.branch(
        &branch,
        "change",
        &[
            (note.as_str(), Some("bench\n")),
            ("wavegate.toml", Some(&toml)),
        ],
    );
    report_time::time_to_report(bot, repo, number, &branch, Duration::from_secs(300)).await
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: u64 = std::env::var("ACTIONS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let env = [("WAVEGATE_LOG", "warn")];
        let local = Bot::start_reachable_with_file(&env, "WAVEGATE_PROFILES", |example, _| {
            format!("[profile.prod]\nstate = [\"{}\"]\n", example.estate.display())
        })
        .await;
        let remote = Bot::start_reachable_with_file(&env, "WAVEGATE_PROFILES", |_, _| {
            "[profile.prod]\nexecutor = \"actions\"\nworkflow = \".github/workflows/wavegate.yml\"\nrunner = [\"self-hosted\", \"prod\"]\nenvironment = \"production\"\n".to_owned()
        })
        .await;
        for bot in [&local, &remote] {
            set_up(bot);
        }
        let estate = remote.example.estate.display().to_string();
        let runner = support::runner::FakeRunner::start(
            &remote.forge,
            &["self-hosted", "prod"],
            &[
                ("ESTATE_DIR", &estate),
                ("WAVEGATE_SANDBOX_APPLY_WRITE", &estate),
                ("WAVEGATE_LOG", "warn"),
            ],
            &remote.dir.path().join("runner"),
        );
        let (local_repo, remote_repo) = (local.github_repo(), remote.github_repo());
        let (mut here, mut there) = (Vec::new(), Vec::new());
        let mut requests_before = 0;
        // One warm-up (the first fetch fills the mirror).
        for n in 0..=rounds {
            if n == 1 {
                requests_before = remote.forge.requests().len();
            }
            let a = webhook_to_report(&local, &local_repo, n + 1).await;
            let b = webhook_to_report(&remote, &remote_repo, n + 1).await;
            if n > 0 {
                here.push(a);
                there.push(b);
            }
        }
        let requests = remote.forge.requests();
        let timed = &requests[requests_before..];
        let jobs = timed
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/dispatches"))
            .count();
        let actions_calls = timed.iter().filter(|r| r.path.contains("/actions/")).count();
        let all_calls = timed.len();
        let local_calls = local.forge.requests().len();
        assert!(runner.taken().iter().all(|t| t.exit == Some(0)));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (here, there) = (median(here), median(there));
        let per_pr = jobs as f64 / rounds as f64;
        println!("webhook → report on the example's `change` (app@dev here; app@prod, then dns@prod, {per_pr:.0} jobs on the CI), median of {rounds} pull requests each:");
        println!("  prod on the bot's host (baseline): {:>8.1} ms", ms(here));
        println!("  prod on the forge's CI:            {:>8.1} ms", ms(there));
        println!(
            "  ratio {:.2}; added per dispatched job (one after another): {:+.1} ms",
            there.as_secs_f64() / here.as_secs_f64(),
            (ms(there) - ms(here)) / per_pr
        );
        println!(
            "  per dispatched job: {:.2} Actions calls to the forge ({} in {jobs} jobs), {:.2} forge calls in all (the baseline server made {:.2} per pull request)",
            actions_calls as f64 / jobs as f64,
            actions_calls,
            all_calls as f64 / jobs as f64,
            local_calls as f64 / (rounds + 1) as f64,
        );
    });
}
