//! Group commit for webhook intake. Deliveries that arrive together are
//! written by one task in one transaction, and every sender is answered
//! only after the commit. Alone, a delivery is a batch of one; under load a
//! batch costs about what one delivery did. If a batch fails as a whole, each
//! of its deliveries is written on its own, so one bad request fails alone.
//!
//! A batch is one round trip to the database. Under load every round trip
//! waits for the writer to be scheduled again (on SQLite a quarter of a
//! millisecond each, measured: as long as the fsync). So the writer only
//! drops a delivery repeated within the batch; the database decides which
//! of the rest are new and writes their jobs, the comments they take up
//! and their pull requests' heads from that answer: on SQLite as
//! statements between `BEGIN IMMEDIATE` and `COMMIT` sent together, on
//! PostgreSQL as one statement (see [`batch_sql`]).

use super::db::to_i64;
use super::Backend;
use super::{Clock, Intake, JobId, NewDelivery, NewJob, PrHead, StoreError};
use anyhow::{Context, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, AssertSqlSafe, Row};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

/// Most deliveries in one transaction (SQLite's bound-parameter limit is far).
const MAX_BATCH: usize = 128;

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
/// gone. It keeps its connection between batches when `keeps_connection`
/// (not when the pool's one connection is the database, as in memory).
pub(super) fn spawn_writer(
    pool: AnyPool,
    backend: Backend,
    writer: Arc<Mutex<()>>,
    clock: Arc<dyn Clock>,
    keeps_connection: bool,
) -> mpsc::Sender<Request> {
    let (sender, mut receiver) = mpsc::channel::<Request>(4 * MAX_BATCH);
    tokio::spawn(async move {
        let mut held: Option<PoolConnection<Any>> = None;
        while let Some(first) = receiver.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            let (items, replies): (Vec<Item>, Vec<_>) =
                batch.into_iter().map(|r| (r.item, r.reply)).unzip();
            let _writer = writer.lock().await;
            let now = clock.now_ms();
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
            match write_on_held(&pool, &mut held, backend, &items, now).await {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(error) if items.len() > 1 => {
                    tracing::warn!(
                        "a batch of {} deliveries failed ({error:#}); writing them one by one",
                        items.len()
                    );
                    for (reply, item) in replies.into_iter().zip(&items) {
                        let one = std::slice::from_ref(item);
                        let recorded = write_on_held(&pool, &mut held, backend, one, now).await;
                        let _ = reply.send(recorded.map(|mut outcomes| outcomes.remove(0)));
                    }
                }
                Err(error) => {
                    let _ = replies
                        .into_iter()
                        .next()
                        .map(|reply| reply.send(Err(error)));
                }
            }
            if !keeps_connection {
                held = None;
            }
        }
    });
    sender
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
    now: i64,
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

/// Which delivery it is: the same delivery id through another hook is
/// another delivery.
fn key(delivery: &NewDelivery) -> (&str, &str, &str) {
    (
        delivery.forge.as_str(),
        &delivery.target,
        &delivery.delivery_id,
    )
}

/// Writes a batch in one round trip; the outcomes are in the batch's
/// order. A delivery seen before, or earlier in the same batch, is a
/// duplicate and writes nothing. Nothing rolls back when the future is
/// dropped mid-batch: the writer is only cancelled when the process stops,
/// and its connection goes with it.
async fn record_batch(
    conn: &mut AnyConnection,
    backend: Backend,
    items: &[Item],
    now: i64,
) -> Result<Vec<Intake>> {
    // Each delivery's place among the batch's candidates; none for a
    // delivery already earlier in the batch.
    let mut seen = HashSet::new();
    let mut candidates: Vec<&Item> = Vec::new();
    let places: Vec<Option<usize>> = items
        .iter()
        .map(|item| {
            seen.insert(key(&item.delivery)).then(|| {
                candidates.push(item);
                candidates.len() - 1
            })
        })
        .collect();
    if candidates
        .iter()
        .filter_map(|i| i.job.as_ref())
        .any(|j| j.max_attempts == 0)
    {
        return Err(StoreError::NoAttemptsAllowed.into());
    }

    let batch = batch_query(backend, &candidates, now)?;
    let written = write_batch(conn, batch).await;
    if written.is_err() && backend == Backend::Sqlite {
        // The batch's statements stopped short of its COMMIT.
        if let Err(error) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
            tracing::debug!("rolling back a failed intake batch: {error}");
        }
    }
    let Written { deliveries, jobs } = written?;
    Ok(places
        .into_iter()
        .map(|place| match place.and_then(|p| deliveries.get(&p)) {
            Some(&delivery) => Intake::Recorded {
                delivery,
                job: jobs.get(&delivery).copied(),
            },
            None => Intake::Duplicate,
        })
        .collect())
}

