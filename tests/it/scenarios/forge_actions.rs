//! The real GitHub and Forgejo clients dispatch, follow and cancel workflow
//! runs on the fake forge, whose workflows are files in a real repository:
//! the dispatch answers the run, the run reads back as the test moves it on,
//! a cancel ends it, and a workflow missing, or not dispatchable, or a forge
//! too old to name the run, is an error that names the file and the fix.
//! A run's jobs read back with their steps, and the end of a job's log
//! (GitHub's through its redirect, which gets no token). Every request is
//! checked against the forges' API descriptions.

use crate::support;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use support::fake_forge::{self, FakeForge};
use support::{conformance_violations, git, RecordedRequest, RepoHandle};
use wavegate::config::settings::Secret;
use wavegate::forge::actions::{RunConclusion, RunStatus, RunStep, WorkflowDispatch};
use wavegate::forge::client::ForgeClient;
use wavegate::forge::forgejo::ForgejoClient;
use wavegate::forge::github::GitHubClient;
use wavegate::forge::retry::RetryPolicy;
use wavegate::model::ForgeKind;

const WORKFLOW: &str = "\
name: wavegate
on:
  workflow_dispatch:
    inputs:
      job:
        required: true
      digest:
        required: false
jobs:
  run:
    runs-on: ubuntu-latest
    steps:
      - run: wavegate job run
";

const PUSH_ONLY: &str = "\
name: ci
on: push
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - run: make test
";

/// A repository whose `main` has `wavegate.yml` (dispatchable) and
/// `push-only.yml` (not) in both forges' workflow directories.
fn repository(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    for workflows in [".github/workflows", ".forgejo/workflows"] {
        std::fs::create_dir_all(dir.join(workflows)).unwrap();
        std::fs::write(dir.join(workflows).join("wavegate.yml"), WORKFLOW).unwrap();
        std::fs::write(dir.join(workflows).join("push-only.yml"), PUSH_ONLY).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "workflows"]);
}

struct Env {
    forge: FakeForge,
    repo: RepoHandle,
    client: ForgeClient,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn start(kind: ForgeKind) -> Self {
        let dir = tempfile::tempdir().unwrap();
        repository(dir.path());
        let clone_url = format!("file://{}", dir.path().display());
        let forge = FakeForge::start().await;
        let policy = RetryPolicy {
            sleep: Arc::new(|_| Box::pin(async {})),
            ..RetryPolicy::default()
        };
        let (repo, client) = match kind {
            ForgeKind::GitHub => {
                let repo = forge.add_github_repo("acme/infra", &clone_url, 77);
                let client = GitHubClient::new(
                    forge.url(),
                    fake_forge::APP_ID,
                    &fake_forge::app_private_key(),
                    policy,
                )
                .unwrap();
                (repo, ForgeClient::GitHub(Arc::new(client)))
            }
            ForgeKind::Forgejo => {
                let repo = forge.add_forgejo_repo("acme/infra", &clone_url);
                let token = Secret::new(fake_forge::FORGEJO_BOT_TOKEN);
                let client = ForgejoClient::new(forge.url(), token, policy).unwrap();
                (repo, ForgeClient::Forgejo(Arc::new(client)))
            }
        };
        Self {
            forge,
            repo,
            client,
            _dir: dir,
        }
    }

    fn assert_conformant(&self) {
        let violations = conformance_violations(&self.forge.requests());
        assert!(violations.is_empty(), "{violations:#?}");
    }

    /// The dispatch requests the forge received.
    fn dispatch_requests(&self) -> Vec<RecordedRequest> {
        self.forge
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/dispatches"))
            .collect()
    }
}

fn dispatch(workflow: &str) -> WorkflowDispatch {
    WorkflowDispatch {
        workflow: workflow.into(),
        git_ref: "main".into(),
        inputs: BTreeMap::from([
            ("job".to_owned(), "j-41".to_owned()),
            ("digest".to_owned(), "sha256:ab".to_owned()),
        ]),
    }
}

