//! The gate ledger's table: facts are appended (chained to their repository's
//! last fact inside one write transaction, so concurrent appends still form
//! one gapless chain, and signed with the server's ledger key when the store
//! has one) and read back; no query here updates or deletes one. What a fact
//! means is `gate::ledger`'s business.

use super::db::{to_digest, to_i64, to_u64};
use super::Store;
use crate::gate::ledger::{
    self, Actor, Fact, FactKind, LedgerHead, LedgerKey, NewFact, PublicKey, SigningStart,
};
use crate::model::{GateId, PrNumber};
use anyhow::{anyhow, Context, Result};
use sqlx::any::AnyRow;
use sqlx::Row;

macro_rules! fact_columns {
    () => {
        "repo, seq, gate, kind, digest, actor_id, actor_login, at, source, data, prev, hash, sig"
    };
}

impl Store {
    /// Chains `new` after its repository's last fact, signs it (with the
    /// key of [`Store::signing_with`], if any) and stores it, in one
    /// `BEGIN IMMEDIATE` transaction under the writer lock.
    pub async fn append_fact(&self, new: NewFact) -> Result<Fact> {
        let _writer = self.writer.lock().await;
        let mut tx = self.begin_write().await?;
        let fact = self.append_in(&mut tx, new).await?;
        tx.commit().await?;
        Ok(fact)
    }

