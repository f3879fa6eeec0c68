//! Reconciliation end to end: webhooks dropped on purpose, and the sweep
//! (every second here) finds what the forge says and the store does not.

use crate::support::common::MergeMethod;
use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::{self, bot::*};
use std::time::Duration;
use wavegate::model::JobKind;

/// How many times the fake forge was asked for `path` (GET).
fn listed(bot: &Bot, path: &str) -> usize {
    bot.forge
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == path)
        .count()
}

/// Sweeps started so far, as the forge sees them: each sweep first lists
/// the App's webhook deliveries (and so does the server once the
/// database answers again after refusing a delivery).
fn sweeps_started(bot: &Bot) -> usize {
    listed(bot, "/app/hook/deliveries")
}

/// Waits until `n` more sweeps have started and finished (sweeps run one
/// after another: the n-th has finished once the next one started),
/// then for every job.
async fn after_sweeps(bot: &Bot, n: usize) {
    let target = sweeps_started(bot) + n + 1;
    bot.until(&format!("{n} more sweeps"), || async {
        (sweeps_started(bot) >= target).then_some(())
    })
    .await;
    bot.settle().await;
}

/// On PostgreSQL through a link the test can cut, sweeping every `every`.
async fn behind_a_link_sweeping_every(every: &str) -> (Bot, support::outage::DatabaseLink) {
    Bot::behind_a_database_link(&[("WAVEGATE_RECONCILE_EVERY", every)]).await
}

/// rev-bob's `/approve`, delivered by the forge while the database is
/// away: answered 503. Its comment id and delivery guid.
async fn approve_refused_with_503(pr: &PrHandle<'_>) -> (u64, String) {
    let id = pr.comment_unheard("rev-bob", "/approve");
    let delivery = support::github_comment(&pr.repo, pr.number, id, "rev-bob", "/approve");
    let (status, body, guid) = pr.bot.deliver_via_forge(delivery).await;
    assert_eq!(status, 503, "{body}");
    (id, guid)
}

