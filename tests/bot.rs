//! The bot end to end: the real `wavegate serve` binary, the fake forge over
//! HTTP, real git repositories and real plan subprocesses. Each test is one
//! story; the `Bot` below is the small language they are told in.

mod common;
mod support;

use common::Example;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::fake_forge::{FakePr, FORGEJO_BOT_TOKEN};
use support::{FakeForge, RepoHandle};
use wavegate::store::{Job, JobStatus, Store};

const GITHUB_SECRET: &str = "github-webhook-secret";
const FORGEJO_SECRET: &str = "forgejo-webhook-secret";
const INSTALLATION: u64 = 77;

/// A running `wavegate serve` with its fake forge, database and data dir.
struct Bot {
    forge: FakeForge,
    example: Example,
    dir: tempfile::TempDir,
    port: u16,
    server: Option<Child>,
    http: reqwest::Client,
    extra_env: Vec<(String, String)>,
    github_app: bool,
    deliveries: u64,
    /// Plan-log lines written while deploying the example's `main`.
    bootstrap_plans: usize,
}

impl Bot {
    async fn start() -> Self {
        Self::start_with(&[]).await
    }

    async fn start_with(env: &[(&str, &str)]) -> Self {
        Self::launch(env, true).await
    }

    /// A server with no GitHub App configured (the set-up page creates one).
    async fn start_without_app() -> Self {
        Self::launch(&[], false).await
    }

