//! A wide wave applied in parallel against the same wave applied one member
//! at a time (`cargo bench --bench wave`): a `wavegate serve` (release
//! binary, fake forge, every command in the sandbox) gets the merge of a
//! pull request that adds 20 components with no dependency between them,
//! each of whose applies sleeps 1 s, and the clock stops when the run's
//! check says it applied. The baseline is the same merge with
//! `apply_concurrency = 1` in the base's `wavegate.toml`, in the same run;
//! the two take turns, each on a fresh bot. Both times include planning the
//! 20 members again on the merge commit.
//!
//! Knobs: `WAVE_ROUNDS` (default 2), `WAVE_WIDTH` (default 20),
//! `WAVE_CONCURRENCY` (the parallel side's, default 4: the default setting).

// The integration tests' support (the `Bot` harness, the fake forge); this
// bench uses a part of it, the tests the rest.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

/// Merges a pull request adding `width` slow components into a base that
/// sets `apply_concurrency`, and answers how long until the run applied.
async fn merge_to_applied(width: usize, concurrency: usize) -> Duration {
    let system_path = "/usr/local/bin:/usr/bin:/bin";
    let bot =
        support::bot::Bot::start_with(&[("WAVEGATE_LOG", "warn"), ("PATH", system_path)]).await;
    bot.edit_base_config(
        "ignore = ",
        &format!("apply_concurrency = {concurrency}\nignore = "),
    );
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.branch_with_wide_wave("wide", width, 1.0);
    let pr = bot.opened(&repo, 1, "wide").await;
    pr.comment_as("rev-bob", "/approve").await;

    let started = Instant::now();
    pr.merge_unsettled().await;
    loop {
        let sha = pr.state().merge_sha.expect("merged");
        let applied = bot
            .check_runs_named(&repo, &sha, "wavegate/apply")
            .last()
            .is_some_and(|c| c.conclusion.as_deref() == Some("success"));
        if applied {
            let took = started.elapsed();
            assert_eq!(bot.applies_run().len(), width, "each member applied once");
            return took;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not applied; server log:\n{}",
            bot.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let knob = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rounds = knob("WAVE_ROUNDS", 2);
    let width = knob("WAVE_WIDTH", 20);
    let concurrency = knob("WAVE_CONCURRENCY", 4);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut serial, mut parallel) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            serial.push(merge_to_applied(width, 1).await);
            parallel.push(merge_to_applied(width, concurrency).await);
        }
        let s = |d: Duration| d.as_secs_f64();
        let (serial, parallel) = (median(serial), median(parallel));
        println!("merge → applied: one wave of {width} members, each apply sleeping 1 s, every command in the sandbox, median of {rounds} runs each:");
        println!("  apply_concurrency = 1 (baseline): {:>6.2} s", s(serial));
        println!("  apply_concurrency = {concurrency}:            {:>6.2} s", s(parallel));
        println!("  ratio parallel / serial: {:.2}", s(parallel) / s(serial));
    });
}
