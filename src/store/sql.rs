//! The SQL store on SQLite (the embedded default) or PostgreSQL (several
//! replicas): connection setup, our versioned migrations per backend, and
//! the queries behind every `Store` operation, written once in the SQL both
//! accept (`$n` parameters, `ON CONFLICT`, `RETURNING`) through sqlx's `Any`
//! driver — except a SQLite file's webhook intake, written through rusqlite
//! from a thread of its own (`intake_file.rs`) unless the URL sets options
//! only sqlx's connections carry out. Where they differ it is said here:
//! SQLite writes take its single write lock up front (`BEGIN IMMEDIATE`)
//! and WAL, busy timeout and foreign keys are set per connection;
//! PostgreSQL claims jobs with `FOR UPDATE SKIP LOCKED` and serialises each
//! repository's ledger appends with a transaction-scoped advisory lock, so
//! replicas never fork a chain.

use super::db::{begin_write, to_i64, to_opt_digest, to_u64, Backend, SQLITE_PRAGMAS};
use super::pr_head::{first_comments_mark, pusher_columns, UPSERT_PR_HEAD};
use super::{
    Clock, FailOutcome, Intake, Job, JobId, JobOutcome, JobStatus, NewDelivery, NewJob, NewPlan,
    PlanRecord, PrHead, PrRecord, PrReport, ReportStatus, StoreError, SystemClock,
};
use crate::model::{CommitSha, Digest, ForgeKind, PrNumber, RepoId, UnixMs};
use anyhow::{anyhow, bail, Context, Result};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::migrate::{MigrateError, MigrationSource, MigrationType, Migrator};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyConnection, AnyPool, AssertSqlSafe, Executor, Row, SqlSafeStr};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// How long the first connection may take before the server says the
/// database does not answer.
const CONNECT_PROBE: Duration = Duration::from_secs(10);

/// One connection before the pool: a refused, unreachable or misconfigured
/// server is named with its cause at once, where the pool would retry
/// silently until its own timeout and then report only that it timed out.
async fn probe(options: &AnyConnectOptions, url: &str) -> Result<()> {
    use sqlx::Connection as _;
    let at = redact_url(url);
    match tokio::time::timeout(CONNECT_PROBE, AnyConnection::connect_with(options)).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(anyhow::Error::new(e).context(format!(
            "cannot connect to the database at `{at}`; check the address, the credentials and that PostgreSQL is running"
        ))),
        Err(_) => bail!(
            "the database at `{at}` did not answer within {}s; check the address and port, and that nothing drops the connection on the way",
            CONNECT_PROBE.as_secs()
        ),
    }
}

#[derive(Debug)]
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) name: &'static str,
    pub(super) sql: &'static str,
}

