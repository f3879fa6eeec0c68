//! A Terraform monorepo with no scripts of its own, as a team moving from
//! Atlantis brings it (`examples/terraform-native`): a directory per
//! environment, shared modules, and `[terraform]` in `wavegate.toml`. The
//! real `terraform` plans and applies it in the bot's sandbox, with the
//! state in the operator's state directory and a hook the operator's
//! central configuration imposes; a test fails loudly where no `terraform`
//! is installed.

use crate::support::bot::*;
use crate::support::common::{copy_tree, git_in, Example};
use crate::support::pr::*;
use crate::support::redact::redact;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn native_example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/terraform-native/repo")
}

/// Fails the test, saying so, where no real Terraform is installed.
fn require_terraform() {
    let found = Command::new("terraform").arg("version").output();
    assert!(
        found.is_ok_and(|out| out.status.success()),
        "these tests run the real Terraform, and no `terraform` runs on this machine: install Terraform 1.11 on the PATH (deploy/get-tools.sh)"
    );
}

/// `main` becomes the native example's tree (one commit on top), with
/// `overriders` in its policy.
fn native_main(example: &Example, overriders: &[&str]) {
    let git = |args: &[&str]| {
        let out = git_in(&example.repo, args);
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["checkout", "-q", "-B", "main", "main"]);
    git(&["rm", "-rq", "."]);
    copy_tree(&native_example(), &example.repo);
    let config = example.repo.join("wavegate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let named = format!("overriders = {overriders:?}");
    std::fs::write(&config, text.replace("overriders = []", &named)).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "A Terraform monorepo"]);
    git(&["checkout", "-q", "--detach", "main"]);
}

/// The operator's profiles: the state directory read-only to plans,
/// writable to applies, and named to the commands as `TF_STATE_DIR`.
fn state_profile(dir: &Path) -> String {
    let state = dir.join("tfstate");
    std::fs::create_dir_all(&state).unwrap();
    format!(
        "[profile.default]\nstate = [\"{0}\"]\nenv = {{ TF_STATE_DIR = \"{0}\" }}\n",
        state.display()
    )
}

/// The state file of `component@stage` as Terraform wrote it: under
/// `TF_STATE_DIR`, at the member's directory.
fn state_of(bot: &Bot, component: &str, stage: &str) -> Value {
    let file = bot
        .dir
        .path()
        .join("tfstate/envs")
        .join(stage)
        .join(component)
        .join("terraform.tfstate");
    serde_json::from_slice(
        &std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
    )
    .unwrap()
}

/// The resource `address`'s attributes as the state of `component@stage` holds them.
fn deployed(bot: &Bot, component: &str, stage: &str, address: &str) -> Value {
    let state = state_of(bot, component, stage);
    let (module, name) = address
        .rsplit_once(".terraform_data.")
        .unwrap_or(("", address));
    state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["name"] == name && r.get("module").and_then(Value::as_str).unwrap_or("") == module
        })
        .unwrap_or_else(|| panic!("no {address} in {state:#}"))["instances"][0]["attributes"]
        .clone()
}

