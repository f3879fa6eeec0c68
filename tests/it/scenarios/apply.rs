//! Apply runs end to end: merged pull requests applied stage by stage and
//! wave by wave by the real binary against the fake forge and the example
//! estate, whose apply script logs every apply so nothing twice goes unseen.

use crate::support::{self, bot::*};
use serde_json::{json, Value};
use support::fake_forge::FakePr;
use support::RepoHandle;

const APPLY_CHECK: &str = "wavegate/apply";

impl Bot {
    /// Merges PR `number` (from `branch`), tells the bot and waits for the jobs.
    async fn merge_and_tell(&mut self, repo: &RepoHandle, number: u64, branch: &str) -> FakePr {
        let merged = self.merge(repo, number, branch);
        let (status, body) = self
            .deliver_github(support::github_pull_request("closed", repo, &merged))
            .await;
        assert_eq!(status, 202, "{body}");
        self.settle().await;
        merged
    }

    fn deployed(&self, stage: &str, component: &str) -> Value {
        let path = self.estate_file(stage, component, ".json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap_or("{}".into())).unwrap()
    }
}

/// The digest a reply asks to approve (the first `sha256:` in it).
fn asked_digest(reply: &str) -> String {
    digest_in(reply)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_merge_dev_applies_prod_waits_for_its_own_approval_then_applies() {
    let mut bot = Bot::start().await;
    let (repo, _pr, digest) = planned(&mut bot, 1).await;
    // Before merge there is no stage plan to approve yet.
    let early = bot.comment(&repo, 1, "rev-bob", "/approve prod").await;
    assert_eq!(bot.reactions(&repo, early), ["eyes", "confused"]);
    assert!(bot
        .last_reply(&repo, 1)
        .contains("which the apply run posts here when it reaches that stage"));
    bot.comment(&repo, 1, "rev-bob", "/approve").await;

    let merged = bot.merge_and_tell(&repo, 1, "change").await;
    assert_eq!(bot.applies_run(), ["app@dev"], "dev applies, prod waits");
    let (conclusion, title) = bot.apply_check(&repo, &merged);
    assert_eq!(conclusion.as_deref(), Some("action_required"));
    assert_eq!(title, "Waiting: /approve prod");
    let asked = bot.last_reply(&repo, 1);
    assert!(asked.contains("/approve prod sha256:"), "{asked}");
    let stage_digest = asked_digest(&asked);
    assert_ne!(stage_digest, digest, "prod's set digest is its own");
    let report = bot.report(&repo, 1).body;
    assert!(
        report.contains("| dev | 1 | `app@dev` | applied |"),
        "{report}"
    );
    assert!(report.contains("`app@prod` | waiting"), "{report}");

    // A redelivered merge starts nothing new.
    bot.deliver_github(support::github_pull_request("closed", &repo, &merged))
        .await;
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);

    // An outsider's stage approval is refused; the approver's lets prod through.
    let refused = bot
        .comment(&repo, 1, "outsider-mallory", "/approve prod")
        .await;
    assert_eq!(bot.reactions(&repo, refused), ["eyes", "confused"]);
    assert_eq!(bot.applies_run(), ["app@dev"]);

    bot.comment(
        &repo,
        1,
        "rev-carol",
        &format!("/approve prod {stage_digest}"),
    )
    .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    let (conclusion, title) = bot.apply_check(&repo, &merged);
    assert_eq!(conclusion.as_deref(), Some("success"), "{title}");
    assert!(bot.last_reply(&repo, 1).contains("Applied on"));

    // dns@prod read app@prod's hostname, unknown when approved: a covered round.
    let report = bot.report(&repo, 1).body;
    assert!(
        report.contains(
            "covered by the approval: only what was unknown moved (filled in dns@prod.hostname)"
        ),
        "{report}"
    );
    let hostname = bot.deployed("prod", "app")["aws_lb.app"]["dns_name"].clone();
    assert_eq!(
        bot.deployed("prod", "dns")["aws_route53_record.app"]["records"],
        json!([hostname])
    );

    // The approvals were spent; the ledger verifies; later plans read the estate.
    let store = bot.store().await;
    let facts = store.repo_facts("github:acme/infra").await.unwrap();
    let spent: Vec<&str> = facts
        .iter()
        .filter(|f| f.fact.kind == wavegate::gate::ledger::FactKind::Spent)
        .map(|f| f.fact.gate.as_str())
        .collect();
    assert_eq!(spent, ["pr-1", "pr-1-prod"]);
    let repo_id = wavegate::model::RepoId::new(wavegate::model::ForgeKind::GitHub, "acme/infra");
    let estate = store.deployed_outputs(&repo_id).await.unwrap();
    assert_eq!(estate["app@prod"]["hostname"], hostname);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_without_approval_applies_nothing_until_the_merged_digest_is_approved() {
    let mut bot = Bot::start().await;
    let (repo, _pr, digest) = planned(&mut bot, 2).await;

    let merged = bot.merge_and_tell(&repo, 2, "change").await;
    assert!(bot.applies_run().is_empty());
    let told = bot.last_reply(&repo, 2);
    assert!(
        told.contains("No approval of the merged plan stands") && told.contains(&digest),
        "{told}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("action_required")
    );

    bot.comment(&repo, 2, "rev-bob", &format!("/approve {digest}"))
        .await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev"],
        "the approval started the run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_approval_stops_the_run_before_anything_more_applies() {
    let mut bot = Bot::start().await;
    let (repo, _pr, digest) = planned(&mut bot, 13).await;
    bot.comment(&repo, 13, "rev-bob", "/approve").await;
    let merged = bot.merge_and_tell(&repo, 13, "change").await;
    let stage = asked_digest(&bot.last_reply(&repo, 13));
    assert_eq!(bot.applies_run(), ["app@dev"]);

    // The approver withdraws; prod's approval alone lets nothing through.
    bot.comment(&repo, 13, "rev-bob", "/revoke").await;
    bot.comment(&repo, 13, "rev-carol", &format!("/approve prod {stage}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert!(bot
        .last_reply(&repo, 13)
        .contains("No approval of the merged plan stands"));
    assert_eq!(
        bot.apply_check(&repo, &merged).1,
        "Waiting: an approval of the merged plan"
    );

    // Approved again: the run goes on, and prod's approval still counts.
    bot.comment(&repo, 13, "rev-bob", &format!("/approve {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_after_approval_is_not_covered_until_its_new_digest_is_approved() {
    let mut bot = Bot::start().await;
    let (repo, _pr, _digest) = planned(&mut bot, 3).await;
    bot.comment(&repo, 3, "rev-bob", "/approve").await;

    // Someone changes dev's security group by hand after the approval.
    bot.drift(
        "dev",
        "app",
        "aws_security_group.app",
        "name",
        json!("hand-made"),
    );
    let merged = bot.merge_and_tell(&repo, 3, "change").await;
    assert!(bot.applies_run().is_empty(), "nothing of the wave applied");
    let asked = bot.last_reply(&repo, 3);
    assert!(
        asked.contains("round 2") && asked.contains("/approve sha256:"),
        "{asked}"
    );
    let report = bot.report(&repo, 3).body;
    assert!(
        report.contains("app@dev: address aws_security_group.app"),
        "the reason names the member and the address: {report}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).1,
        "Waiting: an approval of round 2"
    );

    let round_digest = asked_digest(&asked);
    bot.comment(&repo, 3, "rev-bob", &format!("/approve {round_digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert_eq!(
        bot.deployed("dev", "app")["aws_security_group.app"]["name"],
        "app-dev"
    );
    let store = bot.store().await;
    let facts = store
        .gate_facts("github:acme/infra", "pr-3-round-2")
        .await
        .unwrap();
    let kinds: Vec<&str> = facts.iter().map(|f| f.fact.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["pending", "approved"],
        "asked once, approved once: {facts:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_blocks_only_its_subtree_and_retry_applies_the_rest_once() {
    let mut bot = Bot::start().await;
    let (repo, _pr, _digest) = planned(&mut bot, 4).await;
    bot.comment(&repo, 4, "rev-bob", "/approve").await;

    // prod: app@prod fails, so dns@prod (downstream) is blocked.
    std::fs::write(
        bot.estate_file("prod", "app", ".fail-apply"),
        "quota exceeded",
    )
    .unwrap();
    let merged = bot.merge_and_tell(&repo, 4, "change").await;
    let stage = asked_digest(&bot.last_reply(&repo, 4));
    bot.comment(&repo, 4, "rev-bob", &format!("/approve prod {stage}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let report = bot.report(&repo, 4).body;
    assert!(report.contains("`app@prod` | failed"), "{report}");
    assert!(
        report.contains("`dns@prod` | blocked by app@prod"),
        "{report}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("failure")
    );
    assert!(bot.last_reply(&repo, 4).contains("`/retry`"));

    std::fs::remove_file(bot.estate_file("prod", "app", ".fail-apply")).unwrap();
    bot.comment(&repo, 4, "rev-bob", "/retry").await;
    assert_eq!(
        bot.applies_run(),
        ["app@dev", "app@prod", "dns@prod"],
        "app@dev is not applied again"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("success")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_apply_resumes_after_restart_without_applying_twice() {
    let mut bot = Bot::start_with(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let (repo, _pr, _digest) = planned(&mut bot, 5).await;
    bot.comment(&repo, 5, "rev-bob", "/approve").await;

    // app@dev changes the estate, then the server dies before it hears so.
    bot.pause_apply("dev", "app", "after");
    let merged = bot.merge(&repo, 5, "change");
    bot.deliver_github(support::github_pull_request("closed", &repo, &merged))
        .await;
    bot.until_apply_paused("dev", "app").await;
    // The apply dies with its server: nothing it started is left to go on.
    bot.kill();
    bot.until_no_command_survives().await;
    bot.resume_apply("dev", "app");
    assert_eq!(bot.applies_run(), ["app@dev"]);

    bot.start_server().await;
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"], "not applied twice");
    let report = bot.report(&repo, 5).body;
    assert!(
        report.contains("`app@dev` | applied (its apply had finished before a restart"),
        "{report}"
    );
    assert_eq!(bot.apply_check(&repo, &merged).1, "Waiting: /approve prod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_merge_touching_the_same_member_queues_then_is_checked_against_its_own_approval() {
    let mut bot = Bot::start().await;
    let (repo, _first, _) = planned(&mut bot, 6).await;
    bot.comment(&repo, 6, "rev-bob", "/approve").await;
    bot.branch_bigger_app("bigger");
    let second = bot.open_pr(&repo, 7, "bigger");
    bot.deliver_github(support::github_pull_request("opened", &repo, &second))
        .await;
    bot.settle().await;
    bot.comment(&repo, 7, "rev-bob", "/approve").await;

    // PR 6's run is applying app@dev when PR 7 merges.
    bot.pause_apply("dev", "app", "before");
    let merged = bot.merge(&repo, 6, "change");
    bot.deliver_github(support::github_pull_request("closed", &repo, &merged))
        .await;
    bot.until_apply_paused("dev", "app").await;
    let merged_second = bot.merge(&repo, 7, "bigger");
    bot.deliver_github(support::github_pull_request(
        "closed",
        &repo,
        &merged_second,
    ))
    .await;
    bot.until("PR 7 is queued behind PR 6", || async {
        bot.replies(&repo, 7)
            .iter()
            .any(|r| r.contains("pull request #6 is applying"))
            .then_some(())
    })
    .await;
    assert!(bot.applies_run().is_empty());

    bot.resume_apply("dev", "app");
    bot.settle().await;
    // PR 6 applied app@dev; PR 7 planned again after it, and its plan moved.
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let asked = bot.last_reply(&repo, 7);
    assert!(
        asked.contains("not covered") || asked.contains("round 2"),
        "{asked}"
    );
    let report = bot.report(&repo, 7).body;
    assert!(report.contains("app@dev: address aws_"), "{report}");

    bot.comment(
        &repo,
        7,
        "rev-bob",
        &format!("/approve {}", asked_digest(&asked)),
    )
    .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@dev"]);
    assert_eq!(
        bot.deployed("dev", "app")["aws_instance.app"]["instance_type"],
        "t3.large"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_plan_waits_for_an_overrider_and_an_outsider_cannot_override() {
    let mut bot = Bot::start().await;
    bot.deny("dev", "app", &["no-public-ingress"]);
    let (repo, _pr, _digest) = planned(&mut bot, 8).await;
    bot.comment(&repo, 8, "rev-bob", "/approve").await;

    let merged = bot.merge_and_tell(&repo, 8, "change").await;
    assert!(bot.applies_run().is_empty());
    let asked = bot.last_reply(&repo, 8);
    assert!(
        asked.contains("The policy denied the plan of **app@dev**")
            && asked.contains("no-public-ingress"),
        "{asked}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).1,
        "Waiting: /override app@dev"
    );

    // The example's base policy names no overriders: nobody may.
    let refused = bot
        .comment(
            &repo,
            8,
            "rev-bob",
            "/override app@dev the port is internal",
        )
        .await;
    assert_eq!(bot.reactions(&repo, refused), ["eyes", "confused"]);
    assert!(bot.last_reply(&repo, 8).contains("policy.overriders"));
    assert!(bot.applies_run().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrider_on_the_base_policy_lets_the_denied_plan_through() {
    let mut bot = Bot::start().await;
    // The base branch names an overrider before the pull request is opened.
    bot.edit_base_config("required = 1", "required = 1\noverriders = [\"sec-sam\"]");
    bot.deny("dev", "app", &["no-public-ingress"]);
    let (repo, _pr, _digest) = planned(&mut bot, 9).await;
    bot.forge.set_permission(&repo, "sec-sam", "write");
    bot.comment(&repo, 9, "rev-bob", "/approve").await;
    bot.merge_and_tell(&repo, 9, "change").await;
    assert!(bot.applies_run().is_empty());

    let done = bot
        .comment(
            &repo,
            9,
            "sec-sam",
            "/override app@dev the port is internal",
        )
        .await;
    assert_eq!(bot.reactions(&repo, done), ["eyes", "rocket"]);
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert!(bot.report(&repo, 9).body.contains("the policy denial of"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_whose_plan_moved_beyond_its_unknown_inputs_waits_for_its_own_approval() {
    let mut bot = Bot::start().await;
    let (repo, _pr, _digest) = planned(&mut bot, 10).await;
    bot.comment(&repo, 10, "rev-bob", "/approve").await;
    let merged = bot.merge_and_tell(&repo, 10, "change").await;
    let stage = asked_digest(&bot.last_reply(&repo, 10));

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
    bot.comment(&repo, 10, "rev-bob", &format!("/approve prod {stage}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod"]);
    let asked = bot.last_reply(&repo, 10);
    assert!(asked.contains("round 2"), "{asked}");
    let report = bot.report(&repo, 10).body;
    assert!(
        report.contains(
            "dns@prod: address aws_route53_record.app changed action from create to update"
        ),
        "{report}"
    );
    assert_eq!(
        bot.apply_check(&repo, &merged).1,
        "Waiting: an approval of round 2"
    );

    bot.comment(
        &repo,
        10,
        "rev-carol",
        &format!("/approve {}", asked_digest(&asked)),
    )
    .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    assert_eq!(
        bot.apply_check(&repo, &merged).0.as_deref(),
        Some("success")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgejo_merge_applies_and_reports_a_status_on_the_merge_commit() {
    let mut bot = Bot::start().await;
    let (repo, _pr) = planned_on_forgejo(&mut bot, 12).await;
    bot.comment(&repo, 12, "rev-bob", "/approve").await;
    let merged = bot.merge(&repo, 12, "change");
    bot.deliver_forgejo(support::forgejo_pull_request("closed", &repo, &merged))
        .await;
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let sha = merged.merge_sha.as_deref().unwrap();
    let statuses = bot.statuses_named(&repo, sha, APPLY_CHECK);
    assert_eq!(
        statuses.last().map(|s| s.state.as_str()),
        Some("pending"),
        "{statuses:#?}"
    );
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

impl Bot {
    /// A branch `name` from main adding a `schema` component (dev only)
    /// whose migration script writes opaque plans, with `migrations` in it.
    fn branch_with_migrations(&self, name: &str, from: &str, migrations: &[&str]) {
        let config = self.example.read("main", "wavegate.toml").replace(
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
        self.example.branch(name, from, &files);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_plan_binds_its_summary_and_always_applies() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.branch_with_migrations("migrations", "main", &["0042_add_index"]);
    let pr = bot.open_pr(&repo, 5, "migrations");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    bot.settle().await;
    let report = bot.report(&repo, 5).body;
    assert!(
        report.contains("| `schema@dev` | planned (opaque) ⚠️ destructive |"),
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
    bot.branch_with_migrations("migrations-2", "migrations", &["0043_drop_users"]);
    let pushed = bot.forge.push(&repo, 5, &bot.rev("migrations-2"));
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    bot.settle().await;
    let report = bot.report(&repo, 5).body;
    assert!(
        report.contains("pending migrations: 0042_add_index.sql, 0043_drop_users.sql"),
        "{report}"
    );
    let second = digest_in(&report);
    assert_ne!(first, second, "the summary of an opaque plan is bound");

    bot.comment(&repo, 5, "rev-bob", &format!("/approve {second}"))
        .await;
    let merged = bot.merge_and_tell(&repo, 5, "migrations-2").await;
    assert_eq!(
        bot.applies_run(),
        ["schema@dev"],
        "an opaque plan is never taken for an empty one: its apply runs"
    );
    let (conclusion, _) = bot.apply_check(&repo, &merged);
    assert_eq!(conclusion.as_deref(), Some("success"));
    bot.assert_conformant();
}
