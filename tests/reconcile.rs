//! Reconciliation end to end: webhooks dropped on purpose, and the sweep
//! (every second here) finds what the forge says and the store does not.

mod common;
#[path = "harness/bot.rs"]
mod harness;
mod support;

use harness::*;
use wavegate::forge::PrNumber;

impl Bot {
    async fn reconciling() -> Bot {
        Bot::start_with(&[("WAVEGATE_RECONCILE_EVERY", "1s")]).await
    }

    /// Sweeps finished so far, by their log lines.
    fn sweeps(&self) -> usize {
        self.log().matches("reconciliation sweep finished").count()
    }

    /// Waits until `n` more sweeps have finished, then for every job.
    async fn after_sweeps(&self, n: usize) {
        let target = self.sweeps() + n;
        self.until(&format!("{n} more sweeps"), || async {
            (self.sweeps() >= target).then_some(())
        })
        .await;
        self.settle().await;
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
    let id = wavegate::forge::RepoId::new(wavegate::forge::ForgeKind::GitHub, "acme/infra");
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
