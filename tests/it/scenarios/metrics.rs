//! Metrics and logs against the real binary: `/metrics` counts deliveries by
//! how they were answered, times jobs and plan commands, counts forge calls
//! and reads the queue and the ledger from the store; with
//! `WAVEGATE_LOG_FORMAT=json` every line is JSON and a job's lines carry its
//! repository, pull request, delivery and id.

use crate::support::pr::*;
use crate::support::{self, bot::*};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// `/metrics` as sample → value, checking the format on the way: every
/// sample belongs to a family announced by `# HELP` and `# TYPE` before it.
async fn scrape(bot: &Bot) -> (String, BTreeMap<String, f64>) {
    let response = bot.http.get(bot.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    let mut samples = BTreeMap::new();
    let (mut helped, mut typed) = (None::<String>, None::<(String, String)>);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped = Some(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(helped.as_deref(), Some(name), "HELP before TYPE:\n{text}");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let name = series.split('{').next().unwrap();
        let (family, kind) = typed.as_ref().expect("a TYPE line first");
        let belongs = match kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| name == format!("{family}{suffix}")),
            _ => name == family,
        };
        assert!(belongs, "{line} after `# TYPE {family}`");
        let value = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("a number in {line}")),
        };
        samples.insert(series.to_owned(), value);
    }
    (text, samples)
}

/// Scrapes until `sample` is there (a job's duration is recorded just after
/// the store says it finished).
async fn scrape_with(bot: &Bot, sample: &str) -> (String, BTreeMap<String, f64>) {
    bot.until(&format!("/metrics shows {sample}"), || async {
        let scraped = scrape(bot).await;
        scraped.1.contains_key(sample).then_some(scraped)
    })
    .await
}

