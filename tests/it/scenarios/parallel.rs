//! Parallel applies: the members of one wave that passed coverage and the
//! policy apply side by side, at most `apply_concurrency` at a time (4
//! unless the base says otherwise), each saved `applying` before its command
//! starts and its result after; a failure of one leaves the others going,
//! and a server killed mid-wave applies nothing twice.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;

/// `w01@dev` … `w{width}@dev`.
fn wide_members(width: usize) -> Vec<String> {
    (1..=width).map(|i| format!("w{i:02}@dev")).collect()
}

/// How many of the wide wave's applies are paused now.
fn paused(bot: &Bot, width: usize) -> usize {
    (1..=width)
        .filter(|i| {
            bot.estate_file("dev", &format!("w{i:02}"), ".paused")
                .exists()
        })
        .count()
}

async fn wide_pr(bot: &Bot, number: u64, width: usize, slow: f64) -> PrHandle<'_> {
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.branch_with_wide_wave("wide", width, slow);
    let pr = bot.opened(&repo, number, "wide").await;
    pr.comment_as("rev-bob", "/approve").await;
    pr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_wave_applies_four_members_at_once_and_the_live_report_shows_each_applying() {
    let bot = Bot::start().await;
    let pr = wide_pr(&bot, 51, 6, 0.0).await;
    for i in 1..=6 {
        bot.pause_apply("dev", &format!("w{i:02}"), "before");
    }
    pr.merge_unsettled().await;

    // Four start (the default `apply_concurrency`); the rest wait their turn.
    bot.until("four applies run at once", || async {
        (paused(&bot, 6) == 4 && pr.apply_section().matches("| applying |").count() == 4)
            .then_some(())
    })
    .await;
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: running

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `w01@dev` | applying |
    | dev | 1 | `w02@dev` | applying |
    | dev | 1 | `w03@dev` | applying |
    | dev | 1 | `w04@dev` | applying |
    | dev | 1 | `w05@dev` | not started |
    | dev | 1 | `w06@dev` | not started |
    ");
    assert_eq!(paused(&bot, 6), 4, "no fifth apply started");

    for i in 1..=6 {
        bot.resume_apply("dev", &format!("w{i:02}"));
    }
    bot.settle().await;
    let mut applied = bot.applies_run();
    applied.sort();
    assert_eq!(applied, wide_members(6), "each applied once");
    assert_eq!(pr.apply_check().state, "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_in_a_wide_wave_leaves_its_wave_mates_applying() {
    let bot = Bot::start().await;
    let pr = wide_pr(&bot, 52, 4, 0.5).await;
    std::fs::write(
        bot.estate_file("dev", "w02", ".fail-apply"),
        "w02 could not reach its queue service\n",
    )
    .unwrap();
    pr.merge().await;

    let mut applied = bot.applies_run();
    applied.sort();
    assert_eq!(applied, ["w01@dev", "w03@dev", "w04@dev"]);
    let section = pr.apply_section();
    let table = section.split("\n\n<details>").next().unwrap();
    insta::assert_snapshot!(redact(table), @"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `w01@dev` | applied |
    | dev | 1 | `w02@dev` | failed: the apply command exited with status 1 |
    | dev | 1 | `w03@dev` | applied |
    | dev | 1 | `w04@dev` | applied |
    ");
    assert!(
        section.contains("w02 could not reach its queue service"),
        "{section}"
    );
    assert_eq!(pr.apply_check().state, "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twenty_member_wave_killed_mid_apply_applies_each_member_exactly_once() {
    let mut bot = Bot::start_with(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let pr = wide_pr(&bot, 53, 20, 1.0).await;
    pr.merge_unsettled().await;

    // Some members applied, others are mid-apply, when the server dies.
    bot.until("a few members applied", || async {
        (bot.applies_run().len() >= 5).then_some(())
    })
    .await;
    let repo = pr.repo.clone();
    bot.kill();
    bot.until_no_command_survives().await;
    let before = bot.applies_run();
    assert!(before.len() < 20, "the kill came mid-wave: {before:?}");

    bot.start_server().await;
    bot.settle().await;
    let pr = bot.pr(&repo, 53);
    let mut applied = bot.applies_run();
    applied.sort();
    let mut once = applied.clone();
    once.dedup();
    assert_eq!(applied, once, "no member applied twice");

    // Every member is deployed; one whose apply the kill cut off after it
    // changed the estate (so it wrote no log line) was found done.
    let section = pr.apply_section();
    for member in wide_members(20) {
        let component = member.trim_end_matches("@dev");
        let state = std::fs::read_to_string(bot.estate_file("dev", component, ".json"))
            .unwrap_or_else(|_| panic!("{member} is not deployed"));
        assert!(
            state.contains(&format!("aws_sqs_queue.{component}")),
            "{state}"
        );
        let row = section
            .lines()
            .find(|l| l.contains(&format!("`{member}`")))
            .unwrap_or_else(|| panic!("no row for {member}:\n{section}"));
        if applied.contains(&member) {
            assert!(row.contains("| applied"), "{row}");
        } else {
            assert!(
                row.contains("applied (its apply had finished before a restart"),
                "{row}"
            );
        }
    }
    assert_eq!(pr.apply_check().state, "success");
}
