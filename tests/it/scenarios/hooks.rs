//! Hooks on the base branch around every stage's plan, gate and apply:
//! each moment runs in the sandbox with what it is about, a failing hook
//! stops what comes after it (or waits for an approval of its failure), a
//! hook can hold a stage on another gate until that is approved, and every
//! outcome is in the run's section of the report and in the ledger.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;

/// The example's hook: says where it runs and for whom, the gate's
/// decision when it has one, then does what `$ESTATE_DIR/hooks/<name>.*`
/// tells it (exit with a status, or hold the stage on a gate until
/// approved).
const HOOK_PY: &str = r#"import json, os, pathlib, sys
name, moment = os.environ["WAVEGATE_HOOK_NAME"], os.environ["WAVEGATE_HOOK"]
members = json.load(open(sys.argv[1]))
print(f"{moment} {name} in {os.environ['WAVEGATE_STAGE']}: " + ", ".join(m["member"] for m in members))
for key in sorted(os.environ):
    if key.startswith("WAVEGATE_GATE"):
        print(f"{key}={os.environ[key]}")
if "WAVEGATE_DECISION" in os.environ:
    print("decision status: " + json.load(open(os.environ["WAVEGATE_DECISION"]))["status"])
if len(sys.argv) > 2:
    plan = json.load(open(sys.argv[2]))
    print(f"plan of {os.environ['WAVEGATE_MEMBER']}: {len(plan.get('entries', []))} entries")
control = pathlib.Path(os.environ["ESTATE_DIR"]) / "hooks"
if (control / f"{name}.hang").exists():
    import time
    time.sleep(120)
hold = control / f"{name}.hold"
if hold.exists():
    if os.environ.get("WAVEGATE_HOLD_APPROVED"):
        print("released by " + ", ".join(json.loads(os.environ["WAVEGATE_HOLD_APPROVED"])["approved_by"]))
        sys.exit(0)
    pathlib.Path(os.environ["WAVEGATE_HOLD"]).write_text(hold.read_text())
    sys.exit(3)
code = control / f"{name}.exit"
if code.exists():
    print(f"{name} fails on purpose")
    sys.exit(int(code.read_text()))
"#;

/// Commits the example's hook script and `hooks` (TOML) on main: the
/// base the next pull request is planned against and applied by.
fn hooks_on_base(bot: &Bot, hooks: &str) {
    let config = bot.example.read("main", "wavegate.toml");
    let config = format!("{config}\n{hooks}");
    bot.example.branch(
        "main",
        "main",
        &[
            ("ci/hook.py", Some(HOOK_PY)),
            ("wavegate.toml", Some(&config)),
        ],
    );
    std::fs::create_dir_all(bot.example.estate.join("hooks")).unwrap();
}

/// Makes hook `name` exit with `code`.
fn hook_exits(bot: &Bot, name: &str, code: i32) {
    let path = bot
        .example
        .estate
        .join("hooks")
        .join(format!("{name}.exit"));
    std::fs::write(path, code.to_string()).unwrap();
}

fn hook_passes(bot: &Bot, name: &str) {
    let _ = std::fs::remove_file(
        bot.example
            .estate
            .join("hooks")
            .join(format!("{name}.exit")),
    );
}

fn hook(moment: &str, name: &str, extra: &str) -> String {
    format!(
        "[[hooks.{moment}]]\nname = \"{name}\"\ncommand = [\"python3\", \"ci/hook.py\", \"{{members_file}}\"]\n{extra}\n"
    )
}

