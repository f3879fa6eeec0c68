//! Approvals end to end: `/approve` and reviews against the real binary and
//! the fake forge; every approval binds the digest the report showed, and
//! every fact lands in a ledger that verifies.

use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::{self, bot::*};
use std::time::Duration;
use wavegate::model::JobKind;
use wavegate::store::JobStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outsider_and_the_author_are_refused_and_an_approver_turns_the_check_green() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 21).await;
    let digest = pr.digest();
    assert_eq!(pr.plan_state(), "action_required");

    let outsider = pr.comment_as("outsider-mallory", "/approve").await;
    assert_eq!(pr.reactions(outsider), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@outsider-mallory: approving needs write access to this repository; ask a maintainer to approve, or to give you write access");

    let own = pr.comment_as("dev-alice", "/approve").await;
    assert_eq!(pr.reactions(own), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@dev-alice: the author of a pull request cannot approve it (`[policy] allow_self_approval` is not `true` on the base branch); ask a reviewer");
    assert_eq!(pr.plan_state(), "action_required");

    let approval = pr.comment_as("rev-bob", "Looks right.\n\n/approve").await;
    assert_eq!(pr.reactions(approval), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "success");
    let approvals = pr.approvals_section();
    assert!(approvals.contains(&format!("@rev-bob approved `{digest}`")));
    insta::assert_snapshot!(redact(&approvals), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Approved** (1 of 1 required).

    Gate ledger head when this was written: seq 4, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_makes_a_new_digest_and_the_old_approval_stops_counting() {
    let bot = Bot::start().await;
    let mut pr = planned_pr(&bot, 22).await;
    let first = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;

    bot.branch_bigger_app("change-2");
    pr.push("change-2").await;

    assert_eq!(pr.plan_state(), "action_required");
    assert_ne!(pr.digest(), first);
    let approvals = pr.approvals_section();
    assert!(approvals.contains(&format!("@rev-bob approved `{first}`")));
    insta::assert_snapshot!(redact(&approvals), @"
    ### Approvals

    **Waiting for approval of this plan.** @rev-bob approved `sha256:[digest]` at `[short]`, an earlier plan; an approval binds one plan, so this one needs its own.

    For an earlier plan (kept in the ledger, no longer counting):
    - @rev-bob approved `sha256:[digest]` at `[short]` ([time])

    Gate ledger head when this was written: seq 3, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");

    // Naming the old digest is refused with the current one named.
    let stale = pr.comment_as("rev-bob", &format!("/approve {first}")).await;
    assert_eq!(pr.reactions(stale), ["eyes", "confused"]);
    let current = pr.digest();
    let reply = pr.last_reply();
    assert!(reply.contains(&format!("/approve {current}")), "{reply}");
    insta::assert_snapshot!(redact(&reply), @"@rev-bob: `sha256:[digest]` is not the current plan; the current digest is `sha256:[digest]`: review the report and approve it with `/approve sha256:[digest]`");
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approve_written_before_the_new_plan_was_posted_is_refused() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 23).await;
    let repo = &pr.repo;
    bot.branch_bigger_app("change-2");
    let pushed = bot.forge.push(repo, 23, &bot.rev("change-2"));
    // The reviewer's comment is written while the push is being planned:
    // the forge, its clock 1.1 s behind the bot's (rather than the test
    // waiting 1.1 s), dates it and its delivery more than a second before
    // the plan is posted.
    bot.forge.set_clock_behind(Duration::from_millis(1100));
    let id = bot.forge.add_comment(repo, 23, "rev-bob", "/approve");
    let (event, body) = support::github_comment(repo, 23, id, "rev-bob", "/approve");
    let mut comment: serde_json::Value = serde_json::from_slice(&body).unwrap();
    comment["comment"]["created_at"] = support::fake_forge::rfc3339(bot.forge.now()).into();
    let comment = (event, serde_json::to_vec(&comment).unwrap());
    bot.forge.set_clock_behind(Duration::ZERO);
    bot.tell(
        repo,
        support::github_pull_request("synchronize", repo, &pushed),
    )
    .await;
    bot.tell(repo, comment).await;

    assert_eq!(pr.reactions(id), ["eyes", "confused"]);
    insta::assert_snapshot!(redact(&pr.last_reply()), @"@rev-bob: a new plan for `[short]` was being made when you wrote your comment, so it is not clear which plan you meant; it is posted now with the digest `sha256:[digest]`: review it and approve with `/approve sha256:[digest]`");
    assert_eq!(pr.plan_state(), "action_required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_required_approvers_and_a_pr_that_loosens_the_policy_is_judged_by_the_base() {
    let bot = Bot::start().await;
    // main now requires two approvers; the PR's branch still says one.
    bot.edit_base_config("required = 1", "required = 2");
    let repo = bot.github_repo();
    for who in ["rev-bob", "rev-carol"] {
        bot.forge.set_permission(&repo, who, "write");
    }
    let pr = bot.opened(&repo, 24, "change").await;
    assert!(
        pr.report()
            .contains("the new policy takes effect after merge"),
        "{}",
        pr.report()
    );

    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "action_required");
    insta::assert_snapshot!(redact(&pr.approvals_section()), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Waiting for 1 more approval** (1 of 2).

    This pull request changes `[policy]`. It is judged by the base branch's policy; the new policy takes effect after merge.

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");
    // The same approver again does not count twice.
    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "action_required");
    pr.comment_as("rev-carol", "/approve").await;
    assert_eq!(pr.plan_state(), "success");
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_code_blocks_and_quotes_never_approve() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 25).await;

    // An edited comment that now says /approve.
    let id = bot.forge.add_comment(&pr.repo, 25, "rev-bob", "/approve");
    let (event, body) = support::github_comment(&pr.repo, 25, id, "rev-bob", "/approve");
    let mut edited: serde_json::Value = serde_json::from_slice(&body).unwrap();
    edited["action"] = "edited".into();
    let (status, answer) = bot
        .deliver_github((event, serde_json::to_vec(&edited).unwrap()))
        .await;
    assert_eq!((status, answer["status"].as_str()), (202, Some("ignored")));

    let fenced = pr.comment_as("rev-bob", "Try:\n```\n/approve\n```\n").await;
    let quoted = pr.comment_as("rev-bob", "> /approve\n\nnot yet").await;
    assert!(pr.reactions(fenced).is_empty());
    assert!(pr.reactions(quoted).is_empty());
    assert_eq!(pr.plan_state(), "action_required");
    let jobs = bot.settle().await;
    assert!(
        jobs.iter().all(|j| j.status != JobStatus::Dead),
        "{jobs:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_and_help_and_an_unknown_command() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 26).await;
    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "success");
    let revoke = pr.comment_as("rev-bob", "/revoke").await;
    assert_eq!(pr.reactions(revoke), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "action_required");

    let typo = pr.comment_as("rev-bob", "/aprove").await;
    assert_eq!(pr.reactions(typo), ["eyes", "confused"]);
    // The reply names the typo and includes the help.
    insta::assert_snapshot!(pr.last_reply(), @r"
    @rev-bob: `/aprove` is not a wavegate command.

    wavegate commands: write each at the start of its own line, outside code blocks and quotes.

    - `/approve [stage [wave <k>]] [digest]` — approve the newest plan, for every stage or only the one named (or one wave of a stage approved wave by wave); give the report's digest (`sha256:…`, or its first 12 or more hex digits) to approve exactly the plan you read
    - `/plan [targets]` — plan this pull request again now: everything, or only the targets named (`app`, `app@prod`, `-d <dir>`, `-w <workspace>`) and what reads them, the rest kept from the plan of the same commit
    - `/retry` — resume an apply that failed or was stopped
    - `/revoke` — withdraw your approval of this pull request
    - `/override <member> <reason>` — let a plan the policy denied through for one member (`component@stage`), saying why; for the policy's overriders only
    - `/help` — show this list
    ");
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approving_review_counts_when_the_base_says_so() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    let pr = planned_pr(&bot, 27).await;
    let head = pr.state();

    bot.tell(
        &pr.repo,
        support::github_review(
            "submitted",
            "approved",
            &pr.repo,
            &head,
            501,
            "rev-bob",
            &head.head_sha,
        ),
    )
    .await;
    assert_eq!(pr.plan_state(), "success");

    bot.tell(
        &pr.repo,
        support::github_review(
            "dismissed",
            "dismissed",
            &pr.repo,
            &head,
            501,
            "rev-bob",
            &head.head_sha,
        ),
    )
    .await;
    assert_eq!(pr.plan_state(), "action_required");
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_approve_flow_end_to_end() {
    let bot = Bot::start().await;
    let pr = planned_pr_on_forgejo(&bot, 28).await;
    assert_eq!(pr.plan_state(), "pending");

    let id = pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "success");
    assert_eq!(
        pr.record().await.report_status,
        Some(wavegate::store::ReportStatus::Approved)
    );
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_approvers_and_an_admins_revoke() {
    let bot = Bot::start().await;
    bot.edit_base_config("approvers = []", "approvers = [\"team:platform\"]");
    let pr = planned_pr(&bot, 29).await;
    bot.forge.add_team_member("acme", "platform", "rev-carol");
    bot.forge.set_permission(&pr.repo, "ops-admin", "admin");

    let bob = pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.reactions(bob), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@rev-bob: `approvers` on the base branch (`[policy]`, or this stage's own) lists `team:platform`, and you are not among them; ask one of them to approve");

    pr.comment_as("rev-carol", "/approve").await;
    assert_eq!(pr.plan_state(), "success");

    // An admin may withdraw someone else's approval.
    let revoke = pr.comment_as("ops-admin", "/revoke").await;
    assert_eq!(pr.reactions(revoke), ["eyes", "rocket"]);
    assert_eq!(pr.plan_state(), "action_required");
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approval_needs_the_bot_to_be_a_repository_admin() {
    let bot = Bot::start().await;
    let pr = planned_pr_on_forgejo(&bot, 30).await;
    bot.forge.set_forgejo_bot_admin(false);

    let id = pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.reactions(id), ["eyes", "confused"]);
    // The reply says what to fix.
    insta::assert_snapshot!(pr.last_reply(), @"@rev-bob: wavegate could not check your permission: GET /api/v1/repos/acme/infra/collaborators/rev-bob/permission: 403: Forgejo only tells repository admins; make the bot's account an admin of acme/infra");
    assert_eq!(pr.plan_state(), "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgejo_approving_review_counts_when_the_base_says_so() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    let pr = planned_pr_on_forgejo(&bot, 31).await;

    let (status, answer) = bot
        .deliver_forgejo(support::forgejo_review_approved(
            &pr.repo,
            &pr.state(),
            "rev-bob",
        ))
        .await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (202, Some("queued")),
        "{answer}"
    );
    bot.settle().await;
    assert_eq!(pr.plan_state(), "success");
    insta::assert_snapshot!(redact(&pr.approvals_section()), @"
    ### Approvals

    - ✅ @rev-bob approved `sha256:[digest]` ([time])

    **Approved** (1 of 1 required).

    This pull request changes `[policy]`. It is judged by the base branch's policy; the new policy takes effect after merge.

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_that_leaves_the_digest_unchanged_still_needs_a_new_approval() {
    let bot = Bot::start().await;
    let mut pr = planned_pr(&bot, 32).await;
    let digest = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;

    // Only documentation changes: every plan, and so the digest, stays the
    // same, but the commit the change would be applied from is another.
    bot.example.branch(
        "docs-too",
        "change",
        &[("docs/notes.md", Some("more words\n"))],
    );
    pr.push("docs-too").await;

    assert_eq!(pr.digest(), digest, "the plans did not change");
    assert_eq!(pr.plan_state(), "action_required");
    insta::assert_snapshot!(redact(&pr.approvals_section()), @"
    ### Approvals

    **Waiting for approval of this plan.** @rev-bob approved `sha256:[digest]` at `[short]`, an earlier plan; an approval binds one plan, so this one needs its own.

    For an earlier plan (kept in the ledger, no longer counting):
    - @rev-bob approved `sha256:[digest]` at `[short]` ([time])

    Gate ledger head when this was written: seq 2, `sha256:[digest]`.
    <!-- /wavegate:approvals -->
    ");

    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "success");
}

/// The base says only frank approves. While the bot cannot read its mirror,
/// erin's `/approve` is neither judged by a default policy (which would let
/// anyone with write access in) nor refused with a "fix your config" reply:
/// the attempt fails and is retried, and once the mirror reads again the
/// base's policy decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_never_judged_while_the_base_cannot_be_read() {
    let bot = Bot::start().await;
    bot.edit_base_config("approvers = []", "approvers = [\"frank\"]");
    let pr = planned_pr(&bot, 29).await;
    for who in ["erin", "frank"] {
        bot.forge.set_permission(&pr.repo, who, "write");
    }
    let mirror = bot.dir.path().join("data/mirrors/github/acme/infra.git");
    let away = bot.dir.path().join("objects-away");
    std::fs::rename(mirror.join("objects"), &away).unwrap();

    pr.comment_unsettled("erin", "/approve").await;
    let failed = bot
        .until("the approval's attempt fails", || async {
            bot.jobs()
                .await
                .into_iter()
                .find(|j| j.kind == JobKind::Comment && j.last_error.is_some())
        })
        .await;
    assert!(
        failed
            .last_error
            .as_deref()
            .unwrap()
            .contains("this pull request's gates are judged at"),
        "{failed:#?}"
    );
    assert!(pr.replies().is_empty(), "no verdict was said");
    let facts = bot
        .store()
        .await
        .repo_facts("github:acme/infra")
        .await
        .unwrap();
    assert!(
        facts.iter().all(|f| f.fact.actor.login != "erin"),
        "no fact about erin's approval: {facts:#?}"
    );

    // The mirror reads again: the retry judges by the base's policy.
    std::fs::rename(&away, mirror.join("objects")).unwrap();
    bot.settle().await;
    // erin is not an approver: one verdict, said once.
    insta::assert_snapshot!(pr.replies().join("\n---\n"), @"@erin: `approvers` on the base branch (`[policy]`, or this stage's own) lists `frank`, and you are not among them; ask one of them to approve");
    assert_eq!(pr.plan_state(), "action_required");
    pr.comment_as("frank", "/approve").await;
    assert_eq!(pr.plan_state(), "success");
}

/// A server whose data dir holds no mirror of the repository (another
/// replica planned it, or the data dir started afresh) fetches the base the
/// gate is judged at before it judges an approval, instead of failing every
/// attempt until the approval is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_on_a_server_without_the_mirror_is_judged_at_the_fetched_base() {
    let bot = Bot::start().await;
    bot.edit_base_config("approvers = []", "approvers = [\"frank\"]");
    let pr = planned_pr(&bot, 27).await;
    bot.forge.set_permission(&pr.repo, "frank", "write");
    let mirror = bot.dir.path().join("data/mirrors/github/acme/infra.git");
    std::fs::remove_dir_all(&mirror).unwrap();

    pr.comment_as("frank", "/approve").await;
    assert_eq!(
        pr.plan_state(),
        "success",
        "{:#?}\n{}",
        bot.jobs().await,
        bot.log()
    );
    let comment_jobs = bot.jobs_of(JobKind::Comment).await;
    assert_eq!(comment_jobs.len(), 1);
    assert_eq!(comment_jobs[0].attempts, 1, "{comment_jobs:#?}");
}

/// Every gate that starts waiting appends one `pending` fact — what is
/// asked (the digest and its members) and since when — once per gate and
/// digest, however often the report is written again; a push that moves the
/// digest asks anew; after merge, prod's gate asks for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_starts_waiting_says_so_in_the_ledger_once_per_digest() {
    let bot = Bot::start().await;
    let mut pr = planned_pr(&bot, 28).await;
    let digest = pr.digest();
    pr.comment_as("outsider-mallory", "/approve").await;
    let pending = |facts: Vec<wavegate::gate::ledger::Fact>| -> Vec<(String, serde_json::Value)> {
        facts
            .into_iter()
            .filter(|f| f.fact.kind == wavegate::gate::ledger::FactKind::Pending)
            .map(|f| (f.fact.digest.to_string(), f.fact.data.to_value()))
            .collect()
    };
    let store = bot.store().await;
    let asked = pending(
        store
            .gate_facts("github:acme/infra", &"pr-28".parse().unwrap())
            .await
            .unwrap(),
    );
    assert_eq!(
        asked.len(),
        1,
        "once, though the report was written again: {asked:#?}"
    );
    assert_eq!(asked[0].0, digest);
    assert_eq!(
        asked[0].1["members"],
        serde_json::json!(["app@dev", "app@prod", "dns@prod"])
    );
    assert!(
        asked[0].1["description"]
            .as_str()
            .unwrap()
            .starts_with("pull request #28 waits for an approval of its change set"),
        "{asked:#?}"
    );

    bot.branch_bigger_app("change-2");
    pr.push("change-2").await;
    let moved = pr.digest();
    let asked = pending(
        store
            .gate_facts("github:acme/infra", &"pr-28".parse().unwrap())
            .await
            .unwrap(),
    );
    assert_eq!(
        asked.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(),
        [digest, moved],
        "the moved digest is asked for anew"
    );

    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let prod = pending(
        store
            .gate_facts("github:acme/infra", &"pr-28-prod".parse().unwrap())
            .await
            .unwrap(),
    );
    assert_eq!(prod.len(), 1, "{prod:#?}");
    assert_eq!(
        prod[0].1["members"],
        serde_json::json!(["app@prod", "dns@prod"])
    );
    bot.assert_ledger_verifies();
}

/// The report's "After merge" section, with the base commit written `<base>`.
fn after_merge_section(pr: &PrHandle<'_>) -> String {
    let section = pr.section("After merge");
    let base = section
        .split("wavegate.toml` at `")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_default()
        .to_owned();
    section.replace(&base, "<base>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_previews_each_stage_as_the_base_decides_it_and_a_loosened_gate_counts_after_merge(
) {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "name = \"prod\"\ngate = \"always\"",
        "name = \"prod\"\ngate = \"always\"\napprovers = [\"rev-carol\"]\ntimeout = \"24h\"",
    );
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    let config = bot.example.read("change", "wavegate.toml");
    let loosened = config.replace(
        "name = \"prod\"\ngate = \"always\"",
        "name = \"prod\"\ngate = \"never\"",
    );
    assert_ne!(config, loosened);
    bot.example
        .branch("loosen", "change", &[("wavegate.toml", Some(&loosened))]);
    let pr = bot.opened(&repo, 26, "loosen").await;

    insta::assert_snapshot!(after_merge_section(&pr), @"
    ### After merge

    Gates and approvers as the base branch sets them (`wavegate.toml` at `<base>`): a pull request cannot change its own.

    **dev** — gate `never` (read at the base): applies under this pull request's approval

    - dev · wave 1: `network@dev`
    - dev · wave 2: `database@dev`
    - dev · wave 3: `app@dev`

    **prod** — gate `always` (read at the base): waits for `/approve prod` after merge; approvers (this stage's own): `rev-carol` · 1 approval needed · not the author, nor whoever pushed the head; the wait expires after 24h

    - prod · wave 1: `network@prod`
    - prod · wave 2: `database@prod`
    - prod · wave 3: `app@prod`
    - prod · wave 4: `dns@prod`

    **Who may approve this pull request:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    > ℹ️ This pull request edits `prod`'s gate: `always` at the base, `never` here; `prod`'s approvers, required count, reviews or timeout. That counts only after merge: this pull request and its own apply run are judged by the base's settings shown here.
    ");
}
