//! The live console over the real binary: a watcher of a running apply gets
//! its lines while it still runs (server-sent events), then how it ended;
//! the same lines are kept and shown on the pull request's page afterwards,
//! and a watcher who comes late gets them from the store, as does one
//! watching through a replica that does not run the command. A secret a
//! command prints is redacted live and kept alike.

use crate::support::bot::*;
use crate::support::pr::*;
use serde_json::Value;
use std::time::Duration;

const COMMANDS: &str = "/api/v1/repos/github/acme/infra/pulls/1/commands";

/// The pull request's newest command of `kind` whose label names `member`.
async fn command(bot: &Bot, kind: &str, member: &str) -> Option<Value> {
    let list = bot.get_json(COMMANDS).await;
    list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|c| c["kind"] == kind && c["label"].as_str().unwrap().contains(member))
        .cloned()
}

/// A client of a command's event stream, as a browser's EventSource reads it.
struct Watcher {
    answer: reqwest::Response,
    buffer: Vec<u8>,
    /// Every line received, in order.
    lines: Vec<String>,
}

impl Watcher {
    async fn open(bot: &Bot, path: &str) -> Self {
        Self::open_on(bot, 0, path).await
    }

    /// Watches through replica `replica` of a replicated bot.
    async fn open_on(bot: &Bot, replica: usize, path: &str) -> Self {
        let url = format!("http://127.0.0.1:{}{path}", bot.port_of(replica));
        let answer = bot.http.get(url).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        assert_eq!(answer.headers()["content-type"], "text/event-stream");
        Self {
            answer,
            buffer: Vec::new(),
            lines: Vec::new(),
        }
    }

