//! `wavegate plan` on the bundled example: real git, real plan subprocesses,
//! a simulated estate, the real binary.

use crate::support::common;
use common::{Example, Run};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

fn digests(report: &Value) -> Vec<(String, Value)> {
    report["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["member"].as_str().unwrap().to_owned(),
                m["planDigest"].clone(),
            )
        })
        .collect()
}

#[test]
fn plan_on_the_example_prints_the_expected_waves() {
    let example = Example::deployed();
    let run = example.plan("main", "change", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "  dev · wave 1: app@dev\n  prod · wave 1: app@prod\n  prod · wave 2: dns@prod\n"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("[plan] app@dev | "),
        "plan output is streamed with its member: {}",
        run.stderr
    );

    let report = run.json();
    assert_eq!(
        report["waves"],
        json!([["app@dev"], ["app@prod"], ["dns@prod"]])
    );
    assert_eq!(
        report["skipped"],
        json!([{"component": "database", "reason": "unaffected"}, {"component": "network", "reason": "unaffected"}])
    );
    assert_eq!(
        report["indeterminate"],
        json!([]),
        "docs/notes.md is ignored by default"
    );
    let app = Run::member(&report, "app@dev");
    assert_eq!(app["status"], "planned");
    assert_eq!(
        app["counts"],
        json!({"create": 1, "update": 1, "delete": 0, "replace": 0})
    );
    assert_eq!(
        app["inputs"]["vpc_id"]["source"], "deployed",
        "network is not in the change: its outputs command says"
    );
    assert!(app["inputs"]["vpc_id"]["value"]
        .as_str()
        .unwrap()
        .starts_with("vpc-"));
    let dns = Run::member(&report, "dns@prod");
    assert_eq!(
        dns["unknownInputs"],
        json!(["hostname"]),
        "app@prod knows its hostname only after applying"
    );
    assert_eq!(
        dns["inputs"]["hostname"]["why"],
        "app@prod knows hostname only after it applies"
    );
    assert_eq!(
        example.worktrees(),
        1,
        "the plan ran in a copy of the commit, not a worktree of the repository"
    );
}

#[test]
fn the_same_inputs_give_the_same_digest_on_every_run() {
    let example = Example::deployed();
    let first = example.plan("main", "change", &[]).json();
    let second = example.plan("main", "change", &[]).json();
    assert_eq!(first["digest"], second["digest"]);
    assert_eq!(first["derivationDigest"], second["derivationDigest"]);
    assert_eq!(digests(&first), digests(&second));
}

#[test]
fn one_member_moving_moves_its_digest_and_the_change_set_digest_and_nothing_else() {
    let example = Example::deployed();
    let before = example.plan("main", "change", &[]).json();
    // Someone deleted app@dev's security group by hand: its plan now creates it again.
    let state_path = example.estate.join("dev/app.json");
    let mut state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    state
        .as_object_mut()
        .unwrap()
        .remove("aws_security_group.app")
        .expect("the group was deployed");
    std::fs::write(&state_path, serde_json::to_string(&state).unwrap()).unwrap();
    let after = example.plan("main", "change", &[]).json();

    assert_ne!(before["digest"], after["digest"]);
    assert_eq!(before["derivationDigest"], after["derivationDigest"]);
    let (was, now) = (digests(&before), digests(&after));
    for ((member, a), (_, b)) in was.iter().zip(&now) {
        if member == "app@dev" {
            assert_ne!(a, b, "{member} moved");
        } else {
            assert_eq!(a, b, "{member} did not move");
        }
    }
}

