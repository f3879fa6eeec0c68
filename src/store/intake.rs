//! Group commit for webhook intake on PostgreSQL, on an in-memory SQLite
//! database, and on a SQLite file whose URL sets options such as `mode=ro`
//! or `vfs` (any other SQLite file is written from a thread of its own:
//! `intake_file.rs`). Deliveries that arrive together are written by one
//! task in one transaction — one multi-row statement each for deliveries,
//! jobs and pull-request heads — and every sender is answered only after the
//! commit. Alone, a delivery is a batch of one; under load a batch costs
//! about what one delivery did. If a batch fails as a whole, each of its
//! deliveries is written on its own, so one bad request fails alone. The
//! rules a batch decides by ([`candidates`], [`last_heads`]) are shared
//! with the file writer; the one left in SQL, a comment's command taken up
//! by its first delivery only, is written in each (a multi-row insert here,
//! a row at a time there): a change to it goes to both.
//!
//! On SQLite every statement is a round trip to the driver's own thread,
//! so the transaction rides with the batch's statements: `BEGIN IMMEDIATE`
//! is sent with the first and `COMMIT` with the last. PostgreSQL prepares
//! one statement per query, so there the two are sent on their own. One
//! round trip per batch (the SQL deciding which deliveries are new) was
//! built and measured: no faster over HTTP, slower in bursts
//! (benches/README.md).

use super::db::to_i64;
use super::Backend;
use super::{Clock, Intake, JobId, NewDelivery, NewJob, Once, PrHead, StoreError};
use crate::model::UnixMs;
use anyhow::{Context, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, AssertSqlSafe, Row};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

/// Most deliveries in one transaction (SQLite's bound-parameter limit is far).
pub(super) const MAX_BATCH: usize = 128;

pub(super) const DELIVERY_COLUMNS: &str = "forge, target, delivery_id, event_type, received_at";
pub(super) const JOB_COLUMNS: &str = "delivery_id, kind, queue_key, payload, status, attempts, \
     max_attempts, run_after, created_at, updated_at";
pub(super) const PR_HEAD_COLUMNS: &str = "forge, repo, number, head_sha, base_ref, is_open, \
     updated_at, pusher_head, pusher_id, pusher_login, comments_since";

pub(super) struct Item {
    pub(crate) delivery: NewDelivery,
    pub(crate) job: Option<NewJob>,
    pub(crate) head: Option<PrHead>,
}

pub(super) struct Request {
    pub(crate) item: Item,
    pub(crate) reply: oneshot::Sender<Result<Intake>>,
}

/// Starts the writer; it ends when the last sender (every `Store` clone) is
/// gone. It keeps its connection between batches unless that is the pool's
/// only one (an in-memory database), which every other call needs too.
pub(super) fn spawn_writer(
    pool: AnyPool,
    backend: Backend,
    writer: Arc<Mutex<()>>,
    clock: Arc<dyn Clock>,
) -> mpsc::Sender<Request> {
    let keeps_connection = pool.options().get_max_connections() > 1;
    let (sender, mut receiver) = mpsc::channel::<Request>(4 * MAX_BATCH);
    tokio::spawn(async move {
        let mut held: Option<PoolConnection<Any>> = None;
        while let Some(first) = receiver.recv().await {
            let (items, replies) = take_batch(first, &mut receiver);
            let _writer = writer.lock().await;
            let now = clock.now();
            if held.is_none() {
                match pool.acquire().await {
                    Ok(conn) => held = Some(conn),
                    Err(error) => {
                        let error = anyhow::Error::new(error).context("recording deliveries");
                        for reply in replies {
                            let _ = reply.send(Err(anyhow::anyhow!("{error:#}")));
                        }
                        continue;
                    }
                }
            }
            let written = write_on_held(&pool, &mut held, backend, &items, now).await;
            for (reply, item) in answer(replies, &items, written) {
                let one = std::slice::from_ref(item);
                let recorded = write_on_held(&pool, &mut held, backend, one, now).await;
                let _ = reply.send(recorded.map(|mut outcomes| outcomes.remove(0)));
            }
            if !keeps_connection {
                held = None;
            }
        }
    });
    sender
}

pub(super) type Reply = oneshot::Sender<Result<Intake>>;

/// `first` and the requests waiting behind it, up to a batch.
pub(super) fn take_batch(
    first: Request,
    receiver: &mut mpsc::Receiver<Request>,
) -> (Vec<Item>, Vec<Reply>) {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(request) => batch.push(request),
            Err(_) => break,
        }
    }
    batch.into_iter().map(|r| (r.item, r.reply)).unzip()
}

