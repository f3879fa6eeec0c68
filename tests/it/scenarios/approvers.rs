//! Who may approve, at the moment it counts: whoever pushed the head is
//! treated like the author; an apply run checks the approvers it uses again
//! (write access, the approvers list); approvals and stage waits may expire;
//! a stage may name its own approvers, count and review rule.

use crate::support::{self, bot::*};
use support::fake_forge::FakePr;
use support::RepoHandle;

impl Bot {
    /// `pusher` pushes `branch` onto PR `pr` (GitHub), and the bot settles.
    async fn push_as(&mut self, repo: &RepoHandle, pr: u64, branch: &str, pusher: &str) -> FakePr {
        let pushed = self.forge.push(repo, pr, &self.rev(branch));
        let delivery = if repo.installation.is_some() {
            support::github_pushed_by(repo, &pushed, pusher)
        } else {
            support::forgejo_pushed_by(repo, &pushed, pusher)
        };
        let (status, answer) = if repo.installation.is_some() {
            self.deliver_github(delivery).await
        } else {
            self.deliver_forgejo(delivery).await
        };
        assert_eq!(status, 202, "{answer}");
        self.settle().await;
        pushed
    }
}

/// rev-carol pushes a commit onto dev-alice's pull request: she is treated
/// like its author and cannot approve the head she pushed; rev-bob can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoever_pushed_the_head_cannot_approve_it() {
    let mut bot = Bot::start().await;
    let (repo, _, _) = planned(&mut bot, 70).await;
    bot.branch_bigger_app("change-2");
    let pushed = bot.push_as(&repo, 70, "change-2", "rev-carol").await;

    let carol = bot.comment(&repo, 70, "rev-carol", "/approve").await;
    assert_eq!(bot.reactions(&repo, carol), ["eyes", "confused"]);
    insta::assert_snapshot!(bot.last_reply(&repo, 70), @"@rev-carol: you pushed this pull request's current head, so you are treated like its author and cannot approve it (`[policy] allow_pusher_approval` is not `true` on the base branch); ask a reviewer who did not push to it");
    assert_eq!(
        bot.conclusion(&repo, &pushed.head_sha).as_deref(),
        Some("action_required")
    );

    let bob = bot.comment(&repo, 70, "rev-bob", "/approve").await;
    assert_eq!(bot.reactions(&repo, bob), ["eyes", "rocket"]);
    assert_eq!(
        bot.conclusion(&repo, &pushed.head_sha).as_deref(),
        Some("success")
    );

    // Once someone else pushes, rev-carol is a reviewer again.
    bot.branch_bigger_app("change-3");
    let again = bot.push_as(&repo, 70, "change-3", "dev-alice").await;
    let carol = bot.comment(&repo, 70, "rev-carol", "/approve").await;
    assert_eq!(bot.reactions(&repo, carol), ["eyes", "rocket"]);
    assert_eq!(
        bot.conclusion(&repo, &again.head_sha).as_deref(),
        Some("success")
    );
    bot.assert_ledger_verifies();
}

/// `allow_pusher_approval = true` on the base lets the pusher approve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_may_let_the_pusher_approve() {
    let mut bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\nallow_pusher_approval = true");
    let (repo, _, _) = planned(&mut bot, 71).await;
    bot.branch_bigger_app("change-2");
    let pushed = bot.push_as(&repo, 71, "change-2", "rev-carol").await;
    let carol = bot.comment(&repo, 71, "rev-carol", "/approve").await;
    assert_eq!(bot.reactions(&repo, carol), ["eyes", "rocket"]);
    assert_eq!(
        bot.conclusion(&repo, &pushed.head_sha).as_deref(),
        Some("success")
    );
}

/// On Forgejo the `synchronized` event's sender is the pusher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_whoever_pushed_the_head_cannot_approve_it() {
    let mut bot = Bot::start().await;
    let (repo, _) = planned_on_forgejo(&mut bot, 72).await;
    bot.forge.set_permission(&repo, "rev-carol", "write");
    bot.branch_bigger_app("change-2");
    let pushed = bot.push_as(&repo, 72, "change-2", "rev-carol").await;
    let state = |bot: &Bot| {
        bot.forge
            .statuses(&repo, &pushed.head_sha)
            .pop()
            .unwrap()
            .state
    };

    let carol = bot.comment(&repo, 72, "rev-carol", "/approve").await;
    assert_eq!(bot.reactions(&repo, carol), ["eyes", "confused"]);
    assert!(bot
        .last_reply(&repo, 72)
        .contains("you pushed this pull request's current head"));
    assert_eq!(state(&bot), "pending");

    bot.comment(&repo, 72, "rev-bob", "/approve").await;
    assert_eq!(state(&bot), "success");
    bot.assert_ledger_verifies();
}

