//! `wavegate ledger verify|export|key` run as the real binary against a
//! database written through the store: an intact ledger verifies, chain and
//! signatures; a row changed behind wavegate's back, and a row appended
//! behind its back with a correctly computed hash, are named by repository
//! and seq; exports filter by repository and read back as facts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use tempfile::TempDir;
use wavegate::config::ledger_key;
use wavegate::gate::ledger::{self, Actor, Fact, FactKind, LedgerHead, NewFact, Source};
use wavegate::model::UnixMs;
use wavegate::store::Store;

const INFRA: &str = "github:acme/infra";
const SITE: &str = "forgejo:acme/site";

struct Ledger {
    url: String,
    /// The server's data dir, holding the ledger key it signed with.
    data: PathBuf,
    public: String,
    _dir: TempDir,
}

impl Ledger {
    async fn head(&self, repo: &str) -> LedgerHead {
        let store = Store::open(&self.url).await.unwrap();
        store.ledger_head(repo).await.unwrap().unwrap()
    }

    fn key_file(&self) -> PathBuf {
        ledger_key::in_data_dir(&self.data)
    }
}

fn fact(repo: &str, gate: &str, kind: FactKind, login: &str, comment: u64) -> NewFact {
    NewFact {
        repo: repo.into(),
        gate: gate.parse().unwrap(),
        kind,
        digest: format!("sha256:{}", "c".repeat(64)).parse().unwrap(),
        actor: Actor {
            id: comment * 10,
            login: login.into(),
        },
        at: UnixMs::from_millis(1_700_000_000_000 + i64::try_from(comment).unwrap()),
        source: Source::Comment { id: comment },
        data: Default::default(),
    }
}

/// Three facts for github:acme/infra, the first written before wavegate
/// signed facts, two for forgejo:acme/site; the rest signed with the key
/// the server generated in its data dir.
async fn written_ledger() -> Ledger {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("wavegate.db").display());
    let data = dir.path().join("data");
    let unsigned = Store::open(&url).await.unwrap();
    unsigned
        .append_fact(fact(INFRA, "pr-1", FactKind::Pending, "wavegate[bot]", 1))
        .await
        .unwrap();
    let (key, _) = ledger_key::load_or_generate(&data).unwrap();
    let public = key.public().to_string();
    let store = unsigned.signing_with(Arc::new(key)).await.unwrap();
    for new in [
        fact(SITE, "pr-9", FactKind::Pending, "wavegate[bot]", 2),
        fact(INFRA, "pr-1", FactKind::Approved, "alice", 3),
        fact(SITE, "pr-9", FactKind::Refused, "bob", 4),
        fact(INFRA, "pr-1", FactKind::Spent, "wavegate[bot]", 5),
    ] {
        store.append_fact(new).await.unwrap();
    }
    Ledger {
        url,
        data,
        public,
        _dir: dir,
    }
}

/// The binary with no settings from this process's environment: the data
/// dir (where `ledger verify` looks for the server's key) is `data`.
fn wavegate_in(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(args)
        .env_remove("WAVEGATE_DATABASE_URL")
        .env_remove("WAVEGATE_LEDGER_KEY_FILE")
        .env("WAVEGATE_DATA_DIR", data)
        .output()
        .expect("the wavegate binary runs")
}

/// The binary, where no ledger key is to be found.
fn wavegate(args: &[&str]) -> Output {
    let nowhere = tempfile::tempdir().unwrap();
    wavegate_in(nowhere.path(), args)
}