/// One backend's embedded migrations as sqlx's migrator reads them: it
/// applies each once, in order, under a lock (PostgreSQL: replicas starting
/// together migrate one at a time), and records it with its checksum in
/// `_sqlx_migrations`, so a migration changed after it was applied is an
/// error rather than a silent difference.
#[derive(Debug)]
struct Embedded(&'static [Migration]);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<Vec<sqlx::migrate::Migration>, sqlx::error::BoxDynError>,
                > + Send
                + 's,
        >,
    > {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|m| {
                    sqlx::migrate::Migration::new(
                        m.version,
                        std::borrow::Cow::Borrowed(m.name),
                        MigrationType::Simple,
                        m.sql.into_sql_str(),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// The migrations in order, the same for both backends, each from
/// `migrations/<backend>/`.
macro_rules! migrations {
    ($backend:literal) => {
        &[
            Migration {
                version: 1,
                name: "init",
                sql: include_str!(concat!("migrations/", $backend, "/0001_init.sql")),
            },
            Migration {
                version: 2,
                name: "ledger",
                sql: include_str!(concat!("migrations/", $backend, "/0002_ledger.sql")),
            },
            Migration {
                version: 3,
                name: "plan report",
                sql: include_str!(concat!("migrations/", $backend, "/0003_plan_report.sql")),
            },
            Migration {
                version: 4,
                name: "apply runs",
                sql: include_str!(concat!("migrations/", $backend, "/0004_apply.sql")),
            },
            Migration {
                version: 5,
                name: "repositories",
                sql: include_str!(concat!("migrations/", $backend, "/0005_repositories.sql")),
            },
            Migration {
                version: 6,
                name: "fact signatures",
                sql: include_str!(concat!(
                    "migrations/",
                    $backend,
                    "/0006_fact_signatures.sql"
                )),
            },
            Migration {
                version: 7,
                name: "head pusher",
                sql: include_str!(concat!("migrations/", $backend, "/0007_head_pusher.sql")),
            },
            Migration {
                version: 8,
                name: "commands seen",
                sql: include_str!(concat!("migrations/", $backend, "/0008_commands_seen.sql")),
            },
            Migration {
                version: 9,
                name: "redeliveries",
                sql: include_str!(concat!("migrations/", $backend, "/0009_redeliveries.sql")),
            },
            Migration {
                version: 10,
                name: "hook facts",
                sql: include_str!(concat!("migrations/", $backend, "/0010_hook_facts.sql")),
            },
            Migration {
                version: 11,
                name: "command logs",
                sql: include_str!(concat!("migrations/", $backend, "/0011_command_logs.sql")),
            },
            Migration {
                version: 12,
                name: "operator facts",
                sql: include_str!(concat!("migrations/", $backend, "/0012_operator_facts.sql")),
            },
            Migration {
                version: 13,
                name: "api tokens",
                sql: include_str!(concat!("migrations/", $backend, "/0013_api_tokens.sql")),
            },
            Migration {
                version: 14,
                name: "drift",
                sql: include_str!(concat!("migrations/", $backend, "/0014_drift.sql")),
            },
            Migration {
                version: 15,
                name: "dispatched jobs",
                sql: include_str!(concat!(
                    "migrations/",
                    $backend,
                    "/0015_dispatched_jobs.sql"
                )),
            },
            Migration {
                version: 16,
                name: "dispatched run sha",
                sql: include_str!(concat!(
                    "migrations/",
                    $backend,
                    "/0016_dispatched_run_sha.sql"
                )),
            },
            Migration {
                version: 17,
                name: "dispatched output",
                sql: include_str!(concat!(
                    "migrations/",
                    $backend,
                    "/0017_dispatched_output.sql"
                )),
            },
            Migration {
                version: 18,
                name: "dispatched ends by",
                sql: include_str!(concat!(
                    "migrations/",
                    $backend,
                    "/0018_dispatched_ends_by.sql"
                )),
            },
        ]
    };
}

pub(super) const SQLITE_MIGRATIONS: &[Migration] = migrations!("sqlite");
pub(super) const POSTGRES_MIGRATIONS: &[Migration] = migrations!("postgres");

pub(super) fn newest_known_version() -> i64 {
    SQLITE_MIGRATIONS.last().map_or(0, |m| m.version)
}

macro_rules! job_columns {
    () => {
        "id, kind, queue_key, payload, status, attempts, max_attempts, run_after, \
         lease_owner, lease_until, last_error, outcome, created_at, updated_at"
    };
}

macro_rules! pr_columns {
    () => {
        "forge, repo, number, head_sha, base_ref, CAST(is_open AS INTEGER) AS is_open, \
         report_comment_id, check_id, report_head, report_digest, report_status, \
         pusher_head, pusher_id, pusher_login"
    };
}
pub(super) use pr_columns;

macro_rules! plan_columns {
    () => {
        "id, forge, repo, number, head_sha, base_sha, digest, change_set, created_at, report"
    };
}
pub(super) use plan_columns;

/// The oldest job that may run now: queued and due, or running under a lease
/// that expired. Never one whose queue key has an earlier unfinished job or
/// another job under a live lease.
const NEXT_RUNNABLE_JOB: &str = "\
SELECT j.id, j.status, j.attempts, j.max_attempts, j.lease_expiries, j.last_error
FROM jobs j
WHERE ((j.status = 'queued' AND j.run_after <= $1)
    OR (j.status = 'running' AND j.lease_until <= $1))
  AND NOT EXISTS (
    SELECT 1 FROM jobs other
    WHERE other.queue_key = j.queue_key
      AND other.id <> j.id
      AND ((other.id < j.id AND other.status IN ('queued', 'running'))
        OR (other.status = 'running' AND other.lease_until > $1)))
ORDER BY j.id
LIMIT 1";

/// The handle every part of the bot shares; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(super) pool: AnyPool,
    pub(super) backend: Backend,
    clock: Arc<dyn Clock>,
    /// Writers in this process queue here instead of in SQLite's busy
    /// handler, which sleeps and retries and wastes most of the time it waits.
    pub(super) writer: Arc<tokio::sync::Mutex<()>>,
    /// Deliveries go through one writer that commits them in groups.
    intake: tokio::sync::mpsc::Sender<super::intake::Request>,
    /// Signs every fact appended ([`Store::signing_with`]); the server's
    /// alone, never in the database.
    pub(super) ledger_key: Option<Arc<crate::gate::ledger::LedgerKey>>,
    /// Where each chain stood when signing with `ledger_key` began (its own
    /// signature checked): facts after that count only when signed by it.
    pub(super) signing: Option<Arc<crate::gate::ledger::SigningStart>>,
    /// When the database last answered (monotonic), so a busy database can
    /// be told from one that is gone ([`Store::answered_within`]).
    answered: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("pool", &self.pool).finish()
    }
}

impl Store {
    /// Opens (creating if missing) `sqlite://path` or `sqlite::memory:` and
    /// brings its schema up to date.
    pub async fn open(url: &str) -> Result<Store> {
        Self::open_with_clock(url, Arc::new(SystemClock)).await
    }

    pub(crate) async fn open_with_clock(url: &str, clock: Arc<dyn Clock>) -> Result<Store> {
        Self::connect(url, clock, true).await
    }

    /// Opens a database that must already exist (for commands that inspect
    /// one: a mistyped path is an error, never a new empty database), and
    /// brings its schema up to date.
    pub async fn open_existing(url: &str) -> Result<Store> {
        if backend_of(url)? == Backend::Sqlite {
            let options = SqliteConnectOptions::from_str(url)
                .with_context(|| format!("`{url}` is not a SQLite database URL"))?;
            let path = options.get_filename();
            if !in_memory(url) && !path.is_file() {
                bail!(
                    "there is no database at `{}` (from `{url}`): give the URL of wavegate's database",
                    path.display()
                );
            }
        }
        Self::connect(url, Arc::new(SystemClock), false).await
    }

    async fn connect(url: &str, clock: Arc<dyn Clock>, create_if_missing: bool) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let backend = backend_of(url)?;
        let mut pool_options = AnyPoolOptions::new();
        let mut url = url.to_owned();
        if backend == Backend::Sqlite {
            if create_if_missing {
                if let Some(path) = sqlite_file(&url) {
                    create_private(&path)?;
                }
            }
            if create_if_missing && !in_memory(&url) && !url.contains("mode=") {
                url.push(if url.contains('?') { '&' } else { '?' });
                url.push_str("mode=rwc");
            }
            let wal = !in_memory(&url);
            pool_options = pool_options.after_connect(move |conn, _| {
                Box::pin(async move {
                    conn.execute(SQLITE_PRAGMAS).await?;
                    if wal {
                        conn.execute("PRAGMA journal_mode = WAL;").await?;
                    }
                    Ok(())
                })
            });
            if in_memory(&url) {
                // Each connection would otherwise see its own empty database,
                // and the data would vanish when the last connection closed.
                pool_options = pool_options
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None);
            }
        }
        let options = AnyConnectOptions::from_str(&url)
            .with_context(|| format!("`{url}` is not a database URL wavegate understands"))?;
        if backend == Backend::Postgres {
            probe(&options, &url).await?;
        }
        let pool = pool_options
            .connect_with(options)
            .await
            .with_context(|| format!("opening the database at `{}`", redact_url(&url)))?;
        let writer: Arc<tokio::sync::Mutex<()>> = Arc::default();
        let intake = match own_thread_intake_file(&url) {
            Some(file) => super::intake_file::spawn_writer(file, writer.clone(), clock.clone())?,
            None => {
                super::intake::spawn_writer(pool.clone(), backend, writer.clone(), clock.clone())
            }
        };
        let store = Store {
            intake,
            pool,
            backend,
            clock,
            writer,
            ledger_key: None,
            signing: None,
            answered: Arc::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// This store, signing every fact it appends with `key` from now on;
    /// the first time for this key, after recording where each chain stands
    /// ([`Store::start_signing`]).
    pub async fn signing_with(mut self, key: Arc<crate::gate::ledger::LedgerKey>) -> Result<Self> {
        let start = self.start_signing(&key).await?;
        if !start.verifies(&key.public()) {
            bail!(
                "the record of when ledger signing began (key {}) is not signed by that key: the database was changed outside wavegate; restore it from a backup, and run `wavegate ledger verify`",
                start.key
            );
        }
        self.signing = Some(Arc::new(start));
        self.ledger_key = Some(key);
        Ok(self)
    }

    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// A transaction that writes: SQLite takes its write lock up front, so
    /// two writers queue instead of failing half-way.
    pub(super) async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let tx = begin_write(&self.pool, self.backend).await?;
        self.mark_answered();
        Ok(tx)
    }

    fn mark_answered(&self) {
        if let Ok(mut at) = self.answered.lock() {
            *at = Some(std::time::Instant::now());
        }
    }

    /// Whether the database answered this process within `window`: it is
    /// there, if busy. Every worker's claim marks it, so it is fresh.
    pub(crate) fn answered_within(&self, window: Duration) -> bool {
        self.answered
            .lock()
            .ok()
            .and_then(|at| *at)
            .is_some_and(|at| at.elapsed() <= window)
    }

    /// Now, in unix ms, by the store's clock: what every record and fact is dated by.
    pub(crate) fn now(&self) -> UnixMs {
        self.clock.now()
    }

    async fn migrate(&self) -> Result<()> {
        let known = newest_known_version();
        let migrator = Migrator::new(Embedded(self.migrations()))
            .await
            .context("reading the embedded database migrations")?;
        let too_new = |found| StoreError::SchemaTooNew { found, known };
        // A database from before sqlx's migrator, met for the first time:
        // what wavegate's own table says was applied is recorded as applied,
        // never run again.
        if let Some(found) = self.legacy_to_take_over().await? {
            if found > known {
                return Err(too_new(found).into());
            }
            if let Err(error) = migrator.skip(&self.pool, Some(found)).await {
                return Err(anyhow::Error::new(error)
                    .context("recording the migrations schema_migrations lists as applied"));
            }
        }
        match migrator.run(&self.pool).await {
            Ok(()) => Ok(()),
            Err(MigrateError::VersionMissing(_)) => {
                Err(too_new(self.schema_version().await?).into())
            }
            Err(error) => Err(anyhow::Error::new(error).context("applying database migrations")),
        }
    }

    fn migrations(&self) -> &'static [Migration] {
        match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        }
    }

    /// The newest version wavegate's own migration table (`schema_migrations`,
    /// before sqlx's migrator) lists, when the database has that table with
    /// wavegate's columns and sqlx's migrator has recorded nothing yet.
    async fn legacy_to_take_over(&self) -> Result<Option<i64>> {
        if !self.table_exists("schema_migrations").await? {
            return Ok(None);
        }
        if self.table_exists("_sqlx_migrations").await? {
            let recorded: i64 = sqlx::query("SELECT COUNT(*) FROM _sqlx_migrations")
                .fetch_one(&self.pool)
                .await
                .context("reading _sqlx_migrations")?
                .try_get(0)?;
            if recorded > 0 {
                return Ok(None);
            }
        }
        // Another tool's table of that name (other columns) is not ours.
        let ours = sqlx::query(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE name IS NOT NULL AND applied_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await;
        match ours {
            Ok(row) => Ok(Some(row.try_get(0)?)),
            Err(error) => {
                tracing::info!(
                    "a schema_migrations table that is not wavegate's is left alone: {error}"
                );
                Ok(None)
            }
        }
    }

    /// Whether a table of that name is visible (SQLite: in the main
    /// database; PostgreSQL: on the search path, as an unqualified name is).
    async fn table_exists(&self, name: &str) -> Result<bool> {
        let query = match self.backend {
            Backend::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $1",
            Backend::Postgres => {
                "SELECT COUNT(*) FROM pg_catalog.pg_class c WHERE c.relname = $1 AND c.relkind IN ('r', 'p') AND pg_catalog.pg_table_is_visible(c.oid)"
            }
        };
        let count: i64 = sqlx::query(query)
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("looking for the {name} table"))?
            .try_get(0)?;
        Ok(count > 0)
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .fetch_one(&self.pool)
            .await
            .context("the database does not answer")?;
        self.mark_answered();
        Ok(())
    }

    /// The newest migration applied to the database (0 when none).
    pub(crate) async fn schema_version(&self) -> Result<i64> {
        let version: i64 = sqlx::query(
            "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success = TRUE",
        )
        .fetch_one(&self.pool)
        .await
        .context("reading the database schema version")?
        .try_get(0)?;
        Ok(version)
    }

    /// Records a delivery (unique per forge, target and delivery id): when it
    /// was seen before, answers `Intake::Duplicate` and writes nothing else;
    /// otherwise enqueues the job (if any), upserts the pull request's head
    /// (if any) and answers `Intake::Recorded` — all in one transaction,
    /// shared with the deliveries arriving at the same time (`intake.rs`;
    /// a SQLite file's in `intake_file.rs`).
    pub async fn record_delivery(
        &self,
        delivery: NewDelivery,
        job: Option<NewJob>,
        head: Option<PrHead>,
    ) -> Result<Intake> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let id = delivery.delivery_id.clone();
        let request = super::intake::Request {
            item: super::intake::Item {
                delivery,
                job,
                head,
            },
            reply,
        };
        let gone = || anyhow!("the intake writer has stopped; delivery {id} was not recorded");
        self.intake.send(request).await.map_err(|_| gone())?;
        let recorded = answer.await.map_err(|_| gone())?;
        if recorded.is_ok() {
            self.mark_answered();
        }
        recorded
    }

    pub async fn enqueue(&self, job: NewJob) -> Result<JobId> {
        let now = self.now();
        self.enqueue_at(job, now).await
    }

    /// Enqueues a job that is not claimed before `run_after` (ms since the
    /// epoch). Later jobs of its queue wait behind it.
    pub(crate) async fn enqueue_at(&self, job: NewJob, run_after: UnixMs) -> Result<JobId> {
        let _writer = self.writer.lock().await;
        let mut conn = self.pool.acquire().await?;
        let now = self.now();
        insert_job(&mut conn, &job, None, now, run_after.max(now)).await
    }

    /// Claims the oldest runnable job for `worker` for `lease`: one queued
    /// and due, or one running whose lease expired (its worker died). Jobs of
    /// one queue key run one at a time, in id order. A job that would exceed
    /// its max_attempts (its leases kept expiring) is dead-lettered instead,
    /// and the next one is tried.
    pub(crate) async fn claim(&self, worker: &str, lease: Duration) -> Result<Option<Job>> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let lease_until = now + lease;
        let mut tx = self.begin_write().await?;
        loop {
            let next = match self.backend {
                Backend::Sqlite => NEXT_RUNNABLE_JOB.to_owned(),
                // Replicas claiming at once each skip the row another locked.
                Backend::Postgres => format!("{NEXT_RUNNABLE_JOB} FOR UPDATE OF j SKIP LOCKED"),
            };
            let candidate = sqlx::query(sqlx::AssertSqlSafe(next))
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .context("looking for a runnable job")?;
            let Some(candidate) = candidate else {
                tx.commit().await?;
                return Ok(None);
            };
            let id: i64 = candidate.try_get("id")?;
            let was_running = candidate.try_get::<String, _>("status")? == "running";
            let attempts: i64 = candidate.try_get("attempts")?;
            let max_attempts: i64 = candidate.try_get("max_attempts")?;
            let lease_expiries: i64 =
                candidate.try_get::<i64, _>("lease_expiries")? + i64::from(was_running);

            if attempts >= max_attempts {
                let earlier_error: Option<String> = candidate.try_get("last_error")?;
                let error = lease_expired_error(lease_expiries, earlier_error.as_deref());
                sqlx::query(
                    "UPDATE jobs SET status = 'dead', lease_until = NULL, lease_expiries = $2,
                            last_error = $3, updated_at = $4
                     WHERE id = $1",
                )
                .bind(id)
                .bind(lease_expiries)
                .bind(error)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                continue;
            }

            let row = sqlx::query(concat!(
                "UPDATE jobs SET status = 'running', lease_owner = $2, lease_until = $3,
                        attempts = attempts + 1, lease_expiries = $4, updated_at = $5
                 WHERE id = $1
                 RETURNING ",
                job_columns!()
            ))
            .bind(id)
            .bind(worker)
            .bind(lease_until)
            .bind(lease_expiries)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .with_context(|| format!("claiming job {id}"))?;
            let job = job_from_row(&row)?;
            tx.commit().await?;
            return Ok(Some(job));
        }
    }

    /// Pushes the lease out to now + `lease`; false when `worker` no longer
    /// holds the job.
    pub(crate) async fn extend_lease(
        &self,
        id: JobId,
        worker: &str,
        lease: Duration,
    ) -> Result<bool> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let extended = sqlx::query(
            "UPDATE jobs SET lease_until = $3, updated_at = $4
             WHERE id = $1 AND lease_owner = $2 AND status = 'running'",
        )
        .bind(id.0)
        .bind(worker)
        .bind(now + lease)
        .bind(now)
        .execute(&self.pool)
        .await
        .with_context(|| format!("extending the lease on job {id}"))?
        .rows_affected();
        Ok(extended == 1)
    }

    /// Finishes a job `worker` holds; `StoreError::LeaseNotHeld` when it does
    /// not (another worker took it over, or it already finished).
    pub(crate) async fn complete(
        &self,
        id: JobId,
        worker: &str,
        outcome: JobOutcome,
    ) -> Result<()> {
        let _writer = self.writer.lock().await;
        let (status, reason) = match outcome {
            JobOutcome::Done => (JobStatus::Done, None),
            JobOutcome::Skipped(reason) => (JobStatus::Skipped, Some(reason)),
        };
        let finished = sqlx::query(
            "UPDATE jobs SET status = $3, outcome = $4, lease_until = NULL, updated_at = $5
             WHERE id = $1 AND lease_owner = $2 AND status = 'running'",
        )
        .bind(id.0)
        .bind(worker)
        .bind(status.as_str())
        .bind(reason)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("completing job {id}"))?
        .rows_affected();
        if finished == 0 {
            return Err(lease_not_held(id, worker));
        }
        Ok(())
    }

    /// Records a failed attempt: the job is queued again after
    /// `backoff(attempts)`, or dead once it has had max_attempts; the error
    /// is kept either way. `StoreError::LeaseNotHeld` when `worker` does not
    /// hold the job.
    pub(crate) async fn fail(&self, id: JobId, worker: &str, error: &str) -> Result<FailOutcome> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let held = sqlx::query(
            "SELECT attempts, max_attempts FROM jobs
             WHERE id = $1 AND lease_owner = $2 AND status = 'running'",
        )
        .bind(id.0)
        .bind(worker)
        .fetch_optional(&mut *tx)
        .await
        .with_context(|| format!("reading job {id}"))?;
        let Some(held) = held else {
            tx.rollback().await?;
            return Err(lease_not_held(id, worker));
        };
        let attempts: i64 = held.try_get("attempts")?;
        let max_attempts: i64 = held.try_get("max_attempts")?;
        let outcome = if attempts >= max_attempts {
            sqlx::query(
                "UPDATE jobs SET status = 'dead', lease_until = NULL, last_error = $2,
                        updated_at = $3
                 WHERE id = $1",
            )
            .bind(id.0)
            .bind(error)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            FailOutcome::Dead
        } else {
            let wait = super::backoff(u32::try_from(attempts).unwrap_or(u32::MAX));
            let at = now + wait;
            sqlx::query(
                "UPDATE jobs SET status = 'queued', run_after = $2, lease_owner = NULL,
                        lease_until = NULL, last_error = $3, updated_at = $4
                 WHERE id = $1",
            )
            .bind(id.0)
            .bind(at)
            .bind(error)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            FailOutcome::Retry { at }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// Queues again, to run now, every job the store says `worker` holds.
    /// Only for a worker that runs no job: one whose claim committed though
    /// its answer was lost, or whose outcome could not be written, would
    /// otherwise wait out a whole lease. It counts as that lease running
    /// out: the attempt stays counted, with why as its error, so a job on
    /// its last attempt is dead-lettered saying so.
    pub(crate) async fn release_held(&self, worker: &str) -> Result<Vec<JobId>> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let rows = sqlx::query(
            "UPDATE jobs SET status = 'queued', run_after = $2, lease_owner = NULL,
                    lease_until = NULL, lease_expiries = lease_expiries + 1,
                    last_error = $3, updated_at = $2
             WHERE status = 'running' AND lease_owner = $1
             RETURNING id",
        )
        .bind(worker)
        .bind(now)
        .bind(RELEASED_ERROR)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("giving back the jobs {worker} holds"))?;
        let mut released = rows
            .iter()
            .map(|row| row.try_get("id").map(JobId))
            .collect::<Result<Vec<_>, _>>()?;
        released.sort();
        Ok(released)
    }

    pub async fn job(&self, id: JobId) -> Result<Option<Job>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1"
        ))
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading job {id}"))?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Every job, in id order.
    pub async fn jobs(&self) -> Result<Vec<Job>> {
        sqlx::query(concat!("SELECT ", job_columns!(), " FROM jobs ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .context("reading the jobs")?
            .iter()
            .map(job_from_row)
            .collect()
    }

    /// Up to `limit` jobs whose queue key starts with `prefix` (one
    /// repository's: `jobs::queue_key_prefix`), queued, running or dead,
    /// newest first.
    pub(crate) async fn unfinished_jobs(&self, prefix: &str, limit: u32) -> Result<Vec<Job>> {
        sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE status IN ('queued', 'running', 'dead') \
             AND substr(queue_key, 1, CAST($1 AS INTEGER)) = $2 ORDER BY id DESC LIMIT $3"
        ))
        .bind(i64::try_from(prefix.chars().count())?)
        .bind(prefix)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the unfinished jobs of {prefix}…"))?
        .iter()
        .map(job_from_row)
        .collect()
    }

    /// The jobs of one queue key (one pull request's) that are queued,
    /// running or dead, oldest first.
    pub(crate) async fn unfinished_jobs_of(&self, queue_key: &str) -> Result<Vec<Job>> {
        sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE queue_key = $1 AND status IN ('queued', 'running', 'dead') \
             ORDER BY id"
        ))
        .bind(queue_key)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the unfinished jobs of {queue_key}"))?
        .iter()
        .map(job_from_row)
        .collect()
    }

    pub async fn delivery_count(&self) -> Result<i64> {
        let count: i64 = sqlx::query("SELECT COUNT(*) FROM deliveries")
            .fetch_one(&self.pool)
            .await
            .context("counting deliveries")?
            .try_get(0)?;
        Ok(count)
    }

    /// Records a pull request's head outside a delivery (e.g. reconciling
    /// with the forge after missed webhooks). Report fields are kept.
    pub async fn upsert_pr_head(&self, head: PrHead) -> Result<()> {
        let _writer = self.writer.lock().await;
        let mut conn = self.pool.acquire().await?;
        upsert_pr_head(&mut conn, &head, self.now()).await
    }

    pub async fn pr(&self, repo: &RepoId, pr: PrNumber) -> Result<Option<PrRecord>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            pr_columns!(),
            " FROM pull_requests WHERE forge = $1 AND repo = $2 AND number = $3"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading pull request {repo}{pr}"))?;
        row.as_ref().map(pr_from_row).transpose()
    }

    /// Records the report posted for a head. A report without a comment id
    /// keeps the known comment (there is one report comment, edited in
    /// place); the check id belongs to the head and is replaced as given.
    pub async fn set_pr_report(&self, repo: &RepoId, pr: PrNumber, report: PrReport) -> Result<()> {
        let _writer = self.writer.lock().await;
        let updated = sqlx::query(
            "UPDATE pull_requests
             SET report_head = $4, report_digest = $5,
                 report_comment_id = COALESCE($6, report_comment_id), check_id = $7,
                 report_status = $8, updated_at = $9
             WHERE forge = $1 AND repo = $2 AND number = $3",
        )
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .bind(report.head_sha.as_str())
        .bind(report.digest.as_ref().map(Digest::as_str))
        .bind(
            report
                .comment_id
                .map(|id| to_i64(id, "comment id"))
                .transpose()?,
        )
        .bind(
            report
                .check_id
                .map(|id| to_i64(id, "check id"))
                .transpose()?,
        )
        .bind(report.status.map(ReportStatus::as_str))
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording the report of {repo}{pr}"))?
        .rows_affected();
        if updated == 0 {
            bail!("no pull request {repo}{pr} is recorded: record its head first");
        }
        Ok(())
    }

    pub(crate) async fn save_plan(&self, plan: NewPlan) -> Result<i64> {
        let _writer = self.writer.lock().await;
        let id: i64 = sqlx::query(
            "INSERT INTO plans (forge, repo, number, head_sha, base_sha, digest, change_set,
                                created_at, report)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             RETURNING id",
        )
        .bind(plan.repo.forge.as_str())
        .bind(&plan.repo.full_name)
        .bind(to_i64(plan.pr.0, "pull request number")?)
        .bind(plan.head_sha.as_str())
        .bind(plan.base_sha.as_str())
        .bind(plan.digest.as_ref().map(Digest::as_str))
        .bind(serde_json::to_string(&plan.change_set)?)
        .bind(self.now())
        .bind(&plan.report)
        .fetch_one(&self.pool)
        .await
        .with_context(|| format!("saving a plan of {}{}", plan.repo, plan.pr))?
        .try_get("id")?;
        Ok(id)
    }

    /// The most recently saved plan of a pull request.
    pub(crate) async fn latest_plan(
        &self,
        repo: &RepoId,
        pr: PrNumber,
    ) -> Result<Option<PlanRecord>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            plan_columns!(),
            " FROM plans WHERE forge = $1 AND repo = $2 AND number = $3
              ORDER BY id DESC LIMIT 1"
        ))
        .bind(repo.forge.as_str())
        .bind(&repo.full_name)
        .bind(to_i64(pr.0, "pull request number")?)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("reading the latest plan of {repo}{pr}"))?;
        row.as_ref().map(plan_from_row).transpose()
    }
}

