//! Execution profiles as an operator and a team meet them: the operator's
//! profiles file gives each stage its own credentials, variables and
//! limits; the base branch's `wavegate.toml` picks them by name; a plan of
//! pull-request code never sees what another stage's profile holds, a name
//! the operator did not define is refused, a missing state path fails
//! before anything runs, and a command that goes past a limit is stopped
//! there and the report says which.

use crate::support::bot::*;
use crate::support::common::Example;
use crate::support::redact::redact;
use std::path::Path;

/// A credentials file per profile under `dir/creds/<name>/credentials`.
fn write_credentials(dir: &Path) {
    for name in ["dev", "prod-read", "prod-write"] {
        let at = dir.join("creds").join(name);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("credentials"), format!("{name}-secret\n")).unwrap();
    }
}

/// The profiles file of a team with per-stage credentials: dev's, prod's
/// read-only one for plans and prod's write one for applies; every profile
/// sees the estate's state (read-only but to applies).
fn per_stage_profiles(example: &Example, dir: &Path) -> String {
    write_credentials(dir);
    let creds = dir.join("creds");
    let state = example.estate.display();
    let profile = |name: &str, extra: &str| {
        format!(
            "[profile.{name}]\nread = [\"{}\"]\nstate = [\"{state}\"]\n{extra}\n",
            creds.join(name).display()
        )
    };
    [
        profile(
            "dev",
            "env = { AWS_PROFILE = \"dev\", CLOUD_TOKEN = { from_env = \"DEV_CLOUD_TOKEN\" } }",
        ),
        profile("prod-read", "env = { AWS_PROFILE = \"prod-read\" }"),
        profile("prod-write", "env = { AWS_PROFILE = \"prod-write\" }"),
    ]
    .concat()
}

const DEV_STAGE: &str = "name = \"dev\"\ngate = \"never\"\n";
const PROD_STAGE: &str = "name = \"prod\"\ngate = \"always\"\n";

/// `toml` with each stage picking its profiles, as the team writes it, and
/// (a mistake) the source of dev's token in the pass-through list.
fn with_stage_profiles(toml: &str) -> String {
    assert!(toml.contains(DEV_STAGE) && toml.contains(PROD_STAGE));
    assert!(toml.contains("env = [\"ESTATE_DIR\"]"));
    toml.replace("env = [\"ESTATE_DIR\"]", "env = [\"ESTATE_DIR\", \"DEV_CLOUD_TOKEN\"]")
        .replace(
        DEV_STAGE,
        &format!("{DEV_STAGE}profile = \"dev\"\nvariables = {{ REGION = \"eu-west-1\" }}\n"),
    )
    .replace(
        PROD_STAGE,
        &format!(
            "{PROD_STAGE}profile = {{ plan = \"prod-read\", apply = \"prod-write\" }}\nvariables = {{ REGION = \"us-east-1\" }}\n"
        ),
    )
}

/// A probe the pull request puts in front of the example's plan and apply
/// scripts: it says which profile and variables it got and which stage's
/// credentials it can read, and, when its component directory holds a
/// `.bomb`, goes past the limit it names.
fn probe(creds: &Path) -> String {
    format!(
        r#"import os, subprocess, sys
sys.dont_write_bytecode = True

def report():
    kind = os.path.basename(sys.argv[0]).removesuffix(".py")
    seen = []
    for name in ("dev", "prod-read", "prod-write"):
        try:
            with open(os.path.join("{creds}", name, "credentials")) as f:
                seen.append(name + "=" + f.read().strip())
        except OSError:
            seen.append(name + "=unseen")
    env = os.environ.get
    setup = env("WAVEGATE_SETUP_DIR")
    if setup:
        with open(os.path.join(setup, "ran")) as f:
            seen.append("setup=" + ",".join(f.read().split()))
        seen.append("tool=" + subprocess.run(["tool"], capture_output=True, text=True).stdout.strip())
    print("probe", kind, env("WAVEGATE_MEMBER"), "profile=" + str(env("AWS_PROFILE")),
          "region=" + str(env("REGION")), "cloud=" + str(env("CLOUD_TOKEN")),
          "passed=" + str(env("DEV_CLOUD_TOKEN")), *seen, flush=True)
    if kind == "plan" and os.path.exists(".bomb"):
        bomb = open(".bomb").read().strip()
        if bomb == "memory":
            hoard = bytearray(2 << 30)
            hoard[::4096] = b"x" * len(hoard[::4096])
        elif bomb == "processes":
            children = [subprocess.Popen(["sleep", "60"]) for _ in range(400)]
        elif bomb == "disk":
            with open("/tmp/fill", "wb") as f:
                for _ in range(1024):
                    f.write(b"\0" * (1 << 20))
        elif bomb == "cpu":
            while True:
                pass
        print("the bomb went off unstopped", flush=True)
"#,
        creds = creds.display()
    )
}

