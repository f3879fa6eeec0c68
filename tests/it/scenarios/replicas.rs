//! Two replicas of the real binary on one PostgreSQL database, behind no load
//! balancer but a coin: every webhook goes to a random replica and its
//! redelivery to the other; one replica is killed (SIGKILL) mid-plan and the
//! other mid-apply. Every delivery is handled once, no job runs twice at
//! once, nothing applies twice, no approval is lost, the ledger verifies.

use crate::support::fake_forge::FakePr;
use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::{self, bot::*};
use std::collections::BTreeSet;
use support::RepoHandle;
use wavegate::model::JobKind;
use wavegate::store::JobStatus;

/// Sends a delivery to a random replica, then redelivers it (same id)
/// to the other; exactly one of the two is recorded.
async fn deliver_twice(bot: &Bot, delivery: (String, Vec<u8>)) -> usize {
    let id = format!("delivery-{}", bot.next_delivery());
    let first = coin();
    let (status, body) = bot.post_github_to(first, &delivery, &id).await;
    assert_eq!(status, 202, "{body}");
    assert_ne!(body["status"], "duplicate", "{body}");
    let (status, again) = bot.post_github_to(1 - first, &delivery, &id).await;
    assert_eq!((status, again["status"].as_str()), (202, Some("duplicate")));
    first
}

/// `who` comments `body`, delivered to a random replica and redelivered
/// to the other; settles.
async fn comment_twice(pr: &PrHandle<'_>, who: &str, body: &str) {
    let id = pr.comment_unheard(who, body);
    let delivery = support::github_comment(&pr.repo, pr.number, id, who, body);
    deliver_twice(pr.bot, delivery).await;
    pr.bot.settle().await;
}