/// The lines of the run's section that say what each hook came to.
fn hook_lines(section: &str) -> String {
    section
        .lines()
        .filter(|l| l.starts_with("- Hook "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_moment_runs_in_its_order_and_each_outcome_is_reported_and_recorded() {
    let bot = Bot::start().await;
    let hooks: String = [
        ("before.plan", "announce"),
        ("after.plan", "review-plans"),
        ("after.gate", "tell-gate"),
        ("before.apply", "change-window"),
        ("after.apply", "smoke-test"),
    ]
    .iter()
    .map(|(moment, name)| hook(moment, name, ""))
    .collect();
    hooks_on_base(&bot, &hooks);
    let pr = approved_pr(&bot, 81).await;

    pr.merge().await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev"],
        "dev applies, prod waits: {}",
        pr.report()
    );
    let section = pr.apply_section();
    insta::assert_snapshot!(hook_lines(&section), @"
    - Hook `announce` (before.plan, stage dev): passed
    - Hook `review-plans` (after.plan, stage dev): passed
    - Hook `tell-gate` (after.gate, stage dev): passed
    - Hook `change-window` (before.apply, stage dev): passed
    - Hook `smoke-test` (after.apply, stage dev): passed
    - Hook `announce` (before.plan, stage prod): passed
    - Hook `review-plans` (after.plan, stage prod): passed
    - Hook `tell-gate` (after.gate, stage prod): passed
    ");
    // after.gate was told prod's gate waits, and the line that approves it.
    assert!(
        section.contains("WAVEGATE_GATE_STATUS=waiting"),
        "{section}"
    );
    assert!(section.contains("decision status: waiting"), "{section}");
    assert!(
        section.contains("WAVEGATE_GATE_APPROVE=/approve prod sha256:"),
        "{section}"
    );

    let stage_digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-carol", &format!("/approve prod {stage_digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    let section = pr.apply_section();
    assert!(
        section.contains("WAVEGATE_GATE_STATUS=approved"),
        "{section}"
    );
    insta::assert_snapshot!(hook_lines(&section), @"
    - Hook `announce` (before.plan, stage dev): passed
    - Hook `review-plans` (after.plan, stage dev): passed
    - Hook `tell-gate` (after.gate, stage dev): passed
    - Hook `change-window` (before.apply, stage dev): passed
    - Hook `smoke-test` (after.apply, stage dev): passed
    - Hook `announce` (before.plan, stage prod): passed
    - Hook `review-plans` (after.plan, stage prod): passed
    - Hook `tell-gate` (after.gate, stage prod): passed
    - Hook `change-window` (before.apply, stage prod): passed
    - Hook `smoke-test` (after.apply, stage prod): passed
    ");

    let facts = bot
        .store()
        .await
        .repo_facts("github:acme/infra")
        .await
        .unwrap();
    let hooks: Vec<(String, String)> = facts
        .iter()
        .filter(|f| f.fact.kind == wavegate::gate::ledger::FactKind::Hook)
        .map(|f| {
            let outcome = f.fact.data.outcome.clone().unwrap_or_default();
            (f.fact.gate.to_string(), outcome)
        })
        .collect();
    assert!(
        hooks.contains(&("pr-81-hook-smoke-test".into(), "passed".into())),
        "{hooks:?}"
    );
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_stops_what_comes_after_its_moment() {
    // (moment, what applied, what the run's check says)
    for (moment, applied, state) in [
        ("before.plan", vec![], "failure"),
        ("after.plan", vec![], "failure"),
        ("before.apply", vec![], "failure"),
        ("after.apply", vec!["app@dev"], "failure"),
    ] {
        let bot = Bot::start().await;
        hooks_on_base(&bot, &hook(moment, "guard", ""));
        hook_exits(&bot, "guard", 1);
        let pr = approved_pr(&bot, 82).await;
        pr.merge().await;
        assert_eq!(bot.applies_run(), applied, "{moment}");
        assert_eq!(pr.apply_check().state, state, "{moment}");
        let section = pr.apply_section();
        assert!(
            section.contains(&format!(
                "- Hook `guard` ({moment}, stage dev): failed: the {moment} hook `guard` failed: the hook exited with status 1; last output:"
            )),
            "{moment}: {section}"
        );
        assert!(section.contains("guard fails on purpose"), "{section}");
        if moment != "after.apply" {
            assert!(
                section.contains("| dev | 1 | `app@dev` | failed:"),
                "{moment}: {section}"
            );
        }

        if moment == "after.apply" {
            // The run says it failed, naming the hook, though every member applied.
            let said = pr.last_reply();
            assert!(
                said.contains("the after.apply hook `guard` failed after its members applied"),
                "{said}"
            );
            assert!(pr
                .apply_check()
                .title
                .contains("the after.apply hook `guard` failed"));
        }

        // `/retry` runs the hook again; passing now, the run goes on.
        hook_passes(&bot, "guard");
        pr.comment_as("rev-bob", "/retry").await;
        let section = pr.apply_section();
        assert!(
            section.contains(&format!("- Hook `guard` ({moment}, stage dev): passed")),
            "{moment}: ran again and passed: {section}"
        );
        assert!(
            bot.applies_run().contains(&"app@dev".to_owned()),
            "{moment}: {}",
            pr.apply_section()
        );
        assert_eq!(
            bot.applies_run().iter().filter(|m| *m == "app@dev").count(),
            1,
            "{moment}: applied once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_after_gate_hook_stops_a_stage_that_would_apply_and_leaves_a_waiting_one_waiting()
{
    let bot = Bot::start().await;
    hooks_on_base(&bot, &hook("after.gate", "gate-check", ""));
    hook_exits(&bot, "gate-check", 1);
    let pr = approved_pr(&bot, 83).await;
    pr.merge().await;
    // dev's gate is `never` (not-required): the failing hook stops it.
    assert!(bot.applies_run().is_empty());
    let section = pr.apply_section();
    assert!(
        section.contains("WAVEGATE_GATE_STATUS=not-required"),
        "{section}"
    );
    assert!(
        section.contains("| dev | 1 | `app@dev` | failed:"),
        "{section}"
    );

    // Once it passes, dev applies; prod waits, and the failing hook leaves it waiting.
    hook_passes(&bot, "gate-check");
    pr.comment_as("rev-bob", "/retry").await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    hook_exits(&bot, "gate-check", 1);
    let stage_digest = digest_in(&pr.last_reply());
    let section = pr.apply_section();
    assert!(
        section.contains("WAVEGATE_GATE_STATUS=waiting"),
        "{section}"
    );
    assert_eq!(pr.apply_check().state, "action_required", "{section}");
    assert!(
        section.contains("| prod | 1 | `app@prod` | waiting:"),
        "{section}"
    );
    // Approved, the gate goes on; the hook, failing, stops prod there.
    pr.comment_as("rev-carol", &format!("/approve prod {stage_digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert_eq!(pr.apply_check().state, "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_that_may_be_approved_waits_for_an_approval_of_its_failure() {
    let bot = Bot::start().await;
    hooks_on_base(
        &bot,
        &hook("before.apply", "change-window", "on_failure = \"approve\""),
    );
    hook_exits(&bot, "change-window", 1);
    let pr = approved_pr(&bot, 84).await;
    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @r#"
    The before.apply hook `change-window` failed (the run's section of the report shows what it printed), and its `on_failure = "approve"` lets a person let stage **dev** go on anyway. Approving binds this failure on these plans (digest `sha256:[digest]`):

    ```
    /approve sha256:[digest]
    ```
    "#);
    assert_eq!(pr.apply_check().state, "action_required");

    // An outsider cannot approve it; the approver's approval of exactly
    // that failure lets dev apply, the hook still failing.
    let refused = pr.comment_as("outsider-mallory", "/approve").await;
    assert_eq!(pr.reactions(refused), ["eyes", "confused"]);
    assert!(bot.applies_run().is_empty());
    pr.comment_as("rev-carol", &format!("/approve {}", digest_in(&asked)))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let section = pr.apply_section();
    assert!(
        section.contains("- Hook `change-window` (before.apply, stage dev): approved at `pr-84-hook-change-window` by rev-carol"),
        "{section}"
    );
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approvable_failure_before_the_plan_or_after_it_waits_the_same_way() {
    for (moment, number) in [("before.plan", 86), ("after.plan", 87)] {
        let bot = Bot::start().await;
        hooks_on_base(&bot, &hook(moment, "vet", "on_failure = \"approve\""));
        hook_exits(&bot, "vet", 1);
        let pr = approved_pr(&bot, number).await;
        pr.merge().await;
        assert!(bot.applies_run().is_empty(), "{moment}");
        let asked = pr.last_reply();
        assert!(
            asked.starts_with(&format!("The {moment} hook `vet` failed")),
            "{moment}: {asked}"
        );
        pr.comment_as("rev-carol", &format!("/approve {}", digest_in(&asked)))
            .await;
        assert_eq!(bot.applies_run(), ["app@dev"], "{moment}");
        assert!(
            pr.apply_section().contains(&format!(
                "- Hook `vet` ({moment}, stage dev): approved at `pr-{number}-hook-vet` by rev-carol"
            )),
            "{moment}: {}",
            pr.apply_section()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_holds_a_stage_on_another_gate_until_that_digest_is_approved() {
    let bot = Bot::start().await;
    hooks_on_base(&bot, &hook("before.plan", "migrate", ""));
    let held_on = format!("sha256:{}", "4d".repeat(32));
    std::fs::write(
        bot.example.estate.join("hooks/migrate.hold"),
        format!(r#"{{"gate": "split-queues", "digest": "{held_on}", "members": ["app@dev"]}}"#),
    )
    .unwrap();
    let pr = approved_pr(&bot, 85).await;
    let plans_before = bot.plans_run().len();
    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    assert_eq!(bot.plans_run().len(), plans_before, "nothing was planned");
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @r#"
    The before.plan hook `migrate` holds stage **dev** on `pr-85-hook-split-queues` until digest `sha256:[digest]` is approved there; nothing more of the stage is planned or applied until then. Approving runs the hook again, told of the approval:

    ```
    /approve sha256:[digest]
    ```
    "#);
    assert!(asked.contains(&format!("/approve {held_on}")), "{asked}");

    // The approval of that digest releases it: the hook runs again, told so, and passes.
    pr.comment_as("rev-carol", &format!("/approve {held_on}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let section = pr.apply_section();
    assert!(section.contains("released by rev-carol"), "{section}");
    assert!(
        section.contains("- Hook `migrate` (before.plan, stage dev): approved at `pr-85-hook-split-queues` by rev-carol"),
        "{section}"
    );
    // prod's hook holds on the same digest, approved already: it is
    // released at once, and prod waits at its own gate only.
    assert!(
        section.contains("- Hook `migrate` (before.plan, stage prod): approved at `pr-85-hook-split-queues` by rev-carol"),
        "{section}"
    );
    assert_eq!(pr.apply_check().title, "Waiting: /approve prod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_after_the_plan_or_before_the_apply_waits_the_same_way_with_nothing_applied() {
    for (moment, number) in [("after.plan", 88), ("before.apply", 89)] {
        let bot = Bot::start().await;
        hooks_on_base(&bot, &hook(moment, "migrate", ""));
        let held_on = format!("sha256:{}", "5e".repeat(32));
        std::fs::write(
            bot.example.estate.join("hooks/migrate.hold"),
            format!(r#"{{"gate": "queues", "digest": "{held_on}"}}"#),
        )
        .unwrap();
        let pr = approved_pr(&bot, number).await;
        pr.merge().await;
        assert!(bot.applies_run().is_empty(), "{moment}");
        let asked = pr.last_reply();
        assert!(
            asked.starts_with(&format!(
                "The {moment} hook `migrate` holds stage **dev** on `pr-{number}-hook-queues`"
            )),
            "{moment}: {asked}"
        );
        assert!(
            pr.apply_section()
                .contains("| dev | 1 | `app@dev` | waiting: the "),
            "{moment}: {}",
            pr.apply_section()
        );
        pr.comment_as("rev-carol", &format!("/approve {held_on}"))
            .await;
        assert_eq!(bot.applies_run(), ["app@dev"], "{moment}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_member_hook_runs_once_for_each_member_with_its_plan_file() {
    let bot = Bot::start().await;
    hooks_on_base(&bot,
        "[[hooks.before.apply]]\nname = \"lint\"\nper_member = true\ncommand = [\"python3\", \"ci/hook.py\", \"{members_file}\", \"{plan_file}\"]\n",
    );
    let pr = approved_pr(&bot, 93).await;
    pr.merge().await;
    let stage_digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-carol", &format!("/approve prod {stage_digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    let section = pr.apply_section();
    insta::assert_snapshot!(hook_lines(&section), @"
    - Hook `lint` (before.apply, stage dev, for `app@dev`): passed
    - Hook `lint` (before.apply, stage prod, for `app@prod`): passed
    - Hook `lint` (before.apply, stage prod, for `dns@prod`): passed
    ");
    for member in ["app@dev", "app@prod", "dns@prod"] {
        assert!(
            section.contains(&format!(
                "before.apply lint in {}: {member}\nplan of {member}: ",
                &member[member.find('@').unwrap() + 1..]
            )),
            "{member}: {section}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_hangs_is_killed_at_its_timeout_and_fails_saying_so() {
    let bot = Bot::start().await;
    hooks_on_base(&bot, &hook("before.plan", "stuck", "timeout = \"2s\""));
    std::fs::write(bot.example.estate.join("hooks/stuck.hang"), "").unwrap();
    let pr = approved_pr(&bot, 94).await;
    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    assert_eq!(pr.apply_check().state, "failure");
    let section = pr.apply_section();
    assert!(
        section.contains("- Hook `stuck` (before.plan, stage dev): failed: the before.plan hook `stuck` failed: the hook did not finish within its timeout of 2s and was killed with everything it started"),
        "{section}"
    );
    bot.until_no_command_survives().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_waiting_in_a_stage_whose_gate_went_through_is_approved_after_that_gates_deadline() {
    let bot = Bot::start().await;
    bot.edit_base_config(
        "name = \"prod\"\ngate = \"always\"",
        "name = \"prod\"\ngate = \"always\"\ntimeout = \"1h\"",
    );
    hooks_on_base(&bot,
        "[[stage.hooks.before.apply]]\nname = \"window\"\ncommand = [\"python3\", \"ci/hook.py\", \"{members_file}\"]\non_failure = \"approve\"\n",
    );
    hook_exits(&bot, "window", 1);
    let pr = approved_pr(&bot, 95).await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let stage_digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-carol", &format!("/approve prod {stage_digest}"))
        .await;
    let asked = pr.last_reply();
    assert!(
        asked.starts_with("The before.apply hook `window` failed"),
        "{asked}"
    );
    // prod's gate went through within its hour; the hook's wait has no deadline.
    bot.advance_clock(std::time::Duration::from_secs(3601))
        .await;
    pr.comment_as("rev-carol", &format!("/approve {}", digest_in(&asked)))
        .await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev", "app@prod"],
        "{}",
        pr.apply_section()
    );
    // The next wave's plans are another digest: its failure is approved on its own.
    let asked = pr.last_reply();
    assert!(
        asked.starts_with("The before.apply hook `window` failed"),
        "{asked}"
    );
    pr.comment_as("rev-carol", &format!("/approve {}", digest_in(&asked)))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}

/// A stage that counts approving reviews still needs `/approve` of a hook's
/// failure: a review approves the code, not what a hook found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approving_review_does_not_release_a_hooks_failure() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\nreview_approvals = true");
    hooks_on_base(
        &bot,
        &hook("before.apply", "window", "on_failure = \"approve\""),
    );
    hook_exits(&bot, "window", 1);
    let pr = approved_pr(&bot, 96).await;
    let head = pr.head();
    let merged = pr.merge().await;
    assert!(bot.applies_run().is_empty());
    let asked = pr.last_reply();
    let review = crate::support::github_review(
        "submitted",
        "approved",
        &pr.repo,
        &merged,
        9002,
        "rev-carol",
        &head,
    );
    bot.tell(&pr.repo, review).await;
    assert!(bot.applies_run().is_empty(), "{}", pr.apply_section());
    pr.comment_as("rev-carol", &format!("/approve {}", digest_in(&asked)))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
}

/// The operator's central configuration (`WAVEGATE_REPOS_CONFIG`) imposes a
/// hook on every `acme/*` repository: it runs at its moment although the
/// repository's own `wavegate.toml` names no hook, and the report says
/// which settings came from the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_the_operator_imposes_runs_although_the_repositorys_file_omits_it() {
    let bot = Bot::start_with_file(&[], "WAVEGATE_REPOS_CONFIG", |_, _| {
        r#"
[[repos]]
match = ["acme/*"]
[[repos.hooks.before.apply]]
name = "operator-window"
command = ["python3", "-c", "import os; print('change window open for ' + os.environ['WAVEGATE_STAGE'])"]
"#
        .into()
    })
    .await;
    assert!(
        !bot.example.read("main", "wavegate.toml").contains("hooks"),
        "the repository's own file names no hook"
    );
    let pr = approved_pr(&bot, 90).await;
    let report = pr.report();
    let note = report
        .lines()
        .find(|l| l.contains("Set by the operator's central configuration"))
        .unwrap_or_else(|| panic!("no note of the operator's settings in\n{report}"));
    assert!(
        note.ends_with("entry `acme/*`): `hooks.before.apply (1 imposed)`"),
        "{note}"
    );

    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let section = pr.apply_section();
    insta::assert_snapshot!(hook_lines(&section), @"- Hook `operator-window` (before.apply, stage dev): passed");
    assert!(section.contains("change window open for dev"), "{section}");
}