pub(super) async fn insert_job(
    conn: &mut AnyConnection,
    job: &NewJob,
    delivery: Option<i64>,
    now: UnixMs,
    run_after: UnixMs,
) -> Result<JobId> {
    if job.max_attempts == 0 {
        return Err(StoreError::NoAttemptsAllowed.into());
    }
    let id: i64 = sqlx::query(
        "INSERT INTO jobs (delivery_id, kind, queue_key, payload, status, attempts, max_attempts,
                           run_after, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 'queued', 0, $5, $7, $6, $6)
         RETURNING id",
    )
    .bind(delivery)
    .bind(job.kind.as_str())
    .bind(&job.queue_key)
    .bind(job.payload.to_string())
    .bind(i64::from(job.max_attempts))
    .bind(now)
    .bind(run_after)
    .fetch_one(&mut *conn)
    .await
    .with_context(|| format!("enqueueing a {} job for {}", job.kind, job.queue_key))?
    .try_get("id")?;
    Ok(JobId(id))
}

async fn upsert_pr_head(conn: &mut AnyConnection, head: &PrHead, now: UnixMs) -> Result<()> {
    let (pusher_head, pusher_id, pusher_login) = pusher_columns(head)?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO pull_requests (forge, repo, number, head_sha, base_ref, is_open, updated_at,
                                    pusher_head, pusher_id, pusher_login, comments_since)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         {UPSERT_PR_HEAD}"
    )))
    .bind(head.repo.forge.as_str())
    .bind(&head.repo.full_name)
    .bind(to_i64(head.pr.0, "pull request number")?)
    .bind(head.head_sha.as_str())
    .bind(&head.base_ref)
    .bind(i64::from(head.open))
    .bind(now)
    .bind(pusher_head)
    .bind(pusher_id)
    .bind(pusher_login)
    .bind(first_comments_mark(now))
    .execute(&mut *conn)
    .await
    .with_context(|| format!("recording the head of {}{}", head.repo, head.pr))?;
    Ok(())
}