/// Merged; the `closed` delivery goes to a random replica and is
/// redelivered to the other (no settling: a replica may be killed first).
async fn merge_twice(pr: &PrHandle<'_>) -> FakePr {
    let merged = pr.merge_unheard(support::common::MergeMethod::MergeCommit);
    deliver_twice(pr.bot, pr.closed(&merged)).await;
    merged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_survive_a_sigkill_mid_plan_and_mid_apply_and_nothing_happens_twice() {
    let mut bot = Bot::start_replicated(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let repo = open_slow_pr(&bot).await;

    // Mid-plan: the replica planning is killed; the other plans the PR.
    let planner = bot.replica_running_a_job().await;
    bot.until_plan_hangs().await;
    bot.kill_replica(planner);
    bot.until_no_command_survives().await;
    bot.settle().await;
    let plan_job = bot
        .jobs()
        .await
        .into_iter()
        .find(|j| j.kind == JobKind::Plan)
        .unwrap();
    assert_eq!((plan_job.status, plan_job.attempts), (JobStatus::Done, 2));
    bot.restart_replica(planner).await;

    let pr = bot.pr(&repo, 31);
    comment_twice(&pr, "rev-bob", &format!("/approve {}", pr.digest())).await;

    // Mid-apply: app@dev changed the estate; its replica dies before saying so.
    bot.pause_apply("dev", "app", "after");
    merge_twice(&pr).await;
    bot.until_apply_paused("dev", "app").await;
    let applier = bot.replica_running_a_job().await;
    bot.kill_replica(applier);
    bot.until_no_command_survives().await;
    bot.resume_apply("dev", "app");
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "not applied twice");
    bot.restart_replica(applier).await;

    // The same pull request, as the replicas left it.
    let pr = bot.pr(&repo, 31);
    let stage = digest_in(&pr.last_reply());
    comment_twice(&pr, "rev-carol", &format!("/approve prod {stage}")).await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    assert_eq!(pr.apply_check().state, "success");

    // Every delivery once: one row each, and one job per delivery that asks for one.
    let store = bot.store().await;
    assert_eq!(
        store.delivery_count().await.unwrap(),
        i64::try_from(bot.delivered()).unwrap()
    );
    let jobs = bot.jobs().await;
    assert!(jobs
        .iter()
        .all(|j| matches!(j.status, JobStatus::Done | JobStatus::Skipped)));
    let merged_jobs: Vec<_> = jobs.iter().filter(|j| j.kind == JobKind::Merged).collect();
    assert_eq!(merged_jobs.len(), 1, "{jobs:#?}");
    // No approval lost: both are in the ledger, spent by the run.
    let facts = store.repo_facts("github:acme/infra").await.unwrap();
    let kinds: BTreeSet<(String, String)> = facts
        .iter()
        .map(|f| (f.fact.gate.to_string(), f.fact.kind.as_str().to_owned()))
        .collect();
    for expected in [
        ("pr-31", "approved"),
        ("pr-31", "spent"),
        ("pr-31-prod", "approved"),
        ("pr-31-prod", "spent"),
    ] {
        assert!(
            kinds.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "{expected:?} in {kinds:?}"
        );
    }
    bot.assert_ledger_verifies();
}

/// PR 31 from a branch whose first plan of app@dev hangs.
async fn open_slow_pr(bot: &Bot) -> RepoHandle {
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.forge.set_permission(&repo, "rev-carol", "write");
    bot.branch_hanging_first_plan("slow");
    let pr = bot.open_pr(&repo, 31, "slow");
    deliver_twice(bot, support::github_pull_request("opened", &repo, &pr)).await;
    repo
}

/// A replica stops answering mid-apply (SIGSTOP: its lease runs out while
/// its apply command runs on). The other replica takes the run over but
/// plans app@dev again only once that apply has ended: it waits, says so,
/// then finds app@dev applied and applies nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_mid_apply_is_waited_for_and_nothing_applies_twice() {
    let mut bot = Bot::start_replicated(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    let opened = bot.open_pr(&repo, 32, "change");
    deliver_twice(&bot, support::github_pull_request("opened", &repo, &opened)).await;
    bot.settle().await;
    let pr = bot.pr(&repo, 32);
    comment_twice(&pr, "rev-bob", &format!("/approve {}", pr.digest())).await;

    bot.pause_apply("dev", "app", "before");
    merge_twice(&pr).await;
    bot.until_apply_paused("dev", "app").await;
    let applier = bot.replica_running_a_job().await;
    let stopped = bot.pid_of(applier).unwrap();
    signal(stopped, "STOP");

    bot.until(
        "the other replica waits for the apply still running (or applies)",
        || async {
            let waits = pr
                .replies()
                .iter()
                .any(|r| r.contains("was applying when the server running it stopped"));
            (waits || !bot.applies_run().is_empty()).then_some(())
        },
    )
    .await;
    assert!(
        bot.applies_run().is_empty(),
        "app@dev was applied again while its first apply still ran"
    );

    // The stopped replica's apply goes on and applies; only then is app@dev
    // planned again, found applied, and the run goes on to prod's gate.
    bot.resume_apply("dev", "app");
    pr.until_a_reply_says("Stage **prod** waits for its own approval")
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"], "applied exactly once");
    insta::assert_snapshot!(redact(&pr.apply_table()), @"
    ## Apply on merge commit `[short]`: waiting

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied (its apply had finished before a restart; planned again, nothing was left to change) |
    | prod | 1 | `app@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 2 | `dns@prod` | waiting: stage prod waits for `/approve prod` |
    ");
    let waits = pr.replies_saying("was applying when the server running it stopped");
    assert_eq!(waits.len(), 1, "looking again is not news: {waits:#?}");
    insta::assert_snapshot!(redact(&waits[0]), @"**app@dev** was applying when the server running it stopped, and that apply may still be running elsewhere. wavegate plans it again only once it cannot be (by [time] at the latest, when its sandbox ends it), so nothing applies twice. The run goes on by itself.");
    bot.kill_replica(applier);
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// PostgreSQL stopped hard under a running bot: a webhook is answered 503
/// within about a second (never 2xx: the forge must see the failure, and a
/// GitHub delivery that hangs for 10 s is marked failed and never retried),
/// `/readyz` says not ready as fast, and both recover by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_database_is_down_a_delivery_is_refused_at_once_and_all_recovers() {
    let (bot, link) = Bot::behind_a_database_link(&[]).await;
    let pr = planned_pr(&bot, 1).await;

    link.cut();
    let id = pr.comment_unheard("rev-bob", "/approve");
    let approval = support::github_comment(&pr.repo, 1, id, "rev-bob", "/approve");
    let started = std::time::Instant::now();
    let (status, body) = bot.post_github_to(0, &approval, "during-outage").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "answered in {:?}",
        started.elapsed()
    );
    let started = std::time::Instant::now();
    let ready = bot.http.get(bot.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));

    link.restore();
    // The forge redelivers what it saw fail; the bot takes it as new.
    let (status, body) = bot
        .until("the database is back", || async {
            let (status, body) = bot.post_github_to(0, &approval, "during-outage").await;
            (status != 503).then_some((status, body))
        })
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;
    assert_eq!(pr.reactions(id), ["eyes", "rocket"]);
    assert_eq!(
        pr.plan_state(),
        "success",
        "the approval given during the outage counts"
    );
}

/// The database goes away as a plan ends: the plan cannot be stored, nor
/// can its failure, so the store still has the job held by a worker that no
/// longer runs it. Once the database is back that worker gives the job back
/// and it runs again at once, not when its five-minute lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_end_the_database_missed_runs_again_as_soon_as_it_is_back() {
    let (bot, link) = Bot::behind_a_database_link(&[]).await;
    let repo = bot.github_repo();
    bot.branch_pausing_plans("paused");
    let opened = bot.open_pr(&repo, 1, "paused");
    let (status, body) = bot
        .deliver_github(support::github_pull_request("opened", &repo, &opened))
        .await;
    assert_eq!(status, 202, "{body}");
    bot.until_plan_pauses().await;

    link.cut();
    bot.end_pause();
    bot.until("the end of the plan could not be written", || async {
        bot.log().contains("writing how job 1 ended").then_some(())
    })
    .await;
    link.restore();

    let jobs = bot.settle().await;
    assert_eq!(
        (jobs.len(), jobs[0].status, jobs[0].attempts),
        (1, JobStatus::Done, 2),
        "{jobs:#?}"
    );
    assert!(bot
        .log()
        .contains("job 1 was held by this worker, which does not run it"));
    bot.report(&repo, 1);
}