#[test]
fn a_hanging_plan_is_killed_at_the_bases_timeout_whatever_the_head_asks_and_reported() {
    let example = Example::deployed();
    // The base allows 2s; the pull request asks for 2m for its own plans.
    let base = example
        .read("main", "wavegate.toml")
        .replace("timeout = \"2m\"", "timeout = \"2s\"");
    assert!(base.contains("timeout = \"2s\""));
    example.branch("main", "main", &[("wavegate.toml", Some(&base))]);
    let head = example.read("change", "wavegate.toml");
    assert!(head.contains("timeout = \"2m\""));
    example.branch("hang", "change", &[("infra/app/.hang", Some(""))]);
    let started = std::time::Instant::now();
    let run = example.plan("main", "hang", &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report = run.json();
    let app = Run::member(&report, "app@dev");
    assert_eq!(app["status"], "plan-failed");
    let error = app["error"].as_str().unwrap();
    assert!(
        error.contains(
            "did not finish within its timeout of 2s and was killed with everything it started"
        ),
        "{error}"
    );
    assert_eq!(Run::member(&report, "dns@prod")["status"], "blocked");
    assert!(run.stderr.contains("timed out after 2s"), "{}", run.stderr);
    assert!(
        started.elapsed().as_secs() < 60,
        "the hung plans did not hold the run"
    );
    assert_eq!(
        example.worktrees(),
        1,
        "planning adds no worktree to the repository, on failure neither"
    );
}

#[test]
fn a_failing_plan_blocks_its_downstream_and_others_go_on() {
    let example = Example::deployed();
    example.branch(
        "fail",
        "change",
        &[(
            "infra/app/.fail-plan",
            Some("provider exploded: quota exceeded\n"),
        )],
    );
    let run = example.plan("main", "fail", &[]);
    assert_eq!(run.code, 1);
    let report = run.json();
    let app = Run::member(&report, "app@prod");
    assert_eq!(app["status"], "plan-failed");
    assert!(app["error"]
        .as_str()
        .unwrap()
        .contains("exited with status 1"));
    assert!(app["error"]
        .as_str()
        .unwrap()
        .contains("provider exploded: quota exceeded"));
    assert_eq!(app["planDigest"], Value::Null);
    let dns = Run::member(&report, "dns@prod");
    assert_eq!(
        (dns["status"].as_str(), dns["blockedBy"].as_str()),
        (Some("blocked"), Some("app@prod"))
    );
    let skipped = report["skipped"].as_array().unwrap();
    assert!(skipped.contains(&json!({"component": "dns", "reason": "blocked", "member": "dns@prod", "blockedBy": "app@prod"})));

    example.branch(
        "garbage",
        "change",
        &[("infra/dns/.garbage-plan", Some(""))],
    );
    let run = example.plan("main", "garbage", &[]);
    assert_eq!(run.code, 1);
    let report = run.json();
    let dns = Run::member(&report, "dns@prod");
    assert!(
        dns["error"]
            .as_str()
            .unwrap()
            .contains("the plan file is not valid JSON"),
        "{dns:#}"
    );
    assert_eq!(
        Run::member(&report, "app@dev")["status"],
        "planned",
        "an independent member goes on"
    );
    assert_eq!(Run::member(&report, "app@prod")["status"], "planned");
}

#[test]
fn a_broken_config_gets_an_error_that_names_the_field() {
    let example = Example::deployed();
    let config = example.read("change", "wavegate.toml").replace(
        "depends_on = [\"network\", \"database\"]",
        "depends_on = [\"netwrk\", \"database\"]",
    );
    example.branch("broken", "change", &[("wavegate.toml", Some(&config))]);
    let run = example.plan("main", "broken", &[]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert!(run.stderr.contains("wavegate.toml: `component[2] (app).depends_on[0]`: unknown component `netwrk`; fix: name one of: network, database, app, dns"), "{}", run.stderr);

    let typo = example
        .read("change", "wavegate.toml")
        .replace("[[stage]]\nname = \"prod\"", "[[stage]]\nnmae = \"prod\"");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("wavegate.toml"), typo).unwrap();
    let run = example.wavegate(&[
        "config",
        "check",
        "--repo",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("unknown field `nmae`"),
        "{}",
        run.stderr
    );
}

#[test]
fn config_check_accepts_the_example() {
    let example = Example::undeployed();
    let path = example.repo.display().to_string();
    // dns is declared ahead of its code: refused, unless that is meant.
    let run = example.wavegate(&["config", "check", "--repo", &path]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("error: dns@prod's dir `infra/dns` is not in the checkout: its plans fail until it is (add it, or fix `dir`); a component declared ahead of its code passes with --allow-missing-dirs"),
        "{}",
        run.stdout
    );
    let run = example.wavegate(&["config", "check", "--repo", &path, "--allow-missing-dirs"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout.replace(&path, "[repo]"), @r"
    [repo]/wavegate.toml: ok (2 stages, 4 components; execution profiles on this server: `default`)
    members (7), in waves:
      dev · wave 1: network@dev (infra/network)
      dev · wave 2: database@dev (infra/database)
      dev · wave 3: app@dev (infra/app)
      prod · wave 1: network@prod (infra/network)
      prod · wave 2: database@prod (infra/database)
      prod · wave 3: app@prod (infra/app)
      prod · wave 4: dns@prod (infra/dns)
    warning: dns@prod's dir `infra/dns` is not in the checkout: its plans fail until it is (add it, or fix `dir`)
    ");

    // A file nothing claims is listed: a change to it would plan nothing.
    std::fs::write(example.repo.join("Makefile"), "deploy:\n\ttrue\n").unwrap();
    let run = example.wavegate(&["config", "check", "--repo", &path, "--allow-missing-dirs"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("warning: 1 file(s) no component claims and no `ignore` covers: a change to one plans nothing.") && run.stdout.ends_with("\n  Makefile\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_change_to_only_a_file_every_command_reads_plans_every_member() {
    let example = Example::deployed();
    let library = example.read("main", "ci/estate.py");
    let edited = format!("{library}\n# a comment is enough: the scripts changed\n");
    example.branch("library", "main", &[("ci/estate.py", Some(&edited))]);
    let run = example.plan("main", "library", &[]);
    // dns@prod's plan fails: main declares it ahead of its code.
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("4 selected, 0 unaffected, 0 indeterminate"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("ci/estate.py changed"),
        "{}",
        run.stderr
    );
}

#[test]
fn usage_errors_exit_2_with_the_fix() {
    let example = Example::deployed();
    let run = example.plan("main", "no-such-branch", &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("--head: `no-such-branch` does not name a commit"),
        "{}",
        run.stderr
    );
    let run = example.plan("main", "change", &["--stage", "qa"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("unknown stage `qa`; the config defines: dev, prod"),
        "{}",
        run.stderr
    );
}

#[test]
fn seeded_outputs_are_used_before_the_deployed_estate_and_listed() {
    let example = Example::deployed();
    let seeds = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        seeds.path(),
        r#"{"network@dev": {"vpc_id": "vpc-seeded", "vpcid": "typo"}, "network@prod": {"vpc_id": "x"}}"#,
    )
    .unwrap();
    let run = example.plan(
        "main",
        "change",
        &[
            "--outputs",
            &seeds.path().display().to_string(),
            "--stage",
            "dev",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    let app = Run::member(&report, "app@dev");
    assert_eq!(
        app["inputs"]["vpc_id"],
        json!({"reference": "network.vpc_id", "upstream": "network@dev", "source": "seeded", "value": "vpc-seeded"})
    );
    assert_eq!(app["inputs"]["db_endpoint"]["source"], "deployed");
    assert_eq!(report["seeded"], json!(["network@dev"]));
    assert_eq!(report["waves"], json!([["app@dev"]]));
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("seeded outputs no plan read: `network@dev.vpcid`, `network@prod.vpc_id`"),
        "what nobody read is said, not dropped: {notes}"
    );

    std::fs::write(seeds.path(), r#"{"netwrk@dev": {}}"#).unwrap();
    let run = example.plan(
        "main",
        "change",
        &["--outputs", &seeds.path().display().to_string()],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("`netwrk@dev` is not a member of this repository"),
        "{}",
        run.stderr
    );
}

#[test]
fn with_nothing_deployed_the_inputs_are_unknown_and_the_report_says_why() {
    let example = Example::undeployed();
    let run = example.plan("main", "change", &["--stage", "dev"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    let app = Run::member(&report, "app@dev");
    assert_eq!(app["unknownInputs"], json!(["db_endpoint", "vpc_id"]));
    let why = app["inputs"]["vpc_id"]["why"].as_str().unwrap();
    assert!(
        why.contains("network@dev is not in this change") && why.contains("vpc_id"),
        "{why}"
    );
    assert_eq!(
        app["counts"]["create"], 3,
        "nothing is deployed, so everything is created"
    );
}

#[test]
fn the_json_report_matches_its_schema() {
    let schema: Value =
        serde_json::from_str(include_str!("../../../schema/report.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema is valid");
    let example = Example::deployed();
    example.branch(
        "fail",
        "change",
        &[("infra/app/.fail-plan", Some("boom\n"))],
    );
    // A base whose digests bind the changing members only, and a head with
    // a build input: the report's optional fields, checked too.
    let config = example
        .read("main", "wavegate.toml")
        .replace("required = 1", "required = 1\ndigest_over = \"changing\"");
    example.branch("changing", "main", &[("wavegate.toml", Some(&config))]);
    let built = config.replace(
        "[policy]",
        "[[component]]\nname = \"image\"\nkind = \"build\"\ndir = \"build/image\"\nstages = [\"dev\"]\n\n[[component]]\nname = \"web\"\ndir = \"infra/web\"\ndepends_on = [\"image\", \"network\"]\ninputs = { image = \"build:image.digest\" }\nstages = [\"dev\"]\n\n[policy]",
    );
    example.branch(
        "built",
        "changing",
        &[
            ("wavegate.toml", Some(&built)),
            (
                "build/image/resources.json",
                Some(r#"{"aws_ecr_image.web": {"tag": "v2", "_computed": ["digest"]}}"#),
            ),
            (
                "build/image/outputs.json",
                Some(r#"{"digest": "aws_ecr_image.web.digest"}"#),
            ),
            (
                "infra/web/resources.json",
                Some(r#"{"aws_ecs_service.web": {"image": "${input.image}"}}"#),
            ),
            ("infra/web/outputs.json", Some("{}")),
            ("infra/network/OWNERS", Some("network-team\n")),
        ],
    );
    // A base that prices each stage (prod's pricing fails): the costs, one
    // with an error, checked too.
    let cost_py = "import json, os, sys\nif os.environ['WAVEGATE_STAGE'] == 'prod':\n    sys.exit('no prices for prod')\nmembers = json.load(open(sys.argv[1]))\nprojects = [{'name': m['member'], 'breakdown': {'totalMonthlyCost': '12.5'}, 'pastBreakdown': None} for m in members]\njson.dump({'currency': 'USD', 'projects': projects}, open(sys.argv[2], 'w'))\n";
    let priced = format!(
        "{}\n[cost]\ncommand = [\"python3\", \"ci/cost.py\", \"{{members_file}}\", \"{{cost_file}}\"]\n",
        example.read("main", "wavegate.toml")
    );
    example.branch(
        "priced",
        "main",
        &[
            ("wavegate.toml", Some(&priced)),
            ("ci/cost.py", Some(cost_py)),
        ],
    );
    example.branch("priced-change", "change", &[("ci/cost.py", Some(cost_py))]);
    // A head that groups app and dns: prod plans them with one call (dns
    // reads its mate app), dev's app plans alone.
    let grouped = example.read("change", "wavegate.toml").replace(
        "[policy]",
        "[[group]]\nname = \"web\"\ncomponents = [\"app\", \"dns\"]\nplan = [\"python3\", \"{root}/ci/group.py\", \"plan\", \"{members_file}\"]\n\n[policy]",
    );
    example.branch("grouped", "change", &[("wavegate.toml", Some(&grouped))]);
    for (base, head) in [
        ("main", "change"),
        ("main", "fail"),
        ("changing", "built"),
        ("priced", "priced-change"),
        ("main", "grouped"),
    ] {
        let report = example.plan(base, head, &[]).json();
        let errors: Vec<String> = validator
            .iter_errors(&report)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{head}: {errors:#?}");
        if head == "built" {
            assert_eq!(report["digestOver"], "changing");
            let unbound = report["unbound"].as_array().unwrap();
            assert!(unbound.contains(&json!("network@dev")), "{report:#}");
            assert!(!unbound.contains(&json!("web@dev")) && !unbound.contains(&json!("image@dev")));
            assert_eq!(
                Run::member(&report, "web@dev")["buildInputs"],
                json!(["image"])
            );
            assert_eq!(Run::member(&report, "web@dev")["unknownInputs"], json!([]));
        }
        if head == "grouped" {
            let groups = report["groups"].as_array().unwrap();
            assert_eq!(groups.len(), 1, "{report:#}");
            assert_eq!(groups[0]["members"], json!(["app@prod", "dns@prod"]));
            assert_eq!(
                groups[0]["reads"],
                json!([{"member": "dns@prod", "input": "hostname", "reads": "app.hostname", "known": false}])
            );
            assert_eq!(report["fallbacks"][0]["member"], "app@dev");
            assert_eq!(
                Run::member(&report, "dns@prod")["groupInputs"],
                json!(["hostname"])
            );
        }
        if head == "priced-change" {
            let costs = report["costs"].as_array().unwrap();
            assert_eq!(costs[0]["member"], "cost@dev");
            assert_eq!(costs[0]["monthly"], "12.50");
            assert_eq!(costs[0]["increase"], "12.50");
            assert!(costs[1]["error"]
                .as_str()
                .unwrap()
                .contains("no prices for prod"));
        }
    }
    let mut broken = example.plan("main", "change", &[]).json();
    broken["members"][0]["status"] = json!("maybe");
    assert!(!validator.is_valid(&broken), "the schema is not vacuous");
}

#[test]
fn the_markdown_report_is_what_the_bot_would_post() {
    let example = Example::deployed();
    let repo = example.repo.display().to_string();
    let run = example.wavegate(&[
        "plan",
        "--repo",
        &repo,
        "--base",
        "main",
        "--head",
        "change",
        "--markdown",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn adapt_terraform_turns_show_json_into_a_plan_file_and_refuses_an_errored_plan() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/terraform/show-json");
    let adapt = |file: &str| {
        let input = std::fs::File::open(fixtures.join(file)).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(["adapt", "terraform"])
            .stdin(input)
            .output()
            .unwrap()
    };
    let out = adapt("requires-replace.json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member: wavegate::model::MemberId = "app@dev".parse().unwrap();
    let plan = wavegate::plan::planfile::MemberPlan::parse(&member, &out.stdout).unwrap();
    assert!(plan.destructive);
    assert_eq!(plan.counts().replace, 1);
    let out = adapt("plan-error.json");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("terraform reported the plan as errored"));
}

mod terraform;

/// The README's quick start, step for step (`examples/estate/demo.sh`, on the
/// built binary instead of `cargo run`): under the default sandbox it plans
/// what the README says, against the estate `main` deployed, not an empty one.
#[test]
fn the_quick_start_plans_what_the_readme_says() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/estate/demo.sh");
    let run = Command::new("sh")
        .arg(&demo)
        .env("WAVEGATE", env!("CARGO_BIN_EXE_wavegate"))
        .env_remove("WAVEGATE_SANDBOX")
        .env_remove("WAVEGATE_SANDBOX_APPLY_WRITE")
        .env_remove("WAVEGATE_PROFILES")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let line = |start: &str| {
        stderr
            .lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starting `{start}`:\n{stderr}"))
            .trim()
            .to_owned()
    };
    // `app` in both stages: an update and a new load balancer, against
    // what `main` deployed (an empty estate would plan to create it all).
    assert!(
        line("app@dev").starts_with("app@dev  planned  +1 ~1 -0 -/+0"),
        "{stderr}"
    );
    assert!(
        line("app@prod").starts_with("app@prod  planned  +1 ~1 -0 -/+0"),
        "{stderr}"
    );
    // The new `dns` in prod, reading an output of `app` known only after apply.
    assert!(
        line("dns@prod").starts_with("dns@prod  planned  +1 ~0"),
        "{stderr}"
    );
    assert!(
        line("unknown input hostname").contains("app@prod knows hostname only after it applies")
    );
    // `network` and `database` unaffected.
    assert_eq!(line("database"), "database  unaffected");
    assert_eq!(line("network"), "network   unaffected");
    assert!(!stderr.contains("docs/notes.md"), "ignored: {stderr}");
}

#[test]
fn apply_local_deploys_main_so_that_a_change_plans_against_it() {
    let example = Example::undeployed();
    let repo = example.repo.display().to_string();
    let refused = example.wavegate(&["apply", "--repo", &repo, "--ref", "main"]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("deploys only with --local"),
        "{}",
        refused.stderr
    );

    let run = example.wavegate(&[
        "apply", "--local", "--repo", &repo, "--ref", "main", "--stage", "dev",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let applied: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("applied ")?.split(' ').next())
        .collect();
    assert_eq!(applied, ["network@dev", "database@dev", "app@dev"]);

    // A change then plans against what it deployed, as against the
    // example's own bootstrap.
    let bootstrapped = Example::deployed();
    let ours = example.plan("main", "change", &["--stage", "dev"]).json();
    let theirs = bootstrapped
        .plan("main", "change", &["--stage", "dev"])
        .json();
    let planned = ours["members"].as_array().unwrap();
    assert!(!planned.is_empty(), "{ours:#}");
    for member in planned {
        let name = member["member"].as_str().unwrap();
        assert_eq!(member["status"], "planned", "{member:#}");
        assert_eq!(
            member["counts"],
            Run::member(&theirs, name)["counts"],
            "{name}"
        );
    }

    // On main, dns@prod is declared ahead of its code: its plan fails, and
    // the run says so and stops there.
    let run = example.wavegate(&["apply", "--local", "--repo", &repo, "--ref", "main"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("failed dns@prod: ")
            && run
                .stdout
                .contains("stopped at the first member that did not apply"),
        "{}",
        run.stdout
    );
}

/// A reader that stops early (`wavegate … | head -1`) ends the command
/// quietly: no panic on the closed pipe.
#[test]
fn a_reader_that_stops_early_ends_the_command_without_a_panic() {
    let example = Example::undeployed();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["plan", "--repo"])
        .arg(&example.repo)
        .args(["--base", "main", "--head", "main", "--markdown"])
        // As the bot runs commands: sandboxed, the estate read-only to plans.
        .env("ESTATE_DIR", &example.estate)
        .env("WAVEGATE_SANDBOX", "bwrap")
        .env("WAVEGATE_SANDBOX_APPLY_WRITE", &example.estate)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the command writes a line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "no panic exit: {stderr}");
}
