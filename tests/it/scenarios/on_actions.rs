//! Plans and applies on the forge's CI, as a team that keeps production's
//! credentials in its CI meets them: dev plans and applies on the bot's
//! host; prod's profile says `executor = "actions"`, so each of its jobs is
//! a run of the default branch's workflow, which a runner with prod's
//! labels takes and runs with `wavegate job run` — with credentials only
//! that runner has. What the run prints shows in the live console while it
//! runs, and what comes back is recorded as a local command's output; a
//! forged claim, output or hand-back changes nothing (on Forgejo, a run's
//! own token read from its inputs claims nothing without the proof made
//! with the repository's run key, which only its runs read); a runner killed
//! mid-apply fails its member with the step its job failed at and the end
//! of its log, and applies nothing twice; a group's calls, a stage's hooks
//! and a discovery run there too; a job no runner takes times out,
//! naming the labels.

use crate::support::bot::*;
use crate::support::common::Example;
use crate::support::fake_forge::{FakeRun, RunToken};
use crate::support::pr::PrHandle;
use crate::support::runner::FakeRunner;
use crate::support::RepoHandle;
use serde_json::Value;
use std::path::Path;

const PROD_LABELS: [&str; 2] = ["self-hosted", "prod"];
const PROD_TOKEN: &str = "prod-token-91b2c7";

/// The operator's profiles: prod's jobs run on the forge's CI, on runners
/// labelled `self-hosted` and `prod`, in the `production` environment.
fn actions_profiles(queue_timeout: &str) -> impl FnOnce(&Example, &Path) -> String {
    let queue_timeout = queue_timeout.to_owned();
    move |_, _| {
        format!(
            "[profile.prod]\nexecutor = \"actions\"\nworkflow = \".github/workflows/wavegate.yml\"\nrunner = [\"self-hosted\", \"prod\"]\nenvironment = \"production\"\nqueue_timeout = \"{queue_timeout}\"\n"
        )
    }
}

const PROD_STAGE: &str = "name = \"prod\"\ngate = \"always\"\n";

/// `toml` with prod on the forge's CI and prod's credential passed on
/// where it is set (only the runner sets it).
fn on_actions(toml: &str) -> String {
    assert!(toml.contains(PROD_STAGE) && toml.contains("env = [\"ESTATE_DIR\"]"));
    toml.replace(
        "env = [\"ESTATE_DIR\"]",
        "env = [\"ESTATE_DIR\", \"PROD_CLOUD_TOKEN\"]",
    )
    .replace(PROD_STAGE, &format!("{PROD_STAGE}profile = \"prod\"\n"))
}

/// A probe in front of the plan and apply scripts: where it ran, and
/// whether prod's credential reached it; then it waits while
/// `$ESTATE_DIR/hold-<kind>-<member>` exists.
const PROBE: &str = r#"import os, sys, time
sys.dont_write_bytecode = True

def report():
    kind = os.path.basename(sys.argv[0]).removesuffix(".py")
    member = os.environ.get("WAVEGATE_MEMBER")
    token = os.environ.get("PROD_CLOUD_TOKEN")
    print("probe", kind, member,
          "prod-access=" + ("yes" if token == "prod-token-91b2c7" else "no"), flush=True)
    hold = os.path.join(os.environ.get("ESTATE_DIR", "/nonexistent"), f"hold-{kind}-{member}")
    if os.path.exists(hold):
        print("held: waiting while", hold, "exists", flush=True)
        deadline = time.monotonic() + 600
        while os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.05)
"#;

/// Sets the base branch up for prod on the forge's CI (`forge`'s
/// workflow, as `wavegate init actions` prints it, committed to it), and
/// a `probed` branch with the change and the probe.
fn set_up(bot: &Bot, forge: &str) {
    let workflow = bot
        .example
        .wavegate(&[
            "init",
            "actions",
            "--forge",
            forge,
            "--server",
            &format!("http://127.0.0.1:{}", bot.port),
        ])
        .stdout;
    let base = on_actions(&bot.example.read("main", "wavegate.toml"));
    bot.example.branch(
        "main",
        "main",
        &[
            ("wavegate.toml", Some(&base)),
            (".github/workflows/wavegate.yml", Some(&workflow)),
        ],
    );
    let mut files = vec![
        ("ci/probe.py".to_owned(), PROBE.to_owned()),
        (
            "wavegate.toml".to_owned(),
            on_actions(&bot.example.read("change", "wavegate.toml")),
        ),
    ];
    for script in ["ci/plan.py", "ci/apply.py"] {
        files.push((
            script.to_owned(),
            format!(
                "import probe; probe.report()\n{}",
                bot.example.read("change", script)
            ),
        ));
    }
    let files: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(path, text)| (path.as_str(), Some(text.as_str())))
        .collect();
    bot.example.branch("probed", "change", &files);
}