fn lease_expired_error(times: i64, earlier_error: Option<&str>) -> String {
    let plural = if times == 1 { "" } else { "s" };
    match earlier_error {
        Some(earlier) => format!("lease expired {times} time{plural}; earlier error: {earlier}"),
        None => format!("lease expired {times} time{plural}"),
    }
}

fn lease_not_held(job: JobId, worker: &str) -> anyhow::Error {
    StoreError::LeaseNotHeld {
        job,
        worker: worker.to_owned(),
    }
    .into()
}

/// The error a job given back by its worker keeps ([`Store::release_held`]).
pub(crate) const RELEASED_ERROR: &str = "its worker lost the database's answer to the claim, or could not write how the attempt ended, while the database was away; it was given back to run again";

fn to_u32(value: i64, what: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| anyhow!("stored {what} {value} is out of range"))
}

fn forge_kind(text: &str) -> Result<ForgeKind> {
    text.parse()
        .map_err(|_| anyhow!("stored forge `{text}` is not one wavegate knows"))
}

pub(super) fn commit_sha(text: String) -> Result<CommitSha> {
    CommitSha::parse(&text).map_err(|e| anyhow!("stored {e}"))
}

fn job_from_row(row: &AnyRow) -> Result<Job> {
    let id = JobId(row.try_get("id")?);
    let status: String = row.try_get("status")?;
    let payload: String = row.try_get("payload")?;
    Ok(Job {
        id,
        kind: {
            let kind: String = row.try_get("kind")?;
            kind.parse().with_context(|| format!("job {id}"))?
        },
        queue_key: row.try_get("queue_key")?,
        payload: serde_json::from_str(&payload)
            .with_context(|| format!("job {id} has a payload that is not JSON"))?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| anyhow!("job {id} has an unknown status `{status}`"))?,
        attempts: to_u32(row.try_get("attempts")?, "attempts")?,
        max_attempts: to_u32(row.try_get("max_attempts")?, "max_attempts")?,
        run_after: row.try_get("run_after")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_until: row.try_get("lease_until")?,
        last_error: row.try_get("last_error")?,
        outcome: row.try_get("outcome")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) fn repo_from_row(row: &AnyRow) -> Result<RepoId> {
    let forge: String = row.try_get("forge")?;
    Ok(RepoId::new(
        forge_kind(&forge)?,
        row.try_get::<String, _>("repo")?,
    ))
}

pub(super) fn pr_from_row(row: &AnyRow) -> Result<PrRecord> {
    Ok(PrRecord {
        repo: repo_from_row(row)?,
        pr: PrNumber(to_u64(row.try_get("number")?, "pull request number")?),
        head_sha: commit_sha(row.try_get("head_sha")?)?,
        base_ref: row.try_get("base_ref")?,
        open: row.try_get::<i64, _>("is_open")? != 0,
        report_comment_id: row
            .try_get::<Option<i64>, _>("report_comment_id")?
            .map(|id| to_u64(id, "comment id"))
            .transpose()?,
        check_id: row
            .try_get::<Option<i64>, _>("check_id")?
            .map(|id| to_u64(id, "check id"))
            .transpose()?,
        report_head: row
            .try_get::<Option<String>, _>("report_head")?
            .map(commit_sha)
            .transpose()?,
        report_digest: to_opt_digest(row.try_get("report_digest")?, "report digest")?,
        report_status: report_status(row).context("reading a pull request's report status")?,
        pusher: match (
            row.try_get::<Option<String>, _>("pusher_head")?,
            row.try_get::<Option<i64>, _>("pusher_id")?,
            row.try_get::<Option<String>, _>("pusher_login")?,
        ) {
            (Some(head), Some(id), Some(login)) => Some(super::Pusher {
                head_sha: commit_sha(head)?,
                id: to_u64(id, "pusher id")?,
                login,
            }),
            _ => None,
        },
    })
}

/// A pull request's `report_status` column (written empty by earlier
/// versions where nothing was known).
pub(super) fn report_status(row: &AnyRow) -> Result<Option<super::ReportStatus>> {
    row.try_get::<Option<String>, _>("report_status")?
        .filter(|text| !text.is_empty())
        .map(|text| text.parse().map_err(anyhow::Error::msg))
        .transpose()
}

pub(super) fn plan_from_row(row: &AnyRow) -> Result<PlanRecord> {
    let id: i64 = row.try_get("id")?;
    let change_set: String = row.try_get("change_set")?;
    Ok(PlanRecord {
        id,
        repo: repo_from_row(row)?,
        pr: PrNumber(to_u64(row.try_get("number")?, "pull request number")?),
        head_sha: commit_sha(row.try_get("head_sha")?)?,
        base_sha: commit_sha(row.try_get("base_sha")?)?,
        digest: to_opt_digest(row.try_get("digest")?, "plan digest")?,
        change_set: serde_json::from_str(&change_set)
            .with_context(|| format!("plan {id} has a change set that is not JSON"))?,
        created_at: row.try_get("created_at")?,
        report: row.try_get("report")?,
    })
}

fn in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// Which backend a `WAVEGATE_DATABASE_URL` names.
/// The file of a `sqlite://` URL (none for an in-memory database).
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    if backend_of(url).ok()? != Backend::Sqlite || in_memory(url) {
        return None;
    }
    let options = SqliteConnectOptions::from_str(url).ok()?;
    Some(options.get_filename().to_owned())
}

