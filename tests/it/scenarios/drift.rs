//! Drift: the base's `[drift]` schedule has the bot plan the default
//! branch's head against the deployed estate; a member changed out of band
//! gets one issue with its plan, updated when the drift moves and closed
//! when it is gone; `/apply <digest>` there by an approver applies exactly
//! that plan once, and is refused from an outsider or for a stale digest;
//! a check yields to a pull request's apply, and a failing check says so on
//! the issue without leaving anything behind. On both forges.

use crate::support::bot::*;
use crate::support::issue::IssueHandle;
use crate::support::pr::approved_pr_on;
use crate::support::receiver::Receiver;
use crate::support::redact::redact;
use crate::support::RepoHandle;
use serde_json::json;
use sqlx::Connection as _;
use wavegate::model::JobKind;
use wavegate::store::JobStatus;

/// The example's dev stage, checked every 3 seconds (the operator's floor
/// allows it), with the base telling `drift-alerts`.
fn checked_every_few_seconds(bot: &Bot) {
    bot.edit_base_config(
        "[[stage]]\nname = \"dev\"\ngate = \"never\"",
        "[notify]\nto = [\"drift-alerts\"]\n\n[[stage]]\nname = \"dev\"\ngate = \"never\"\ndrift = \"3s\"",
    );
}

const KEY: &str = "drift-receiver-key";

async fn drifting_bot(receiver: &Receiver) -> Bot {
    drifting_bot_with(receiver, &[]).await
}

/// [`drifting_bot`] with the server's `env` besides.
async fn drifting_bot_with(receiver: &Receiver, env: &[(&str, &str)]) -> Bot {
    let mut settings = vec![
        ("WAVEGATE_DRIFT_MIN_INTERVAL", "1s"),
        ("WAVEGATE_NOTIFY_DRIFT_ALERTS_URL", receiver.url.as_str()),
        ("WAVEGATE_NOTIFY_DRIFT_ALERTS_KEY", KEY),
    ];
    settings.extend_from_slice(env);
    let bot = Bot::start_with(&settings).await;
    checked_every_few_seconds(&bot);
    bot
}

/// The example as `acme/infra` on Forgejo, or on GitHub.
fn repo_on(bot: &Bot, forgejo: bool) -> RepoHandle {
    if forgejo {
        bot.forgejo_repo()
    } else {
        bot.github_repo()
    }
}

/// Someone sets dev's VPC to `cidr` by hand (the code says `10.0.0.0/16`).
fn vpc_edited_by_hand(bot: &Bot, cidr: &str) {
    bot.drift("dev", "network", "aws_vpc.main", "cidr_block", json!(cidr));
}

/// Makes `repo` known to the bot (it learns of repositories through their
/// events) and lets its first drift checks run on an estate that matches.
async fn watched(bot: &Bot, repo: &RepoHandle) {
    bot.forge.set_permission(repo, "rev-bob", "write");
    bot.forge.set_permission(repo, "outsider-mallory", "read");
    bot.opened(repo, 7, "change").await;
    bot.until("a drift check of dev ran", || async {
        let checks = bot
            .metric(&format!("wavegate_drift_checks{{{}}}", dev_of(repo)))
            .await?;
        (checks >= 1.0).then_some(())
    })
    .await;
    assert!(
        bot.forge.issues(repo).is_empty(),
        "a clean estate has no drift issue"
    );
}

/// The metric labels of `repo`'s dev stage.
fn dev_of(repo: &RepoHandle) -> String {
    format!("repository=\"{}\",stage=\"dev\"", repo.repo_ref().id)
}

/// How many drift checks of `repo`'s dev stage ran.
async fn checks_run(bot: &Bot, repo: &RepoHandle) -> f64 {
    let series = format!("wavegate_drift_checks{{{}}}", dev_of(repo));
    bot.metric(&series).await.unwrap_or(0.0)
}

/// The kinds of the facts at drift issue `number`'s gate, in order.
async fn drift_fact_kinds(bot: &Bot, repo: &RepoHandle, number: u64) -> Vec<String> {
    bot.store()
        .await
        .gate_facts(
            &repo.repo_ref().id.to_string(),
            &format!("pr-{number}").parse().unwrap(),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.fact.kind.to_string())
        .collect()
}

