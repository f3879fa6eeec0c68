//! A run says what happened: a failure outranks a wait (which is still
//! shown and still resumes its part), a held member waits on its holder and
//! goes on by itself, a member that stood down ends the run neither applied
//! nor failed, and a stage whose plans change nothing does not wait at its
//! gate.

use crate::support::{self, bot::*};
use serde_json::json;
use support::fake_forge::FakePr;
use support::RepoHandle;

impl Bot {
    /// Merges PR `number` from `branch` and tells the bot, without waiting.
    async fn merge_and_deliver(&mut self, repo: &RepoHandle, number: u64, branch: &str) -> FakePr {
        let merged = self.merge(repo, number, branch);
        let (status, _) = self
            .deliver_github(support::github_pull_request("closed", repo, &merged))
            .await;
        assert_eq!(status, 202);
        merged
    }

    fn said(&self, repo: &RepoHandle, pr: u64, text: &str) -> usize {
        self.replies(repo, pr)
            .iter()
            .filter(|r| r.contains(text))
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_apply_waits_on_its_holder_and_goes_on_by_itself_once_it_lets_go() {
    let mut bot = Bot::start_with(&[("WAVEGATE_HELD_RETRY", "1s")]).await;
    let (repo, _pr, _digest) = planned(&mut bot, 11).await;
    bot.comment(&repo, 11, "rev-bob", "/approve").await;
    // Held twice by another deploy, then it asks to plan again, then applies.
    let held = json!({"outcome": "held", "holder": {"run": "deploy 7"}});
    bot.apply_outcome("dev", "app", json!([held, held, {"outcome": "replan"}]));

    let merged = bot.merge_and_deliver(&repo, 11, "change").await;
    bot.until("the run says app@dev is held", || async {
        (bot.said(&repo, 11, "**app@dev** is held by run deploy 7") > 0).then_some(())
    })
    .await;
    assert!(bot.applies_run().is_empty());
    let report = bot.report(&repo, 11).body;
    assert!(
        report.contains("`app@dev` | held by run deploy 7; tried again by itself"),
        "the holder reads as words, not JSON: {report}"
    );
    let (conclusion, title) = bot.apply_check(&repo, &merged);
    assert_eq!(
        conclusion, None,
        "a wait on a holder is no failure: {title}"
    );
    assert_eq!(title, "Waiting: run deploy 7, which holds app@dev");

    // It is tried again by itself (held once more, then a replan) and applies.
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "applied once");
    assert_eq!(
        bot.said(&repo, 11, "is held by"),
        1,
        "said once, not at every try"
    );
    let planned = bot.plans_run().iter().filter(|m| *m == "app@dev").count();
    assert!(
        planned >= 4,
        "planned at each try and after the replan: {planned}"
    );
    assert!(bot
        .replies(&repo, 11)
        .last()
        .unwrap()
        .contains("Stage **prod** waits for its own approval"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stood_down_member_ends_the_run_neither_applied_nor_failed() {
    let mut bot = Bot::start().await;
    let (repo, _pr, _digest) = planned(&mut bot, 13).await;
    bot.comment(&repo, 13, "rev-bob", "/approve").await;
    bot.apply_outcome(
        "dev",
        "app",
        json!({"outcome": "stood-down", "reason": "a newer push deploys it"}),
    );
    let merged = bot.merge_and_deliver(&repo, 13, "change").await;
    bot.settle().await;
    assert!(bot.applies_run().is_empty());
    let asked = bot.replies(&repo, 13).pop().unwrap();
    assert!(
        asked.contains("Stage **prod** waits"),
        "dev is done, prod's gate is next: {asked}"
    );
    bot.comment(
        &repo,
        13,
        "rev-bob",
        &format!("/approve prod {}", digest_in(&asked)),
    )
    .await;
    assert_eq!(bot.applies_run(), ["app@prod", "dns@prod"]);

    let last = bot.replies(&repo, 13).pop().unwrap();
    assert!(
        last.contains("ended: `app@dev` stood down (a newer push deploys it)"),
        "{last}"
    );
    assert!(
        !last.contains("/retry") && !last.contains("failed"),
        "neutral: {last}"
    );
    let report = bot.report(&repo, 13).body;
    assert!(
        report.contains("`app@dev` | stood down: a newer push deploys it"),
        "{report}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("neutral")
    );
}

/// The pull request adds a `cache` component and renames the network's
/// subnet: dev's first wave is network@dev and cache@dev, the second
/// database@dev. cache@dev fails to apply while database@dev, drifted by
/// hand, waits for a round's approval: the run is failed, and the round is
/// still offered; approving it applies database@dev and what follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_outranks_a_wait_which_is_still_shown_and_resumes_its_part() {
    let mut bot = Bot::start().await;
    bot.branch_with_cache("cache");
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    let pr = bot.open_pr(&repo, 14, "cache");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    bot.settle().await;
    bot.comment(&repo, 14, "rev-bob", "/approve").await;

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
    let merged = bot.merge_and_deliver(&repo, 14, "cache").await;
    bot.settle().await;

    assert_eq!(bot.applies_run(), ["network@dev"]);
    let said = bot.replies(&repo, 14).pop().unwrap();
    assert!(said.contains("failed: `cache@dev` failed"), "{said}");
    assert!(
        said.contains("Meanwhile, elsewhere in the run:") && said.contains("/approve sha256:"),
        "the wait is still offered: {said}"
    );
    let (conclusion, title) = bot.apply_check(&repo, &merged);
    assert_eq!(conclusion.as_deref(), Some("failure"));
    assert!(
        title.contains("1 failed") && title.contains("also waiting: an approval of round 2"),
        "{title}"
    );

    // Approving the round goes on with its part; cache@dev stays failed.
    bot.comment(
        &repo,
        14,
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
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("failure")
    );
    assert_eq!(
        bot.said(&repo, 14, "failed: `cache@dev` failed"),
        1,
        "the failure is said once"
    );

    // Fixed and retried: cache@dev applies, and the run goes on to prod's gate.
    std::fs::remove_file(bot.estate_file("dev", "cache", ".fail-apply")).unwrap();
    bot.comment(&repo, 14, "rev-bob", "/retry").await;
    assert!(bot.applies_run().contains(&"cache@dev".to_owned()));
    assert!(bot
        .replies(&repo, 14)
        .last()
        .unwrap()
        .contains("Stage **prod** waits for its own approval"));
}

/// After the change is deployed everywhere, a pull request that changes the
/// app in dev alone: prod's plans change nothing, so prod's `always` gate is
/// skipped, and the report says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_whose_plans_change_nothing_skips_its_gate_and_says_so() {
    let mut bot = Bot::start().await;
    let (repo, _pr, _digest) = planned(&mut bot, 15).await;
    bot.comment(&repo, 15, "rev-bob", "/approve").await;
    bot.merge_and_deliver(&repo, 15, "change").await;
    bot.settle().await;
    let asked = bot.replies(&repo, 15).pop().unwrap();
    bot.comment(
        &repo,
        15,
        "rev-bob",
        &format!("/approve prod {}", digest_in(&asked)),
    )
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
    let pr = bot.open_pr(&repo, 16, "dev-only");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    bot.settle().await;
    bot.comment(&repo, 16, "rev-bob", "/approve").await;
    let merged = bot.merge_and_deliver(&repo, 16, "dev-only").await;
    bot.settle().await;

    assert_eq!(
        bot.applies_run(),
        ["app@dev", "app@prod", "dns@prod", "app@dev"],
        "dev applied, prod had nothing to apply"
    );
    let report = bot.report(&repo, 16).body;
    assert!(
        report.contains("Stage **prod**: its gate was skipped, because its plans on the merge commit change nothing"),
        "{report}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("success")
    );
    assert!(bot
        .replies(&repo, 16)
        .iter()
        .all(|r| !r.contains("/approve prod")));
}

/// prod needs two approvals. rev-bob approves prod's set, then prod's
/// estate drifts and the stage is planned again: the gate now waits for
/// the new set, and says that rev-bob approved an earlier set of this stage,
/// as the pull request's gate does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_gate_says_who_approved_an_earlier_set_of_it() {
    let mut bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 2");
    let (repo, _pr, _digest) = planned(&mut bot, 17).await;
    bot.comment(&repo, 17, "rev-bob", "/approve").await;
    bot.comment(&repo, 17, "rev-carol", "/approve").await;
    bot.merge_and_deliver(&repo, 17, "change").await;
    bot.settle().await;
    let asked = bot.replies(&repo, 17).pop().unwrap();
    let first = digest_in(&asked);
    bot.comment(&repo, 17, "rev-bob", &format!("/approve prod {first}"))
        .await;
    assert!(bot.report(&repo, 17).body.contains("Stage **prod**"));

    bot.drift(
        "prod",
        "app",
        "aws_security_group.app",
        "name",
        json!("hand-made"),
    );
    bot.comment(&repo, 17, "rev-carol", "/retry").await;
    let report = bot.report(&repo, 17).body;
    assert!(
        report.contains(&format!(
            "@rev-bob approved `{first}`, an earlier set of this stage, which no longer counts"
        )),
        "{report}"
    );
    assert_eq!(bot.applies_run(), ["app@dev"], "nothing of prod applied");
}
