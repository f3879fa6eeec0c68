//! A run says what happened: a failure outranks a wait (which is still
//! shown and still resumes its part), a held member waits on its holder and
//! goes on by itself, a member that stood down ends the run neither applied
//! nor failed, and a stage whose plans change nothing does not wait at its
//! gate.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_apply_waits_on_its_holder_and_goes_on_by_itself_once_it_lets_go() {
    let bot = Bot::start_with(&[("WAVEGATE_HELD_RETRY", "1s")]).await;
    let pr = planned_pr(&bot, 11).await;
    pr.comment_as("rev-bob", "/approve").await;
    // Held twice by another deploy, then it asks to plan again, then applies.
    let held = json!({"outcome": "held", "holder": {"run": "deploy 7"}});
    bot.apply_outcome("dev", "app", json!([held, held, {"outcome": "replan"}]));

    pr.merge_unsettled().await;
    bot.until("the run says app@dev is held", || async {
        (!pr.replies_saying("**app@dev** is held by run deploy 7")
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(bot.applies_run().is_empty());
    // The holder reads as words, not JSON.
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r#"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    **app@dev** is held by run deploy 7: its apply found the target in use and changed nothing. wavegate tries again by itself (next at [time], then less often while it stays held); nothing needs doing here.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | held by run deploy 7; tried again by itself |
    | prod | 1 | `app@prod` | not started |
    | prod | 2 | `dns@prod` | not started |
    "#);
    let Check { state, title, .. } = pr.apply_check();
    assert_eq!(
        state, "in_progress",
        "a wait on a holder is no failure (no conclusion yet): {title}"
    );
    assert_eq!(title, "Waiting: run deploy 7, which holds app@dev");

    // It is tried again by itself (held once more, then a replan) and applies.
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "applied once");
    assert_eq!(
        pr.replies_saying("is held by").len(),
        1,
        "said once, not at every try"
    );
    let planned = bot.plans_run().iter().filter(|m| *m == "app@dev").count();
    assert!(
        planned >= 4,
        "planned at each try and after the replan: {planned}"
    );
    assert!(pr
        .replies()
        .last()
        .unwrap()
        .contains("Stage **prod** waits for its own approval"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stood_down_member_ends_its_subtree_for_the_run_neither_applied_nor_failed() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 13).await;
    pr.comment_as("rev-bob", "/approve").await;
    bot.apply_outcome(
        "dev",
        "app",
        json!({"outcome": "stood-down", "reason": "a newer push deploys it"}),
    );
    let prod_plans = || {
        bot.plans_run()
            .iter()
            .filter(|m| m.ends_with("@prod"))
            .count()
    };
    let planned_for_review = prod_plans();
    pr.merge_unsettled().await;
    bot.settle().await;
    // The newer push deploys app, and what depends on it, in every stage:
    // prod neither plans nor asks for them in this run.
    assert!(bot.applies_run().is_empty());
    assert_eq!(prod_plans(), planned_for_review, "nothing of prod planned");

    // Neutral: no failure, nothing to retry.
    insta::assert_snapshot!(redact(&pr.last_reply()), @r"
    The apply on [short] ended: `app@dev` stood down (a newer push deploys it); `app@prod` stood down (with app@dev, which a newer push deploys), so it and what depends on it were not applied. Everything else the merge changes is deployed.
    ");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r#"
    ## Apply on merge commit `[short]`: ended

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | stood down: a newer push deploys it |
    | prod | 1 | `app@prod` | stood down: with app@dev, which a newer push deploys |
    | prod | 2 | `dns@prod` | blocked by app@prod |
    "#);

    assert_eq!(pr.apply_check().state, "neutral");
}

/// The pull request adds a `cache` component and renames the network's
/// subnet: dev's first wave is network@dev and cache@dev, the second
/// database@dev. cache@dev fails to apply while database@dev, drifted by
/// hand, waits for a round's approval: the run is failed, and the round is
/// still offered; approving it applies database@dev and what follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_outranks_a_wait_which_is_still_shown_and_resumes_its_part() {
    let bot = Bot::start().await;
    bot.branch_with_cache("cache");
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    let pr = bot.opened(&repo, 14, "cache").await;
    pr.comment_as("rev-bob", "/approve").await;

    std::fs::write(
        bot.estate_file("dev", "cache", ".fail-apply"),
        "cache: quota exceeded\n",
    )
    .unwrap();
    bot.drift(
        "dev",
        "database",
        "aws_db_instance.main",
        "instance_class",
        json!("db.t3.large"),
    );
    pr.merge_unsettled().await;
    bot.settle().await;

    assert_eq!(bot.applies_run(), ["network@dev"]);
    let said = pr.last_reply();
    insta::assert_snapshot!(redact(&said), @r"
    The apply on [short] failed: `cache@dev` failed: the apply command exited with status 1. Members that applied stay applied; `/retry` plans what failed again and applies what the approvals cover.

    Meanwhile, elsewhere in the run: These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - database@dev: address aws\_db\_instance.main changed action from no-op to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```

    <details><summary>Why <code>cache@dev</code> failed</summary>

    ```text
    the apply command exited with status 1; last output:
    cache: quota exceeded
    ```

    </details>
    ");
    let Check { state, title, .. } = pr.apply_check();
    assert_eq!(state, "failure");
    assert!(
        title.contains("1 failed") && title.contains("also waiting: an approval of round 2"),
        "{title}"
    );

    // Approving the round goes on with its part; cache@dev stays failed.
    pr.comment_as(
        "rev-bob",
        &format!(
            "/approve {}",
            digest_in(&said[said.find("Meanwhile").unwrap()..])
        ),
    )
    .await;
    let mut applied = bot.applies_run();
    applied.sort();
    assert_eq!(applied, ["app@dev", "database@dev", "network@dev"]);
    assert_eq!(pr.apply_check().state, "failure");
    assert_eq!(
        pr.replies_saying("failed: `cache@dev` failed").len(),
        1,
        "the failure is said once"
    );

    // Fixed and retried: cache@dev applies, and the run goes on to prod's gate.
    std::fs::remove_file(bot.estate_file("dev", "cache", ".fail-apply")).unwrap();
    pr.comment_as("rev-bob", "/retry").await;
    assert!(bot.applies_run().contains(&"cache@dev".to_owned()));
    assert!(pr
        .replies()
        .last()
        .unwrap()
        .contains("Stage **prod** waits for its own approval"));
}

/// After the change is deployed everywhere, a pull request that changes the
/// app in dev alone: prod's plans change nothing, so prod's `always` gate is
/// skipped, and the report says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_whose_plans_change_nothing_skips_its_gate_and_says_so() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 15).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge_unsettled().await;
    bot.settle().await;
    let asked = pr.last_reply();
    pr.comment_as("rev-bob", &format!("/approve prod {}", digest_in(&asked)))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);

    let resources = bot
        .example
        .read("main", "infra/app/resources.json")
        .replace(
            r#""_per_stage": {"prod": {"size": "large"}}"#,
            r#""_per_stage": {"prod": {"size": "large"}, "dev": {"size": "medium"}}"#,
        );
    bot.example.branch(
        "dev-only",
        "main",
        &[("infra/app/resources.json", Some(&resources))],
    );
    let dev_only = bot.opened(&pr.repo, 16, "dev-only").await;
    dev_only.comment_as("rev-bob", "/approve").await;
    dev_only.merge_unsettled().await;
    bot.settle().await;

    assert_eq!(
        bot.applies_run(),
        ["app@dev", "app@prod", "dns@prod", "app@dev"],
        "dev applied, prod had nothing to apply"
    );
    let report = dev_only.report();
    assert!(
        report.contains("Stage **prod**: its gate was skipped, because its plans on the merge commit change nothing"),
        "{report}"
    );
    assert_eq!(dev_only.apply_check().state, "success");
    assert!(dev_only
        .replies()
        .iter()
        .all(|r| !r.contains("/approve prod")));
}

/// prod needs two approvals. rev-bob approves prod's set, then prod's
/// estate drifts and the stage is planned again: the gate now waits for
/// the new set, and says that rev-bob approved an earlier set of this stage,
/// as the pull request's gate does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_gate_says_who_approved_an_earlier_set_of_it() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 2");
    let pr = planned_pr(&bot, 17).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.comment_as("rev-carol", "/approve").await;
    pr.merge_unsettled().await;
    bot.settle().await;
    let asked = pr.last_reply();
    let first = digest_in(&asked);
    pr.comment_as("rev-bob", &format!("/approve prod {first}"))
        .await;
    assert!(pr.report().contains("Stage **prod**"));

    bot.drift(
        "prod",
        "app",
        "aws_security_group.app",
        "name",
        json!("hand-made"),
    );
    pr.comment_as("rev-carol", "/retry").await;
    let report = pr.report();
    assert!(
        report.contains(&format!(
            "@rev-bob approved `{first}`, an earlier set of this stage, which no longer counts"
        )),
        "{report}"
    );
    assert_eq!(bot.applies_run(), ["app@dev"], "nothing of prod applied");
}
