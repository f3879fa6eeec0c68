//! `wavegate ledger verify|export` run as the real binary against a database
//! written through the store: an intact ledger verifies, a row changed behind
//! wavegate's back is named by repository and seq, and exports filter by
//! repository and read back as facts.

use std::process::{Command, Output};
use tempfile::TempDir;
use wavegate::gate::ledger::{Actor, Fact, FactKind, NewFact, Source};
use wavegate::store::Store;

const INFRA: &str = "github:acme/infra";
const SITE: &str = "forgejo:acme/site";

struct Ledger {
    url: String,
    _dir: TempDir,
}

fn fact(repo: &str, gate: &str, kind: FactKind, login: &str, comment: u64) -> NewFact {
    NewFact {
        repo: repo.into(),
        gate: gate.into(),
        kind,
        digest: format!("sha256:{}", "c".repeat(64)),
        actor: Actor {
            id: comment * 10,
            login: login.into(),
        },
        at: 1_700_000_000_000 + i64::try_from(comment).unwrap(),
        source: Source::Comment { id: comment },
        data: serde_json::Value::Null,
    }
}

/// Three facts for github:acme/infra, two for forgejo:acme/site.
async fn written_ledger() -> Ledger {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("wavegate.db").display());
    let store = Store::open(&url).await.unwrap();
    for new in [
        fact(INFRA, "pr-1", FactKind::Pending, "wavegate[bot]", 1),
        fact(SITE, "pr-9", FactKind::Pending, "wavegate[bot]", 2),
        fact(INFRA, "pr-1", FactKind::Approved, "alice", 3),
        fact(SITE, "pr-9", FactKind::Refused, "bob", 4),
        fact(INFRA, "pr-1", FactKind::Spent, "wavegate[bot]", 5),
    ] {
        store.append_fact(new).await.unwrap();
    }
    Ledger { url, _dir: dir }
}

fn wavegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(args)
        .env_remove("WAVEGATE_DATABASE_URL")
        .output()
        .expect("the wavegate binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Changes a stored fact the way someone with the database file could: the
/// guard trigger refuses updates, so it is dropped first.
async fn tamper(url: &str, sql: &'static str) {
    use sqlx::Connection as _;
    let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
    sqlx::raw_sql("DROP TRIGGER facts_are_never_updated")
        .execute(&mut conn)
        .await
        .unwrap();
    let changed = sqlx::query(sql).execute(&mut conn).await.unwrap();
    assert_eq!(changed.rows_affected(), 1);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn an_intact_ledger_verifies_repository_by_repository() {
    let ledger = written_ledger().await;

    let output = wavegate(&["ledger", "verify", "--database", &ledger.url]);

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        "forgejo:acme/site: 2 facts, chain intact\ngithub:acme/infra: 3 facts, chain intact\n"
    );
}

#[tokio::test]
async fn the_database_comes_from_the_environment_when_not_given() {
    let ledger = written_ledger().await;

    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["ledger", "verify"])
        .env("WAVEGATE_DATABASE_URL", &ledger.url)
        .output()
        .unwrap();

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).contains("github:acme/infra: 3 facts, chain intact"));
}

#[tokio::test]
async fn an_approver_rewritten_in_sqlite_is_caught_and_named() {
    let ledger = written_ledger().await;
    tamper(
        &ledger.url,
        "UPDATE facts SET actor_login = 'mallory' WHERE repo = 'github:acme/infra' AND seq = 2",
    )
    .await;

    let output = wavegate(&["ledger", "verify", "--database", &ledger.url]);

    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report = stdout(&output);
    assert!(
        report.contains("forgejo:acme/site: 2 facts, chain intact"),
        "{report}"
    );
    let broken = report
        .lines()
        .find(|line| line.contains(INFRA))
        .expect("the broken repository is named");
    assert!(broken.contains("seq 2"), "{broken}");
    assert!(
        broken.contains("hash does not match its content"),
        "{broken}"
    );
}

#[tokio::test]
async fn a_verify_of_a_missing_database_fails_without_creating_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let url = format!("sqlite://{}", path.display());

    let output = wavegate(&["ledger", "verify", "--database", &url]);

    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("no database"), "{error}");
    assert!(!path.exists());
}

#[tokio::test]
async fn an_export_of_one_repository_reads_back_as_its_chain() {
    let ledger = written_ledger().await;

    let output = wavegate(&[
        "ledger",
        "export",
        "--repo",
        INFRA,
        "--database",
        &ledger.url,
    ]);

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let facts: Vec<Fact> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is a fact"))
        .collect();
    let kept: Vec<(&str, i64, FactKind)> = facts
        .iter()
        .map(|f| (f.fact.repo.as_str(), f.seq, f.fact.kind))
        .collect();
    assert_eq!(
        kept,
        [
            (INFRA, 1, FactKind::Pending),
            (INFRA, 2, FactKind::Approved),
            (INFRA, 3, FactKind::Spent)
        ]
    );
    assert_eq!(wavegate::gate::ledger::verify_chain(&facts), Ok(()));
}

#[tokio::test]
async fn an_export_of_everything_holds_every_repository() {
    let ledger = written_ledger().await;

    let output = wavegate(&["ledger", "export", "--database", &ledger.url]);

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let repos: Vec<String> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str::<Fact>(line).unwrap().fact.repo)
        .collect();
    assert_eq!(repos, [SITE, SITE, INFRA, INFRA, INFRA]);
}