/// Appends an approval the way whoever holds the database could: chained
/// after the repository's last fact with a correctly computed hash, but
/// not signed (no one but the server has the key).
pub(crate) async fn forge_approval(url: &str, repo: &str, login: &str) -> Fact {
    use sqlx::Connection as _;
    let store = Store::open(url).await.unwrap();
    let last = store.repo_facts(repo).await.unwrap().pop();
    let forged = ledger::chain(
        last.as_ref(),
        fact(repo, "pr-1", FactKind::Approved, login, 6),
    );
    let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
    sqlx::query(
        "INSERT INTO facts (repo, seq, gate, kind, digest, actor_id, actor_login, at, source, \
         data, prev, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(repo)
    .bind(forged.seq)
    .bind(forged.fact.gate.to_string())
    .bind("approved")
    .bind(forged.fact.digest.to_string())
    .bind(i64::try_from(forged.fact.actor.id).unwrap())
    .bind(login)
    .bind(forged.fact.at.millis())
    .bind(serde_json::to_string(&forged.fact.source).unwrap())
    .bind("null")
    .bind(forged.prev.as_str())
    .bind(forged.hash.as_str())
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    forged
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
async fn an_intact_ledger_verifies_chain_and_signatures_with_the_servers_key() {
    let ledger = written_ledger().await;

    let output = wavegate_in(
        &ledger.data,
        &["ledger", "verify", "--database", &ledger.url],
    );

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let (site, infra) = (ledger.head(SITE).await, ledger.head(INFRA).await);
    assert_eq!(
        stdout(&output),
        format!(
            "checking signatures with {} (from {})\n\
             forgejo:acme/site: 2 facts, chain intact, all signed; head seq 2 {}\n\
             github:acme/infra: 3 facts, chain intact, 2 signed, 1 unsigned (written before signing); head seq 3 {}\n",
            ledger.public,
            ledger.key_file().display(),
            site.hash,
            infra.hash
        )
    );
}

#[tokio::test]
async fn the_public_key_alone_verifies_offline_given_as_text_or_as_a_file() {
    let ledger = written_ledger().await;
    let printed = wavegate_in(&ledger.data, &["ledger", "key"]);
    assert_eq!(printed.status.code(), Some(0), "{printed:?}");
    assert_eq!(stdout(&printed), format!("{}\n", ledger.public));
    let data_dir = ledger.data.display().to_string();
    let key_file = ledger.key_file().display().to_string();
    for args in [["--data-dir", &data_dir], ["--key", &key_file]] {
        let printed = wavegate(&[&["ledger", "key"][..], &args[..]].concat());
        assert_eq!(stdout(&printed), format!("{}\n", ledger.public), "{args:?}");
    }
    let public_file = ledger._dir.path().join("ledger.pub");
    std::fs::write(&public_file, stdout(&printed)).unwrap();

    for key in [ledger.public.clone(), public_file.display().to_string()] {
        // Run where the server's key is nowhere to be read.
        let output = wavegate(&["ledger", "verify", "--database", &ledger.url, "--key", &key]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let report = stdout(&output);
        assert!(
            report.starts_with(&format!(
                "checking signatures with {} (from --key)\n",
                ledger.public
            )),
            "{report}"
        );
        assert!(
            report.contains("github:acme/infra: 3 facts, chain intact, 2 signed"),
            "{report}"
        );
    }
}

#[tokio::test]
async fn without_a_key_the_chain_is_checked_and_the_report_says_signatures_were_not() {
    let ledger = written_ledger().await;

    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["ledger", "verify"])
        .env("WAVEGATE_DATABASE_URL", &ledger.url)
        .env("WAVEGATE_DATA_DIR", ledger._dir.path().join("elsewhere"))
        .env_remove("WAVEGATE_LEDGER_KEY_FILE")
        .output()
        .unwrap();

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report = stdout(&output);
    assert!(
        report.contains("github:acme/infra: 3 facts, chain intact; head seq 3"),
        "{report}"
    );
    let last = report.lines().last().unwrap();
    assert!(
        last.starts_with("signatures not checked: no ledger key at "),
        "{last}"
    );
    assert!(
        last.contains("--key") && last.contains("wavegate ledger key"),
        "{last}"
    );
}

#[tokio::test]
async fn an_approval_appended_behind_wavegates_back_with_a_valid_hash_is_caught_and_named() {
    let ledger = written_ledger().await;
    let forged = forge_approval(&ledger.url, INFRA, "mallory").await;
    assert_eq!(forged.seq, 4);

    // The chain alone holds: the forger computed the hash as wavegate does.
    let chain_only = wavegate(&["ledger", "verify", "--database", &ledger.url]);
    assert_eq!(chain_only.status.code(), Some(0), "{chain_only:?}");

    let output = wavegate_in(
        &ledger.data,
        &["ledger", "verify", "--database", &ledger.url],
    );

    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report = stdout(&output);
    assert!(
        report.contains("forgejo:acme/site: 2 facts, chain intact, all signed"),
        "{report}"
    );
    let broken = report
        .lines()
        .find(|line| line.contains(INFRA))
        .expect("the broken repository is named");
    assert!(broken.contains("broken at seq 4"), "{broken}");
    assert!(
        broken.contains("not signed, though every fact after seq 1"),
        "{broken}"
    );
    assert!(
        report.contains(&format!(
            "  seq 4: approved {} at gate pr-1 by mallory (id 60)",
            forged.fact.digest
        )),
        "{report}"
    );

    // Verified with a key of the forger's own: no record says the ledger
    // was ever signed with it.
    let other = tempfile::tempdir().unwrap();
    ledger_key::load_or_generate(other.path()).unwrap();
    let wrong = wavegate_in(
        other.path(),
        &["ledger", "verify", "--database", &ledger.url],
    );
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");
    let report = stdout(&wrong);
    assert!(
        report.contains("there is no record that this ledger was ever signed with"),
        "{report}"
    );
}

#[tokio::test]
async fn the_record_of_when_signing_began_cannot_be_moved_or_removed_unnoticed() {
    use sqlx::Connection as _;
    let ledger = written_ledger().await;
    let mut conn = sqlx::SqliteConnection::connect(&ledger.url).await.unwrap();
    // Moving the pinned head past the forged fact would pass it off as
    // written before signing: the record's signature no longer holds.
    sqlx::query("UPDATE ledger_signing SET heads = replace(heads, '\"seq\":1', '\"seq\":4')")
        .execute(&mut conn)
        .await
        .unwrap();
    let moved = wavegate_in(
        &ledger.data,
        &["ledger", "verify", "--database", &ledger.url],
    );
    assert_eq!(moved.status.code(), Some(1), "{moved:?}");
    assert!(
        stdout(&moved).contains("the record of when signing with ed25519:"),
        "{}",
        stdout(&moved)
    );
    assert!(stdout(&moved).contains("is not signed by it"));

    sqlx::query("DELETE FROM ledger_signing")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let removed = wavegate_in(
        &ledger.data,
        &["ledger", "verify", "--database", &ledger.url],
    );
    assert_eq!(removed.status.code(), Some(1), "{removed:?}");
    assert!(
        stdout(&removed).contains("there is no record that this ledger was ever signed with"),
        "{}",
        stdout(&removed)
    );
}

#[tokio::test]
async fn a_public_key_that_is_not_one_and_a_missing_key_file_are_usage_errors() {
    let ledger = written_ledger().await;
    let output = wavegate(&[
        "ledger",
        "verify",
        "--database",
        &ledger.url,
        "--key",
        "ed25519:nope",
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("--key") && error.contains("not a ledger public key"),
        "{error}"
    );

    let output = wavegate(&["ledger", "key"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("there is no ledger key at"), "{error}");
    assert!(error.contains("--data-dir"), "{error}");
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
    assert!(broken.contains("broken at seq 2"), "{broken}");
    assert!(
        broken.contains("hash does not match its content"),
        "{broken}"
    );
    assert!(report.contains("  seq 2: approved"), "{report}");
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
