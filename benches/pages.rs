//! What the pages cost over a big store (issue 41: a page and an API call
//! over 10,000 runs, p99 ≤ 50 ms), each beside a baseline answered by the
//! same server in the same run: `/healthz`, which touches no store.
//!
//! The release binary serves a SQLite store seeded with `PULLS` pull
//! requests of one repository, each with a plan and (but every twentieth)
//! an apply run in one of the states a list filters by, and two ledger
//! facts per pull request (a pending and an approval, chained). Every page
//! is asked for `ROUNDS` times in turn, one request at a time.
//!
//! `cargo bench --bench pages` prints p50 and p99 per page and the p99's
//! ratio to the baseline's.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use wavegate::forge::RepoRef;
use wavegate::gate::ledger::{self, Actor, Fact, FactData, FactKind, NewFact, Source};
use wavegate::model::{ForgeKind, RepoId, UnixMs};
use wavegate::store::Store;

const PULLS: u64 = 10_000;
const ROUNDS: usize = 300;
const REPO: &str = "acme/infra";

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("pages.db").display());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Migrated by the store itself, then seeded in one transaction.
        drop(Store::open(&database).await.unwrap());
    });
    seed(&dir.path().join("pages.db"));

    let port = free_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("WAVEGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("WAVEGATE_DATABASE_URL", &database)
        .env("WAVEGATE_DATA_DIR", dir.path().join("data"))
        .env("WAVEGATE_PUBLIC_PAGES", "on")
        .env("WAVEGATE_RECONCILE_EVERY", "off")
        .env("WAVEGATE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("the release binary starts");
    let figures = runtime.block_on(measure(port));
    stop(&mut server);

    println!(
        "pages over {PULLS} pull requests and runs (SQLite, release build), {ROUNDS} requests each, one at a time:"
    );
    let baseline = figures[0].1;
    for (path, p99, p50) in &figures {
        println!(
            "  {path:<58} p50 {:>6.2} ms  p99 {:>6.2} ms  p99 ratio {:>5.2}",
            ms(*p50),
            ms(*p99),
            p99.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn stop(server: &mut Child) {
    let _ = server.kill();
    let _ = server.wait();
}

async fn measure(port: u16) -> Vec<(&'static str, Duration, Duration)> {
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let ready = Instant::now() + Duration::from_secs(30);
    while client
        .get(url("/healthz"))
        .send()
        .await
        .map_or(true, |r| r.status() != 200)
    {
        assert!(Instant::now() < ready, "the server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let paths: [&'static str; 7] = [
        "/healthz",
        "/repos/github/acme/infra",
        "/api/v1/repos/github/acme/infra/pulls",
        "/api/v1/repos/github/acme/infra/pulls?state=failed",
        "/api/v1/repos/github/acme/infra/pulls?state=waiting&before=5000",
        "/repos/github/acme/infra/pulls/7777",
        "/api/v1/repos/github/acme/infra/pulls/7777",
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
    for round in 0..ROUNDS + 20 {
        for (i, path) in paths.iter().enumerate() {
            let started = Instant::now();
            let answer = client.get(url(path)).send().await.unwrap();
            assert_eq!(answer.status(), 200, "{path}");
            answer.bytes().await.unwrap();
            // The first rounds warm the server and the page cache.
            if round >= 20 {
                times[i].push(started.elapsed());
            }
        }
    }
    paths
        .iter()
        .zip(times)
        .map(|(path, mut times)| {
            times.sort();
            let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
            (*path, at(0.99), at(0.50))
        })
        .collect()
}

/// `PULLS` pull requests of github:acme/infra; pull request `n` has a
/// plan, two facts, and a run applied, waiting, failed or running (none for
/// every twentieth, which is open and awaits its approval).
fn seed(file: &std::path::Path) {
    let repo = RepoRef {
        id: RepoId::new(ForgeKind::GitHub, REPO),
        forge_id: 1,
        clone_url: "file:///nowhere".into(),
        installation: Some(1),
    };
    let repo_ref = serde_json::to_string(&repo).unwrap();
    let mut db = rusqlite::Connection::open(file).unwrap();
    let tx = db.transaction().unwrap();
    tx.execute(
        "INSERT INTO repositories (forge, repo, repo_ref, updated_at) VALUES ('github', ?1, ?2, 0)",
        (REPO, &repo_ref),
    )
    .unwrap();
    let sha = |n: u64, c: char| format!("{n:08x}{}", c.to_string().repeat(32));
    let digest = |n: u64| format!("sha256:{n:016x}{}", "d".repeat(48));
    let mut last: Option<Fact> = None;
    for n in 1..=PULLS {
        let run_status = match n % 20 {
            0 => None,
            1 => Some("waiting"),
            2 => Some("failed"),
            3 => Some("running"),
            _ => Some("applied"),
        };
        let report = if run_status.is_none() {
            "awaiting-approval"
        } else {
            "approved"
        };
        tx.execute(
            "INSERT INTO pull_requests (forge, repo, number, head_sha, base_ref, is_open, report_head,
                                        report_digest, report_status, updated_at)
             VALUES ('github', ?1, ?2, ?3, 'main', ?4, ?3, ?5, ?6, ?7)",
            (
                REPO,
                n as i64,
                sha(n, 'a'),
                i64::from(run_status.is_none()),
                digest(n),
                report,
                1_764_460_800_000 + n as i64,
            ),
        )
        .unwrap();
        tx.execute(
            "INSERT INTO plans (id, forge, repo, number, head_sha, base_sha, digest, change_set, created_at, report)
             VALUES (?1, 'github', ?2, ?1, ?3, ?4, ?5, '{}', 0, ?6)",
            (
                n as i64,
                REPO,
                sha(n, 'a'),
                sha(n, 'b'),
                digest(n),
                format!("<!-- wavegate:report -->\n## wavegate plan\n\npull request {n}: 3 members planned\n"),
            ),
        )
        .unwrap();
        if let Some(status) = run_status {
            tx.execute(
                "INSERT INTO apply_runs (forge, repo, number, repo_ref, merge_sha, base_sha, plan_id,
                                         digest, status, record, created_at, updated_at)
                 VALUES ('github', ?1, ?2, ?3, ?4, ?5, ?2, ?6, ?7, ?8, 0, 0)",
                (
                    REPO,
                    n as i64,
                    &repo_ref,
                    sha(n, 'e'),
                    sha(n, 'b'),
                    digest(n),
                    status,
                    RECORD,
                ),
            )
            .unwrap();
        }
        for (kind, login) in [
            (FactKind::Pending, "wavegate"),
            (FactKind::Approved, "rev-bob"),
        ] {
            let new = NewFact {
                repo: format!("github:{REPO}"),
                gate: format!("pr-{n}").parse().unwrap(),
                kind,
                digest: digest(n).parse().unwrap(),
                actor: Actor {
                    id: 7,
                    login: login.into(),
                },
                at: UnixMs::from_millis(1_764_460_800_000 + n as i64),
                source: Source::Comment { id: n },
                data: FactData::default(),
            };
            let fact = ledger::chain(last.as_ref(), new);
            tx.execute(
                "INSERT INTO facts (repo, seq, gate, kind, digest, actor_id, actor_login, at, source,
                                    data, prev, hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                rusqlite::params![
                    fact.fact.repo,
                    fact.seq,
                    fact.fact.gate.to_string(),
                    fact.fact.kind.to_string(),
                    fact.fact.digest.to_string(),
                    7_i64,
                    login,
                    fact.fact.at.millis(),
                    serde_json::to_string(&fact.fact.source).unwrap(),
                    serde_json::to_string(&fact.fact.data).unwrap(),
                    fact.prev.to_string(),
                    fact.hash.to_string(),
                ],
            )
            .unwrap();
            last = Some(fact);
        }
    }
    tx.commit().unwrap();
}

/// A run of three members in two stages, each with an output tail.
const RECORD: &str = r#"{"pr_approved_by":["rev-bob"],"members":{"app@dev":{"state":"applied","plan_digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","outputs":{}},"network@dev":{"state":"applied","plan_digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","outputs":{}},"app@prod":{"state":"not-started"}},"layout":[["dev",[["network@dev"],["app@dev"]]],["prod",[["app@prod"]]]],"printed":{"app@dev":{"text":"applied 3 changes\nok","shown":2,"lines":2}}}"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