/// Waits until the redelivered approval makes the check succeed, then
/// for every job; the one redelivery asked of GitHub.
async fn once_the_approval_counts(pr: &PrHandle<'_>) -> support::RecordedRequest {
    pr.until_checked("the approval counts", "success").await;
    let mut asked = pr.bot.forge.redelivery_requests();
    assert_eq!(asked.len(), 1, "{asked:#?}");
    asked.pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_webhook_was_lost_is_planned_by_the_next_sweep() {
    let bot = Bot::reconciling_every("1s").await;
    let mut pr = planned_pr(&bot, 1).await;
    let (first, first_digest) = (pr.report_id(), pr.digest());
    after_sweeps(&bot, 1).await;
    assert_eq!(
        bot.jobs_of(JobKind::Plan).await.len(),
        1,
        "nothing moved: no plan"
    );

    // The push's delivery is dropped: only the forge knows the new head.
    bot.branch_bigger_app("change-2");
    let pushed = pr.push_unheard("change-2");
    let second_digest = bot
        .until("a sweep plans the new head", || async {
            let digest = pr.digest();
            (digest != first_digest).then_some(digest)
        })
        .await;
    bot.settle().await;
    assert_eq!(pr.report_id(), first, "the report is edited in place");
    assert!(bot.log().contains("not what was last planned: planning it"));
    let checks = bot.forge.check_runs(&pr.repo, &pushed.head_sha);
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0].conclusion.as_deref(), Some("action_required"));
    assert!(checks[0].output["summary"]
        .as_str()
        .unwrap()
        .contains(&second_digest));

    // Later sweeps find nothing more to do.
    after_sweeps(&bot, 2).await;
    assert_eq!(
        bot.jobs_of(JobKind::Plan).await.len(),
        2,
        "planned once more"
    );

    // Closed without merging, and that webhook is lost too.
    bot.forge.close(&pr.repo, 1);
    bot.until("a sweep marks the pull request closed", || async {
        (!pr.record().await.open).then_some(())
    })
    .await;
    after_sweeps(&bot, 1).await;
    assert_eq!(bot.jobs().await.len(), 2, "closing causes no work");
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_whose_webhook_was_lost_starts_its_apply_run_once() {
    let bot = Bot::reconciling_every("1s").await;
    let pr = planned_pr(&bot, 1).await;
    pr.comment_as("rev-bob", "/approve").await;

    // Merged on the forge; the `closed` delivery never arrives.
    pr.merge_unheard(MergeMethod::MergeCommit);
    bot.until("a sweep starts the apply run and dev applies", || async {
        (bot.applies_run() == ["app@dev"]).then_some(())
    })
    .await;
    bot.settle().await;
    assert!(bot
        .log()
        .contains("without a webhook: starting its apply run"));
    assert_eq!(pr.apply_check().title, "Waiting: /approve prod");

    // The run waits for a person: later sweeps neither start it again nor resume it.
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Merged).await.len(), 1);
    assert_eq!(bot.jobs_of(JobKind::Apply).await.len(), 0);
    assert_eq!(bot.applies_run(), ["app@dev"]);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_whose_webhook_was_lost_is_taken_up_by_the_sweep_once() {
    let bot = Bot::reconciling_every("1s").await;
    let pr = planned_pr(&bot, 1).await;
    let digest = pr.digest();
    after_sweeps(&bot, 1).await;

    // rev-bob approves; the delivery never arrives.
    let id = pr.comment_unheard("rev-bob", "Looks right.\n\n/approve");
    pr.until_checked("a sweep takes the approval up", "success")
        .await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    assert!(bot.log().contains("came without a webhook: taking it up"));
    let approvals = pr.approvals_section();
    assert!(
        approvals.contains(&format!("@rev-bob approved `{digest}`")),
        "{approvals}"
    );
    insta::assert_snapshot!(redact(&approvals), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Approved** (1 of 1 required).

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");

    // The delivery turns up late (or is redelivered), and more sweeps run:
    // nothing more is done.
    let late = support::github_comment(&pr.repo, 1, id, "rev-bob", "Looks right.\n\n/approve");
    let (status, answer) = bot.deliver_github(late).await;
    assert_eq!(status, 202, "{answer}");
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Comment).await.len(), 1);
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    assert!(pr.replies().is_empty(), "{:?}", pr.replies());

    // A comment whose webhook came is not run again by the sweep either.
    let carol = pr.comment_as("rev-carol", "/approve").await;
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Comment).await.len(), 2);
    assert_eq!(pr.reactions(carol), ["eyes", "rocket"]);
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approval_whose_webhook_was_lost_is_taken_up_once() {
    let bot = Bot::reconciling_every("1s").await;
    let pr = planned_pr_on_forgejo(&bot, 2).await;
    assert_eq!(pr.plan_state(), "pending");
    after_sweeps(&bot, 1).await;

    let id = pr.comment_unheard("rev-bob", "/approve");
    pr.until_checked("a sweep takes the approval up", "success")
        .await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);

    let late = support::forgejo_comment(&pr.repo, 2, id, "rev-bob", "/approve");
    let (status, answer) = bot.deliver_forgejo(late).await;
    assert_eq!(status, 202, "{answer}");
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Comment).await.len(), 1);
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_comment_never_approves_by_the_sweep() {
    let bot = Bot::reconciling_every("1s").await;
    let pr = planned_pr(&bot, 3).await;
    after_sweeps(&bot, 1).await;

    // Written as a remark, edited into an approval; neither webhook came
    // (an edit is never a command anyway).
    let listed = bot.forge.requests().len();
    let id = bot
        .forge
        .add_edited_comment(&pr.repo, 3, "rev-bob", "Looking at it.", "/approve");
    bot.until("a sweep lists the comments again", || async {
        bot.forge.requests()[listed..]
            .iter()
            .any(|r| r.method == "GET" && r.path == "/repos/acme/infra/issues/comments")
            .then_some(())
    })
    .await;
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Comment).await.len(), 0);
    assert!(pr.reactions(id).is_empty());
    assert_eq!(pr.plan_state(), "action_required");
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_taken_up_by_the_sweep_binds_to_the_report_before_it_was_written() {
    // Sweeps far enough apart that the next one comes after the new report.
    let bot = Bot::reconciling_every("6s").await;
    let mut pr = planned_pr(&bot, 4).await;
    let first = pr.digest();
    after_sweeps(&bot, 1).await;

    // rev-bob approves the report he saw (the delivery is lost); a push
    // lands after, and its plan is posted more than a second after he wrote
    // (forges date comments to the second): the forge's clock runs 1.1 s
    // behind the bot's while he writes, instead of the test waiting 1.1 s.
    bot.forge.set_clock_behind(Duration::from_millis(1_100));
    let id = pr.comment_unheard("rev-bob", "/approve");
    bot.forge.set_clock_behind(Duration::ZERO);
    bot.branch_bigger_app("change-2");
    pr.push("change-2").await;
    let second = pr.digest();
    assert_ne!(second, first);

    // The sweep finds the comment: written before the new report, it does
    // not approve it (as its webhook would not have).
    pr.until_reacted("a sweep takes the comment up", id).await;
    assert_eq!(pr.reactions(id), ["eyes", "confused"]);
    let reply = pr.last_reply();
    assert!(reply.contains(&second), "{reply}");
    insta::assert_snapshot!(redact(&reply), @"@rev-bob: a new plan for `[short]` was being made when you wrote your comment, so it is not clear which plan you meant; it is posted now with the digest `sha256:[digest]`: review it and approve with `/approve sha256:[digest]`");
    assert_eq!(pr.plan_state(), "action_required");
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_repository_is_swept_on_304s_that_spend_no_budget() {
    let bot = Bot::reconciling_every("1s").await;
    let pr = planned_pr(&bot, 1).await;
    let installation = pr.repo.installation.unwrap();
    after_sweeps(&bot, 2).await;

    // Nothing changes: every listing is answered 304, and GitHub's budget
    // does not move.
    let (spent, not_modified) = (
        bot.forge.budget_used(installation),
        bot.forge.not_modified(),
    );
    after_sweeps(&bot, 3).await;
    assert_eq!(bot.forge.budget_used(installation), spent);
    assert!(
        bot.forge.not_modified() >= not_modified + 6,
        "two listings a sweep, each a 304: {} then {}",
        not_modified,
        bot.forge.not_modified()
    );
    assert_eq!(
        bot.metric(r#"wavegate_sweep_last{of="requests"}"#).await,
        Some(0.0)
    );
    assert_eq!(
        bot.metric(r#"wavegate_sweep_last{of="not_modified"}"#)
            .await,
        Some(2.0)
    );

    // A comment changes the comment listing: one page is read in full,
    // and the one after is a 304 again.
    let id = pr.comment_unheard("rev-bob", "/approve");
    pr.until_reacted("a sweep takes the approval up", id).await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_leaves_the_budgets_reserve_to_jobs_until_the_window_resets() {
    let bot = Bot::start_with(&[
        ("WAVEGATE_RECONCILE_EVERY", "1s"),
        ("WAVEGATE_RECONCILE_BUDGET", "50%"),
    ])
    .await;
    let pr = planned_pr(&bot, 1).await;
    let installation = pr.repo.installation.unwrap();
    let spent = bot.forge.budget_used(installation);
    assert!(spent >= 5, "planning spent {spent} requests");

    // The installation's hour is 10 requests and it has spent over half:
    // the rest is the jobs', and sweeps leave the repository be.
    bot.forge.set_rate_window(10, Duration::from_secs(10));
    bot.until("a sweep leaves the repository for later", || async {
        let deferred = bot.metric(r#"wavegate_sweep_last{of="deferred"}"#).await;
        (deferred == Some(1.0)).then_some(())
    })
    .await;
    let id = pr.comment_unheard("rev-bob", "/approve");
    after_sweeps(&bot, 2).await;
    assert!(pr.reactions(id).is_empty(), "the comment waits");

    // The window resets: the next sweep takes the approval up.
    pr.until_checked("a sweep takes the approval up", "success")
        .await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_approval_on_a_merged_pull_request_whose_webhook_was_lost_applies_prod() {
    let bot = Bot::reconciling_every("1s").await;
    let pr = planned_pr(&bot, 1).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge_unsettled().await;
    bot.until("dev applies and prod waits", || async {
        (bot.applies_run() == ["app@dev"]).then_some(())
    })
    .await;
    bot.settle().await;

    // rev-bob approves prod on the merged pull request; the delivery is lost.
    let id = pr.comment_unheard("rev-bob", "/approve prod");
    bot.until("a sweep takes the approval up and prod applies", || async {
        bot.applies_run()
            .iter()
            .any(|m| m.ends_with("@prod"))
            .then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    after_sweeps(&bot, 2).await;
    assert_eq!(
        bot.jobs_of(JobKind::Comment).await.len(),
        2,
        "taken up once"
    );
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

/// GitHub never redelivers a failed delivery by itself. An approval
/// delivered while the database was down is answered 503; once it is back,
/// a sweep finds the failure in the App's delivery log and asks GitHub to
/// deliver it again, once, however many sweeps follow. A delivery the bot
/// recorded though GitHub logged it failed is never asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_refused_while_the_database_was_down_is_redelivered_once() {
    let (bot, link) = behind_a_link_sweeping_every("1s").await;
    let pr = planned_pr(&bot, 1).await;
    let digest = pr.digest();

    // Recorded by the bot, but GitHub stopped waiting for its answer.
    let thanks = pr.comment_unheard("dev-alice", "Thanks!");
    let answer_lost = support::github_comment(&pr.repo, 1, thanks, "dev-alice", "Thanks!");
    let (status, body) = bot
        .post_github_to(0, &answer_lost, "answer-lost-guid")
        .await;
    assert_eq!(status, 202, "{body}");
    bot.forge
        .log_webhook_attempt("answer-lost-guid", "issue_comment", answer_lost.1, 504);

    link.cut();
    let (id, guid) = approve_refused_with_503(&pr).await;
    let failed = bot.forge.hook_deliveries().pop().unwrap();
    assert_eq!(
        (failed.guid.as_str(), failed.status_code),
        (guid.as_str(), 503)
    );

    link.restore();
    bot.until("a sweep asks GitHub to redeliver the approval", || async {
        bot.forge
            .hook_deliveries()
            .into_iter()
            .any(|d| d.guid == guid && d.redelivery)
            .then_some(())
    })
    .await;
    let asked = once_the_approval_counts(&pr).await;
    assert_eq!(
        asked.path,
        format!("/app/hook/deliveries/{}/attempts", failed.id)
    );
    let redelivered = bot.forge.hook_deliveries().pop().unwrap();
    assert_eq!(
        (
            redelivered.guid.as_str(),
            redelivered.redelivery,
            redelivered.status_code
        ),
        (guid.as_str(), true, 202)
    );
    assert!(bot.log().contains("GitHub was asked to deliver it again"));
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    let report = pr.report();
    assert_eq!(
        report
            .matches(&format!("@rev-bob approved `{digest}`"))
            .count(),
        1,
        "{report}"
    );
    insta::assert_snapshot!(redact(&pr.approvals_section()), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Approved** (1 of 1 required).

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");

    // Later sweeps list the same log and ask for nothing more.
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.forge.redelivery_requests().len(), 1);
    assert_eq!(
        bot.jobs_of(JobKind::Comment).await.len(),
        2,
        "thanks, and the approval once"
    );
    bot.assert_conformant();
}

/// Reviews cost a request per pull request: a quiet one's are not listed
/// (after the two reads that follow a start), a review moves `updated_at`
/// and is found. An approving review and then its dismissal, both without
/// a webhook, approve and revoke; their webhooks arriving late do nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approving_review_and_its_dismissal_whose_webhooks_were_lost_count_once() {
    let bot = Bot::reconciling_every("1s").await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    let pr = planned_pr(&bot, 5).await;
    let digest = pr.digest();
    let review_lists = |bot: &Bot| {
        bot.forge
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/pulls/5/reviews"))
            .count()
    };
    after_sweeps(&bot, 3).await;
    let before = review_lists(&bot);
    assert!(before > 0, "read after the start");
    after_sweeps(&bot, 3).await;
    assert_eq!(
        review_lists(&bot),
        before,
        "a quiet pull request's reviews are not listed"
    );

    let id = pr.review_unheard("rev-bob", "APPROVED");
    pr.until_checked("a sweep takes the approving review up", "success")
        .await;
    assert!(bot.log().contains("came without a webhook: taking it up"));
    let approvals = pr.approvals_section();
    assert!(
        approvals.contains(&format!("@rev-bob approved `{digest}`")),
        "{approvals}"
    );
    insta::assert_snapshot!(redact(&approvals), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Approved** (1 of 1 required).

    This pull request changes `[policy]`. It is judged by the base branch's policy; the new policy takes effect after merge.

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");

    let head = pr.state();
    let late = |action: &str, state: &str| {
        support::github_review(
            action,
            state,
            &pr.repo,
            &head,
            id,
            "rev-bob",
            &head.head_sha,
        )
    };
    let (status, answer) = bot.deliver_github(late("submitted", "approved")).await;
    assert_eq!(status, 202, "{answer}");
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Review).await.len(), 1);

    bot.forge.dismiss_review(&pr.repo, id);
    pr.until_checked("a sweep takes the dismissal up", "action_required")
        .await;
    assert_eq!(bot.jobs_of(JobKind::Review).await.len(), 2);
    let (status, answer) = bot.deliver_github(late("dismissed", "dismissed")).await;
    assert_eq!(status, 202, "{answer}");
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Review).await.len(), 2);
    assert_eq!(pr.plan_state(), "action_required");
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approving_review_whose_webhook_was_lost_counts_once() {
    let bot = Bot::reconciling_every("1s").await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    let pr = planned_pr_on_forgejo(&bot, 6).await;
    assert_eq!(pr.plan_state(), "pending");
    after_sweeps(&bot, 1).await;

    let id = pr.review_unheard("rev-bob", "APPROVED");
    pr.until_checked("a sweep takes the approving review up", "success")
        .await;
    insta::assert_snapshot!(redact(&pr.approvals_section()), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Approved** (1 of 1 required).

    This pull request changes `[policy]`. It is judged by the base branch's policy; the new policy takes effect after merge.

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");

    // The webhook turns up late. Forgejo's names no review id: its job
    // finds the review on the forge, taken up already, and does nothing.
    let head = pr.state();
    let late = support::forgejo_review_approved(&pr.repo, &head, "rev-bob");
    let (status, answer) = bot.deliver_forgejo(late).await;
    assert_eq!(status, 202, "{answer}");
    after_sweeps(&bot, 2).await;
    let reviews = bot.jobs_of(JobKind::Review).await;
    assert_eq!(reviews.len(), 2, "the sweep's and the late webhook's");
    assert_eq!(
        reviews[1].outcome.as_deref(),
        Some(format!("review {id} was taken up already (by the reconciliation sweep)").as_str()),
        "{reviews:#?}"
    );

    // wavegate reads no Forgejo webhook of a dismissal: only the sweep sees it.
    bot.forge.dismiss_review(&pr.repo, id);
    bot.until("a sweep takes the dismissal up", || async {
        (pr.plan_state() == "pending").then_some(())
    })
    .await;
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Review).await.len(), 3);
    assert_eq!(pr.plan_state(), "pending");

    // rev-carol approves and this webhook comes: its job takes the review
    // up by its id, and the sweeps after it find it seen.
    bot.forge.set_permission(&pr.repo, "rev-carol", "write");
    pr.review_unheard("rev-carol", "APPROVED");
    bot.tell(
        &pr.repo,
        support::forgejo_review_approved(&pr.repo, &head, "rev-carol"),
    )
    .await;
    assert_eq!(pr.plan_state(), "success");
    after_sweeps(&bot, 2).await;
    assert_eq!(bot.jobs_of(JobKind::Review).await.len(), 4);
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

/// With sweeps an hour apart, a delivery refused while the database was down
/// is not left to the next one: the refusal itself has the server ask
/// GitHub for its failed deliveries as soon as the database answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_is_asked_for_again_as_soon_as_the_database_is_back() {
    let (bot, link) = behind_a_link_sweeping_every("1h").await;
    let pr = planned_pr(&bot, 1).await;
    bot.until("the sweep at start", || async {
        (sweeps_started(&bot) >= 1).then_some(())
    })
    .await;
    // A sweep lists the open pull requests of the repository; the server
    // asking for failed deliveries once the database is back does not.
    let sweeps = listed(&bot, "/repos/acme/infra/pulls");

    link.cut();
    let (id, guid) = approve_refused_with_503(&pr).await;

    link.restore();
    once_the_approval_counts(&pr).await;
    let redelivered = bot.forge.hook_deliveries().pop().unwrap();
    assert_eq!(
        (
            redelivered.guid,
            redelivered.redelivery,
            redelivered.status_code
        ),
        (guid, true, 202)
    );
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    assert_eq!(
        listed(&bot, "/repos/acme/infra/pulls"),
        sweeps,
        "no sweep ran meanwhile"
    );
    assert!(bot
        .log()
        .contains("the database answers again: asked GitHub to redeliver what failed"));
}
