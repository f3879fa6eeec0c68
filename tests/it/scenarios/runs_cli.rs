//! `wavegate runs` and `wavegate run show` run as the real binary against a
//! running server with its pages open: a table of where each pull request
//! stands and what it waits for with the comment to copy, a run by stage
//! and wave with its ledger facts; and every failure one line naming the
//! problem and its fix.

use crate::support::bot::*;
use crate::support::login::LOGIN_ENV;
use crate::support::pr::*;
use crate::support::redact::redact;
use std::process::Command;

/// `wavegate ARGS` with `--server` this bot; stdout, or stderr on failure.
fn cli(server: &str, args: &[&str]) -> (bool, String) {
    let (command, rest) = args.split_first().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg(command)
        .args(if *command == "run" {
            &rest[..1]
        } else {
            &[][..]
        })
        .args(["--server", server])
        .args(if *command == "run" { &rest[1..] } else { rest })
        .env_remove("WAVEGATE_API_TOKEN")
        .output()
        .unwrap();
    let text = if output.status.success() {
        output.stdout
    } else {
        output.stderr
    };
    (
        output.status.success(),
        redact(&String::from_utf8(text).unwrap()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_lists_who_waits_for_what_and_run_show_prints_a_run_by_wave() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let _open = planned_pr(&bot, 2).await;
    let merged = approved_pr(&bot, 1).await;
    merged.merge().await;
    let server = bot.url("");

    let (ok, out) = cli(&server, &["runs", "--repo", "github/acme/infra"]);
    assert!(ok, "{out}");
    insta::assert_snapshot!(out, @"
    PULL         STATE    RUN             REPORT
    #2           waiting  -               awaiting-approval
    #1 (closed)  waiting  run 1: waiting  approved

    #2 waits for an approval of its plan
      comment: /approve sha256:[digest]

    #1 waits for /approve prod
      comment: /approve prod sha256:[digest]
    ");

    let (ok, out) = cli(
        &server,
        &["runs", "--repo", "github/acme/infra", "--state", "done"],
    );
    assert!(ok, "{out}");
    insta::assert_snapshot!(out, @"github:acme/infra: no pull request here");

    let (ok, out) = cli(&server, &["run", "show", "github/acme/infra", "1"]);
    assert!(ok, "{out}");
    insta::assert_snapshot!(out, @"
    github:acme/infra#1: waiting (closed)
    head [short] onto main
    report: approved, digest sha256:[digest]

    apply run 1: waiting (at dev wave 1)
    approved by rev-bob
    waits for /approve prod
    to go on, comment: /approve prod sha256:[digest]

    STAGE  WAVE  MEMBER    STATE
    dev    1     app@dev   applied
    prod   1     app@prod  waiting: stage prod waits for `/approve prod`
    prod   2     dns@prod  waiting: stage prod waits for `/approve prod`

    ledger facts
    SEQ  GATE       FACT      BY
    2    pr-1       pending   wavegate[bot]
    3    pr-1       approved  rev-bob
    4    pr-1-prod  pending   wavegate[bot]
    ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_names_the_problem_and_its_fix() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    planned_pr(&bot, 1).await;
    let server = bot.url("");

    let (ok, out) = cli(&server, &["run", "show", "github/acme/infra", "9"]);
    assert!(!ok);
    insta::assert_snapshot!(out, @"error: http://127.0.0.1:[port] has no such page: wavegate has heard of no pull request #9 in github:acme/infra");
    let (ok, out) = cli(&server, &["runs", "--repo", "github/acme/nothing"]);
    assert!(!ok);
    insta::assert_snapshot!(out, @"error: http://127.0.0.1:[port] has no such page: wavegate knows no repository github:acme/nothing: none of its events reached this server");
    let (ok, out) = cli(&server, &["runs", "--repo", "acme/infra"]);
    assert!(!ok);
    insta::assert_snapshot!(out, @"error: `acme/infra` is not a repository; write it as forge/owner/name, e.g. github/acme/infra");
    let (ok, out) = cli(
        &bot.url("/healthz"),
        &["runs", "--repo", "github/acme/infra"],
    );
    assert!(!ok);
    insta::assert_snapshot!(out, @"error: http://127.0.0.1:[port]/healthz/api/v1/repos/github/acme/infra/pulls answered 404 with something that is not wavegate's JSON (is --server a wavegate server, and are its pages on, WAVEGATE_PUBLIC_PAGES=on?): (nothing)");

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let (ok, out) = cli(&closed, &["runs", "--repo", "github/acme/infra"]);
    assert!(!ok);
    assert!(
        out.starts_with("error: http://127.0.0.1:[port] cannot be reached (")
            && out.ends_with("); check --server and that wavegate runs there\n"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_pages_need_a_login_asks_for_a_token() {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    planned_pr(&bot, 1).await;
    let (ok, out) = cli(&bot.url(""), &["runs", "--repo", "github/acme/infra"]);
    assert!(!ok);
    insta::assert_snapshot!(out, @"error: http://127.0.0.1:[port] wants to know who asks (log in with the forge to see github:acme/infra's pages); set WAVEGATE_API_TOKEN to an API token of that server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_token_of_the_server_the_cli_reads_pages_behind_a_login() {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    planned_pr(&bot, 1).await;
    let made = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["api-token", "create", "terminal", "--database"])
        .arg(bot.database_url())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let token = String::from_utf8(made.stdout).unwrap().trim().to_owned();

    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args([
            "runs",
            "--server",
            &bot.url(""),
            "--repo",
            "github/acme/infra",
        ])
        .env("WAVEGATE_API_TOKEN", &token)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    insta::assert_snapshot!(redact(&String::from_utf8(output.stdout).unwrap()), @"
    PULL  STATE    RUN  REPORT
    #1    waiting  -    awaiting-approval

    #1 waits for an approval of its plan
      comment: /approve sha256:[digest]
    ");
}

#[test]
fn with_wavegate_api_token_set_each_call_carries_it() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("http://{}", listener.local_addr().unwrap());
    let heard = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = vec![0; 4096];
        let n = stream.read(&mut request).unwrap();
        let body = r#"{"error":"this token is not one of this server's"}"#;
        write!(
            stream,
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        String::from_utf8_lossy(&request[..n]).to_lowercase()
    });
    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["runs", "--server", &server, "--repo", "github/acme/infra"])
        .env("WAVEGATE_API_TOKEN", "wgt_example")
        .output()
        .unwrap();
    let request = heard.join().unwrap();
    assert!(
        request.starts_with("get /api/v1/repos/github/acme/infra/pulls http/1.1"),
        "{request}"
    );
    assert!(
        request.contains("authorization: bearer wgt_example"),
        "{request}"
    );
    assert!(!output.status.success());
    insta::assert_snapshot!(redact(&String::from_utf8(output.stderr).unwrap()), @"error: http://127.0.0.1:[port] refused the token in WAVEGATE_API_TOKEN (this token is not one of this server's); ask its operator for a token that is still valid");
}