/// A runner with prod's labels and prod's credential, whose jobs see the
/// estate as the bot's host does.
fn prod_runner(bot: &Bot) -> FakeRunner {
    let estate = bot.example.estate.display().to_string();
    FakeRunner::start(
        &bot.forge,
        &PROD_LABELS,
        &[
            ("ESTATE_DIR", &estate),
            ("WAVEGATE_SANDBOX_APPLY_WRITE", &estate),
            ("PROD_CLOUD_TOKEN", PROD_TOKEN),
        ],
        &bot.dir.path().join("runner"),
    )
}

fn probe_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once("probe ").map(|(_, seen)| seen.to_owned()))
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_prod_plans_and_applies_on_actions_with_credentials_only_its_runner_has() {
    prod_plans_and_applies_on_actions_with_credentials_only_its_runner_has("github").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_prod_plans_and_applies_on_actions_with_credentials_only_its_runner_has() {
    prod_plans_and_applies_on_actions_with_credentials_only_its_runner_has("forgejo").await;
}

async fn prod_plans_and_applies_on_actions_with_credentials_only_its_runner_has(forge: &str) {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("10m")).await;
    set_up(&bot, forge);
    let runner = prod_runner(&bot);
    let repo = match forge {
        "github" => bot.github_repo(),
        _ => bot.forgejo_repo(),
    };
    bot.forge.set_permission(&repo, "rev-bob", "write");

    // Open the pull request: dev plans here, prod's plans on the runner.
    let pr = bot.opened(&repo, 1, "probed").await;
    let waits_for_approval = match forge {
        "github" => "action_required",
        _ => "pending",
    };
    assert_eq!(pr.plan_state(), waits_for_approval, "{}", pr.report());
    assert!(pr.report().contains("7 members planned"), "{}", pr.report());
    let here = probe_lines(&bot.log());
    assert!(
        here.contains(&"plan app@dev prod-access=no".to_owned())
            && here
                .iter()
                .all(|l| l.contains("@dev ") && l.ends_with("prod-access=no")),
        "the bot's host plans dev, without prod's credential: {here:?}"
    );
    let there = probe_lines(&runner.logs());
    assert!(
        there.contains(&"plan app@prod prod-access=yes".to_owned())
            && there
                .iter()
                .all(|l| l.contains("@prod ") && l.ends_with("prod-access=yes")),
        "prod plans on the runner, with the credential only it has: {there:?}"
    );
    let dispatched = bot.forge.dispatches(&repo);
    let report = pr.report();
    let details = |member: &str| -> String {
        report
            .split(&format!("<summary><code>{member}</code>"))
            .nth(1)
            .and_then(|rest| rest.split("</details>").next())
            .unwrap_or_else(|| panic!("no details of {member}: {report}"))
            .to_owned()
    };
    for member in ["network@prod", "database@prod", "app@prod", "dns@prod"] {
        let details = details(member);
        assert!(
            dispatched.iter().any(|run| details.contains(&format!(
                "Planned on the forge's CI: [its run]({})",
                run.html_url
            ))),
            "{member}'s details name its run: {details}"
        );
    }
    assert!(!details("app@dev").contains("forge's CI"));
    // This bot shows no pages: the check's details lead to the first run.
    let plan_link = pr.plan_check().link.expect("the plan check links a run");
    assert!(
        details("app@prod").contains(&format!("[its run]({plan_link})")),
        "the plan check leads to app@prod's run, not {plan_link}"
    );
    assert!(
        dispatched.iter().all(|run| run.git_ref == "main"
            && run.workflow_path == ".github/workflows/wavegate.yml"
            && run.inputs["environment"] == "production"),
        "{dispatched:#?}"
    );

    // Approve, merge: dev applies here; prod waits for its gate, then
    // applies on the runner.
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["app@dev"]);
    let digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-bob", &format!("/approve prod {digest}"))
        .await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    assert!(probe_lines(&runner.logs()).contains(&"apply app@prod prod-access=yes".to_owned()));
    let apply_link = pr.apply_check().link.expect("the apply check links a run");
    let applies: Vec<_> = bot.forge.dispatches(&repo)[dispatched.len()..].to_vec();
    assert!(
        applies.iter().any(|run| run.html_url == apply_link),
        "the apply check leads to a run of prod's applies: {apply_link}"
    );
    for member in ["app@prod", "dns@prod"] {
        let row = pr
            .apply_section()
            .lines()
            .find(|l| l.contains(&format!("`{member}`")))
            .map(str::to_owned)
            .unwrap();
        assert!(
            applies
                .iter()
                .any(|run| row.contains(&format!("applied ([its run]({}))", run.html_url))),
            "{member}'s row names its apply's run: {row}"
        );
    }
    assert!(
        !bot.log().contains(PROD_TOKEN),
        "prod's credential never reaches the bot"
    );
    assert!(runner.taken().iter().all(|t| t.exit == Some(0)));
}