/// The SQLite file whose deliveries are written from the intake writer's
/// own thread (`intake_file.rs`): one whose URL asks for nothing beyond
/// reading and writing it (`mode=rw`, `mode=rwc`, or no options). Anything
/// else keeps the sqlx writer, which opens its connection as the pool does,
/// so an option means the same for intake as for every other write:
/// `mode=ro` refuses deliveries instead of writing them, `vfs`, `immutable`
/// and `cache` are honoured. An in-memory database lives in the pool's one
/// connection, so it keeps the sqlx writer too.
pub(super) fn own_thread_intake_file(url: &str) -> Option<std::path::PathBuf> {
    let file = sqlite_file(url)?;
    let options = url.split_once('?').map_or("", |(_, options)| options);
    options
        .split('&')
        .all(|option| matches!(option, "" | "mode=rw" | "mode=rwc"))
        .then_some(file)
}

/// Creates the database file readable by the server's user alone (SQLite
/// gives its -wal and -shm files the same mode); an existing one is made so.
fn create_private(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .with_context(|| {
                        format!("cannot make {} readable by its owner alone", path.display())
                    })?;
                tracing::warn!(
                    "the database {} was readable by others (mode {:o}); it is 0600 now",
                    path.display(),
                    mode & 0o777
                );
            }
            Ok(())
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "cannot create the database file {}",
            path.display()
        ))),
    }
}

