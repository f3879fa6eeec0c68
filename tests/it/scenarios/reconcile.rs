//! Reconciliation end to end: webhooks dropped on purpose, and the sweep
//! (every second here) finds what the forge says and the store does not.

use crate::support::{self, bot::*};
use wavegate::model::PrNumber;

impl Bot {
    async fn reconciling() -> Bot {
        Bot::start_with(&[("WAVEGATE_RECONCILE_EVERY", "1s")]).await
    }

    /// How many times the fake forge was asked for `path` (GET).
    fn listed(&self, path: &str) -> usize {
        self.forge
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path)
            .count()
    }

    /// Sweeps started so far, as the forge sees them: each sweep first lists
    /// the App's webhook deliveries (and so does the server once the
    /// database answers again after refusing a delivery).
    fn sweeps_started(&self) -> usize {
        self.listed("/app/hook/deliveries")
    }

    /// Waits until `n` more sweeps have started and finished (sweeps run one
    /// after another: the n-th has finished once the next one started),
    /// then for every job.
    async fn after_sweeps(&self, n: usize) {
        let target = self.sweeps_started() + n + 1;
        self.until(&format!("{n} more sweeps"), || async {
            (self.sweeps_started() >= target).then_some(())
        })
        .await;
        self.settle().await;
    }

    /// On PostgreSQL through a link the test can cut, sweeping every `every`.
    async fn behind_a_link_sweeping_every(every: &str) -> (Bot, support::outage::DatabaseLink) {
        let database = PostgresDatabase::create().await;
        let link = support::outage::DatabaseLink::to(&database.url).await;
        let through_link = link.url_for(&database.url);
        let mut bot = Bot::start_with(&[
            ("WAVEGATE_DATABASE_URL", &through_link),
            ("WAVEGATE_RECONCILE_EVERY", every),
        ])
        .await;
        bot.postgres = Some(database);
        (bot, link)
    }

    /// rev-bob's `/approve` on PR 1, delivered by the forge while the
    /// database is away: answered 503. Its comment id and delivery guid.
    async fn approve_refused_with_503(&mut self, repo: &support::RepoHandle) -> (u64, String) {
        let id = self.forge.add_comment(repo, 1, "rev-bob", "/approve");
        let (status, body, guid) = self
            .deliver_via_forge(support::github_comment(repo, 1, id, "rev-bob", "/approve"))
            .await;
        assert_eq!(status, 503, "{body}");
        (id, guid)
    }

    /// Waits until the redelivered approval makes PR `pr`'s check succeed,
    /// then for every job; the one redelivery asked of GitHub.
    async fn once_the_approval_counts(
        &self,
        repo: &support::RepoHandle,
        pr: &support::fake_forge::FakePr,
    ) -> support::RecordedRequest {
        self.until("the approval counts", || async {
            (self.conclusion(repo, &pr.head_sha).as_deref() == Some("success")).then_some(())
        })
        .await;
        self.settle().await;
        let mut asked = self.forge.redelivery_requests();
        assert_eq!(asked.len(), 1, "{asked:#?}");
        asked.pop().unwrap()
    }

    /// Sweeping every `every` (e.g. `"5s"`).
    async fn reconciling_every(every: &str) -> Bot {
        Bot::start_with(&[("WAVEGATE_RECONCILE_EVERY", every)]).await
    }

    async fn jobs_of_kind(&self, kind: &str) -> usize {
        self.jobs().await.iter().filter(|j| j.kind == kind).count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_webhook_was_lost_is_planned_by_the_next_sweep() {
    let mut bot = Bot::reconciling().await;
    let (repo, _pr, first_digest) = planned(&mut bot, 1).await;
    let first = bot.report(&repo, 1);
    bot.after_sweeps(1).await;
    assert_eq!(bot.jobs_of_kind("plan").await, 1, "nothing moved: no plan");

    // The push's delivery is dropped: only the forge knows the new head.
    bot.branch_bigger_app("change-2");
    let pushed = bot.forge.push(&repo, 1, &bot.rev("change-2"));
    let moved = bot
        .until("a sweep plans the new head", || async {
            let report = bot.report(&repo, 1);
            let digest = digest_in(&report.body);
            (digest != first_digest).then_some((report, digest))
        })
        .await;
    bot.settle().await;
    let (second, second_digest) = moved;
    assert_eq!(second.id, first.id, "the report is edited in place");
    assert!(bot.log().contains("not what was last planned: planning it"));
    let checks = bot.forge.check_runs(&repo, &pushed.head_sha);
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0].conclusion.as_deref(), Some("action_required"));
    assert!(checks[0].output["summary"]
        .as_str()
        .unwrap()
        .contains(&second_digest));

    // Later sweeps find nothing more to do.
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("plan").await, 2, "planned once more");

    // Closed without merging, and that webhook is lost too.
    bot.forge.close(&repo, 1);
    let store = bot.store().await;
    let id = wavegate::model::RepoId::new(wavegate::model::ForgeKind::GitHub, "acme/infra");
    bot.until("a sweep marks the pull request closed", || async {
        let pr = store.pr(&id, PrNumber(1)).await.unwrap().unwrap();
        (!pr.open).then_some(())
    })
    .await;
    bot.after_sweeps(1).await;
    assert_eq!(bot.jobs().await.len(), 2, "closing causes no work");
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_whose_webhook_was_lost_starts_its_apply_run_once() {
    let mut bot = Bot::reconciling().await;
    let (repo, _pr, _digest) = planned(&mut bot, 1).await;
    bot.comment(&repo, 1, "rev-bob", "/approve").await;

    // Merged on the forge; the `closed` delivery never arrives.
    let merged = bot.merge(&repo, 1, "change");
    bot.until("a sweep starts the apply run and dev applies", || async {
        (bot.applies_run() == ["app@dev"]).then_some(())
    })
    .await;
    bot.settle().await;
    assert!(bot
        .log()
        .contains("without a webhook: starting its apply run"));
    let sha = merged.merge_sha.as_deref().unwrap();
    let check = bot
        .check_runs_named(&repo, sha, "wavegate/apply")
        .pop()
        .expect("an apply check on the merge commit");
    assert_eq!(check.output["title"], "Waiting: /approve prod");

    // The run waits for a person: later sweeps neither start it again nor resume it.
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("merged").await, 1);
    assert_eq!(bot.jobs_of_kind("apply").await, 0);
    assert_eq!(bot.applies_run(), ["app@dev"]);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_whose_webhook_was_lost_is_taken_up_by_the_sweep_once() {
    let mut bot = Bot::reconciling().await;
    let (repo, pr, digest) = planned(&mut bot, 1).await;
    bot.after_sweeps(1).await;

    // rev-bob approves; the delivery never arrives.
    let id = bot
        .forge
        .add_comment(&repo, 1, "rev-bob", "Looks right.\n\n/approve");
    bot.until("a sweep takes the approval up", || async {
        (bot.conclusion(&repo, &pr.head_sha).as_deref() == Some("success")).then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    assert!(bot.log().contains("came without a webhook: taking it up"));
    let report = bot.report(&repo, 1).body;
    assert!(
        report.contains(&format!("@rev-bob approved `{digest}`")),
        "{report}"
    );

    // The delivery turns up late (or is redelivered), and more sweeps run:
    // nothing more is done.
    let (status, answer) = bot
        .deliver_github(support::github_comment(
            &repo,
            1,
            id,
            "rev-bob",
            "Looks right.\n\n/approve",
        ))
        .await;
    assert_eq!(status, 202, "{answer}");
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("comment").await, 1);
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    assert!(
        bot.replies(&repo, 1).is_empty(),
        "{:?}",
        bot.replies(&repo, 1)
    );

    // A comment whose webhook came is not run again by the sweep either.
    let carol = bot.comment(&repo, 1, "rev-carol", "/approve").await;
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("comment").await, 2);
    assert_eq!(bot.reactions(&repo, carol), ["eyes", "rocket"]);
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approval_whose_webhook_was_lost_is_taken_up_once() {
    let mut bot = Bot::reconciling().await;
    let (repo, pr) = planned_on_forgejo(&mut bot, 2).await;
    let state = |bot: &Bot| bot.forge.statuses(&repo, &pr.head_sha).pop().unwrap().state;
    assert_eq!(state(&bot), "pending");
    bot.after_sweeps(1).await;

    let id = bot.forge.add_comment(&repo, 2, "rev-bob", "/approve");
    bot.until("a sweep takes the approval up", || async {
        (state(&bot) == "success").then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);

    let (status, answer) = bot
        .deliver_forgejo(support::forgejo_comment(
            &repo, 2, id, "rev-bob", "/approve",
        ))
        .await;
    assert_eq!(status, 202, "{answer}");
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("comment").await, 1);
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_comment_never_approves_by_the_sweep() {
    let mut bot = Bot::reconciling().await;
    let (repo, pr, _digest) = planned(&mut bot, 3).await;
    bot.after_sweeps(1).await;

    // Written as a remark, edited into an approval; neither webhook came
    // (an edit is never a command anyway).
    let listed = bot.forge.requests().len();
    let id = bot
        .forge
        .add_edited_comment(&repo, 3, "rev-bob", "Looking at it.", "/approve");
    bot.until("a sweep lists the comments again", || async {
        bot.forge.requests()[listed..]
            .iter()
            .any(|r| r.method == "GET" && r.path == "/repos/acme/infra/issues/comments")
            .then_some(())
    })
    .await;
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("comment").await, 0);
    assert!(bot.reactions(&repo, id).is_empty());
    assert_eq!(
        bot.conclusion(&repo, &pr.head_sha).as_deref(),
        Some("action_required")
    );
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_taken_up_by_the_sweep_binds_to_the_report_before_it_was_written() {
    // Sweeps far enough apart that the next one comes after the new report.
    let mut bot = Bot::reconciling_every("6s").await;
    let (repo, _pr, first) = planned(&mut bot, 4).await;
    bot.after_sweeps(1).await;

    // rev-bob approves the report he saw (the delivery is lost); a push
    // lands after and its plan is posted more than a second later.
    let id = bot.forge.add_comment(&repo, 4, "rev-bob", "/approve");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    bot.branch_bigger_app("change-2");
    let pushed = bot.forge.push(&repo, 4, &bot.rev("change-2"));
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    bot.settle().await;
    let second = digest_in(&bot.report(&repo, 4).body);
    assert_ne!(second, first);

    // The sweep finds the comment: written before the new report, it does
    // not approve it (as its webhook would not have).
    bot.until("a sweep takes the comment up", || async {
        (!bot.reactions(&repo, id).is_empty()).then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.reactions(&repo, id), ["eyes", "confused"]);
    let reply = bot.replies(&repo, 4).pop().expect("a reply");
    assert!(reply.contains("when you wrote your comment"), "{reply}");
    assert!(reply.contains(&second), "{reply}");
    assert_eq!(
        bot.conclusion(&repo, &pushed.head_sha).as_deref(),
        Some("action_required")
    );
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_repository_is_swept_on_304s_that_spend_no_budget() {
    let mut bot = Bot::reconciling().await;
    let (repo, _pr, _digest) = planned(&mut bot, 1).await;
    let installation = repo.installation.unwrap();
    bot.after_sweeps(2).await;

    // Nothing changes: every listing is answered 304, and GitHub's budget
    // does not move.
    let (spent, not_modified) = (
        bot.forge.budget_used(installation),
        bot.forge.not_modified(),
    );
    bot.after_sweeps(3).await;
    assert_eq!(bot.forge.budget_used(installation), spent);
    assert!(
        bot.forge.not_modified() >= not_modified + 6,
        "two listings a sweep, each a 304: {} then {}",
        not_modified,
        bot.forge.not_modified()
    );
    let metrics = reqwest::get(bot.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("wavegate_sweep_last{of=\"requests\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("wavegate_sweep_last{of=\"not_modified\"} 2"),
        "{metrics}"
    );

    // A comment changes the comment listing: one page is read in full,
    // and the one after is a 304 again.
    let id = bot.forge.add_comment(&repo, 1, "rev-bob", "/approve");
    bot.until("a sweep takes the approval up", || async {
        (!bot.reactions(&repo, id).is_empty()).then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_leaves_the_budgets_reserve_to_jobs_until_the_window_resets() {
    let mut bot = Bot::start_with(&[
        ("WAVEGATE_RECONCILE_EVERY", "1s"),
        ("WAVEGATE_RECONCILE_BUDGET", "50%"),
    ])
    .await;
    let (repo, pr, _digest) = planned(&mut bot, 1).await;
    let installation = repo.installation.unwrap();
    let spent = bot.forge.budget_used(installation);
    assert!(spent >= 5, "planning spent {spent} requests");

    // The installation's hour is 10 requests and it has spent over half:
    // the rest is the jobs', and sweeps leave the repository be.
    bot.forge
        .set_rate_window(10, std::time::Duration::from_secs(10));
    bot.until("a sweep leaves the repository for later", || async {
        let deferred = bot.metric(r#"wavegate_sweep_last{of="deferred"}"#).await;
        (deferred == Some(1.0)).then_some(())
    })
    .await;
    let id = bot.forge.add_comment(&repo, 1, "rev-bob", "/approve");
    bot.after_sweeps(2).await;
    assert!(bot.reactions(&repo, id).is_empty(), "the comment waits");

    // The window resets: the next sweep takes the approval up.
    bot.until("a sweep takes the approval up", || async {
        (bot.conclusion(&repo, &pr.head_sha).as_deref() == Some("success")).then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_approval_on_a_merged_pull_request_whose_webhook_was_lost_applies_prod() {
    let mut bot = Bot::reconciling().await;
    let (repo, _pr, _digest) = planned(&mut bot, 1).await;
    bot.comment(&repo, 1, "rev-bob", "/approve").await;
    let merged = bot.merge(&repo, 1, "change");
    bot.deliver_github(support::github_pull_request("closed", &repo, &merged))
        .await;
    bot.until("dev applies and prod waits", || async {
        (bot.applies_run() == ["app@dev"]).then_some(())
    })
    .await;
    bot.settle().await;

    // rev-bob approves prod on the merged pull request; the delivery is lost.
    let id = bot.forge.add_comment(&repo, 1, "rev-bob", "/approve prod");
    bot.until("a sweep takes the approval up and prod applies", || async {
        bot.applies_run()
            .iter()
            .any(|m| m.ends_with("@prod"))
            .then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("comment").await, 2, "taken up once");
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
    let (mut bot, link) = Bot::behind_a_link_sweeping_every("1s").await;
    let (repo, pr, digest) = planned(&mut bot, 1).await;

    // Recorded by the bot, but GitHub stopped waiting for its answer.
    let thanks = bot.forge.add_comment(&repo, 1, "dev-alice", "Thanks!");
    let answer_lost = support::github_comment(&repo, 1, thanks, "dev-alice", "Thanks!");
    let (status, body) = bot
        .post_github_to(0, &answer_lost, "answer-lost-guid")
        .await;
    assert_eq!(status, 202, "{body}");
    bot.forge
        .log_webhook_attempt("answer-lost-guid", "issue_comment", answer_lost.1, 504);

    link.cut();
    let (id, guid) = bot.approve_refused_with_503(&repo).await;
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
    let asked = bot.once_the_approval_counts(&repo, &pr).await;
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
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    let report = bot.report(&repo, 1).body;
    assert_eq!(
        report
            .matches(&format!("@rev-bob approved `{digest}`"))
            .count(),
        1,
        "{report}"
    );

    // Later sweeps list the same log and ask for nothing more.
    bot.after_sweeps(2).await;
    assert_eq!(bot.forge.redelivery_requests().len(), 1);
    assert_eq!(
        bot.jobs_of_kind("comment").await,
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
    let mut bot = Bot::reconciling().await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    let (repo, pr, digest) = planned(&mut bot, 5).await;
    let review_lists = |bot: &Bot| {
        bot.forge
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/pulls/5/reviews"))
            .count()
    };
    bot.after_sweeps(3).await;
    let before = review_lists(&bot);
    assert!(before > 0, "read after the start");
    bot.after_sweeps(3).await;
    assert_eq!(
        review_lists(&bot),
        before,
        "a quiet pull request's reviews are not listed"
    );

    let id = bot.forge.add_review(&repo, 5, "rev-bob", "APPROVED");
    bot.until("a sweep takes the approving review up", || async {
        (bot.conclusion(&repo, &pr.head_sha).as_deref() == Some("success")).then_some(())
    })
    .await;
    bot.settle().await;
    assert!(bot.log().contains("came without a webhook: taking it up"));
    let report = bot.report(&repo, 5).body;
    assert!(
        report.contains(&format!("@rev-bob approved `{digest}`")),
        "{report}"
    );

    let late = |action: &str, state: &str| {
        support::github_review(action, state, &repo, &pr, id, "rev-bob", &pr.head_sha)
    };
    let (status, answer) = bot.deliver_github(late("submitted", "approved")).await;
    assert_eq!(status, 202, "{answer}");
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("review").await, 1);

    bot.forge.dismiss_review(&repo, id);
    bot.until("a sweep takes the dismissal up", || async {
        (bot.conclusion(&repo, &pr.head_sha).as_deref() == Some("action_required")).then_some(())
    })
    .await;
    bot.settle().await;
    assert_eq!(bot.jobs_of_kind("review").await, 2);
    let (status, answer) = bot.deliver_github(late("dismissed", "dismissed")).await;
    assert_eq!(status, 202, "{answer}");
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("review").await, 2);
    assert_eq!(
        bot.conclusion(&repo, &pr.head_sha).as_deref(),
        Some("action_required")
    );
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_an_approving_review_whose_webhook_was_lost_counts_once() {
    let mut bot = Bot::reconciling().await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    let (repo, pr) = planned_on_forgejo(&mut bot, 6).await;
    let state = |bot: &Bot| bot.forge.statuses(&repo, &pr.head_sha).pop().unwrap().state;
    assert_eq!(state(&bot), "pending");
    bot.after_sweeps(1).await;

    let id = bot.forge.add_review(&repo, 6, "rev-bob", "APPROVED");
    bot.until("a sweep takes the approving review up", || async {
        (state(&bot) == "success").then_some(())
    })
    .await;
    bot.settle().await;
    assert!(bot.report(&repo, 6).body.contains("@rev-bob approved"));

    // The webhook turns up late. Forgejo's names no review id: its job
    // finds the review on the forge, taken up already, and does nothing.
    let (status, answer) = bot
        .deliver_forgejo(support::forgejo_review_approved(&repo, &pr, "rev-bob"))
        .await;
    assert_eq!(status, 202, "{answer}");
    bot.after_sweeps(2).await;
    let reviews: Vec<_> = bot
        .jobs()
        .await
        .into_iter()
        .filter(|j| j.kind == "review")
        .collect();
    assert_eq!(reviews.len(), 2, "the sweep's and the late webhook's");
    assert_eq!(
        reviews[1].outcome.as_deref(),
        Some(format!("review {id} was taken up already (by the reconciliation sweep)").as_str()),
        "{reviews:#?}"
    );

    // wavegate reads no Forgejo webhook of a dismissal: only the sweep sees it.
    bot.forge.dismiss_review(&repo, id);
    bot.until("a sweep takes the dismissal up", || async {
        (state(&bot) == "pending").then_some(())
    })
    .await;
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("review").await, 3);
    assert_eq!(state(&bot), "pending");

    // rev-carol approves and this webhook comes: its job takes the review
    // up by its id, and the sweeps after it find it seen.
    bot.forge.set_permission(&repo, "rev-carol", "write");
    bot.forge.add_review(&repo, 6, "rev-carol", "APPROVED");
    let (status, answer) = bot
        .deliver_forgejo(support::forgejo_review_approved(&repo, &pr, "rev-carol"))
        .await;
    assert_eq!(status, 202, "{answer}");
    bot.settle().await;
    assert_eq!(state(&bot), "success");
    bot.after_sweeps(2).await;
    assert_eq!(bot.jobs_of_kind("review").await, 4);
    bot.assert_ledger_verifies();
    bot.assert_conformant();
}

/// With sweeps an hour apart, a delivery refused while the database was down
/// is not left to the next one: the refusal itself has the server ask
/// GitHub for its failed deliveries as soon as the database answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_is_asked_for_again_as_soon_as_the_database_is_back() {
    let (mut bot, link) = Bot::behind_a_link_sweeping_every("1h").await;
    let (repo, pr, _) = planned(&mut bot, 1).await;
    bot.until("the sweep at start", || async {
        (bot.sweeps_started() >= 1).then_some(())
    })
    .await;
    // A sweep lists the open pull requests of the repository; the server
    // asking for failed deliveries once the database is back does not.
    let sweeps = bot.listed("/repos/acme/infra/pulls");

    link.cut();
    let (id, guid) = bot.approve_refused_with_503(&repo).await;

    link.restore();
    bot.once_the_approval_counts(&repo, &pr).await;
    let redelivered = bot.forge.hook_deliveries().pop().unwrap();
    assert_eq!(
        (
            redelivered.guid,
            redelivered.redelivery,
            redelivered.status_code
        ),
        (guid, true, 202)
    );
    assert_eq!(bot.reactions(&repo, id), ["eyes", "rocket"]);
    assert_eq!(
        bot.listed("/repos/acme/infra/pulls"),
        sweeps,
        "no sweep ran meanwhile"
    );
    assert!(bot
        .log()
        .contains("the database answers again: asked GitHub to redeliver what failed"));
}
