//! Component groups (`[[group]]`): a group's members in a stage sit in one
//! wave, are planned with one call and applied with one call (the example's
//! `ci/group.py`, as `terragrunt run-all` does a stack). Each member's plan
//! binds the group's digest; a group that fails to plan fails each member;
//! a group's apply that fails part way leaves its members applied, failed
//! or not started, and a retry applies what is left as a smaller group; a
//! round that groups otherwise than the approved plan is not covered.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;

/// `data`: network, database and app, planned and applied by `ci/group.py`.
const GROUP: &str =
    "[[group]]\nname = \"data\"\ncomponents = [\"network\", \"database\", \"app\"]\n\
plan = [\"python3\", \"{root}/ci/group.py\", \"plan\", \"{members_file}\"]\n\
apply = [\"python3\", \"{root}/ci/group.py\", \"apply\", \"{members_file}\"]\n\n";

/// Main with the group `data`, and a branch `name` on it: network adds
/// a public subnet, database moves onto it (a read of its mate network
/// that network's plan cannot know: the group's apply computes it), app
/// and dns as on `change`; `extra` files too.
fn stack_branch(bot: &Bot, name: &str, extra: &[(&str, Option<&str>)]) {
    bot.edit_base_config("[policy]", &format!("{GROUP}[policy]"));
    let config = bot.example.read("main", "wavegate.toml").replace(
        "inputs = { subnet_id = \"network.subnet_id\" }",
        "inputs = { subnet_id = \"network.public_subnet_id\" }",
    );
    let network = bot.example.read("main", "infra/network/resources.json").replace(
        "  \"aws_vpc.main\": {",
        "  \"aws_subnet.public\": {\"availability_zone\": \"eu-west-1b\", \"cidr_block\": \"10.0.2.0/24\", \"name\": \"estate-${stage}-public\"},\n  \"aws_vpc.main\": {",
    );
    let outputs = "{\"subnet_id\": \"aws_subnet.private.id\", \"public_subnet_id\": \"aws_subnet.public.id\", \"vpc_id\": \"aws_vpc.main.id\"}";
    let from_change: Vec<(&str, String)> = [
        "infra/app/resources.json",
        "infra/app/outputs.json",
        "infra/dns/resources.json",
        "infra/dns/outputs.json",
    ]
    .into_iter()
    .map(|p| (p, bot.example.read("change", p)))
    .collect();
    let mut files: Vec<(&str, Option<&str>)> = vec![
        ("wavegate.toml", Some(&config)),
        ("infra/network/resources.json", Some(&network)),
        ("infra/network/outputs.json", Some(outputs)),
    ];
    files.extend(from_change.iter().map(|(p, t)| (*p, Some(t.as_str()))));
    files.extend_from_slice(extra);
    bot.example.branch(name, "main", &files);
}

/// Opens PR `number` from `branch` with rev-bob and rev-carol allowed to approve.
async fn stack_pr<'b>(bot: &'b Bot, number: u64, branch: &str) -> PrHandle<'b> {
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.forge.set_permission(&repo, "rev-carol", "write");
    bot.opened(&repo, number, branch).await
}