pub fn backend_of(url: &str) -> Result<Backend> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else {
        bail!(
            "`{}` is not a database wavegate can use: give sqlite://PATH (one replica) or postgres://USER@HOST/DB (several)",
            redact_url(url)
        )
    }
}

/// A database URL fit for a log line: any password replaced.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `.sql` file of a backend is listed, in order, and each listed
    /// migration is its file's text: a migration written but not listed
    /// would never run.
    #[test]
    fn every_migration_file_is_listed_for_both_backends() {
        for (backend, listed) in [
            ("sqlite", SQLITE_MIGRATIONS),
            ("postgres", POSTGRES_MIGRATIONS),
        ] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/store/migrations")
                .join(backend);
            let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "sql"))
                .collect();
            files.sort();
            assert_eq!(files.len(), listed.len(), "{backend}: {files:?}");
            for (file, migration) in files.iter().zip(listed) {
                let name = file.file_name().unwrap().to_str().unwrap();
                let version: i64 = name[..4].parse().unwrap();
                assert_eq!(version, migration.version, "{backend}: {name}");
                assert_eq!(
                    std::fs::read_to_string(file).unwrap(),
                    migration.sql,
                    "{backend}: {name} is listed as another file"
                );
            }
        }
        assert_eq!(
            SQLITE_MIGRATIONS.iter().map(|m| m.name).collect::<Vec<_>>(),
            POSTGRES_MIGRATIONS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
        );
    }
}