fn completed(conclusion: RunConclusion) -> RunStatus {
    RunStatus::Completed { conclusion }
}

/// Dispatches `wavegate.yml`, then reads the run back as the test moves it
/// from queued to running to each way it can end.
async fn the_dispatched_run_is_followed_to_its_end(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let repo = env.repo.repo_ref();
    let mut told = env.forge.subscribe_dispatches();

    let run = env
        .client
        .dispatch_workflow(&repo, &dispatch("wavegate.yml"))
        .await
        .unwrap();

    let dispatched = env.forge.dispatches(&env.repo);
    assert_eq!(dispatched.len(), 1);
    let fake = &dispatched[0];
    assert_eq!(run.id, fake.id);
    assert_eq!(run.html_url.as_deref(), Some(fake.html_url.as_str()));
    assert!(
        fake.html_url.starts_with(env.forge.url()),
        "{}",
        fake.html_url
    );
    assert_eq!(fake.workflow, "wavegate.yml");
    assert_eq!(fake.git_ref, "main");
    assert_eq!(fake.inputs, dispatch("wavegate.yml").inputs);
    let expected_path = match kind {
        ForgeKind::GitHub => ".github/workflows/wavegate.yml",
        ForgeKind::Forgejo => ".forgejo/workflows/wavegate.yml",
    };
    assert_eq!(fake.workflow_path, expected_path);
    let heard = told
        .try_recv()
        .expect("the subscriber is told of the dispatch");
    assert_eq!(heard.id, run.id);
    assert_eq!(heard.head_sha, fake.head_sha);

    let asked = env.dispatch_requests();
    let field = match kind {
        ForgeKind::GitHub => "return_run_details",
        ForgeKind::Forgejo => "return_run_info",
    };
    assert_eq!(asked[0].body.as_ref().unwrap()[field], true, "{asked:#?}");

    let state = env.client.workflow_run(&repo, run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Queued);
    assert_eq!(state.html_url, run.html_url);
    assert_eq!(
        state.head_sha.as_deref(),
        Some(fake.head_sha.as_str()),
        "the commit the run started at"
    );

    env.forge
        .set_run_status(&env.repo, run.id, "in_progress", None);
    let state = env.client.workflow_run(&repo, run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::InProgress);

    for (word, conclusion) in [
        ("success", RunConclusion::Success),
        ("failure", RunConclusion::Failure),
        ("cancelled", RunConclusion::Cancelled),
    ] {
        env.forge
            .set_run_status(&env.repo, run.id, "completed", Some(word));
        let state = env.client.workflow_run(&repo, run.id).await.unwrap();
        assert_eq!(state.status, completed(conclusion), "{word}");
        assert!(state.status.is_finished());
    }
    env.assert_conformant();
}

