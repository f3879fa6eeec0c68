//! Group commit for webhook intake on a SQLite file, run on a thread of its
//! own through a synchronous binding. sqlx drives SQLite from a thread of
//! its own too, so there every statement of a batch was a hand-off there
//! and back, and every row it returned a message; taking those away raised
//! recorded intake by about a tenth (benches/README.md). Here the batch is
//! one wake-up in and one answer out: the thread takes the batch off the
//! channel, writes it in one `BEGIN IMMEDIATE` transaction a row at a time
//! with cached statements (each delivery's insert says itself whether it
//! was new), and answers every sender after the `COMMIT`.
//!
//! What a batch decides is the same as on the other backends
//! ([`super::intake`]): a delivery seen before, or earlier in the batch,
//! writes nothing; a comment's command runs once; a pull request's head is
//! the batch's last word on it; a batch that fails as a whole is written
//! one delivery at a time, so one bad request fails alone.

use super::intake::{
    answer, candidates, take_batch, Item, Request, DELIVERY_COLUMNS, JOB_COLUMNS, MAX_BATCH,
    PR_HEAD_COLUMNS,
};
use super::{Clock, Intake, JobId};
use crate::model::UnixMs;
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use tokio::sync::{mpsc, Mutex};

/// Starts the writer thread on `file`; it ends when the last sender is gone.
pub(super) fn spawn_writer(
    file: PathBuf,
    writer: Arc<Mutex<()>>,
    clock: Arc<dyn Clock>,
) -> Result<mpsc::Sender<Request>> {
    let (sender, mut receiver) = mpsc::channel::<Request>(4 * MAX_BATCH);
    std::thread::Builder::new()
        .name("wavegate-intake".into())
        .spawn(move || {
            let mut held: Option<Connection> = None;
            while let Some(first) = receiver.blocking_recv() {
                let (items, replies) = take_batch(first, &mut receiver);
                let _writer = writer.blocking_lock();
                let now = clock.now();
                let written = write_on_held(&file, &mut held, &items, now);
                for (reply, item) in answer(replies, &items, written) {
                    let one = std::slice::from_ref(item);
                    let recorded = write_on_held(&file, &mut held, one, now);
                    let _ = reply.send(recorded.map(|mut outcomes| outcomes.remove(0)));
                }
            }
        })
        .context("starting the intake writer's thread")?;
    Ok(sender)
}

/// Writes a batch on the thread's connection, opening one if it has none.
/// When the database failed on it, it is closed, and the next batch opens
/// a fresh one; a batch refused before it was sent leaves it as it was.
fn write_on_held(
    file: &Path,
    held: &mut Option<Connection>,
    items: &[Item],
    now: UnixMs,
) -> Result<Vec<Intake>> {
    let conn = match held {
        Some(conn) => conn,
        None => held.insert(open(file)?),
    };
    let written = record_batch(conn, items, now);
    // A transaction still open (its rollback failed) is not handed on either.
    let failed_in_database = written.as_ref().is_err_and(|error| {
        error.chain().any(|cause| cause.is::<rusqlite::Error>()) || !conn.is_autocommit()
    });
    if failed_in_database {
        *held = None;
    }
    written
}

fn open(file: &Path) -> Result<Connection> {
    let conn = Connection::open(file)
        .with_context(|| format!("opening {} to record deliveries", file.display()))?;
    conn.execute_batch(super::db::SQLITE_PRAGMAS)
        .context("setting up the intake writer's connection")?;
    // The pool's connections set WAL in the file first; said again so this
    // connection does not rely on it.
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .context("setting up the intake writer's connection")?;
    Ok(conn)
}

/// Writes a batch in one `BEGIN IMMEDIATE` transaction; the outcomes are in
/// the batch's order.
fn record_batch(conn: &Connection, items: &[Item], now: UnixMs) -> Result<Vec<Intake>> {
    let (first, candidates) = candidates(items)?;
    conn.execute_batch("BEGIN IMMEDIATE")
        .context("recording deliveries")?;
    let written = write_batch(conn, &candidates, now).and_then(|written| {
        conn.execute_batch("COMMIT")
            .context("committing deliveries")?;
        Ok(written)
    });
    let mut written = match written {
        Ok(written) => written.into_iter(),
        Err(error) => {
            if let Err(rollback) = conn.execute_batch("ROLLBACK") {
                tracing::debug!("rolling back a failed intake batch: {rollback}");
            }
            return Err(error);
        }
    };
    Ok(first
        .into_iter()
        .map(|first| {
            let outcome = first.then(|| written.next()).flatten();
            outcome.unwrap_or(Intake::Duplicate)
        })
        .collect())
}