/// rev-bob approves, then loses write access before the merge: the run
/// does not count his approval, says so, and waits; rev-carol's approval
/// lets it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_who_lost_write_access_no_longer_counts_at_apply() {
    let mut bot = Bot::start().await;
    let (repo, _, digest) = planned(&mut bot, 73).await;
    bot.comment(&repo, 73, "rev-bob", "/approve").await;
    bot.forge.set_permission(&repo, "rev-bob", "read");

    bot.merge_and_settle(&repo, 73, "change").await;
    assert!(
        bot.applies_run().is_empty(),
        "nothing applies on a lapsed approval"
    );
    let said = bot.last_reply(&repo, 73);
    assert_eq!(
        said,
        format!(
            "No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:\n\n```\n/approve {digest}\n```\n\n- @rev-bob's approval at `pr-73` no longer counts: they no longer have write access to the repository\n\nAn approval counts only while its approver may still approve; someone who may must approve again.\n\n"
        )
    );
    assert!(bot
        .report(&repo, 73)
        .body
        .contains("- @rev-bob's approval at `pr-73` no longer counts"));

    bot.comment(&repo, 73, "rev-carol", &format!("/approve {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let report = bot.report(&repo, 73).body;
    assert!(report.contains("Approved by @rev-carol."), "{report}");
    bot.assert_ledger_verifies();
}

/// The base lists `team:platform`; rev-carol approves as a member, then
/// leaves the team before the merge: at apply her approval no longer counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_who_left_the_approvers_team_no_longer_counts_at_apply() {
    let mut bot = Bot::start().await;
    bot.edit_base_config("approvers = []", "approvers = [\"team:platform\"]");
    let (repo, _, _) = planned(&mut bot, 74).await;
    bot.forge.add_team_member("acme", "platform", "rev-carol");
    bot.comment(&repo, 74, "rev-carol", "/approve").await;
    bot.forge
        .remove_team_member("acme", "platform", "rev-carol");

    bot.merge_and_settle(&repo, 74, "change").await;
    assert!(bot.applies_run().is_empty());
    assert!(bot.last_reply(&repo, 74).contains(
        "- @rev-carol's approval at `pr-74` no longer counts: they are no longer among the approvers (team:platform)"
    ));
}

/// On Forgejo the permission is asked again the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approver_who_lost_write_access_no_longer_counts_at_apply() {
    let mut bot = Bot::start().await;
    let (repo, _) = planned_on_forgejo(&mut bot, 75).await;
    bot.comment(&repo, 75, "rev-bob", "/approve").await;
    bot.forge.set_permission(&repo, "rev-bob", "read");

    bot.merge_and_settle(&repo, 75, "change").await;
    assert!(bot.applies_run().is_empty());
    assert!(bot.last_reply(&repo, 75).contains(
        "- @rev-bob's approval at `pr-75` no longer counts: they no longer have write access to the repository"
    ));
}

/// Stage prod names its own approvers and count on the base: the pull
/// request's approver may not approve prod; two of prod's approvers must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_names_its_own_approvers_and_how_many() {
    let mut bot = Bot::start().await;
    bot.edit_base_config(
        "gate = \"always\"",
        "gate = \"always\"\napprovers = [\"ops-olga\", \"ops-oscar\"]\nrequired = 2",
    );
    let (repo, _, _) = planned(&mut bot, 76).await;
    for who in ["ops-olga", "ops-oscar"] {
        bot.forge.set_permission(&repo, who, "write");
    }
    bot.comment(&repo, 76, "rev-bob", "/approve").await;
    bot.merge_and_settle(&repo, 76, "change").await;
    assert_eq!(bot.applies_run(), ["app@dev"], "dev applies, prod waits");

    let bob = bot.comment(&repo, 76, "rev-bob", "/approve prod").await;
    assert_eq!(bot.reactions(&repo, bob), ["eyes", "confused"]);
    insta::assert_snapshot!(bot.last_reply(&repo, 76), @"@rev-bob: `approvers` on the base branch (`[policy]`, or this stage's own) lists `ops-olga`, `ops-oscar`, and you are not among them; ask one of them to approve");

    bot.comment(&repo, 76, "ops-olga", "/approve prod").await;
    assert_eq!(bot.applies_run(), ["app@dev"], "one of two");
    bot.comment(&repo, 76, "ops-oscar", "/approve prod").await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    let report = bot.report(&repo, 76).body;
    assert!(
        report.contains("approved by ops-olga, ops-oscar"),
        "{report}"
    );
    bot.assert_ledger_verifies();
}

/// Stage prod counts approving reviews (`review_approvals` on its entry):
/// a review of the merged head approves prod's gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_may_count_approving_reviews() {
    let mut bot = Bot::start().await;
    bot.edit_base_config(
        "gate = \"always\"",
        "gate = \"always\"\nreview_approvals = true",
    );
    let (repo, pr, _) = planned(&mut bot, 77).await;
    bot.comment(&repo, 77, "rev-bob", "/approve").await;
    let merged = bot.merge_and_settle(&repo, 77, "change").await;
    assert_eq!(bot.applies_run(), ["app@dev"]);

    let review = support::github_review(
        "submitted",
        "approved",
        &repo,
        &merged,
        9001,
        "rev-carol",
        &pr.head_sha,
    );
    bot.deliver_github(review).await;
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    assert!(bot.report(&repo, 77).body.contains("approved by rev-carol"));
    bot.assert_ledger_verifies();
}

