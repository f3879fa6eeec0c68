//! The bot harness the scenario tests are told in: the real `wavegate serve`
//! binary as a subprocess, the fake forge over HTTP, the example repository,
//! and helpers that deliver signed webhooks and wait for the jobs to finish.

use crate::support;
use crate::support::common::Example;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::fake_forge::{FakeCheckRun, FakeComment, FakePr, FakeStatus, FORGEJO_BOT_TOKEN};
use support::{FakeForge, RepoHandle};
use wavegate::gate::ledger::FactKind;
use wavegate::model::JobKind;
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
    /// Deliveries sent so far (each gets the next id).
    pub deliveries: std::sync::atomic::AtomicU64,
    /// Apply-log lines written while deploying the example's `main`.
    pub bootstrap_applies: usize,
    /// A second replica on the same (PostgreSQL) database: port and process.
    pub second: Option<(u16, Option<Child>)>,
    /// The PostgreSQL database the replicas share, dropped with the bot.
    pub postgres: Option<PostgresDatabase>,
    /// Someone else wrote to the ledger (the sandbox-off control): `settle`
    /// no longer asserts that it verifies.
    pub ledger_forged: std::sync::atomic::AtomicBool,
    /// A file every server this bot starts inherits, as this descriptor
    /// number, without close-on-exec (`start_inheriting`).
    pub inherited: Option<(std::fs::File, i32)>,
    /// This bot's share of the machine (see `MACHINE`), given back once its
    /// servers are killed.
    _machine: Share,
}

/// How the bots of the one test binary share the machine: each holds a
/// read guard; the soak (`Bot::start_replicated_alone_on`) holds the write
/// guard, so it runs beside no other bot, as it did in a binary of its own,
/// and bots asked for meanwhile wait until it is dropped. A test holds one
/// bot at a time: a second one asked for while the soak waits would wait
/// behind it.
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

enum Share {
    Shared {
        _guard: tokio::sync::RwLockReadGuard<'static, ()>,
    },
    Alone {
        _guard: tokio::sync::RwLockWriteGuard<'static, ()>,
    },
}

impl Share {
    async fn take(alone: bool) -> Self {
        if alone {
            Share::Alone {
                _guard: MACHINE.write().await,
            }
        } else {
            Share::Shared {
                _guard: MACHINE.read().await,
            }
        }
    }
}

impl Bot {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(env: &[(&str, &str)]) -> Self {
        Self::launch(env, true).await
    }

    /// A server (with `env` too) on a fresh PostgreSQL database it reaches
    /// through a link the test can cut, and the link.
    pub async fn behind_a_database_link(
        env: &[(&str, &str)],
    ) -> (Self, support::outage::DatabaseLink) {
        let database = PostgresDatabase::create().await;
        let link = support::outage::DatabaseLink::to(&database.url).await;
        let through_link = link.url_for(&database.url);
        let mut env = env.to_vec();
        env.push(("WAVEGATE_DATABASE_URL", &through_link));
        let mut bot = Bot::start_with(&env).await;
        bot.postgres = Some(database);
        (bot, link)
    }

    /// A server that inherits `file` as descriptor `fd`, without
    /// close-on-exec, as a server inherits whatever its supervisor left open.
    pub async fn start_inheriting(file: std::fs::File, fd: i32) -> Self {
        let mut bot = Self::unstarted(&[], true, false).await;
        bot.inherited = Some((file, fd));
        bot.start_server().await;
        bot
    }

    /// A server whose reconciliation sweep runs every `every` (e.g. `"1s"`).
    pub async fn reconciling_every(every: &str) -> Self {
        Self::start_with(&[("WAVEGATE_RECONCILE_EVERY", every)]).await
    }

    /// A server with no GitHub App configured (the set-up page creates one).
    pub async fn start_without_app() -> Self {
        Self::launch(&[], false).await
    }

    pub async fn launch(env: &[(&str, &str)], github_app: bool) -> Self {
        let mut bot = Self::unstarted(env, github_app, false).await;
        bot.start_server().await;
        bot
    }

    /// A server whose operator set `variable` to a file holding what
    /// `write` makes of the example estate and the bot's directory (whose
    /// paths it may name), written before the server starts.
    pub async fn start_with_file(
        env: &[(&str, &str)],
        variable: &str,
        write: impl FnOnce(&Example, &Path) -> String,
    ) -> Self {
        let mut bot = Self::unstarted(env, true, false).await;
        let file = bot.dir.path().join("operator-file.toml");
        std::fs::write(&file, write(&bot.example, bot.dir.path())).unwrap();
        bot.extra_env
            .push((variable.into(), file.display().to_string()));
        bot.start_server().await;
        bot
    }