/// The `change` branch's files with the probe in front of the scripts.
fn probed(example: &Example, creds: &Path) -> Vec<(String, String)> {
    let mut files = vec![("ci/probe.py".to_owned(), probe(creds))];
    for script in ["ci/plan.py", "ci/apply.py"] {
        files.push((
            script.to_owned(),
            format!(
                "import probe; probe.report()\n{}",
                example.read("change", script)
            ),
        ));
    }
    files
}

fn branch(example: &Example, name: &str, files: &[(String, String)]) {
    let files: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(path, text)| (path.as_str(), Some(text.as_str())))
        .collect();
    example.branch(name, "change", &files);
}

/// The probe's line of `member`'s `kind` command in the server's log.
fn probe_line(bot: &Bot, kind: &str, member: &str) -> String {
    let log = bot.log();
    let needle = format!("probe {kind} {member} ");
    let line = log
        .lines()
        .find_map(|l| l.split_once(&needle).map(|(_, seen)| seen.to_owned()))
        .unwrap_or_else(|| panic!("no `{needle}` in the log:\n{log}"));
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stage_plans_and_applies_with_its_own_credentials_and_never_sees_anothers() {
    let token = [("DEV_CLOUD_TOKEN", "dev-token-7f3a9c")];
    let bot = Bot::start_with_file(&token, "WAVEGATE_PROFILES", per_stage_profiles).await;
    let creds = bot.dir.path().join("creds");
    let base = with_stage_profiles(&bot.example.read("main", "wavegate.toml"));
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&base))]);
    let mut files = probed(&bot.example, &creds);
    files.push((
        "wavegate.toml".into(),
        with_stage_profiles(&bot.example.read("change", "wavegate.toml")),
    ));
    branch(&bot.example, "probed", &files);

    // Open the pull request: each stage's plan runs with its read profile.
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    let pr = bot.opened(&repo, 1, "probed").await;
    assert_eq!(pr.plan_state(), "action_required", "{}", pr.report());
    assert_eq!(
        probe_line(&bot, "plan", "app@dev"),
        "profile=dev region=eu-west-1 cloud=[redacted] passed=None dev=dev-secret prod-read=unseen prod-write=unseen",
        "the dev plan sees dev's credentials alone, its token never reaches the log, and the token's source is never passed on"
    );
    assert_eq!(
        probe_line(&bot, "plan", "app@prod"),
        "profile=prod-read region=us-east-1 cloud=None passed=None dev=unseen prod-read=prod-read-secret prod-write=unseen",
        "prod's plan gets the read profile, and not dev's token through the pass-through list"
    );

    // Approve, merge: dev applies with dev's profile; prod waits, then
    // applies with the write profile.
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    assert_eq!(
        probe_line(&bot, "apply", "app@dev"),
        "profile=dev region=eu-west-1 cloud=[redacted] passed=None dev=dev-secret prod-read=unseen prod-write=unseen"
    );
    let digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-bob", &format!("/approve prod {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    assert_eq!(
        probe_line(&bot, "apply", "app@prod"),
        "profile=prod-write region=us-east-1 cloud=None passed=None dev=unseen prod-read=unseen prod-write=prod-write-secret",
        "prod's apply gets the write profile"
    );
    assert!(
        !bot.log().contains("dev-token-7f3a9c"),
        "a secret from the server's environment is redacted everywhere"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_the_operator_did_not_define_is_refused_in_the_report_and_by_config_check() {
    let token = [("DEV_CLOUD_TOKEN", "dev-token-7f3a9c")];
    let bot = Bot::start_with_file(&token, "WAVEGATE_PROFILES", per_stage_profiles).await;
    let toml = bot
        .example
        .read("change", "wavegate.toml")
        .replace(PROD_STAGE, &format!("{PROD_STAGE}profile = \"staging\"\n"));
    branch(&bot.example, "staging", &[("wavegate.toml".into(), toml)]);
    let pr = bot.opened(&bot.github_repo(), 2, "staging").await;
    insta::assert_snapshot!(redact(&pr.report()), @r"
    <!-- wavegate:report -->
    ## wavegate plan

    ❌ **wavegate.toml cannot be read**

    At `[short]`, `wavegate.toml`, field `stage[1] (prod).profile`: execution profile `staging` is not defined on this server (it has `default`, `dev`, `prod-read`, `prod-write`); use one of those, or ask the operator to add `[profile.staging]` to the server's profiles file.

    Nothing was planned, so there is nothing to approve yet.

    **What to do:** Name a profile the server defines (`wavegate config check --profiles FILE` lists them). Push the fix to this branch and wavegate plans again.
    ");
    assert!(bot.plans_run().is_empty(), "nothing was planned");

    // The same check, before pushing: `config check` with the server's file.
    bot.example.git(&["checkout", "-q", "staging"]);
    let profiles = bot.dir.path().join("operator-file.toml");
    let run = bot.example.wavegate_with(
        &token,
        &[
            "config",
            "check",
            "--repo",
            &bot.example.repo.display().to_string(),
            "--profiles",
            &profiles.display().to_string(),
        ],
    );
    bot.example.git(&["checkout", "-q", "--detach", "main"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    insta::assert_snapshot!(run.stderr.trim(), @"error: wavegate.toml: `stage[1] (prod).profile`: execution profile `staging` is not defined on this server (it has `default`, `dev`, `prod-read`, `prod-write`); use one of those, or ask the operator to add `[profile.staging]` to the server's profiles file; fix: name a profile the server defines (`wavegate config check --profiles FILE` lists them)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_path_that_is_missing_fails_the_plan_before_any_command_runs() {
    let bot = Bot::start_with_file(&[], "WAVEGATE_PROFILES", |_, dir| {
        format!(
            "[profile.prod-read]\nstate = [\"{}\"]\n",
            dir.join("no-such-state").display()
        )
    })
    .await;
    let toml = bot.example.read("change", "wavegate.toml").replace(
        PROD_STAGE,
        &format!("{PROD_STAGE}profile = \"prod-read\"\n"),
    );
    bot.edit_base_config(
        PROD_STAGE,
        &format!("{PROD_STAGE}profile = \"prod-read\"\n"),
    );
    branch(&bot.example, "missing", &[("wavegate.toml".into(), toml)]);
    let pr = bot.opened(&bot.github_repo(), 3, "missing").await;
    assert_eq!(pr.plan_state(), "failure");
    let report = redact(&pr.report());
    assert!(
        report.contains("the `state` path `[tmp]/no-such-state` of execution profile `prod-read` does not exist on this host, so the command did not run"),
        "{report}"
    );
    assert!(
        !bot.plans_run().iter().any(|m| m.ends_with("@prod")),
        "no prod command ran: {:?}",
        bot.plans_run()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_past_their_limits_are_stopped_there_and_the_report_names_the_limit() {
    let bot = Bot::start_with_file(&[], "WAVEGATE_PROFILES", |example, dir| {
        let state = example.estate.display();
        let _ = dir;
        format!(
            "[profile.small]\nstate = [\"{state}\"]\nmemory = \"256MiB\"\nprocesses = 64\ndisk = \"64MiB\"\ncpu_time = \"3s\"\nmax_timeout = \"20s\"\n"
        )
    })
    .await;
    let small = |toml: &str| {
        toml.replace(DEV_STAGE, &format!("{DEV_STAGE}profile = \"small\"\n"))
            .replace(PROD_STAGE, &format!("{PROD_STAGE}profile = \"small\"\n"))
    };
    let base = small(&bot.example.read("main", "wavegate.toml"));
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&base))]);
    let creds = bot.dir.path().join("creds");
    let repo = bot.github_repo();
    for (number, bomb, limit) in [
        (4, "memory", "its memory limit of 256 MiB"),
        (5, "processes", "its process limit of 64"),
        (6, "disk", "its disk limit of 64 MiB"),
        (7, "cpu", "its CPU time limit of 3s"),
    ] {
        let mut files = probed(&bot.example, &creds);
        files.push(("infra/app/.bomb".into(), bomb.into()));
        files.push((
            "wavegate.toml".into(),
            small(&bot.example.read("change", "wavegate.toml")),
        ));
        branch(&bot.example, bomb, &files);
        let pr = bot.opened(&repo, number, bomb).await;
        let report = pr.report();
        assert_eq!(pr.plan_state(), "failure", "{report}");
        assert!(
            report.contains(&format!(
                "the plan command was stopped at {limit} (set by the server's execution profile)"
            )),
            "{bomb}: {report}"
        );
        assert!(!bot.log().contains("the bomb went off unstopped"), "{bomb}");
        assert!(bot.survivors().is_empty(), "{bomb}: {:?}", bot.survivors());
    }
    let rss = server_rss_kib(&bot);
    assert!(
        rss < 200 * 1024,
        "the server's memory stays bounded: {rss} KiB"
    );
}

/// The server's resident memory, in KiB.
fn server_rss_kib(bot: &Bot) -> u64 {
    let pid = bot.pid_of(0).expect("the server runs");
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_setup_runs_once_per_job_before_the_stage_and_its_failure_fails_the_stage() {
    let bot = Bot::start_with_file(&[], "WAVEGATE_PROFILES", |example, _| {
        let state = example.estate.display();
        format!(
            r#"[profile.dev]
state = ["{state}"]
env = {{ TOOL_CONFIG = "{{setup_dir}}/tool.conf" }}
setup = [
  ["sh", "-c", "echo $WAVEGATE_STAGE >> $WAVEGATE_SETUP_DIR/ran"],
  ["sh", "-c", "printf '#!/bin/sh\\necho tool 1.11 at $TOOL_CONFIG\\n' > {{setup_dir}}/bin/tool && chmod +x {{setup_dir}}/bin/tool"],
]
[profile.prod-read]
state = ["{state}"]
setup = [["sh", "-c", "echo the identity provider refused the login >&2; exit 3"]]
"#
        )
    })
    .await;
    let toml = |toml: &str| {
        toml.replace(DEV_STAGE, &format!("{DEV_STAGE}profile = \"dev\"\n"))
            .replace(
                PROD_STAGE,
                &format!("{PROD_STAGE}profile = \"prod-read\"\n"),
            )
    };
    let base = toml(&bot.example.read("main", "wavegate.toml"));
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&base))]);
    let creds = bot.dir.path().join("creds");
    let mut files = probed(&bot.example, &creds);
    files.push((
        "wavegate.toml".into(),
        toml(&bot.example.read("change", "wavegate.toml")),
    ));
    branch(&bot.example, "setup", &files);
    let pr = bot.opened(&bot.github_repo(), 8, "setup").await;

    // The outputs commands of network@dev and database@dev and the plan of
    // app@dev all ran with the dev profile: its setup ran once before them.
    let dev = probe_line(&bot, "plan", "app@dev");
    let (_, setup) = dev.split_once(" setup=").expect("the probe saw a setup");
    let (ran, tool) = setup.split_once(" tool=").unwrap();
    assert_eq!(ran, "dev", "{dev}");
    assert!(
        tool.starts_with("tool 1.11 at /") && tool.ends_with("/setup/dev.dev/tool.conf"),
        "its tool is first on PATH, `{{setup_dir}}` filled in: {dev}"
    );
    let report = pr.report();
    assert_eq!(pr.plan_state(), "failure", "{report}");
    assert!(
        report.contains("the setup of execution profile `prod-read` for stage `prod` failed, so none of the stage's commands with it ran"),
        "{report}"
    );
    assert!(
        report.contains("the identity provider refused the login"),
        "{report}"
    );
    assert!(
        !bot.plans_run().iter().any(|m| m.ends_with("@prod")),
        "no prod plan ran: {:?}",
        bot.plans_run()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_group_runs_its_members_with_its_own_profile() {
    let token = [("DEV_CLOUD_TOKEN", "dev-token-7f3a9c")];
    let bot = Bot::start_with_file(&token, "WAVEGATE_PROFILES", per_stage_profiles).await;
    let creds = bot.dir.path().join("creds");
    let grouped = |toml: &str| {
        toml.replace(
            DEV_STAGE,
            &format!(
                "{DEV_STAGE}profile = \"dev\"\n\n[[stage.jobs]]\nname = \"apps\"\nmembers = [\"app\"]\nprofile = \"prod-read\"\n\n[[stage.jobs]]\nname = \"foundations\"\nmembers = [\"network\", \"database\"]\nprofile = \"dev\"\n"
            ),
        )
    };
    let base = grouped(&bot.example.read("main", "wavegate.toml"));
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&base))]);
    let mut files = probed(&bot.example, &creds);
    files.push((
        "wavegate.toml".into(),
        grouped(&bot.example.read("change", "wavegate.toml")),
    ));
    branch(&bot.example, "grouped", &files);
    let pr = bot.opened(&bot.github_repo(), 9, "grouped").await;
    assert_eq!(pr.plan_state(), "action_required", "{}", pr.report());
    assert_eq!(
        probe_line(&bot, "plan", "app@dev"),
        "profile=prod-read region=None cloud=None passed=None dev=unseen prod-read=prod-read-secret prod-write=unseen",
        "app is in the `apps` group: its profile, not the stage's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forks_plans_run_with_the_default_profile_whatever_the_base_picks() {
    let token = [("DEV_CLOUD_TOKEN", "dev-token-7f3a9c")];
    let bot = Bot::start_with_file(&token, "WAVEGATE_PROFILES", per_stage_profiles).await;
    let creds = bot.dir.path().join("creds");
    let forks_allowed = |toml: &str| {
        with_stage_profiles(toml).replace("[policy]\n", "[policy]\nallow_forks = true\n")
    };
    let base = forks_allowed(&bot.example.read("main", "wavegate.toml"));
    bot.example
        .branch("main", "main", &[("wavegate.toml", Some(&base))]);
    let mut files = probed(&bot.example, &creds);
    files.push((
        "wavegate.toml".into(),
        forks_allowed(&bot.example.read("change", "wavegate.toml")),
    ));
    branch(&bot.example, "forked", &files);

    // The same branch, opened from a fork.
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 10, "forked");
    let (event, body) = crate::support::github_pull_request("opened", &repo, &pr);
    let mut payload: serde_json::Value = serde_json::from_slice(&body).unwrap();
    payload["pull_request"]["head"]["repo"]["full_name"] = "mallory/infra".into();
    payload["pull_request"]["head"]["repo"]["clone_url"] =
        "https://fork.invalid/mallory/infra.git".into();
    bot.deliver_github((event, serde_json::to_vec(&payload).unwrap()))
        .await;
    bot.settle().await;

    assert_eq!(
        probe_line(&bot, "plan", "app@prod"),
        "profile=None region=us-east-1 cloud=None passed=None dev=unseen prod-read=unseen prod-write=unseen",
        "a stranger's code plans with the server's `default`, never prod's read profile"
    );
    let report = bot.pr(&repo, 10).report();
    assert!(
        report.contains("every stage planned with the server's `default` execution profile"),
        "{report}"
    );
}