/// What a batch wrote: each new delivery's row by its place among the
/// batch's candidates, and the job queued for it by delivery row.
struct Written {
    deliveries: HashMap<usize, i64>,
    jobs: HashMap<i64, JobId>,
}

/// The columns each delivery of a batch is sent with: the delivery, its
/// job, what the job takes up once, its pull request's head (NULL where it
/// has none). Both backends read the batch as this one table. The batch's
/// time rides on every row (`received_at`, `comments_since`) so that no
/// placeholder needs a number on SQLite (see [`values`]).
const BATCH_COLUMNS: &str = "ord, forge, target, delivery_id, event_type, received_at, \
     job_kind, queue_key, payload, max_attempts, \
     once_forge, once_repo, once_source, once_number, \
     head_forge, head_repo, head_number, head_sha, base_ref, is_open, \
     pusher_head, pusher_id, pusher_login, comments_since";
const BATCH_WIDTH: usize = columns_in(BATCH_COLUMNS);

const fn columns_in(list: &str) -> usize {
    let bytes = list.as_bytes();
    let (mut commas, mut at) = (0, 0);
    while at < bytes.len() {
        if bytes[at] == b',' {
            commas += 1;
        }
        at += 1;
    }
    commas + 1
}

/// SQLite has no statements that feed one another, so the batch is first
/// staged in a table of the connection's own (`temp`), each delivery
/// marked as it stands before anything is written: `fresh` where it is
/// new, `once_new` where its job is the first to take up what it runs
/// once, `head_last` where its head is the batch's last word on its pull
/// request. Exact, as the batch holds the write lock from `BEGIN
/// IMMEDIATE`, and as no delivery is twice in a batch (the writer drops
/// repeats). Each later statement writes its rows from the staged ones.
const SQLITE_STAGE: &str = "CREATE TEMP TABLE IF NOT EXISTS intake_batch (
         ord INTEGER PRIMARY KEY, forge TEXT NOT NULL, target TEXT NOT NULL,
         delivery_id TEXT NOT NULL, event_type TEXT NOT NULL, received_at INTEGER NOT NULL,
         job_kind TEXT, queue_key TEXT, payload TEXT, max_attempts INTEGER,
         once_forge TEXT, once_repo TEXT, once_source TEXT, once_number INTEGER,
         head_forge TEXT, head_repo TEXT, head_number INTEGER, head_sha TEXT,
         base_ref TEXT, is_open INTEGER, pusher_head TEXT, pusher_id INTEGER,
         pusher_login TEXT, comments_since INTEGER,
         fresh INTEGER NOT NULL, once_new INTEGER NOT NULL, head_last INTEGER NOT NULL);
     DELETE FROM temp.intake_batch;";

/// Follows the batch's `VALUES` (as `v`): each delivery, whether it is new.
const SQLITE_FRESH: &str = "v_fresh AS MATERIALIZED (
         SELECT v.*, NOT EXISTS (SELECT 1 FROM deliveries d
             WHERE d.forge = v.forge AND d.target = v.target AND d.delivery_id = v.delivery_id
         ) AS fresh
         FROM v)";

/// The staged rows: each delivery with its marks.
const SQLITE_MARKED: &str = "SELECT b.*,
         b.fresh AND b.once_source IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM commands_seen c
                 WHERE c.forge = b.once_forge AND c.repo = b.once_repo
                   AND c.source = b.once_source)
             AND NOT EXISTS (SELECT 1 FROM v_fresh e
                 WHERE e.fresh AND e.once_forge = b.once_forge AND e.once_repo = b.once_repo
                   AND e.once_source = b.once_source AND e.ord < b.ord),
         b.fresh AND b.head_repo IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM v_fresh l
                 WHERE l.fresh AND l.head_forge = b.head_forge AND l.head_repo = b.head_repo
                   AND l.head_number = b.head_number AND l.ord > b.ord)
     FROM v_fresh b";

