//! Who may approve, at the moment it counts: whoever pushed the head is
//! treated like the author; an apply run checks the approvers it uses again
//! (write access, the approvers list); approvals and stage waits may expire;
//! a stage may name its own approvers, count and review rule.

use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::{self, bot::*};

/// rev-carol pushes a commit onto dev-alice's pull request: she is treated
/// like its author and cannot approve the head she pushed; rev-bob can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoever_pushed_the_head_cannot_approve_it() {
    let bot = Bot::start().await;
    let mut pr = planned_pr(&bot, 70).await;
    bot.branch_bigger_app("change-2");
    pr.push_as("change-2", "rev-carol").await;

    let carol = pr.comment_as("rev-carol", "/approve").await;
    assert_eq!(pr.reactions(carol), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@rev-carol: you pushed this pull request's current head, so you are treated like its author and cannot approve it (`[policy] allow_pusher_approval` is not `true` on the base branch); ask a reviewer who did not push to it");
    assert_eq!(pr.plan_state(), "action_required");

    let bob = pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.reactions(bob), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "success");

    // Once someone else pushes, rev-carol is a reviewer again.
    bot.branch_bigger_app("change-3");
    pr.push_as("change-3", "dev-alice").await;
    let carol = pr.comment_as("rev-carol", "/approve").await;
    assert_eq!(pr.reactions(carol), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "success");
    bot.assert_ledger_verifies();
}

/// `allow_pusher_approval = true` on the base lets the pusher approve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_may_let_the_pusher_approve() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\nallow_pusher_approval = true");
    let mut pr = planned_pr(&bot, 71).await;
    bot.branch_bigger_app("change-2");
    pr.push_as("change-2", "rev-carol").await;
    let carol = pr.comment_as("rev-carol", "/approve").await;
    assert_eq!(pr.reactions(carol), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "success");
}

/// On Forgejo the `synchronized` event's sender is the pusher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_whoever_pushed_the_head_cannot_approve_it() {
    let bot = Bot::start().await;
    let mut pr = planned_pr_on_forgejo(&bot, 72).await;
    bot.forge.set_permission(&pr.repo, "rev-carol", "write");
    bot.branch_bigger_app("change-2");
    pr.push_as("change-2", "rev-carol").await;

    let carol = pr.comment_as("rev-carol", "/approve").await;
    assert_eq!(pr.reactions(carol), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@rev-carol: you pushed this pull request's current head, so you are treated like its author and cannot approve it (`[policy] allow_pusher_approval` is not `true` on the base branch); ask a reviewer who did not push to it");
    assert_eq!(pr.plan_state(), "pending");

    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "success");
    bot.assert_ledger_verifies();
}