    /// Chains, signs and inserts `new` inside `tx`, a write transaction the
    /// caller began under the writer lock: a fact that records a change is
    /// committed with that change or not at all.
    pub(super) async fn append_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        new: NewFact,
    ) -> Result<Fact> {
        if self.backend == super::Backend::Postgres {
            // Replicas appending to one repository's chain take turns.
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtext($1))) AS locked")
                .bind(&new.repo)
                .execute(&mut **tx)
                .await
                .context("waiting for the ledger's lock")?;
        }
        let last = sqlx::query(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE repo = $1 ORDER BY seq DESC LIMIT 1"
        ))
        .bind(&new.repo)
        .fetch_optional(&mut **tx)
        .await
        .with_context(|| format!("reading the last ledger fact of {}", new.repo))?
        .as_ref()
        .map(fact_from_row)
        .transpose()?;
        let mut fact = ledger::chain(last.as_ref(), new);
        if let Some(key) = &self.ledger_key {
            fact = key.signed(fact);
        }
        sqlx::query(concat!(
            "INSERT INTO facts (",
            fact_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        ))
        .bind(&fact.fact.repo)
        .bind(fact.seq)
        .bind(fact.fact.gate.to_string())
        .bind(fact.fact.kind.as_str())
        .bind(fact.fact.digest.as_str())
        .bind(to_i64(fact.fact.actor.id, "actor id")?)
        .bind(&fact.fact.actor.login)
        .bind(fact.fact.at)
        .bind(serde_json::to_string(&fact.fact.source)?)
        .bind(serde_json::to_string(&fact.fact.data)?)
        .bind(fact.prev.as_str())
        .bind(fact.hash.as_str())
        .bind(&fact.sig)
        .execute(&mut **tx)
        .await
        .with_context(|| {
            format!(
                "appending {} fact {} to the ledger of {}",
                fact.fact.kind, fact.seq, fact.fact.repo
            )
        })?;
        Ok(fact)
    }

    /// Every fact of one gate that counts, in seq order. On a store that
    /// signs, a fact written after signing began counts only when its
    /// signature is this server's: one appended by anything else (whoever
    /// could write the database) approves nothing, and is logged.
    pub async fn gate_facts(&self, repo: &str, gate: &GateId) -> Result<Vec<Fact>> {
        let facts: Vec<Fact> = sqlx::query(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE repo = $1 AND gate = $2 ORDER BY seq"
        ))
        .bind(repo)
        .bind(gate.to_string())
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the ledger facts of {repo} gate {gate}"))?
        .iter()
        .map(fact_from_row)
        .collect::<Result<_>>()?;
        let counts = self.fact_counts(repo);
        Ok(facts
            .into_iter()
            .filter(|fact| {
                let counts = counts(fact);
                if !counts {
                    tracing::error!(
                        repo,
                        %gate,
                        seq = fact.seq,
                        "a ledger fact is not signed by this server's key, so it counts for nothing: it was written outside wavegate; `wavegate ledger verify` names it"
                    );
                }
                counts
            })
            .collect())
    }

    /// Whether a fact of `repo` counts: on a store that signs, one written
    /// after signing began must carry this server's signature.
    fn fact_counts(&self, repo: &str) -> impl Fn(&Fact) -> bool {
        let signer = self
            .ledger_key
            .as_ref()
            .zip(self.signing.as_ref())
            .map(|(key, start)| {
                (
                    key.public(),
                    start.heads.get(repo).map_or(0, |head| head.seq),
                )
            });
        move |fact: &Fact| match &signer {
            None => true,
            Some((public, signed_from)) => {
                fact.seq <= *signed_from
                    || fact
                        .sig
                        .as_deref()
                        .is_some_and(|sig| public.verifies(fact.hash.as_str(), sig))
            }
        }
    }

    /// The facts of one pull request's gates (`pr-42` and every `pr-42-…`:
    /// its stages, waves, rounds, hooks and overrides), in seq order, each
    /// with whether it counts ([`Store::gate_facts`] drops those that do not).
    pub(crate) async fn pr_facts(&self, repo: &str, pr: PrNumber) -> Result<Vec<(Fact, bool)>> {
        let gate = GateId::Pr(pr).to_string();
        let counts = self.fact_counts(repo);
        sqlx::query(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE repo = $1 AND (gate = $2 OR gate LIKE $3) ORDER BY seq"
        ))
        .bind(repo)
        .bind(&gate)
        .bind(format!("{gate}-%"))
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the ledger facts of {repo} pull request {pr}"))?
        .iter()
        .map(|row| counted(row, &counts))
        .collect()
    }

    /// Up to `limit` of a repository's facts below seq `before` (from its
    /// head when `None`), newest first, each with whether it counts.
    pub(crate) async fn repo_facts_page(
        &self,
        repo: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(Fact, bool)>> {
        let counts = self.fact_counts(repo);
        sqlx::query(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE repo = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
        ))
        .bind(repo)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading a page of the ledger of {repo}"))?
        .iter()
        .map(|row| counted(row, &counts))
        .collect()
    }

    /// The key this store signs facts with and its record of when signing
    /// began, to verify a chain with; `None` on a store that does not sign.
    pub(crate) fn signer(&self) -> Option<(PublicKey, std::sync::Arc<SigningStart>)> {
        let key = self.ledger_key.as_ref()?;
        Some((key.public(), self.signing.clone()?))
    }

    /// A repository's whole chain, in seq order.
    pub async fn repo_facts(&self, repo: &str) -> Result<Vec<Fact>> {
        sqlx::query(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE repo = $1 ORDER BY seq"
        ))
        .bind(repo)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the ledger of {repo}"))?
        .iter()
        .map(fact_from_row)
        .collect()
    }

    /// A repository's newest fact's seq and hash; `None` before its first.
    pub async fn ledger_head(&self, repo: &str) -> Result<Option<LedgerHead>> {
        let row =
            sqlx::query("SELECT seq, hash FROM facts WHERE repo = $1 ORDER BY seq DESC LIMIT 1")
                .bind(repo)
                .fetch_optional(&self.pool)
                .await
                .with_context(|| format!("reading the ledger head of {repo}"))?;
        row.map(|row| {
            Ok(LedgerHead {
                seq: row.try_get("seq")?,
                hash: to_digest(row.try_get("hash")?, "ledger head")?,
            })
        })
        .transpose()
    }

    /// Each repository's newest signed fact (by seq), sorted by repository.
    pub(crate) async fn newest_signed_facts(&self) -> Result<Vec<Fact>> {
        sqlx::query(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts f WHERE sig IS NOT NULL AND seq = \
             (SELECT MAX(seq) FROM facts g WHERE g.repo = f.repo AND g.sig IS NOT NULL) \
             ORDER BY repo"
        ))
        .fetch_all(&self.pool)
        .await
        .context("reading the newest signed fact of each repository")?
        .iter()
        .map(fact_from_row)
        .collect()
    }

    /// The record of when signing with `key` began, made now (with every
    /// repository's head) unless there is one: in one write transaction,
    /// so replicas starting together make one between them.
    pub(crate) async fn start_signing(&self, key: &LedgerKey) -> Result<SigningStart> {
        let _writer = self.writer.lock().await;
        let mut tx = self.begin_write().await?;
        if self.backend == super::Backend::Postgres {
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock(7420002)) AS locked")
                .execute(&mut *tx)
                .await
                .context("waiting for the ledger signing lock")?;
        }
        let public = key.public().to_string();
        let existing = sqlx::query(
            "SELECT public_key, since, heads, sig FROM ledger_signing WHERE public_key = $1",
        )
        .bind(&public)
        .fetch_optional(&mut *tx)
        .await
        .context("reading when ledger signing began")?;
        if let Some(row) = existing {
            tx.rollback().await?;
            return signing_start_from_row(&row);
        }
        let heads = sqlx::query(
            "SELECT f.repo, f.seq, f.hash FROM facts f \
             WHERE f.seq = (SELECT MAX(g.seq) FROM facts g WHERE g.repo = f.repo)",
        )
        .fetch_all(&mut *tx)
        .await
        .context("reading every repository's ledger head")?
        .iter()
        .map(|row| {
            let head = LedgerHead {
                seq: row.try_get("seq")?,
                hash: to_digest(row.try_get("hash")?, "ledger head")?,
            };
            Ok((row.try_get::<String, _>("repo")?, head))
        })
        .collect::<Result<_>>()?;
        let start = SigningStart::new(key, self.now(), heads);
        sqlx::query(
            "INSERT INTO ledger_signing (public_key, since, heads, sig) VALUES ($1, $2, $3, $4)",
        )
        .bind(&start.key)
        .bind(start.since)
        .bind(serde_json::to_string(&start.heads)?)
        .bind(&start.sig)
        .execute(&mut *tx)
        .await
        .context("recording when ledger signing began")?;
        tx.commit().await?;
        Ok(start)
    }

    /// The record of when signing with `key` began, as stored (unverified).
    pub async fn signing_start(&self, key: &PublicKey) -> Result<Option<SigningStart>> {
        sqlx::query(
            "SELECT public_key, since, heads, sig FROM ledger_signing WHERE public_key = $1",
        )
        .bind(key.to_string())
        .fetch_optional(&self.pool)
        .await
        .context("reading when ledger signing began")?
        .as_ref()
        .map(signing_start_from_row)
        .transpose()
    }

    /// Every repository with a fact in the ledger, sorted.
    pub async fn ledger_repos(&self) -> Result<Vec<String>> {
        sqlx::query("SELECT DISTINCT repo FROM facts ORDER BY repo")
            .fetch_all(&self.pool)
            .await
            .context("listing the repositories in the ledger")?
            .iter()
            .map(|row| Ok(row.try_get("repo")?))
            .collect()
    }
}

