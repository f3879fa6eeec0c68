//! The bot harness the scenario tests are told in: the real `wavegate serve`
//! binary as a subprocess, the fake forge over HTTP, the example repository,
//! and helpers that deliver signed webhooks and wait for the jobs to finish.

#![allow(dead_code)]

use crate::common::Example;
use crate::support;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::fake_forge::{FakePr, FORGEJO_BOT_TOKEN};
use support::{FakeForge, RepoHandle};
use wavegate::store::{Job, JobStatus, Store};

pub const GITHUB_SECRET: &str = "github-webhook-secret";
pub const FORGEJO_SECRET: &str = "forgejo-webhook-secret";
pub const INSTALLATION: u64 = 77;

/// A running `wavegate serve` with its fake forge, database and data dir.
pub struct Bot {
    pub forge: FakeForge,
    pub example: Example,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub server: Option<Child>,
    pub http: reqwest::Client,
    pub extra_env: Vec<(String, String)>,
    pub github_app: bool,
    pub deliveries: u64,
    /// Plan-log lines written while deploying the example's `main`.
    pub bootstrap_plans: usize,
}

impl Bot {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(env: &[(&str, &str)]) -> Self {
        Self::launch(env, true).await
    }

    /// A server with no GitHub App configured (the set-up page creates one).
    pub async fn start_without_app() -> Self {
        Self::launch(&[], false).await
    }

    pub async fn launch(env: &[(&str, &str)], github_app: bool) -> Self {
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

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn database_url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("wavegate.db").display())
    }

    pub async fn start_server(&mut self) {
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
    pub fn kill(&mut self) {
        if let Some(mut child) = self.server.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits for `probe` to answer; a deadline only so a broken build fails
    /// instead of hanging, never a claim about speed.
    pub async fn until<T, F, Fut>(&self, what: &str, probe: F) -> T
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

    pub async fn store(&self) -> Store {
        Store::open(&self.database_url()).await.unwrap()
    }

    pub async fn jobs(&self) -> Vec<Job> {
        self.store().await.jobs().await.unwrap()
    }

    /// Waits until every job is finished (done, skipped or dead); the
    /// ledger must verify at every such point.
    pub async fn settle(&self) -> Vec<Job> {
        let jobs = self.settled().await;
        self.assert_ledger_verifies();
        jobs
    }

    async fn settled(&self) -> Vec<Job> {
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

    pub fn github_repo(&self) -> RepoHandle {
        let url = format!("file://{}", self.example.repo.display());
        self.forge.add_github_repo("acme/infra", &url, INSTALLATION)
    }

    pub fn rev(&self, rev: &str) -> String {
        let out = self.example.git(&["rev-parse", rev]);
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Opens PR #`number` from `branch` onto main in the fake forge.
    pub fn open_pr(&self, repo: &RepoHandle, number: u64, branch: &str) -> FakePr {
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

    pub async fn deliver_github(&mut self, delivery: (String, Vec<u8>)) -> (u16, Value) {
        self.deliver_github_signed(GITHUB_SECRET, delivery).await
    }

    pub async fn deliver_github_signed(
        &mut self,
        secret: &str,
        (event, body): (String, Vec<u8>),
    ) -> (u16, Value) {
        self.deliveries += 1;
        let id = format!("delivery-{}", self.deliveries);
        let signature = support::sign_github(secret, &body);
        self.post_github(&event, &id, Some(&signature), body).await
    }

    pub async fn post_github(
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

    pub async fn deliver_forgejo(&mut self, (event, body): (String, Vec<u8>)) -> (u16, Value) {
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
    pub fn report(&self, repo: &RepoHandle, pr: u64) -> support::fake_forge::FakeComment {
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
    pub fn branch_bigger_app(&self, name: &str) {
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
    pub fn plans_run(&self) -> Vec<String> {
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

    pub fn assert_conformant(&self) {
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

pub async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub fn digest_in(text: &str) -> String {
    let at = text.find("sha256:").expect("a digest in the report");
    text[at..at + 71].to_owned()
}

impl Bot {
    /// `wavegate ledger verify` on this server's database.
    pub fn assert_ledger_verifies(&self) {
        let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(["ledger", "verify", "--database", &self.database_url()])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "ledger verify failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