    async fn launch(env: &[(&str, &str)], github_app: bool) -> Self {
        let forge = FakeForge::start().await;
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut bot = Self {
            forge,
            example: Example::deployed(),
            dir,
            port,
            server: None,
            http: reqwest::Client::new(),
            extra_env: env
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            github_app,
            deliveries: 0,
            bootstrap_plans: 0,
        };
        bot.bootstrap_plans = bot.plans_run().len();
        bot.start_server().await;
        bot
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn database_url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("wavegate.db").display())
    }

    async fn start_server(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/test-app-key.pem");
        let mut command = Command::new(env!("CARGO_BIN_EXE_wavegate"));
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", self.dir.path())
            .env("WAVEGATE_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("WAVEGATE_DATABASE_URL", self.database_url())
            .env("WAVEGATE_DATA_DIR", self.dir.path().join("data"))
            .env("WAVEGATE_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)
            .env("WAVEGATE_GITHUB_API_URL", self.forge.url())
            .env("WAVEGATE_FORGEJO_URL", self.forge.url())
            .env("WAVEGATE_FORGEJO_TOKEN", FORGEJO_BOT_TOKEN)
            .env("WAVEGATE_FORGEJO_WEBHOOK_SECRET", FORGEJO_SECRET)
            .env("WAVEGATE_LOG", "info,wavegate=debug")
            .env("ESTATE_DIR", &self.example.estate)
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if self.github_app {
            command
                .env(
                    "WAVEGATE_GITHUB_APP_ID",
                    support::fake_forge::APP_ID.to_string(),
                )
                .env("WAVEGATE_GITHUB_PRIVATE_KEY", key);
        }
        self.server = Some(command.spawn().expect("wavegate serve starts"));
        self.until("the server is ready", || async {
            match self.http.get(self.url("/readyz")).send().await {
                Ok(r) if r.status() == 200 => Some(()),
                _ => None,
            }
        })
        .await;
    }

    /// Kills the server the hard way: no shutdown, leases left held.
    fn kill(&mut self) {
        if let Some(mut child) = self.server.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits for `probe` to answer; a deadline only so a broken build fails
    /// instead of hanging, never a claim about speed.
    async fn until<T, F, Fut>(&self, what: &str, probe: F) -> T
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(value) = probe().await {
                return value;
            }
            if Instant::now() > deadline {
                panic!("gave up waiting until {what}; server log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn store(&self) -> Store {
        Store::open(&self.database_url()).await.unwrap()
    }

    async fn jobs(&self) -> Vec<Job> {
        self.store().await.jobs().await.unwrap()
    }

    /// Waits until every job is finished (done, skipped or dead).
    async fn settle(&self) -> Vec<Job> {
        self.until("every job finished", || async {
            let jobs = self.jobs().await;
            jobs.iter()
                .all(|j| {
                    matches!(
                        j.status,
                        JobStatus::Done | JobStatus::Skipped | JobStatus::Dead
                    )
                })
                .then_some(jobs)
        })
        .await
    }

    fn github_repo(&self) -> RepoHandle {
        let url = format!("file://{}", self.example.repo.display());
        self.forge.add_github_repo("acme/infra", &url, INSTALLATION)
    }

    fn rev(&self, rev: &str) -> String {
        let out = self.example.git(&["rev-parse", rev]);
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Opens PR #`number` from `branch` onto main in the fake forge.
    fn open_pr(&self, repo: &RepoHandle, number: u64, branch: &str) -> FakePr {
        self.forge.open_pr(
            repo,
            number,
            &self.rev(branch),
            &self.rev("main"),
            branch,
            "main",
            "dev-alice",
        )
    }

    async fn deliver_github(&mut self, delivery: (String, Vec<u8>)) -> (u16, Value) {
        self.deliver_github_signed(GITHUB_SECRET, delivery).await
    }

    async fn deliver_github_signed(
        &mut self,
        secret: &str,
        (event, body): (String, Vec<u8>),
    ) -> (u16, Value) {
        self.deliveries += 1;
        let id = format!("delivery-{}", self.deliveries);
        let signature = support::sign_github(secret, &body);
        self.post_github(&event, &id, Some(&signature), body).await
    }

    async fn post_github(
        &self,
        event: &str,
        id: &str,
        signature: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .post(self.url("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", id);
        if let Some(signature) = signature {
            request = request.header("x-hub-signature-256", signature);
        }
        answer(request.body(body).send().await.unwrap()).await
    }

    async fn deliver_forgejo(&mut self, (event, body): (String, Vec<u8>)) -> (u16, Value) {
        self.deliveries += 1;
        let signature = support::sign_forgejo(FORGEJO_SECRET, &body);
        // Forgejo sends GitHub's headers too; its own must win.
        let request = self
            .http
            .post(self.url("/webhooks/forgejo"))
            .header("content-type", "application/json")
            .header("x-forgejo-event", "pull_request")
            .header("x-forgejo-event-type", event.as_str())
            .header("x-forgejo-delivery", format!("fj-{}", self.deliveries))
            .header("x-forgejo-signature", signature)
            .header("x-github-event", "pull_request")
            .header("x-hub-signature-256", "sha256=not-checked-for-forgejo")
            .body(body);
        answer(request.send().await.unwrap()).await
    }

    /// The report comment on `pr` (there must be exactly one).
    fn report(&self, repo: &RepoHandle, pr: u64) -> support::fake_forge::FakeComment {
        let mut reports: Vec<_> = self
            .forge
            .comments(repo, pr)
            .into_iter()
            .filter(|c| c.body.contains("<!-- wavegate:report -->"))
            .collect();
        assert_eq!(reports.len(), 1, "one report comment, found {reports:#?}");
        reports.remove(0)
    }

    /// A branch on top of `change` whose app asks for a bigger instance.
    fn branch_bigger_app(&self, name: &str) {
        let resources = self
            .example
            .read("change", "infra/app/resources.json")
            .replace("t3.medium", "t3.large");
        self.example.branch(
            name,
            "change",
            &[("infra/app/resources.json", Some(&resources))],
        );
    }

    /// The members the plan script ran for, in order.
    fn plans_run(&self) -> Vec<String> {
        std::fs::read_to_string(self.example.estate.join("plan-log.jsonl"))
            .unwrap_or_default()
            .lines()
            .skip(self.bootstrap_plans)
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["member"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    fn assert_conformant(&self) {
        let violations = support::conformance_violations(&self.forge.requests());
        assert!(
            violations.is_empty(),
            "requests outside the API descriptions: {violations:#?}"
        );
    }
}

impl Drop for Bot {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn digest_in(text: &str) -> String {
    let at = text.find("sha256:").expect("a digest in the report");
    text[at..at + 71].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_pr_gets_report_and_check_then_push_edits_the_same_comment() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();

    let pr = bot.open_pr(&repo, 1, "change");
    let (status, body) = bot
        .deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;

    let first = bot.report(&repo, 1);
    assert!(first.author_is_bot, "{first:?}");
    assert!(
        first.body.contains("app@dev") && first.body.contains("dns@prod"),
        "{}",
        first.body
    );
    let first_digest = digest_in(&first.body);
    let checks = bot.forge.check_runs(&repo, &pr.head_sha);
    assert_eq!(checks.len(), 1, "one check run per head: {checks:#?}");
    assert_eq!(checks[0].name, "wavegate/plan");
    assert_eq!(checks[0].conclusion.as_deref(), Some("action_required"));
    assert!(checks[0].output["summary"]
        .as_str()
        .unwrap()
        .contains(&first_digest));

    // Push: one more commit changes the app's resources; the same comment is edited.
    bot.branch_bigger_app("change-2");
    let pushed = bot.forge.push(&repo, 1, &bot.rev("change-2"));
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    bot.settle().await;

    let second = bot.report(&repo, 1);
    assert_eq!(second.id, first.id, "the report is edited in place");
    let second_digest = digest_in(&second.body);
    assert_ne!(
        second_digest, first_digest,
        "the digest moved with the push"
    );
    let checks = bot.forge.check_runs(&repo, &pushed.head_sha);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].conclusion.as_deref(), Some("action_required"));
    assert!(checks[0].output["summary"]
        .as_str()
        .unwrap()
        .contains(&second_digest));
    bot.assert_conformant();

    // Nothing secret reached the log: webhook secret, Forgejo token, installation tokens.
    let log = bot.log();
    for secret in [GITHUB_SECRET, FORGEJO_SECRET, FORGEJO_BOT_TOKEN, "ghs_fake"] {
        assert!(!log.contains(secret), "`{secret}` is in the server log");
    }
    let health = bot.http.get(bot.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_webhook_plans_once() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 2, "change");
    let (event, body) = support::github_pull_request("opened", &repo, &pr);
    let signature = support::sign_github(GITHUB_SECRET, &body);

    let first = bot
        .post_github(&event, "same-delivery", Some(&signature), body.clone())
        .await;
    let again = bot
        .post_github(&event, "same-delivery", Some(&signature), body)
        .await;
    assert_eq!(first.1["status"], "queued");
    assert_eq!(
        (again.0, again.1["status"].as_str()),
        (202, Some("duplicate"))
    );

    let jobs = bot.settle().await;
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    assert_eq!(bot.store().await.delivery_count().await.unwrap(), 1);
    bot.report(&repo, 2);
    let mut planned = bot.plans_run();
    let runs = planned.len();
    planned.dedup();
    planned.sort();
    planned.dedup();
    assert_eq!(
        planned.len(),
        runs,
        "every member planned once: {planned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_or_missing_signatures_are_refused_and_nothing_is_stored() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 3, "change");
    let (event, body) = support::github_pull_request("opened", &repo, &pr);

    let forged = support::sign_github("not-the-secret", &body);
    let (status, answer) = bot
        .post_github(&event, "d-forged", Some(&forged), body.clone())
        .await;
    assert_eq!(status, 401, "{answer}");
    let (status, answer) = bot
        .post_github(&event, "d-missing", None, body.clone())
        .await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("signature"),
        "{answer}"
    );
    let (status, _) = bot.post_github(&event, "d-empty", Some(""), body).await;
    assert_eq!(status, 401);

    let store = bot.store().await;
    assert_eq!(store.delivery_count().await.unwrap(), 0);
    assert!(store.jobs().await.unwrap().is_empty());
    assert!(bot.forge.comments(&repo, 3).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_gets_a_comment_saying_what_to_fix_and_a_failed_check() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.example.branch(
        "broken",
        "main",
        &[(
            "wavegate.toml",
            Some("[[component]]\nname = \"app\"\ndir = \"infra/app\"\ncolour = \"blue\"\n"),
        )],
    );
    let pr = bot.open_pr(&repo, 4, "broken");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    let jobs = bot.settle().await;
    assert_eq!(
        jobs[0].status,
        JobStatus::Done,
        "a repository mistake is not retried: {jobs:#?}"
    );
    assert_eq!(jobs[0].attempts, 1);

    let report = bot.report(&repo, 4);
    assert!(
        report.body.contains("wavegate.toml cannot be read"),
        "{}",
        report.body
    );
    assert!(
        report.body.contains("colour"),
        "names the field: {}",
        report.body
    );
    assert!(report.body.contains("What to do"), "{}", report.body);
    let checks = bot.forge.check_runs(&repo, &pr.head_sha);
    assert_eq!(
        checks.last().unwrap().conclusion.as_deref(),
        Some("failure")
    );
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_pr_is_refused_with_the_reason_and_nothing_runs() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 5, "change");
    let (event, body) = support::github_pull_request("opened", &repo, &pr);
    let mut payload: Value = serde_json::from_slice(&body).unwrap();
    payload["pull_request"]["head"]["repo"]["full_name"] = json!("mallory/infra");
    payload["pull_request"]["head"]["repo"]["clone_url"] =
        json!("https://fork.invalid/mallory/infra.git");
    bot.deliver_github((event, serde_json::to_vec(&payload).unwrap()))
        .await;
    bot.settle().await;

    let report = bot.report(&repo, 5);
    assert!(
        report.body.contains("forks are not planned"),
        "{}",
        report.body
    );
    assert!(report.body.contains("allow_forks"), "{}", report.body);
    let checks = bot.forge.check_runs(&repo, &pr.head_sha);
    assert_eq!(
        checks.last().unwrap().conclusion.as_deref(),
        Some("failure")
    );
    assert_eq!(
        bot.plans_run(),
        Vec::<String>::new(),
        "no plan command ran for the fork"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgejo_pr_gets_the_comment_and_a_commit_status() {
    let mut bot = Bot::start().await;
    let url = format!("file://{}", bot.example.repo.display());
    let repo = bot.forge.add_forgejo_repo("acme/infra", &url);
    let pr = bot.open_pr(&repo, 6, "change");
    let (status, body) = bot
        .deliver_forgejo(support::forgejo_pull_request("opened", &repo, &pr))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;

    let report = bot.report(&repo, 6);
    assert!(report.body.contains("sha256:"), "{}", report.body);
    let statuses = bot.forge.statuses(&repo, &pr.head_sha);
    let last = statuses.last().expect("a commit status");
    assert_eq!(
        (last.context.as_str(), last.state.as_str()),
        ("wavegate/plan", "pending")
    );
    assert!(last.description.chars().count() <= 140);
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_while_a_job_is_leased_runs_it_once_after_restart() {
    let mut bot = Bot::start_with(&[("WAVEGATE_JOB_LEASE", "2s")]).await;
    let repo = bot.github_repo();
    // The first plan of app@dev hangs (until the server is killed); later ones go through.
    let hang_once = bot.example.estate.join("hang-once");
    std::fs::write(&hang_once, "").unwrap();
    bot.example.branch(
        "slow",
        "change",
        &[(
            "infra/app/.hang-once",
            Some("hangs the first plan while $ESTATE_DIR/hang-once exists\n"),
        )],
    );
    let pr = bot.open_pr(&repo, 7, "slow");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    bot.until("the plan is running", || async {
        (!hang_once.exists()).then_some(())
    })
    .await;

    bot.kill();
    let held = bot.jobs().await;
    assert_eq!((held.len(), held[0].status), (1, JobStatus::Running));
    assert!(
        bot.forge.comments(&repo, 7).is_empty(),
        "nothing was posted before the crash"
    );

    bot.start_server().await;
    let jobs = bot.settle().await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].status, jobs[0].attempts),
        (JobStatus::Done, 2),
        "{jobs:#?}"
    );
    bot.report(&repo, 7);
    let checks = bot.forge.check_runs(&repo, &pr.head_sha);
    assert_eq!(
        checks.last().unwrap().conclusion.as_deref(),
        Some("action_required")
    );

    // The plan the first server started is an orphan now; end it.
    let pid = std::fs::read_to_string(bot.example.estate.join("hang-once.pid")).unwrap();
    let _ = Command::new("kill").arg(pid.trim()).status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_for_a_head_that_moved_on_is_skipped_as_superseded() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.branch_bigger_app("change-2");
    let opened = bot.open_pr(&repo, 8, "change");
    // The push lands on the forge before wavegate gets to the first job.
    let pushed = bot.forge.push(&repo, 8, &bot.rev("change-2"));
    bot.deliver_github(support::github_pull_request("opened", &repo, &opened))
        .await;
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    let jobs = bot.settle().await;

    assert_eq!(jobs.len(), 2, "{jobs:#?}");
    assert_eq!(jobs[0].status, JobStatus::Skipped);
    assert!(
        jobs[0]
            .outcome
            .as_deref()
            .unwrap_or("")
            .contains("superseded"),
        "{jobs:#?}"
    );
    assert_eq!(jobs[1].status, JobStatus::Done);
    assert!(
        bot.forge.check_runs(&repo, &opened.head_sha).is_empty(),
        "nothing posted for the old head"
    );
    assert_eq!(bot.forge.check_runs(&repo, &pushed.head_sha).len(), 1);
    bot.report(&repo, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_error_fails_the_attempt_and_the_retry_posts_the_report() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 9, "change");
    // A refusal the client does not retry by itself: the job's attempt fails.
    bot.forge
        .fail_next("POST", "/repos/acme/infra/issues/9/comments", 422, &[]);
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    let jobs = bot.settle().await;

    assert_eq!(
        (jobs[0].status, jobs[0].attempts),
        (JobStatus::Done, 2),
        "{jobs:#?}"
    );
    assert!(
        jobs[0].last_error.as_deref().unwrap_or("").contains("422"),
        "the error is kept: {jobs:#?}"
    );
    bot.report(&repo, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_flow_creates_the_app_and_the_bot_uses_it_without_a_restart() {
    let mut bot = Bot::start_without_app().await;
    let repo = bot.github_repo();
    let pr = bot.open_pr(&repo, 10, "change");

    // Before: a delivery signed with the App's future secret is refused.
    let early = bot
        .deliver_github_signed(
            support::fake_forge::MANIFEST_WEBHOOK_SECRET,
            support::github_pull_request("opened", &repo, &pr),
        )
        .await;
    assert_eq!(early.0, 401, "{early:?}");

    // Only the operator, who reads the server's log, can start the flow.
    let refused = bot.http.get(bot.url("/setup")).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    let log = bot.log();
    let at = log
        .find("/setup?token=")
        .expect("the log names the set-up link");
    let token: String = log[at + 13..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    let page = bot
        .http
        .get(bot.url(&format!("/setup?token={token}")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let action = format!("{}/settings/apps/new?state=", bot.forge.url());
    let at = page
        .find(&action)
        .unwrap_or_else(|| panic!("the form posts to the forge: {page}"));
    let state: String = page[at + action.len()..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    assert!(page.contains("name=\"manifest\""), "{page}");
    assert!(
        page.contains(&format!("http://127.0.0.1:{}/webhooks/github", bot.port)),
        "{page}"
    );
    assert!(
        page.contains("&quot;checks&quot;:&quot;write&quot;"),
        "{page}"
    );

    // A callback this server did not start is refused.
    let forged = bot
        .http
        .get(bot.url(&format!(
            "/setup/callback?code={}&state=0000",
            bot.forge.manifest_code()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 400);

    let done = bot
        .http
        .get(bot.url(&format!(
            "/setup/callback?code={}&state={state}",
            bot.forge.manifest_code()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    assert!(done.text().await.unwrap().contains("installations/new"));

    let stored = bot.dir.path().join("data/github-app.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&stored).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        !bot.log().contains("BEGIN RSA PRIVATE KEY"),
        "the key never reaches the log"
    );

    // After: the same server verifies with the new secret and posts as the new App.
    let (status, body) = bot
        .deliver_github_signed(
            support::fake_forge::MANIFEST_WEBHOOK_SECRET,
            support::github_pull_request("opened", &repo, &pr),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("queued")),
        "{body}"
    );
    bot.settle().await;
    assert!(bot.report(&repo, 10).author_is_bot);
    let again = bot.http.get(bot.url("/setup")).send().await.unwrap();
    assert_eq!(
        again.status(),
        409,
        "a configured server refuses a second App"
    );
    bot.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_published_fixture_is_accepted_or_ignored_as_documented() {
    let bot = Bot::start().await;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    let github = [
        ("pull_request/opened.payload.json", "pull_request", "queued"),
        (
            "pull_request/opened.with-null-body.json",
            "pull_request",
            "queued",
        ),
        (
            "pull_request/synchronize.payload.json",
            "pull_request",
            "queued",
        ),
        (
            "pull_request/closed.payload.json",
            "pull_request",
            "recorded",
        ),
        (
            "issue_comment/created.payload.json",
            "issue_comment",
            "ignored",
        ),
        (
            "issue_comment/created.with-installation.payload.json",
            "issue_comment",
            "ignored",
        ),
        (
            "issue_comment/edited.payload.json",
            "issue_comment",
            "ignored",
        ),
        (
            "pull_request_review/submitted.payload.json",
            "pull_request_review",
            "recorded",
        ),
        (
            "installation/created.payload.json",
            "installation",
            "recorded",
        ),
        ("ping/with-app_id.payload.json", "ping", "recorded"),
        // A re-run of a check on a head with no pull request: nothing to plan.
        (
            "check_run/rerequested.payload.json",
            "check_run",
            "recorded",
        ),
    ];
    for (n, (file, event, expected)) in github.iter().enumerate() {
        let body = std::fs::read(fixtures.join("github/webhooks").join(file)).unwrap();
        let signature = support::sign_github(GITHUB_SECRET, &body);
        let (status, reply) = bot
            .post_github(event, &format!("fixture-{n}"), Some(&signature), body)
            .await;
        assert_eq!(
            (status, reply["status"].as_str()),
            (202, Some(*expected)),
            "{file}: {reply}"
        );
    }
    let forgejo = [
        (
            "forgejo-pull_request-opened.json",
            "x-forgejo",
            "pull_request",
            "pull_request",
            "queued",
        ),
        (
            "forgejo-pull_request-synchronized.json",
            "x-forgejo",
            "pull_request",
            "pull_request_sync",
            "queued",
        ),
        (
            "forgejo-pull_request-merged.json",
            "x-forgejo",
            "pull_request",
            "pull_request",
            "recorded",
        ),
        (
            "gitea-pull_request_comment.json",
            "x-gitea",
            "issue_comment",
            "pull_request_comment",
            "recorded",
        ),
        (
            "gitea-issue_comment-on-issue.json",
            "x-gitea",
            "issue_comment",
            "issue_comment",
            "ignored",
        ),
        (
            "gitea-pull_request_review_approved.json",
            "x-gitea",
            "pull_request_approved",
            "pull_request_review_approved",
            "recorded",
        ),
    ];
    for (n, (file, prefix, event, event_type, expected)) in forgejo.iter().enumerate() {
        let body = std::fs::read(fixtures.join("forgejo/webhooks").join(file)).unwrap();
        let response = bot
            .http
            .post(bot.url("/webhooks/forgejo"))
            .header(format!("{prefix}-event"), *event)
            .header(format!("{prefix}-event-type"), *event_type)
            .header(format!("{prefix}-delivery"), format!("fj-fixture-{n}"))
            .header(
                format!("{prefix}-signature"),
                support::sign_forgejo(FORGEJO_SECRET, &body),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, reply) = answer(response).await;
        assert_eq!(
            (status, reply["status"].as_str()),
            (202, Some(*expected)),
            "{file}: {reply}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_or_malformed_deliveries_are_refused_with_the_reason() {
    let bot = Bot::start().await;
    let huge = vec![b' '; 26 * 1024 * 1024];
    let signature = support::sign_github(GITHUB_SECRET, &huge);
    let (status, _) = bot
        .post_github("pull_request", "too-big", Some(&signature), huge)
        .await;
    assert_eq!(status, 413);

    let garbage = br#"{"action": "opened", "pull_request": {"number": "two"}}"#.to_vec();
    let signature = support::sign_github(GITHUB_SECRET, &garbage);
    let (status, reply) = bot
        .post_github("pull_request", "garbage", Some(&signature), garbage)
        .await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("pull_request"),
        "{reply}"
    );

    let body = br#"{"zen": "hi"}"#.to_vec();
    let signature = support::sign_github(GITHUB_SECRET, &body);
    let no_event = bot
        .http
        .post(bot.url("/webhooks/github"))
        .header("x-github-delivery", "no-event")
        .header("x-hub-signature-256", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, reply) = answer(no_event).await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("x-github-event"),
        "{reply}"
    );
    assert_eq!(bot.store().await.delivery_count().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plan_is_reported_with_a_failed_check_and_not_retried() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.example.branch(
        "failing",
        "change",
        &[(
            "infra/app/.fail-plan",
            Some("provider credentials expired\n"),
        )],
    );
    let pr = bot.open_pr(&repo, 11, "failing");
    bot.deliver_github(support::github_pull_request("opened", &repo, &pr))
        .await;
    let jobs = bot.settle().await;
    assert_eq!(
        (jobs[0].status, jobs[0].attempts),
        (JobStatus::Done, 1),
        "{jobs:#?}"
    );

    let report = bot.report(&repo, 11);
    assert!(report.body.contains("failed to plan"), "{}", report.body);
    assert!(
        report.body.contains("provider credentials expired"),
        "the command's own words: {}",
        report.body
    );
    let check = bot.forge.check_runs(&repo, &pr.head_sha).pop().unwrap();
    assert_eq!(check.conclusion.as_deref(), Some("failure"));
    assert!(
        check.output["title"]
            .as_str()
            .unwrap()
            .contains("failed to plan"),
        "{check:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delivery_for_an_old_head_does_not_displace_the_new_one() {
    let mut bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.branch_bigger_app("change-2");
    let opened = bot.open_pr(&repo, 12, "change");
    let pushed = bot.forge.push(&repo, 12, &bot.rev("change-2"));
    // The push's delivery arrives first; the opening's arrives late.
    bot.deliver_github(support::github_pull_request("synchronize", &repo, &pushed))
        .await;
    bot.deliver_github(support::github_pull_request("opened", &repo, &opened))
        .await;
    let jobs = bot.settle().await;

    assert_eq!(
        (jobs[0].status, jobs[1].status),
        (JobStatus::Done, JobStatus::Skipped),
        "{jobs:#?}"
    );
    assert!(bot.forge.check_runs(&repo, &opened.head_sha).is_empty());
    let check = bot.forge.check_runs(&repo, &pushed.head_sha).pop().unwrap();
    assert_eq!(check.conclusion.as_deref(), Some("action_required"));
    let record = bot
        .store()
        .await
        .pr(&repo.repo_ref().id, wavegate::forge::PrNumber(12))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.head_sha.as_str(),
        pushed.head_sha,
        "the store follows the forge, not the late delivery"
    );
    assert_eq!(
        record.report_head.as_ref().map(|s| s.as_str()),
        Some(pushed.head_sha.as_str())
    );
}