/// The open drift issue of `member`, once there is one.
async fn until_drift_issue<'a>(bot: &'a Bot, repo: &RepoHandle, member: &str) -> IssueHandle<'a> {
    let number = bot
        .until(&format!("a drift issue of {member}"), || async {
            bot.forge
                .issues(repo)
                .into_iter()
                .find(|i| i.open && i.title.contains(&format!("`{member}`")))
                .map(|i| i.number)
        })
        .await;
    bot.issue(repo, number)
}

/// The digest the issue's `/apply` line names.
fn apply_line(issue: &IssueHandle<'_>) -> String {
    let body = issue.body();
    body.lines()
        .find(|l| l.starts_with("/apply sha256:"))
        .unwrap_or_else(|| panic!("no /apply line in\n{body}"))
        .to_owned()
}

async fn changed_out_of_band_opens_one_issue_updated_then_closed(forgejo: bool) {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = repo_on(&bot, forgejo);
    watched(&bot, &repo).await;

    // Someone edits the VPC by hand.
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let issue = until_drift_issue(&bot, &repo, "network@dev").await;
    let first = apply_line(&issue);
    // The same issue on both forges.
    insta::allow_duplicates! {
        insta::assert_snapshot!(redact(&issue.body()), @r#"
        <!-- wavegate:drift -->
        ## wavegate drift: `network@dev`

        What is deployed differs from what `main` at `[short]` says: the plan of `network@dev` against the deployed estate is not empty.

        ### `network@dev` — +0 ~1 -0 -/+0

        ```diff
        ~ aws_vpc.main (update)
              cidr_block: "10.9.0.0/16" → "10.0.0.0/16"
          (1 address unchanged)
        ```

        ### Reconcile

        To make what is deployed what `main` says, someone who may approve stage `dev` comments the line below; wavegate then applies exactly this plan with the stage's apply profile (a plan that moved since waits for a new approval):

        ```
        /apply sha256:[digest]
        ```

        Or merge a pull request that makes the code say what is deployed: this issue closes by itself once a check finds it clean.

        <sub>First seen [time]; this plan is of [time]. wavegate updates this issue when the drift changes and closes it when a check finds none.</sub>
        "#);
    }
    // More checks find the same drift: one issue, one notice.
    let seen = checks_run(&bot, &repo).await;
    bot.until("three more checks", || async {
        (checks_run(&bot, &repo).await >= seen + 3.0).then_some(())
    })
    .await;
    assert_eq!(bot.forge.issues(&repo).len(), 1, "one issue, created once");
    let told: Vec<_> = receiver.received().into_iter().map(|r| r.body).collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    assert_eq!(told[0]["event"], "drift");
    assert_eq!(told[0]["drift"], "new");
    assert_eq!(
        bot.metric(&format!("wavegate_drifted_members{{{}}}", dev_of(&repo)))
            .await,
        Some(1.0)
    );

    // A second change moves the drift: the same issue shows the new plan.
    vpc_edited_by_hand(&bot, "10.8.0.0/16");
    let moved = issue.until_a_reply_says("The drift changed").await;
    assert!(moved.contains("was `sha256:"), "{moved}");
    assert_ne!(apply_line(&issue), first);
    assert!(issue.body().contains("10.8.0.0/16"));
    bot.until("the change is notified", || async {
        (receiver.received().len() == 2).then_some(())
    })
    .await;
    assert_eq!(receiver.received()[1].body["drift"], "changed");

    // Put back by hand: the next check finds it clean and closes the issue.
    vpc_edited_by_hand(&bot, "10.0.0.0/16");
    bot.until("the issue closes", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
    assert!(
        issue.last_reply().starts_with("No drift any more"),
        "{}",
        issue.last_reply()
    );
    assert_eq!(bot.forge.issues(&repo).len(), 1);
    assert_eq!(receiver.received().len(), 2, "closing tells no one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_opens_one_issue_that_follows_the_drift_and_closes_on_github() {
    changed_out_of_band_opens_one_issue_updated_then_closed(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_opens_one_issue_that_follows_the_drift_and_closes_on_forgejo() {
    changed_out_of_band_opens_one_issue_updated_then_closed(true).await;
}

async fn apply_by_an_approver_applies_once(forgejo: bool) {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = repo_on(&bot, forgejo);
    watched(&bot, &repo).await;
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let issue = until_drift_issue(&bot, &repo, "network@dev").await;
    let line = apply_line(&issue);
    let applies_before = bot.applies_run().len();

    // An outsider may not; a digest that is not the drift's is refused.
    issue.comment_as("outsider-mallory", &line).await;
    assert!(
        issue.last_reply().contains("may not apply"),
        "{}",
        issue.last_reply()
    );
    issue
        .comment_as("rev-bob", &format!("/apply sha256:{}", "0".repeat(64)))
        .await;
    let stale = issue.last_reply();
    assert!(stale.contains("was not applied"), "{stale}");
    assert_eq!(bot.applies_run().len(), applies_before, "nothing applied");

    // An approver applies exactly the plan shown, once.
    issue.comment_as("rev-bob", &line).await;
    bot.until("the drift is applied and the issue closes", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
    let applied = &bot.applies_run()[applies_before..];
    assert_eq!(applied, ["network@dev"]);
    assert_eq!(
        bot.deployed("dev", "network")["aws_vpc.main"]["cidr_block"],
        "10.0.0.0/16"
    );
    let kinds = drift_fact_kinds(&bot, &repo, issue.number).await;
    assert!(kinds.contains(&"drift_approved".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"drift_applied".to_owned()), "{kinds:?}");
    // A second `/apply` of the same digest applies nothing again.
    issue.comment_as("rev-bob", &line).await;
    bot.settle().await;
    assert_eq!(&bot.applies_run()[applies_before..], ["network@dev"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_on_a_drift_issue_applies_exactly_that_plan_once_on_github() {
    apply_by_an_approver_applies_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_on_a_drift_issue_applies_exactly_that_plan_once_on_forgejo() {
    apply_by_an_approver_applies_once(true).await;
}

/// The drift checks' jobs that ended with `outcome` starting so.
async fn checks_that(bot: &Bot, outcome: &str) -> usize {
    bot.jobs_of(JobKind::Drift)
        .await
        .iter()
        .filter(|j| j.outcome.as_deref().is_some_and(|o| o.starts_with(outcome)))
        .count()
}

async fn waits_for_a_pull_requests_apply(forgejo: bool) {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = repo_on(&bot, forgejo);
    watched(&bot, &repo).await;
    let pr = bot.pr(&repo, 7);
    pr.comment_as("rev-bob", "/approve").await;

    // The merge's apply of app@dev pauses mid-command, holding dev's locks.
    bot.pause_apply("dev", "app", "before");
    pr.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;
    bot.until("a drift check waits for the apply", || async {
        (checks_that(&bot, "waits: the apply of").await > 0).then_some(())
    })
    .await;
    assert!(
        bot.apply_paused("dev", "app"),
        "the check took nothing from it"
    );
    assert!(
        bot.forge.issues(&repo).is_empty(),
        "a merged change on its way is no drift"
    );

    // The apply goes on as if no check ran; the checks after it find dev clean.
    bot.resume_apply("dev", "app");
    bot.until("dev is applied", || async {
        pr.apply_section()
            .contains("`app@dev` | applied")
            .then_some(())
    })
    .await;
    let done = checks_that(&bot, "").await;
    bot.until("two more checks", || async {
        (checks_that(&bot, "").await >= done + 2).then_some(())
    })
    .await;
    assert!(
        bot.forge.issues(&repo).is_empty(),
        "{:#?}",
        bot.forge.issues(&repo)
    );
    let drift_news = receiver
        .received()
        .into_iter()
        .filter(|r| r.body["event"] == "drift")
        .count();
    assert_eq!(drift_news, 0, "no drift was told");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_check_waits_for_a_pull_requests_apply_and_never_holds_it_up_on_github() {
    waits_for_a_pull_requests_apply(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_check_waits_for_a_pull_requests_apply_and_never_holds_it_up_on_forgejo() {
    waits_for_a_pull_requests_apply(true).await;
}

async fn a_failing_plan_is_told_once(forgejo: bool) {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = repo_on(&bot, forgejo);
    watched(&bot, &repo).await;

    std::fs::write(
        bot.estate_file("dev", "database", ".fail-plan"),
        "the state bucket refused the read: AccessDenied\n",
    )
    .unwrap();
    let issue = until_drift_issue(&bot, &repo, "database@dev").await;
    let state = issue.state();
    assert_eq!(state.title, "Drift check failing: `database@dev`");
    assert!(
        state.body.contains("AccessDenied"),
        "its output: {}",
        state.body
    );
    assert!(
        !state.body.contains("/apply"),
        "nothing to apply: {}",
        state.body
    );
    let failures = format!("wavegate_drift_check_failures{{{}}}", dev_of(&repo));
    bot.until("three failed checks", || async {
        (bot.metric(&failures).await? >= 3.0).then_some(())
    })
    .await;
    // One issue, told once; no lock, and no job but the checks themselves.
    assert_eq!(bot.forge.issues(&repo).len(), 1);
    assert!(issue.replies().is_empty(), "{:#?}", issue.replies());
    let mut db = sqlx::SqliteConnection::connect(&bot.database_url())
        .await
        .unwrap();
    let locks: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM member_locks")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(locks, 0, "a check takes no lock");
    let others: Vec<_> = bot
        .jobs()
        .await
        .into_iter()
        .filter(|j| j.kind != JobKind::Drift && j.status == JobStatus::Queued)
        .collect();
    assert!(others.is_empty(), "{others:#?}");
    assert!(
        receiver.received().is_empty(),
        "a failure alone notifies no one"
    );

    // The plan works again: the issue closes.
    std::fs::remove_file(bot.estate_file("dev", "database", ".fail-plan")).unwrap();
    bot.until("the issue closes", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_drift_plan_is_told_once_on_its_issue_and_leaves_nothing_behind_on_github() {
    a_failing_plan_is_told_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_drift_plan_is_told_once_on_its_issue_and_leaves_nothing_behind_on_forgejo() {
    a_failing_plan_is_told_once(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn told_per_stage_one_issue_lists_every_drifted_member_and_its_apply_applies_them_all() {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    bot.edit_base_config("[policy]", "[drift]\nissues = \"stage\"\n\n[policy]");
    let repo = bot.github_repo();
    watched(&bot, &repo).await;

    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    bot.drift(
        "dev",
        "app",
        "aws_instance.app",
        "instance_type",
        json!("t3.2xlarge"),
    );
    let number = bot
        .until("one issue for dev with both members", || async {
            bot.forge.issues(&repo).into_iter().find(|i| {
                i.open
                    && i.title == "Drift: stage `dev` differs from main"
                    && i.body.contains("- [ ] `network@dev`")
                    && i.body.contains("- [ ] `app@dev`")
            })
        })
        .await
        .number;
    assert_eq!(bot.forge.issues(&repo).len(), 1, "one issue for the stage");
    let issue = bot.issue(&repo, number);
    let applies_before = bot.applies_run().len();

    issue.comment_as("rev-bob", &apply_line(&issue)).await;
    bot.until(
        "the stage's drift is applied and its issue closed",
        || async { (!issue.is_open()).then_some(()) },
    )
    .await;
    assert_eq!(
        &bot.applies_run()[applies_before..],
        ["network@dev", "app@dev"],
        "in dependency order"
    );
    assert_eq!(
        bot.deployed("dev", "app")["aws_instance.app"]["instance_type"],
        "t3.small"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_whose_webhook_was_lost_is_taken_up_by_the_sweep() {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot_with(&receiver, &[("WAVEGATE_RECONCILE_EVERY", "1s")]).await;
    let repo = bot.forgejo_repo();
    watched(&bot, &repo).await;
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let issue = until_drift_issue(&bot, &repo, "network@dev").await;
    let applies_before = bot.applies_run().len();

    issue.comment_unheard("rev-bob", &apply_line(&issue));
    bot.until(
        "the sweep takes the /apply up and the issue closes",
        || async { (!issue.is_open()).then_some(()) },
    )
    .await;
    assert_eq!(&bot.applies_run()[applies_before..], ["network@dev"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_pull_request_that_writes_the_drift_into_the_code_closes_its_issue() {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = bot.github_repo();
    watched(&bot, &repo).await;
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let issue = until_drift_issue(&bot, &repo, "network@dev").await;

    // The team keeps the hand-made CIDR: a pull request writes it into the code.
    let resources = bot
        .example
        .read("main", "infra/network/resources.json")
        .replace("10.0.0.0/16", "10.9.0.0/16");
    bot.example.branch(
        "keep-cidr",
        "main",
        &[("infra/network/resources.json", Some(&resources))],
    );
    let pr = approved_pr_on(&bot, &repo, 8, "keep-cidr").await;
    pr.merge().await;
    bot.until("the issue closes by itself", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
    assert!(
        issue.last_reply().starts_with("No drift any more"),
        "{}",
        issue.last_reply()
    );
    assert_eq!(bot.forge.issues(&repo).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_that_moves_after_an_apply_started_gets_a_new_issue_and_two_approvers_apply_it() {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    bot.edit_base_config("drift = \"3s\"", "drift = \"3s\"\nrequired = 2");
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-carol", "write");
    watched(&bot, &repo).await;
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let first = until_drift_issue(&bot, &repo, "network@dev").await;
    let applies_before = bot.applies_run().len();

    // One approval of two: the run starts and waits for the second.
    first.comment_as("rev-bob", &apply_line(&first)).await;
    assert!(first.is_open());
    assert_eq!(bot.applies_run().len(), applies_before);

    // The drift moves meanwhile: a new issue tells it, the first closes.
    vpc_edited_by_hand(&bot, "10.8.0.0/16");
    bot.until("the first issue closes", || async {
        (!first.is_open()).then_some(())
    })
    .await;
    let second = until_drift_issue(&bot, &repo, "network@dev").await;
    assert_ne!(second.number, first.number);
    assert!(second.body().contains("10.8.0.0/16"));
    assert_eq!(
        first.last_reply(),
        format!(
            "The drift changed after an apply was started here; the new drift is told in #{}. Closing.",
            second.number
        )
    );
    // The first issue's digest applies nothing now.
    first.comment_as("rev-carol", &apply_line(&first)).await;
    assert_eq!(bot.applies_run().len(), applies_before);

    // Two approvers of the new one: applied once.
    let line = apply_line(&second);
    second.comment_as("rev-bob", &line).await;
    assert_eq!(bot.applies_run().len(), applies_before, "one of two");
    second.comment_as("rev-carol", &line).await;
    bot.until("the new drift is applied and its issue closed", || async {
        (!second.is_open()).then_some(())
    })
    .await;
    assert_eq!(&bot.applies_run()[applies_before..], ["network@dev"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_apply_that_failed_is_resumed_by_retry_on_its_issue() {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = bot.forgejo_repo();
    watched(&bot, &repo).await;
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let issue = until_drift_issue(&bot, &repo, "network@dev").await;
    let line = apply_line(&issue);

    let fail = bot.estate_file("dev", "network", ".fail-apply");
    std::fs::write(&fail, "the provider timed out\n").unwrap();
    issue.comment_as("rev-bob", &line).await;
    issue.until_a_reply_says("failed").await;
    assert!(issue.is_open());
    // Another /apply does not start it over: /retry does.
    issue.comment_as("rev-bob", &line).await;
    assert!(
        issue.last_reply().contains("`/retry` resumes it"),
        "{}",
        issue.last_reply()
    );

    std::fs::remove_file(&fail).unwrap();
    issue.comment_as("rev-bob", "/retry").await;
    bot.until("the retried apply closes the issue", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
    assert_eq!(
        bot.deployed("dev", "network")["aws_vpc.main"]["cidr_block"],
        "10.0.0.0/16"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_a_stages_checks_off_closes_its_drift_issues() {
    let receiver = Receiver::start(KEY).await;
    let bot = drifting_bot(&receiver).await;
    let repo = bot.github_repo();
    watched(&bot, &repo).await;
    vpc_edited_by_hand(&bot, "10.9.0.0/16");
    let issue = until_drift_issue(&bot, &repo, "network@dev").await;

    bot.edit_base_config("drift = \"3s\"", "drift = \"off\"");
    bot.until("the issue closes", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
    assert_eq!(
        issue.last_reply(),
        "wavegate no longer checks `network@dev` for drift: `main` no longer checks stage `dev`. Closing."
    );
    assert_eq!(
        bot.metric(&format!("wavegate_drifted_members{{{}}}", dev_of(&repo)))
            .await,
        None,
        "the stage left the schedule"
    );
}