const SQLITE_WRITE: &str =
    "INSERT INTO deliveries (forge, target, delivery_id, event_type, received_at)
         SELECT forge, target, delivery_id, event_type, received_at FROM temp.intake_batch
         WHERE fresh ORDER BY ord;
     INSERT INTO commands_seen (forge, repo, source, number, recorded_at)
         SELECT once_forge, once_repo, once_source, once_number, received_at
         FROM temp.intake_batch
         WHERE once_new;
     INSERT INTO jobs (delivery_id, kind, queue_key, payload, status, attempts, max_attempts,
                       run_after, created_at, updated_at)
         SELECT d.id, b.job_kind, b.queue_key, b.payload, 'queued', 0, b.max_attempts,
                b.received_at, b.received_at, b.received_at
         FROM temp.intake_batch b JOIN deliveries d
           ON d.forge = b.forge AND d.target = b.target AND d.delivery_id = b.delivery_id
         WHERE b.fresh AND b.job_kind IS NOT NULL AND (b.once_source IS NULL OR b.once_new)
         ORDER BY b.ord
         RETURNING 'job' AS written, delivery_id AS key, id;
     INSERT INTO pull_requests (forge, repo, number, head_sha, base_ref, is_open, updated_at,
                                pusher_head, pusher_id, pusher_login, comments_since)
         SELECT head_forge, head_repo, head_number, head_sha, base_ref, is_open, received_at,
                pusher_head, pusher_id, pusher_login, comments_since
         FROM temp.intake_batch WHERE head_last";

const SQLITE_ANSWER: &str = "SELECT 'delivery' AS written, b.ord AS key, d.id
     FROM temp.intake_batch b JOIN deliveries d
       ON d.forge = b.forge AND d.target = b.target AND d.delivery_id = b.delivery_id
     WHERE b.fresh";

/// PostgreSQL runs the batch as one statement whose parts feed one
/// another: what `delivered` returns are exactly the new deliveries.
const POSTGRES_WRITE: &str = "delivered AS (
         INSERT INTO deliveries (forge, target, delivery_id, event_type, received_at)
         SELECT forge, target, delivery_id, event_type, received_at FROM batch ORDER BY ord
         ON CONFLICT (forge, target, delivery_id) DO NOTHING
         RETURNING id, forge, target, delivery_id),
     fresh AS (
         SELECT b.*, d.id AS delivery FROM batch b JOIN delivered d
           ON d.forge = b.forge AND d.target = b.target AND d.delivery_id = b.delivery_id),
     firsts AS (
         SELECT DISTINCT ON (once_forge, once_repo, once_source)
                ord, once_forge, once_repo, once_source, once_number, received_at
         FROM fresh WHERE once_source IS NOT NULL
         ORDER BY once_forge, once_repo, once_source, ord),
     seen AS (
         INSERT INTO commands_seen (forge, repo, source, number, recorded_at)
         SELECT once_forge, once_repo, once_source, once_number, received_at FROM firsts
         ON CONFLICT (forge, repo, source) DO NOTHING
         RETURNING forge, repo, source),
     queued AS (
         INSERT INTO jobs (delivery_id, kind, queue_key, payload, status, attempts, max_attempts,
                           run_after, created_at, updated_at)
         SELECT f.delivery, f.job_kind, f.queue_key, f.payload, 'queued', 0, f.max_attempts,
                f.received_at, f.received_at, f.received_at
         FROM fresh f
         WHERE f.job_kind IS NOT NULL AND (f.once_source IS NULL OR EXISTS (
             SELECT 1 FROM firsts x JOIN seen s
               ON s.forge = x.once_forge AND s.repo = x.once_repo AND s.source = x.once_source
             WHERE x.ord = f.ord))
         ORDER BY f.ord
         RETURNING id, delivery_id),
     heads AS (
         INSERT INTO pull_requests (forge, repo, number, head_sha, base_ref, is_open, updated_at,
                                    pusher_head, pusher_id, pusher_login, comments_since)
         SELECT DISTINCT ON (head_forge, head_repo, head_number)
                head_forge, head_repo, head_number, head_sha, base_ref, is_open, received_at,
                pusher_head, pusher_id, pusher_login, comments_since
         FROM fresh WHERE head_repo IS NOT NULL
         ORDER BY head_forge, head_repo, head_number, ord DESC";

const POSTGRES_ANSWER: &str = "SELECT 'delivery' AS written, ord AS key, delivery AS id FROM fresh
     UNION ALL SELECT 'job', delivery_id, id FROM queued";

/// The batch's SQL: on SQLite its statements between `BEGIN IMMEDIATE` and
/// `COMMIT`, on PostgreSQL one statement. Either way one round trip, which
/// answers with a row per new delivery (`key` its place in the batch) and
/// per job queued (`key` its delivery's row).
fn batch_sql(backend: Backend, rows: usize) -> String {
    let values = values(backend, rows, BATCH_WIDTH);
    let upsert = super::sql::UPSERT_PR_HEAD;
    match backend {
        Backend::Sqlite => format!(
            "BEGIN IMMEDIATE; {SQLITE_STAGE}
             WITH v ({BATCH_COLUMNS}) AS (VALUES {values}), {SQLITE_FRESH}
             INSERT INTO temp.intake_batch ({BATCH_COLUMNS}, fresh, once_new, head_last)
             {SQLITE_MARKED};
             {SQLITE_WRITE} {upsert};
             {SQLITE_ANSWER};
             COMMIT"
        ),
        Backend::Postgres => format!(
            "WITH batch ({BATCH_COLUMNS}) AS (VALUES {values}),
             {POSTGRES_WRITE} {upsert})
             {POSTGRES_ANSWER}"
        ),
    }
}

