//! The live console under watch (`cargo bench --bench live`): a `wavegate
//! serve` (fake forge, every command in the sandbox) plans a pull request
//! whose plan of app@dev prints timestamped lines, 10 ms apart, in two
//! rounds. Each line's latency is the time from the command printing it
//! (its own clock, the same host's) to a server-sent-events client having
//! it. The first round has one watcher; the second has `LIVE_WATCHERS`,
//! every one of them measured. The server's resident memory is read
//! (`/proc/<pid>/status`) while the command runs with no watcher, the
//! baseline, and every 50 ms during the second round.
//!
//! With `LIVE_REPLICATED=1` the server is two replicas on a fresh
//! PostgreSQL database (`.ci/run` starts one; `WAVEGATE_TEST_POSTGRES_URL`)
//! and a third round has `LIVE_WATCHERS` watchers on the replica that does
//! not run the command, which follow it through the database.
//!
//! Knobs: `LIVE_LINES` (lines per round, default 500), `LIVE_WATCHERS`
//! (default 100), `LIVE_REPLICATED` (default off).

// The integration tests' support (the `Bot` harness, the fake forge); this
// bench uses a part of it, the tests the rest.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the ticker goes into the example's plan script.
const HOOK: &str = "    run_hooks(component, stage, plan_file)\n";

/// Prints `lines` timestamped lines per round once `$ESTATE_DIR/<round>`
/// exists, for app@dev only.
fn ticker(lines: usize) -> String {
    format!(
        r#"    if component == "app" and stage == "dev":
        for tick_round in ("round-1", "round-2", "round-3"):
            estate.say(f"ticker: waiting for {{tick_round}}")
            while not os.path.exists(os.path.join(estate.estate_dir(), tick_round)):
                time.sleep(0.005)
            for n in range({lines}):
                print(f"tick {{tick_round}} {{n}} {{time.time_ns()}}", flush=True)
                time.sleep(0.01)
"#
    )
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Reads one watcher's stream until it has `lines` ticks of `round`;
/// answers each one's latency.
async fn watch(mut answer: reqwest::Response, round: &str, lines: usize) -> Vec<Duration> {
    let mut buffer: Vec<u8> = Vec::new();
    let mut latencies = Vec::with_capacity(lines);
    let prefix = format!("tick {round} ");
    while latencies.len() < lines {
        let Some(chunk) = answer.chunk().await.unwrap() else {
            panic!("the stream ended after {} ticks", latencies.len());
        };
        let received = now_ns();
        buffer.extend_from_slice(&chunk);
        while let Some(at) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..at + 2).collect();
            let block = String::from_utf8(block).unwrap();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            if block.starts_with("event: skipped") {
                panic!("a watcher fell behind: {block}");
            }
            let Ok(line) = serde_json::from_str::<String>(data) else {
                continue;
            };
            if let Some(rest) = line.strip_prefix(&prefix) {
                let printed: u64 = rest.rsplit(' ').next().unwrap().parse().unwrap();
                latencies.push(Duration::from_nanos(received.saturating_sub(printed)));
            }
        }
    }
    latencies
}

/// Opens `watchers` streams, starts `round` and answers every latency.
async fn round(
    bot: &support::bot::Bot,
    (replica, live): (usize, &str),
    watchers: usize,
    round: &'static str,
    lines: usize,
) -> Vec<Duration> {
    let mut streams = Vec::new();
    let url = format!("http://127.0.0.1:{}{live}", bot.port_of(replica));
    for _ in 0..watchers {
        let answer = bot.http.get(&url).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        streams.push(tokio::spawn(watch(answer, round, lines)));
    }
    std::fs::write(bot.example.estate.join(round), "").unwrap();
    let mut all = Vec::new();
    for stream in streams {
        all.extend(stream.await.unwrap());
    }
    all.sort();
    all
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
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
    let lines = knob("LIVE_LINES", 500);
    let watchers = knob("LIVE_WATCHERS", 100);
    let replicated = knob("LIVE_REPLICATED", 0) == 1;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let env = [("WAVEGATE_PUBLIC_PAGES", "on"), ("WAVEGATE_LOG", "warn")];
        let bot = if replicated {
            support::bot::Bot::start_replicated(&env).await
        } else {
            support::bot::Bot::start_with(&env).await
        };
        let plan = bot.example.read("change", "ci/plan.py");
        assert!(plan.contains(HOOK), "the plan script runs its hooks");
        let ticked = plan.replace(HOOK, &format!("{}{HOOK}", ticker(lines)));
        bot.example
            .branch("ticker", "change", &[("ci/plan.py", Some(&ticked))]);
        let repo = bot.github_repo();
        let opened = bot.open_pr(&repo, 1, "ticker");
        let (status, body) = bot
            .deliver_github(support::github_pull_request("opened", &repo, &opened))
            .await;
        assert_eq!(status, 202, "{body}");

        let commands = "/api/v1/repos/github/acme/infra/pulls/1/commands";
        let started = Instant::now();
        let live = loop {
            let list: serde_json::Value = bot
                .http
                .get(bot.url(commands))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let running = list["commands"].as_array().and_then(|all| {
                all.iter()
                    .find(|c| c["label"] == "[plan] app@dev" && c["state"] == "running")
                    .map(|c| c["live"].as_str().unwrap().to_owned())
            });
            if let Some(live) = running {
                break live;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the plan of app@dev never ran; server log:\n{}",
                bot.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let running = if replicated {
            bot.replica_running_a_job().await
        } else {
            0
        };
        let pid = bot.pid_of(running).expect("the server runs");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle = rss_kib(pid);

        let one = round(&bot, (running, &live), 1, "round-1", lines).await;

        let peak = Arc::new(AtomicU64::new(0));
        let sampling = {
            let peak = Arc::clone(&peak);
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let many = round(&bot, (running, &live), watchers, "round-2", lines).await;
        sampling.abort();
        let peak = peak.load(Ordering::Relaxed);

        let mut rounds = vec![
            ("1 watcher".to_owned(), one),
            (format!("{watchers} watchers"), many),
        ];
        if replicated {
            let followed = round(&bot, (1 - running, &live), watchers, "round-3", lines).await;
            rounds.push((
                format!("{watchers} watchers on the other replica"),
                followed,
            ));
        } else {
            std::fs::write(bot.example.estate.join("round-3"), "").unwrap();
        }
        println!("lines per round: {lines}, 10 ms apart");
        for (who, latencies) in &rounds {
            let (p50, p99, max) = (
                percentile(latencies, 0.5),
                percentile(latencies, 0.99),
                latencies[latencies.len() - 1],
            );
            println!(
                "{who}: {} lines received; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; p99 / 500 ms bound = {:.3}",
                latencies.len(),
                ms(p50),
                ms(p99),
                ms(max),
                ms(p99) / 500.0
            );
        }
        println!(
            "server RSS: {:.1} MiB with no watcher (baseline), {:.1} MiB at most with {watchers} watchers: {:.2}x",
            idle as f64 / 1024.0,
            peak as f64 / 1024.0,
            peak as f64 / idle as f64
        );
        std::fs::remove_file(bot.example.estate.join("round-1")).ok();
        bot.settle().await;
    });
}
