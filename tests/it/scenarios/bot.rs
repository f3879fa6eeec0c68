//! The bot end to end: the real `wavegate serve` binary, the fake forge over
//! HTTP, real git repositories and real plan subprocesses. Each test is one
//! story; the `Bot` below is the small language they are told in.

use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::{self, bot::*};
use serde_json::{json, Value};
use std::path::Path;
use support::fake_forge::FORGEJO_BOT_TOKEN;
use wavegate::store::JobStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_pr_gets_report_and_check_then_push_edits_the_same_comment() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();

    let pr = bot.open_pr(&repo, 1, "change");
    let (status, body) = bot
        .deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;

    let first = bot.report(&repo, 1);
    assert!(first.author_is_bot, "{first:?}");
    assert!(
        first.body.contains("app@dev") && first.body.contains("dns@prod"),
        "{}",
        first.body
    );
    let first_digest = digest_in(&first.body);
    let checks = bot.forge.check_runs(&repo, &pr.head_sha);
    assert_eq!(checks.len(), 1, "one check run per head: {checks:#?}");
    assert_eq!(checks[0].name, "wavegate/plan");
    assert_eq!(checks[0].conclusion.as_deref(), Some("action_required"));
    assert!(checks[0].output["summary"]
        .as_str()
        .unwrap()
        .contains(&first_digest));

    // Push: one more commit changes the app's resources; the same comment is edited.
    bot.branch_bigger_app("change-2");
    let mut handle = bot.pr(&repo, 1);
    let pushed = handle.push("change-2").await;

    let second = bot.report(&repo, 1);
    assert_eq!(second.id, first.id, "the report is edited in place");
    let second_digest = digest_in(&second.body);
    assert_ne!(
        second_digest, first_digest,
        "the digest moved with the push"
    );
    let checks = bot.forge.check_runs(&repo, &pushed.head_sha);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].conclusion.as_deref(), Some("action_required"));
    assert!(checks[0].output["summary"]
        .as_str()
        .unwrap()
        .contains(&second_digest));
    bot.assert_conformant();

    // Nothing secret reached the log: webhook secret, Forgejo token, installation tokens.
    let log = bot.log();
    for secret in [GITHUB_SECRET, FORGEJO_SECRET, FORGEJO_BOT_TOKEN, "ghs_fake"] {
        assert!(!log.contains(secret), "`{secret}` is in the server log");
    }
    let health = bot.http.get(bot.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_webhook_plans_once() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 2, "change");
    let (event, body) = support::github_pull_request("opened", &repo, &pr);
    let signature = support::sign_github(GITHUB_SECRET, &body);

    let first = bot
        .post_github(&event, "same-delivery", Some(&signature), body.clone())
        .await;
    let again = bot
        .post_github(&event, "same-delivery", Some(&signature), body)
        .await;
    assert_eq!(first.1["status"], "queued");
    assert_eq!(
        (again.0, again.1["status"].as_str()),
        (202, Some("duplicate"))
    );

    let jobs = bot.settle().await;
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    assert_eq!(bot.store().await.delivery_count().await.unwrap(), 1);
    bot.report(&repo, 2);
    let mut planned = bot.plans_run();
    let runs = planned.len();
    planned.dedup();
    planned.sort();
    planned.dedup();
    assert_eq!(
        planned.len(),
        runs,
        "every member planned once: {planned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_or_missing_signatures_are_refused_and_nothing_is_stored() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 3, "change");
    let (event, body) = support::github_pull_request("opened", &repo, &pr);

    let forged = support::sign_github("not-the-secret", &body);
    let (status, answer) = bot
        .post_github(&event, "d-forged", Some(&forged), body.clone())
        .await;
    assert_eq!(status, 401, "{answer}");
    let (status, answer) = bot
        .post_github(&event, "d-missing", None, body.clone())
        .await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("signature"),
        "{answer}"
    );
    let (status, _) = bot.post_github(&event, "d-empty", Some(""), body).await;
    assert_eq!(status, 401);

    let store = bot.store().await;
    assert_eq!(store.delivery_count().await.unwrap(), 0);
    assert!(store.jobs().await.unwrap().is_empty());
    assert!(bot.forge.comments(&repo, 3).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_gets_a_comment_saying_what_to_fix_and_a_failed_check() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.example.branch(
        "broken",
        "main",
        &[(
            "wavegate.toml",
            Some("[[component]]\nname = \"app\"\ndir = \"infra/app\"\ncolour = \"blue\"\n"),
        )],
    );
    let pr = bot.opened(&repo, 4, "broken").await;
    let jobs = bot.jobs().await;
    assert_eq!(
        jobs[0].status,
        JobStatus::Done,
        "a repository mistake is not retried: {jobs:#?}"
    );
    assert_eq!(jobs[0].attempts, 1);

    // The report names the field and says what to do.
    insta::assert_snapshot!(redact(&pr.report()), @r"
    <!-- wavegate:report -->
    ## wavegate plan

    ❌ **wavegate.toml cannot be read**

    At `[short]`, `wavegate.toml`: line 4: unknown field `colour`, expected one of `name`, `dir`, `discover`, `paths`, `depends_on`, `inputs`, `stages`, `plan`, `apply`, `outputs`, `timeout`, `kind`, `group`, `quiet`, `shared`.

    Nothing was planned, so there is nothing to approve yet.

    **What to do:** Use only the fields in the wavegate.toml reference (docs/configuration.md); check the spelling. Push the fix to this branch and wavegate plans again.
    ");
    assert_eq!(pr.plan_state(), "failure");
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_pr_is_refused_with_the_reason_and_nothing_runs() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 5, "change");
    let (event, body) = support::github_pull_request("opened", &repo, &pr);
    let mut payload: Value = serde_json::from_slice(&body).unwrap();
    payload["pull_request"]["head"]["repo"]["full_name"] = json!("mallory/infra");
    payload["pull_request"]["head"]["repo"]["clone_url"] =
        json!("https://fork.invalid/mallory/infra.git");
    bot.deliver_github((event, serde_json::to_vec(&payload).unwrap()))
        .await;
    bot.settle().await;

    let pr = bot.pr(&repo, 5);
    insta::assert_snapshot!(redact(&pr.report()), @"
    <!-- wavegate:report -->
    ## wavegate plan

    ❌ **Pull requests from forks are not planned here**

    This pull request comes from `https://fork.invalid/mallory/infra.git`. Planning runs the repository's plan commands on the pull request's code, and `policy.allow_forks` is not `true` in `wavegate.toml` on `main`, so wavegate did not run anything.

    **What to do:** push the branch to this repository and open the pull request from there, or ask a maintainer to set `allow_forks = true` under `[policy]` on the base branch if running forks' code is acceptable.
    ");
    assert_eq!(pr.plan_state(), "failure");
    assert_eq!(
        bot.plans_run(),
        Vec::<String>::new(),
        "no plan command ran for the fork"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgejo_pr_gets_the_comment_and_a_commit_status() {
    let bot = Bot::start().await;
    let url = format!("file://{}", bot.example.repo.display());
    let repo = bot.forge.add_forgejo_repo("acme/infra", &url);
    let pr = bot.open_pr(&repo, 6, "change");
    let (status, body) = bot
        .deliver_forgejo(support::forgejo_pull_request("opened", &repo, &pr))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;

    let report = bot.report(&repo, 6);
    assert!(report.body.contains("sha256:"), "{}", report.body);
    let statuses = bot.forge.statuses(&repo, &pr.head_sha);
    let last = statuses.last().expect("a commit status");
    assert_eq!(
        (last.context.as_str(), last.state.as_str()),
        ("wavegate/plan", "pending")
    );
    assert!(last.description.chars().count() <= 140);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_while_a_job_is_leased_runs_it_once_after_restart() {
    let mut bot = Bot::start_with(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let repo = bot.github_repo();
    // The first plan of app@dev hangs (until the server is killed); later ones go through.
    bot.branch_hanging_first_plan("slow");
    let pr = bot.open_pr(&repo, 7, "slow");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    bot.until_plan_hangs().await;

    // The hanging plan dies with its server: nothing it started is left.
    bot.kill();
    bot.until_no_command_survives().await;
    let held = bot.jobs().await;
    assert_eq!((held.len(), held[0].status), (1, JobStatus::Running));
    assert!(
        bot.forge.comments(&repo, 7).is_empty(),
        "nothing was posted before the crash"
    );

    bot.start_server().await;
    let jobs = bot.settle().await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].status, jobs[0].attempts),
        (JobStatus::Done, 2),
        "{jobs:#?}"
    );
    bot.report(&repo, 7);
    let checks = bot.forge.check_runs(&repo, &pr.head_sha);
    assert_eq!(
        checks.last().unwrap().conclusion.as_deref(),
        Some("action_required")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_for_a_head_that_moved_on_is_skipped_as_superseded() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.branch_bigger_app("change-2");
    let opened = bot.open_pr(&repo, 8, "change");
    // The push lands on the forge before wavegate gets to the first job.
    let pushed = bot.forge.push(&repo, 8, &bot.rev("change-2"));
    bot.deliver_github(support::github_pull_request("opened", &repo, &opened))
        .await;
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    let jobs = bot.settle().await;

    assert_eq!(jobs.len(), 2, "{jobs:#?}");
    assert_eq!(jobs[0].status, JobStatus::Skipped);
    assert!(
        jobs[0]
            .outcome
            .as_deref()
            .unwrap_or("")
            .contains("superseded"),
        "{jobs:#?}"
    );
    assert_eq!(jobs[1].status, JobStatus::Done);
    assert!(
        bot.forge.check_runs(&repo, &opened.head_sha).is_empty(),
        "nothing posted for the old head"
    );
    assert_eq!(bot.forge.check_runs(&repo, &pushed.head_sha).len(), 1);
    bot.report(&repo, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_error_fails_the_attempt_and_the_retry_posts_the_report() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 9, "change");
    // A refusal the client does not retry by itself: the job's attempt fails.
    bot.forge
        .fail_next("POST", "/repos/acme/infra/issues/9/comments", 422, &[]);
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    let jobs = bot.settle().await;

    assert_eq!(
        (jobs[0].status, jobs[0].attempts),
        (JobStatus::Done, 2),
        "{jobs:#?}"
    );
    assert!(
        jobs[0].last_error.as_deref().unwrap_or("").contains("422"),
        "the error is kept: {jobs:#?}"
    );
    bot.report(&repo, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_flow_creates_the_app_and_the_bot_uses_it_without_a_restart() {
    let bot = Bot::start_without_app().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 10, "change");

    // Before: a delivery signed with the App's future secret is refused.
    let early = bot
        .deliver_github_signed(
            support::fake_forge::MANIFEST_WEBHOOK_SECRET,
            support::github_pull_request("opened", &repo, &pr),
        )
        .await;
    assert_eq!(early.0, 401, "{early:?}");

    // Only the operator, who reads the server's log, can start the flow.
    let refused = bot.http.get(bot.url("/setup")).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    let log = bot.log();
    let at = log
        .find("/setup?token=")
        .expect("the log names the set-up link");
    let token: String = log[at + 13..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    let page = bot
        .http
        .get(bot.url(&format!("/setup?token={token}")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let action = format!("{}/settings/apps/new?state=", bot.forge.url());
    let at = page
        .find(&action)
        .unwrap_or_else(|| panic!("the form posts to the forge: {page}"));
    let state: String = page[at + action.len()..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    assert!(page.contains("name=\"manifest\""), "{page}");
    assert!(
        page.contains(&format!("http://127.0.0.1:{}/webhooks/github", bot.port)),
        "{page}"
    );
    assert!(
        page.contains("&quot;checks&quot;:&quot;write&quot;"),
        "{page}"
    );

    // A callback this server did not start is refused.
    let forged = bot
        .http
        .get(bot.url(&format!(
            "/setup/callback?code={}&state=0000",
            bot.forge.manifest_code()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 400);

    let done = bot
        .http
        .get(bot.url(&format!(
            "/setup/callback?code={}&state={state}",
            bot.forge.manifest_code()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    assert!(done.text().await.unwrap().contains("installations/new"));

    let stored = bot.dir.path().join("data/github-app.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&stored).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        !bot.log().contains("BEGIN RSA PRIVATE KEY"),
        "the key never reaches the log"
    );

    // After: the same server verifies with the new secret and posts as the new App.
    let (status, body) = bot
        .deliver_github_signed(
            support::fake_forge::MANIFEST_WEBHOOK_SECRET,
            support::github_pull_request("opened", &repo, &pr),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;
    assert!(bot.report(&repo, 10).author_is_bot);
    let again = bot.http.get(bot.url("/setup")).send().await.unwrap();
    assert_eq!(
        again.status(),
        409,
        "a configured server refuses a second App"
    );
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_published_fixture_is_accepted_or_ignored_as_documented() {
    let bot = Bot::start().await;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    let github = [
        ("pull_request/opened.payload.json", "pull_request", "queued"),
        (
            "pull_request/opened.with-null-body.json",
            "pull_request",
            "queued",
        ),
        (
            "pull_request/synchronize.payload.json",
            "pull_request",
            "queued",
        ),
        (
            "pull_request/closed.payload.json",
            "pull_request",
            "recorded",
        ),
        (
            "issue_comment/created.payload.json",
            "issue_comment",
            "ignored",
        ),
        (
            "issue_comment/created.with-installation.payload.json",
            "issue_comment",
            "ignored",
        ),
        (
            "issue_comment/edited.payload.json",
            "issue_comment",
            "ignored",
        ),
        (
            "pull_request_review/submitted.payload.json",
            "pull_request_review",
            "recorded",
        ),
        (
            "installation/created.payload.json",
            "installation",
            "recorded",
        ),
        ("ping/with-app_id.payload.json", "ping", "recorded"),
        // A re-run of a check on a head with no pull request: nothing to plan.
        (
            "check_run/rerequested.payload.json",
            "check_run",
            "recorded",
        ),
    ];
    for (n, (file, event, expected)) in github.iter().enumerate() {
        let body = std::fs::read(fixtures.join("github/webhooks").join(file)).unwrap();
        let signature = support::sign_github(GITHUB_SECRET, &body);
        let (status, reply) = bot
            .post_github(event, &format!("fixture-{n}"), Some(&signature), body)
            .await;
        assert_eq!(
            (status, reply["status"].as_str()),
            (202, Some(*expected)),
            "{file}: {reply}"
        );
    }
    let forgejo = [
        (
            "forgejo-pull_request-opened.json",
            "x-forgejo",
            "pull_request",
            "pull_request",
            "queued",
        ),
        (
            "forgejo-pull_request-synchronized.json",
            "x-forgejo",
            "pull_request",
            "pull_request_sync",
            "queued",
        ),
        (
            "forgejo-pull_request-merged.json",
            "x-forgejo",
            "pull_request",
            "pull_request",
            // A merge starts an apply run.
            "queued",
        ),
        (
            "gitea-pull_request_comment.json",
            "x-gitea",
            "issue_comment",
            "pull_request_comment",
            "queued",
        ),
        (
            "gitea-issue_comment-on-issue.json",
            "x-gitea",
            "issue_comment",
            "issue_comment",
            "ignored",
        ),
        (
            "gitea-pull_request_review_approved.json",
            "x-gitea",
            "pull_request_approved",
            "pull_request_review_approved",
            "queued",
        ),
    ];
    for (n, (file, prefix, event, event_type, expected)) in forgejo.iter().enumerate() {
        let body = std::fs::read(fixtures.join("forgejo/webhooks").join(file)).unwrap();
        let response = bot
            .http
            .post(bot.url("/webhooks/forgejo"))
            .header(format!("{prefix}-event"), *event)
            .header(format!("{prefix}-event-type"), *event_type)
            .header(format!("{prefix}-delivery"), format!("fj-fixture-{n}"))
            .header(
                format!("{prefix}-signature"),
                support::sign_forgejo(FORGEJO_SECRET, &body),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, reply) = answer(response).await;
        assert_eq!(
            (status, reply["status"].as_str()),
            (202, Some(*expected)),
            "{file}: {reply}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_or_malformed_deliveries_are_refused_with_the_reason() {
    let bot = Bot::start().await;
    // A delivery announcing 26 MiB is refused before its body is read.
    assert_eq!(bot.announce_too_large().await, "HTTP/1.1 413");

    let garbage = br#"{"action": "opened", "pull_request": {"number": "two"}}"#.to_vec();
    let signature = support::sign_github(GITHUB_SECRET, &garbage);
    let (status, reply) = bot
        .post_github("pull_request", "garbage", Some(&signature), garbage)
        .await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("pull_request"),
        "{reply}"
    );

    // A number no forge issues is the payload's fault (400), not a failure
    // to store it (500).
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 1, "change");
    let (_, body) = support::github_pull_request("opened", &repo, &pr);
    let mut payload: serde_json::Value = serde_json::from_slice(&body).unwrap();
    payload["pull_request"]["number"] = serde_json::json!(1u64 << 63);
    let huge = serde_json::to_vec(&payload).unwrap();
    let signature = support::sign_github(GITHUB_SECRET, &huge);
    let (status, reply) = bot
        .post_github("pull_request", "huge-number", Some(&signature), huge)
        .await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains(
            "pull_request.number: 9223372036854775808 is larger than 9223372036854775807"
        ),
        "{reply}"
    );

    let body = br#"{"zen": "hi"}"#.to_vec();
    let signature = support::sign_github(GITHUB_SECRET, &body);
    let no_event = bot
        .http
        .post(bot.url("/webhooks/github"))
        .header("x-github-delivery", "no-event")
        .header("x-hub-signature-256", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, reply) = answer(no_event).await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("x-github-event"),
        "{reply}"
    );
    assert_eq!(bot.store().await.delivery_count().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plan_is_reported_with_a_failed_check_and_not_retried() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.example.branch(
        "failing",
        "change",
        &[(
            "infra/app/.fail-plan",
            Some("provider credentials expired\n"),
        )],
    );
    let pr = bot.opened(&repo, 11, "failing").await;
    let jobs = bot.jobs().await;
    assert_eq!(
        (jobs[0].status, jobs[0].attempts),
        (JobStatus::Done, 1),
        "{jobs:#?}"
    );

    let report = pr.report();
    assert!(report.contains("failed to plan"), "{report}");
    assert!(
        report.contains("provider credentials expired"),
        "the command's own words: {report}"
    );
    let check = pr.plan_check();
    assert_eq!(check.state, "failure");
    assert!(check.title.contains("failed to plan"), "{check:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delivery_for_an_old_head_does_not_displace_the_new_one() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.branch_bigger_app("change-2");
    let opened = bot.open_pr(&repo, 12, "change");
    let pushed = bot.forge.push(&repo, 12, &bot.rev("change-2"));
    // The push's delivery arrives first; the opening's arrives late.
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    bot.deliver_github(support::github_pull_request("opened", &repo, &opened))
        .await;
    let jobs = bot.settle().await;

    assert_eq!(
        (jobs[0].status, jobs[1].status),
        (JobStatus::Done, JobStatus::Skipped),
        "{jobs:#?}"
    );
    assert!(bot.forge.check_runs(&repo, &opened.head_sha).is_empty());
    let check = bot.forge.check_runs(&repo, &pushed.head_sha).pop().unwrap();
    assert_eq!(check.conclusion.as_deref(), Some("action_required"));
    let record = bot
        .store()
        .await
        .pr(&repo.repo_ref().id, wavegate::model::PrNumber(12))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.head_sha.as_str(),
        pushed.head_sha,
        "the store follows the forge, not the late delivery"
    );
    assert_eq!(
        record.report_head.as_ref().map(|s| s.as_str()),
        Some(pushed.head_sha.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wavegate_plan_markdown_prints_the_comment_the_bot_posts() {
    let bot = Bot::start().await;
    let handle = planned_pr(&bot, 9).await;
    let pr = handle.state();
    let posted = handle.report();
    let repo_dir = bot.example.repo.display().to_string();
    let cli = bot.example.wavegate(&[
        "plan",
        "--repo",
        &repo_dir,
        "--base",
        &pr.base_sha,
        "--head",
        &pr.head_sha,
        "--markdown",
    ]);
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    // Only the server has a ledger: its section also names the ledger head.
    let ledger_head = posted
        .lines()
        .find(|l| l.starts_with("Gate ledger head when this was written"))
        .expect("the bot names the ledger head");
    let without_ledger_head = posted.replace(&format!("\n\n{ledger_head}"), "");
    assert_eq!(without_ledger_head.trim_end(), cli.stdout.trim_end());
}

#[test]
fn serve_names_an_unreachable_database_with_its_cause_and_warns_about_misspelt_settings() {
    let data = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("WAVEGATE_LISTEN", "127.0.0.1:0")
        .env("WAVEGATE_DATA_DIR", data.path())
        // Nothing listens on port 1.
        .env(
            "WAVEGATE_DATABASE_URL",
            "postgres://wavegate:pw@127.0.0.1:1/wavegate",
        )
        .env("WAVEGATE_SANDBOX_NETWROK", "egress")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(9),
        "a refused connection is reported at once, not after the pool's timeout: {:?}",
        started.elapsed()
    );
    let log = format!("{stdout}{stderr}");
    assert!(
        log.contains("opening the database at postgres://wavegate:***@127.0.0.1:1/wavegate"),
        "progress is said before anything can hang: {log}"
    );
    assert!(
        log.contains(
            "cannot connect to the database at `postgres://wavegate:***@127.0.0.1:1/wavegate`"
        ),
        "{log}"
    );
    assert!(
        log.contains("Connection refused"),
        "the cause is named: {log}"
    );
    assert!(
        !log.contains(":pw@"),
        "the password is never printed: {log}"
    );
    assert!(
        log.contains("WAVEGATE_SANDBOX_NETWROK is not a setting wavegate reads, so it is ignored; did you mean WAVEGATE_SANDBOX_NETWORK?"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_links_what_the_digest_binds_to_the_docs_this_server_serves() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_URL", "https://wavegate.example.test/")]).await;
    let pr = planned_pr(&bot, 41).await;
    assert!(
        pr.section("Approve").contains(
            "[what each digest binds](https://wavegate.example.test/docs/plan-files.md#digests)"
        ),
        "{}",
        pr.report()
    );
    let docs = |page: &str| {
        let url = format!("http://127.0.0.1:{}/docs/{page}", bot.port);
        let http = bot.http.clone();
        async move {
            let answer = http.get(url).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let (status, page) = docs("plan-files.md").await;
    assert_eq!(status, 200);
    assert!(page.contains("<h2 id=\"digests\">Digests</h2>"), "{page}");
    let (status, page) = docs("secrets.md").await;
    assert_eq!(status, 404);
    assert!(
        page.contains("the docs are: approvals-and-applying.md"),
        "{page}"
    );
}