/// Answers a batch's senders from its write. A batch of more than one that
/// failed as a whole is answered by writing each delivery on its own, so
/// one bad request fails alone: those come back, to be written and answered
/// one by one.
pub(super) fn answer(
    replies: Vec<Reply>,
    items: &[Item],
    written: Result<Vec<Intake>>,
) -> Vec<(Reply, &Item)> {
    match written {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
            Vec::new()
        }
        Err(error) if items.len() > 1 => {
            tracing::warn!(
                "a batch of {} deliveries failed ({error:#}); writing them one by one",
                items.len()
            );
            replies.into_iter().zip(items).collect()
        }
        Err(error) => {
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(Err(error));
            }
            Vec::new()
        }
    }
}

/// Writes a batch on the writer's connection, taking one from the pool if
/// it has none. The writer keeps one connection between batches: no pool
/// acquire (and its liveness ping) before every commit, and the batch
/// statements stay prepared on it. When the database failed on it, it is
/// closed rather than given back to the pool with whatever state the
/// failure left, and the next batch takes a fresh one; a batch refused
/// before it was sent leaves it as it was.
async fn write_on_held(
    pool: &AnyPool,
    held: &mut Option<PoolConnection<Any>>,
    backend: Backend,
    items: &[Item],
    now: UnixMs,
) -> Result<Vec<Intake>> {
    let conn = match held {
        Some(conn) => conn,
        None => held.insert(pool.acquire().await.context("recording deliveries")?),
    };
    let written = record_batch(conn, backend, items, now).await;
    if let Err(error) = &written {
        if failed_in_database(error) {
            if let Some(mut conn) = held.take() {
                conn.close_on_drop();
            }
        }
    }
    written
}

fn failed_in_database(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<sqlx::Error>())
}

type DeliveryKey = (String, String, String);
type OnceKey = (String, String, String);

fn once_key(once: &Once) -> OnceKey {
    (
        once.repo.forge.as_str().to_owned(),
        once.repo.full_name.clone(),
        once.source.to_string(),
    )
}

fn key(delivery: &NewDelivery) -> DeliveryKey {
    (
        delivery.forge.as_str().to_owned(),
        delivery.target.clone(),
        delivery.delivery_id.clone(),
    )
}

/// Whether each delivery is the first of its key in the batch (a later one
/// is a duplicate and writes nothing), and those firsts: the deliveries
/// the batch writes if they are new. A job allowed no attempt refuses the
/// batch before anything is written.
pub(super) fn candidates(items: &[Item]) -> Result<(Vec<bool>, Vec<&Item>)> {
    let mut seen = HashSet::new();
    let first: Vec<bool> = items
        .iter()
        .map(|i| seen.insert(key(&i.delivery)))
        .collect();
    let candidates: Vec<&Item> = items
        .iter()
        .zip(&first)
        .filter_map(|(item, first)| first.then_some(item))
        .collect();
    if candidates
        .iter()
        .filter_map(|i| i.job.as_ref())
        .any(|j| j.max_attempts == 0)
    {
        return Err(StoreError::NoAttemptsAllowed.into());
    }
    Ok((first, candidates))
}

/// One head per pull request: the batch's last word on it, in the order
/// the pull requests first came.
pub(super) fn last_heads<'i>(fresh: impl Iterator<Item = &'i Item>) -> Vec<&'i PrHead> {
    let mut heads: Vec<&PrHead> = Vec::new();
    for head in fresh.filter_map(|item| item.head.as_ref()) {
        heads.retain(|h| !(h.repo == head.repo && h.pr == head.pr));
        heads.push(head);
    }
    heads
}

/// Writes a batch in one `BEGIN IMMEDIATE` transaction; the outcomes are in
/// the batch's order. A delivery seen before, or earlier in the same batch,
/// is a duplicate and writes nothing.
async fn record_batch(
    conn: &mut AnyConnection,
    backend: Backend,
    items: &[Item],
    now: UnixMs,
) -> Result<Vec<Intake>> {
    let (first_in_batch, candidates) = candidates(items)?;

    let mut tx = Transaction {
        conn,
        backend,
        last_commits: false,
    };
    let written = write_batch(&mut tx, &candidates, now).await;
    if written.is_err() {
        tx.roll_back().await;
    }
    let (recorded, jobs) = written?;

    Ok(items
        .iter()
        .zip(first_in_batch)
        .map(|(item, first)| {
            let row = first
                .then(|| recorded.get(&key(&item.delivery)).copied())
                .flatten();
            match row {
                Some(delivery) => Intake::Recorded {
                    delivery,
                    job: jobs.get(&delivery).copied(),
                },
                None => Intake::Duplicate,
            }
        })
        .collect())
}