/// rev-bob approves, then loses write access before the merge: the run
/// does not count his approval, says so, and waits; rev-carol's approval
/// lets it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_who_lost_write_access_no_longer_counts_at_apply() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 73).await;
    let digest = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;
    bot.forge.set_permission(&pr.repo, "rev-bob", "read");

    pr.merge().await;
    assert!(
        bot.applies_run().is_empty(),
        "nothing applies on a lapsed approval"
    );
    let said = pr.last_reply();
    assert_eq!(
        said,
        format!(
            "No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:\n\n```\n/approve {digest}\n```\n\n- @rev-bob's approval at `pr-73` no longer counts: they no longer have write access to the repository\n\nAn approval counts only while its approver may still approve; someone who may must approve again.\n\n"
        )
    );
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: waiting

    No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:

    ```
    /approve sha256:[digest]
    ```

    - @rev-bob's approval at `pr-73` no longer counts: they no longer have write access to the repository

    An approval counts only while its approver may still approve; someone who may must approve again.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | not started |
    | prod | 1 | `app@prod` | not started |
    | prod | 2 | `dns@prod` | not started |
    ");

    pr.comment_as("rev-carol", &format!("/approve {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-carol.

    Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod sha256:[digest]
    ```

    - @rev-bob's approval at `pr-73` no longer counts: they no longer have write access to the repository

    An approval counts only while its approver may still approve; someone who may must approve again.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 2 | `dns@prod` | waiting: stage prod waits for `/approve prod` |

    - Stage **prod** gate `pr-73-prod`: set `sha256:[digest]`, waiting
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");
    bot.assert_ledger_verifies();
}

/// The base lists `team:platform`; rev-carol approves as a member, then
/// leaves the team before the merge: at apply her approval no longer counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_who_left_the_approvers_team_no_longer_counts_at_apply() {
    let bot = Bot::start().await;
    bot.edit_base_config("approvers = []", "approvers = [\"team:platform\"]");
    let pr = planned_pr(&bot, 74).await;
    bot.forge.add_team_member("acme", "platform", "rev-carol");
    pr.comment_as("rev-carol", "/approve").await;
    bot.forge
        .remove_team_member("acme", "platform", "rev-carol");

    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:

    ```
    /approve sha256:[digest]
    ```

    - @rev-carol's approval at `pr-74` no longer counts: they are no longer among the approvers (team:platform)

    An approval counts only while its approver may still approve; someone who may must approve again.
    ");
}

/// On Forgejo the permission is asked again the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approver_who_lost_write_access_no_longer_counts_at_apply() {
    let bot = Bot::start().await;
    let pr = planned_pr_on_forgejo(&bot, 75).await;
    pr.comment_as("rev-bob", "/approve").await;
    bot.forge.set_permission(&pr.repo, "rev-bob", "read");

    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:

    ```
    /approve sha256:[digest]
    ```

    - @rev-bob's approval at `pr-75` no longer counts: they no longer have write access to the repository

    An approval counts only while its approver may still approve; someone who may must approve again.
    ");
}

/// Stage prod names its own approvers and count on the base: the pull
/// request's approver may not approve prod; two of prod's approvers must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_names_its_own_approvers_and_how_many() {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "gate = \"always\"",
        "gate = \"always\"\napprovers = [\"ops-olga\", \"ops-oscar\"]\nrequired = 2",
    );
    let pr = planned_pr(&bot, 76).await;
    for who in ["ops-olga", "ops-oscar"] {
        bot.forge.set_permission(&pr.repo, who, "write");
    }
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "dev applies, prod waits");

    let bob = pr.comment_as("rev-bob", "/approve prod").await;
    assert_eq!(pr.reactions(bob), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@rev-bob: `approvers` on the base branch (`[policy]`, or this stage's own) lists `ops-olga`, `ops-oscar`, and you are not among them; ask one of them to approve");

    pr.comment_as("ops-olga", "/approve prod").await;
    assert_eq!(bot.applies_run(), ["app@dev"], "one of two");
    pr.comment_as("ops-oscar", "/approve prod").await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: applied

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | applied |
    | prod | 2 | `dns@prod` | applied |

    - Stage **prod** gate `pr-76-prod`: set `sha256:[digest]`, approved by ops-olga, ops-oscar
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    - Round 2 (prod, gate `pr-76-round-2`): digest `sha256:[digest]`, covered by the approval: only what was unknown moved (filled in `dns@prod.hostname`)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");
    bot.assert_ledger_verifies();
}

/// Stage prod counts approving reviews (`review_approvals` on its entry):
/// a review of the merged head approves prod's gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_may_count_approving_reviews() {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "gate = \"always\"",
        "gate = \"always\"\nreview_approvals = true",
    );
    let pr = planned_pr(&bot, 77).await;
    let head = pr.head();
    pr.comment_as("rev-bob", "/approve").await;
    let merged = pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);

    let review = support::github_review(
        "submitted",
        "approved",
        &pr.repo,
        &merged,
        9001,
        "rev-carol",
        &head,
    );
    bot.tell(&pr.repo, review).await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: applied

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | applied |
    | prod | 2 | `dns@prod` | applied |

    - Stage **prod** gate `pr-77-prod`: set `sha256:[digest]`, approved by rev-carol
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    - Round 2 (prod, gate `pr-77-round-2`): digest `sha256:[digest]`, covered by the approval: only what was unknown moved (filled in `dns@prod.hostname`)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");
    bot.assert_ledger_verifies();
}

/// A review of the merged head submitted before prod's gate waited did not
/// see the set the gate waits on (its webhook came late): it is refused,
/// saying how to approve, and one submitted once the gate waits counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_submitted_before_the_stage_gate_waited_does_not_approve_it() {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "gate = \"always\"",
        "gate = \"always\"\nreview_approvals = true",
    );
    let pr = planned_pr(&bot, 78).await;
    let head = pr.head();
    pr.comment_as("rev-bob", "/approve").await;
    let merged = pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);

    let (event, body) = support::github_review(
        "submitted",
        "approved",
        &pr.repo,
        &merged,
        9002,
        "rev-carol",
        &head,
    );
    let mut late: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    late["review"]["submitted_at"] = serde_json::json!(support::fake_forge::rfc3339(an_hour_ago));
    bot.tell(&pr.repo, (event, serde_json::to_vec(&late).unwrap()))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"], "prod still waits");
    let facts = bot
        .store()
        .await
        .gate_facts("github:acme/infra", &"pr-78-prod".parse().unwrap())
        .await
        .unwrap();
    let refused = facts
        .iter()
        .find(|f| f.fact.kind == wavegate::gate::ledger::FactKind::Refused)
        .expect("the late review is refused in the ledger");
    let why = refused.fact.data.reason.as_deref().unwrap_or_default();
    assert!(
        why.contains("the review was submitted before the run's gate waited")
            && why.contains("/approve sha256:"),
        "{why}"
    );

    let review = support::github_review(
        "submitted",
        "approved",
        &pr.repo,
        &merged,
        9003,
        "rev-carol",
        &head,
    );
    bot.tell(&pr.repo, review).await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}

/// On Forgejo the webhook says neither the review's id nor when it was
/// submitted: the listing does, so a review submitted once prod's gate
/// waits approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_a_review_submitted_once_the_stage_gate_waits_approves_it() {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "gate = \"always\"",
        "gate = \"always\"\nreview_approvals = true",
    );
    let pr = planned_pr_on_forgejo(&bot, 79).await;
    let head = pr.state();
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);

    bot.forge.set_permission(&pr.repo, "rev-carol", "write");
    pr.review_unheard("rev-carol", "APPROVED");
    bot.tell(
        &pr.repo,
        support::forgejo_review_approved(&pr.repo, &head, "rev-carol"),
    )
    .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    bot.assert_ledger_verifies();
}

/// Where the stage says nothing, reviews count only as `[policy]` says (off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_does_not_approve_a_stage_that_does_not_count_reviews() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 78).await;
    let head = pr.head();
    pr.comment_as("rev-bob", "/approve").await;
    let merged = pr.merge().await;
    let review = support::github_review(
        "submitted",
        "approved",
        &pr.repo,
        &merged,
        9002,
        "rev-carol",
        &head,
    );
    bot.tell(&pr.repo, review).await;
    assert_eq!(bot.applies_run(), ["app@dev"], "prod still waits");
}

/// `[policy] approval_ttl = "1h"`: the report says when the approval
/// expires; merged an hour later (by the server's clock), the run does not
/// count it, says so, and a fresh `/approve` lets it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_expires_after_the_bases_ttl() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\napproval_ttl = \"1h\"");
    let pr = planned_pr(&bot, 79).await;
    let digest = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;
    insta::assert_snapshot!(redact(&pr.approvals_section()), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time], expires: [time])

    **Approved** (1 of 1 required).

    This pull request changes `[policy]`. It is judged by the base branch's policy; the new policy takes effect after merge.

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");
    assert_eq!(pr.plan_state(), "success");

    bot.advance_clock(std::time::Duration::from_secs(3601))
        .await;
    pr.merge().await;
    assert!(
        bot.applies_run().is_empty(),
        "an expired approval applies nothing"
    );
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:

    ```
    /approve sha256:[digest]
    ```

    - @rev-bob's approval at `pr-79` no longer counts: it expired at [time] (`[policy] approval_ttl` is 1h)

    An approval counts only while its approver may still approve; someone who may must approve again.
    ");

    pr.comment_as("rev-carol", &format!("/approve {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
}

/// `[[stage]] timeout = "1h"` on prod: its wait says when it expires; nobody
/// approves within the hour (by the server's clock), so prod fails with that
/// reason; a late `/approve prod` is refused; `/retry` opens a fresh gate,
/// which an approval lets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_wait_expires_and_retry_opens_a_fresh_gate() {
    // Reconciliation finds the expired wait.
    let bot = Bot::reconciling_every("1s").await;
    bot.edit_base_config("gate = \"always\"", "gate = \"always\"\ntimeout = \"1h\"");
    let pr = planned_pr(&bot, 80).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    pr.until_a_reply_says("/approve prod sha256:").await;
    bot.advance_clock(std::time::Duration::from_secs(3601))
        .await;
    let replies = bot
        .until("prod's wait expires", || async {
            let replies = pr.replies();
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
    insta::assert_snapshot!(redact(asked), @"
    Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod sha256:[digest]
    ```

    This wait expires: [time]. Unapproved by then, stage prod fails, and `/retry` opens a fresh gate.
    ");
    insta::assert_snapshot!(redact(replies.last().unwrap()), @"The apply on [short] failed: `app@prod` failed: stage prod's gate expired at [time] with no `/approve prod` (its `timeout` on the base); `/retry` opens a fresh gate; `dns@prod` failed: stage prod's gate expired at [time] with no `/approve prod` (its `timeout` on the base); `/retry` opens a fresh gate. Members that applied stay applied; `/retry` plans what failed again and applies what the approvals cover.");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | failed: stage prod's gate expired at [time] with no `/approve prod` (its `timeout` on the base); `/retry` opens a fresh gate |
    | prod | 2 | `dns@prod` | failed: stage prod's gate expired at [time] with no `/approve prod` (its `timeout` on the base); `/retry` opens a fresh gate |

    - Stage **prod** gate `pr-80-prod`: set `sha256:[digest]`, expired: [time], with no approval; `/retry` opens a fresh gate
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");

    let late = pr.comment_as("rev-carol", "/approve prod").await;
    assert_eq!(pr.reactions(late), ["eyes", "confused"]);
    insta::assert_snapshot!(redact(&pr.last_reply()), @"@rev-carol: stage prod's gate expired at [time] with no approval (its `timeout` on the base branch), so its members did not apply; `/retry` opens a fresh gate for it, which you can then approve");

    // /retry opens a fresh gate with a fresh timeout; approved in time, prod applies.
    bot.forge.set_permission(&pr.repo, "rev-carol", "write");
    pr.comment_unsettled("rev-bob", "/retry").await;
    let fresh = bot
        .until("prod waits again", || async {
            pr.replies()
                .into_iter()
                .skip(replies.len())
                .find(|r| r.contains("/approve prod sha256:"))
        })
        .await;
    let stage_digest = digest_in(&fresh);
    let id = pr
        .comment_as("rev-carol", &format!("/approve prod {stage_digest}"))
        .await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"], "{:#?}", pr.replies());
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}