type BatchQuery = sqlx::query::Query<'static, Any, <Any as sqlx::Database>::Arguments>;

/// The batch's query with its rows bound. A row the database could not
/// hold (a number past its range) is refused here, before anything is sent.
fn batch_query(backend: Backend, candidates: &[&Item], now: i64) -> Result<BatchQuery> {
    let sql = batch_sql(backend, candidates.len());
    let mut batch = sqlx::query(AssertSqlSafe(sql));
    for (ord, item) in candidates.iter().enumerate() {
        let d = &item.delivery;
        let job = item.job.as_ref();
        let once = job.and_then(|j| j.once.as_ref());
        let head = item.head.as_ref();
        let (pusher_head, pusher_id, pusher_login) = match head {
            Some(head) => super::sql::pusher_columns(head)?,
            None => (None, None, None),
        };
        batch = batch
            .bind(i64::try_from(ord)?)
            .bind(d.forge.as_str())
            .bind(d.target.clone())
            .bind(d.delivery_id.clone())
            .bind(d.event_type.clone())
            .bind(now)
            .bind(job.map(|j| j.kind.clone()))
            .bind(job.map(|j| j.queue_key.clone()))
            .bind(job.map(|j| j.payload.to_string()))
            .bind(job.map(|j| i64::from(j.max_attempts)))
            .bind(once.map(|o| o.repo.forge.as_str()))
            .bind(once.map(|o| o.repo.full_name.clone()))
            .bind(once.map(|o| o.source.clone()))
            .bind(
                once.map(|o| to_i64(o.pr.0, "pull request number"))
                    .transpose()?,
            )
            .bind(head.map(|h| h.repo.forge.as_str()))
            .bind(head.map(|h| h.repo.full_name.clone()))
            .bind(
                head.map(|h| to_i64(h.pr.0, "pull request number"))
                    .transpose()?,
            )
            .bind(head.map(|h| h.head_sha.as_str().to_owned()))
            .bind(head.map(|h| h.base_ref.clone()))
            .bind(head.map(|h| i64::from(h.open)))
            .bind(pusher_head)
            .bind(pusher_id)
            .bind(pusher_login)
            .bind(super::sql::first_comments_mark(now));
    }
    Ok(batch)
}

/// Sends the batch and reads what it wrote.
async fn write_batch(conn: &mut AnyConnection, batch: BatchQuery) -> Result<Written> {
    let mut written = Written {
        deliveries: HashMap::new(),
        jobs: HashMap::new(),
    };
    for row in batch
        .fetch_all(&mut *conn)
        .await
        .context("recording deliveries, their jobs and pull request heads")?
    {
        let key: i64 = row.try_get("key")?;
        let id: i64 = row.try_get("id")?;
        match row.try_get::<String, _>("written")?.as_str() {
            "delivery" => {
                written.deliveries.insert(usize::try_from(key)?, id);
            }
            "job" => {
                written.jobs.insert(key, JobId(id));
            }
            other => anyhow::bail!("an intake batch answered an unknown row {other:?}"),
        }
    }
    Ok(written)
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
