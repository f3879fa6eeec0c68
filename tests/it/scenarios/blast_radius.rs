//! A failure stops only what depends on it: a plan that fails on the merge
//! commit blocks its own subtree while the rest of its stage is decided,
//! approved and applied; a plan that moved waits for its round with its
//! dependents while its wave-mates apply.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;

/// A branch `name` on main adding components: `base`, `mid` on it, `leaf`
/// on `mid`, and `solo1`, `solo2` on nothing, each with one queue, in
/// `stages` (both when `None`), and `extra` appended to wavegate.toml.
fn branch_of_subtrees(bot: &Bot, name: &str, stages: Option<&str>, extra: &str) {
    let components = [
        ("base", None),
        ("mid", Some("base")),
        ("leaf", Some("mid")),
        ("solo1", None),
        ("solo2", None),
    ];
    let mut config = String::new();
    let mut files = Vec::new();
    for (component, upstream) in components {
        config.push_str(&format!(
            "[[component]]\nname = \"{component}\"\ndir = \"infra/trees/{component}\"\n"
        ));
        if let Some(upstream) = upstream {
            config.push_str(&format!("depends_on = [\"{upstream}\"]\n"));
        }
        if let Some(stages) = stages {
            config.push_str(&format!("stages = [\"{stages}\"]\n"));
        }
        config.push('\n');
        files.push((
            format!("infra/trees/{component}/resources.json"),
            format!(r#"{{"aws_sqs_queue.{component}": {{"name": "{component}-${{stage}}"}}}}"#),
        ));
        files.push((
            format!("infra/trees/{component}/outputs.json"),
            "{}".to_owned(),
        ));
    }
    // Declared before [policy], away from any edit of the base's policy.
    let toml = bot
        .example
        .read("main", "wavegate.toml")
        .replace("[policy]", &format!("{config}[policy]"));
    files.push(("wavegate.toml".to_owned(), format!("{toml}{extra}")));
    let changes: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(path, text)| (path.as_str(), Some(text.as_str())))
        .collect();
    bot.example.branch(name, "main", &changes);
}