    /// The next event's name and data; keep-alives are skipped.
    async fn event(&mut self) -> (String, String) {
        loop {
            if let Some(at) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8(self.buffer.drain(..at + 2).collect()).unwrap();
                let (mut event, mut data) = (String::new(), Vec::new());
                for field in block.lines() {
                    if let Some(name) = field.strip_prefix("event: ") {
                        event = name.to_owned();
                    } else if let Some(text) = field.strip_prefix("data: ") {
                        data.push(text);
                    }
                }
                if !event.is_empty() {
                    return (event, data.join("\n"));
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(60), self.answer.chunk())
                .await
                .expect("an event within a minute")
                .unwrap()
                .expect("the stream goes on until the end event");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// Reads lines until one is `wanted`.
    async fn until_line(&mut self, wanted: &str) {
        loop {
            match self.event().await {
                (event, data) if event == "line" => {
                    let line: String = serde_json::from_str(&data).unwrap();
                    let found = line.contains(wanted);
                    self.lines.push(line);
                    if found {
                        return;
                    }
                }
                (event, data) => panic!("`{event}` ({data}) before a line with `{wanted}`"),
            }
        }
    }

    /// Reads lines until the end; answers how it ended.
    async fn until_end(&mut self) -> Value {
        loop {
            match self.event().await {
                (event, data) if event == "line" => {
                    self.lines.push(serde_json::from_str(&data).unwrap());
                }
                (event, data) if event == "end" => return serde_json::from_str(&data).unwrap(),
                (event, data) => panic!("unexpected `{event}`: {data}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_an_applys_lines_while_it_runs_and_the_page_keeps_them_after() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let pr = approved_pr(&bot, 1).await;
    bot.pause_apply("dev", "app", "before");
    pr.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;

    // The apply of app@dev waits, mid-command: a watcher gets what it
    // printed so far while it still runs.
    let apply = bot
        .until("the apply of app@dev is listed", || async {
            command(&bot, "apply", "app@dev").await
        })
        .await;
    assert_eq!(apply["state"], "running", "{apply:#}");
    assert_eq!(apply["label"], "[apply] app@dev");
    assert!(apply["run"].is_i64(), "an apply is its run's: {apply:#}");
    let live = apply["live"].as_str().unwrap().to_owned();
    let api = apply["api"].as_str().unwrap().to_owned();
    let mut watcher = Watcher::open(&bot, &live).await;
    watcher.until_line("paused before applying").await;
    assert_eq!(bot.get_json(&api).await["state"], "running");

    // The page shows what was kept so far, and streams the rest in.
    let (status, page, headers) = bot.get_page("/repos/github/acme/infra/pulls/1").await;
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!("data-live=\"{live}\"")),
        "a running command names its stream: {page}"
    );
    assert!(page.contains("<script src=\"/assets/live.js\" defer>"));
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.contains("script-src 'self'") && policy.contains("connect-src 'self'"),
        "{policy}"
    );
    let (status, script, headers) = bot.get_page("/assets/live.js").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    assert!(script.contains("new EventSource"), "{script}");

    // It goes on and ends: the watcher gets the rest, then how it ended.
    bot.resume_apply("dev", "app");
    let end = watcher.until_end().await;
    assert_eq!(
        end,
        serde_json::json!({
            "ending": "exited:0",
            "description": "exited with status 0",
            "succeeded": true,
        })
    );
    assert!(
        watcher.lines.iter().any(|l| l.contains("going on")),
        "{:#?}",
        watcher.lines
    );

    // Kept afterwards: the same lines, as JSON and on the page.
    let kept = bot
        .until("the end is kept", || async {
            let kept = bot.get_json(&api).await;
            (kept["state"] == "ended").then_some(kept)
        })
        .await;
    let output = kept["output"].as_str().unwrap();
    assert_eq!(output.lines().collect::<Vec<_>>(), watcher.lines);
    assert_eq!(kept["succeeded"], true);
    let (_, page, _) = bot.get_page("/repos/github/acme/infra/pulls/1").await;
    assert!(page.contains("[apply] app@dev"), "{page}");
    assert!(page.contains("going on"), "{page}");
    assert!(!page.contains(&format!("data-live=\"{live}\"")), "{page}");

    // A watcher who comes after the end gets the kept lines and the end.
    let mut late = Watcher::open(&bot, &live).await;
    assert_eq!(late.until_end().await, end);
    assert_eq!(late.lines, watcher.lines);
    bot.settle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_a_command_prints_is_redacted_live_and_kept() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let secret = "hunter2-of-the-console";
    std::fs::write(
        bot.estate_file("dev", "app", ".fail-plan"),
        format!("cannot log in: password={secret}\n"),
    )
    .unwrap();
    let _pr = planned_pr(&bot, 1).await;

    let plan = command(&bot, "plan", "app@dev")
        .await
        .expect("its plan ran");
    assert_eq!(
        (&plan["state"], &plan["ending"], &plan["succeeded"]),
        (&"ended".into(), &"exited:1".into(), &false.into()),
        "{plan:#}"
    );
    let kept = bot.get_json(plan["api"].as_str().unwrap()).await;
    let output = kept["output"].as_str().unwrap();
    assert!(!output.contains(secret), "{output}");
    insta::assert_snapshot!(output.lines().last().unwrap(), @"cannot log in: password=[redacted]");

    let mut watcher = Watcher::open(&bot, plan["live"].as_str().unwrap()).await;
    watcher.until_end().await;
    assert_eq!(watcher.lines, output.lines().collect::<Vec<_>>());
    let (_, page, _) = bot.get_page("/repos/github/acme/infra/pulls/1").await;
    assert!(!page.contains(secret));
    assert!(page.contains("password=[redacted]"), "{page}");
}

#[tokio::test]
async fn a_command_of_another_pull_request_or_none_at_all_is_not_found() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let _pr = planned_pr(&bot, 1).await;
    let plan = command(&bot, "plan", "app@dev")
        .await
        .expect("its plan ran");
    let id = plan["id"].as_i64().unwrap();
    for path in [
        format!("/api/v1/repos/github/acme/infra/pulls/2/commands/{id}"),
        format!("/repos/github/acme/infra/pulls/2/commands/{id}/live"),
        "/api/v1/repos/github/acme/infra/pulls/1/commands/999999".to_owned(),
    ] {
        let (status, body, _) = bot.get_page(&path).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_on_the_replica_not_running_the_command_follows_it_through_the_database() {
    let bot = Bot::start_replicated(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let pr = approved_pr(&bot, 1).await;
    bot.pause_apply("dev", "app", "before");
    pr.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;
    let other = 1 - bot.replica_running_a_job().await;

    let apply = bot
        .until("the apply of app@dev is listed", || async {
            command(&bot, "apply", "app@dev").await
        })
        .await;
    let mut watcher = Watcher::open_on(&bot, other, apply["live"].as_str().unwrap()).await;
    watcher.until_line("paused before applying").await;
    assert_eq!(
        bot.get_json(apply["api"].as_str().unwrap()).await["state"],
        "running",
        "the line came before the end"
    );

    bot.resume_apply("dev", "app");
    let end = watcher.until_end().await;
    assert_eq!(end["ending"], "exited:0", "{end}");
    assert!(
        watcher.lines.iter().any(|l| l.contains("going on")),
        "{:#?}",
        watcher.lines
    );
    let kept = bot.get_json(apply["api"].as_str().unwrap()).await;
    assert_eq!(
        kept["output"].as_str().unwrap().lines().collect::<Vec<_>>(),
        watcher.lines
    );
    bot.settle().await;
}
