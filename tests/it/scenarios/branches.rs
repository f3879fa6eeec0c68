//! Where merges apply: `branches` in the default branch's config (the
//! default branch alone when it names none). A pull request into any other
//! branch is planned and approved as usual; its merge starts no run and says
//! so once. The list is read from the default branch before the merge, so a
//! change cannot widen where it applies.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;

/// The bot's replies about merges that apply nothing.
fn not_applied(pr: &PrHandle<'_>) -> Vec<String> {
    pr.replies()
        .into_iter()
        .filter(|r| r.starts_with("Merged into"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_into_another_branch_is_planned_and_approved_but_its_merge_applies_nothing()
{
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.example.git(&["branch", "release", "main"]);
    let pr = bot.opened_onto(&repo, 7, "change", "release").await;
    assert_eq!(
        pr.plan_state(),
        "action_required",
        "planned, waiting for an approval"
    );
    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "success");

    pr.merge_into("release").await;
    assert!(bot.applies_run().is_empty(), "{:?}", bot.applies_run());
    let merge_sha = pr.state().merge_sha.unwrap();
    assert!(
        bot.check_runs_named(&repo, &merge_sha, "wavegate/apply")
            .is_empty(),
        "no run, so no apply check"
    );
    insta::assert_snapshot!(redact(&pr.last_reply()), @r#"Merged into `release` as [short]: nothing is applied. wavegate applies only merges into `main`, the default branch (wavegate.toml there has no `branches` naming others). To apply merges into `release` too, add `branches = ["main", "release"]` to wavegate.toml on `main`."#);

    // Told again (a redelivery, a sweep): still one reply, still nothing applied.
    let merged = pr.state();
    bot.tell(&repo, pr.closed(&merged)).await;
    assert_eq!(not_applied(&pr).len(), 1, "{:#?}", pr.replies());
    assert!(bot.applies_run().is_empty());
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_the_default_branch_lists_applies_its_merges() {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "ignore = [",
        "branches = [\"main\", \"release\"]\nignore = [",
    );
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.example.git(&["branch", "release", "main"]);
    bot.example.branch(
        "onto-release",
        "release",
        &[(
            "infra/app/resources.json",
            Some(&bot.example.read("change", "infra/app/resources.json")),
        )],
    );
    let pr = bot.opened_onto(&repo, 8, "onto-release", "release").await;
    pr.comment_as("rev-bob", "/approve").await;

    pr.merge_into("release").await;
    assert_eq!(bot.applies_run(), ["app@dev"], "dev applies, prod waits");
    assert!(not_applied(&pr).is_empty(), "{:#?}", pr.replies());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_adds_its_own_base_to_branches_does_not_apply_itself() {
    let bot = Bot::start().await;
    bot.edit_base_config("ignore = [", "branches = [\"release\"]\nignore = [");
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    // `change`'s edits, on main as it is now, with main added to `branches`.
    let config = bot.example.read("main", "wavegate.toml").replace(
        "branches = [\"release\"]",
        "branches = [\"release\", \"main\"]",
    );
    let paths: Vec<String> = ["app", "dns"]
        .iter()
        .flat_map(|c| ["resources.json", "outputs.json"].map(|f| format!("infra/{c}/{f}")))
        .collect();
    let texts: Vec<String> = paths
        .iter()
        .map(|p| bot.example.read("change", p))
        .collect();
    let mut files = vec![("wavegate.toml", Some(config.as_str()))];
    files.extend(
        paths
            .iter()
            .zip(&texts)
            .map(|(p, t)| (p.as_str(), Some(t.as_str()))),
    );
    bot.example.branch("widen", "main", &files);
    let pr = bot.opened_onto(&repo, 9, "widen", "main").await;
    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_state(), "success", "{}", pr.report());

    pr.merge().await;
    assert!(bot.applies_run().is_empty(), "{:?}", bot.applies_run());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"Merged into `main` as [short]: nothing is applied. wavegate applies only merges into `release` (`branches` in wavegate.toml on `main`, the default branch, as it stood before this merge: a pull request's own change to `branches` counts from the next merge). To apply merges into `main`, add it to `branches` there.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_merges_apply_into_the_default_branch_the_forge_names() {
    let bot = Bot::start().await;
    bot.example.git(&["branch", "release", "main"]);
    let pr = planned_pr_on_forgejo(&bot, 10).await;
    bot.forge.set_default_branch(&pr.repo, "release");
    pr.comment_as("rev-bob", "/approve").await;

    pr.merge().await;
    assert!(bot.applies_run().is_empty(), "{:?}", bot.applies_run());
    insta::assert_snapshot!(redact(&pr.last_reply()), @r#"Merged into `main` as [short]: nothing is applied. wavegate applies only merges into `release`, the default branch (wavegate.toml there has no `branches` naming others). To apply merges into `main` too, add `branches = ["release", "main"]` to wavegate.toml on `release`."#);
    bot.assert_conformant();
}
