//! Discovered members: a component that finds its units at plan time. The
//! example's discoverer walks a nested tree of units (as `terragrunt find
//! --json --dag` would) and each unit is planned and applied as a member of
//! its own, in the waves its dependencies make; what it found is bound, so
//! a unit found otherwise at apply is not covered, and a discovery that
//! fails says so with its output.

use crate::support::bot::*;
use crate::support::pr::*;

/// Finds every directory under `live/` holding a `resources.json`; a unit
/// depends on the directories its `deps.txt` lists, and on what
/// `$ESTATE_DIR/discover/<name>.deps` adds (a discovery that moves without
/// the tree moving). Fails while `$ESTATE_DIR/discover/fail` exists.
const DISCOVER_PY: &str = r#"import json, os, pathlib, sys
control = pathlib.Path(os.environ["ESTATE_DIR"]) / "discover"
if (control / "fail").exists():
    print("terragrunt: live/app/terragrunt.hcl:3: unexpected token")
    sys.exit(1)
units = []
for resources in sorted(pathlib.Path("live").rglob("resources.json")):
    unit = resources.parent
    deps = unit / "deps.txt"
    found = deps.read_text().split() if deps.exists() else []
    extra = control / (str(unit).replace("/", ".") + ".deps")
    if extra.exists():
        found += extra.read_text().split()
    units.append({"type": "unit", "path": str(unit), "dependencies": found,
                  "paths": [f"{unit}/*"]})
print(f"found {len(units)} units")
json.dump(units, open(sys.argv[1], "w"))
"#;

fn resources(name: &str) -> String {
    format!(r#"{{"null_resource.{name}": {{"name": "{name}-${{stage}}"}}}}"#)
}

/// A branch `name` on `change` that adds the discovering component
/// `live` (dev only) and a nested tree of three units: `live/net`,
/// `live/net/db` (depends on net) and `live/app` (depends on db).
fn branch_with_discovered_tree(bot: &Bot, name: &str) {
    let config = bot.example.read("change", "wavegate.toml").replace(
        "[policy]",
        "[[component]]\nname = \"live\"\ndiscover = [\"python3\", \"ci/discover.py\", \"{units_file}\"]\nstages = [\"dev\"]\n\n[policy]",
    );
    let (net, db, app) = (resources("net"), resources("db"), resources("app"));
    bot.example.branch(
        name,
        "change",
        &[
            ("wavegate.toml", Some(&config)),
            ("ci/discover.py", Some(DISCOVER_PY)),
            ("live/net/resources.json", Some(&net)),
            ("live/net/db/resources.json", Some(&db)),
            ("live/net/db/deps.txt", Some("live/net\n")),
            ("live/app/resources.json", Some(&app)),
            ("live/app/deps.txt", Some("live/net/db\n")),
        ],
    );
    std::fs::create_dir_all(bot.example.estate.join("discover")).unwrap();
}

fn discovery(bot: &Bot, file: &str, text: &str) {
    std::fs::write(bot.example.estate.join("discover").join(file), text).unwrap();
}

async fn tree_pr(bot: &Bot, number: u64) -> PrHandle<'_> {
    branch_with_discovered_tree(bot, "tree");
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.opened(&repo, number, "tree").await
}

fn position(applied: &[String], member: &str) -> usize {
    applied
        .iter()
        .position(|m| m == member)
        .unwrap_or_else(|| panic!("{member} did not apply: {applied:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovered_tree_is_planned_and_applied_in_the_waves_its_dependencies_make() {
    let bot = Bot::start().await;
    let pr = tree_pr(&bot, 95).await;
    let report = pr.report();
    assert!(
        report.contains("`live` discovered 3 units: `live.app`, `live.net`, `live.net.db`"),
        "{report}"
    );
    for member in ["live.net@dev", "live.net.db@dev", "live.app@dev"] {
        assert!(
            report.contains(&format!("`{member}`")),
            "{member}: {report}"
        );
    }
    assert!(
        !report.contains("live.app@prod"),
        "the template runs in dev only"
    );

    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let applied = bot.applies_run();
    let (net, db, app) = (
        position(&applied, "live.net@dev"),
        position(&applied, "live.net.db@dev"),
        position(&applied, "live.app@dev"),
    );
    assert!(net < db && db < app, "in dependency order: {applied:?}");
}

/// Between approval and merge the discovery finds `live.app` depending on
/// `live.net` as well: its unit is not the one approved, so it waits for a
/// round that says how it was found, while the units found as approved
/// apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_discovered_otherwise_at_apply_is_not_covered_by_the_approval() {
    let bot = Bot::start().await;
    let pr = tree_pr(&bot, 96).await;
    pr.comment_as("rev-bob", "/approve").await;

    discovery(&bot, "live.app.deps", "live/net\n");
    pr.merge().await;
    let applied = bot.applies_run();
    assert!(
        applied.contains(&"live.net.db@dev".to_owned()),
        "{applied:?}"
    );
    assert!(!applied.contains(&"live.app@dev".to_owned()), "{applied:?}");
    let section = pr.apply_section();
    assert!(
        section.contains("live.app@dev: its unit was discovered otherwise"),
        "{section}"
    );
    assert!(pr.last_reply().contains("round"), "{}", pr.last_reply());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovery_that_fails_fails_the_plan_with_its_output() {
    let bot = Bot::start().await;
    branch_with_discovered_tree(&bot, "tree");
    discovery(&bot, "fail", "");
    let repo = bot.github_repo();
    let pr = bot.opened(&repo, 97, "tree").await;
    let report = pr.report();
    assert!(
        report.contains("component `live` could not discover its units: the discover command exited with status 1"),
        "{report}"
    );
    assert!(
        report.contains("live/app/terragrunt.hcl:3: unexpected token"),
        "{report}"
    );
    assert_eq!(pr.plan_state(), "failure");
}

/// The discovery on the merge commit is PR code: it runs only once the
/// approval stands. Revoked before merge, the run waits for an approval
/// and nothing is discovered (a discovery that would fail fails nothing);
/// approved again, the units are found and applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_merge_commit_is_discovered_only_once_the_approval_stands() {
    let bot = Bot::start().await;
    let pr = tree_pr(&bot, 98).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.comment_as("rev-bob", "/revoke").await;
    discovery(&bot, "fail", "");

    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    let waiting = pr.last_reply();
    assert!(
        waiting.contains("No approval of the merged plan stands"),
        "{waiting}"
    );
    assert!(
        !pr.report().contains("could not discover"),
        "{}",
        pr.report()
    );

    std::fs::remove_file(bot.example.estate.join("discover").join("fail")).unwrap();
    pr.comment_as("rev-bob", "/approve").await;
    let applied = bot.applies_run();
    assert!(position(&applied, "live.net@dev") < position(&applied, "live.app@dev"));
}