#[tokio::test]
async fn github_dispatch_answers_the_run_which_reads_back_as_it_moves_on() {
    the_dispatched_run_is_followed_to_its_end(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_dispatch_answers_the_run_which_reads_back_as_it_moves_on() {
    the_dispatched_run_is_followed_to_its_end(ForgeKind::Forgejo).await;
}

#[tokio::test]
async fn a_run_timed_out_on_github_reads_as_timed_out() {
    let env = Env::start(ForgeKind::GitHub).await;
    let repo = env.repo.repo_ref();
    let run = env
        .client
        .dispatch_workflow(&repo, &dispatch("wavegate.yml"))
        .await
        .unwrap();
    env.forge
        .set_run_status(&env.repo, run.id, "completed", Some("timed_out"));
    let state = env.client.workflow_run(&repo, run.id).await.unwrap();
    assert_eq!(state.status, completed(RunConclusion::TimedOut));
}

/// A cancel ends a running run; cancelling it again, once it is over, is
/// no error on either forge (GitHub answers 409, Forgejo 204).
async fn a_cancel_ends_the_run_and_a_second_is_no_error(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let repo = env.repo.repo_ref();
    let run = env
        .client
        .dispatch_workflow(&repo, &dispatch("wavegate.yml"))
        .await
        .unwrap();
    env.forge
        .set_run_status(&env.repo, run.id, "in_progress", None);

    env.client.cancel_workflow_run(&repo, run.id).await.unwrap();

    let state = env.client.workflow_run(&repo, run.id).await.unwrap();
    assert_eq!(state.status, completed(RunConclusion::Cancelled));
    env.client.cancel_workflow_run(&repo, run.id).await.unwrap();
    let fake = env.forge.run(&env.repo, run.id);
    assert_eq!(fake.conclusion.as_deref(), Some("cancelled"));
    let cancels = env
        .forge
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/cancel"))
        .count();
    assert_eq!(cancels, 2);
    env.assert_conformant();
}

#[tokio::test]
async fn github_cancel_ends_the_run() {
    a_cancel_ends_the_run_and_a_second_is_no_error(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_cancel_ends_the_run() {
    a_cancel_ends_the_run_and_a_second_is_no_error(ForgeKind::Forgejo).await;
}

#[tokio::test]
async fn a_run_is_read_in_its_own_repository_only() {
    let env = Env::start(ForgeKind::GitHub).await;
    let other = env
        .forge
        .add_github_repo("acme/other", &env.repo.clone_url, 77);
    let run = env
        .client
        .dispatch_workflow(&other.repo_ref(), &dispatch("wavegate.yml"))
        .await
        .unwrap();

    let error = env
        .client
        .workflow_run(&env.repo.repo_ref(), run.id)
        .await
        .unwrap_err();

    let text = format!("{error:#}");
    let route = format!("acme/infra/actions/runs/{}", run.id);
    assert!(text.contains(&route) && text.contains("404"), "{text}");
    assert!(env.forge.dispatches(&env.repo).is_empty());
}

/// A workflow the repository's default branch does not have is a 404 on
/// both forges; the error names the file, where it must be and the fix.
async fn a_missing_workflow_names_the_file_and_the_fix(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let repo = env.repo.repo_ref();

    let error = env
        .client
        .dispatch_workflow(&repo, &dispatch("missing.yml"))
        .await
        .unwrap_err();

    let text = format!("{error:#}");
    let dir = match kind {
        ForgeKind::GitHub => ".github/workflows",
        ForgeKind::Forgejo => ".forgejo/workflows",
    };
    assert!(text.contains("404"), "{text}");
    assert!(text.contains(&format!("{dir}/missing.yml")), "{text}");
    assert!(text.contains("wavegate init actions"), "{text}");
    assert!(text.contains("workflow_dispatch"), "{text}");
    assert!(env.forge.dispatches(&env.repo).is_empty());
    env.assert_conformant();
}

#[tokio::test]
async fn github_missing_workflow_is_an_error_that_says_what_to_do() {
    a_missing_workflow_names_the_file_and_the_fix(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_missing_workflow_is_an_error_that_says_what_to_do() {
    a_missing_workflow_names_the_file_and_the_fix(ForgeKind::Forgejo).await;
}

#[tokio::test]
async fn github_refuses_a_workflow_without_workflow_dispatch_and_the_error_says_so() {
    let env = Env::start(ForgeKind::GitHub).await;
    let repo = env.repo.repo_ref();

    let error = env
        .client
        .dispatch_workflow(&repo, &dispatch("push-only.yml"))
        .await
        .unwrap_err();

    let text = format!("{error:#}");
    assert!(text.contains("422"), "{text}");
    assert!(text.contains(".github/workflows/push-only.yml"), "{text}");
    assert!(text.contains("on: workflow_dispatch"), "{text}");
    assert!(text.contains("wavegate init actions"), "{text}");
    assert!(env.forge.dispatches(&env.repo).is_empty());
    env.assert_conformant();
}

#[tokio::test]
async fn forgejo_dispatches_a_workflow_whatever_its_triggers_as_forgejo_does() {
    // Forgejo reads no `on:` before dispatching: the bot cannot count on
    // the forge to refuse a workflow that was never meant to be dispatched.
    let env = Env::start(ForgeKind::Forgejo).await;
    let repo = env.repo.repo_ref();
    let run = env
        .client
        .dispatch_workflow(&repo, &dispatch("push-only.yml"))
        .await
        .unwrap();
    assert_eq!(env.forge.run(&env.repo, run.id).workflow, "push-only.yml");
}

#[tokio::test]
async fn github_refuses_inputs_the_workflow_does_not_declare() {
    let env = Env::start(ForgeKind::GitHub).await;
    let repo = env.repo.repo_ref();
    let mut asked = dispatch("wavegate.yml");
    asked.inputs.insert("stage".into(), "prod".into());

    let error = env
        .client
        .dispatch_workflow(&repo, &asked)
        .await
        .unwrap_err();

    let text = format!("{error:#}");
    assert!(text.contains("Unexpected inputs"), "{text}");
    assert!(text.contains("does not declare every input"), "{text}");
}

#[tokio::test]
async fn a_branch_the_repository_does_not_have_is_named() {
    let env = Env::start(ForgeKind::GitHub).await;
    let repo = env.repo.repo_ref();
    let mut asked = dispatch("wavegate.yml");
    asked.git_ref = "gone".into();
    let error = env
        .client
        .dispatch_workflow(&repo, &asked)
        .await
        .unwrap_err();
    let text = format!("{error:#}");
    assert!(text.contains("no branch `gone`"), "{text}");
}

/// A forge that starts the run but answers 204 (it does not know the field
/// asking for the run) is an error saying a run started and what is needed.
async fn a_forge_too_old_to_name_the_run_says_which_version_is_needed(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let repo = env.repo.repo_ref();
    let prefix = match kind {
        ForgeKind::GitHub => "/repos/acme/infra/actions/workflows/",
        ForgeKind::Forgejo => "/api/v1/repos/acme/infra/actions/workflows/",
    };
    env.forge.fail_next("POST", prefix, 204, &[]);

    let error = env
        .client
        .dispatch_workflow(&repo, &dispatch("wavegate.yml"))
        .await
        .unwrap_err();

    let text = format!("{error:#}");
    let (field, version) = match kind {
        ForgeKind::GitHub => ("return_run_details", "GitHub Enterprise Server 3.21"),
        ForgeKind::Forgejo => ("return_run_info", "Forgejo 11"),
    };
    assert!(text.contains("204"), "{text}");
    assert!(text.contains(field), "{text}");
    assert!(text.contains(version), "{text}");
    assert!(text.contains("the workflow run started"), "{text}");
}

#[tokio::test]
async fn github_too_old_to_name_the_run() {
    a_forge_too_old_to_name_the_run_says_which_version_is_needed(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_too_old_to_name_the_run() {
    a_forge_too_old_to_name_the_run_says_which_version_is_needed(ForgeKind::Forgejo).await;
}

#[tokio::test]
async fn a_dispatch_neither_forge_takes_is_refused_unsent() {
    let env = Env::start(ForgeKind::Forgejo).await;
    let repo = env.repo.repo_ref();
    let mut asked = dispatch(".forgejo/workflows/wavegate.yml");
    let error = env
        .client
        .dispatch_workflow(&repo, &asked)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("not a file name"), "{error}");
    asked.workflow = "wavegate.yml".into();
    asked.inputs = (0..26).map(|i| (format!("in{i}"), "x".into())).collect();
    let error = env
        .client
        .dispatch_workflow(&repo, &asked)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("25"), "{error}");
    assert!(env.dispatch_requests().is_empty());
}

/// A dispatched run whose runner handed in `log`, its step having failed.
async fn failed_run(env: &Env, log: &str) -> u64 {
    let repo = env.repo.repo_ref();
    let run = env
        .client
        .dispatch_workflow(&repo, &dispatch("wavegate.yml"))
        .await
        .unwrap();
    env.forge
        .runs()
        .step_ended(&env.repo, run.id, "Run wavegate job run", "failure", log);
    env.forge
        .set_run_status(&env.repo, run.id, "completed", Some("failure"));
    run.id
}

/// The run's one job reads back, named as the workflow names it, failed at
/// the step that failed, the ones after it skipped.
async fn a_runs_jobs_read_back_with_their_steps(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let run = failed_run(&env, "boom\n").await;

    let jobs = env
        .client
        .workflow_run_jobs(&env.repo.repo_ref(), run)
        .await
        .unwrap();

    let fake = env.forge.run(&env.repo, run);
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    let job = &jobs[0];
    assert_eq!((job.id, job.name.as_str()), (fake.job.id, "run"));
    assert_eq!(job.status, completed(RunConclusion::Failure));
    assert!(job
        .html_url
        .as_deref()
        .is_some_and(|url| url.starts_with(env.forge.url())));
    let step = |name: &str, conclusion| RunStep {
        name: name.into(),
        status: completed(conclusion),
    };
    assert_eq!(
        job.steps,
        [
            step("Set up job", RunConclusion::Success),
            step("Run wavegate job run", RunConclusion::Failure),
            step("Complete job", RunConclusion::Other("skipped".into())),
        ]
    );
    assert!(job.failed());
    assert_eq!(job.failed_step().unwrap().name, "Run wavegate job run");
    env.assert_conformant();
}

#[tokio::test]
async fn github_run_jobs_read_back_with_their_steps() {
    a_runs_jobs_read_back_with_their_steps(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_run_jobs_read_back_with_their_steps() {
    a_runs_jobs_read_back_with_their_steps(ForgeKind::Forgejo).await;
}

/// A job's log reads back whole when it is short, and only its last bytes,
/// from a whole line, when it is longer than asked for.
async fn a_jobs_log_tail_is_read_within_its_bound(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let repo = env.repo.repo_ref();
    let short = failed_run(&env, "pulling image\nError: manifest unknown\n").await;
    let long_log: String = (1..=20_000).map(|i| format!("line {i}\n")).collect();
    let long = failed_run(&env, &long_log).await;
    let job_of = |run| env.forge.run(&env.repo, run).job.id;

    let text = env
        .client
        .job_log_tail(&repo, job_of(short), 4096)
        .await
        .unwrap();
    assert_eq!(text, "pulling image\nError: manifest unknown\n");

    let tail = env
        .client
        .job_log_tail(&repo, job_of(long), 1000)
        .await
        .unwrap();
    assert!(tail.len() <= 1000 && tail.len() > 900, "{}", tail.len());
    assert!(
        tail.starts_with("line ") && tail.ends_with("line 20000\n"),
        "{tail}"
    );
    assert!(
        long_log.contains(&format!("\n{tail}")),
        "it starts at a whole line"
    );
    env.assert_conformant();
}

#[tokio::test]
async fn github_job_log_tail_is_read_within_its_bound() {
    a_jobs_log_tail_is_read_within_its_bound(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_job_log_tail_is_read_within_its_bound() {
    a_jobs_log_tail_is_read_within_its_bound(ForgeKind::Forgejo).await;
}

#[tokio::test]
async fn github_job_log_is_downloaded_where_its_redirect_points_without_the_token() {
    let env = Env::start(ForgeKind::GitHub).await;
    let run = failed_run(&env, "the end\n").await;
    let job = env.forge.run(&env.repo, run).job.id;

    let text = env
        .client
        .job_log_tail(&env.repo.repo_ref(), job, 4096)
        .await
        .unwrap();

    assert_eq!(text, "the end\n");
    let asked = env
        .forge
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with(&format!("/actions/jobs/{job}/logs")))
        .expect("the log was asked of the API");
    assert!(
        asked.headers.contains_key("authorization"),
        "the API is asked with the installation's token: {asked:#?}"
    );
    let downloads = env.forge.log_downloads();
    assert_eq!(downloads.len(), 1, "{downloads:#?}");
    assert!(
        downloads[0].path.ends_with(&format!("/{job}")),
        "{downloads:#?}"
    );
    assert!(
        !downloads[0].headers.contains_key("authorization"),
        "the redirect's host gets no token: {downloads:#?}"
    );
    env.assert_conformant();
}

/// A run or a job the repository does not have is an error naming it.
async fn a_missing_run_or_job_is_named(kind: ForgeKind) {
    let env = Env::start(kind).await;
    let repo = env.repo.repo_ref();

    let error = env
        .client
        .workflow_run_jobs(&repo, 99_999)
        .await
        .unwrap_err();
    let text = format!("{error:#}");
    assert!(
        text.contains("404") && text.contains("acme/infra has no workflow run 99999"),
        "{text}"
    );

    let error = env
        .client
        .job_log_tail(&repo, 99_999, 4096)
        .await
        .unwrap_err();
    let text = format!("{error:#}");
    assert!(
        text.contains("404") && text.contains("acme/infra has no workflow job 99999"),
        "{text}"
    );
    assert!(env.forge.log_downloads().is_empty());
    env.assert_conformant();
}

#[tokio::test]
async fn github_missing_run_or_job_is_named() {
    a_missing_run_or_job_is_named(ForgeKind::GitHub).await;
}

#[tokio::test]
async fn forgejo_missing_run_or_job_is_named() {
    a_missing_run_or_job_is_named(ForgeKind::Forgejo).await;
}

#[tokio::test]
async fn forgejo_sets_an_actions_secret_and_refuses_a_user_who_may_not() {
    let env = Env::start(ForgeKind::Forgejo).await;
    let repo = env.repo.repo_ref();
    env.client
        .set_actions_secret(&repo, "WAVEGATE_RUN_KEY", "first")
        .await
        .unwrap();
    assert_eq!(
        env.forge
            .actions_secret(&env.repo, "WAVEGATE_RUN_KEY")
            .as_deref(),
        Some("first")
    );
    env.client
        .set_actions_secret(&repo, "WAVEGATE_RUN_KEY", "second")
        .await
        .unwrap();
    assert_eq!(
        env.forge
            .actions_secret(&env.repo, "WAVEGATE_RUN_KEY")
            .as_deref(),
        Some("second"),
        "set again, it is replaced"
    );
    let puts: Vec<RecordedRequest> = env
        .forge
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(puts.len(), 2, "{puts:#?}");
    assert_eq!(
        puts[0].path,
        "/api/v1/repos/acme/infra/actions/secrets/WAVEGATE_RUN_KEY"
    );
    assert_eq!(puts[1].body.as_ref().unwrap()["data"], "second");

    env.forge.set_forgejo_bot_admin(false);
    let error = env
        .client
        .set_actions_secret(&repo, "WAVEGATE_RUN_KEY", "third")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("403"), "{error}");
    assert!(
        error.contains("write:repository") && error.contains("administer the repository"),
        "the error names the fix: {error}"
    );
    assert_eq!(
        env.forge
            .actions_secret(&env.repo, "WAVEGATE_RUN_KEY")
            .as_deref(),
        Some("second")
    );

    let github = Env::start(ForgeKind::GitHub).await;
    assert!(github
        .client
        .set_actions_secret(&github.repo.repo_ref(), "WAVEGATE_RUN_KEY", "x")
        .await
        .is_err());
    assert!(github.forge.requests().iter().all(|r| r.method != "PUT"));
    env.assert_conformant();
}