/// A batch's transaction, opened with its first statement and committed
/// with its last (see the module's doc). Unlike sqlx's own transaction it
/// does not roll back when dropped: the writer never drops one mid-batch
/// (it is only cancelled when the process stops), and every error is
/// rolled back by [`record_batch`].
struct Transaction<'c> {
    conn: &'c mut AnyConnection,
    backend: Backend,
    /// The last statement carries the `COMMIT` (SQLite).
    last_commits: bool,
}

impl Transaction<'_> {
    /// `sql`, to be sent first: on SQLite with `BEGIN IMMEDIATE` before it
    /// (the write lock is taken before anything is read); on PostgreSQL
    /// `BEGIN` is sent now, on its own.
    async fn opening(&mut self, sql: String) -> Result<String> {
        match self.backend {
            Backend::Sqlite => Ok(format!("BEGIN IMMEDIATE; {sql}")),
            Backend::Postgres => {
                sqlx::query("BEGIN").execute(&mut *self.conn).await?;
                Ok(sql)
            }
        }
    }

    /// `sql`, to be sent last: on SQLite with `COMMIT` after it.
    fn closing(&mut self, sql: String) -> String {
        match self.backend {
            Backend::Sqlite => {
                self.last_commits = true;
                format!("{sql}; COMMIT")
            }
            Backend::Postgres => sql,
        }
    }

    /// Commits, unless the last statement did.
    async fn commit(&mut self) -> Result<()> {
        if !self.last_commits {
            sqlx::query("COMMIT").execute(&mut *self.conn).await?;
        }
        Ok(())
    }

    /// Undoes whatever the batch wrote. A transaction that was never
    /// opened, or was already ended, makes the database refuse the
    /// `ROLLBACK`, which is then nothing to report.
    async fn roll_back(&mut self) {
        if let Err(error) = sqlx::query("ROLLBACK").execute(&mut *self.conn).await {
            tracing::debug!("rolling back a failed intake batch: {error}");
        }
    }
}

