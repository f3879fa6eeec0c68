//! What signing costs the gate ledger, each figure beside the unsigned
//! baseline measured in the same run, so read the ratios:
//! - one fact chained (its canonical JSON hashed after `prev`), against the
//!   same and an Ed25519 signature of the hash;
//! - a 1,000-fact chain verified, against the same and every signature;
//! - one fact appended through the store (a write transaction: the lock, the
//!   last fact read, the insert, the commit), unsigned against signed, on
//!   SQLite (a file, `synchronous = FULL`) and on PostgreSQL when one answers
//!   at `WAVEGATE_TEST_POSTGRES_URL` (default
//!   postgres://postgres@127.0.0.1:5432/test; a throw-away database).
//!
//! `cargo bench --bench ledger` prints the ratios at the end.

use criterion::{criterion_group, BatchSize, Criterion};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use wavegate::gate::ledger::{self, Actor, Fact, FactData, FactKind, LedgerKey, NewFact, Source};
use wavegate::model::{CommitSha, UnixMs};

fn sha(c: char) -> CommitSha {
    CommitSha::parse(&c.to_string().repeat(40)).unwrap()
}
use wavegate::store::Store;

const CHAIN: usize = 1_000;

fn approval(repo: &str, n: u64) -> NewFact {
    NewFact {
        repo: repo.into(),
        gate: "pr-42".parse().unwrap(),
        kind: FactKind::Approved,
        digest: format!("sha256:{}", "a".repeat(64)).parse().unwrap(),
        actor: Actor {
            id: 1000 + n % 7,
            login: format!("reviewer-{}", n % 7),
        },
        at: UnixMs::from_millis(1_764_460_800_000 + i64::try_from(n).unwrap()),
        source: Source::Comment { id: 9_000_000 + n },
        data: FactData {
            member: Some("app@prod".parse().unwrap()),
            ..FactData::at_plan(&sha('c'), &sha('b'))
        },
    }
}

fn key() -> LedgerKey {
    LedgerKey::from_seed(&[42; 32])
}

fn chain_of(len: usize, key: Option<&LedgerKey>) -> Vec<Fact> {
    let mut facts: Vec<Fact> = Vec::with_capacity(len);
    for n in 0..len {
        let fact = ledger::chain(facts.last(), approval("github:acme/infra", n as u64));
        facts.push(match key {
            Some(key) => key.signed(fact),
            None => fact,
        });
    }
    facts
}

fn bench_fact(c: &mut Criterion) {
    let key = key();
    let last = chain_of(1, None).pop();
    let mut group = c.benchmark_group("fact");
    group.bench_function("baseline: chain a fact", |b| {
        b.iter_batched(
            || approval("github:acme/infra", 2),
            |new| ledger::chain(last.as_ref(), new),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("chain and sign a fact", |b| {
        b.iter_batched(
            || approval("github:acme/infra", 2),
            |new| key.signed(ledger::chain(last.as_ref(), new)),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    let signed = chain_of(CHAIN, Some(&key));
    let public = key.public();
    let start = ledger::SigningStart::new(&key, UnixMs::from_millis(0), Default::default());
    let mut group = c.benchmark_group("verify");
    group.bench_function("baseline: verify a chain of 1000 facts", |b| {
        b.iter(|| ledger::verify(&signed, None).unwrap())
    });
    group.bench_function("verify a chain of 1000 facts and their signatures", |b| {
        b.iter(|| {
            let check = ledger::SignatureCheck {
                key: &public,
                start: &start,
            };
            ledger::verify(&signed, Some(check)).unwrap()
        })
    });
    group.finish();
}

/// A throw-away PostgreSQL database, or `None` (said why) when none answers.
async fn postgres() -> Option<(sqlx::AnyPool, String, String)> {
    sqlx::any::install_default_drivers();
    let admin_url = std::env::var("WAVEGATE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let admin = match sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&admin_url)
        .await
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("append on PostgreSQL skipped: {admin_url} is not reachable ({e})");
            return None;
        }
    };
    let name = format!("wavegate_bench_ledger_{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&admin)
            .await
            .ok()?;
    }
    let base = admin_url.rsplit_once('/').map_or(&*admin_url, |(b, _)| b);
    Some((admin, name.clone(), format!("{base}/{name}")))
}

fn bench_append(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    let postgres = runtime.block_on(postgres());
    let mut backends = vec![("SQLite", sqlite)];
    if let Some((_, _, url)) = &postgres {
        backends.push(("PostgreSQL", url.clone()));
    }
    let key = Arc::new(key());
    let mut group = c.benchmark_group("append");
    group.sample_size(30);
    for (backend, url) in &backends {
        let unsigned = runtime.block_on(Store::open(url)).unwrap();
        let signed = runtime
            .block_on(unsigned.clone().signing_with(key.clone()))
            .unwrap();
        for (name, store, repo) in [
            (
                format!("baseline: append an unsigned fact, {backend}"),
                &unsigned,
                "github:acme/unsigned",
            ),
            (
                format!("append a signed fact, {backend}"),
                &signed,
                "github:acme/signed",
            ),
        ] {
            let mut n = 0;
            group.bench_function(name, |b| {
                b.iter(|| {
                    n += 1;
                    runtime
                        .block_on(store.append_fact(approval(repo, n)))
                        .unwrap()
                })
            });
        }
    }
    group.finish();
    if let Some((admin, name, _)) = postgres {
        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        let _ = runtime.block_on(sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&admin));
    }
}

criterion_group!(benches, bench_fact, bench_append);

/// Reads criterion's estimate for one benchmark (mean, nanoseconds).
fn mean_ns(group: &str, name: &str) -> Option<f64> {
    // Criterion's own file-name rule: these characters become `_`.
    let dir: String = name
        .chars()
        .map(|c| if "?\"/\\*<>:|^".contains(c) { '_' } else { c })
        .collect();
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = Path::new(&target)
        .join("criterion")
        .join(group)
        .join(dir)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    println!("\nratios against the unsigned baseline of the same run (mean times):");
    for (group, subject, baseline) in [
        ("fact", "chain and sign a fact", "baseline: chain a fact"),
        (
            "verify",
            "verify a chain of 1000 facts and their signatures",
            "baseline: verify a chain of 1000 facts",
        ),
        (
            "append",
            "append a signed fact, SQLite",
            "baseline: append an unsigned fact, SQLite",
        ),
        (
            "append",
            "append a signed fact, PostgreSQL",
            "baseline: append an unsigned fact, PostgreSQL",
        ),
    ] {
        match (mean_ns(group, subject), mean_ns(group, baseline)) {
            (Some(s), Some(b)) => println!(
                "  {group}: {subject} = {:.1} µs, {baseline} = {:.1} µs, ratio {:.2}",
                s / 1e3,
                b / 1e3,
                s / b
            ),
            _ => println!(
                "  {group}: {subject}: no estimates found (filtered out, or no PostgreSQL?)"
            ),
        }
    }
}
