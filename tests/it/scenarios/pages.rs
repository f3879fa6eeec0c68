//! The pages and the JSON API over the real binary: closed unless the
//! operator opens them; opened, a repository lists its pull requests by
//! where they stand, a pull request shows its run by stage and wave with
//! each member's state and the ledger facts of its gates, and the JSON says
//! the same. Every answer forbids scripts.

use crate::support::bot::*;
use crate::support::pr::*;
use serde_json::Value;

fn numbers(list: &Value) -> Vec<u64> {
    list["pulls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pull| pull["number"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn the_pages_are_closed_unless_the_operator_opens_them() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_URL", "https://wavegate.example")]).await;
    let pr = approved_pr(&bot, 1).await;
    assert_eq!(pr.plan_check().link, None, "no page to link");
    for path in [
        "/repos",
        "/repos/github/acme/infra/pulls/1",
        "/api/v1/repos/github/acme/infra/pulls",
    ] {
        let (status, body, _) = bot.get_page(path).await;
        assert_eq!(status, 404, "{path}");
        assert!(body.contains("WAVEGATE_PUBLIC_PAGES=on"), "{path}: {body}");
    }
}

#[tokio::test]
async fn merge_then_the_pages_show_the_run_waiting_at_prod_and_who_approved() {
    let bot = Bot::start_with(&[
        ("WAVEGATE_PUBLIC_PAGES", "on"),
        ("WAVEGATE_PUBLIC_URL", "https://wavegate.example"),
    ])
    .await;
    // #2 is opened while #1 is still open, so it too has a change to approve.
    let open = planned_pr(&bot, 2).await;
    let merged = approved_pr(&bot, 1).await;
    merged.merge().await;

    // Each check links the pull request's page.
    let page = |n: u64| {
        Some(format!(
            "https://wavegate.example/repos/github/acme/infra/pulls/{n}"
        ))
    };
    // (#2's head is #1's, and a commit's checks are shared: its newest is #1's.)
    assert_eq!(merged.plan_check().link, page(1));
    assert_eq!(merged.apply_check().link, page(1));
    // The report and the bot's news link the page, at the run.
    let run_link = "[On wavegate](https://wavegate.example/repos/github/acme/infra/pulls/1#run)";
    assert!(merged.report().contains(run_link), "{}", merged.report());
    let news = merged.last_reply();
    assert!(news.contains(run_link), "{news}");
    assert!(
        open.report().contains(
            "[On wavegate](https://wavegate.example/repos/github/acme/infra/pulls/2#report)"
        ),
        "{}",
        open.report()
    );

    // The server says what it runs and how.
    let server = bot.get_json("/api/v1/server").await;
    assert_eq!(server["version"], env!("CARGO_PKG_VERSION"));
    let sandbox = server["sandbox"].as_str().unwrap();
    assert!(sandbox.starts_with("bubblewrap"), "{server:#}");
    assert_eq!(server["sandbox_problem"], Value::Null);
    assert!(
        server["forges"][0]
            .as_str()
            .unwrap()
            .starts_with("GitHub App, API at http"),
        "{server:#}"
    );
    let (status, page, _) = bot.get_page("/server").await;
    assert_eq!(status, 200);
    assert!(page.contains("Execution profiles"), "{page}");

    let repos = bot.get_json("/api/v1/repos").await;
    assert_eq!(repos[0]["forge"], "github");
    assert_eq!(repos[0]["name"], "acme/infra");

    // #1's run applied dev and waits at prod's gate; #2 awaits its approval.
    let pulls = "/api/v1/repos/github/acme/infra/pulls";
    assert_eq!(numbers(&bot.get_json(pulls).await), [2, 1]);
    assert_eq!(
        numbers(&bot.get_json(&format!("{pulls}?state=waiting")).await),
        [2, 1]
    );
    assert!(numbers(&bot.get_json(&format!("{pulls}?state=done")).await).is_empty());
    assert_eq!(
        numbers(&bot.get_json(&format!("{pulls}?before=2")).await),
        [1]
    );
    let (status, body, _) = bot.get_page(&format!("{pulls}?state=stuck")).await;
    assert_eq!(status, 400);
    assert!(
        body.contains("`stuck` is not a state to list; use waiting, applying, failed or done"),
        "{body}"
    );

    for (query, says) in [
        (
            "?before=10000000000000000000",
            "is past any pull request number",
        ),
        ("?before=99999999999999999999", "number too large"),
        ("?page=2", "unknown field `page`"),
        ("?before=newest", "before"),
    ] {
        let (status, body, _) = bot.get_page(&format!("{pulls}{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        let error: Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{query}: {body}"));
        assert!(
            error["error"].as_str().unwrap().contains(says),
            "{query}: {body}"
        );
    }

    let pull = bot.get_json(&format!("{pulls}/1")).await;
    assert_eq!(pull["state"], "waiting");
    let run = &pull["run"];
    assert_eq!(run["status"], "waiting");
    assert_eq!(run["approved_by"], serde_json::json!(["rev-bob"]));
    assert_eq!(run["waiting_for"], "/approve prod");
    let member = |stage: usize, name: &str| -> Value {
        run["stages"][stage]["waves"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|wave| wave.as_array().unwrap().iter().cloned())
            .find(|m| m["member"] == name)
            .unwrap_or_else(|| panic!("{name} in {run:#}"))
    };
    assert_eq!(member(0, "app@dev")["state"], "applied");
    assert_eq!(
        member(1, "app@prod")["state"],
        "waiting: stage prod waits for `/approve prod`"
    );
    let approval = pull["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|fact| fact["kind"] == "approved" && fact["gate"] == "pr-1")
        .unwrap_or_else(|| panic!("an approval of pr-1 in {pull:#}"));
    assert_eq!(approval["by"], "rev-bob");
    assert_eq!(approval["counts"], true);

    // The page says the same, and may run no script.
    let (status, page, headers) = bot.get_page("/repos/github/acme/infra/pulls/1").await;
    assert_eq!(status, 200);
    for shown in [
        "Apply run",
        "app@dev",
        "applied",
        "rev-bob",
        "/approve prod",
    ] {
        assert!(page.contains(shown), "{shown} in\n{page}");
    }
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.starts_with("default-src 'none';"), "{policy}");
    let (status, list, _) = bot.get_page("/repos/github/acme/infra?state=waiting").await;
    assert_eq!(status, 200);
    assert!(
        list.contains("href=\"/repos/github/acme/infra/pulls/2\""),
        "{list}"
    );

    let (status, body, _) = bot.get_page("/repos/github/acme/elsewhere").await;
    assert_eq!(status, 404);
    assert!(
        body.contains("wavegate knows no repository github:acme/elsewhere"),
        "{body}"
    );
    let (status, body, _) = bot
        .get_page("/api/v1/repos/github/acme/infra/pulls/9")
        .await;
    assert_eq!(status, 404);
    assert!(body.contains("no pull request #9"), "{body}");

    // A Forgejo commit status links its pull request's page the same way.
    let on_forgejo = planned_pr_on_forgejo(&bot, 3).await;
    assert_eq!(
        on_forgejo.plan_check().link.as_deref(),
        Some("https://wavegate.example/repos/forgejo/acme/infra/pulls/3")
    );
    // Its change is #1's, merged already (both repositories are the same
    // estate): nothing to plan, and nobody is waited for.
    let pull = bot
        .get_json("/api/v1/repos/forgejo/acme/infra/pulls/3")
        .await;
    assert_eq!(pull["report_status"], "empty");
    assert_eq!(pull["state"], Value::Null);
}