// The statements, written once: `prepare_cached` finds each by its text.
static INSERT_DELIVERY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO deliveries ({DELIVERY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (forge, target, delivery_id) DO NOTHING RETURNING id"
    )
});
static INSERT_JOB: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?1, ?2, ?3, ?4, 'queued', 0, ?5, ?6, ?6, ?6) RETURNING id"
    )
});
static UPSERT_PR_HEAD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO pull_requests ({PR_HEAD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) {}",
        super::pr_head::UPSERT_PR_HEAD
    )
});

/// Writes the candidates' rows; one outcome per candidate, in order.
fn write_batch(conn: &Connection, candidates: &[&Item], now: UnixMs) -> Result<Vec<Intake>> {
    let mut deliveries = conn.prepare_cached(&INSERT_DELIVERY)?;
    let mut outcomes = Vec::with_capacity(candidates.len());
    let mut fresh: Vec<&Item> = Vec::new();
    for item in candidates {
        let d = &item.delivery;
        let row: Option<i64> = deliveries
            .query_row(
                params![d.forge.as_str(), d.target, d.delivery_id, d.event_type, now],
                |row| row.get(0),
            )
            .optional()
            .context("recording deliveries")?;
        let Some(delivery) = row else {
            outcomes.push(Intake::Duplicate);
            continue;
        };
        let job = match &item.job {
            Some(job) if takes_up(conn, job, now)? => Some(enqueue(conn, delivery, job, now)?),
            _ => None,
        };
        fresh.push(item);
        outcomes.push(Intake::Recorded { delivery, job });
    }
    let heads = super::intake::last_heads(fresh.iter().copied());
    if !heads.is_empty() {
        let mut upsert = conn.prepare_cached(&UPSERT_PR_HEAD)?;
        for head in heads {
            let (pusher_head, pusher_id, pusher_login) = super::pr_head::pusher_columns(head)?;
            upsert
                .execute(params![
                    head.repo.forge.as_str(),
                    head.repo.full_name,
                    super::db::to_i64(head.pr.0, "pull request number")?,
                    head.head_sha.as_str(),
                    head.base_ref,
                    i64::from(head.open),
                    now,
                    pusher_head,
                    pusher_id,
                    pusher_login,
                    super::pr_head::first_comments_mark(now),
                ])
                .context("recording pull request heads")?;
        }
    }
    Ok(outcomes)
}

/// Whether this delivery is the first to bring the job's comment or review
/// (a job without one always is): whichever delivery, or the
/// reconciliation sweep, brings it first runs it.
fn takes_up(conn: &Connection, job: &super::NewJob, now: UnixMs) -> Result<bool> {
    let Some(once) = &job.once else {
        return Ok(true);
    };
    let mut insert = conn.prepare_cached(
        "INSERT INTO commands_seen (forge, repo, source, number, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (forge, repo, source) DO NOTHING",
    )?;
    let inserted = insert
        .execute(params![
            once.repo.forge.as_str(),
            once.repo.full_name,
            once.source.to_string(),
            super::db::to_i64(once.pr.0, "pull request number")?,
            now,
        ])
        .context("recording the comments taken up")?;
    Ok(inserted == 1)
}

fn enqueue(conn: &Connection, delivery: i64, job: &super::NewJob, now: UnixMs) -> Result<JobId> {
    let mut insert = conn.prepare_cached(&INSERT_JOB)?;
    let id = insert
        .query_row(
            params![
                delivery,
                job.kind.as_str(),
                job.queue_key,
                job.payload.to_string(),
                i64::from(job.max_attempts),
                now,
            ],
            |row| row.get(0),
        )
        .context("enqueueing jobs")?;
    Ok(JobId(id))
}