/// `wavegate apply --local --ref main` as a newcomer runs it, with the
/// operator's profiles: the members it applied, in order.
fn bootstrap(bot: &Bot) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["apply", "--local", "--repo"])
        .arg(&bot.example.repo)
        .args(["--ref", "main"])
        .env(
            "WAVEGATE_PROFILES",
            bot.dir.path().join("operator-file.toml"),
        )
        .env("WAVEGATE_SANDBOX", "bwrap")
        .env("WAVEGATE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("applied ")?.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// The operator's bot with `main` the native example (`overriders` in its
/// policy), deployed by `apply --local` from nothing: no workspace or state
/// exists before, it creates them all, wave by wave.
async fn deployed_monorepo(overriders: &[&str]) -> Bot {
    deployed_monorepo_with(overriders, &[]).await
}

/// [`deployed_monorepo`] with the server's `env` besides.
async fn deployed_monorepo_with(overriders: &[&str], env: &[(&str, &str)]) -> Bot {
    require_terraform();
    // The operator's central configuration imposes a hook on every `acme/*`
    // repository, which the example's own file knows nothing of.
    let repos_config = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .unwrap()
        .into_temp_path()
        .keep()
        .unwrap();
    std::fs::write(
        &repos_config,
        r#"[[repos]]
match = ["acme/*"]
[[repos.hooks.before.apply]]
name = "change-window"
command = ["python3", "-c", "import os; print('change window open for ' + os.environ['WAVEGATE_STAGE'])"]
"#,
    )
    .unwrap();
    let repos_config = repos_config.display().to_string();
    // The operator's `[profile.default]` says where state lives, in place
    // of the example estate's variable.
    let mut settings = vec![
        ("WAVEGATE_SANDBOX_APPLY_WRITE", ""),
        ("WAVEGATE_REPOS_CONFIG", repos_config.as_str()),
    ];
    settings.extend_from_slice(env);
    let bot =
        Bot::start_with_file(&settings, "WAVEGATE_PROFILES", |_, dir| state_profile(dir)).await;
    native_main(&bot.example, overriders);
    assert_eq!(
        bootstrap(&bot),
        [
            "network@dev",
            "app@dev",
            "dns@dev",
            "network@prod",
            "app@prod",
            "dns@prod"
        ]
    );
    bot
}

/// A branch `change` that tags the server in the module both stages' `app`
/// call: each of them plans one update.
fn tag_the_shared_app_module(bot: &Bot) {
    let module = bot.example.read("main", "modules/app/main.tf").replace(
        "instance_type = var.instance_type\n",
        "instance_type = var.instance_type\n    owner         = \"platform\"\n",
    );
    bot.example
        .branch("change", "main", &[("modules/app/main.tf", Some(&module))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terraform_monorepo_with_no_scripts_is_planned_approved_merged_and_applied_in_both_stages(
) {
    let bot = deployed_monorepo(&[]).await;
    let vpc = deployed(&bot, "network", "dev", "module.network.terraform_data.vpc");
    let server = deployed(&bot, "app", "dev", "module.app.terraform_data.server");
    assert_eq!(
        server["input"]["value"]["vpc_id"], vpc["id"],
        "app read network's output"
    );

    // The shared module changes: both stages' app plan an update, dns
    // downstream plans nothing.
    tag_the_shared_app_module(&bot);
    let pr = planned_pr(&bot, 1).await;
    let report = pr.report();
    for line in [
        "| `app@dev` | `modules/app/main.tf` changed | planned | 0 | 1 | 0 | 0 |",
        "| `app@prod` | `modules/app/main.tf` changed | planned | 0 | 1 | 0 | 0 |",
        "| `dns@dev` | downstream of `app` | no changes | 0 | 0 | 0 | 0 |",
        "`terraform` discovered 3 units: `app`, `dns`, `network`",
        "input.owner: (none) → \"platform\"",
    ] {
        assert!(report.contains(line), "{line}\nnot in\n{report}");
    }
    assert!(
        !report.contains("network@"),
        "network is unaffected:\n{report}"
    );

    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let owner = |stage: &str| {
        deployed(&bot, "app", stage, "module.app.terraform_data.server")["input"]["value"]["owner"]
            .clone()
    };
    assert_eq!(owner("dev"), "platform", "dev applied on merge");
    assert_eq!(
        owner("prod"),
        Value::Null,
        "prod waits for its own approval"
    );
    assert_eq!(pr.apply_check().title, "Waiting: /approve prod");

    pr.comment_as("rev-bob", "/approve prod").await;
    assert_eq!(owner("prod"), "platform");
    let section = pr.apply_section();
    assert_eq!(pr.apply_check().state, "success", "{section}");
    // The operator's hook ran before each stage's applies.
    let hooks: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("- Hook "))
        .collect();
    assert_eq!(
        hooks,
        [
            "- Hook `change-window` (before.apply, stage dev): passed",
            "- Hook `change-window` (before.apply, stage prod): passed"
        ],
        "{section}"
    );
}

/// The base's Rego policy (examples/terraform-native/repo/policy) denies
/// deleting in prod: the report says so, and after merge and prod's own
/// approval the plan waits for an overrider, then applies exactly it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rego_policy_denies_a_destructive_prod_plan_until_an_overrider_lets_it_through() {
    let bot = deployed_monorepo(&["sec-sam"]).await;
    let dns = bot.example.read("main", "envs/prod/dns/main.tf");
    let start = dns.find("resource \"terraform_data\" \"record\"").unwrap();
    let end = start + dns[start..].find("\n}\n").unwrap() + 3;
    let retired = format!("{}{}", &dns[..start], &dns[end..]);
    bot.example.branch(
        "change",
        "main",
        &[("envs/prod/dns/main.tf", Some(&retired))],
    );
    let pr = planned_pr(&bot, 2).await;
    bot.forge.set_permission(&pr.repo, "sec-sam", "write");
    let report = pr.report();
    assert!(
        report.contains("`dns@prod` is denied by policy rules: `no-prod-destroy: terraform_data.record would be deleted in prod`"),
        "{report}"
    );

    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    pr.comment_as("rev-bob", "/approve prod").await;
    insta::assert_snapshot!(redact(&pr.last_reply()), @"
    The policy denied the plan of **dns@prod** (`sha256:[digest]`; `no-prod-destroy: terraform_data.record would be deleted in prod`). Nothing of that wave was applied. Someone in `policy.overriders` may let it through, each for exactly that plan:

    ```
    /override dns@prod <reason>
    ```
    ");
    assert_eq!(pr.apply_check().title, "Waiting: /override dns@prod");
    let resources = |bot: &Bot| state_of(bot, "dns", "prod")["resources"].clone();
    assert_eq!(
        resources(&bot).as_array().unwrap().len(),
        1,
        "not applied yet"
    );

    let done = pr
        .comment_as(
            "sec-sam",
            "/override dns@prod the record moved to the new zone",
        )
        .await;
    assert_eq!(pr.reactions(done), ["eyes", "rocket"]);
    assert_eq!(
        resources(&bot),
        serde_json::json!([]),
        "the record is deleted"
    );
    assert_eq!(pr.apply_check().state, "success", "{}", pr.apply_section());
}

/// What a migrator runs before pushing: the example passes `config check`,
/// which lists the members the root modules make, wave by wave, and checks
/// the Rego policies.
#[test]
fn config_check_expands_the_native_example_into_its_members() {
    let out = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["config", "check", "--repo"])
        .arg(native_example())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        shown,
        [
            "Rego policies: 1 file(s) compile, each rule declared (the bot reads them from the base branch)",
            "members (6), in waves:",
            "  dev · wave 1: network@dev (envs/dev/network, workspace default)",
            "  dev · wave 2: app@dev (envs/dev/app, workspace default)",
            "  dev · wave 3: dns@dev (envs/dev/dns, workspace default)",
            "  prod · wave 1: network@prod (envs/prod/network, workspace default)",
            "  prod · wave 2: app@prod (envs/prod/app, workspace default)",
            "  prod · wave 3: dns@prod (envs/prod/dns, workspace default)",
        ],
        "{stdout}"
    );
}

/// `/plan app@prod` plans app@prod, and dns@prod which reads it, again and
/// keeps dev's plans of the same commit: after someone changed prod's state
/// by hand, the report shows the drift put back, and the digest moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targeted_plan_replans_one_member_and_keeps_the_rest_of_the_same_commit() {
    let bot = deployed_monorepo(&[]).await;
    tag_the_shared_app_module(&bot);
    let pr = planned_pr(&bot, 3).await;
    let first = pr.digest();

    // Prod's server was resized by hand: its state says so.
    let file = bot
        .dir
        .path()
        .join("tfstate/envs/prod/app/terraform.tfstate");
    let mut state: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let serial = state["serial"].as_u64().unwrap();
    state["serial"] = (serial + 1).into();
    let server = state["resources"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["name"] == "server")
        .unwrap();
    server["instances"][0]["attributes"]["input"]["value"]["instance_type"] = "m5.xlarge".into();
    std::fs::write(&file, state.to_string()).unwrap();

    pr.comment_as("rev-bob", "/plan app@prod").await;
    let report = pr.report();
    let note = format!(
        "`/plan app@prod` planned `app@prod`, `dns@prod` again; `app@dev`, `dns@dev` kept from the earlier plan of this commit (`{}`), and the digest binds them as shown",
        &pr.head()[..12]
    );
    assert!(report.contains(&note), "{note}\nnot in\n{report}");
    assert!(
        report.contains("input.instance_type: \"m5.xlarge\" → \"m5.large\""),
        "the drift is put back:\n{report}"
    );
    assert_ne!(
        pr.digest(),
        first,
        "the digest binds the new plan of app@prod"
    );

    // A target that names nothing here plans everything, and says so.
    pr.comment_as("rev-bob", "/plan app@qa").await;
    assert!(
        pr.report().contains("⚠️ `/plan app@qa` names no member of this change (its members: `app@dev`, `dns@dev`, `app@prod`, `dns@prod`); name one of them, or write `/plan` to plan everything again: everything was planned again"),
        "{}",
        pr.report()
    );
}