#[tokio::test]
async fn the_ledger_page_verifies_the_chain_and_says_when_a_fact_was_forged() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let _pr = approved_pr(&bot, 1).await;

    // The repository's ledger verifies, signed with the server's key, and
    // lists its facts newest first.
    let ledger = bot.get_json("/api/v1/repos/github/acme/infra/ledger").await;
    assert_eq!(ledger["verified"], true, "{ledger:#}");
    assert!(
        ledger["key"].as_str().unwrap().starts_with("ed25519:"),
        "{ledger:#}"
    );
    let verification = ledger["verification"].as_str().unwrap();
    assert!(
        verification.contains("chain intact, all signed"),
        "{verification}"
    );
    let seqs: Vec<i64> = ledger["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|fact| fact["seq"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "{seqs:?}");
    assert_eq!(ledger["head"]["seq"], seqs[0]);

    // Whoever holds the database appends an approval: the page says the
    // ledger does not verify, and the fact counts for nothing.
    bot.ledger_forged
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let forged = crate::scenarios::ledger_cli::forge_approval(
        &bot.database_url(),
        "github:acme/infra",
        "mallory",
    )
    .await;
    let ledger = bot.get_json("/api/v1/repos/github/acme/infra/ledger").await;
    assert_eq!(ledger["verified"], false, "{ledger:#}");
    let verification = ledger["verification"].as_str().unwrap();
    assert!(
        verification.contains(&format!("{}", forged.seq)),
        "{verification}"
    );
    assert_eq!(ledger["facts"][0]["by"], "mallory");
    assert_eq!(ledger["facts"][0]["counts"], false);
    let (status, page, _) = bot.get_page("/repos/github/acme/infra/ledger").await;
    assert_eq!(status, 200);
    assert!(page.contains("Does not verify"), "{page}");
}

#[tokio::test]
async fn while_a_run_applies_the_queue_page_shows_the_member_it_holds() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let pr = approved_pr(&bot, 1).await;
    bot.pause_apply("dev", "app", "before");
    pr.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;

    let queue = bot.get_json("/api/v1/repos/github/acme/infra/queue").await;
    let locks = queue["locks"].as_array().unwrap();
    assert!(
        locks
            .iter()
            .any(|lock| lock["member"] == "app@dev" && lock["pr"] == 1),
        "{queue:#}"
    );
    assert_eq!(
        locks[0]["page"], "/repos/github/acme/infra/pulls/1",
        "{queue:#}"
    );
    let pulls = bot
        .get_json("/api/v1/repos/github/acme/infra/pulls?state=applying")
        .await;
    assert_eq!(numbers(&pulls), [1]);
    let (status, page, _) = bot.get_page("/repos/github/acme/infra/queue").await;
    assert_eq!(status, 200);
    assert!(page.contains("app@dev") && page.contains("run "), "{page}");

    bot.resume_apply("dev", "app");
    bot.settle().await;
    let queue = bot.get_json("/api/v1/repos/github/acme/infra/queue").await;
    assert_eq!(
        queue["locks"],
        serde_json::json!([]),
        "let go once it waits at prod"
    );
    assert_eq!(queue["jobs"], serde_json::json!([]), "{queue:#}");
}