fn value(samples: &BTreeMap<String, f64>, text: &str, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("{series} is not in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_jobs_commands_forge_calls_and_the_ledger_are_measured() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 41).await;
    let (repo, head) = (&pr.repo, pr.state());

    // Refused: a forged signature, a body that is not a pull request, and
    // one announced too large; then a redelivery, an event wavegate does
    // not use, and one it records without work.
    let forged = bot
        .deliver_github_signed(
            "not-the-secret",
            support::github_pull_request("synchronize", repo, &head),
        )
        .await;
    assert_eq!(forged.0, 401, "{}", forged.1);
    let garbage = br#"{"action": "opened", "pull_request": {"number": "two"}}"#.to_vec();
    let signature = support::sign_github(GITHUB_SECRET, &garbage);
    let (status, _) = bot
        .post_github("pull_request", "garbage", Some(&signature), garbage)
        .await;
    assert_eq!(status, 400);
    assert_eq!(bot.announce_too_large().await, "HTTP/1.1 413");
    let (_, body) = support::github_pull_request("opened", repo, &head);
    let signature = support::sign_github(GITHUB_SECRET, &body);
    let (status, reply) = bot
        .post_github("pull_request", "delivery-1", Some(&signature), body)
        .await;
    assert_eq!((status, reply["status"].as_str()), (202, Some("duplicate")));
    let star = br#"{"action": "created"}"#.to_vec();
    let signature = support::sign_github(GITHUB_SECRET, &star);
    let (_, reply) = bot
        .post_github("star", "a-star", Some(&signature), star)
        .await;
    assert_eq!(reply["status"], "ignored");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    let ping =
        std::fs::read(fixtures.join("github/webhooks/ping/with-app_id.payload.json")).unwrap();
    let signature = support::sign_github(GITHUB_SECRET, &ping);
    let (_, reply) = bot
        .post_github("ping", "a-ping", Some(&signature), ping)
        .await;
    assert_eq!(reply["status"], "recorded");

    pr.comment_as("rev-bob", "/approve").await;

    let (text, samples) = scrape_with(
        &bot,
        r#"wavegate_job_duration_seconds_count{kind="comment",outcome="done"}"#,
    )
    .await;
    let v = |series: &str| value(&samples, &text, series);
    for (event, outcome, count) in [
        ("pull_request", "queued", 1.0),
        ("issue_comment", "queued", 1.0),
        ("pull_request", "duplicate", 1.0),
        ("star", "ignored", 1.0),
        ("ping", "recorded", 1.0),
        ("unknown", "unauthorized", 1.0),
        ("unknown", "too_large", 1.0),
        ("pull_request", "malformed", 1.0),
    ] {
        assert_eq!(
            v(&format!(
                r#"wavegate_deliveries_total{{event="{event}",forge="github",outcome="{outcome}"}}"#
            )),
            count,
            "{event} {outcome}:\n{text}"
        );
    }
    assert_eq!(v("wavegate_intake_duration_seconds_count"), 8.0, "{text}");
    assert_eq!(
        v(r#"wavegate_intake_duration_seconds_bucket{le="+Inf"}"#),
        8.0
    );
    assert!(v("wavegate_intake_duration_seconds_sum") > 0.0);

    assert_eq!(
        v(r#"wavegate_job_duration_seconds_count{kind="plan",outcome="done"}"#),
        1.0,
        "{text}"
    );
    assert!(v(r#"wavegate_job_duration_seconds_sum{kind="plan",outcome="done"}"#) > 0.0);
    // The example's change plans one command per member it touches.
    let plans = v(r#"wavegate_command_duration_seconds_count{kind="plan",result="ok"}"#);
    assert!(plans >= 2.0, "{text}");
    assert_eq!(
        v(r#"wavegate_command_duration_seconds_bucket{kind="plan",result="ok",le="+Inf"}"#),
        plans
    );

    // Reads answer 200; the report comment and the check are created (201).
    assert!(v(r#"wavegate_forge_requests_total{forge="github",status="200"}"#) >= 1.0);
    assert!(v(r#"wavegate_forge_requests_total{forge="github",status="201"}"#) >= 2.0);
    let remaining = v(r#"wavegate_forge_rate_limit_remaining{forge="github"}"#);
    assert!(remaining > 0.0 && remaining < 5000.0, "{text}");

    assert_eq!(v("wavegate_queue_depth"), 0.0);
    assert_eq!(v("wavegate_queue_oldest_job_age_seconds"), 0.0);
    assert_eq!(v("wavegate_jobs_dead"), 0.0);
    assert_eq!(v("wavegate_store_readable"), 1.0);
    assert_eq!(
        v(r#"wavegate_ledger_facts{kind="approved"}"#),
        1.0,
        "{text}"
    );
    assert_eq!(v(r#"wavegate_ledger_facts{kind="revoked"}"#), 0.0);
    assert_eq!(v(r#"wavegate_apply_runs{status="applied"}"#), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_deliveries_and_calls_carry_their_forge() {
    let bot = Bot::start().await;
    planned_pr_on_forgejo(&bot, 42).await;
    let (text, samples) = scrape_with(
        &bot,
        r#"wavegate_job_duration_seconds_count{kind="plan",outcome="done"}"#,
    )
    .await;
    let queued: f64 = samples
        .iter()
        .filter(|(series, _)| {
            series.starts_with("wavegate_deliveries_total{")
                && series.contains(r#"forge="forgejo""#)
                && series.contains(r#"outcome="queued""#)
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(queued, 1.0, "{text}");
    assert!(
        value(
            &samples,
            &text,
            r#"wavegate_forge_requests_total{forge="forgejo",status="200"}"#
        ) >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_job_span_on_every_line_of_the_job() {
    let bot = Bot::start_with(&[("WAVEGATE_LOG_FORMAT", "json")]).await;
    planned_pr(&bot, 43).await;
    let log = bot.log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["timestamp"].is_string() && l["level"].is_string()));

    let job_span = |line: &Value| -> Option<Value> {
        line["spans"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "job")
            .cloned()
    };
    let message = |line: &Value| line["fields"]["message"].as_str().unwrap_or("").to_owned();
    let claimed = lines
        .iter()
        .find(|l| message(l) == "job claimed")
        .unwrap_or_else(|| panic!("a `job claimed` line in\n{log}"));
    let span = job_span(claimed).unwrap_or_else(|| panic!("a job span on {claimed}"));
    assert_eq!(span["repo"], "github:acme/infra", "{span}");
    assert_eq!(span["pr"], 43, "{span}");
    assert_eq!(span["delivery"], "delivery-1", "{span}");
    assert_eq!(span["kind"], "plan", "{span}");
    assert!(
        span["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{span}"
    );
    let id = span["id"].clone();

    // The plan command's own lines (run on the planner's runtime) and the
    // last line of the job carry the same span.
    let command_lines: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "wavegate::command" && message(l).starts_with("[plan] "))
        .collect();
    assert!(!command_lines.is_empty(), "plan command lines in\n{log}");
    for line in command_lines {
        let span = job_span(line).unwrap_or_else(|| panic!("a job span on {line}"));
        assert_eq!(
            (&span["id"], &span["pr"]),
            (&id, &Value::from(43)),
            "{line}"
        );
    }
    let finished = lines
        .iter()
        .find(|l| message(l) == "job finished")
        .unwrap_or_else(|| panic!("a `job finished` line in\n{log}"));
    assert_eq!(job_span(finished).unwrap()["id"], id);
}

#[test]
fn a_log_filter_that_does_not_read_is_refused_naming_the_variable() {
    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg("serve")
        .env_clear()
        .env("WAVEGATE_LOG", "wavegate=loud")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("WAVEGATE_LOG=`wavegate=loud` is not a log filter (")
            && stderr.contains("write it like `info` or `info,wavegate=debug`"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_variable() {
    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg("serve")
        .env_clear()
        .env("WAVEGATE_LOG_FORMAT", "yaml")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "WAVEGATE_LOG_FORMAT=`yaml` is not a log format; use `text` (the default) or `json`"
        ),
        "{stderr}"
    );
}