/// The pull request's newest command of `kind` whose label names `member`,
/// as its API lists it (none before the bot knows the repository).
async fn command(bot: &Bot, kind: &str, member: &str) -> Option<Value> {
    let (status, body, _) = bot
        .get_page("/api/v1/repos/github/acme/infra/pulls/1/commands")
        .await;
    let list: Value = (status == 200).then(|| serde_json::from_str(&body).unwrap())?;
    list["commands"]
        .as_array()?
        .iter()
        .rev()
        .find(|c| c["kind"] == kind && c["label"].as_str().is_some_and(|l| l.contains(member)))
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_on_actions_shows_what_it_printed_in_the_live_console_while_it_runs() {
    let bot = Bot::start_reachable_with_file(
        &[("WAVEGATE_PUBLIC_PAGES", "on")],
        "WAVEGATE_PROFILES",
        actions_profiles("10m"),
    )
    .await;
    set_up(&bot, "github");
    let hold = bot.example.estate.join("hold-plan-app@prod");
    std::fs::write(&hold, "").unwrap();
    let runner = prod_runner(&bot);
    let repo = bot.github_repo();
    let pr = bot.opened_unsettled(&repo, 1, "probed").await;

    // app@prod's plan waits on the runner, mid-command: what it printed so
    // far is the pull request's, its first line naming the run.
    let (plan, output) = bot
        .until(
            "app@prod's plan shows what it printed on the runner",
            || async {
                let plan = command(&bot, "plan", "app@prod").await?;
                let kept = bot.get_json(plan["api"].as_str()?).await;
                let output = kept["output"].as_str()?.to_owned();
                output.contains("held: waiting").then_some((plan, output))
            },
        )
        .await;
    assert_eq!(plan["state"], "running", "{plan:#}");
    assert!(
        output.contains("probe plan app@prod prod-access=yes"),
        "{output}"
    );
    let first = output.lines().next().unwrap();
    let run = bot
        .forge
        .dispatches(&repo)
        .into_iter()
        .find(|run| first == format!("[wavegate: runs on the forge's CI, in {}]", run.html_url))
        .unwrap_or_else(|| panic!("the first line names a run: {output}"));
    assert!(
        runner
            .taken()
            .iter()
            .any(|t| t.run.id == run.id && t.exit.is_none()),
        "its run still goes on"
    );

    // Output posted without the run's session is refused and kept nowhere.
    let path = format!("/api/jobs/{}/output", run.inputs["job"]);
    let forged = r#"{"seq": 99, "text": "forged line\n"}"#;
    assert_eq!(knock(&bot, &path, None, forged).await, 401);
    assert_eq!(
        knock(&bot, &path, Some("a-guessed-session"), forged).await,
        403
    );

    // Let go, it ends as a local command does, and the report is as ever.
    std::fs::remove_file(&hold).unwrap();
    bot.settle().await;
    assert!(pr.report().contains("7 members planned"), "{}", pr.report());
    let kept = bot.get_json(plan["api"].as_str().unwrap()).await;
    assert_eq!(
        (&kept["state"], &kept["ending"], &kept["succeeded"]),
        (&"ended".into(), &"exited:0".into(), &true.into()),
        "{kept:#}"
    );
    let output = kept["output"].as_str().unwrap();
    assert!(
        output.starts_with(first)
            && output.contains("held: waiting")
            && !output.contains("forged line"),
        "{output}"
    );
    assert!(runner.taken().iter().all(|t| t.exit == Some(0)));
    let logs = runner.logs();
    assert!(
        !logs.contains("live console"),
        "no run stopped streaming: {logs}"
    );
}

/// On `forge`, a pull request approved and merged: dev applied here, then
/// prod approved, and its apply of app@prod paused on the runner. The
/// runner, the repository and the pull request.
async fn prods_apply_paused_on_the_runner<'b>(
    bot: &'b Bot,
    forge: &str,
) -> (FakeRunner, RepoHandle, PrHandle<'b>) {
    set_up(bot, forge);
    let runner = prod_runner(bot);
    let repo = match forge {
        "github" => bot.github_repo(),
        _ => bot.forgejo_repo(),
    };
    bot.forge.set_permission(&repo, "rev-bob", "write");
    let pr = bot.opened(&repo, 1, "probed").await;
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let digest = digest_in(&pr.last_reply());
    bot.pause_apply("prod", "app", "before");
    pr.comment_unsettled("rev-bob", &format!("/approve prod {digest}"))
        .await;
    bot.until("app@prod's apply is paused on the runner", || async {
        bot.apply_paused("prod", "app").then_some(())
    })
    .await;
    (runner, repo, pr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_a_runner_killed_mid_apply_fails_the_member_and_its_retry_applies_it_once() {
    a_runner_killed_mid_apply_fails_the_member_and_its_retry_applies_it_once("github").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_a_runner_killed_mid_apply_fails_the_member_and_its_retry_applies_it_once() {
    a_runner_killed_mid_apply_fails_the_member_and_its_retry_applies_it_once("forgejo").await;
}

async fn a_runner_killed_mid_apply_fails_the_member_and_its_retry_applies_it_once(forge: &str) {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("10m")).await;
    let (runner, _, pr) = prods_apply_paused_on_the_runner(&bot, forge).await;
    // The runner dies mid-apply.
    assert_eq!(runner.kill_running(), 1);
    bot.settle().await;
    let killed = runner
        .taken()
        .into_iter()
        .find(|t| t.exit == Some(137))
        .expect("the killed run");
    let row = pr
        .apply_section()
        .lines()
        .find(|l| l.contains("`app@prod`"))
        .map(str::to_owned)
        .unwrap();
    // The run's page by its path: the report writes a URL it quotes inert.
    let run_page = killed.run.html_url.splitn(4, '/').nth(3).unwrap();
    assert!(
        row.contains("failed")
            && row.contains(&format!(
                "{run_page} ended (failure) without handing the job back"
            )),
        "the member failed, naming the run: {row}"
    );
    assert!(
        row.contains("its job `job` failed at step `wavegate job run`"),
        "the forge's account of the run names the step that failed: {row}"
    );
    let printed = std::fs::read_to_string(&killed.log).unwrap();
    let last = printed
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .expect("the step printed before it was killed");
    let last = last.split_once(' ').map_or(last, |(_, rest)| rest).trim();
    let why = pr.apply_section();
    assert!(
        why.contains("last output:") && why.contains(last),
        "the failure shows the end of the job's log, `{last}`: {why}"
    );
    assert_eq!(bot.applies_run(), ["app@dev"], "nothing of prod applied");
    assert!(
        row.contains(&format!("([its run]({}))", killed.run.html_url)),
        "{row}"
    );
    assert_eq!(
        pr.apply_check().link.as_deref(),
        Some(killed.run.html_url.as_str()),
        "the failed apply check leads to the run that failed"
    );

    // The runner is back; /retry dispatches the apply again, once.
    bot.resume_apply("prod", "app");
    pr.comment_as("rev-bob", "/retry").await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_a_job_no_runner_takes_times_out_naming_the_labels_and_its_run_is_cancelled() {
    a_job_no_runner_takes_times_out_naming_the_labels_and_its_run_is_cancelled("github").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_a_job_no_runner_takes_times_out_naming_the_labels_and_its_run_is_cancelled() {
    a_job_no_runner_takes_times_out_naming_the_labels_and_its_run_is_cancelled("forgejo").await;
}

async fn a_job_no_runner_takes_times_out_naming_the_labels_and_its_run_is_cancelled(forge: &str) {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("3s")).await;
    set_up(&bot, forge);
    // A runner, but not prod's: it lacks the `prod` label.
    let _runner = FakeRunner::start(
        &bot.forge,
        &["self-hosted"],
        &[],
        &bot.dir.path().join("runner"),
    );
    let repo = match forge {
        "github" => bot.github_repo(),
        _ => bot.forgejo_repo(),
    };
    let pr = bot.opened(&repo, 1, "probed").await;
    let report = pr.report();
    assert!(
        report.contains("no runner with the labels self-hosted, prod took")
            && report.contains("within 3s"),
        "{report}"
    );
    let dispatched = bot.forge.dispatches(&repo);
    assert!(!dispatched.is_empty());
    for run in &dispatched {
        assert_eq!(
            (run.status.as_str(), run.conclusion.as_deref()),
            ("completed", Some("cancelled")),
            "a run nobody took is cancelled: {run:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_a_bot_that_may_not_set_the_run_key_dispatches_nothing_and_says_why() {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("1m")).await;
    set_up(&bot, "forgejo");
    bot.forge.set_forgejo_bot_admin(false);
    let repo = bot.forgejo_repo();
    let pr = bot.opened(&repo, 1, "probed").await;
    let report = pr.report();
    assert!(
        report.contains("cannot set the repository's Actions secret WAVEGATE_RUN_KEY")
            && report.contains("write:repository"),
        "{report}"
    );
    assert!(bot.forge.dispatches(&repo).is_empty(), "nothing dispatched");
    assert_eq!(bot.forge.actions_secret(&repo, "WAVEGATE_RUN_KEY"), None);
}

/// POSTs `body` to the bot's `path` with `bearer`: the status.
async fn knock(bot: &Bot, path: &str, bearer: Option<&str>, body: &str) -> u16 {
    let mut request = bot.http.post(bot.url(path)).body(body.to_owned());
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    request.send().await.unwrap().status().as_u16()
}

/// A pull request whose prod plans wait for a runner that took the first
/// (network@prod's) and is slow to start the next, while forgeries knock:
/// the runner, the pull request and the two runs dispatched so far.
async fn knocked_on<'a>(
    bot: &'a Bot,
    repo: &RepoHandle,
) -> (FakeRunner, PrHandle<'a>, Vec<FakeRun>) {
    let estate = bot.example.estate.display().to_string();
    let env = [
        ("ESTATE_DIR", estate.as_str()),
        ("WAVEGATE_SANDBOX_APPLY_WRITE", estate.as_str()),
    ];
    let runner = FakeRunner::start_holding_after(
        &bot.forge,
        &PROD_LABELS,
        &env,
        &bot.dir.path().join("runner"),
        1,
    );
    let pr = bot.opened_unsettled(repo, 1, "probed").await;
    let runs = bot
        .until("prod's second plan is dispatched", || async {
            let runs = bot.forge.dispatches(repo);
            (runs.len() >= 2).then_some(runs)
        })
        .await;
    (runner, pr, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_a_forged_claim_or_hand_back_is_refused_and_changes_nothing() {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("10m")).await;
    set_up(&bot, "github");
    let repo = bot.github_repo();
    let (runner, pr, runs) = knocked_on(&bot, &repo).await;
    let (other, run) = (&runs[0], &runs[1]);
    let claim = format!("/api/jobs/{}/claim", run.inputs["job"]);
    let audience = format!("http://127.0.0.1:{}", bot.port);
    let workflow = "acme/infra/.github/workflows/wavegate.yml";
    let genuine = || {
        RunToken::new(
            &audience,
            "acme/infra",
            run.id,
            &run.head_sha,
            &format!("{workflow}@refs/heads/main"),
        )
        .in_environment("production")
    };

    assert_eq!(knock(&bot, &claim, None, "").await, 401, "no proof");
    for (what, token) in [
        (
            "signed by another key",
            bot.forge.mint_forged_run_token(&genuine()),
        ),
        ("another repository's run", {
            let mut token = genuine();
            token.repository = "acme/other".into();
            bot.forge.mint_run_token(&token)
        }),
        ("another environment", {
            let mut token = genuine();
            token.environment = Some("dev".into());
            bot.forge.mint_run_token(&token)
        }),
        ("the workflow as the pull request's branch has it", {
            let mut token = genuine();
            token.job_workflow_ref = format!("{workflow}@refs/heads/probed");
            bot.forge.mint_run_token(&token)
        }),
        ("a run at another commit (the pull request's head)", {
            let mut token = genuine();
            token.sha = pr.head();
            bot.forge.mint_run_token(&token)
        }),
        ("another job's run", {
            let mut token = genuine();
            token.run_id = other.id;
            bot.forge.mint_run_token(&token)
        }),
        ("for another audience", {
            let mut token = genuine();
            token.audience = "sts.amazonaws.com".into();
            bot.forge.mint_run_token(&token)
        }),
    ] {
        assert_eq!(knock(&bot, &claim, Some(&token), "").await, 403, "{what}");
    }
    assert!(
        bot.log().contains("refused (403 Forbidden)"),
        "each refusal is logged"
    );

    // The runner's own claims go through: nothing the forgeries tried stuck.
    runner.release();
    bot.settle().await;
    assert!(pr.report().contains("7 members planned"), "{}", pr.report());
    assert!(runner.taken().iter().all(|t| t.exit == Some(0)));

    // A replayed claim, and a second hand-back, are refused.
    let replayed = bot.forge.mint_run_token(&genuine());
    assert_eq!(knock(&bot, &claim, Some(&replayed), "").await, 409);
    let finished = format!("/api/jobs/{}/finished", run.inputs["job"]);
    assert_eq!(
        knock(
            &bot,
            &finished,
            Some("a-guessed-session"),
            r#"{"failed": "forged"}"#
        )
        .await,
        409
    );
    assert!(pr.report().contains("7 members planned"), "{}", pr.report());
}

/// POSTs a claim of `path` with `token` and, when given, `proof` as its
/// run proof: the status.
async fn knock_proved(bot: &Bot, path: &str, token: &str, proof: Option<&str>) -> u16 {
    let mut request = bot.http.post(bot.url(path)).bearer_auth(token);
    if let Some(proof) = proof {
        request = request.header("X-Wavegate-Run-Proof", proof);
    }
    request.send().await.unwrap().status().as_u16()
}

/// HMAC-SHA256 of `job` and `token` under `key`, in hex: a run's proof,
/// made with whatever key the caller has.
fn run_proof(key: &[u8], job: &str, token: &str) -> String {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{job}\n{token}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_another_jobs_token_or_a_replayed_one_claims_nothing() {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("10m")).await;
    set_up(&bot, "forgejo");
    let repo = bot.forgejo_repo();
    let (runner, pr, runs) = knocked_on(&bot, &repo).await;
    let (other, run) = (&runs[0], &runs[1]);
    let (job, token) = (&run.inputs["job"], &run.inputs["token"]);
    let claim = format!("/api/jobs/{job}/claim");
    assert_eq!(
        knock(&bot, &claim, Some(&other.inputs["token"]), "").await,
        403,
        "another job's token, used up or not"
    );
    assert_eq!(
        knock(&bot, &claim, Some("0".repeat(64).as_str()), "").await,
        403,
        "a guessed token"
    );

    // Whoever reads the run's inputs reads its token: without the proof
    // only the repository's runs can make, it claims nothing.
    let run_key = bot
        .forge
        .actions_secret(&repo, "WAVEGATE_RUN_KEY")
        .expect("the bot set the repository's run key before dispatching");
    let run_key = hex::decode(&run_key).expect("the run key is hex");
    assert_eq!(run_key.len(), 32);
    for (what, proof) in [
        ("the run's own token, without a proof", None),
        (
            "with a proof made with another key",
            Some(run_proof(&[9; 32], job, token)),
        ),
        (
            "with the repository's key, for another job",
            Some(run_proof(&run_key, &other.inputs["job"], token)),
        ),
        ("with a proof that is not hex", Some("not-a-proof".into())),
    ] {
        assert_eq!(
            knock_proved(&bot, &claim, token, proof.as_deref()).await,
            403,
            "{what}"
        );
    }
    assert!(
        bot.log()
            .contains("does not prove it is a run of the repository"),
        "each refusal is logged"
    );

    // None of it used the token up: the run's own claim goes through.
    runner.release();
    bot.settle().await;
    assert!(pr.report().contains("7 members planned"), "{}", pr.report());
    assert!(runner.taken().iter().all(|t| t.exit == Some(0)));
    assert_eq!(
        knock_proved(&bot, &claim, token, Some(&run_proof(&run_key, job, token))).await,
        409,
        "a used token is used up, proved or not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_killed_while_its_apply_runs_on_the_ci_finds_it_done_and_applies_it_once() {
    let mut bot = Bot::start_reachable_with_file(
        &[("WAVEGATE_JOB_LEASE", "2s")],
        "WAVEGATE_PROFILES",
        actions_profiles("1m"),
    )
    .await;
    let (runner, repo, _) = prods_apply_paused_on_the_runner(&bot, "github").await;

    // The bot dies while the run is paused mid-apply. The restarted bot
    // takes the apply run up again (its lease is 2 s) and, though its old
    // server is gone, dispatches nothing new: the run may still apply.
    bot.kill();
    let dispatched = bot.forge.dispatches(&repo).len();
    bot.start_server().await;
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(
        bot.forge.dispatches(&repo).len(),
        dispatched,
        "no second apply of app@prod while its run may still apply"
    );

    // The run goes on and applies; past the attempt's deadline (its queue
    // time, timeout and grace) the bot looks at the member again, finds
    // it applied, and goes on.
    bot.resume_apply("prod", "app");
    bot.until("the run applied app@prod", || async {
        bot.applies_run()
            .contains(&"app@prod".to_owned())
            .then_some(())
    })
    .await;
    bot.advance_clock_unsettled(std::time::Duration::from_secs(600));
    bot.settle().await;
    assert_eq!(bot.applies_run(), ["app@dev", "app@prod", "dns@prod"]);
    let pr = bot.pr(&repo, 1);
    assert_eq!(pr.apply_check().state, "success", "{}", pr.apply_section());
    assert!(runner.taken().iter().all(|t| t.exit == Some(0)));
}

/// `data`: network, database and app, planned and applied by one call of
/// the example's `ci/group.py`.
const GROUP: &str =
    "[[group]]\nname = \"data\"\ncomponents = [\"network\", \"database\", \"app\"]\n\
plan = [\"python3\", \"{root}/ci/group.py\", \"plan\", \"{members_file}\"]\n\
apply = [\"python3\", \"{root}/ci/group.py\", \"apply\", \"{members_file}\"]\n\n";

/// A hook that says where it runs, for which stage and members.
const HOOK_PY: &str = r#"import json, os, sys
members = json.load(open(sys.argv[1]))
print(f"hook {os.environ['WAVEGATE_HOOK']} {os.environ['WAVEGATE_HOOK_NAME']} in {os.environ['WAVEGATE_STAGE']}: "
      + ", ".join(sorted(m["member"] for m in members)), flush=True)
"#;

fn hook(moment: &str, name: &str) -> String {
    format!(
        "[[hooks.{moment}]]\nname = \"{name}\"\ncommand = [\"python3\", \"ci/hook.py\", \"{{members_file}}\"]\n\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_calls_and_prods_hooks_run_on_the_ci_as_jobs_of_their_own() {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("10m")).await;
    set_up(&bot, "github");
    // The group and the hooks, on the base and on the pull request's branch.
    let hooks = format!(
        "{}{}",
        hook("before.plan", "announce"),
        hook("before.apply", "window")
    );
    for (branch, from) in [("main", "main"), ("probed", "probed")] {
        let config = bot
            .example
            .read(branch, "wavegate.toml")
            .replace("[policy]", &format!("{GROUP}[policy]"));
        let config = format!("{config}\n{hooks}");
        bot.example.branch(
            branch,
            from,
            &[
                ("wavegate.toml", Some(&config)),
                ("ci/hook.py", Some(HOOK_PY)),
            ],
        );
    }
    let runner = prod_runner(&bot);
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");

    let pr = bot.opened(&repo, 1, "probed").await;
    assert!(pr.report().contains("7 members planned"), "{}", pr.report());
    let (here, there) = (bot.log(), runner.logs());
    let group_plan = |stage: &str| format!("estate: plan group data@{stage}");
    assert!(here.contains(&group_plan("dev")) && !here.contains(&group_plan("prod")));
    assert!(there.contains(&group_plan("prod")), "{there}");
    assert_eq!(
        there.matches(&group_plan("prod")).count(),
        1,
        "prod's group is planned with one call: {there}"
    );

    // Merged: each stage's hooks run where its commands run.
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    let announced = |stage: &str| format!("hook before.plan announce in {stage}: ");
    let (here, there) = (bot.log(), runner.logs());
    assert!(here.contains(&announced("dev")) && !here.contains(&announced("prod")));
    assert!(there.contains(&announced("prod")), "{there}");
    let digest = digest_in(&pr.last_reply());
    pr.comment_as("rev-bob", &format!("/approve prod {digest}"))
        .await;
    let there = runner.logs();
    assert!(
        there.contains("estate: apply group data@prod")
            && there.contains("hook before.apply window in prod: "),
        "{there}"
    );
    let here = bot.log();
    assert!(
        here.contains("hook before.apply window in dev: ")
            && !here.contains("estate: apply group data@prod")
            && !here.contains("window in prod")
    );
    assert!(bot.applies_run().contains(&"app@prod".to_owned()));
    assert_eq!(pr.apply_check().state, "success", "{}", pr.apply_section());
    assert!(runner.taken().iter().all(|t| t.exit == Some(0)));
}

/// Finds every directory under `live/` holding a `resources.json`, as
/// `terragrunt find` would, and says where it ran.
const DISCOVER_PY: &str = r#"import json, os, pathlib, sys
units = [{"type": "unit", "path": str(r.parent), "dependencies": [], "paths": [f"{r.parent}/*"]}
         for r in sorted(pathlib.Path("live").rglob("resources.json"))]
token = os.environ.get("PROD_CLOUD_TOKEN")
print(f"discovered {len(units)} units, prod-access=" + ("yes" if token == "prod-token-91b2c7" else "no"), flush=True)
json.dump(units, open(sys.argv[1], "w"))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovery_in_prod_runs_on_the_ci_and_its_units_plan_there() {
    let bot =
        Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", actions_profiles("10m")).await;
    set_up(&bot, "forgejo");
    let config = bot.example.read("probed", "wavegate.toml").replace(
        "[policy]",
        "[[component]]\nname = \"live\"\ndiscover = [\"python3\", \"ci/discover.py\", \"{units_file}\"]\nstages = [\"prod\"]\n\n[policy]",
    );
    let unit =
        |name: &str| format!(r#"{{"null_resource.{name}": {{"name": "{name}-${{stage}}"}}}}"#);
    let (net, app) = (unit("net"), unit("app"));
    bot.example.branch(
        "probed",
        "probed",
        &[
            ("wavegate.toml", Some(&config)),
            ("ci/discover.py", Some(DISCOVER_PY)),
            ("live/net/resources.json", Some(&net)),
            ("live/app/resources.json", Some(&app)),
        ],
    );
    let runner = prod_runner(&bot);
    let repo = bot.forgejo_repo();

    let pr = bot.opened(&repo, 1, "probed").await;
    let report = pr.report();
    assert!(
        report.contains("`live` discovered 2 units: `live.app`, `live.net`"),
        "{report}"
    );
    assert!(
        runner
            .logs()
            .contains("discovered 2 units, prod-access=yes"),
        "prod's discovery runs on its runner, with its credential: {}\n\nbot: {}",
        runner.logs(),
        bot.log()
            .lines()
            .filter(|l| l.contains("discover"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!bot.log().contains("discovered 2 units"));
    let there = probe_lines(&runner.logs());
    for member in ["live.net@prod", "live.app@prod"] {
        assert!(
            there.contains(&format!("plan {member} prod-access=yes")),
            "{member} plans on the runner: {there:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_setup_slower_than_the_job_has_is_stopped_when_the_bot_counts_the_job_over() {
    // Prod's setup on the runner takes a minute; its plans have 3 s to be
    // claimed and 3 s to run.
    let bot = Bot::start_reachable_with_file(&[], "WAVEGATE_PROFILES", |example, dir| {
        format!(
            "{}setup = [[\"sleep\", \"60\"]]\n",
            actions_profiles("3s")(example, dir)
        )
    })
    .await;
    set_up(&bot, "github");
    bot.edit_base_config("timeout = \"2m\"", "timeout = \"3s\"");
    let runner = prod_runner(&bot);
    let repo = bot.github_repo();

    let pr = bot.opened(&repo, 1, "probed").await;
    let report = pr.report();
    assert!(
        report.contains("from its claim, its profile's setup included, and was stopped there"),
        "stopped at the job's time, not the setup's minute: {report}"
    );
    assert!(runner.taken().iter().all(|t| t.exit.is_some()));
}