    /// [`Bot::start_with_file`] whose runs on the forge's CI reach it at
    /// its own address (`WAVEGATE_PUBLIC_URL`), their OIDC tokens signed
    /// by the fake forge's issuer.
    pub async fn start_reachable_with_file(
        env: &[(&str, &str)],
        variable: &str,
        write: impl FnOnce(&Example, &Path) -> String,
    ) -> Self {
        let mut bot = Self::unstarted(env, true, false).await;
        let file = bot.dir.path().join("operator-file.toml");
        std::fs::write(&file, write(&bot.example, bot.dir.path())).unwrap();
        let url = format!("http://127.0.0.1:{}", bot.port);
        bot.extra_env
            .push((variable.into(), file.display().to_string()));
        bot.extra_env.push(("WAVEGATE_PUBLIC_URL".into(), url));
        bot.extra_env.push((
            "WAVEGATE_ACTIONS_OIDC_ISSUER".into(),
            bot.forge.oidc_issuer(),
        ));
        bot.start_server().await;
        bot
    }

    /// A server that is up (`/healthz`) but may not be ready (`/readyz`).
    pub async fn start_unready(env: &[(&str, &str)]) -> Self {
        let mut bot = Self::unstarted(env, true, false).await;
        bot.server = Some(bot.spawn(bot.port, "data"));
        let port = bot.port;
        bot.until("the server is up", || async {
            let url = format!("http://127.0.0.1:{port}/healthz");
            matches!(bot.http.get(url).send().await, Ok(r) if r.status() == 200).then_some(())
        })
        .await;
        bot
    }

