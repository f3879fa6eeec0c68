//! Apply runs end to end: merged pull requests applied stage by stage and
//! wave by wave by the real binary against the fake forge and the example
//! estate, whose apply script logs every apply so nothing twice goes unseen.

use crate::support::bot::*;
use crate::support::pr::*;
use crate::support::redact::redact;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_merge_dev_applies_prod_waits_for_its_own_approval_then_applies() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 1).await;
    let digest = pr.digest();
    // Before merge there is no stage plan to approve yet.
    let early = pr.comment_as("rev-bob", "/approve prod").await;
    assert_eq!(pr.reactions(early), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@rev-bob: `/approve prod` approves stage `prod`'s own plans, which the apply run posts here when it reaches that stage after merge; there is no such plan to approve now. Approve the change itself with `/approve`");
    pr.comment_as("rev-bob", "/approve").await;

    let merged = pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "dev applies, prod waits");
    let check = pr.apply_check();
    assert_eq!(check.state, "action_required");
    assert_eq!(check.title, "Waiting: /approve prod");
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @"
    Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod sha256:[digest]
    ```
    ");
    let stage_digest = asked_digest(&asked);
    assert_ne!(stage_digest, digest, "prod's set digest is its own");
    insta::assert_snapshot!(redact(&pr.apply_section()), @"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:[digest]`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

    **Who may approve:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

    ```
    /approve prod sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 2 | `dns@prod` | waiting: stage prod waits for `/approve prod` |

    - Stage **prod** gate `pr-1-prod`: set `sha256:[digest]`, waiting
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)

    <details><summary>What <code>app@dev</code>'s apply printed (all 4 lines)</summary>

    ```text
    estate: applying app@dev (3 planned, 2 deployed)
    estate:  update aws_instance.app
    estate:  create aws_lb.app
    estate: applied app@dev: 1 created, 1 updated, 0 replaced, 0 deleted
    ```

    </details>
    ");

    // A redelivered merge starts nothing new.
    bot.tell(&pr.repo, pr.closed(&merged)).await;
    assert_eq!(bot.applies_run(), ["app@dev"]);

    // An outsider's stage approval is refused; the approver's lets prod through.
    let refused = pr.comment_as("outsider-mallory", "/approve prod").await;
    assert_eq!(pr.reactions(refused), ["eyes", "confused"]);
    assert_eq!(bot.applies_run(), ["app@dev"]);

    pr.comment_as("rev-carol", &format!("/approve prod {stage_digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    let check = pr.apply_check();
    assert_eq!(check.state, "success", "{}", check.title);
    insta::assert_snapshot!(redact(&pr.last_reply()), @"Applied on [short]: every member of the approved change is deployed.");

    // dns@prod read app@prod's hostname, unknown when approved: a covered round.
    let applied = pr.apply_section();
    assert!(applied.contains(
        "covered by the approval: only what was unknown moved (filled in `dns@prod.hostname`)"
    ));
    insta::assert_snapshot!(redact(&applied), @"
    ## Apply on merge commit `[short]`: applied

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | applied |
    | prod | 2 | `dns@prod` | applied |

    - Stage **prod** gate `pr-1-prod`: set `sha256:[digest]`, approved by rev-carol
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    - Round 2 (prod, gate `pr-1-round-2`): digest `sha256:[digest]`, covered by the approval: only what was unknown moved (filled in `dns@prod.hostname`)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)

    <details><summary>What <code>app@dev</code>'s apply printed (all 4 lines)</summary>

    ```text
    estate: applying app@dev (3 planned, 2 deployed)
    estate:  update aws_instance.app
    estate:  create aws_lb.app
    estate: applied app@dev: 1 created, 1 updated, 0 replaced, 0 deleted
    ```

    </details>

    <details><summary>What <code>app@prod</code>'s apply printed (all 4 lines)</summary>

    ```text
    estate: applying app@prod (3 planned, 2 deployed)
    estate:  update aws_instance.app
    estate:  create aws_lb.app
    estate: applied app@prod: 1 created, 1 updated, 0 replaced, 0 deleted
    ```

    </details>

    <details><summary>What <code>dns@prod</code>'s apply printed (all 3 lines)</summary>

    ```text
    estate: applying dns@prod (1 planned, 0 deployed)
    estate:  create aws_route53_record.app
    estate: applied dns@prod: 1 created, 0 updated, 0 replaced, 0 deleted
    ```

    </details>
    ");
    let hostname = bot.deployed("prod", "app")["aws_lb.app"]["dns_name"].clone();
    assert_eq!(
        bot.deployed("prod", "dns")["aws_route53_record.app"]["records"],
        json!([hostname])
    );
    // The merge commit's check carries what the applies printed too.
    let merge_sha = merged.merge_sha.as_deref().unwrap();
    let check = bot.check_runs_named(&pr.repo, merge_sha, "wavegate/apply");
    let summary = check.last().unwrap().output["summary"].as_str().unwrap();
    assert!(
        summary.contains("estate: applied dns@prod: 1 created, 0 updated, 0 replaced, 0 deleted"),
        "{summary}"
    );

    // The approvals were spent; the ledger verifies; later plans read the estate.
    let store = bot.store().await;
    let facts = store.repo_facts("github:acme/infra").await.unwrap();
    let spent: Vec<String> = facts
        .iter()
        .filter(|f| f.fact.kind == wavegate::gate::ledger::FactKind::Spent)
        .map(|f| f.fact.gate.to_string())
        .collect();
    // prod's as soon as its stage applied; the pull request's as the run ended.
    assert_eq!(spent, ["pr-1-prod", "pr-1"]);
    let repo_id = wavegate::model::RepoId::new(wavegate::model::ForgeKind::GitHub, "acme/infra");
    let estate = store.deployed_outputs(&repo_id).await.unwrap();
    assert_eq!(estate["app@prod"]["hostname"], hostname);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_without_approval_applies_nothing_until_the_merged_digest_is_approved() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 2).await;
    let digest = pr.digest();

    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    let told = pr.last_reply();
    assert!(told.contains(&digest), "{told}");
    insta::assert_snapshot!(redact(&told), @"
    No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:

    ```
    /approve sha256:[digest]
    ```
    ");
    assert_eq!(pr.apply_check().state, "action_required");

    pr.comment_as("rev-bob", &format!("/approve {digest}"))
        .await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev"],
        "the approval started the run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_approval_stops_the_run_before_anything_more_applies() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 13).await;
    let digest = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let stage = asked_digest(&pr.last_reply());
    assert_eq!(bot.applies_run(), ["app@dev"]);

    // The approver withdraws; prod's approval alone lets nothing through.
    pr.comment_as("rev-bob", "/revoke").await;
    pr.comment_as("rev-carol", &format!("/approve prod {stage}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:

    ```
    /approve sha256:[digest]
    ```
    ");
    assert_eq!(
        pr.apply_check().title,
        "Waiting: an approval of the merged plan"
    );

    // Approved again: the run goes on, and prod's approval still counts.
    pr.comment_as("rev-bob", &format!("/approve {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_after_approval_is_not_covered_until_its_new_digest_is_approved() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 3).await;
    pr.comment_as("rev-bob", "/approve").await;

    // Someone changes dev's security group by hand after the approval.
    bot.drift(
        "dev",
        "app",
        "aws_security_group.app",
        "name",
        json!("hand-made"),
    );
    pr.merge().await;
    assert!(bot.applies_run().is_empty(), "nothing of the wave applied");
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @r"
    These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - app@dev: address aws\_security\_group.app changed action from no-op to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```
    ");
    // The reason names the member and the address.
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    These plans of stage **dev** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - app@dev: address aws\_security\_group.app changed action from no-op to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | waiting: not covered: app@dev: address aws\_security\_group.app changed action from no-op to update |
    | prod | 1 | `app@prod` | not started |
    | prod | 2 | `dns@prod` | not started |

    - Round 2 (dev, gate `pr-3-round-2`): digest `sha256:[digest]`, not covered, waiting: `app@dev: address aws_security_group.app changed action from no-op to update`
      - `app@dev`: `sha256:[digest]` (1 to create, 2 to update, 0 to replace, 0 to delete)
    ");
    assert_eq!(pr.apply_check().title, "Waiting: an approval of round 2");

    let round_digest = asked_digest(&asked);
    pr.comment_as("rev-bob", &format!("/approve {round_digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert_eq!(
        bot.deployed("dev", "app")["aws_security_group.app"]["name"],
        "app-dev"
    );
    let store = bot.store().await;
    let facts = store
        .gate_facts("github:acme/infra", &"pr-3-round-2".parse().unwrap())
        .await
        .unwrap();
    let kinds: Vec<&str> = facts.iter().map(|f| f.fact.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["pending", "approved", "spent"],
        "asked once, approved once, spent once its member applied: {facts:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_blocks_only_its_subtree_and_retry_applies_the_rest_once() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 4).await;
    pr.comment_as("rev-bob", "/approve").await;

    // prod: app@prod fails, so dns@prod (downstream) is blocked.
    std::fs::write(
        bot.estate_file("prod", "app", ".fail-apply"),
        "quota exceeded",
    )
    .unwrap();
    pr.merge().await;
    let stage = asked_digest(&pr.last_reply());
    pr.comment_as("rev-bob", &format!("/approve prod {stage}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    insta::assert_snapshot!(redact(&pr.last_reply()), @r"
    The apply on [short] failed: `app@prod` failed: the apply command exited with status 1. Members that applied stay applied; `/retry` plans what failed again and applies what the approvals cover.

    <details><summary>Why <code>app@prod</code> failed</summary>

    ```text
    the apply command exited with status 1; last output:
    quota exceeded
    ```

    </details>
    ");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @"
    ## Apply on merge commit `[short]`: failed

    Approved by @rev-bob.

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | failed: the apply command exited with status 1 |
    | prod | 2 | `dns@prod` | blocked by app@prod |

    <details><summary>Why <code>app@prod</code> failed</summary>

    ```text
    the apply command exited with status 1; last output:
    quota exceeded
    ```

    </details>

    - Stage **prod** gate `pr-4-prod`: set `sha256:[digest]`, approved by rev-bob
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    ");
    assert_eq!(pr.apply_check().state, "failure");

    std::fs::remove_file(bot.estate_file("prod", "app", ".fail-apply")).unwrap();
    pr.comment_as("rev-bob", "/retry").await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev", "app@prod", "dns@prod"],
        "app@dev is not applied again"
    );
    assert_eq!(pr.apply_check().state, "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_apply_resumes_after_restart_without_applying_twice() {
    let mut bot = Bot::start_with(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let pr = planned_pr(&bot, 5).await;
    pr.comment_as("rev-bob", "/approve").await;

    // app@dev changes the estate, then the server dies before it hears so.
    bot.pause_apply("dev", "app", "after");
    pr.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;
    let repo = pr.repo.clone();
    // The apply dies with its server: nothing it started is left to go on.
    bot.kill();
    bot.until_no_command_survives().await;
    bot.resume_apply("dev", "app");
    assert_eq!(bot.applies_run(), ["app@dev"]);

    bot.start_server().await;
    bot.settle().await;
    let pr = bot.pr(&repo, 5);
    assert_eq!(bot.applies_run(), ["app@dev"], "not applied twice");
    insta::assert_snapshot!(redact(&pr.apply_table()), @"
    ## Apply on merge commit `[short]`: waiting

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied (its apply had finished before a restart; planned again, nothing was left to change) |
    | prod | 1 | `app@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 2 | `dns@prod` | waiting: stage prod waits for `/approve prod` |
    ");
    assert_eq!(pr.apply_check().title, "Waiting: /approve prod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_merge_touching_the_same_member_queues_then_is_checked_against_its_own_approval() {
    let bot = Bot::start().await;
    let first = planned_pr(&bot, 6).await;
    first.comment_as("rev-bob", "/approve").await;
    bot.branch_bigger_app("bigger");
    let second = bot.opened(&first.repo, 7, "bigger").await;
    second.comment_as("rev-bob", "/approve").await;

    // PR 6's run is applying app@dev when PR 7 merges.
    bot.pause_apply("dev", "app", "before");
    first.merge_unsettled().await;
    bot.until_apply_paused("dev", "app").await;
    second.merge_unsettled().await;
    second
        .until_a_reply_says("pull request #6 is applying")
        .await;
    assert!(bot.applies_run().is_empty());

    bot.resume_apply("dev", "app");
    bot.settle().await;
    // PR 6 applied app@dev; PR 7 planned again after it, and its plan moved.
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let asked = second.last_reply();
    assert!(
        asked.contains("not covered") || asked.contains("round 2"),
        "{asked}"
    );
    let report = second.report();
    assert!(report.contains("app@dev: address aws_"), "{report}");

    second
        .comment_as("rev-bob", &format!("/approve {}", asked_digest(&asked)))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@dev"]);
    assert_eq!(
        bot.deployed("dev", "app")["aws_instance.app"]["instance_type"],
        "t3.large"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_plan_waits_for_an_overrider_and_an_outsider_cannot_override() {
    let bot = Bot::start().await;
    bot.deny("dev", "app", &["no-public-ingress"]);
    let pr = planned_pr(&bot, 8).await;
    pr.comment_as("rev-bob", "/approve").await;

    pr.merge().await;
    assert!(bot.applies_run().is_empty());
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    The policy denied the plan of **app@dev** (`sha256:[digest]`; `no-public-ingress`). Nothing of that wave was applied. Someone in `policy.overriders` may let it through, each for exactly that plan:

    ```
    /override app@dev <reason>
    ```
    ");
    assert_eq!(pr.apply_check().title, "Waiting: /override app@dev");

    // The example's base policy names no overriders: nobody may.
    let refused = pr
        .comment_as("rev-bob", "/override app@dev the port is internal")
        .await;
    assert_eq!(pr.reactions(refused), ["eyes", "confused"]);
    insta::assert_snapshot!(pr.last_reply(), @"@rev-bob: nobody may override a policy denial here: the base branch's `policy.overriders` is empty");
    assert!(bot.applies_run().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrider_on_the_base_policy_lets_the_denied_plan_through() {
    let bot = Bot::start().await;
    // The base branch names an overrider before the pull request is opened.
    bot.edit_base_config("required = 1", "required = 1\noverriders = [\"sec-sam\"]");
    bot.deny("dev", "app", &["no-public-ingress"]);
    let pr = planned_pr(&bot, 9).await;
    bot.forge.set_permission(&pr.repo, "sec-sam", "write");
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert!(bot.applies_run().is_empty());

    let done = pr
        .comment_as("sec-sam", "/override app@dev the port is internal")
        .await;
    assert_eq!(pr.reactions(done), ["eyes", "rocket"]);
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let summary = redact(&pr.apply_summary());
    assert!(
        summary
            .lines()
            .any(|l| l == "- `app@dev`: the policy denial of `sha256:[digest]` was overridden"),
        "{summary}"
    );
    insta::assert_snapshot!(redact(&pr.apply_table()), @"
    ## Apply on merge commit `[short]`: waiting

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | waiting: stage prod waits for `/approve prod` |
    | prod | 2 | `dns@prod` | waiting: stage prod waits for `/approve prod` |
    ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_whose_plan_moved_beyond_its_unknown_inputs_waits_for_its_own_approval() {
    let bot = Bot::start().await;
    let pr = planned_pr(&bot, 10).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let stage = asked_digest(&pr.last_reply());

    // After prod's plans were shown, someone creates the DNS record by hand:
    // dns@prod, which waited for app@prod's hostname, now plans an update.
    std::fs::write(
        bot.estate_file("prod", "dns", ".json"),
        json!({"aws_route53_record.app": {
            "name": "app.example.com", "records": ["old.example.com"], "ttl": 300,
            "type": "CNAME", "zone": "example.com", "id": "hand-made"}})
        .to_string(),
    )
    .unwrap();
    pr.comment_as("rev-bob", &format!("/approve prod {stage}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod"]);
    let asked = pr.last_reply();
    insta::assert_snapshot!(redact(&asked), @r"
    These plans of stage **prod** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - dns@prod: address aws\_route53\_record.app changed action from create to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```
    ");
    insta::assert_snapshot!(redact(&pr.apply_summary()), @r"
    ## Apply on merge commit `[short]`: waiting

    Approved by @rev-bob.

    These plans of stage **prod** moved since they were approved, so they are not covered (round 2, digest `sha256:[digest]`):

    - dns@prod: address aws\_route53\_record.app changed action from create to update

    They wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:

    ```
    /approve sha256:[digest]
    ```

    | stage | wave | member | state |
    | --- | --- | --- | --- |
    | dev | 1 | `app@dev` | applied |
    | prod | 1 | `app@prod` | applied |
    | prod | 2 | `dns@prod` | waiting: not covered: dns@prod: address aws\_route53\_record.app changed action from create to update |

    - Stage **prod** gate `pr-10-prod`: set `sha256:[digest]`, approved by rev-bob
      - `app@prod`: `sha256:[digest]` (1 to create, 1 to update, 0 to replace, 0 to delete)
      - `dns@prod`: `sha256:[digest]` (1 to create, 0 to update, 0 to replace, 0 to delete)
    - Round 2 (prod, gate `pr-10-round-2`): digest `sha256:[digest]`, not covered, waiting: `dns@prod: address aws_route53_record.app changed action from create to update`
      - `dns@prod`: `sha256:[digest]` (0 to create, 1 to update, 0 to replace, 0 to delete)
    ");
    assert_eq!(pr.apply_check().title, "Waiting: an approval of round 2");

    pr.comment_as("rev-carol", &format!("/approve {}", asked_digest(&asked)))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    assert_eq!(pr.apply_check().state, "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgejo_merge_applies_and_reports_a_status_on_the_merge_commit() {
    let bot = Bot::start().await;
    let pr = planned_pr_on_forgejo(&bot, 12).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert_eq!(pr.apply_check().state, "pending");
}

/// A component whose plan cannot list resources (a migration tool): its plan
/// file says only what it will run.
const MIGRATE_PY: &str = r#"import json, os, sys
mode, plan_file = sys.argv[1], sys.argv[2]
pending = sorted(f for f in os.listdir("migrations") if f.endswith(".sql"))
if mode == "plan":
    with open(plan_file, "w") as f:
        json.dump({"summary": "pending migrations: " + ", ".join(pending)}, f)
else:
    with open(os.path.join(os.environ["ESTATE_DIR"], "apply-log.jsonl"), "a") as log:
        log.write(json.dumps({"member": "schema@dev", "ran": pending}) + "\n")
    with open(sys.argv[3], "w") as f:
        json.dump({}, f)
"#;

/// A branch `name` from main adding a `schema` component (dev only)
/// whose migration script writes opaque plans, with `migrations` in it.
fn branch_with_migrations(bot: &Bot, name: &str, from: &str, migrations: &[&str]) {
    let config = bot.example.read("main", "wavegate.toml").replace(
        "[policy]",
        "[[component]]\nname = \"schema\"\ndir = \"infra/schema\"\nstages = [\"dev\"]\n\
         plan = [\"python3\", \"migrate.py\", \"plan\", \"{plan_file}\"]\n\
         apply = [\"python3\", \"migrate.py\", \"apply\", \"{plan_file}\", \"{outputs_file}\"]\n\n[policy]",
    );
    let mut files = vec![
        ("wavegate.toml".to_owned(), Some(config)),
        (
            "infra/schema/migrate.py".to_owned(),
            Some(MIGRATE_PY.to_owned()),
        ),
    ];
    for m in migrations {
        files.push((
            format!("infra/schema/migrations/{m}.sql"),
            Some(format!("-- {m}\n")),
        ));
    }
    let files: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_deref()))
        .collect();
    bot.example.branch(name, from, &files);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_plan_binds_its_summary_and_always_applies() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    branch_with_migrations(&bot, "migrations", "main", &["0042_add_index"]);
    let mut pr = bot.opened(&repo, 5, "migrations").await;
    let report = pr.report();
    assert!(
        report
            .lines()
            .any(|row| row.starts_with("| `schema@dev` | ")
                && row.contains(" changed | planned (opaque) ⚠️ destructive |")),
        "{report}"
    );
    assert!(
        report.contains("**Opaque plan:** it lists no resources"),
        "{report}"
    );
    assert!(
        report.contains("Summary written by the plan command (**bound by the digest**: this plan lists no resources):\n\n```\npending migrations: 0042_add_index.sql\n```"),
        "{report}"
    );
    let first = digest_in(&report);

    // Another migration changes nothing a resource list could show, and still moves the digest.
    branch_with_migrations(&bot, "migrations-2", "migrations", &["0043_drop_users"]);
    pr.push("migrations-2").await;
    let report = pr.report();
    assert!(
        report.contains("pending migrations: 0042_add_index.sql, 0043_drop_users.sql"),
        "{report}"
    );
    let second = digest_in(&report);
    assert_ne!(first, second, "the summary of an opaque plan is bound");

    pr.comment_as("rev-bob", &format!("/approve {second}"))
        .await;
    pr.merge().await;
    assert_eq!(
        bot.applies_run(),
        ["schema@dev"],
        "an opaque plan is never taken for an empty one: its apply runs"
    );
    assert_eq!(pr.apply_check().state, "success");
    bot.assert_conformant();
}
