//! Load run of webhook intake against the release binary (`cargo bench
//! --bench intake`). Every figure is a ratio against a baseline measured in
//! the same run: a bare axum handler in this process that only checks the
//! GitHub HMAC signature of the same body and answers 202. Then, on `wavegate
//! serve` with SQLite: `GET /healthz` (an HTTP round trip that does no work),
//! a signed delivery wavegate ignores (signature check + parse), and a signed
//! `pull_request` closed delivery (signature, parse, and the delivery plus the
//! PR's head written in one transaction); on `wavegate serve` with
//! PostgreSQL: the same recorded delivery. The phases run interleaved in
//! rounds. Then the store alone in this process, and memory: the servers'
//! resident set idle and after the load, and a `wavegate serve` with 20
//! pull requests planning at once (20 workers, the tests' fake forge, the
//! bundled example's real plan subprocesses). The load generator shares the
//! machine's cores with the servers.
//!
//! Knobs: `INTAKE_SECONDS` per phase (default 6), split over `INTAKE_ROUNDS`
//! (3); `INTAKE_CONNECTIONS` (32); `INTAKE_PLANS` (20);
//! `WAVEGATE_TEST_POSTGRES_URL`, where a throw-away database is made (default
//! `postgres://postgres@127.0.0.1:5432/test`; unreachable: the PostgreSQL
//! phases are skipped, and the run says so).

// The integration tests' support (the `Bot` harness, the fake forge); this
// bench uses a part of it, the tests the rest.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "bench-secret";

struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `wavegate serve` on `database` (a SQLite file in its temp dir when `None`).
    fn start(database: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let database = database.map_or_else(
            || format!("sqlite://{}", dir.path().join("bench.db").display()),
            str::to_owned,
        );
        let child = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("WAVEGATE_LISTEN", format!("127.0.0.1:{port}"))
            .env("WAVEGATE_DATABASE_URL", database)
            .env("WAVEGATE_DATA_DIR", dir.path().join("data"))
            .env("WAVEGATE_GITHUB_WEBHOOK_SECRET", SECRET)
            .env("WAVEGATE_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("the release binary starts");
        Self {
            child,
            port,
            _dir: dir,
        }
    }

    async fn ready(&self) {
        let client = reqwest::Client::new();
        let ready = Instant::now() + Duration::from_secs(30);
        while client
            .get(format!("http://127.0.0.1:{}/readyz", self.port))
            .send()
            .await
            .map_or(true, |r| r.status() != 200)
        {
            assert!(Instant::now() < ready, "the server did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`: resident now, `VmHWM`: peak).
fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    proc_field(pid, "status", field)
}

/// A `Name: N kB` field of `/proc/<pid>/<file>`.
fn proc_field(pid: u32, file: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("?".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

/// `pid` and every process below it, from /proc.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(child);
        }
    }
    let mut tree = vec![pid];
    let mut at = 0;
    while at < tree.len() {
        tree.extend(children.get(&tree[at]).into_iter().flatten());
        at += 1;
    }
    tree
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The baseline: checks the signature over the raw body, answers 202, nothing else.
async fn bare_handler(headers: axum::http::HeaderMap, body: axum::body::Bytes) -> u16 {
    let signature = headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("sha256="))
        .and_then(|v| hex::decode(v).ok());
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(&body);
    match signature {
        Some(signature) if mac.verify_slice(&signature).is_ok() => 202,
        _ => 401,
    }
}

/// The bare handler on a runtime of its own (two threads, like a server
/// process on this machine); answers on the returned port for the rest of the run.
fn start_bare_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new().route(
                "/webhooks/github",
                axum::routing::post(|h, b| async move {
                    axum::http::StatusCode::from_u16(bare_handler(h, b).await).unwrap()
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    port
}

#[derive(Clone)]
enum Load {
    Health,
    Delivery {
        event: &'static str,
        body: Arc<Vec<u8>>,
    },
}

/// One slice of a phase: every request's latency, and how long the slice ran.
#[derive(Default)]
struct Sample {
    latencies: Vec<Duration>,
    seconds: f64,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.latencies.extend(other.latencies);
        self.seconds += other.seconds;
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.seconds
    }

    fn quantile(&mut self, q: f64) -> Duration {
        self.latencies.sort_unstable();
        let last = self.latencies.len() - 1;
        self.latencies[((self.latencies.len() as f64 * q) as usize).min(last)]
    }
}

/// Delivery ids, unique across every phase and round of the run.
static DELIVERIES: AtomicU64 = AtomicU64::new(0);

async fn phase(port: u16, load: Load, duration: Duration, connections: usize) -> Sample {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let load = load.clone();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap();
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let started = Instant::now();
                let response = match &load {
                    Load::Health => {
                        client
                            .get(format!("http://127.0.0.1:{port}/healthz"))
                            .send()
                            .await
                    }
                    Load::Delivery { event, body } => {
                        let n = DELIVERIES.fetch_add(1, Ordering::Relaxed);
                        client
                            .post(format!("http://127.0.0.1:{port}/webhooks/github"))
                            .header("x-github-event", *event)
                            .header("x-github-delivery", format!("bench-{n}"))
                            .header("x-hub-signature-256", sign(body))
                            .body(body.as_ref().clone())
                            .send()
                            .await
                    }
                };
                let status = response.expect("the server answers").status().as_u16();
                assert!(status == 200 || status == 202, "unexpected status {status}");
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    let started = Instant::now();
    let mut sample = Sample::default();
    for task in tasks {
        sample.latencies.extend(task.await.unwrap());
    }
    sample.seconds = started.elapsed().as_secs_f64();
    sample
}

/// The store alone, in this process: what recording costs without HTTP,
/// signature or parsing, from the same number of concurrent tasks.
async fn store_only(name: &str, url: &str, seconds: u64, connections: usize) {
    use wavegate::model::{CommitSha, ForgeKind, PrNumber, RepoId};
    use wavegate::store::{NewDelivery, PrHead, Store};
    let store = Store::open(url).await.unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (store, counter) = (store.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let delivery = NewDelivery {
                    forge: ForgeKind::GitHub,
                    target: "installation:1".into(),
                    delivery_id: format!("store-{n}"),
                    event_type: "pull_request".into(),
                };
                let head = PrHead {
                    repo: RepoId::new(ForgeKind::GitHub, "acme/infra"),
                    pr: PrNumber(n % 50),
                    head_sha: CommitSha::parse(&"a".repeat(40)).unwrap(),
                    base_ref: "main".into(),
                    open: true,
                    pusher: None,
                };
                store
                    .record_delivery(delivery, None, Some(head))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let done = counter.load(Ordering::Relaxed);
    println!(
        "{:<62} {:>7.0} req/s ({done:>6} records)",
        format!("store.record_delivery in-process, {name} (no HTTP)"),
        done as f64 / started.elapsed().as_secs_f64()
    );
}

/// A fresh PostgreSQL database for the run, dropped after it; `None` (and
/// why) when the server is not there.
struct PostgresDatabase {
    admin: sqlx::AnyPool,
    name: String,
    url: String,
}

impl PostgresDatabase {
    async fn create() -> Result<Self, String> {
        sqlx::any::install_default_drivers();
        let admin_url = std::env::var("WAVEGATE_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let admin = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&admin_url)
            .await
            .map_err(|e| format!("PostgreSQL at {admin_url} is not reachable ({e})"))?;
        let name = format!("wavegate_bench_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&admin)
                .await
                .map_err(|e| format!("creating a database on {admin_url}: {e}"))?;
        }
        let base = admin_url.rsplit_once('/').map_or(&*admin_url, |(b, _)| b);
        let url = format!("{base}/{name}");
        Ok(Self { admin, name, url })
    }

    async fn drop_database(self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&self.admin)
            .await;
    }
}

/// `plans` pull requests opened at once on a `wavegate serve` with as many
/// workers, against the fake forge and the bundled example: the server's
/// resident set idle and at its peak, and the peak of the server with every
/// process under it (git, the plan commands) sampled every 10 ms.
async fn planning_memory(plans: u64) {
    use wavegate::store::JobStatus;
    let workers = plans.to_string();
    let bot = support::bot::Bot::start_with(&[
        ("WAVEGATE_WORKERS", workers.as_str()),
        ("WAVEGATE_LOG", "info"),
    ])
    .await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "dev-alice", "write");
    let mut prs = Vec::new();
    for n in 1..=plans {
        // Each PR its own head: `change` plus a file the fan-out ignores.
        let branch = format!("bench-{n}");
        let note = format!("docs/bench-{n}.md");
        bot.example
            .branch(&branch, "change", &[(note.as_str(), Some("bench\n"))]);
        prs.push(bot.open_pr(&repo, n, &branch));
    }
    let pid = bot.server.as_ref().unwrap().id();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = proc_kib(pid, "VmRSS:");
    let store = bot.store().await;

    let started = Instant::now();
    for pr in &prs {
        let (status, answer) = bot
            .deliver_github(support::github_pull_request("opened", &repo, pr))
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    let (mut rss_peak, mut pss_peak) = (0u64, 0u64);
    let (mut tree_processes, mut running_peak) = (0usize, 0usize);
    let mut largest = (0u64, String::new());
    let exe = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok();
    let server_exe = exe(pid);
    loop {
        let tree = process_tree(pid);
        let rss: Vec<u64> = tree
            .iter()
            .map(|p| proc_kib(*p, "VmRSS:").unwrap_or(0))
            .collect();
        rss_peak = rss_peak.max(rss.iter().sum());
        let pss = tree
            .iter()
            .filter_map(|p| proc_field(*p, "smaps_rollup", "Pss:"));
        pss_peak = pss_peak.max(pss.sum());
        for child in &tree[1..] {
            // A child forked but not yet exec'd still counts the server's pages:
            // its executable first, then its resident set.
            let Some(child_exe) = exe(*child).filter(|e| Some(e) != server_exe.as_ref()) else {
                continue;
            };
            let kib = proc_kib(*child, "VmRSS:").unwrap_or(0);
            if kib > largest.0 {
                let name = child_exe.file_name().unwrap_or_default();
                largest = (kib, name.to_string_lossy().into_owned());
            }
        }
        tree_processes = tree_processes.max(tree.len() - 1);
        let jobs = store.jobs().await.unwrap();
        let running = jobs
            .iter()
            .filter(|j| j.status == JobStatus::Running)
            .count();
        running_peak = running_peak.max(running);
        if jobs.len() as u64 >= plans
            && jobs.iter().all(|j| {
                matches!(
                    j.status,
                    JobStatus::Done | JobStatus::Skipped | JobStatus::Dead
                )
            })
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the plans did not finish; server log:\n{}",
            bot.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    let peak = proc_kib(pid, "VmHWM:");
    let after = proc_kib(pid, "VmRSS:");
    let jobs = bot.settle().await;
    let done = jobs.iter().filter(|j| j.status == JobStatus::Done).count();
    for n in 1..=plans {
        bot.report(&repo, n); // every PR got its report
    }
    println!(
        "{plans} PRs opened at once, WAVEGATE_WORKERS={plans} (fake forge, example estate): \
         {done} jobs done in {:.1} s, at most {running_peak} running at once",
        took.as_secs_f64()
    );
    println!(
        "  serve resident memory: idle {}, peak {} (VmHWM), after {}",
        mib(idle),
        mib(peak),
        mib(after)
    );
    println!(
        "  serve + every process under it (git, plan commands; up to {tree_processes} at once), \
         sampled every 10 ms: peak sum of PSS {}, of VmRSS {}; largest process under it: {} VmRSS ({})",
        mib(Some(pss_peak)),
        mib(Some(rss_peak)),
        mib(Some(largest.0)),
        largest.1
    );
}

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds: u64 = knob("INTAKE_SECONDS", 6);
    let rounds: u32 = knob("INTAKE_ROUNDS", 3).max(1);
    let connections: usize = knob("INTAKE_CONNECTIONS", 32);
    let plans: u64 = knob("INTAKE_PLANS", 20);
    let slice = Duration::from_secs(seconds) / rounds;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/github/webhooks");
    let closed =
        Arc::new(std::fs::read(fixtures.join("pull_request/closed.payload.json")).unwrap());
    let on_issue =
        Arc::new(std::fs::read(fixtures.join("issue_comment/created.payload.json")).unwrap());
    let recorded = Load::Delivery {
        event: "pull_request",
        body: closed.clone(),
    };
    let ignored = Load::Delivery {
        event: "issue_comment",
        body: on_issue.clone(),
    };
    let kb = |body: &[u8]| body.len() / 1000;

    let bare = start_bare_server();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let postgres = PostgresDatabase::create().await;
        let sqlite = Server::start(None);
        let pg = match &postgres {
            Ok(database) => Some(Server::start(Some(&database.url))),
            Err(why) => {
                println!("PostgreSQL phase skipped: {why}");
                None
            }
        };
        let servers = [Some(&sqlite), pg.as_ref()];
        for server in servers.iter().flatten() {
            server.ready().await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = servers.map(|s| s.and_then(|s| proc_kib(s.child.id(), "VmRSS:")));

        // (name, port, load, the bare phase its ratio is against: the same body)
        let mut phases = vec![
            (format!("bare axum handler: verify only, {} KB", kb(&closed)), bare, recorded.clone(), 0),
            (format!("bare axum handler: verify only, {} KB", kb(&on_issue)), bare, ignored.clone(), 1),
            ("sqlite: GET /healthz (no body)".into(), sqlite.port, Load::Health, 0),
            (format!("sqlite: ignored issue_comment, {} KB: verify + parse", kb(&on_issue)), sqlite.port, ignored, 1),
            (format!("sqlite: pull_request closed, {} KB: verify + parse + record", kb(&closed)), sqlite.port, recorded.clone(), 0),
        ];
        if let Some(pg) = &pg {
            phases.push((format!("postgres: pull_request closed, {} KB: verify + parse + record", kb(&closed)), pg.port, recorded, 0));
        }
        // Interleaved, so a change in what else the machine runs lands on every phase alike.
        let mut samples: Vec<Sample> = phases.iter().map(|_| Sample::default()).collect();
        for _ in 0..rounds {
            for ((_, port, load, _), sample) in phases.iter().zip(&mut samples) {
                sample.add(phase(*port, load.clone(), slice, connections).await);
            }
        }

        println!("intake load run: {connections} connections, {seconds} s per phase in {rounds} interleaved rounds, generator and servers sharing the machine");
        println!("(ratio: req/s over the bare handler's with the same body; /healthz over the {} KB one)", kb(&closed));
        let rates: Vec<f64> = samples.iter().map(Sample::per_second).collect();
        for ((name, _, _, baseline), sample) in phases.iter().zip(&mut samples) {
            println!(
                "{name:<62} {:>7.0} req/s ({:>6} requests)  p50 {:>6.2} ms  p99 {:>6.2} ms  ratio {:.2}",
                sample.per_second(),
                sample.latencies.len(),
                sample.quantile(0.50).as_secs_f64() * 1e3,
                sample.quantile(0.99).as_secs_f64() * 1e3,
                sample.per_second() / rates[*baseline]
            );
        }
        for (name, (server, idle)) in ["sqlite", "postgres"].iter().zip(servers.iter().zip(idle)) {
            if let Some(server) = server {
                println!(
                    "serve on {name}, resident memory: idle {}, after the load phases {}, peak {} (VmHWM)",
                    mib(idle),
                    mib(proc_kib(server.child.id(), "VmRSS:")),
                    mib(proc_kib(server.child.id(), "VmHWM:"))
                );
            }
        }
        drop(pg);
        drop(sqlite);

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("store.db").display());
        store_only("sqlite", &url, seconds, connections).await;
        if let Ok(database) = postgres {
            store_only("postgres", &database.url, seconds, connections).await;
            database.drop_database().await;
        }

        planning_memory(plans).await;
    });
}