/// Writes the batch's rows; returns the deliveries recorded (a delivery
/// seen before is not) and the jobs queued, by delivery row.
async fn write_batch(
    tx: &mut Transaction<'_>,
    candidates: &[&Item],
    now: UnixMs,
) -> Result<(HashMap<DeliveryKey, i64>, HashMap<i64, JobId>)> {
    let sql = format!(
        "INSERT INTO deliveries ({DELIVERY_COLUMNS}) VALUES {}
         ON CONFLICT (forge, target, delivery_id) DO NOTHING RETURNING id, forge, target, delivery_id",
        values(tx.backend, candidates.len(), 5)
    );
    let mut deliveries = sqlx::query(AssertSqlSafe(tx.opening(sql).await?));
    for item in candidates {
        let d = &item.delivery;
        deliveries = deliveries
            .bind(d.forge.as_str())
            .bind(d.target.clone())
            .bind(d.delivery_id.clone())
            .bind(d.event_type.clone())
            .bind(now);
    }
    let mut recorded: HashMap<DeliveryKey, i64> = HashMap::new();
    for row in deliveries
        .fetch_all(&mut *tx.conn)
        .await
        .context("recording deliveries")?
    {
        recorded.insert(
            (
                row.try_get("forge")?,
                row.try_get("target")?,
                row.try_get("delivery_id")?,
            ),
            row.try_get("id")?,
        );
    }

    let fresh: Vec<(i64, &Item)> = candidates
        .iter()
        .filter_map(|item| recorded.get(&key(&item.delivery)).map(|row| (*row, *item)))
        .collect();
    // A comment or review state runs once, whichever delivery (or the
    // reconciliation sweep) brings it first: its job only with its row.
    let mut onces: Vec<&Once> = Vec::new();
    for once in fresh
        .iter()
        .filter_map(|(_, item)| item.job.as_ref()?.once.as_ref())
    {
        if !onces.contains(&once) {
            onces.push(once);
        }
    }
    let mut unseen: HashSet<OnceKey> = HashSet::new();
    if !onces.is_empty() {
        let sql = format!(
            "INSERT INTO commands_seen (forge, repo, source, number, recorded_at) VALUES {}
             ON CONFLICT (forge, repo, source) DO NOTHING RETURNING forge, repo, source",
            values(tx.backend, onces.len(), 5)
        );
        let mut insert = sqlx::query(AssertSqlSafe(sql));
        for once in &onces {
            insert = insert
                .bind(once.repo.forge.as_str())
                .bind(once.repo.full_name.clone())
                .bind(once.source.to_string())
                .bind(to_i64(once.pr.0, "pull request number")?)
                .bind(now);
        }
        for row in insert
            .fetch_all(&mut *tx.conn)
            .await
            .context("recording the comments taken up")?
        {
            unseen.insert((
                row.try_get("forge")?,
                row.try_get("repo")?,
                row.try_get("source")?,
            ));
        }
    }
    let mut jobs: HashMap<i64, JobId> = HashMap::new();
    let with_jobs: Vec<(i64, &NewJob)> = fresh
        .iter()
        .filter_map(|(row, item)| item.job.as_ref().map(|job| (*row, job)))
        .filter(|(_, job)| {
            job.once
                .as_ref()
                .is_none_or(|o| unseen.remove(&once_key(o)))
        })
        .collect();
    if !with_jobs.is_empty() {
        let sql = format!(
            "INSERT INTO jobs ({JOB_COLUMNS}) VALUES {}
             RETURNING id, delivery_id",
            values(tx.backend, with_jobs.len(), 10)
        );
        let mut insert = sqlx::query(AssertSqlSafe(sql));
        for (delivery, job) in &with_jobs {
            insert = insert
                .bind(*delivery)
                .bind(job.kind.as_str())
                .bind(job.queue_key.clone())
                .bind(job.payload.to_string())
                .bind("queued")
                .bind(0_i64)
                .bind(i64::from(job.max_attempts))
                .bind(now)
                .bind(now)
                .bind(now);
        }
        for row in insert
            .fetch_all(&mut *tx.conn)
            .await
            .context("enqueueing jobs")?
        {
            jobs.insert(row.try_get("delivery_id")?, JobId(row.try_get("id")?));
        }
    }

    let heads = last_heads(fresh.iter().map(|(_, item)| *item));
    if !heads.is_empty() {
        let numbers = heads
            .iter()
            .map(|h| to_i64(h.pr.0, "pull request number"))
            .collect::<Result<Vec<_>>>()?;
        let sql = format!(
            "INSERT INTO pull_requests ({PR_HEAD_COLUMNS}) VALUES {}
             {}",
            values(tx.backend, heads.len(), 11),
            super::pr_head::UPSERT_PR_HEAD
        );
        let mut upsert = sqlx::query(AssertSqlSafe(tx.closing(sql)));
        for (head, number) in heads.iter().zip(numbers) {
            let (pusher_head, pusher_id, pusher_login) = super::pr_head::pusher_columns(head)?;
            upsert = upsert
                .bind(head.repo.forge.as_str())
                .bind(head.repo.full_name.clone())
                .bind(number)
                .bind(head.head_sha.as_str().to_owned())
                .bind(head.base_ref.clone())
                .bind(i64::from(head.open))
                .bind(now)
                .bind(pusher_head)
                .bind(pusher_id)
                .bind(pusher_login)
                .bind(super::pr_head::first_comments_mark(now));
        }
        upsert
            .execute(&mut *tx.conn)
            .await
            .context(if tx.last_commits {
                "recording pull request heads and committing deliveries"
            } else {
                "recording pull request heads"
            })?;
    }
    tx.commit().await.context("committing deliveries")?;
    Ok((recorded, jobs))
}

/// The placeholders of `rows` rows of `columns` parameters. On SQLite
/// they are nameless (`(?, ?), (?, ?)`): the driver asks SQLite the name
/// of every parameter, which SQLite finds by walking a list of the
/// statement's numbered ones, so numbered placeholders cost the square of
/// their count (30 % of SQLite's thread under load, `perf`). PostgreSQL
/// reads only numbered ones (`($1, $2), ($3, $4)`).
fn values(backend: Backend, rows: usize, columns: usize) -> String {
    let row = |row: usize| -> String {
        let params: Vec<String> = (1..=columns)
            .map(|c| match backend {
                Backend::Sqlite => "?".to_owned(),
                Backend::Postgres => format!("${}", row * columns + c),
            })
            .collect();
        format!("({})", params.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}