/// Writes `$ESTATE_DIR/<stage>/<component><suffix>`: a test hook, or
/// the member's deployed state.
fn write_estate(bot: &Bot, (stage, component, suffix): (&str, &str, &str), text: &str) {
    let path = bot.estate_file(stage, component, suffix);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_plan_in_a_gated_stage_blocks_only_its_subtree_while_the_rest_is_approved_and_applies(
) {
    let bot = Bot::start().await;
    branch_of_subtrees(&bot, "trees", None, "");
    let pr = approved_pr_on(&bot, &bot.github_repo(), 61, "trees").await;

    // On the merge commit, mid@prod's plan fails (its provider is down).
    write_estate(&bot, ("prod", "mid", ".fail-plan"), "provider unavailable");
    pr.merge().await;
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    - `mid@prod` failed: planning on the merge commit failed: the plan command exited with status 1; blocked by it: `leaf@prod`

    `/retry` plans what failed again. Meanwhile the rest of the run goes on:

    Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `base@dev` | applied |
    | dev | 1 | `solo1@dev` | applied |
    | dev | 1 | `solo2@dev` | applied |
    | dev | 2 | `mid@dev` | applied |
    | dev | 3 | `leaf@dev` | applied |
    | prod | 1 | `base@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 1 | `solo1@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 1 | `solo2@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 2 | `mid@prod` | failed: planning on the merge commit failed: the plan command exited with status 1 |
    | prod | 3 | `leaf@prod` | blocked by mid@prod |

    <details><summary>Why <code>mid@prod</code> failed</summary>

    ```text
    planning on the merge commit failed: the plan command exited with status 1; last output:
    provider unavailable
    ```

    </details>

    - Stage **prod** gate `pr-61-prod`: set `sha256:[digest]`, waiting
      - `base@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo1@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo2@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");
    let stage = asked_digest(&asked);
    pr.comment_as("rev-bob", &format!("/approve prod {stage}"))
        .await;
    let applied = bot.applies_run();
    for member in ["base@prod", "solo1@prod", "solo2@prod"] {
        assert!(applied.iter().any(|m| m == member), "{member}: {applied:?}");
    }
    for member in ["mid@prod", "leaf@prod"] {
        assert!(
            !applied.iter().any(|m| m == member),
            "{member}: {applied:?}"
        );
    }
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `base@dev` | applied |
    | dev | 1 | `solo1@dev` | applied |
    | dev | 1 | `solo2@dev` | applied |
    | dev | 2 | `mid@dev` | applied |
    | dev | 3 | `leaf@dev` | applied |
    | prod | 1 | `base@prod` | applied |
    | prod | 1 | `solo1@prod` | applied |
    | prod | 1 | `solo2@prod` | applied |
    | prod | 2 | `mid@prod` | failed: planning on the merge commit failed: the plan command exited with status 1 |
    | prod | 3 | `leaf@prod` | blocked by mid@prod |

    <details><summary>Why <code>mid@prod</code> failed</summary>

    ```text
    planning on the merge commit failed: the plan command exited with status 1; last output:
    provider unavailable
    ```

    </details>

    - Stage **prod** gate `pr-61-prod`: set `sha256:[digest]`, approved by rev-bob
      - `base@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo1@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo2@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");
    assert_eq!(pr.apply_check().state, "failure");

    // Fixed and retried: what failed plans again, and the stage asks
    // afresh for what it was not decided over.
    std::fs::remove_file(bot.estate_file("prod", "mid", ".fail-plan")).unwrap();
    pr.comment_as("rev-bob", "/retry").await;
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @r"
    Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod sha256:[digest]
    ```
    ");
    let again = asked_digest(&asked);
    assert_ne!(again, stage, "a set of its own");
    pr.comment_as("rev-bob", &format!("/approve prod {again}"))
        .await;
    let applied = bot.applies_run();
    assert_eq!(
        applied.iter().filter(|m| m.ends_with("@prod")).count(),
        5,
        "each prod member applied once: {applied:?}"
    );
    assert_eq!(pr.apply_check().state, "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_never_with_an_after_plan_hook_a_failed_plan_blocks_only_its_subtree() {
    let bot = Bot::start().await;
    let hook = "\n[[hooks.after.plan]]\nname = \"look\"\ncommand = [\"true\"]\n";
    branch_of_subtrees(&bot, "trees", Some("dev"), hook);
    let pr = approved_pr_on(&bot, &bot.github_repo(), 62, "trees").await;
    write_estate(&bot, ("dev", "mid", ".fail-plan"), "provider unavailable");
    pr.merge().await;
    let mut applied = bot.applies_run();
    applied.sort();
    assert_eq!(applied, ["base@dev", "solo1@dev", "solo2@dev"]);
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `base@dev` | applied |
    | dev | 1 | `solo1@dev` | applied |
    | dev | 1 | `solo2@dev` | applied |
    | dev | 2 | `mid@dev` | failed: planning on the merge commit failed: the plan command exited with status 1 |
    | dev | 3 | `leaf@dev` | blocked by mid@dev |

    <details><summary>Why <code>mid@dev</code> failed</summary>

    ```text
    planning on the merge commit failed: the plan command exited with status 1; last output:
    provider unavailable
    ```

    </details>
    ");
    assert_eq!(pr.apply_check().state, "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_plan_waits_for_its_round_with_its_dependents_while_its_wave_mates_apply() {
    let bot = Bot::start().await;
    branch_of_subtrees(&bot, "trees", Some("dev"), "");
    let pr = approved_pr_on(&bot, &bot.github_repo(), 63, "trees").await;

    // After the approval, someone creates base's queue by hand: its plan
    // on the merge commit moves (an update, not the create approved).
    write_estate(
        &bot,
        ("dev", "base", ".json"),
        r#"{"aws_sqs_queue.base": {"name": "hand-made"}}"#,
    );
    pr.merge().await;
    let mut applied = bot.applies_run();
    applied.sort();
    assert_eq!(
        applied,
        ["solo1@dev", "solo2@dev"],
        "base's wave-mates apply"
    );
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @r"
    These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - base@dev: address aws\_sqs\_queue.base changed action from create to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```
    ");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - base@dev: address aws\_sqs\_queue.base changed action from create to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `base@dev` | waiting: not covered: base@dev: address aws\_sqs\_queue.base changed action from create to update |
    | dev | 1 | `solo1@dev` | applied |
    | dev | 1 | `solo2@dev` | applied |
    | dev | 2 | `mid@dev` | blocked by base@dev |
    | dev | 3 | `leaf@dev` | blocked by base@dev |

    - Round 2 (dev, gate `pr-63-round-2`): digest `sha256:[digest]`, not covered, waiting: `base@dev: address aws_sqs_queue.base changed action from create to update`
      - `base@dev`: `sha256:[digest]` (0 to create, 1 to update, 0 to replace, 0 to delete)
    ");

    pr.comment_as("rev-bob", &format!("/approve {}", asked_digest(&asked)))
        .await;
    let applied = bot.applies_run();
    assert_eq!(
        applied[2..],
        ["base@dev", "mid@dev", "leaf@dev"],
        "then base, and what waited on it"
    );
    assert_eq!(pr.apply_check().state, "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_approved_wave_by_wave_waits_at_each_waves_own_gate_and_spends_each_as_it_applies()
{
    let mut bot = Bot::start().await;
    // The base approves prod one dependency wave at a time.
    let base = bot.example.read("main", "wavegate.toml").replace(
        "name = \"prod\"\ngate = \"always\"\n",
        "name = \"prod\"\ngate = \"always\"\ngate_scope = \"wave\"\n",
    );
    assert!(base.contains("gate_scope"), "{base}");
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&base))]);
    branch_of_subtrees(&bot, "trees", None, "");
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-carol", "write");
    let pr = approved_pr_on(&bot, &repo, 63, "trees").await;
    // Before merge, the report says each wave of prod waits at its own gate.
    let report = pr.report();
    assert!(
        report.contains(
            "waits after merge for an approval of each of its waves in turn (`/approve prod wave <k>`)"
        ),
        "{report}"
    );
    for (wave, members) in [
        (1, "`base@prod`, `solo1@prod`, `solo2@prod`"),
        (2, "`mid@prod`"),
        (3, "`leaf@prod`"),
    ] {
        let line =
            format!("- prod · wave {wave}: {members} (its own gate: `/approve prod wave {wave}`)");
        assert!(report.contains(&line), "{line} in {report}");
    }

    // Merged: dev applies; prod's first wave waits for its own approval.
    pr.merge().await;
    assert_eq!(bot.applies_run().len(), 5, "dev applied");
    let first = asked_digest(&pr.last_reply());
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    Wave 1 of stage **prod** (approved wave by wave) waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod wave 1 sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `base@dev` | applied |
    | dev | 1 | `solo1@dev` | applied |
    | dev | 1 | `solo2@dev` | applied |
    | dev | 2 | `mid@dev` | applied |
    | dev | 3 | `leaf@dev` | applied |
    | prod | 1 | `base@prod` | waiting: wave 1 of stage prod waits for `/approve prod wave 1` |
    | prod | 1 | `solo1@prod` | waiting: wave 1 of stage prod waits for `/approve prod wave 1` |
    | prod | 1 | `solo2@prod` | waiting: wave 1 of stage prod waits for `/approve prod wave 1` |
    | prod | 2 | `mid@prod` | not started |
    | prod | 3 | `leaf@prod` | not started |

    - Stage **prod**, wave 1 gate `pr-63-prod-wave-1`: set `sha256:[digest]`, waiting
      - `base@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo1@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo2@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");

    // An approval of a wave the run does not wait at is refused.
    pr.comment_as("rev-carol", "/approve prod wave 2").await;
    insta::assert_snapshot!(redact(&pr.last_reply()), @r"@rev-carol: the apply run waits at `pr-63-prod-wave-1` (stage prod's wave 1), not at stage `prod`'s wave 2; write `/approve prod wave 1 sha256:[digest]`");

    // Wave 1 approved: it applies, and wave 2 waits for an approval of its
    // own plans, which wave 1's outputs fed.
    pr.comment_as("rev-carol", &format!("/approve prod wave 1 {first}"))
        .await;
    let mut applied = bot.applies_run()[5..].to_vec();
    applied.sort();
    assert_eq!(applied, ["base@prod", "solo1@prod", "solo2@prod"]);
    let second = asked_digest(&pr.last_reply());
    assert_ne!(first, second);
    assert!(
        pr.last_reply().contains("/approve prod wave 2 sha256:"),
        "{}",
        pr.last_reply()
    );

    // The server restarts: the run resumes at the same wave and gate.
    drop(pr);
    bot.kill();
    bot.start_server().await;
    let pr = bot.pr(&repo, 63);
    pr.comment_as("rev-carol", &format!("/approve prod wave 2 {second}"))
        .await;
    assert_eq!(bot.applies_run()[8..], ["mid@prod"]);

    // `/approve prod` approves the wave the run waits at, as posted.
    pr.comment_as("rev-carol", "/approve prod").await;
    assert_eq!(bot.applies_run()[9..], ["leaf@prod"]);
    assert_eq!(pr.apply_check().state, "success");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: applied

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `base@dev` | applied |
    | dev | 1 | `solo1@dev` | applied |
    | dev | 1 | `solo2@dev` | applied |
    | dev | 2 | `mid@dev` | applied |
    | dev | 3 | `leaf@dev` | applied |
    | prod | 1 | `base@prod` | applied |
    | prod | 1 | `solo1@prod` | applied |
    | prod | 1 | `solo2@prod` | applied |
    | prod | 2 | `mid@prod` | applied |
    | prod | 3 | `leaf@prod` | applied |

    - Stage **prod**, wave 1 gate `pr-63-prod-wave-1`: set `sha256:[digest]`, approved by rev-carol
      - `base@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo1@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
      - `solo2@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    - Stage **prod**, wave 2 gate `pr-63-prod-wave-2`: set `sha256:[digest]`, approved by rev-carol
      - `mid@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    - Stage **prod**, wave 3 gate `pr-63-prod-wave-3`: set `sha256:[digest]`, approved by rev-carol
      - `leaf@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");

    // Each wave's approval was spent as that wave applied, before the next
    // wave's was given.
    let store = bot.store().await;
    let facts = store.repo_facts("github:acme/infra").await.unwrap();
    let kinds: Vec<(String, String)> = facts
        .iter()
        .map(|f| (f.fact.gate.to_string(), f.fact.kind.as_str().to_owned()))
        .filter(|(gate, kind)| gate.starts_with("pr-63-prod") && kind != "pending")
        .collect();
    let expected = [
        ("pr-63-prod-wave-1", "approved"),
        ("pr-63-prod-wave-1", "spent"),
        ("pr-63-prod-wave-2", "approved"),
        ("pr-63-prod-wave-2", "spent"),
        ("pr-63-prod-wave-3", "approved"),
        ("pr-63-prod-wave-3", "spent"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(g, k)| ((*g).to_owned(), (*k).to_owned()))
        .collect();
    assert_eq!(kinds, expected);
    bot.assert_ledger_verifies();
}