fn signing_start_from_row(row: &AnyRow) -> Result<SigningStart> {
    let heads: String = row.try_get("heads")?;
    Ok(SigningStart {
        key: row.try_get("public_key")?,
        since: row.try_get("since")?,
        heads: serde_json::from_str(&heads)
            .context("the record of when ledger signing began has heads that are not JSON")?,
        sig: row.try_get("sig")?,
    })
}

/// The fact of `row`, with whether it counts.
fn counted(row: &AnyRow, counts: &impl Fn(&Fact) -> bool) -> Result<(Fact, bool)> {
    let fact = fact_from_row(row)?;
    let counted = counts(&fact);
    Ok((fact, counted))
}

fn fact_from_row(row: &AnyRow) -> Result<Fact> {
    let repo: String = row.try_get("repo")?;
    let seq: i64 = row.try_get("seq")?;
    let at_fact = || format!("ledger fact {seq} of {repo}");
    let kind: String = row.try_get("kind")?;
    let source: String = row.try_get("source")?;
    let data: String = row.try_get("data")?;
    Ok(Fact {
        seq,
        fact: NewFact {
            gate: row
                .try_get::<String, _>("gate")?
                .parse()
                .map_err(|e| anyhow!("{} names no gate: {e}", at_fact()))?,
            kind: FactKind::parse(&kind)
                .ok_or_else(|| anyhow!("{} has an unknown kind `{kind}`", at_fact()))?,
            digest: row
                .try_get::<String, _>("digest")?
                .parse()
                .map_err(|e| anyhow!("{} names no digest: {e}", at_fact()))?,
            actor: Actor {
                id: to_u64(row.try_get("actor_id")?, "actor id")?,
                login: row.try_get("actor_login")?,
            },
            at: row.try_get("at")?,
            source: serde_json::from_str(&source)
                .with_context(|| format!("{} has a source that is not one", at_fact()))?,
            data: serde_json::from_str(&data)
                .with_context(|| format!("{} has data that is not JSON", at_fact()))?,
            repo: repo.clone(),
        },
        prev: to_digest(row.try_get("prev")?, &format!("prev of {}", at_fact()))?,
        hash: to_digest(row.try_get("hash")?, &format!("hash of {}", at_fact()))?,
        sig: row.try_get("sig")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::counting::{Evaluation, Scope, Tally};
    use crate::gate::ledger::{
        verify_chain, FactData, LedgerKey, LinkProblem, SignatureCheck, Signatures, Source,
    };
    use crate::model::Digest;
    use crate::store::test_db::{on_both, TestDatabase};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    const INFRA: &str = "github:acme/infra";
    const SITE: &str = "forgejo:acme/site";

    struct Fixture {
        store: Store,
        database: TestDatabase,
    }

    async fn fixture_on(backend: crate::store::Backend) -> Fixture {
        let database = TestDatabase::new(backend).await;
        Fixture {
            store: Store::open(&database.url).await.unwrap(),
            database,
        }
    }

    fn approval(repo: &str, gate: &str, actor_id: u64, comment: u64) -> NewFact {
        NewFact {
            repo: repo.into(),
            gate: gate.parse().unwrap(),
            kind: FactKind::Approved,
            digest: Digest::repeated('a').into(),
            actor: Actor {
                id: actor_id,
                login: format!("user{actor_id}"),
            },
            at: crate::model::UnixMs::from_millis(
                1_700_000_000_000 + i64::try_from(comment).unwrap(),
            ),
            source: Source::Comment { id: comment },
            data: FactData::default(),
        }
    }

    on_both!(fixture_on, each_repository_has_its_own_chain_and_facts_read_back_as_appended, #[tokio::test]);
    async fn each_repository_has_its_own_chain_and_facts_read_back_as_appended(f: Fixture) {
        let store = f.store.clone();
        let mut appended = Vec::new();
        for (n, (repo, gate)) in [
            (INFRA, "pr-1"),
            (SITE, "pr-1"),
            (INFRA, "pr-2"),
            (INFRA, "pr-1"),
            (SITE, "pr-7"),
        ]
        .into_iter()
        .enumerate()
        {
            let mut new = approval(repo, gate, 10 + n as u64, n as u64);
            new.data = FactData::default().with_reason(format!("fact {n}"));
            appended.push(store.append_fact(new).await.unwrap());
        }
        let seqs: Vec<(&str, i64)> = appended
            .iter()
            .map(|f| (f.fact.repo.as_str(), f.seq))
            .collect();
        assert_eq!(
            seqs,
            [(INFRA, 1), (SITE, 1), (INFRA, 2), (INFRA, 3), (SITE, 2)]
        );
        assert_eq!(store.ledger_repos().await.unwrap(), [SITE, INFRA]);

        let infra = store.repo_facts(INFRA).await.unwrap();
        assert_eq!(
            infra,
            [
                appended[0].clone(),
                appended[2].clone(),
                appended[3].clone()
            ]
        );
        let site = store.repo_facts(SITE).await.unwrap();
        assert_eq!(site, [appended[1].clone(), appended[4].clone()]);
        assert_eq!(verify_chain(&infra), Ok(()));
        assert_eq!(verify_chain(&site), Ok(()));

        let gate = store
            .gate_facts(INFRA, &"pr-1".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(gate, [appended[0].clone(), appended[3].clone()]);
        assert!(matches!(
            Tally::new(&gate, Scope::All).evaluate(appended[0].fact.digest.digest().unwrap(), 2),
            Evaluation::Satisfied { count: 2, .. }
        ));
    }

    on_both!(fixture_on, a_pull_requests_facts_are_those_of_its_own_gates_and_say_whether_they_count, #[tokio::test]);
    async fn a_pull_requests_facts_are_those_of_its_own_gates_and_say_whether_they_count(
        f: Fixture,
    ) {
        for (gate, comment) in [
            ("pr-4", 1),
            ("pr-42", 2),
            ("pr-4-prod", 3),
            ("pr-4-prod-wave-2", 4),
            ("pr-5", 5),
        ] {
            f.store
                .append_fact(approval(INFRA, gate, 7, comment))
                .await
                .unwrap();
        }
        f.store
            .append_fact(approval(SITE, "pr-4", 7, 6))
            .await
            .unwrap();
        let key = Arc::new(LedgerKey::from_seed(&[3; 32]));
        let store = f.store.clone().signing_with(key).await.unwrap();
        // Written outside wavegate after signing began: shown, counting for nothing.
        forge_fact(&store, approval(INFRA, "pr-4-prod", 9, 7), None).await;

        let facts = store.pr_facts(INFRA, PrNumber(4)).await.unwrap();
        let shown: Vec<(String, bool)> = facts
            .iter()
            .map(|(fact, counts)| (fact.fact.gate.to_string(), *counts))
            .collect();
        assert_eq!(
            shown,
            [
                ("pr-4".to_owned(), true),
                ("pr-4-prod".to_owned(), true),
                ("pr-4-prod-wave-2".to_owned(), true),
                ("pr-4-prod".to_owned(), false),
            ]
        );
    }

    on_both!(fixture_on, a_repositorys_ledger_is_read_a_page_at_a_time_newest_first, #[tokio::test]);
    async fn a_repositorys_ledger_is_read_a_page_at_a_time_newest_first(f: Fixture) {
        for comment in 1..=5 {
            f.store
                .append_fact(approval(INFRA, "pr-1", 7, comment))
                .await
                .unwrap();
        }
        f.store
            .append_fact(approval(SITE, "pr-1", 7, 6))
            .await
            .unwrap();
        let page = |before: Option<i64>| {
            let store = f.store.clone();
            async move {
                store
                    .repo_facts_page(INFRA, before, 2)
                    .await
                    .unwrap()
                    .iter()
                    .map(|(fact, counts)| {
                        assert!(counts);
                        fact.seq
                    })
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(page(None).await, [5, 4]);
        assert_eq!(page(Some(4)).await, [3, 2]);
        assert_eq!(page(Some(2)).await, [1]);
    }

    on_both!(fixture_on, the_database_refuses_to_change_or_remove_a_fact, #[tokio::test]);
    async fn the_database_refuses_to_change_or_remove_a_fact(f: Fixture) {
        let store = f.store.clone();
        store
            .append_fact(approval(INFRA, "pr-1", 1, 1))
            .await
            .unwrap();
        let update = sqlx::query("UPDATE facts SET actor_login = 'mallory'")
            .execute(&store.pool)
            .await;
        assert!(update.unwrap_err().to_string().contains("append-only"));
        let delete = sqlx::query("DELETE FROM facts").execute(&store.pool).await;
        assert!(delete.unwrap_err().to_string().contains("append-only"));
        assert_eq!(
            store.repo_facts(INFRA).await.unwrap()[0].fact.actor.login,
            "user1"
        );
    }

    #[tokio::test]
    async fn opening_a_database_that_does_not_exist_creates_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mistyped.db");
        let error = Store::open_existing(&format!("sqlite://{}", path.display()))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("no database"), "{error:#}");
        assert!(!path.exists());
    }

    on_both!(fixture_on, concurrent_appends_form_one_gapless_chain_per_repository, #[tokio::test(flavor = "multi_thread", worker_threads = 2)]);
    async fn concurrent_appends_form_one_gapless_chain_per_repository(f: Fixture) {
        const TASKS: u64 = 8;
        const EACH: u64 = 20;
        let store = f.store.clone();
        let other = Store::open(&f.database.url).await.unwrap();
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                // Half the tasks append through a second store on the same
                // database: another replica.
                let store = if task % 2 == 0 {
                    store.clone()
                } else {
                    other.clone()
                };
                tokio::spawn(async move {
                    for n in 0..EACH {
                        let repo = if (task + n) % 2 == 0 { INFRA } else { SITE };
                        let gate = format!("pr-{task}");
                        store
                            .append_fact(approval(repo, &gate, task, task * EACH + n))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }

        let mut per_repo = BTreeMap::new();
        for repo in store.ledger_repos().await.unwrap() {
            let facts = store.repo_facts(&repo).await.unwrap();
            assert_eq!(verify_chain(&facts), Ok(()), "{repo}");
            let seqs: Vec<i64> = facts.iter().map(|f| f.seq).collect();
            let expected: Vec<i64> = (1..=facts.len() as i64).collect();
            assert_eq!(seqs, expected, "{repo}");
            per_repo.insert(repo, facts.len());
        }
        let half = usize::try_from(TASKS * EACH / 2).unwrap();
        assert_eq!(
            per_repo,
            BTreeMap::from([(SITE.to_owned(), half), (INFRA.to_owned(), half)])
        );
    }

    fn signing_key() -> Arc<LedgerKey> {
        Arc::new(LedgerKey::from_seed(&[7; 32]))
    }

    /// What whoever holds the database can do: append a fact chained
    /// correctly after the last one, with no signature or one of their own.
    async fn forge_fact(store: &Store, new: NewFact, sig: Option<String>) -> Fact {
        let last = store.repo_facts(&new.repo).await.unwrap().pop();
        let mut fact = ledger::chain(last.as_ref(), new);
        fact.sig = sig;
        sqlx::query(concat!(
            "INSERT INTO facts (",
            fact_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        ))
        .bind(&fact.fact.repo)
        .bind(fact.seq)
        .bind(fact.fact.gate.to_string())
        .bind(fact.fact.kind.as_str())
        .bind(fact.fact.digest.as_str())
        .bind(to_i64(fact.fact.actor.id, "actor id").unwrap())
        .bind(&fact.fact.actor.login)
        .bind(fact.fact.at)
        .bind(serde_json::to_string(&fact.fact.source).unwrap())
        .bind(serde_json::to_string(&fact.fact.data).unwrap())
        .bind(fact.prev.as_str())
        .bind(fact.hash.as_str())
        .bind(&fact.sig)
        .execute(&store.pool)
        .await
        .unwrap();
        fact
    }

    on_both!(fixture_on, a_signing_store_signs_every_fact_and_a_forged_one_is_named, #[tokio::test]);
    async fn a_signing_store_signs_every_fact_and_a_forged_one_is_named(f: Fixture) {
        let key = signing_key();
        let public = key.public();
        // A fact written before signing, then a server that signs.
        let unsigned = f.store.clone();
        unsigned
            .append_fact(approval(INFRA, "pr-1", 1, 1))
            .await
            .unwrap();
        assert_eq!(unsigned.signing_start(&public).await.unwrap(), None);
        let store = f.store.clone().signing_with(key.clone()).await.unwrap();
        let start = store.signing_start(&public).await.unwrap().unwrap();
        assert!(start.verifies(&public));
        let first = store.repo_facts(INFRA).await.unwrap();
        assert_eq!(
            start.heads,
            BTreeMap::from([(
                INFRA.to_owned(),
                LedgerHead {
                    seq: 1,
                    hash: first[0].hash.clone()
                }
            )])
        );
        // Starting again (a restart, another replica) keeps the first record.
        let again = f.store.clone().signing_with(key.clone()).await.unwrap();
        assert_eq!(again.start_signing(&key).await.unwrap(), start);
        for n in 2..=3 {
            store
                .append_fact(approval(INFRA, "pr-1", n, n))
                .await
                .unwrap();
        }
        let facts = store.repo_facts(INFRA).await.unwrap();
        assert_eq!(facts[0].sig, None);
        assert!(facts[1..].iter().all(|f| f.sig.is_some()));
        let check = Some(SignatureCheck {
            key: &public,
            start: &start,
        });
        assert_eq!(
            ledger::verify(&facts, check).unwrap().signatures,
            Some(Signatures {
                signed: 2,
                unsigned: 1
            })
        );
        assert_eq!(
            store.ledger_head(INFRA).await.unwrap(),
            Some(LedgerHead {
                seq: 3,
                hash: facts[2].hash.clone()
            })
        );
        assert_eq!(store.ledger_head(SITE).await.unwrap(), None);

        // Someone with the database appends an approval chained like the
        // server's: the chain holds, the signature does not.
        forge_fact(&store, approval(INFRA, "pr-1", 666, 4), None).await;
        let other_key = LedgerKey::from_seed(&[8; 32]);
        let mut forged = approval(INFRA, "pr-1", 667, 5);
        forged.at += std::time::Duration::from_millis(1);
        let last = store.repo_facts(INFRA).await.unwrap().pop();
        let hash = ledger::chain(last.as_ref(), forged.clone()).hash;
        forge_fact(&store, forged, Some(other_key.sign(hash.as_str()))).await;
        let facts = store.repo_facts(INFRA).await.unwrap();
        assert_eq!(verify_chain(&facts), Ok(()));
        let broken = ledger::verify(&facts, check).unwrap_err();
        assert_eq!(
            (broken.seq, broken.problem),
            (
                4,
                LinkProblem::Unsigned {
                    signed_after: Some(1)
                }
            )
        );
        let newest: Vec<i64> = store
            .newest_signed_facts()
            .await
            .unwrap()
            .iter()
            .map(|f| f.seq)
            .collect();
        assert_eq!(newest, [5], "the newest fact with a signature, good or not");

        // A repository no server has written to yet, forged whole.
        forge_fact(&store, approval(SITE, "pr-9", 668, 6), None).await;
        let site = store.repo_facts(SITE).await.unwrap();
        let broken = ledger::verify(&site, check).unwrap_err();
        assert_eq!(
            (broken.seq, broken.problem),
            (1, LinkProblem::Unsigned { signed_after: None })
        );
    }

    on_both!(fixture_on, a_fact_not_signed_by_the_server_counts_for_nothing, #[tokio::test]);
    async fn a_fact_not_signed_by_the_server_counts_for_nothing(f: Fixture) {
        let key = signing_key();
        // One fact from before signing: it still counts.
        f.store
            .append_fact(approval(INFRA, "pr-1", 1, 1))
            .await
            .unwrap();
        let store = f.store.clone().signing_with(key).await.unwrap();
        store
            .append_fact(approval(INFRA, "pr-1", 2, 2))
            .await
            .unwrap();
        // Then forged ones: unsigned, and signed by some other key.
        forge_fact(&store, approval(INFRA, "pr-1", 666, 3), None).await;
        let mut forged = approval(INFRA, "pr-1", 667, 4);
        forged.at += std::time::Duration::from_millis(1);
        let last = store.repo_facts(INFRA).await.unwrap().pop();
        let hash = ledger::chain(last.as_ref(), forged.clone()).hash;
        let other = LedgerKey::from_seed(&[8; 32]);
        forge_fact(&store, forged, Some(other.sign(hash.as_str()))).await;
        forge_fact(&store, approval(SITE, "pr-9", 668, 5), None).await;

        let counted: Vec<u64> = store
            .gate_facts(INFRA, &"pr-1".parse().unwrap())
            .await
            .unwrap()
            .iter()
            .map(|f| f.fact.actor.id)
            .collect();
        assert_eq!(counted, [1, 2], "only the server's own facts count");
        assert!(store
            .gate_facts(SITE, &"pr-9".parse().unwrap())
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            f.store
                .gate_facts(INFRA, &"pr-1".parse().unwrap())
                .await
                .unwrap()
                .len(),
            4,
            "a store that does not sign (the CLI's) reads every fact"
        );
    }
}
