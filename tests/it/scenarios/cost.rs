//! Cost in the digest: the base's `cost` command prices each stage's plans
//! (Infracost's JSON), the report shows the figures against the base's, the
//! change-set digest binds them as the member `cost@<stage>`, a cost that
//! moves after approval is a round naming the old and new figures, and one
//! above `[policy] max_monthly_increase` waits for an `/override` of
//! exactly that cost.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;
use wavegate::gate::ledger::FactKind;

/// The example's cost command: prices each member it is shown (its plan
/// file read, as Infracost would) at what `$ESTATE_DIR/cost/<member>` says
/// (10.00 a month when it says nothing), against `<member>.past` before;
/// fails while `$ESTATE_DIR/cost/fail` exists.
const COST_PY: &str = r#"import json, os, pathlib, sys
members = json.load(open(sys.argv[1]))
control = pathlib.Path(os.environ["ESTATE_DIR"]) / "cost"
if (control / "fail").exists():
    print("the pricing API answered 503")
    sys.exit(2)
def price(name):
    path = control / name
    return path.read_text().strip() if path.exists() else "10.00"
projects = []
for m in members:
    json.load(open(m["planFile"]))
    projects.append({"name": m["member"],
                     "breakdown": {"totalMonthlyCost": price(m["member"])},
                     "pastBreakdown": {"totalMonthlyCost": price(m["member"] + ".past")}})
print(f"priced {len(projects)} members of {os.environ['WAVEGATE_STAGE']}")
json.dump({"version": "0.2", "currency": "USD", "projects": projects}, open(sys.argv[2], "w"))
"#;

/// Commits the cost command on main, with `policy` lines added to
/// `[policy]`, and its script on main and on the change.
fn cost_on_base(bot: &Bot, policy: &str) {
    let config = bot.example.read("main", "wavegate.toml");
    let config = config.replace("required = 1", &format!("required = 1\n{policy}"));
    let config = format!(
        "{config}\n[cost]\ncommand = [\"python3\", \"ci/cost.py\", \"{{members_file}}\", \"{{cost_file}}\"]\n"
    );
    bot.example.branch(
        "main",
        "main",
        &[
            ("ci/cost.py", Some(COST_PY)),
            ("wavegate.toml", Some(&config)),
        ],
    );
    // The pull request's branch carries the script too: its plan runs
    // the command line of the base on the files of the head.
    bot.example
        .branch("change", "change", &[("ci/cost.py", Some(COST_PY))]);
    std::fs::create_dir_all(bot.example.estate.join("cost")).unwrap();
}

/// Prices `member` at `monthly` a month from now on.
fn price(bot: &Bot, member: &str, monthly: &str) {
    std::fs::write(bot.example.estate.join("cost").join(member), monthly).unwrap();
}

/// app@dev costs 120.00 a month when approved; by merge it costs 900.00.
/// The plans are the same, but the approval bound the cost: dev waits for a
/// round that says what moved, and applies once that round is approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_that_moves_after_approval_is_a_round_naming_the_old_and_new_figures() {
    let bot = Bot::start().await;
    cost_on_base(&bot, "");
    price(&bot, "app@dev", "120");
    price(&bot, "app@dev.past", "100");
    let pr = planned_pr(&bot, 90).await;
    insta::assert_snapshot!(pr.section("Cost"), @"
    ### Cost

    | member | monthly | before | change |
    |---|--:|--:|--:|
    | `app@dev` | 120.00 | 100.00 | +20.00 |
    | **cost@dev** | **120.00 USD** | 100.00 USD | **+20.00** |
    | `app@prod` | 10.00 | 10.00 | +0.00 |
    | `dns@prod` | 10.00 | 10.00 | +0.00 |
    | **cost@prod** | **20.00 USD** | 20.00 USD | **+0.00** |
    | **total** | **140.00** | 120.00 | **+20.00** |
    ");
    let approved = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;

    price(&bot, "app@dev", "900");
    pr.merge().await;
    assert!(bot.applies_run().is_empty(), "{}", pr.report());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    What the stage costs moved since it was approved, so it is not covered (round 2, digest `sha256:[digest]`): `cost@dev: the monthly cost moved from 120.00 USD to 900.00 USD (+780.00) since the approved plan: app@dev 120.00 → 900.00`. Nothing of the stage was applied. Approving this digest approves its plans at that cost and resumes the run:

    ```
    /approve sha256:[digest]
    ```
    ");
    let section = pr.apply_section();
    assert!(
        section.contains("cost@dev: the monthly cost moved from 120.00 USD to 900.00 USD (+780.00) since the approved plan: app@dev 120.00 → 900.00"),
        "{section}"
    );
    assert!(
        section.contains("`cost@dev`: 900.00 USD a month (+800.00 on before)"),
        "the round shows the cost it binds: {section}"
    );
    let round = pr
        .last_reply()
        .lines()
        .find(|l| l.starts_with("/approve sha256:"))
        .expect("the line to copy")
        .to_owned();
    assert!(!round.contains(&approved));

    pr.comment_as("rev-bob", &round).await;
    assert_eq!(bot.applies_run(), ["app@dev"], "{}", pr.report());
}

