//! Carried state: an apply may write `{"carry": {...}}` beside its outputs
//! (whatever its outcome); the run keeps it in its record for that member
//! and hands it to the member's later commands in `{carry_file}`, across a
//! SIGKILL of the server and `/retry`.

use crate::support::bot::*;
use crate::support::pr::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_failed_apply_carried_reaches_its_retry_across_a_sigkill() {
    let mut bot = Bot::start().await;
    let pr = planned_pr(&bot, 41).await;
    pr.comment_as("rev-bob", "/approve").await;
    // app@dev's apply gets halfway, says where it got to, and fails.
    std::fs::write(
        bot.estate_file("dev", "app", ".carry-apply"),
        r#"{"resume_after": "aws_instance.app"}"#,
    )
    .unwrap();
    std::fs::write(
        bot.estate_file("dev", "app", ".fail-apply"),
        "interrupted after aws_instance.app\n",
    )
    .unwrap();
    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    assert!(pr
        .apply_section()
        .contains(r#"estate: carrying out: {"resume_after": "aws_instance.app"}"#));
    let repo = pr.repo.clone();

    // The server dies; its successor's retry hands the carry to the apply.
    bot.kill_replica(0);
    bot.start_server().await;
    std::fs::remove_file(bot.estate_file("dev", "app", ".fail-apply")).unwrap();
    let pr = bot.pr(&repo, 41);
    pr.comment_as("rev-bob", "/retry").await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let section = pr.apply_section();
    let printed = section
        .split("<details><summary>What <code>app@dev</code>'s apply printed")
        .nth(1)
        .expect("app@dev's apply output is shown");
    assert!(
        printed.contains(r#"estate: carried in: {"resume_after": "aws_instance.app"}"#),
        "{section}"
    );
}
