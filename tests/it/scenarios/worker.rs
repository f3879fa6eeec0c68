//! The worker in-process, against the fake forge and a real store: what a
//! pull request is told when its job runs out of attempts.

use crate::support;
use std::sync::Arc;
use std::time::Duration;
use support::fake_forge::APP_ID;
use support::FakeForge;
use wavegate::config::Settings;
use wavegate::forge::registry::Forges;
use wavegate::forge::PullRequest;
use wavegate::git::Workspace;
use wavegate::jobs::Task;
use wavegate::model::{CommitSha, PrNumber, User};
use wavegate::store::{JobStatus, Store};
use wavegate::worker::{Worker, WorkerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_runs_out_of_attempts_is_dead_lettered_and_the_pr_is_told() {
    let forge = FakeForge::start().await;
    let repo = forge.add_github_repo("acme/infra", "file:///nonexistent", 5);
    let head = "a".repeat(40);
    forge.open_pr(
        &repo,
        13,
        &head,
        &"b".repeat(40),
        "feature",
        "main",
        "dev-alice",
    );
    let dir = tempfile::tempdir().unwrap();
    let key =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/test-app-key.pem");
    let (api, data) = (forge.url().to_owned(), dir.path().display().to_string());
    let settings = Settings::from_lookup(|name| match name {
        "WAVEGATE_GITHUB_APP_ID" => Some(APP_ID.to_string()),
        "WAVEGATE_GITHUB_PRIVATE_KEY" => Some(key.display().to_string()),
        "WAVEGATE_GITHUB_API_URL" => Some(api.clone()),
        "WAVEGATE_DATA_DIR" => Some(data.clone()),
        _ => None,
    })
    .unwrap();
    let store = Store::open(&format!("sqlite://{}/wavegate.db", dir.path().display()))
        .await
        .unwrap();
    let worker = Worker {
        id: "test-worker".into(),
        store: store.clone(),
        forges: Arc::new(Forges::from_settings(&settings).unwrap()),
        workspace: Workspace::new(dir.path()),
        wake: Arc::default(),
        options: WorkerOptions {
            lease: Duration::from_secs(60),
            ..Default::default()
        },
        sandbox: Arc::new(wavegate::sandbox::Sandbox::probe(Default::default()).await),
        cancel: Default::default(),
        base_rules: Default::default(),
        console: Default::default(),
    };

    // The forge refuses to say what the pull request's head is, and the job
    // has one attempt left.
    let task = Task::Plan {
        repo: repo.repo_ref(),
        pr: PullRequest {
            number: PrNumber(13),
            title: "t".into(),
            author: User {
                id: 1,
                login: "dev-alice".into(),
                is_bot: false,
            },
            head_sha: CommitSha::parse(&head).unwrap(),
            head_ref: "feature".into(),
            base_ref: "main".into(),
            base_sha: CommitSha::parse(&"b".repeat(40)).unwrap(),
            from_fork: false,
            head_clone_url: None,
        },
    };
    let mut job = task.into_job();
    job.max_attempts = 1;
    let id = store.enqueue(job).await.unwrap();
    forge.fail_next("GET", "/repos/acme/infra/pulls/13", 422, &[]);

    assert!(worker.run_next().await.unwrap(), "a job was claimed");

    let job = store.job(id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Dead);
    assert!(
        job.last_error.as_deref().unwrap().contains("422"),
        "{job:?}"
    );
    let comments = forge.comments(&repo, 13);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0]
        .body
        .contains("wavegate could not plan this pull request"));
    assert!(
        comments[0].body.contains("422"),
        "the error is quoted: {}",
        comments[0].body
    );
    assert!(
        !worker.run_next().await.unwrap(),
        "a dead job is not claimed again"
    );
}