/// Someone changes dev's network by hand (here its state, as a console
/// would change the real thing): the drift check's real `terraform plan`
/// shows it in an issue, and `/apply` there puts back what the code says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terraform_state_changed_out_of_band_is_told_in_an_issue_and_put_back_by_apply() {
    let bot = deployed_monorepo_with(&[], &[("WAVEGATE_DRIFT_MIN_INTERVAL", "1s")]).await;
    let config = bot.example.read("main", "wavegate.toml").replace(
        "name = \"dev\"\ngate = \"never\"",
        "name = \"dev\"\ngate = \"never\"\ndrift = \"5s\"",
    );
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&config))]);
    // The bot hears of the repository through a pull request.
    tag_the_shared_app_module(&bot);
    let pr = planned_pr(&bot, 1).await;
    let repo = pr.repo.clone();

    let file = bot
        .dir
        .path()
        .join("tfstate/envs/dev/network/terraform.tfstate");
    let mut state: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let vpc = state["resources"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["name"] == "vpc")
        .unwrap();
    vpc["instances"][0]["attributes"]["input"]["value"]["cidr"] = "10.9.0.0/16".into();
    std::fs::write(&file, serde_json::to_vec_pretty(&state).unwrap()).unwrap();

    let number = bot
        .until("a drift issue of network@dev", || async {
            bot.forge
                .issues(&repo)
                .into_iter()
                .find(|i| i.open && i.title == "Drift: `network@dev` differs from main")
                .map(|i| i.number)
        })
        .await;
    let issue = bot.issue(&repo, number);
    let body = issue.body();
    insta::assert_snapshot!(redact(&body), @r#"
    <!-- wavegate:drift -->
    ## wavegate drift: `network@dev`

    What is deployed differs from what `main` at `[short]` says: the plan of `network@dev` against the deployed estate is not empty.

    ### `network@dev` — +0 ~1 -0 -/+0

    ```diff
    ~ module.network.terraform_data.vpc (update)
          input.cidr: "10.9.0.0/16" → "10.1.0.0/16"
          output.cidr: "10.1.0.0/16" → (known after apply)
          output.name: "vpc-dev" → (known after apply)
    ```

    ### Reconcile

    To make what is deployed what `main` says, someone who may approve stage `dev` comments the line below; wavegate then applies exactly this plan with the stage's apply profile (a plan that moved since waits for a new approval):

    ```
    /apply sha256:[digest]
    ```

    Or merge a pull request that makes the code say what is deployed: this issue closes by itself once a check finds it clean.

    <sub>First seen [time]; this plan is of [time]. wavegate updates this issue when the drift changes and closes it when a check finds none.</sub>
    "#);
    for shown in [
        "~ module.network.terraform_data.vpc",
        "\"10.9.0.0/16\"",
        "\"10.1.0.0/16\"",
    ] {
        assert!(body.contains(shown), "{shown} not in\n{body}");
    }
    assert!(!body.contains("app@dev"), "only network drifted:\n{body}");
    let line = body
        .lines()
        .find(|l| l.starts_with("/apply sha256:"))
        .unwrap()
        .to_owned();

    issue.comment_as("rev-bob", &line).await;
    bot.until("the drift is applied and its issue closed", || async {
        (!issue.is_open()).then_some(())
    })
    .await;
    let vpc = deployed(&bot, "network", "dev", "module.network.terraform_data.vpc");
    assert_eq!(vpc["input"]["value"]["cidr"], "10.1.0.0/16");
}
