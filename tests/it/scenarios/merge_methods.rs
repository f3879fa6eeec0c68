//! Every way a forge lands a pull request — a merge commit, a squash, a
//! rebase of each commit, a fast-forward — on both forges: the apply run's
//! base is the target as it was just before the merge, so every approved
//! member is applied and no gate an earlier commit of the pull request
//! loosened governs its own apply.

use crate::support::bot::*;
use crate::support::common::MergeMethod;
use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::RepoHandle;

const METHODS: [MergeMethod; 4] = [
    MergeMethod::MergeCommit,
    MergeMethod::Squash,
    MergeMethod::Rebase,
    MergeMethod::FastForward,
];

#[derive(Clone, Copy, PartialEq)]
enum Forge {
    GitHub,
    Forgejo,
}

/// The example repository on `forge`.
fn repo_on(bot: &Bot, forge: Forge) -> RepoHandle {
    match forge {
        Forge::GitHub => bot.github_repo(),
        Forge::Forgejo => bot.forgejo_repo(),
    }
}

/// The `change` branch's files at `paths`, to commit elsewhere.
fn change_files(bot: &Bot, paths: &[&str]) -> Vec<(String, String)> {
    paths
        .iter()
        .map(|p| ((*p).to_owned(), bot.example.read("change", p)))
        .collect()
}

/// A branch of two commits on main: `first` (files), then the rest of
/// the `change` branch's infrastructure.
fn two_commit_branch(bot: &Bot, name: &str, first: &[(String, String)]) {
    let step = format!("{name}-first");
    let files = |list: &[(String, String)]| -> Vec<(String, Option<String>)> {
        list.iter()
            .map(|(p, t)| (p.clone(), Some(t.clone())))
            .collect()
    };
    let first = files(first);
    let first: Vec<(&str, Option<&str>)> = first
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_deref()))
        .collect();
    bot.example.branch(&step, "main", &first);
    let rest = files(&change_files(
        bot,
        &[
            "infra/app/resources.json",
            "infra/app/outputs.json",
            "infra/dns/resources.json",
            "infra/dns/outputs.json",
        ],
    ));
    let rest: Vec<(&str, Option<&str>)> = rest
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_deref()))
        .collect();
    bot.example.branch(name, &step, &rest);
}

/// Lands it by `method` (for a rebase, main moved on meanwhile) and
/// tells the bot.
async fn land(pr: &PrHandle<'_>, method: MergeMethod) {
    if method == MergeMethod::Rebase {
        // The target moved on meanwhile: the rebase re-creates every commit.
        pr.bot.example.branch(
            "main",
            "main",
            &[("docs/meanwhile.md", Some("main moved on\n"))],
        );
    }
    pr.merge_by(method).await;
}

/// Each method on `forge`: a pull request of two commits (the network's
/// subnet renamed first, then the app's change) is applied whole — dev,
/// then prod behind its gate — the first commit's network members too.
async fn every_approved_member_applies(forge: Forge) {
    for (n, method) in METHODS.into_iter().enumerate() {
        let bot = Bot::start().await;
        let number = 60 + n as u64;
        let network = bot
            .example
            .read("main", "infra/network/resources.json")
            .replace("estate-${stage}-private", "estate-${stage}-private-a");
        two_commit_branch(
            &bot,
            "two-steps",
            &[("infra/network/resources.json".into(), network)],
        );
        let pr = approved_pr_on(&bot, &repo_on(&bot, forge), number, "two-steps").await;
        land(&pr, method).await;
        let mut dev = bot.applies_run();
        dev.sort();
        assert_eq!(
            dev,
            ["app@dev", "network@dev"],
            "{method:?}: dev first, the first commit's network too"
        );
        let asked = pr.last_reply();
        insta::allow_duplicates! {
            insta::assert_snapshot!(redact(&asked), @"
            Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

            **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

            ```
            /approve prod sha256:[digest]
            ```
            ");
        }
        pr.comment_as("rev-bob", &format!("/approve prod {}", digest_in(&asked)))
            .await;
        let mut applied = bot.applies_run();
        applied.sort();
        assert_eq!(
            applied,
            [
                "app@dev",
                "app@prod",
                "dns@prod",
                "network@dev",
                "network@prod"
            ],
            "{method:?}: every approved member applied"
        );
        insta::allow_duplicates! {
            insta::assert_snapshot!(redact(&pr.last_reply()), @"Applied on [short]: every member of the approved change is deployed.");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_every_merge_method_applies_every_approved_member() {
    every_approved_member_applies(Forge::GitHub).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_every_merge_method_applies_every_approved_member() {
    every_approved_member_applies(Forge::Forgejo).await;
}

/// The pull request's first commit loosens prod's gate to `never`, its second
/// changes the app. Landed by rebase (or any method), the run reads the gate
/// from the target before the merge: prod still waits for `/approve prod`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_commit_that_loosens_the_prod_gate_does_not_govern_its_own_apply() {
    for (forge, method) in [
        (Forge::GitHub, MergeMethod::Rebase),
        (Forge::Forgejo, MergeMethod::Rebase),
        (Forge::GitHub, MergeMethod::FastForward),
    ] {
        let bot = Bot::start().await;
        let config = bot.example.read("main", "wavegate.toml");
        let loosened = config.replace(
            "name = \"prod\"\ngate = \"always\"",
            "name = \"prod\"\ngate = \"never\"",
        );
        assert_ne!(config, loosened, "the example's prod gate is `always`");
        two_commit_branch(&bot, "loosen", &[("wavegate.toml".into(), loosened)]);
        let pr = approved_pr_on(&bot, &repo_on(&bot, forge), 70, "loosen").await;
        land(&pr, method).await;
        assert_eq!(
            bot.applies_run(),
            ["app@dev"],
            "{method:?}: nothing of prod applied without its own approval"
        );
        insta::allow_duplicates! {
            insta::assert_snapshot!(redact(&pr.last_reply()), @"
            Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

            **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

            ```
            /approve prod sha256:[digest]
            ```
            ");
        }
    }
}

/// Two pull requests carry the same change; the first lands and applies.
/// The second's merge changes nothing of it against the target before it:
/// its approved members are not applied, and the run says which and why
/// instead of calling them deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_members_the_merge_does_not_change_are_named_not_passed_off_as_deployed() {
    let bot = Bot::start().await;
    bot.example.branch(
        "change-again",
        "change",
        &[("docs/again.md", Some("the same change\n"))],
    );
    let first = approved_pr_on(&bot, &repo_on(&bot, Forge::GitHub), 80, "change").await;
    bot.forge.set_permission(&first.repo, "rev-carol", "write");
    let second = bot.opened(&first.repo, 81, "change-again").await;
    second.comment_as("rev-carol", "/approve").await;

    land(&first, MergeMethod::MergeCommit).await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    land(&second, MergeMethod::MergeCommit).await;
    assert_eq!(bot.applies_run(), ["app@dev"], "nothing applied twice");
    insta::assert_snapshot!(redact(&second.last_reply()), @"Applied on [short]: every member the merge changes is deployed. Not applied: `app@dev`, `app@prod`, `dns@prod`, approved when planned but unchanged by the merge against [short] (the target before it), so there was nothing to apply.");
}
