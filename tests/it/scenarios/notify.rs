//! Notifications: a base that names `[notify] to` has each target the
//! server defines told when a run's gate waits, a plan is refused, the run
//! applied or failed — once each, signed, whatever retries, redeliveries or
//! a replica restart do; a stand-down tells no one.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::receiver::Receiver;
use crate::support::redact::redact;
use serde_json::json;

const KEY: &str = "receiver-key-6b1f0e";

/// The base tells `infra-alerts` of `events` (every event: `None`).
fn notify_infra_alerts(bot: &Bot, events: Option<&str>) {
    let events = events
        .map(|e| format!("events = {e}\n"))
        .unwrap_or_default();
    bot.edit_base_config(
        "[[stage]]\nname = \"dev\"",
        &format!("[notify]\nto = [\"infra-alerts\"]\n{events}\n[[stage]]\nname = \"dev\""),
    );
}

fn target_of(receiver: &Receiver) -> [(&'static str, String); 2] {
    [
        ("WAVEGATE_NOTIFY_INFRA_ALERTS_URL", receiver.url.clone()),
        ("WAVEGATE_NOTIFY_INFRA_ALERTS_KEY", KEY.to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_gate_and_the_applied_run_are_each_notified_once_across_a_replica_restart() {
    let receiver = Receiver::start(KEY).await;
    let env = target_of(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut bot = Bot::start_replicated(&env).await;
    notify_infra_alerts(&bot, None);
    let pr = planned_pr(&bot, 31).await;
    pr.comment_as("rev-bob", "/approve").await;
    assert!(receiver.received().is_empty(), "nothing before merge");

    // The receiver is down for the first attempt: the retry wrapper tries again.
    receiver.refuse_next(1);
    let merged = pr.merge().await;
    let repo = pr.repo.clone();
    bot.until("the receiver hears prod waits", || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    assert_eq!(receiver.refused(), 1);
    let waiting = receiver.received()[0].clone();
    assert!(waiting.verified, "signed with the target's key");
    let mut shown = waiting.body.clone();
    shown["text"] = json!("(the reply)");
    insta::assert_snapshot!(redact(&serde_json::to_string_pretty(&shown).unwrap()), @r#"
    {
      "approve": "/approve prod sha256:[digest]",
      "approvers": [],
      "digest": "sha256:[digest]",
      "event": "waiting",
      "forge": "github",
      "gate": "pr-31-prod",
      "members": [
        "app@prod",
        "dns@prod"
      ],
      "merge_commit": "[sha]",
      "pull_request": 31,
      "repository": "acme/infra",
      "retries": 0,
      "run": 1,
      "text": "(the reply)",
      "url": "file://[tmp]/repo/pull/31"
    }
    "#);

    // A replica killed and started again, and the merge told again, say nothing twice.
    let closed = pr.closed(&merged);
    bot.kill_replica(0);
    bot.start_server().await;
    bot.tell(&repo, closed).await;
    let pr = bot.pr(&repo, 31);
    assert_eq!(receiver.events(), ["waiting"]);

    // The line the notice gives approves prod; the run applies and says so once.
    let line = waiting.body["approve"].as_str().unwrap();
    pr.comment_as("rev-carol", line).await;
    bot.until("the receiver hears the run applied", || async {
        (receiver.events().len() == 2).then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(receiver.events(), ["waiting", "applied"]);
    let applied = &receiver.received()[1];
    assert!(applied.verified);
    assert_eq!(
        applied.body["members"],
        json!(["app@dev", "app@prod", "dns@prod"])
    );
    assert!(applied.body.get("approve").is_none());
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_member_and_a_failed_one_are_notified_and_a_stand_down_is_not() {
    let receiver = Receiver::start(KEY).await;
    let env = target_of(&receiver);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("WAVEGATE_HELD_RETRY", "1s"));
    let bot = Bot::start_with(&env).await;
    notify_infra_alerts(&bot, Some("[\"refused\", \"failed\"]"));
    let pr = planned_pr(&bot, 32).await;
    pr.comment_as("rev-bob", "/approve").await;
    // Held by another deploy, then it stands down: the run ends.
    bot.apply_outcome(
        "dev",
        "app",
        json!([
            {"outcome": "held", "holder": {"run": "deploy 7"}},
            {"outcome": "stood-down", "reason": "a newer push deploys it"}
        ]),
    );
    pr.merge().await;
    // app@dev stood down, and with it what depends on it in prod.
    pr.until_a_reply_says("stood down").await;
    bot.settle().await;
    assert_eq!(
        receiver.events(),
        ["refused"],
        "held; nothing for the stand-down (not an event asked for)"
    );
    let held = &receiver.received()[0];
    assert!(held.verified);
    assert_eq!(held.body["refused"], "held");
    assert_eq!(held.body["members"], json!(["app@dev"]));
    assert!(
        held.body["text"]
            .as_str()
            .unwrap()
            .contains("**app@dev** is held by run deploy 7"),
        "{}",
        held.body
    );

    // Retried (the newer push never came): the run that ended spent its
    // approval, so it is approved again; app@dev applies, prod waits.
    pr.comment_as("rev-bob", "/retry").await;
    pr.until_a_reply_says("No approval of the merged plan stands")
        .await;
    pr.comment_as("rev-carol", &format!("/approve {}", pr.digest()))
        .await;
    pr.until_a_reply_says("Stage **prod** waits").await;
    assert_eq!(receiver.events(), ["refused"], "a wait is not asked for");

    // Prod approved into a failure: that is told, with what failed and why.
    std::fs::write(
        bot.estate_file("prod", "app", ".fail-apply"),
        "quota exceeded\n",
    )
    .unwrap();
    let digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-carol", &format!("/approve prod {digest}"))
        .await;
    bot.until("the receiver hears the run failed", || async {
        (receiver.events().len() == 2).then_some(())
    })
    .await;
    assert_eq!(receiver.events(), ["refused", "failed"]);
    let failed = &receiver.received()[1];
    assert!(failed.verified);
    assert_eq!(failed.body["members"], json!(["app@prod"]));
    assert!(
        failed.body["text"]
            .as_str()
            .unwrap()
            .contains("quota exceeded"),
        "{}",
        failed.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pages_open_a_notice_links_the_pull_requests_page() {
    let receiver = Receiver::start(KEY).await;
    let mut env: Vec<(&str, String)> = target_of(&receiver).into();
    env.push(("WAVEGATE_PUBLIC_PAGES", "on".into()));
    env.push(("WAVEGATE_PUBLIC_URL", "https://wavegate.example".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let bot = Bot::start_with(&env).await;
    notify_infra_alerts(&bot, Some("[\"waiting\"]"));
    let pr = approved_pr(&bot, 32).await;
    pr.merge().await;
    bot.until("the receiver hears prod waits", || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    let waiting = &receiver.received()[0];
    assert_eq!(
        waiting.body["page"],
        "https://wavegate.example/repos/github/acme/infra/pulls/32"
    );
}
