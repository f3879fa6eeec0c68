//! `/override` as the ledger keeps it: given during review it is bound to
//! the plan the pull request showed and lets exactly that plan through at
//! apply; a wave with several denied plans waits once, listing them all; an
//! override is spent once its member applied.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;
use wavegate::gate::ledger::FactKind;

/// The plan of app@dev breaks a policy rule. sec-sam, an overrider on the
/// base, lets it through while the pull request is in review; after merge
/// the fresh plan is the same plan, so it applies without waiting, and the
/// override is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_given_in_review_lets_exactly_that_plan_through_and_is_spent() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\noverriders = [\"sec-sam\"]");
    bot.deny("dev", "app", &["no-public-ingress"]);
    let pr = planned_pr(&bot, 50).await;
    bot.forge.set_permission(&pr.repo, "sec-sam", "write");
    pr.comment_as("rev-bob", "/approve").await;

    let given = pr
        .comment_as("sec-sam", "/override app@dev the port is internal")
        .await;
    assert_eq!(pr.reactions(given), ["eyes", "rocket"]);
    let facts = bot.override_facts(50).await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].0, FactKind::Approved);
    let overridden = facts[0].1.clone();

    pr.merge().await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev"],
        "applied without waiting for an override"
    );
    assert!(pr
        .replies()
        .iter()
        .all(|r| !r.contains("/override app@dev <reason>")));
    assert_eq!(
        bot.override_facts(50).await,
        [
            (FactKind::Approved, overridden.clone()),
            (FactKind::Spent, overridden)
        ],
        "spent once app@dev applied"
    );
}

/// An override in review binds the plan shown then: the estate drifts, the
/// fresh plan at merge is another plan, and the run waits for an override
/// of that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_in_review_does_not_cover_a_different_fresh_plan() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\noverriders = [\"sec-sam\"]");
    bot.deny("dev", "app", &["no-public-ingress"]);
    let pr = planned_pr(&bot, 51).await;
    bot.forge.set_permission(&pr.repo, "sec-sam", "write");
    pr.comment_as("rev-bob", "/approve").await;
    pr.comment_as("sec-sam", "/override app@dev the port is internal")
        .await;
    bot.drift(
        "dev",
        "app",
        "aws_security_group.app",
        "name",
        serde_json::json!("hand-made"),
    );
    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    let asked = pr.last_reply();
    assert!(
        asked.contains("round 2") || asked.contains("/override app@dev"),
        "the moved plan waits again: {asked}"
    );
}

/// Two members of one wave (a new `cache` component and the network) break
/// policy rules: the run waits once, naming both, each with the line to
/// copy; overriding both lets the wave apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_with_several_denied_plans_waits_once_listing_them_all() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\noverriders = [\"sec-sam\"]");
    bot.branch_with_cache("two-denied");
    bot.deny("dev", "network", &["tagged-subnets"]);
    bot.deny("dev", "cache", &["encrypted-at-rest"]);
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.forge.set_permission(&repo, "sec-sam", "write");
    let pr = bot.opened(&repo, 52, "two-denied").await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;

    assert!(bot.applies_run().is_empty());
    // One wait names both, each with the line to copy.
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    The policy denied the plans of **cache@dev** (`sha256:[digest]`; `encrypted-at-rest`), **network@dev** (`sha256:[digest]`; `tagged-subnets`). Nothing of that wave was applied. Someone in `policy.overriders` may let them through, each for exactly that plan:

    ```
    /override cache@dev <reason>
    /override network@dev <reason>
    ```
    ");

    pr.comment_as(
        "sec-sam",
        "/override cache@dev it is encrypted by the platform",
    )
    .await;
    assert!(
        bot.applies_run().is_empty(),
        "one override of two lets nothing through"
    );
    pr.comment_as("sec-sam", "/override network@dev tags come from the module")
        .await;
    let mut applied = bot.applies_run();
    applied.sort();
    assert_eq!(applied, ["app@dev", "cache@dev", "network@dev"]);
    let waits = pr.replies_saying("The policy denied").len();
    assert_eq!(waits, 1, "said once");
}