/// Where the stage says nothing, reviews count only as `[policy]` says (off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_does_not_approve_a_stage_that_does_not_count_reviews() {
    let mut bot = Bot::start().await;
    let (repo, pr, _) = planned(&mut bot, 78).await;
    bot.comment(&repo, 78, "rev-bob", "/approve").await;
    let merged = bot.merge_and_settle(&repo, 78, "change").await;
    let review = support::github_review(
        "submitted",
        "approved",
        &repo,
        &merged,
        9002,
        "rev-carol",
        &pr.head_sha,
    );
    bot.deliver_github(review).await;
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "prod still waits");
}

/// `[policy] approval_ttl = "2s"`: the report says when the approval
/// expires; merged after that, the run does not count it, says so, and a
/// fresh `/approve` lets it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_expires_after_the_bases_ttl() {
    let mut bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\napproval_ttl = \"2s\"");
    let (repo, pr, digest) = planned(&mut bot, 79).await;
    bot.comment(&repo, 79, "rev-bob", "/approve").await;
    let report = bot.report(&repo, 79).body;
    assert!(report.contains(", expires: "), "{report}");
    assert_eq!(
        bot.conclusion(&repo, &pr.head_sha).as_deref(),
        Some("success")
    );

    std::thread::sleep(std::time::Duration::from_millis(2100));
    bot.merge_and_settle(&repo, 79, "change").await;
    assert!(
        bot.applies_run().is_empty(),
        "an expired approval applies nothing"
    );
    let said = bot.last_reply(&repo, 79);
    assert!(
        said.contains("- @rev-bob's approval at `pr-79` no longer counts: it expired at "),
        "{said}"
    );
    assert!(said.contains("(`[policy] approval_ttl` is 2s)"), "{said}");

    bot.comment(&repo, 79, "rev-carol", &format!("/approve {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
}

/// `[[stage]] timeout = "4s"` on prod: its wait says when it expires; nobody
/// approves in time, so prod fails with that reason; a late `/approve prod`
/// is refused; `/retry` opens a fresh gate, which an approval lets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_wait_expires_and_retry_opens_a_fresh_gate() {
    // Reconciliation finds the expired wait.
    let mut bot = Bot::start_with(&[("WAVEGATE_RECONCILE_EVERY", "1s")]).await;
    bot.edit_base_config("gate = \"always\"", "gate = \"always\"\ntimeout = \"4s\"");
    let (repo, _, _) = planned(&mut bot, 80).await;
    bot.comment(&repo, 80, "rev-bob", "/approve").await;
    bot.merge_and_settle(&repo, 80, "change").await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let replies = bot
        .until("prod's wait expires", || async {
            let replies = bot.replies(&repo, 80);
            replies
                .last()
                .is_some_and(|r| r.contains("gate expired"))
                .then_some(replies)
        })
        .await;
    let asked = replies
        .iter()
        .find(|r| r.contains("/approve prod sha256:"))
        .expect("prod's wait was posted");
    assert!(asked.contains("This wait expires: "), "{asked}");
    let failed = replies.last().unwrap();
    assert!(failed.contains("stage prod's gate expired at "), "{failed}");
    assert!(failed.contains("`/retry` opens a fresh gate"), "{failed}");
    let report = bot.report(&repo, 80).body;
    assert!(report.contains("expired: "), "{report}");

    let late = bot.comment(&repo, 80, "rev-carol", "/approve prod").await;
    assert_eq!(bot.reactions(&repo, late), ["eyes", "confused"]);
    assert!(bot
        .last_reply(&repo, 80)
        .contains("stage prod's gate expired at "));

    // /retry opens a fresh gate with a fresh timeout; approved in time, prod applies.
    bot.forge.set_permission(&repo, "rev-carol", "write");
    let retry = bot.forge.add_comment(&repo, 80, "rev-bob", "/retry");
    bot.deliver_github(support::github_comment(
        &repo, 80, retry, "rev-bob", "/retry",
    ))
    .await;
    let fresh = bot
        .until("prod waits again", || async {
            bot.replies(&repo, 80)
                .into_iter()
                .skip(replies.len())
                .find(|r| r.contains("/approve prod sha256:"))
        })
        .await;
    let stage_digest = digest_in(&fresh);
    let id = bot.forge.add_comment(
        &repo,
        80,
        "rev-carol",
        &format!("/approve prod {stage_digest}"),
    );
    bot.deliver_github(support::github_comment(
        &repo,
        80,
        id,
        "rev-carol",
        &format!("/approve prod {stage_digest}"),
    ))
    .await;
    bot.settle().await;
    assert_eq!(
        bot.reactions(&repo, id),
        ["eyes", "rocket"],
        "{:#?}",
        bot.replies(&repo, 80)
    );
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}