/// How many group calls of `what` (plan or apply) the server started for
/// `group@stage`.
fn group_calls(bot: &Bot, what: &str, at: &str) -> usize {
    let started = format!("[{what}] group {at} | estate: {what} group {at}:");
    bot.log().lines().filter(|l| l.contains(&started)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_planned_with_one_call_and_applied_with_one_call() {
    let bot = Bot::start().await;
    stack_branch(&bot, "stack", &[]);
    let pr = stack_pr(&bot, 101, "stack").await;
    insta::assert_snapshot!(redact(&pr.section("Groups")), @r#"
        ### Groups

        Each group's members in a stage are planned with one call and applied with one call, in one wave; each member's plan digest binds the group's digest.

        | group | stage | wave | members | group digest |
        |---|---|--:|---|---|
        | `data` | dev | 1 | `app@dev`, `database@dev`, `network@dev` | `[short]` |
        | `data` | prod | 1 | `app@prod`, `database@prod`, `network@prod` | `[short]` |

        - `app@dev` input `db_endpoint` reads its mate's `database.endpoint`: `"db-instance-main-8b843667.dev.estate.internal"`, as the mate's plan says
        - `app@dev` input `vpc_id` reads its mate's `network.vpc_id`: `"vpc-373911f8"`, as the mate's plan says
        - `database@dev` input `subnet_id` reads its mate's `network.public_subnet_id`, which the group's apply computes (the mate's plan does not know it): approving this plan does not fix its value
        - `app@prod` input `db_endpoint` reads its mate's `database.endpoint`: `"db-instance-main-de1c88cf.prod.estate.internal"`, as the mate's plan says
        - `app@prod` input `vpc_id` reads its mate's `network.vpc_id`: `"vpc-5894d133"`, as the mate's plan says
        - `database@prod` input `subnet_id` reads its mate's `network.public_subnet_id`, which the group's apply computes (the mate's plan does not know it): approving this plan does not fix its value
        "#);
    assert_eq!(group_calls(&bot, "plan", "data@dev"), 1);
    pr.comment_as("rev-bob", "/approve").await;

    pr.merge().await;
    assert_eq!(
        bot.applies_run(),
        ["network@dev", "database@dev", "app@dev"],
        "one call, in the order the group's tool chose"
    );
    assert_eq!(group_calls(&bot, "apply", "data@dev"), 1);
    let state = |component: &str| bot.deployed("dev", component);
    assert_eq!(
        state("database")["aws_db_instance.main"]["subnet_id"],
        state("network")["aws_subnet.public"]["id"],
        "the group's apply gave database the subnet network created in the same call"
    );
    let asked = pr.last_reply();
    pr.comment_as("rev-carol", &format!("/approve prod {}", digest_in(&asked)))
        .await;
    let applied = bot.applies_run();
    assert_eq!(
        applied[3..],
        ["network@prod", "database@prod", "app@prod", "dns@prod"]
    );
    assert_eq!(pr.apply_check().state, "success", "{}", pr.apply_section());
    bot.assert_ledger_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_fails_to_plan_fails_each_of_its_members_with_its_error() {
    let bot = Bot::start().await;
    stack_branch(
        &bot,
        "stack-broken",
        &[(
            "infra/database/.fail-plan",
            Some("the database module does not parse\n"),
        )],
    );
    let pr = stack_pr(&bot, 102, "stack-broken").await;
    let report = pr.report();
    insta::assert_snapshot!(redact(&pr.section("Groups")), @"
        ### Groups

        Each group's members in a stage are planned with one call and applied with one call, in one wave; each member's plan digest binds the group's digest.

        | group | stage | wave | members | group digest |
        |---|---|--:|---|---|
        | `data` | dev | 1 | `app@dev`, `database@dev`, `network@dev` | — |
        | `data` | prod | 1 | `app@prod`, `database@prod`, `network@prod` | — |

        - ❌ in dev, group `data` failed to plan: the group's plan command exited with status 1 (so did each of its members)
        - ❌ in prod, group `data` failed to plan: the group's plan command exited with status 1 (so did each of its members)
        ");
    for member in ["network@dev", "database@dev", "app@dev"] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| `{member}` |")))
            .unwrap_or_else(|| panic!("no row for {member}:\n{report}"));
        assert!(
            row.contains("plan-failed") || row.contains("failed"),
            "{row}"
        );
    }
    assert_eq!(pr.plan_state(), "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_apply_that_fails_part_way_is_retried_as_a_smaller_group() {
    let bot = Bot::start().await;
    stack_branch(&bot, "stack", &[]);
    let pr = stack_pr(&bot, 103, "stack").await;
    pr.comment_as("rev-bob", "/approve").await;
    let fail = bot.estate_file("dev", "database", ".fail-apply");
    std::fs::write(&fail, "the database is in maintenance\n").unwrap();

    pr.merge().await;
    assert_eq!(bot.applies_run(), ["network@dev"]);
    let section = pr.apply_section();
    assert!(
        section.contains("<details><summary>What the applies of <code>app@dev</code>, <code>database@dev</code>, <code>network@dev</code> printed, the same for each"),
        "the group's one call printed once for its members: {section}"
    );
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | not started: group `data`'s apply did not reach it before it failed |
    | dev | 1 | `database@dev` | failed: the database is in maintenance |
    | dev | 1 | `network@dev` | applied |
    | prod | 1 | `app@prod` | not started |
    | prod | 1 | `database@prod` | not started |
    | prod | 1 | `network@prod` | not started |
    | prod | 2 | `dns@prod` | not started |
    ");
    assert_eq!(pr.apply_check().state, "failure");

    std::fs::remove_file(&fail).unwrap();
    pr.comment_as("rev-bob", "/retry").await;
    assert_eq!(
        bot.applies_run(),
        ["network@dev", "database@dev", "app@dev"],
        "nothing applied twice"
    );
    assert_eq!(group_calls(&bot, "apply", "data@dev"), 2);
    assert!(
        bot.log()
            .contains("estate: apply group data@dev: app@dev, database@dev"),
        "what was left applied as a group of two"
    );
    bot.assert_ledger_verifies();
}

/// The server dies while the group's call has applied network and waits
/// in database's apply: after the restart network is found applied (its
/// plan changes nothing now) and the rest applies as a group of two, each
/// member once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_call_killed_part_way_applies_each_member_exactly_once() {
    let mut bot = Bot::start_with(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    stack_branch(&bot, "stack", &[]);
    let pr = stack_pr(&bot, 105, "stack").await;
    pr.comment_as("rev-bob", "/approve").await;
    let pause = bot.estate_file("dev", "database", ".pause-apply");
    std::fs::write(&pause, "before").unwrap();
    pr.merge_unsettled().await;
    let paused = bot.estate_file("dev", "database", ".paused");
    bot.until("database's apply pauses in the group's call", || async {
        paused.exists().then_some(())
    })
    .await;
    assert_eq!(bot.applies_run(), ["network@dev"]);
    let repo = pr.repo.clone();
    bot.kill();
    bot.until_no_command_survives().await;
    std::fs::remove_file(&pause).unwrap();

    bot.start_server().await;
    bot.settle().await;
    let pr = bot.pr(&repo, 105);
    assert_eq!(
        bot.applies_run(),
        ["network@dev", "database@dev", "app@dev"],
        "nothing applied twice"
    );
    let section = pr.apply_section();
    let row = |member: &str| {
        section
            .lines()
            .find(|l| l.contains(&format!("`{member}`")))
            .unwrap_or_else(|| panic!("no row for {member}:\n{section}"))
            .to_owned()
    };
    assert!(
        row("network@dev").contains("applied (its apply had finished before a restart"),
        "{section}"
    );
    assert!(row("database@dev").ends_with("| applied |"), "{section}");
    assert!(
        bot.log()
            .contains("estate: apply group data@dev: app@dev, database@dev"),
        "what was left applied as a group of two"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_groups_otherwise_than_the_approved_plan_is_not_covered() {
    let bot = Bot::start().await;
    stack_branch(&bot, "stack", &[]);
    let pr = stack_pr(&bot, 104, "stack").await;
    pr.comment_as("rev-bob", "/approve").await;
    // Before the merge, main takes app out of the group.
    bot.edit_base_config(
        "components = [\"network\", \"database\", \"app\"]",
        "components = [\"network\", \"database\"]",
    );

    pr.merge().await;
    assert!(bot.applies_run().is_empty(), "{:?}", bot.applies_run());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - database@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev
    - network@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```
    ");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - database@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev
    - network@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `database@dev` | waiting: not covered: database@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev |
    | dev | 1 | `network@dev` | waiting: not covered: network@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev |
    | dev | 2 | `app@dev` | blocked by network@dev |
    | prod | 1 | `database@prod` | not started |
    | prod | 1 | `network@prod` | not started |
    | prod | 2 | `app@prod` | not started |
    | prod | 3 | `dns@prod` | not started |

    - Round 2 (dev, gate `pr-104-round-2`): digest `sha256:[digest]`, not covered, waiting: `database@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev`; `network@dev: the approved plan grouped app@dev, database@dev, network@dev, and the round groups database@dev, network@dev`
      - `database@dev`: `sha256:[digest]` (0 to create, 1 to update, 0 to replace, 0 to delete)
      - `network@dev`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");

    // Approving the round approves the plans made as grouped now: app,
    // on its own since, is what the approved plan said of it.
    let round = digest_in(&pr.last_reply());
    pr.comment_as("rev-bob", &format!("/approve {round}")).await;
    assert_eq!(
        bot.applies_run(),
        ["network@dev", "database@dev", "app@dev"]
    );
    assert_eq!(group_calls(&bot, "apply", "data@dev"), 1);
}