/// The base caps a stage's monthly rise at 100.00; the change adds 500.00
/// to dev. The report says it is denied and how to let it through; after
/// merge dev waits for `/override cost@dev` of exactly that cost, which
/// only an overrider can give, and which is spent when it lets dev through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_above_the_cap_waits_for_an_override_of_exactly_that_cost() {
    let bot = Bot::start().await;
    cost_on_base(
        &bot,
        "overriders = [\"sec-sam\"]\nmax_monthly_increase = \"100\"",
    );
    price(&bot, "app@dev", "510");
    let pr = planned_pr(&bot, 91).await;
    bot.forge.set_permission(&pr.repo, "sec-sam", "write");
    let cost = pr.section("Cost");
    assert!(
        cost.contains("⛔ `cost@dev` is denied by the policy: the monthly cost rises by 500.00 USD, more than `max_monthly_increase` (100.00)"),
        "{cost}"
    );
    pr.comment_as("rev-bob", "/approve").await;

    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    The policy denied the monthly cost of stage **dev** (**cost@dev**, `sha256:[digest]`; `max_monthly_increase`): it rises by more than `max_monthly_increase`. Nothing of that stage was applied. Someone in `policy.overriders` may let exactly this cost through:

    ```
    /override cost@dev <reason>
    ```
    ");

    pr.comment_as(
        "rev-carol",
        "/override cost@dev we need the bigger instances",
    )
    .await;
    assert!(bot.applies_run().is_empty(), "rev-carol is no overrider");
    pr.comment_as(
        "sec-sam",
        "/override cost@dev the launch needs the bigger instances",
    )
    .await;
    assert_eq!(bot.applies_run(), ["app@dev"], "{}", pr.report());
    assert_eq!(
        bot.override_kinds(91).await,
        [
            FactKind::Pending,
            FactKind::Refused,
            FactKind::Approved,
            FactKind::Spent
        ]
    );
}

/// A cost command that fails fails the plan: the report says which stage
/// could not be priced and why, the check fails, and a push that fixes it
/// prices it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_command_that_fails_fails_the_plan_with_its_output() {
    let bot = Bot::start().await;
    cost_on_base(&bot, "");
    std::fs::write(bot.example.estate.join("cost").join("fail"), "").unwrap();
    let pr = planned_pr(&bot, 92).await;
    insta::assert_snapshot!(pr.section("Cost"), @"
    ### Cost

    | member | monthly | before | change |
    |---|--:|--:|--:|
    | **cost@dev** | ❌ not priced | | |
    | **cost@prod** | ❌ not priced | | |

    - ❌ `cost@dev`: the cost command exited with status 2; last output:

      ```
      the pricing API answered 503
      ```
    - ❌ `cost@prod`: the cost command exited with status 2; last output:

      ```
      the pricing API answered 503
      ```
    ");
    assert_eq!(pr.plan_state(), "failure");

    std::fs::remove_file(bot.example.estate.join("cost").join("fail")).unwrap();
    pr.comment_as("dev-alice", "/plan").await;
    assert!(pr
        .section("Cost")
        .contains("| **cost@dev** | **10.00 USD**"));
    assert_eq!(
        pr.plan_state(),
        "action_required",
        "it waits for an approval"
    );
}

/// An override of the denied cost given in review names the cost the
/// report showed: at merge the stage costs the same, so it goes through
/// without waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_of_the_cost_in_review_lets_exactly_that_cost_through() {
    let bot = Bot::start().await;
    cost_on_base(
        &bot,
        "overriders = [\"sec-sam\"]\nmax_monthly_increase = \"100\"",
    );
    price(&bot, "app@dev", "510");
    let pr = planned_pr(&bot, 93).await;
    bot.forge.set_permission(&pr.repo, "sec-sam", "write");
    pr.comment_as("rev-bob", "/approve").await;
    let given = pr
        .comment_as("sec-sam", "/override cost@dev the launch needs it")
        .await;
    assert_eq!(pr.reactions(given), ["eyes", "rocket"]);

    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "{}", pr.report());
    assert_eq!(
        bot.override_kinds(93).await,
        [FactKind::Approved, FactKind::Spent]
    );
}