    async fn unstarted(env: &[(&str, &str)], github_app: bool, alone: bool) -> Self {
        let machine = Share::take(alone).await;
        let forge = FakeForge::start().await;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        forge.set_app_webhook(
            &format!("http://127.0.0.1:{port}/webhooks/github"),
            GITHUB_SECRET,
        );
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
            deliveries: std::sync::atomic::AtomicU64::new(0),
            bootstrap_applies: 0,
            second: None,
            postgres: None,
            ledger_forged: std::sync::atomic::AtomicBool::new(false),
            inherited: None,
            _machine: machine,
        };
        bot.bootstrap_applies = bot.applies_run().len();
        bot
    }

    /// GET `path` of the server, as anyone: status, body and headers.
    pub async fn get_page(&self, path: &str) -> (u16, String, reqwest::header::HeaderMap) {
        let answer = self.http.get(self.url(path)).send().await.unwrap();
        let status = answer.status().as_u16();
        let headers = answer.headers().clone();
        (status, answer.text().await.unwrap(), headers)
    }

    /// GET `path` of the server's JSON API, as anyone; it must answer 200.
    pub async fn get_json(&self, path: &str) -> Value {
        let (status, body, _) = self.get_page(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Moves the server's store clock (every replica's) on by `by`: an
    /// approval's `approval_ttl` or a stage's `timeout` runs out without the
    /// test waiting for it. Every job settles first: a move would expire the
    /// lease of one still running, and another worker would take it over.
    /// The server reads the shift at every "now" (`ShiftedClock`); it is
    /// written whole, so no read sees half of it.
    pub async fn advance_clock(&self, by: Duration) {
        self.settle().await;
        self.advance_clock_unsettled(by);
    }

    /// [`Bot::advance_clock`] without settling first: for a job that waits
    /// for the clock itself (it is queued to run again later).
    pub fn advance_clock_unsettled(&self, by: Duration) {
        let file = self.clock_shift_file();
        let shifted: i64 = std::fs::read_to_string(&file)
            .map(|text| text.trim().parse().unwrap())
            .unwrap_or(0);
        let by = i64::try_from(by.as_millis()).unwrap();
        let next = file.with_extension("next");
        std::fs::write(&next, (shifted + by).to_string()).unwrap();
        std::fs::rename(&next, &file).unwrap();
    }

    fn clock_shift_file(&self) -> PathBuf {
        self.dir.path().join("clock-shift-ms")
    }

    pub fn database_url(&self) -> String {
        match &self.postgres {
            Some(database) => database.url.clone(),
            None => format!("sqlite://{}", self.dir.path().join("wavegate.db").display()),
        }
    }

    /// Two replicas of `wavegate serve` on one fresh PostgreSQL database,
    /// each with its own port, data dir and log, sharing the fake forge and
    /// the ledger key (WAVEGATE_LEDGER_KEY_FILE), as replicas must.
    pub async fn start_replicated(env: &[(&str, &str)]) -> Self {
        Self::start_replicated_on(PostgresDatabase::create().await, env).await
    }

    /// Two replicas on `database`; a `WAVEGATE_DATABASE_URL` in `env` is
    /// where the replicas reach it (a link a test can cut), while the test
    /// reads the store directly.
    pub async fn start_replicated_on(database: PostgresDatabase, env: &[(&str, &str)]) -> Self {
        Self::replicated(database, env, false).await
    }

    /// `start_replicated_on`, with the machine to itself (`MACHINE`): it
    /// waits until no other bot runs, and the bots asked for meanwhile wait
    /// until it is dropped.
    pub async fn start_replicated_alone_on(
        database: PostgresDatabase,
        env: &[(&str, &str)],
    ) -> Self {
        Self::replicated(database, env, true).await
    }

    async fn replicated(database: PostgresDatabase, env: &[(&str, &str)], alone: bool) -> Self {
        let mut env: Vec<(&str, &str)> = env.to_vec();
        if !env.iter().any(|(k, _)| *k == "WAVEGATE_DATABASE_URL") {
            env.push(("WAVEGATE_DATABASE_URL", &database.url));
        }
        let mut bot = Self::unstarted(&env, true, alone).await;
        let keys = bot.dir.path().join("ledger-key");
        wavegate::config::ledger_key::load_or_generate(&keys).unwrap();
        let key_file = wavegate::config::ledger_key::in_data_dir(&keys);
        bot.extra_env.push((
            "WAVEGATE_LEDGER_KEY_FILE".into(),
            key_file.display().to_string(),
        ));
        bot.start_server().await;
        bot.postgres = Some(database);
        bot.second = Some((free_port(), None));
        bot.start_second().await;
        bot
    }

    /// Starts (again) the second replica.
    pub async fn start_second(&mut self) {
        let (port, _) = self.second.take().expect("a replicated bot");
        let child = self.spawn(port, "second");
        self.second = Some((port, Some(child)));
        self.until_ready(port).await;
    }

    /// Starts a killed replica again (the load balancer sends it work again).
    pub async fn restart_replica(&mut self, replica: usize) {
        if replica == 0 {
            self.start_server().await;
        } else {
            self.start_second().await;
        }
    }

    /// Waits until a job runs; the replica running it, by the pid in its
    /// lease owner.
    pub async fn replica_running_a_job(&self) -> usize {
        self.until("a job is running", || async {
            let jobs = self.jobs().await;
            let owner = jobs
                .iter()
                .find(|j| j.status == JobStatus::Running)?
                .lease_owner
                .clone()?;
            (0..2).find(|&r| {
                self.pid_of(r)
                    .is_some_and(|pid| owner.contains(&format!("-{pid}-")))
            })
        })
        .await
    }

    /// The port of replica 0 (the first) or 1 (the second).
    pub fn port_of(&self, replica: usize) -> u16 {
        match replica {
            0 => self.port,
            _ => self.second.as_ref().expect("a replicated bot").0,
        }
    }

    /// The process id of a running replica.
    pub fn pid_of(&self, replica: usize) -> Option<u32> {
        match replica {
            0 => self.server.as_ref().map(Child::id),
            _ => self.second.as_ref()?.1.as_ref().map(Child::id),
        }
    }

    /// Kills a replica the hard way (SIGKILL): no shutdown, leases left held.
    pub fn kill_replica(&mut self, replica: usize) {
        let child = match replica {
            0 => self.server.take(),
            _ => self.second.as_mut().and_then(|(_, c)| c.take()),
        };
        if let Some(mut child) = child {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Signs and posts a GitHub delivery with id `id` to one replica.
    pub async fn post_github_to(
        &self,
        replica: usize,
        (event, body): &(String, Vec<u8>),
        id: &str,
    ) -> (u16, Value) {
        let signature = support::sign_github(GITHUB_SECRET, body);
        let request = self
            .http
            .post(format!(
                "http://127.0.0.1:{}/webhooks/github",
                self.port_of(replica)
            ))
            .header("content-type", "application/json")
            .header("x-github-event", event.as_str())
            .header("x-github-delivery", id)
            .header("x-hub-signature-256", signature);
        answer(request.body(body.clone()).send().await.unwrap()).await
    }

    async fn until_ready(&self, port: u16) {
        self.until("the server is ready", || async {
            match self
                .http
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => Some(()),
                _ => None,
            }
        })
        .await;
    }

    pub async fn start_server(&mut self) {
        self.server = Some(self.spawn(self.port, "data"));
        self.until_ready(self.port).await;
    }

    /// A `wavegate serve` on `port` with data dir `data` (and `data.log` for
    /// a replica other than the first).
    fn spawn(&self, port: u16, data: &str) -> Child {
        let log_path = match data {
            "data" => self.log_path(),
            other => self.dir.path().join(format!("{other}.log")),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .unwrap();
        let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/test-app-key.pem");
        let mut command = Command::new(env!("CARGO_BIN_EXE_wavegate"));
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", self.dir.path())
            .env("WAVEGATE_LISTEN", format!("127.0.0.1:{port}"))
            .env("WAVEGATE_DATABASE_URL", self.database_url())
            .env("WAVEGATE_DATA_DIR", self.dir.path().join(data))
            .env("WAVEGATE_TEST_CLOCK_SHIFT_FILE", self.clock_shift_file())
            .env("WAVEGATE_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)
            .env("WAVEGATE_GITHUB_API_URL", self.forge.url())
            .env("WAVEGATE_FORGEJO_URL", self.forge.url())
            .env("WAVEGATE_FORGEJO_TOKEN", FORGEJO_BOT_TOKEN)
            .env("WAVEGATE_FORGEJO_WEBHOOK_SECRET", FORGEJO_SECRET)
            .env("WAVEGATE_LOG", "info,wavegate=debug")
            .env("ESTATE_DIR", &self.example.estate)
            // As in production: the estate (the infrastructure's state) is
            // writable by apply commands alone; every command runs sandboxed.
            .env("WAVEGATE_SANDBOX", "bwrap")
            .env("WAVEGATE_SANDBOX_APPLY_WRITE", &self.example.estate)
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
        if let Some((file, fd)) = &self.inherited {
            use std::os::fd::AsRawFd as _;
            use std::os::unix::process::CommandExt as _;
            let (from, to) = (file.as_raw_fd(), *fd);
            // SAFETY: the child only calls dup2 (async-signal-safe) before
            // exec; the copy is inheritable (dup2 clears close-on-exec).
            unsafe {
                command.pre_exec(move || {
                    if libc::dup2(from, to) == to {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        command.spawn().expect("wavegate serve starts")
    }

    /// Kills the server (every replica) the hard way: no shutdown, leases left held.
    pub fn kill(&mut self) {
        self.kill_replica(0);
        self.kill_replica(1);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The value of `sample` (a metric's name and labels, as `/metrics`
    /// writes them) on the first replica, if it is there.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let response = self.http.get(self.url("/metrics")).send().await.ok()?;
        let text = response.text().await.ok()?;
        text.lines()
            .filter_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
            .find_map(|value| value.trim().parse().ok())
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

    /// The facts at PR `pr`'s override gate, in order: kind and digest.
    pub async fn override_facts(&self, pr: u64) -> Vec<(FactKind, String)> {
        self.store()
            .await
            .gate_facts(
                "github:acme/infra",
                &format!("pr-{pr}-override").parse().unwrap(),
            )
            .await
            .unwrap()
            .into_iter()
            .map(|f| (f.fact.kind, f.fact.digest.to_string()))
            .collect()
    }

    /// The kinds of the facts at PR `pr`'s override gate, in order.
    pub async fn override_kinds(&self, pr: u64) -> Vec<FactKind> {
        let facts = self.override_facts(pr).await;
        facts.into_iter().map(|(kind, _)| kind).collect()
    }

    pub async fn jobs(&self) -> Vec<Job> {
        self.store().await.jobs().await.unwrap()
    }

    /// The jobs of `kind`, in the store's order.
    pub async fn jobs_of(&self, kind: JobKind) -> Vec<Job> {
        let mut jobs = self.jobs().await;
        jobs.retain(|j| j.kind == kind);
        jobs
    }

    /// Waits until every job is finished (done, skipped or dead); the
    /// ledger must verify at every such point.
    pub async fn settle(&self) -> Vec<Job> {
        let jobs = self.settled().await;
        if !self.ledger_forged.load(std::sync::atomic::Ordering::SeqCst) {
            self.assert_ledger_verifies();
        }
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

    /// The example repository as `acme/infra` on GitHub, with the App installed.
    pub fn github_repo(&self) -> RepoHandle {
        let url = format!("file://{}", self.example.repo.display());
        self.forge.add_github_repo("acme/infra", &url, INSTALLATION)
    }

    /// The example repository as `acme/infra` on Forgejo.
    pub fn forgejo_repo(&self) -> RepoHandle {
        let url = format!("file://{}", self.example.repo.display());
        self.forge.add_forgejo_repo("acme/infra", &url)
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

    /// The next delivery's number (1, 2, …).
    pub fn next_delivery(&self) -> u64 {
        self.deliveries
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1
    }

    /// How many deliveries were sent.
    pub fn delivered(&self) -> u64 {
        self.deliveries.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub async fn deliver_github(&self, delivery: (String, Vec<u8>)) -> (u16, Value) {
        self.deliver_github_signed(GITHUB_SECRET, delivery).await
    }

    pub async fn deliver_github_signed(
        &self,
        secret: &str,
        (event, body): (String, Vec<u8>),
    ) -> (u16, Value) {
        let id = format!("delivery-{}", self.next_delivery());
        let signature = support::sign_github(secret, &body);
        self.post_github(&event, &id, Some(&signature), body).await
    }

    /// Has the fake forge deliver a GitHub webhook, as GitHub does, logging
    /// the attempt and its outcome in the App's delivery log; the bot's
    /// status and answer, and the delivery's guid.
    pub async fn deliver_via_forge(
        &self,
        (event, body): (String, Vec<u8>),
    ) -> (u16, Value, String) {
        self.forge.deliver_webhook(&event, body).await
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

    pub async fn deliver_forgejo(&self, (event, body): (String, Vec<u8>)) -> (u16, Value) {
        let number = self.next_delivery();
        let signature = support::sign_forgejo(FORGEJO_SECRET, &body);
        // Forgejo sends GitHub's headers too; its own must win.
        let request = self
            .http
            .post(self.url("/webhooks/forgejo"))
            .header("content-type", "application/json")
            .header("x-forgejo-event", "pull_request")
            .header("x-forgejo-event-type", event.as_str())
            .header("x-forgejo-delivery", format!("fj-{number}"))
            .header("x-forgejo-signature", signature)
            .header("x-github-event", "pull_request")
            .header("x-hub-signature-256", "sha256=not-checked-for-forgejo")
            .body(body);
        answer(request.send().await.unwrap()).await
    }

    /// The report comment on `pr` (there must be exactly one).
    pub fn report(&self, repo: &RepoHandle, pr: u64) -> FakeComment {
        let mut reports: Vec<_> = self
            .forge
            .comments(repo, pr)
            .into_iter()
            .filter(|c| c.body.contains("<!-- wavegate:report -->"))
            .collect();
        assert_eq!(reports.len(), 1, "one report comment, found {reports:#?}");
        reports.remove(0)
    }

    /// Commits on main a `wavegate.toml` with `from` replaced by `to`: the
    /// base branch's policy as a pull request opened afterwards reads it.
    pub fn edit_base_config(&self, from: &str, to: &str) {
        let config = self.example.read("main", "wavegate.toml");
        assert!(config.contains(from), "`{from}` is not in wavegate.toml");
        let edited = config.replace(from, to);
        self.example
            .branch("main", "main", &[("wavegate.toml", Some(&edited))]);
    }

    /// A branch `name` on top of `change` whose first plan of app@dev hangs
    /// (until killed); later plans go through once `until_plan_hangs` saw it.
    pub fn branch_hanging_first_plan(&self, name: &str) {
        std::fs::write(self.example.estate.join("hang-once"), "").unwrap();
        self.example.branch(
            name,
            "change",
            &[(
                "infra/app/.hang-once",
                Some("hangs the first plan while $ESTATE_DIR/hang-once exists\n"),
            )],
        );
    }

    /// A branch `name` on top of `change` whose plans of app wait while
    /// `$ESTATE_DIR/pause` exists, as it does from now until `end_pause`.
    pub fn branch_pausing_plans(&self, name: &str) {
        std::fs::write(self.example.estate.join("pause"), "").unwrap();
        self.example.branch(
            name,
            "change",
            &[(
                "infra/app/.pause",
                Some("plans wait while $ESTATE_DIR/pause exists\n"),
            )],
        );
    }

    /// Waits until a plan of a `branch_pausing_plans` branch waits.
    pub async fn until_plan_pauses(&self) {
        self.until("a plan waits", || async {
            self.command_logs_contain(".pause: waiting").then_some(())
        })
        .await;
    }

    /// Lets the plans of a `branch_pausing_plans` branch go on.
    pub fn end_pause(&self) {
        std::fs::remove_file(self.example.estate.join("pause")).unwrap();
    }

    /// Sends only the head of a delivery announcing 26 MiB (the server may
    /// close the connection mid-upload); answers the status line.
    pub async fn announce_too_large(&self) -> String {
        let head = format!(
            "POST /webhooks/github HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             x-github-event: pull_request\r\nx-github-delivery: too-big\r\n\
             x-hub-signature-256: sha256=00\r\ncontent-length: {}\r\n\r\n",
            26 * 1024 * 1024
        );
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
            .await
            .unwrap();
        let mut answer_head = vec![0u8; 12];
        tokio::io::AsyncReadExt::read_exact(&mut stream, &mut answer_head)
            .await
            .unwrap();
        String::from_utf8_lossy(&answer_head).into_owned()
    }

    /// A branch `name` on top of `change` that also adds a `cache` component
    /// (no upstream: in dev's first wave beside the network) and renames the
    /// network's subnet, so network@dev, cache@dev and database@dev plan too.
    pub fn branch_with_cache(&self, name: &str) {
        // Declared before [policy], away from any edit of the base's policy.
        let config = self.example.read("change", "wavegate.toml").replace(
            "[policy]",
            "[[component]]\nname = \"cache\"\ndir = \"infra/cache\"\n\n[policy]",
        );
        let network = self
            .example
            .read("change", "infra/network/resources.json")
            .replace("estate-${stage}-private", "estate-${stage}-private-a");
        self.example.branch(
            name,
            "change",
            &[
                ("wavegate.toml", Some(&config)),
                ("infra/network/resources.json", Some(&network)),
                (
                    "infra/cache/resources.json",
                    Some(r#"{"aws_elasticache_cluster.main": {"name": "cache-${stage}"}}"#),
                ),
                ("infra/cache/outputs.json", Some("{}")),
            ],
        );
    }

    /// A branch `name` on top of main that adds `width` components
    /// `w01`, `w02`, … with no upstream, in dev only: one wave of `width`
    /// members. Each apply sleeps `slow` seconds first (`.slow-apply`).
    pub fn branch_with_wide_wave(&self, name: &str, width: usize, slow: f64) {
        let mut components = String::new();
        let mut files = Vec::new();
        for i in 1..=width {
            let c = format!("w{i:02}");
            components.push_str(&format!(
                "[[component]]\nname = \"{c}\"\ndir = \"infra/wide/{c}\"\nstages = [\"dev\"]\n\n"
            ));
            files.push((
                format!("infra/wide/{c}/resources.json"),
                format!(r#"{{"aws_sqs_queue.{c}": {{"name": "{c}-${{stage}}"}}}}"#),
            ));
            files.push((format!("infra/wide/{c}/outputs.json"), "{}".to_owned()));
            if slow > 0.0 {
                files.push((format!("infra/wide/{c}/.slow-apply"), format!("{slow}\n")));
            }
        }
        // Declared before [policy], away from any edit of the base's policy.
        let config = self
            .example
            .read("main", "wavegate.toml")
            .replace("[policy]", &format!("{components}[policy]"));
        files.push(("wavegate.toml".to_owned(), config));
        let changes: Vec<(&str, Option<&str>)> = files
            .iter()
            .map(|(path, text)| (path.as_str(), Some(text.as_str())))
            .collect();
        self.example.branch(name, "main", &changes);
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

    /// Lands PR `pr` (from `branch`) on main by `method` and marks it merged
    /// in the forge with main's new head as its merge commit.
    pub fn merge_as(
        &self,
        method: crate::support::common::MergeMethod,
        repo: &RepoHandle,
        pr: u64,
        branch: &str,
    ) -> FakePr {
        let message = format!("Merge pull request #{pr} from {branch}");
        let sha = self.example.merge_as(method, branch, &message);
        self.forge.merge(repo, pr, &sha)
    }

    /// The members the plan script ran for, in order, as the server logs
    /// of every replica tell it (a plan cannot write the estate).
    pub fn plans_run(&self) -> Vec<String> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        logs.iter()
            .flat_map(|log| {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                text.lines()
                    .filter_map(|l| l.split_once("| estate: planning "))
                    .filter_map(|(_, rest)| rest.split_whitespace().next())
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Waits until the first plan of a `branch_hanging_first_plan` branch
    /// hangs, then lets later plans through.
    pub async fn until_plan_hangs(&self) {
        self.until("the plan hangs", || async {
            self.command_logs_contain(".hang-once: sleeping until killed")
                .then_some(())
        })
        .await;
        std::fs::remove_file(self.example.estate.join("hang-once")).unwrap();
    }

    /// Whether a replica's log holds `line` (what commands say is logged).
    fn command_logs_contain(&self, line: &str) -> bool {
        let Ok(logs) = std::fs::read_dir(self.dir.path()) else {
            return false;
        };
        logs.filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(line)))
    }

    /// Processes that carry this test's estate in their environment other
    /// than the running replicas: plan or apply commands (or their sandboxes)
    /// that outlived the server that started them.
    pub fn survivors(&self) -> Vec<String> {
        let marker = format!("ESTATE_DIR={}", self.example.estate.display());
        let replicas: Vec<u32> = (0..2).filter_map(|r| self.pid_of(r)).collect();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| *pid != std::process::id())
            .filter(|pid| !descends_from(*pid, &replicas))
            .filter_map(|pid| {
                let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let carries = environ
                    .split(|b| *b == 0)
                    .any(|var| var == marker.as_bytes());
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                carries.then(|| {
                    let status =
                        std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                    let field = |name: &str| {
                        status
                            .lines()
                            .find_map(|l| l.strip_prefix(name))
                            .map_or("?", str::trim)
                            .to_owned()
                    };
                    format!(
                        "{pid}: {} (state {}, parent {})",
                        String::from_utf8_lossy(&cmdline).replace('\0', " "),
                        field("State:"),
                        field("PPid:"),
                    )
                })
            })
            .collect()
    }

    /// Waits until nothing a killed server started is left running.
    /// On a timeout it names each survivor (state, parent, command line)
    /// rather than the server's log: what outlived the server is the clue.
    pub async fn until_no_command_survives(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let survivors = self.survivors();
            if survivors.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                // The survivors on the first line: a CI log shows a failed
                // test's first line and its last, never the middle.
                panic!(
                    "commands of a killed server still run after 90 s: {}\nlast lines of its log:\n{}",
                    survivors.join(" | "),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The members the apply script applied, in order.
    pub fn applies_run(&self) -> Vec<String> {
        self.members_logged("apply-log.jsonl", self.bootstrap_applies)
    }

    fn members_logged(&self, log: &str, skip: usize) -> Vec<String> {
        std::fs::read_to_string(self.example.estate.join(log))
            .unwrap_or_default()
            .lines()
            .skip(skip)
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["member"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    /// `$ESTATE_DIR/<stage>/<component><suffix>`, where the estate's test hooks live.
    pub fn estate_file(&self, stage: &str, component: &str, suffix: &str) -> PathBuf {
        self.example
            .estate
            .join(stage)
            .join(format!("{component}{suffix}"))
    }

    /// The member's deployed state (`$ESTATE_DIR/<stage>/<component>.json`);
    /// it must be deployed.
    pub fn deployed(&self, stage: &str, component: &str) -> Value {
        let path = self.estate_file(stage, component, ".json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{component}@{stage} is not deployed ({e})"));
        serde_json::from_str(&text).unwrap()
    }

    /// Changes a deployed attribute by hand, so a fresh plan of the member differs.
    pub fn drift(&self, stage: &str, component: &str, address: &str, attr: &str, value: Value) {
        let path = self.estate_file(stage, component, ".json");
        let mut state: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let resource = state
            .get_mut(address)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{address} is not deployed in {}", path.display()));
        resource.insert(attr.to_owned(), value);
        std::fs::write(&path, serde_json::to_string_pretty(&state).unwrap()).unwrap();
    }

    /// Makes the member's next applies pause at `mode` (`before` or `after`) until `resume_apply`.
    pub fn pause_apply(&self, stage: &str, component: &str, mode: &str) {
        let _ = std::fs::remove_file(self.estate_file(stage, component, ".paused"));
        std::fs::write(self.estate_file(stage, component, ".pause-apply"), mode).unwrap();
    }

    /// Lets a paused apply of the member go on (and later ones run through).
    pub fn resume_apply(&self, stage: &str, component: &str) {
        std::fs::remove_file(self.estate_file(stage, component, ".pause-apply")).unwrap();
    }

    /// Whether an apply of the member is paused now (it has not gone on).
    pub fn apply_paused(&self, stage: &str, component: &str) -> bool {
        self.estate_file(stage, component, ".pause-apply").exists()
            && self.estate_file(stage, component, ".paused").exists()
    }

    /// Waits until an apply of the member is paused.
    pub async fn until_apply_paused(&self, stage: &str, component: &str) {
        let paused = self.estate_file(stage, component, ".paused");
        self.until(&format!("{component}@{stage} pauses applying"), || async {
            paused.exists().then_some(())
        })
        .await
    }

    /// Makes the member's plans break the policy `rules` (`"denied": {"rules": …}`).
    pub fn deny(&self, stage: &str, component: &str, rules: &[&str]) {
        let lines: String = rules.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(self.estate_file(stage, component, ".deny"), lines).unwrap();
    }

    /// Makes the member's next apply answer `outcome` (an object, or a list used one per apply) and change nothing.
    pub fn apply_outcome(&self, stage: &str, component: &str, outcome: Value) {
        let path = self.estate_file(stage, component, ".apply-outcome");
        std::fs::write(path, outcome.to_string()).unwrap();
    }

    /// The reactions on comment `comment`, in the order they were made.
    pub fn reactions(&self, repo: &RepoHandle, comment: u64) -> Vec<String> {
        self.forge
            .reactions(repo, comment)
            .into_iter()
            .map(|r| r.content)
            .collect()
    }

    /// The check runs named `name` on `sha` (GitHub), oldest first.
    pub fn check_runs_named(&self, repo: &RepoHandle, sha: &str, name: &str) -> Vec<FakeCheckRun> {
        let mut runs = self.forge.check_runs(repo, sha);
        runs.retain(|r| r.name == name);
        runs
    }

    /// The commit statuses with context `context` on `sha` (Forgejo), oldest first.
    pub fn statuses_named(&self, repo: &RepoHandle, sha: &str, context: &str) -> Vec<FakeStatus> {
        let mut statuses = self.forge.statuses(repo, sha);
        statuses.retain(|s| s.context == context);
        statuses
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

/// Whether `pid` is one of `ancestors` or started by one of them.
fn descends_from(mut pid: u32, ancestors: &[u32]) -> bool {
    for _ in 0..64 {
        if ancestors.contains(&pid) {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // The parent is the second field after the parenthesised name.
        let Some(parent) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            return false;
        };
        if parent <= 1 {
            return false;
        }
        pid = parent;
    }
    false
}

/// A port no server listens on, and one this test process has not handed
/// out before: a server killed and restarted keeps its port, and another
/// test given that port in between would receive the first test's webhooks.
/// A listener on a [`free_port`]: the harness's own servers (the fake forge,
/// a receiver, a database link) bind here rather than to port 0, so the
/// kernel never hands one of them a port a bot was given and has not bound yet.
pub async fn listen_on_a_free_port() -> tokio::net::TcpListener {
    loop {
        if let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.1", free_port())).await {
            return listener;
        }
    }
}

fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// A fresh PostgreSQL database on the server `.ci/run` starts
/// (`WAVEGATE_TEST_POSTGRES_URL`, default the local `test` database's
/// server), dropped when the bot is.
pub struct PostgresDatabase {
    pub url: String,
    name: String,
}

static NEXT_DATABASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn postgres_admin_url() -> String {
    std::env::var("WAVEGATE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

impl PostgresDatabase {
    pub async fn create() -> Self {
        sqlx::any::install_default_drivers();
        let name = format!(
            "wavegate_bot_{}_{}",
            std::process::id(),
            NEXT_DATABASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let admin = postgres_admin_url();
        let pool = sqlx::AnyPool::connect(&admin).await.unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin} (start it, or set WAVEGATE_TEST_POSTGRES_URL): {e}")
        });
        let create = format!("CREATE DATABASE {name}");
        sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&pool)
            .await
            .unwrap();
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        Self {
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(pool) = sqlx::AnyPool::connect(&postgres_admin_url()).await {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&pool).await;
                }
            });
        })
        .join();
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
    /// The public key the server signs its ledger facts with, as
    /// `wavegate ledger key` prints it from the server's key file.
    pub fn ledger_public_key(&self) -> String {
        let from = match self
            .extra_env
            .iter()
            .find(|(name, _)| name == "WAVEGATE_LEDGER_KEY_FILE")
        {
            Some((_, file)) => ["--key".to_owned(), file.clone()],
            None => [
                "--data-dir".to_owned(),
                self.dir.path().join("data").display().to_string(),
            ],
        };
        let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(["ledger", "key"])
            .args(from)
            .output()
            .unwrap();
        assert!(output.status.success(), "ledger key failed: {output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// `wavegate ledger verify --key <the server's public key>` on this
    /// server's database, offline, as an auditor runs it.
    pub fn ledger_verify(&self) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(["ledger", "verify", "--database", &self.database_url()])
            .args(["--key", &self.ledger_public_key()])
            .env_remove("WAVEGATE_LEDGER_KEY_FILE")
            .env_remove("WAVEGATE_DATA_DIR")
            .output()
            .unwrap()
    }

    /// Every chain intact and every fact signed by the server's key.
    pub fn assert_ledger_verifies(&self) {
        let output = self.ledger_verify();
        let report = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "ledger verify failed:\n{report}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            report.starts_with("checking signatures with ed25519:") && !report.contains("unsigned"),
            "every fact is signed:\n{report}"
        );
    }
}

/// Replica 0 or 1, from the clock's low bits: where a load balancer
/// sends a delivery.
pub fn coin() -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    usize::from((nanos >> 10) & 1 == 1)
}
