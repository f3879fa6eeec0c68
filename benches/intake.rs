//! Load run of webhook intake against the release binary (`cargo bench
//! --bench intake`). Every figure is a ratio against a baseline measured in
//! the same run on the same server: `GET /healthz`, an HTTP round trip that
//! does no work. Then: a signed delivery wavegate ignores (signature check +
//! parse), and a signed `pull_request` closed delivery (signature, parse, and
//! the delivery plus the PR's head written to SQLite in one transaction).
//! The load generator shares the machine's cores with the server.
//!
//! Knobs: `INTAKE_SECONDS` per phase (default 5), `INTAKE_CONNECTIONS` (32).

use hmac::{Hmac, Mac};
use sha2::Sha256;
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
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("WAVEGATE_LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "WAVEGATE_DATABASE_URL",
                format!("sqlite://{}", dir.path().join("bench.db").display()),
            )
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

    /// The server's peak resident memory, from /proc.
    fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[derive(Clone)]
enum Load {
    Health,
    Delivery {
        event: &'static str,
        body: Arc<Vec<u8>>,
    },
}

struct Figures {
    requests: u64,
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

async fn phase(port: u16, load: Load, seconds: u64, connections: usize) -> Figures {
    let counter = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for connection in 0..connections {
        let (load, counter) = (load.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap();
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let started = Instant::now();
                let response = match &load {
                    Load::Health => {
                        client
                            .get(format!("http://127.0.0.1:{port}/healthz"))
                            .send()
                            .await
                    }
                    Load::Delivery { event, body } => {
                        client
                            .post(format!("http://127.0.0.1:{port}/webhooks/github"))
                            .header("x-github-event", *event)
                            .header("x-github-delivery", format!("bench-{connection}-{n}"))
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
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Figures {
        requests: all.len() as u64,
        per_second: all.len() as f64 / elapsed,
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// The store alone, in this process: what recording costs without HTTP,
/// signature or parsing, from the same number of concurrent tasks.
async fn store_only(seconds: u64, connections: usize) {
    use wavegate::forge::{CommitSha, ForgeKind, PrNumber, RepoId};
    use wavegate::store::{NewDelivery, PrHead, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("store.db").display()
    ))
    .await
    .unwrap();
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
        "{:<55} {:>9.0} req/s  ({done:>5} records)",
        "store.record_delivery in-process (no HTTP)",
        done as f64 / started.elapsed().as_secs_f64()
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds: u64 = std::env::var("INTAKE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let connections: usize = std::env::var("INTAKE_CONNECTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/github/webhooks");
    let closed =
        Arc::new(std::fs::read(fixtures.join("pull_request/closed.payload.json")).unwrap());
    let on_issue =
        Arc::new(std::fs::read(fixtures.join("issue_comment/created.payload.json")).unwrap());

    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let ready = Instant::now() + Duration::from_secs(30);
        while client
            .get(format!("http://127.0.0.1:{}/readyz", server.port))
            .send()
            .await
            .map_or(true, |r| r.status() != 200)
        {
            assert!(Instant::now() < ready, "the server did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let base = phase(server.port, Load::Health, seconds, connections).await;
        let phases = [
            ("GET /healthz (baseline)", base),
            (
                "ignored delivery: verify + parse",
                phase(server.port, Load::Delivery { event: "issue_comment", body: on_issue.clone() }, seconds, connections).await,
            ),
            (
                "pull_request closed, 28 KB: verify + parse + record",
                phase(server.port, Load::Delivery { event: "pull_request", body: closed.clone() }, seconds, connections).await,
            ),
        ];
        let baseline = phases[0].1.per_second;
        println!("intake load run: {connections} connections, {seconds} s per phase, generator and server sharing the machine");
        for (name, f) in &phases {
            println!(
                "{name:<55} {:>9.0} req/s  ({:>5} requests)  p50 {:>7.2} ms  p99 {:>7.2} ms  throughput ratio to baseline {:.2}",
                f.per_second,
                f.requests,
                f.p50.as_secs_f64() * 1e3,
                f.p99.as_secs_f64() * 1e3,
                f.per_second / baseline
            );
        }
    });
    runtime.block_on(store_only(seconds, connections));
    if let Some(kib) = server.peak_rss_kib() {
        println!(
            "server peak resident memory: {:.1} MiB",
            kib as f64 / 1024.0
        );
    }
}
