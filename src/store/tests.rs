use super::sql::newest_known_version;
use super::test_db::{on_both, TestDatabase};
use super::*;
use crate::model::time::in_tests::millis;
use crate::model::{MemberId, UnixMs};
use std::collections::BTreeSet;
use std::sync::Arc;

const START: UnixMs = UnixMs::from_millis(1_700_000_000_000);
const LEASE: Duration = Duration::from_secs(30);

struct Fixture {
    store: Store,
    clock: Arc<ManualClock>,
    url: String,
    backend: Backend,
    _database: TestDatabase,
}

async fn fixture_on(backend: Backend) -> Fixture {
    fixture_of(TestDatabase::new(backend).await, backend).await
}

/// A SQLite file whose URL names an option (the default VFS, so nothing
/// else changes) and so keeps the sqlx intake writer: a SQLite file's
/// deliveries are otherwise written from the file writer's own thread, and
/// the sqlx writer's SQLite statements would go untested but for an
/// in-memory database.
async fn fixture_on_sqlx_writer() -> Fixture {
    let database = TestDatabase::sqlite_with_options("vfs=unix");
    assert!(sql::own_thread_intake_file(&database.url).is_none());
    fixture_of(database, Backend::Sqlite).await
}

async fn fixture_of(database: TestDatabase, backend: Backend) -> Fixture {
    let clock = Arc::new(ManualClock::new(START));
    let store = Store::open_with_clock(&database.url, clock.clone())
        .await
        .unwrap();
    Fixture {
        store,
        clock,
        url: database.url.clone(),
        backend,
        _database: database,
    }
}

fn delivery(id: &str) -> NewDelivery {
    NewDelivery {
        forge: ForgeKind::GitHub,
        target: "installation:7".into(),
        delivery_id: id.into(),
        event_type: "pull_request".into(),
    }
}

fn job(queue_key: &str, max_attempts: u32) -> NewJob {
    NewJob {
        kind: JobKind::Plan,
        queue_key: queue_key.into(),
        payload: serde_json::json!({ "key": queue_key }),
        max_attempts,
        once: None,
    }
}

fn repo() -> RepoId {
    RepoId::new(ForgeKind::GitHub, "acme/infra")
}

fn sha(digit: char) -> CommitSha {
    CommitSha::parse(&digit.to_string().repeat(40)).unwrap()
}

fn head(pr: u64, head_sha: CommitSha, open: bool) -> PrHead {
    PrHead {
        repo: repo(),
        pr: PrNumber(pr),
        head_sha,
        base_ref: "main".into(),
        open,
        pusher: None,
    }
}

fn lease_not_held(err: &anyhow::Error) -> bool {
    matches!(
        err.downcast_ref::<StoreError>(),
        Some(StoreError::LeaseNotHeld { .. })
    )
}

#[test]
fn backoff_starts_at_five_seconds_doubles_and_stops_at_ten_minutes() {
    assert_eq!(backoff(1), Duration::from_secs(5));
    assert_eq!(backoff(2), Duration::from_secs(10));
    assert_eq!(backoff(3), Duration::from_secs(20));
    assert_eq!(backoff(7), Duration::from_secs(320));
    assert_eq!(backoff(8), Duration::from_secs(600));
    assert_eq!(backoff(u32::MAX), Duration::from_secs(600));
}

on_both!(fixture_on, redelivery_is_a_duplicate_and_enqueues_no_second_job, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn redelivery_is_a_duplicate_and_enqueues_no_second_job(f: Fixture) {
    let first = f
        .store
        .record_delivery(delivery("d-1"), Some(job("pr-1", 3)), None)
        .await
        .unwrap();
    assert!(matches!(first, Intake::Recorded { job: Some(_), .. }));

    let again = f
        .store
        .record_delivery(delivery("d-1"), Some(job("pr-1", 3)), None)
        .await
        .unwrap();

    assert_eq!(again, Intake::Duplicate);
    assert_eq!(f.store.jobs().await.unwrap().len(), 1);
    assert_eq!(f.store.delivery_count().await.unwrap(), 1);
}

on_both!(fixture_on, a_duplicate_writes_nothing_not_even_the_pr_head, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn a_duplicate_writes_nothing_not_even_the_pr_head(f: Fixture) {
    f.store
        .record_delivery(delivery("d-1"), None, Some(head(1, sha('a'), true)))
        .await
        .unwrap();

    let again = f
        .store
        .record_delivery(delivery("d-1"), None, Some(head(1, sha('b'), true)))
        .await
        .unwrap();

    assert_eq!(again, Intake::Duplicate);
    let pr = f.store.pr(&repo(), PrNumber(1)).await.unwrap().unwrap();
    assert_eq!(pr.head_sha, sha('a'));
}

on_both!(fixture_on, the_same_delivery_id_through_another_hook_is_its_own_delivery, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn the_same_delivery_id_through_another_hook_is_its_own_delivery(f: Fixture) {
    f.store
        .record_delivery(delivery("d-1"), None, None)
        .await
        .unwrap();
    let other_hook = NewDelivery {
        target: "hook:99".into(),
        ..delivery("d-1")
    };

    let intake = f
        .store
        .record_delivery(other_hook, None, None)
        .await
        .unwrap();

    assert!(matches!(intake, Intake::Recorded { job: None, .. }));
    assert_eq!(f.store.delivery_count().await.unwrap(), 2);
}

on_both!(fixture_on, a_ping_with_no_work_is_still_recorded, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn a_ping_with_no_work_is_still_recorded(f: Fixture) {
    let ping = NewDelivery {
        event_type: "ping".into(),
        ..delivery("p-1")
    };

    let intake = f.store.record_delivery(ping, None, None).await.unwrap();

    assert!(matches!(intake, Intake::Recorded { job: None, .. }));
    assert_eq!(f.store.delivery_count().await.unwrap(), 1);
    assert!(f.store.jobs().await.unwrap().is_empty());
}

on_both!(fixture_on, jobs_of_one_pr_run_one_at_a_time_while_other_prs_go_on, #[tokio::test]);
async fn jobs_of_one_pr_run_one_at_a_time_while_other_prs_go_on(f: Fixture) {
    let first = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    let second = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    let other_pr = f.store.enqueue(job("pr-2", 3)).await.unwrap();

    let claimed = f.store.claim("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, first);
    assert_eq!(claimed.status, JobStatus::Running);
    assert_eq!(claimed.attempts, 1);
    assert_eq!(claimed.lease_owner.as_deref(), Some("w1"));
    assert_eq!(claimed.lease_until, Some(START + millis(30_000)));

    let meanwhile = f.store.claim("w2", LEASE).await.unwrap().unwrap();
    assert_eq!(meanwhile.id, other_pr);
    assert!(f.store.claim("w3", LEASE).await.unwrap().is_none());

    f.store
        .complete(first, "w1", JobOutcome::Done)
        .await
        .unwrap();

    let next = f.store.claim("w3", LEASE).await.unwrap().unwrap();
    assert_eq!(next.id, second);
    let done = f.store.job(first).await.unwrap().unwrap();
    assert_eq!(done.status, JobStatus::Done);
    assert_eq!(done.outcome, None);
}

on_both!(fixture_on, a_skipped_job_keeps_its_reason, #[tokio::test]);
async fn a_skipped_job_keeps_its_reason(f: Fixture) {
    let id = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();

    let reason = format!("superseded by {}", sha('b'));
    f.store
        .complete(id, "w1", JobOutcome::Skipped(reason.clone()))
        .await
        .unwrap();

    let skipped = f.store.job(id).await.unwrap().unwrap();
    assert_eq!(skipped.status, JobStatus::Skipped);
    assert_eq!(skipped.outcome, Some(reason));
    assert!(f.store.claim("w1", LEASE).await.unwrap().is_none());
}

on_both!(fixture_on, expired_lease_goes_to_a_second_worker_and_the_first_cannot_finish_it, #[tokio::test]);
async fn expired_lease_goes_to_a_second_worker_and_the_first_cannot_finish_it(f: Fixture) {
    let id = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();
    f.clock.advance(29_999);
    assert!(f.store.claim("w2", LEASE).await.unwrap().is_none());

    f.clock.advance(1);
    let taken_over = f.store.claim("w2", LEASE).await.unwrap().unwrap();

    assert_eq!(taken_over.id, id);
    assert_eq!(taken_over.attempts, 2);
    assert_eq!(taken_over.lease_owner.as_deref(), Some("w2"));
    let late = f
        .store
        .complete(id, "w1", JobOutcome::Done)
        .await
        .unwrap_err();
    assert!(lease_not_held(&late), "{late:?}");
    let late_failure = f.store.fail(id, "w1", "boom").await.unwrap_err();
    assert!(lease_not_held(&late_failure), "{late_failure:?}");
    assert!(!f.store.extend_lease(id, "w1", LEASE).await.unwrap());
    let still = f.store.job(id).await.unwrap().unwrap();
    assert_eq!(still.status, JobStatus::Running);
    assert_eq!(still.lease_owner.as_deref(), Some("w2"));
    f.store.complete(id, "w2", JobOutcome::Done).await.unwrap();
}

on_both!(fixture_on, an_extended_lease_keeps_the_job_from_being_taken_over, #[tokio::test]);
async fn an_extended_lease_keeps_the_job_from_being_taken_over(f: Fixture) {
    let id = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();
    f.clock.advance(20_000);

    assert!(f.store.extend_lease(id, "w1", LEASE).await.unwrap());
    f.clock.advance(20_000);

    assert!(f.store.claim("w2", LEASE).await.unwrap().is_none());
    let job = f.store.job(id).await.unwrap().unwrap();
    assert_eq!(job.lease_until, Some(START + millis(50_000)));
}

on_both!(fixture_on, a_worker_gives_back_the_jobs_it_holds_but_does_not_run, #[tokio::test]);
async fn a_worker_gives_back_the_jobs_it_holds_but_does_not_run(f: Fixture) {
    let lost_claim = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    let later = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    let others = f.store.enqueue(job("pr-2", 3)).await.unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();
    f.store.claim("w2", LEASE).await.unwrap().unwrap();
    assert!(f.store.claim("w3", LEASE).await.unwrap().is_none());

    assert_eq!(f.store.release_held("w1").await.unwrap(), [lost_claim]);

    let queued = f.store.job(lost_claim).await.unwrap().unwrap();
    assert_eq!(
        (queued.status, queued.lease_owner, queued.attempts),
        (JobStatus::Queued, None, 1),
        "the attempt stays counted"
    );
    assert_eq!(
        queued.last_error.as_deref(),
        Some(super::sql::RELEASED_ERROR)
    );
    let again = f.store.claim("w3", LEASE).await.unwrap().unwrap();
    assert_eq!(again.id, lost_claim, "at once, still ahead of {later}");
    assert_eq!(again.attempts, 2);
    assert!(f.store.release_held("w1").await.unwrap().is_empty());
    let running = f.store.job(others).await.unwrap().unwrap();
    assert_eq!(
        running.lease_owner.as_deref(),
        Some("w2"),
        "another's job stays"
    );
}

on_both!(fixture_on, a_failed_job_retries_after_backoff_and_dies_after_max_attempts, #[tokio::test]);
async fn a_failed_job_retries_after_backoff_and_dies_after_max_attempts(f: Fixture) {
    let id = f.store.enqueue(job("pr-1", 2)).await.unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();

    let outcome = f.store.fail(id, "w1", "forge answered 502").await.unwrap();

    let retry_at = START + backoff(1);
    assert_eq!(outcome, FailOutcome::Retry { at: retry_at });
    let waiting = f.store.job(id).await.unwrap().unwrap();
    assert_eq!(waiting.status, JobStatus::Queued);
    assert_eq!(waiting.run_after, retry_at);
    assert_eq!(waiting.last_error.as_deref(), Some("forge answered 502"));
    f.clock.set(retry_at - millis(1));
    assert!(f.store.claim("w1", LEASE).await.unwrap().is_none());

    f.clock.set(retry_at);
    let second_try = f.store.claim("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(second_try.attempts, 2);
    let outcome = f.store.fail(id, "w1", "forge answered 503").await.unwrap();

    assert_eq!(outcome, FailOutcome::Dead);
    let dead = f.store.job(id).await.unwrap().unwrap();
    assert_eq!(dead.status, JobStatus::Dead);
    assert_eq!(dead.last_error.as_deref(), Some("forge answered 503"));
    f.clock.advance(24 * 3600 * 1000);
    assert!(f.store.claim("w1", LEASE).await.unwrap().is_none());
}

on_both!(fixture_on, a_job_waiting_to_retry_holds_back_later_jobs_of_its_pr, #[tokio::test]);
async fn a_job_waiting_to_retry_holds_back_later_jobs_of_its_pr(f: Fixture) {
    let first = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    let later = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();
    let FailOutcome::Retry { at } = f.store.fail(first, "w1", "flaky").await.unwrap() else {
        panic!("a first failure must be retried");
    };

    assert!(f.store.claim("w1", LEASE).await.unwrap().is_none());

    f.clock.set(at);
    assert_eq!(f.store.claim("w1", LEASE).await.unwrap().unwrap().id, first);
    f.store
        .complete(first, "w1", JobOutcome::Done)
        .await
        .unwrap();
    assert_eq!(f.store.claim("w1", LEASE).await.unwrap().unwrap().id, later);
}

on_both!(fixture_on, a_job_whose_worker_keeps_crashing_is_dead_lettered_and_the_next_one_runs, #[tokio::test]);
async fn a_job_whose_worker_keeps_crashing_is_dead_lettered_and_the_next_one_runs(f: Fixture) {
    let crashing = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    let next = f.store.enqueue(job("pr-1", 3)).await.unwrap();
    for attempt in 1..=3 {
        let claimed = f.store.claim("w1", LEASE).await.unwrap().unwrap();
        assert_eq!((claimed.id, claimed.attempts), (crashing, attempt));
        f.clock.advance(LEASE.as_millis() as i64);
    }

    let claimed = f.store.claim("w2", LEASE).await.unwrap().unwrap();

    assert_eq!(claimed.id, next);
    let dead = f.store.job(crashing).await.unwrap().unwrap();
    assert_eq!(dead.status, JobStatus::Dead);
    assert_eq!(dead.attempts, 3);
    assert_eq!(dead.last_error.as_deref(), Some("lease expired 3 times"));
}

on_both!(fixture_on, a_job_needs_at_least_one_attempt, #[tokio::test]);
async fn a_job_needs_at_least_one_attempt(f: Fixture) {
    let err = f.store.enqueue(job("pr-1", 0)).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<StoreError>(),
        Some(&StoreError::NoAttemptsAllowed)
    );
}

on_both!(fixture_on, pr_head_is_upserted_and_the_report_survives_a_push, #[tokio::test]);
async fn pr_head_is_upserted_and_the_report_survives_a_push(f: Fixture) {
    f.store
        .record_delivery(delivery("opened"), None, Some(head(42, sha('a'), true)))
        .await
        .unwrap();
    f.store
        .set_pr_report(
            &repo(),
            PrNumber(42),
            PrReport {
                head_sha: sha('a'),
                digest: Some(Digest::repeated('1')),
                comment_id: Some(9001),
                check_id: Some(77),
                status: Some(ReportStatus::AwaitingApproval),
            },
        )
        .await
        .unwrap();

    f.store
        .record_delivery(delivery("pushed"), None, Some(head(42, sha('b'), true)))
        .await
        .unwrap();
    let pushed = f.store.pr(&repo(), PrNumber(42)).await.unwrap().unwrap();
    assert_eq!(pushed.head_sha, sha('b'));
    assert_eq!(pushed.report_head, Some(sha('a')));
    assert_eq!(pushed.report_comment_id, Some(9001));
    assert_eq!(pushed.report_status, Some(ReportStatus::AwaitingApproval));

    f.store
        .set_pr_report(
            &repo(),
            PrNumber(42),
            PrReport {
                head_sha: sha('b'),
                digest: None,
                comment_id: None,
                check_id: Some(78),
                status: Some(ReportStatus::Failed),
            },
        )
        .await
        .unwrap();
    f.store
        .record_delivery(delivery("closed"), None, Some(head(42, sha('b'), false)))
        .await
        .unwrap();

    let closed = f.store.pr(&repo(), PrNumber(42)).await.unwrap().unwrap();
    assert_eq!(
        closed,
        PrRecord {
            repo: repo(),
            pr: PrNumber(42),
            head_sha: sha('b'),
            base_ref: "main".into(),
            open: false,
            report_comment_id: Some(9001),
            check_id: Some(78),
            report_head: Some(sha('b')),
            report_digest: None,
            report_status: Some(ReportStatus::Failed),
            pusher: None,
        }
    );
    assert!(f.store.pr(&repo(), PrNumber(43)).await.unwrap().is_none());
}

on_both!(fixture_on, a_report_for_an_unknown_pr_is_refused, #[tokio::test]);
async fn a_report_for_an_unknown_pr_is_refused(f: Fixture) {
    let report = PrReport {
        head_sha: sha('a'),
        digest: None,
        comment_id: Some(1),
        check_id: None,
        status: Some(ReportStatus::Failed),
    };
    assert!(f
        .store
        .set_pr_report(&repo(), PrNumber(5), report)
        .await
        .is_err());
}

on_both!(fixture_on, the_latest_plan_of_a_pr_is_the_last_saved, #[tokio::test]);
async fn the_latest_plan_of_a_pr_is_the_last_saved(f: Fixture) {
    let plan = |head_sha: CommitSha, n: u64| NewPlan {
        repo: repo(),
        pr: PrNumber(n),
        head_sha,
        base_sha: sha('0'),
        digest: Some(empty_set().digest),
        change_set: empty_set(),
        report: format!("report of PR {n}"),
    };
    f.store.save_plan(plan(sha('a'), 1)).await.unwrap();
    f.clock.advance(1_000);
    let newest = f.store.save_plan(plan(sha('b'), 1)).await.unwrap();
    f.store.save_plan(plan(sha('c'), 2)).await.unwrap();

    let latest = f
        .store
        .latest_plan(&repo(), PrNumber(1))
        .await
        .unwrap()
        .unwrap();

    assert_eq!(latest.id, newest);
    assert_eq!(latest.head_sha, sha('b'));
    assert_eq!(latest.base_sha, sha('0'));
    assert_eq!(latest.change_set(), Ok(plan(sha('b'), 1).change_set));
    assert_eq!(latest.report, "report of PR 1");
    assert_eq!(latest.digest, plan(sha('b'), 1).digest);
    assert_eq!(latest.created_at, START + millis(1_000));
    assert!(f
        .store
        .latest_plan(&repo(), PrNumber(3))
        .await
        .unwrap()
        .is_none());
}

on_both!(fixture_on, concurrent_claims_never_hand_out_one_job_twice_even_across_replicas, #[tokio::test(flavor = "multi_thread", worker_threads = 4)]);
async fn concurrent_claims_never_hand_out_one_job_twice_even_across_replicas(f: Fixture) {
    let mut enqueued = BTreeSet::new();
    for n in 0..50 {
        enqueued.insert(f.store.enqueue(job(&format!("pr-{n}"), 3)).await.unwrap());
    }

    // Half the workers claim through a second store on the same
    // database: another replica, with no lock in common but the database's.
    let other = Store::open_with_clock(&f.url, f.clock.clone())
        .await
        .unwrap();
    let mut workers = Vec::new();
    for w in 0..8 {
        let store = if w % 2 == 0 {
            f.store.clone()
        } else {
            other.clone()
        };
        workers.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut claimed = Vec::new();
            while let Some(job) = store.claim(&worker, LEASE).await.unwrap() {
                claimed.push(job.id);
                store
                    .complete(job.id, &worker, JobOutcome::Done)
                    .await
                    .unwrap();
            }
            claimed
        }));
    }
    let mut all_claims = Vec::new();
    for worker in workers {
        all_claims.extend(worker.await.unwrap());
    }

    let distinct: BTreeSet<JobId> = all_claims.iter().copied().collect();
    assert_eq!(all_claims.len(), distinct.len(), "a job was claimed twice");
    assert_eq!(distinct, enqueued);
}

on_both!(fixture_on, reopening_the_database_keeps_the_data_and_applies_no_migration_twice, #[tokio::test]);
async fn reopening_the_database_keeps_the_data_and_applies_no_migration_twice(f: Fixture) {
    f.store
        .record_delivery(delivery("d-1"), Some(job("pr-1", 3)), None)
        .await
        .unwrap();
    let url = f.url.clone();
    drop(f.store);

    let reopened = Store::open_with_clock(&url, f.clock.clone()).await.unwrap();

    assert_eq!(
        reopened.schema_version().await.unwrap(),
        newest_known_version()
    );
    assert_eq!(reopened.delivery_count().await.unwrap(), 1);
    assert_eq!(reopened.jobs().await.unwrap().len(), 1);
    let redelivered = reopened
        .record_delivery(delivery("d-1"), Some(job("pr-1", 3)), None)
        .await
        .unwrap();
    assert_eq!(redelivered, Intake::Duplicate);
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&raw_pool(&url).await)
        .await
        .unwrap();
    assert_eq!(applied, super::sql::SQLITE_MIGRATIONS.len() as i64);
    if f.backend == Backend::Sqlite {
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&raw_pool(&url).await)
            .await
            .unwrap();
        assert_eq!(journal, "wal");
    }
}

on_both!(fixture_on, a_database_from_a_newer_wavegate_is_refused, #[tokio::test]);
async fn a_database_from_a_newer_wavegate_is_refused(f: Fixture) {
    drop(f.store);
    sqlx::raw_sql(future_migration(f.backend))
        .execute(&raw_pool(&f.url).await)
        .await
        .unwrap();

    let err = Store::open(&f.url).await.unwrap_err();

    assert_eq!(
        err.downcast_ref::<StoreError>(),
        Some(&StoreError::SchemaTooNew {
            found: 99,
            known: newest_known_version()
        })
    );
    assert_eq!(
        err.to_string(),
        format!(
            "database schema version 99 is newer than this wavegate (knows {}): upgrade wavegate",
            newest_known_version()
        )
    );
}

on_both!(legacy_on, a_database_migrated_before_sqlx_s_migrator_is_taken_over_and_nothing_runs_twice, #[tokio::test]);
async fn a_database_migrated_before_sqlx_s_migrator_is_taken_over_and_nothing_runs_twice(
    backend: Backend,
) {
    // What wavegate's own migrator left: every migration applied and listed
    // in schema_migrations, and the data written since.
    let (database, pool) = empty_database(backend).await;
    sqlx::raw_sql(
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let migrations = match backend {
        Backend::Sqlite => super::sql::SQLITE_MIGRATIONS,
        Backend::Postgres => super::sql::POSTGRES_MIGRATIONS,
    };
    for migration in migrations {
        sqlx::raw_sql(sqlx::AssertSqlSafe(migration.sql))
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, 0)")
            .bind(migration.version)
            .bind(migration.name)
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::raw_sql(
        "INSERT INTO deliveries (forge, target, delivery_id, event_type, received_at) VALUES ('github', 'installation:1', 'before', 'ping', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();

    let store = Store::open(&database.url).await.unwrap();

    assert_eq!(
        store.schema_version().await.unwrap(),
        newest_known_version()
    );
    assert_eq!(store.delivery_count().await.unwrap(), 1);
    assert_eq!(
        migrations_run(&pool).await,
        0,
        "a migration listed in schema_migrations ran again"
    );
    drop(store);
    let again = Store::open(&database.url).await.unwrap();
    assert_eq!(again.delivery_count().await.unwrap(), 1);
    drop(again);

    // Later, a newer wavegate migrated it further: this one refuses it.
    sqlx::raw_sql(future_migration(backend))
        .execute(&pool)
        .await
        .unwrap();
    let err = Store::open(&database.url).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<StoreError>(),
        Some(&StoreError::SchemaTooNew {
            found: 99,
            known: newest_known_version()
        }),
        "{err:#}"
    );
}

on_both!(legacy_on, another_tool_s_schema_migrations_table_is_left_alone, #[tokio::test]);
async fn another_tool_s_schema_migrations_table_is_left_alone(backend: Backend) {
    let (database, pool) = empty_database(backend).await;
    sqlx::raw_sql(
        "CREATE TABLE schema_migrations (version TEXT PRIMARY KEY); INSERT INTO schema_migrations (version) VALUES ('20240101000000')",
    )
    .execute(&pool)
    .await
    .unwrap();

    let store = Store::open(&database.url).await.unwrap();

    assert_eq!(
        store.schema_version().await.unwrap(),
        newest_known_version()
    );
    assert_eq!(
        migrations_run(&pool).await,
        super::sql::SQLITE_MIGRATIONS.len() as i64,
        "every migration ran"
    );
}

/// A database with nothing in it yet, and a raw pool on it.
async fn empty_database(backend: Backend) -> (TestDatabase, sqlx::AnyPool) {
    let database = TestDatabase::new(backend).await;
    let creating = match backend {
        Backend::Sqlite => format!("{}?mode=rwc", database.url),
        Backend::Postgres => database.url.clone(),
    };
    let pool = raw_pool(&creating).await;
    (database, pool)
}

/// Migrations sqlx's migrator ran (not those it recorded as run before).
async fn migrations_run(pool: &sqlx::AnyPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE execution_time >= 0")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A row a newer wavegate's migrator would have left: version 99.
fn future_migration(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99, 'future', TRUE, X'00', 0)",
        Backend::Postgres => "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99, 'future', TRUE, '\\x00'::bytea, 0)",
    }
}

async fn legacy_on(backend: Backend) -> Backend {
    backend
}

#[tokio::test]
async fn an_in_memory_store_keeps_its_data_across_calls() {
    let store = Store::open("sqlite::memory:").await.unwrap();
    store.ping().await.unwrap();
    let id = store.enqueue(job("pr-1", 1)).await.unwrap();

    let claimed = store.claim("w1", LEASE).await.unwrap().unwrap();

    assert_eq!(claimed.id, id);
    assert_eq!(
        store.schema_version().await.unwrap(),
        newest_known_version()
    );
}

#[tokio::test]
async fn an_in_memory_store_answers_after_recording_and_after_a_refused_delivery() {
    // Its one connection is the intake writer's only while it writes.
    let store = Store::open("sqlite::memory:").await.unwrap();
    let answers = async {
        let (good, bad) = tokio::join!(
            store.record_delivery(delivery("good"), Some(job("pr-1", 3)), None),
            store.record_delivery(delivery("bad"), Some(job("pr-2", 0)), None),
        );
        assert!(matches!(
            good.unwrap(),
            Intake::Recorded { job: Some(_), .. }
        ));
        assert!(bad.is_err());
        store.jobs().await.unwrap().len()
    };
    let jobs = tokio::time::timeout(Duration::from_secs(5), answers)
        .await
        .expect("the store answers at once");
    assert_eq!(jobs, 1);
}

#[tokio::test]
async fn the_sqlite_file_and_its_journal_are_the_servers_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mode = |name: &str| {
        std::fs::metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let url = format!("sqlite://{}/wavegate.db", dir.path().display());
    let store = Store::open(&url).await.unwrap();
    store.enqueue(job("pr-1", 1)).await.unwrap();
    for name in ["wavegate.db", "wavegate.db-wal", "wavegate.db-shm"] {
        assert_eq!(mode(name), 0o600, "{name}");
    }
    drop(store);

    // One that others could read is made private when opened.
    let loose = dir.path().join("loose.db");
    std::fs::write(&loose, "").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    Store::open(&format!("sqlite://{}", loose.display()))
        .await
        .unwrap();
    assert_eq!(mode("loose.db"), 0o600);
}

#[test]
fn a_sqlite_file_s_deliveries_go_to_the_writer_s_own_thread_unless_its_url_asks_for_more() {
    let own_thread = |url: &str| sql::own_thread_intake_file(url).is_some();
    assert!(own_thread("sqlite:///srv/wavegate.db"));
    assert!(own_thread("sqlite:///srv/wavegate.db?mode=rwc"));
    assert!(own_thread("sqlite:///srv/wavegate.db?mode=rw"));
    for sqlx_writer in [
        "sqlite::memory:",
        "sqlite:///srv/wavegate.db?mode=ro",
        "sqlite:///srv/wavegate.db?mode=memory",
        "sqlite:///srv/wavegate.db?mode=rwc&vfs=unix-dotfile",
        "sqlite:///srv/wavegate.db?immutable=true",
        "sqlite:///srv/wavegate.db?cache=shared",
        "postgres://wavegate@db/wavegate",
    ] {
        assert!(!own_thread(sqlx_writer), "{sqlx_writer}");
    }
}

#[tokio::test]
async fn a_read_only_database_refuses_deliveries_and_keeps_none() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let writable = Store::open(&database.url).await.unwrap();
    let read_only = Store::open(&format!("{}?mode=ro", database.url))
        .await
        .unwrap();

    let refused = read_only
        .record_delivery(delivery("d-1"), Some(job("pr-1", 3)), None)
        .await
        .unwrap_err();

    assert!(format!("{refused:#}").contains("readonly"), "{refused:#}");
    assert_eq!(writable.delivery_count().await.unwrap(), 0);
    assert!(writable.jobs().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_url_of_another_database_is_refused_with_a_hint_not_taken_as_a_file_name() {
    let err = Store::open("mysql://wavegate@localhost/wavegate")
        .await
        .unwrap_err();

    assert!(
        err.to_string()
            .contains("give sqlite://PATH (one replica) or postgres://USER@HOST/DB (several)"),
        "{err}"
    );
    assert_eq!(
        redact_url("postgres://wavegate:hunter2@db/wavegate"),
        "postgres://wavegate:***@db/wavegate"
    );
}
async fn raw_pool(url: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::AnyPool::connect(url).await.unwrap()
}

on_both!(fixture_on, deliveries_arriving_together_are_committed_together_and_each_answered_right, #[tokio::test(flavor = "multi_thread", worker_threads = 4)], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn deliveries_arriving_together_are_committed_together_and_each_answered_right(f: Fixture) {
    // Fifty deliveries, each sent twice, all at once: one of each pair is a duplicate.
    let mut tasks = Vec::new();
    for copy in 0..2 {
        for n in 0..50u64 {
            let store = f.store.clone();
            tasks.push(tokio::spawn(async move {
                let digit = char::from_digit((n % 10) as u32, 10).unwrap();
                let intake = store
                    .record_delivery(
                        delivery(&format!("d-{n}")),
                        Some(job(&format!("pr-{n}"), 3)),
                        Some(head(n % 5, sha(digit), true)),
                    )
                    .await
                    .unwrap();
                (n, copy, intake)
            }));
        }
    }
    let mut recorded = BTreeSet::new();
    let mut duplicates = 0;
    let mut job_of = std::collections::BTreeMap::new();
    for task in tasks {
        match task.await.unwrap() {
            (n, _, Intake::Recorded { job: Some(job), .. }) => {
                assert!(recorded.insert(n), "d-{n} recorded twice");
                job_of.insert(n, job);
            }
            (_, _, Intake::Duplicate) => duplicates += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((recorded.len(), duplicates), (50, 50));
    assert_eq!(f.store.delivery_count().await.unwrap(), 50);
    let jobs = f.store.jobs().await.unwrap();
    assert_eq!(jobs.len(), 50);
    for (n, id) in job_of {
        let job = f.store.job(id).await.unwrap().unwrap();
        assert_eq!(
            job.queue_key,
            format!("pr-{n}"),
            "each answer names its own job"
        );
    }
    for pr in 0..5u64 {
        let record = f.store.pr(&repo(), PrNumber(pr)).await.unwrap().unwrap();
        let sent: Vec<CommitSha> = (0..50u64)
            .filter(|n| n % 5 == pr)
            .map(|n| sha(char::from_digit((n % 10) as u32, 10).unwrap()))
            .collect();
        assert!(
            sent.contains(&record.head_sha),
            "PR {pr}: {:?}",
            record.head_sha
        );
    }
}

on_both!(fixture_on, a_bad_job_in_a_batch_fails_alone, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn a_bad_job_in_a_batch_fails_alone(f: Fixture) {
    let (good, bad) = tokio::join!(
        f.store
            .record_delivery(delivery("good"), Some(job("pr-1", 3)), None),
        f.store
            .record_delivery(delivery("bad"), Some(job("pr-2", 0)), None),
    );
    assert!(matches!(
        good.unwrap(),
        Intake::Recorded { job: Some(_), .. }
    ));
    assert!(matches!(
        bad.unwrap_err().downcast_ref::<StoreError>(),
        Some(StoreError::NoAttemptsAllowed)
    ));
    assert_eq!(f.store.delivery_count().await.unwrap(), 1);
}

on_both!(fixture_on, one_batch_decides_each_delivery_as_if_it_came_alone, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn one_batch_decides_each_delivery_as_if_it_came_alone(f: Fixture) {
    // Sent together on one thread, they reach the writer as one batch.
    f.store
        .record_delivery(delivery("d-0"), Some(comment_job(5)), None)
        .await
        .unwrap();
    let (first, again, comment, same_comment, seen_comment, push) = tokio::join!(
        f.store.record_delivery(
            delivery("d-1"),
            Some(job("pr-1", 3)),
            Some(head(1, sha('a'), true))
        ),
        f.store.record_delivery(
            delivery("d-1"),
            Some(job("pr-1", 3)),
            Some(head(1, sha('a'), true))
        ),
        f.store
            .record_delivery(delivery("d-2"), Some(comment_job(9)), None),
        f.store
            .record_delivery(delivery("d-3"), Some(comment_job(9)), None),
        f.store
            .record_delivery(delivery("d-4"), Some(comment_job(5)), None),
        f.store.record_delivery(
            delivery("d-5"),
            Some(job("pr-1", 3)),
            Some(head(1, sha('b'), true))
        ),
    );
    let job_of = |intake: Intake| match intake {
        Intake::Recorded { job, .. } => job,
        Intake::Duplicate => panic!("recorded as a duplicate"),
    };
    let first = job_of(first.unwrap()).expect("the push queues its plan");
    assert_eq!(
        again.unwrap(),
        Intake::Duplicate,
        "a redelivery in the same batch"
    );
    let comment = job_of(comment.unwrap()).expect("the comment's first delivery runs it");
    assert_eq!(job_of(same_comment.unwrap()), None, "the comment runs once");
    assert_eq!(
        job_of(seen_comment.unwrap()),
        None,
        "a comment taken up before"
    );
    let push = job_of(push.unwrap()).expect("the second push queues its plan");

    // Jobs queue in the order their deliveries came; the last push is the head.
    assert!(first.0 < comment.0 && comment.0 < push.0);
    let queued: Vec<String> = f
        .store
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.queue_key)
        .collect();
    assert_eq!(
        queued,
        [
            "github:acme/infra#42",
            "pr-1",
            "github:acme/infra#42",
            "pr-1"
        ]
    );
    assert_eq!(f.store.delivery_count().await.unwrap(), 6);
    let record = f.store.pr(&repo(), PrNumber(1)).await.unwrap().unwrap();
    assert_eq!(record.head_sha, sha('b'));
    let seen = f.store.commands_seen(&repo(), PrNumber(42)).await.unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
}

on_both!(fixture_on, a_batch_that_fails_midway_keeps_nothing_of_it_and_the_store_stays_writable, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn a_batch_that_fails_midway_keeps_nothing_of_it_and_the_store_stays_writable(f: Fixture) {
    // The database refuses the poisoned job after the batch's deliveries
    // were written: the batch is undone, then each delivery is written on
    // its own.
    let pool = raw_pool(&f.url).await;
    let poison: &[&str] = match f.backend {
        Backend::Sqlite => &[
            "CREATE TRIGGER poison BEFORE INSERT ON jobs WHEN NEW.queue_key = 'poison'
              BEGIN SELECT RAISE(ABORT, 'poisoned job'); END",
        ],
        Backend::Postgres => &[
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN IF NEW.queue_key = 'poison' THEN RAISE EXCEPTION 'poisoned job'; END IF;
              RETURN NEW; END $$",
            "CREATE TRIGGER poison BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION poison()",
        ],
    };
    for sql in poison {
        sqlx::query(sqlx::AssertSqlSafe(*sql))
            .execute(&pool)
            .await
            .unwrap();
    }
    let (good, bad) = tokio::join!(
        f.store.record_delivery(
            delivery("good"),
            Some(job("pr-1", 3)),
            Some(head(1, sha('a'), true))
        ),
        f.store.record_delivery(
            delivery("bad"),
            Some(job("poison", 3)),
            Some(head(2, sha('b'), true))
        ),
    );
    assert!(matches!(
        good.unwrap(),
        Intake::Recorded { job: Some(_), .. }
    ));
    let bad = bad.unwrap_err();
    assert!(format!("{bad:#}").contains("poisoned job"), "{bad:#}");
    assert_eq!(f.store.delivery_count().await.unwrap(), 1);
    assert_eq!(f.store.jobs().await.unwrap().len(), 1);
    let record = f.store.pr(&repo(), PrNumber(1)).await.unwrap().unwrap();
    assert_eq!(record.head_sha, sha('a'));
    assert!(f.store.pr(&repo(), PrNumber(2)).await.unwrap().is_none());

    // No write lock or open transaction was left behind.
    let later = tokio::time::timeout(
        Duration::from_secs(2),
        f.store
            .record_delivery(delivery("later"), Some(job("pr-1", 3)), None),
    )
    .await
    .expect("the store answers at once");
    assert!(matches!(
        later.unwrap(),
        Intake::Recorded { job: Some(_), .. }
    ));
    f.store.enqueue(job("pr-2", 3)).await.unwrap();
    assert_eq!(f.store.delivery_count().await.unwrap(), 2);
}

on_both!(fixture_on, a_head_the_database_cannot_hold_fails_its_delivery_alone, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn a_head_the_database_cannot_hold_fails_its_delivery_alone(f: Fixture) {
    let (good, bad) = tokio::join!(
        f.store
            .record_delivery(delivery("good"), None, Some(head(1, sha('a'), true))),
        f.store
            .record_delivery(delivery("bad"), None, Some(head(u64::MAX, sha('b'), true))),
    );
    assert!(matches!(good.unwrap(), Intake::Recorded { job: None, .. }));
    let bad = bad.unwrap_err();
    assert!(
        format!("{bad:#}").contains("pull request number"),
        "{bad:#}"
    );
    assert_eq!(f.store.delivery_count().await.unwrap(), 1);
}

async fn merged_run(f: &Fixture, pr: u64) -> (ApplyRunRecord, bool) {
    let plan_id = f
        .store
        .save_plan(NewPlan {
            repo: repo(),
            pr: PrNumber(pr),
            head_sha: sha('a'),
            base_sha: sha('0'),
            digest: Some(Digest::repeated('2')),
            change_set: empty_set(),
            report: String::new(),
        })
        .await
        .unwrap();
    f.store
        .create_apply_run(NewApplyRun {
            repo: crate::forge::RepoRef {
                id: repo(),
                forge_id: 1,
                clone_url: "file:///nowhere".into(),
                installation: None,
            },
            pr: PrNumber(pr),
            merge_sha: sha('e'),
            base_sha: sha('0'),
            plan_id,
            digest: Digest::repeated('2'),
        })
        .await
        .unwrap()
}

on_both!(fixture_on, a_merged_pr_gets_one_apply_run_whose_record_reads_back, #[tokio::test]);
async fn a_merged_pr_gets_one_apply_run_whose_record_reads_back(f: Fixture) {
    let (mut run, created) = merged_run(&f, 1).await;
    assert!(created);
    assert_eq!(run.status, crate::apply::RunStatus::Running);
    assert_eq!(run.record, crate::apply::AttemptRecord::default());

    run.record.set(
        &"app@dev".into(),
        crate::apply::MemberState::Applying {
            plan_digest: Digest::repeated('1'),
            attempt: None,
        },
    );
    run.status = crate::apply::RunStatus::Waiting;
    run.check_id = Some(9);
    f.store.save_apply_run(&run).await.unwrap();
    let (again, created) = merged_run(&f, 1).await;
    assert!(!created, "a redelivered merge starts no second run");
    assert_eq!(again.id, run.id);
    assert_eq!(again.record, run.record);
    assert_eq!(again.status, crate::apply::RunStatus::Waiting);
    assert_eq!(again.check_id, Some(9));
}

on_both!(fixture_on, member_locks_are_all_or_none_and_letting_go_names_the_runs_queued_behind, #[tokio::test]);
async fn member_locks_are_all_or_none_and_letting_go_names_the_runs_queued_behind(f: Fixture) {
    let (first, _) = merged_run(&f, 1).await;
    let (mut second, _) = merged_run(&f, 2).await;
    let members = |names: &[&str]| names.iter().map(|n| (*n).into()).collect::<Vec<MemberId>>();

    assert_eq!(
        f.store
            .lock_members(&repo(), first.id, &members(&["app@dev"]))
            .await
            .unwrap(),
        None
    );
    // The same run may take its own lock again (a resume after a crash).
    assert_eq!(
        f.store
            .lock_members(&repo(), first.id, &members(&["app@dev"]))
            .await
            .unwrap(),
        None
    );
    let refused = f
        .store
        .lock_members(&repo(), second.id, &members(&["dns@dev", "app@dev"]))
        .await
        .unwrap();
    assert_eq!(refused, Some(("app@dev".into(), PrNumber(1))));
    second.status = crate::apply::RunStatus::Waiting;
    second.record.wait = Some(crate::apply::Wait::Lock {
        member: "app@dev".into(),
        pr: PrNumber(1),
    });
    f.store.save_apply_run(&second).await.unwrap();

    let queued = f.store.unlock_members(&repo(), first.id).await.unwrap();
    assert_eq!(queued.iter().map(|r| r.id).collect::<Vec<_>>(), [second.id]);
    // None of the refused all-or-none attempt was kept: dns@dev is free.
    assert_eq!(
        f.store
            .lock_members(&repo(), first.id, &members(&["dns@dev", "app@dev"]))
            .await
            .unwrap(),
        None
    );
}

on_both!(fixture_on, the_deployed_estate_keeps_each_members_last_outputs, #[tokio::test]);
async fn the_deployed_estate_keeps_each_members_last_outputs(f: Fixture) {
    let (run, _) = merged_run(&f, 1).await;
    let outputs = |v: &str| {
        serde_json::json!({ "vpc_id": v })
            .as_object()
            .unwrap()
            .clone()
    };
    f.store
        .record_deployed(&repo(), "network@dev", &outputs("vpc-1"), run.id)
        .await
        .unwrap();
    f.store
        .record_deployed(&repo(), "network@dev", &outputs("vpc-2"), run.id)
        .await
        .unwrap();
    let estate = f.store.deployed_outputs(&repo()).await.unwrap();
    assert_eq!(estate.len(), 1);
    assert_eq!(estate["network@dev"]["vpc_id"], "vpc-2");
}

fn repo_ref(installation: Option<u64>) -> crate::forge::RepoRef {
    crate::forge::RepoRef {
        id: repo(),
        forge_id: 1,
        clone_url: "https://forge.example/acme/infra.git".into(),
        installation,
    }
}

/// Claims the next job and marks it done.
async fn finish_next(store: &Store) {
    let job = store.claim("w", LEASE).await.unwrap().expect("a job");
    store.complete(job.id, "w", JobOutcome::Done).await.unwrap();
}

on_both!(fixture_on, reconciliation_reads_the_open_prs_and_the_repositories_to_reach_them, #[tokio::test]);
async fn reconciliation_reads_the_open_prs_and_the_repositories_to_reach_them(f: Fixture) {
    f.store.upsert_repository(&repo_ref(Some(7))).await.unwrap();
    f.store.upsert_repository(&repo_ref(Some(8))).await.unwrap();
    let repos = f.store.repositories().await.unwrap();
    assert_eq!(repos.len(), 1);
    assert_eq!(repos[&repo()], repo_ref(Some(8)), "the latest ref wins");

    f.store
        .upsert_pr_head(head(1, sha('a'), true))
        .await
        .unwrap();
    f.store
        .upsert_pr_head(head(2, sha('b'), false))
        .await
        .unwrap();
    f.store
        .upsert_pr_head(head(3, sha('c'), true))
        .await
        .unwrap();
    let open: Vec<u64> = f
        .store
        .open_prs()
        .await
        .unwrap()
        .iter()
        .map(|p| p.pr.0)
        .collect();
    assert_eq!(open, [1, 3]);

    assert!(f.store.mark_pr_closed(&repo(), PrNumber(1)).await.unwrap());
    assert!(
        !f.store.mark_pr_closed(&repo(), PrNumber(1)).await.unwrap(),
        "closed already"
    );
    let open: Vec<u64> = f
        .store
        .open_prs()
        .await
        .unwrap()
        .iter()
        .map(|p| p.pr.0)
        .collect();
    assert_eq!(open, [3]);
}

on_both!(fixture_on, a_reconciled_job_is_enqueued_only_into_an_idle_queue, #[tokio::test]);
async fn a_reconciled_job_is_enqueued_only_into_an_idle_queue(f: Fixture) {
    let key = "github:acme/infra#1";
    f.store.enqueue(job(key, 3)).await.unwrap();
    assert!(f.store.busy_queue_keys().await.unwrap().contains(key));
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), Still::Idle)
            .await
            .unwrap(),
        None
    );

    // Running counts as busy too.
    let running = f.store.claim("w", LEASE).await.unwrap().unwrap();
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), Still::Idle)
            .await
            .unwrap(),
        None
    );
    f.store
        .complete(running.id, "w", JobOutcome::Done)
        .await
        .unwrap();
    assert!(f.store.busy_queue_keys().await.unwrap().is_empty());

    let id = f
        .store
        .enqueue_reconciled(job(key, 3), Still::Idle)
        .await
        .unwrap();
    let queued = f.store.job(id.expect("enqueued")).await.unwrap().unwrap();
    assert_eq!(
        (queued.queue_key.as_str(), queued.status),
        (key, JobStatus::Queued)
    );
    assert_eq!(f.store.job_delivery(queued.id).await.unwrap(), None);
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), Still::Idle)
            .await
            .unwrap(),
        None
    );
}

on_both!(fixture_on, a_reconciled_plan_is_enqueued_while_the_report_is_not_of_that_head_and_base, #[tokio::test]);
async fn a_reconciled_plan_is_enqueued_while_the_report_is_not_of_that_head_and_base(f: Fixture) {
    let key = "github:acme/infra#1";
    let (id, a, c) = (repo(), sha('a'), sha('c'));
    let unplanned = |head, base_ref| Still::Unplanned {
        repo: &id,
        pr: PrNumber(1),
        head,
        base_ref,
    };
    let (a, c) = (&a, &c);
    // Unknown pull requests are never planned by reconciliation.
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), unplanned(a, "main"))
            .await
            .unwrap(),
        None
    );

    f.store
        .upsert_pr_head(head(1, sha('a'), true))
        .await
        .unwrap();
    assert!(
        f.store
            .enqueue_reconciled(job(key, 3), unplanned(a, "main"))
            .await
            .unwrap()
            .is_some(),
        "never reported"
    );
    finish_next(&f.store).await;
    f.store
        .set_pr_report(
            &repo(),
            PrNumber(1),
            PrReport {
                head_sha: sha('a'),
                digest: None,
                comment_id: Some(1),
                check_id: None,
                status: Some(ReportStatus::Empty),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), unplanned(a, "main"))
            .await
            .unwrap(),
        None,
        "reported at that head by now"
    );
    assert!(
        f.store
            .enqueue_reconciled(job(key, 3), unplanned(a, "release"))
            .await
            .unwrap()
            .is_some(),
        "the base moved"
    );
    finish_next(&f.store).await;
    assert!(
        f.store
            .enqueue_reconciled(job(key, 3), unplanned(c, "main"))
            .await
            .unwrap()
            .is_some(),
        "the head moved"
    );
    finish_next(&f.store).await;

    f.store.mark_pr_closed(&repo(), PrNumber(1)).await.unwrap();
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), unplanned(c, "main"))
            .await
            .unwrap(),
        None,
        "closed pull requests are not planned"
    );
}

on_both!(fixture_on, a_missed_merge_closes_the_pr_and_enqueues_its_apply_once, #[tokio::test]);
async fn a_missed_merge_closes_the_pr_and_enqueues_its_apply_once(f: Fixture) {
    let key = "github:acme/infra#1";
    let id = repo();
    let merged = || Still::OpenThenClose {
        repo: &id,
        pr: PrNumber(1),
    };
    f.store
        .upsert_pr_head(head(1, sha('a'), true))
        .await
        .unwrap();
    assert!(f
        .store
        .enqueue_reconciled(job(key, 3), merged())
        .await
        .unwrap()
        .is_some());
    assert!(
        !f.store
            .pr(&repo(), PrNumber(1))
            .await
            .unwrap()
            .unwrap()
            .open
    );
    finish_next(&f.store).await;
    assert_eq!(
        f.store
            .enqueue_reconciled(job(key, 3), merged())
            .await
            .unwrap(),
        None,
        "closed by the first one"
    );
    assert_eq!(f.store.jobs().await.unwrap().len(), 1);
}

on_both!(fixture_on, two_replicas_sweeping_at_once_enqueue_one_job_per_pull_request, #[tokio::test(flavor = "multi_thread", worker_threads = 4)]);
async fn two_replicas_sweeping_at_once_enqueue_one_job_per_pull_request(f: Fixture) {
    let other = Store::open_with_clock(&f.url, f.clock.clone())
        .await
        .unwrap();
    for pr in 1..=10u64 {
        f.store
            .upsert_pr_head(head(pr, sha('a'), true))
            .await
            .unwrap();
    }
    let sweep = |store: Store| async move {
        let id = repo();
        let mut enqueued = 0;
        for pr in 1..=10u64 {
            let key = format!("github:acme/infra#{pr}");
            let still = Still::OpenThenClose {
                repo: &id,
                pr: PrNumber(pr),
            };
            enqueued += usize::from(
                store
                    .enqueue_reconciled(job(&key, 3), still)
                    .await
                    .unwrap()
                    .is_some(),
            );
            let idle = store.enqueue_reconciled(job(&format!("{key}/idle"), 3), Still::Idle);
            enqueued += usize::from(idle.await.unwrap().is_some());
        }
        enqueued
    };
    let (one, two) = tokio::join!(
        tokio::spawn(sweep(f.store.clone())),
        tokio::spawn(sweep(other))
    );
    assert_eq!(one.unwrap() + two.unwrap(), 20, "one of each, between them");
    let jobs = f.store.jobs().await.unwrap();
    let keys: BTreeSet<&str> = jobs.iter().map(|j| j.queue_key.as_str()).collect();
    assert_eq!((jobs.len(), keys.len()), (20, 20));
}

on_both!(fixture_on, the_unfinished_apply_runs_are_the_running_and_waiting_ones_and_failed_ones_a_gate_holds, #[tokio::test]);
async fn the_unfinished_apply_runs_are_the_running_and_waiting_ones_and_failed_ones_a_gate_holds(
    f: Fixture,
) {
    let (_running, _) = merged_run(&f, 1).await;
    let (mut waiting, _) = merged_run(&f, 2).await;
    waiting.status = crate::apply::RunStatus::Waiting;
    f.store.save_apply_run(&waiting).await.unwrap();
    let (mut applied, _) = merged_run(&f, 3).await;
    applied.status = crate::apply::RunStatus::Applied;
    f.store.save_apply_run(&applied).await.unwrap();
    let (mut failed, _) = merged_run(&f, 4).await;
    failed.status = crate::apply::RunStatus::Failed;
    f.store.save_apply_run(&failed).await.unwrap();
    // Failed, while another part of it waits at a stage gate (whose
    // timeout the sweep keeps).
    let (mut failed_waiting, _) = merged_run(&f, 5).await;
    failed_waiting.status = crate::apply::RunStatus::Failed;
    failed_waiting.record.wait = Some(crate::apply::Wait::Stage {
        stage: "prod".into(),
        gate: "pr-5-prod".parse().unwrap(),
        digest: Digest::repeated('a'),
    });
    f.store.save_apply_run(&failed_waiting).await.unwrap();

    let unfinished: Vec<u64> = f
        .store
        .unfinished_apply_runs()
        .await
        .unwrap()
        .iter()
        .map(|r| r.pr.0)
        .collect();
    assert_eq!(unfinished, [1, 2, 5]);
}

on_both!(fixture_on, the_figures_metrics_read_count_queue_ledger_and_runs, #[tokio::test]);
async fn the_figures_metrics_read_count_queue_ledger_and_runs(f: Fixture) {
    f.store.enqueue(job("pr-1", 3)).await.unwrap();
    f.clock.advance(4_000);
    f.store.enqueue(job("pr-2", 3)).await.unwrap();
    merged_run(&f, 3).await;
    let figures = f.store.figures().await.unwrap();
    assert_eq!(figures.jobs, [("queued".to_owned(), 2)]);
    assert_eq!(figures.oldest_queued_ms, 4_000);
    assert!(figures.facts.is_empty());
    assert_eq!(figures.apply_runs, [("running".to_owned(), 1)]);
}

fn comment_job(comment: u64) -> NewJob {
    NewJob {
        kind: JobKind::Comment,
        queue_key: "github:acme/infra#42".into(),
        payload: serde_json::json!({ "comment": comment }),
        max_attempts: 3,
        once: Some(Once {
            repo: repo(),
            pr: PrNumber(42),
            source: OnceSource::Comment(comment),
        }),
    }
}

/// A `waiting` notice of run 3's prod gate, for `target`.
fn notice_job(target: &str) -> NewJob {
    let notice = crate::notify::Notice {
        event: crate::config::repo::NotifyEvent::Waiting,
        refused: None,
        forge: repo().forge,
        repository: repo().full_name,
        pull_request: PrNumber(42),
        url: "https://forge.example/acme/infra/pull/42".into(),
        page: None,
        run: Some(3),
        drift: None,
        retries: 0,
        merge_commit: CommitSha::parse(&"a".repeat(40)).unwrap(),
        gate: Some("pr-42-prod".parse().unwrap()),
        digest: Some(crate::model::Digest::repeated('b')),
        approve: None,
        approvers: None,
        members: vec!["app@prod".into()],
        text: "Stage prod waits".into(),
    };
    crate::jobs::Task::Notify {
        repo: repo_ref(None),
        pr: PrNumber(42),
        target: target.into(),
        notice: Box::new(notice),
    }
    .into_job()
}

on_both!(fixture_on, a_notice_is_enqueued_once_per_target_however_often_it_is_said, #[tokio::test]);
async fn a_notice_is_enqueued_once_per_target_however_often_it_is_said(f: Fixture) {
    // Two replicas (or a job and its retry) say it at once: one job.
    let (a, b) = tokio::join!(
        f.store.enqueue_once(notice_job("OPS")),
        f.store.enqueue_once(notice_job("OPS"))
    );
    let enqueued = [a.unwrap(), b.unwrap()];
    assert_eq!(
        enqueued.iter().filter(|j| j.is_some()).count(),
        1,
        "{enqueued:?}"
    );
    assert_eq!(f.store.enqueue_once(notice_job("OPS")).await.unwrap(), None);
    // Another target hears of it too, in a queue of its own.
    let chat = notice_job("CHAT");
    assert_eq!(chat.queue_key, "notify:github:acme/infra:CHAT");
    assert!(f.store.enqueue_once(chat).await.unwrap().is_some());
}

on_both!(fixture_on, a_comment_is_taken_up_once_by_the_webhook_or_the_sweep, #[tokio::test], and sqlite_sqlx_writer on fixture_on_sqlx_writer);
async fn a_comment_is_taken_up_once_by_the_webhook_or_the_sweep(f: Fixture) {
    // The webhook first: the sweep finds it seen.
    let first = f
        .store
        .record_delivery(delivery("d-1"), Some(comment_job(7)), None)
        .await
        .unwrap();
    assert!(matches!(first, Intake::Recorded { job: Some(_), .. }));
    assert_eq!(f.store.enqueue_once(comment_job(7)).await.unwrap(), None);

    // The sweep first: a late delivery (its own delivery id) is recorded
    // and enqueues nothing, and neither does a second sweep.
    assert!(f
        .store
        .enqueue_once(comment_job(8))
        .await
        .unwrap()
        .is_some());
    let late = f
        .store
        .record_delivery(delivery("d-2"), Some(comment_job(8)), None)
        .await
        .unwrap();
    assert!(
        matches!(late, Intake::Recorded { job: None, .. }),
        "{late:?}"
    );
    assert_eq!(f.store.enqueue_once(comment_job(8)).await.unwrap(), None);

    // Two deliveries of one comment at once (one batch or two): one job.
    let (a, b) = tokio::join!(
        f.store
            .record_delivery(delivery("d-3"), Some(comment_job(9)), None),
        f.store
            .record_delivery(delivery("d-4"), Some(comment_job(9)), None)
    );
    let jobs = [a.unwrap(), b.unwrap()]
        .iter()
        .filter(|i| matches!(i, Intake::Recorded { job: Some(_), .. }))
        .count();
    assert_eq!(jobs, 1);
    assert_eq!(f.store.jobs().await.unwrap().len(), 3);
    let seen = f.store.commands_seen(&repo(), PrNumber(42)).await.unwrap();
    assert_eq!(seen.len(), 3, "{seen:?}");
}

on_both!(fixture_on, a_review_found_by_its_job_is_marked_seen_once_and_the_sweep_finds_it, #[tokio::test]);
async fn a_review_found_by_its_job_is_marked_seen_once_and_the_sweep_finds_it(f: Fixture) {
    let once = Once {
        repo: repo(),
        pr: PrNumber(42),
        source: OnceSource::Review(5, crate::forge::ReviewState::Approved),
    };
    assert!(!f.store.was_seen(&once).await.unwrap());
    assert!(f.store.mark_seen(&once).await.unwrap());
    assert!(f.store.was_seen(&once).await.unwrap());
    assert!(!f.store.mark_seen(&once).await.unwrap(), "once only");
    let sweep = NewJob {
        kind: JobKind::Review,
        once: Some(once),
        ..comment_job(0)
    };
    assert_eq!(f.store.enqueue_once(sweep).await.unwrap(), None);
}

on_both!(fixture_on, the_comment_mark_starts_a_minute_before_the_pr_was_heard_of_and_only_moves_forward, #[tokio::test]);
async fn the_comment_mark_starts_a_minute_before_the_pr_was_heard_of_and_only_moves_forward(
    f: Fixture,
) {
    f.store
        .record_delivery(delivery("opened"), None, Some(head(42, sha('a'), true)))
        .await
        .unwrap();
    let pr = PrNumber(42);
    // A minute before the bot first heard of it, kept by later heads.
    let first = START - millis(60_000);
    assert_eq!(
        f.store.comments_since(&repo(), pr).await.unwrap(),
        Some(first)
    );
    f.clock.advance(5_000);
    f.store
        .record_delivery(delivery("pushed"), None, Some(head(42, sha('b'), true)))
        .await
        .unwrap();
    assert_eq!(
        f.store.comments_since(&repo(), pr).await.unwrap(),
        Some(first)
    );
    f.store
        .advance_comments_since(&repo(), pr, START + millis(5_000))
        .await
        .unwrap();
    f.store
        .advance_comments_since(&repo(), pr, START)
        .await
        .unwrap();
    assert_eq!(
        f.store.comments_since(&repo(), pr).await.unwrap(),
        Some(START + millis(5_000))
    );
}

on_both!(fixture_on, a_redelivery_is_claimed_once_and_recorded_guids_are_found_by_any_target, #[tokio::test]);
async fn a_redelivery_is_claimed_once_and_recorded_guids_are_found_by_any_target(f: Fixture) {
    f.store
        .record_delivery(delivery("guid-recorded"), None, None)
        .await
        .unwrap();
    let through_a_repo_hook = NewDelivery {
        target: "repo:9".into(),
        ..delivery("guid-via-hook")
    };
    f.store
        .record_delivery(through_a_repo_hook, None, None)
        .await
        .unwrap();
    let asked_about: Vec<String> = ["guid-recorded", "guid-via-hook", "guid-lost"]
        .map(String::from)
        .to_vec();
    let recorded = f
        .store
        .recorded_deliveries(ForgeKind::GitHub, &asked_about)
        .await
        .unwrap();
    assert_eq!(
        recorded,
        ["guid-recorded", "guid-via-hook"].map(String::from).into()
    );
    assert!(f
        .store
        .recorded_deliveries(ForgeKind::Forgejo, &asked_about)
        .await
        .unwrap()
        .is_empty());

    // Two replicas sweeping at once: one insert makes the row, one asks.
    let replica = Store::open(&f.url).await.unwrap();
    let (first, second) = tokio::join!(
        f.store.claim_redelivery("guid-lost", 41),
        replica.claim_redelivery("guid-lost", 41)
    );
    assert_eq!(
        [first.unwrap(), second.unwrap()]
            .iter()
            .filter(|made| **made)
            .count(),
        1
    );
    assert!(!f.store.claim_redelivery("guid-lost", 42).await.unwrap());
    assert_eq!(
        f.store.redeliveries_asked(&asked_about).await.unwrap(),
        ["guid-lost".to_owned()].into()
    );
}

#[test]
fn each_report_status_reads_back_as_the_status_written_and_no_other_text_does() {
    for status in ReportStatus::ALL {
        assert_eq!(status.as_str().parse::<ReportStatus>(), Ok(status));
        assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
    }
    assert!("planning".parse::<ReportStatus>().is_err());
}

#[test]
fn what_is_taken_up_once_has_one_text_form_read_back_strictly() {
    let sources = [
        OnceSource::Comment(12),
        OnceSource::Review(9, crate::forge::ReviewState::ChangesRequested),
        OnceSource::NotApplied(sha('c')),
        OnceSource::Notify("OPS:run-3.0:waiting:pr-7-prod:ab".into()),
    ];
    let texts: Vec<String> = sources.iter().map(ToString::to_string).collect();
    assert_eq!(
        texts,
        [
            "comment:12",
            "review:9:changes-requested",
            &format!("not-applied:{}", "c".repeat(40)),
            "notify:OPS:run-3.0:waiting:pr-7-prod:ab",
        ]
    );
    for (source, text) in sources.iter().zip(&texts) {
        assert_eq!(&text.parse::<OnceSource>().unwrap(), source);
    }
    for bad in [
        "comment:x",
        "review:9:liked",
        "merge:1",
        "notify:",
        "not-applied:abc",
    ] {
        let error = bad.parse::<OnceSource>().unwrap_err();
        assert!(error.contains(bad), "{error}");
    }
}

fn empty_set() -> crate::plan::changeset::ChangeSet {
    crate::plan::outcome::change_set_of(&[], Default::default()).unwrap()
}

on_both!(fixture_on, a_plan_changed_in_the_store_is_never_read_as_a_change_set, #[tokio::test]);
async fn a_plan_changed_in_the_store_is_never_read_as_a_change_set(f: Fixture) {
    let set = empty_set();
    let id = f
        .store
        .save_plan(NewPlan {
            repo: repo(),
            pr: PrNumber(1),
            head_sha: sha('a'),
            base_sha: sha('0'),
            digest: Some(set.digest.clone()),
            change_set: set.clone(),
            report: String::new(),
        })
        .await
        .unwrap();
    let read = || async { f.store.plan(id).await.unwrap().unwrap().change_set() };
    assert_eq!(read().await, Ok(set.clone()));

    let mut moved = serde_json::to_value(&set).unwrap();
    moved["digest"] = serde_json::json!(Digest::repeated('9'));
    let pool = raw_pool(&f.url).await;
    let tamper = |text: String| {
        sqlx::query("UPDATE plans SET change_set = $1")
            .bind(text)
            .execute(&pool)
    };
    tamper(moved.to_string()).await.unwrap();
    let why = read().await.unwrap_err().to_string();
    assert!(
        why.starts_with(&format!("plan {id}'s change set cannot be trusted: ")),
        "{why}"
    );

    tamper(r#"{"members": "all of them"}"#.into())
        .await
        .unwrap();
    let why = read().await.unwrap_err().to_string();
    assert!(why.contains("does not read as a change set"), "{why}");
}

on_both!(fixture_on, a_repositorys_pull_requests_are_listed_newest_first_by_where_they_stand, #[tokio::test]);
async fn a_repositorys_pull_requests_are_listed_newest_first_by_where_they_stand(f: Fixture) {
    // #1 awaits an approval, #2 failed to plan, #3 closed unmerged, #4
    // merged and applying, #5 needs nothing from anyone.
    for (pr, open) in [(1, true), (2, true), (3, false), (4, false), (5, true)] {
        let id = format!("opened-{pr}");
        f.store
            .record_delivery(delivery(&id), None, Some(head(pr, sha('a'), open)))
            .await
            .unwrap();
    }
    for (pr, status) in [
        (1, ReportStatus::AwaitingApproval),
        (2, ReportStatus::Failed),
        (5, ReportStatus::Empty),
    ] {
        let report = PrReport {
            head_sha: sha('a'),
            digest: None,
            comment_id: None,
            check_id: None,
            status: Some(status),
        };
        f.store
            .set_pr_report(&repo(), PrNumber(pr), report)
            .await
            .unwrap();
    }
    merged_run(&f, 4).await;
    let elsewhere = PrHead {
        repo: RepoId::new(ForgeKind::Forgejo, "acme/site"),
        ..head(6, sha('a'), true)
    };
    f.store
        .record_delivery(delivery("elsewhere"), None, Some(elsewhere))
        .await
        .unwrap();

    let listed = |state: Option<PullState>, before: Option<u64>, limit: u32| {
        let store = f.store.clone();
        async move {
            store
                .pull_rows(&repo(), state, before.map(PrNumber), limit)
                .await
                .unwrap()
                .iter()
                .map(|row| row.pr.0)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(None, None, 50).await, [5, 4, 3, 2, 1]);
    assert_eq!(listed(Some(PullState::Waiting), None, 50).await, [1]);
    assert_eq!(listed(Some(PullState::Applying), None, 50).await, [4]);
    assert_eq!(listed(Some(PullState::Failed), None, 50).await, [2]);
    assert_eq!(listed(Some(PullState::Done), None, 50).await, [3]);
    assert_eq!(listed(None, Some(4), 2).await, [3, 2], "a page below #4");

    let rows = f.store.pull_rows(&repo(), None, None, 50).await.unwrap();
    let states: Vec<Option<PullState>> = rows.iter().map(PullRow::state).collect();
    assert_eq!(
        states,
        [
            None,
            Some(PullState::Applying),
            Some(PullState::Done),
            Some(PullState::Failed),
            Some(PullState::Waiting),
        ],
        "the row's own state agrees with the filter"
    );
    let run = rows[1].run.expect("#4's run");
    assert_eq!(run.status, crate::apply::RunStatus::Running);
}

on_both!(fixture_on, a_repositorys_locks_and_unfinished_jobs_are_listed_and_no_other_repositorys, #[tokio::test]);
async fn a_repositorys_locks_and_unfinished_jobs_are_listed_and_no_other_repositorys(f: Fixture) {
    let (run, _) = merged_run(&f, 4).await;
    let members: Vec<MemberId> = vec!["dns@dev".into(), "app@dev".into()];
    f.store
        .lock_members(&repo(), run.id, &members)
        .await
        .unwrap();
    let locks = f.store.member_locks(&repo()).await.unwrap();
    let held: Vec<(&str, i64, PrNumber)> = locks
        .iter()
        .map(|lock| (lock.member.as_str(), lock.run_id, lock.pr))
        .collect();
    assert_eq!(
        held,
        [
            ("app@dev", run.id, PrNumber(4)),
            ("dns@dev", run.id, PrNumber(4))
        ]
    );
    assert_eq!(locks[0].since, START);

    // `github:acme/infra#` is the repository's prefix: `…/infra2`'s jobs
    // and finished ones are not listed.
    let done = f
        .store
        .enqueue(job("github:acme/infra#1", 3))
        .await
        .unwrap();
    f.store.claim("w1", LEASE).await.unwrap().unwrap();
    f.store
        .complete(done, "w1", JobOutcome::Done)
        .await
        .unwrap();
    let queued = f
        .store
        .enqueue(job("github:acme/infra#2", 3))
        .await
        .unwrap();
    f.store
        .enqueue(job("github:acme/infra2#2", 3))
        .await
        .unwrap();
    let listed: Vec<JobId> = f
        .store
        .unfinished_jobs("github:acme/infra#", 50)
        .await
        .unwrap()
        .iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(listed, [queued]);
}

on_both!(fixture_on, an_api_token_is_found_by_its_hash_reads_what_it_names_and_is_revoked_by_name, #[tokio::test]);
async fn an_api_token_is_found_by_its_hash_reads_what_it_names_and_is_revoked_by_name(f: Fixture) {
    let infra = RepoId::new(ForgeKind::GitHub, "acme/infra");
    let site = RepoId::new(ForgeKind::Forgejo, "acme/site");
    let store = &f.store;
    assert!(store
        .add_api_token("ci", "sha-ci", Some(std::slice::from_ref(&infra)))
        .await
        .unwrap());
    assert!(store
        .add_api_token("audit", "sha-audit", None)
        .await
        .unwrap());
    assert!(
        !store.add_api_token("ci", "sha-other", None).await.unwrap(),
        "the name is taken"
    );

    let ci = store.api_token("sha-ci").await.unwrap().unwrap();
    assert_eq!(ci.repos, Some(vec![infra.clone()]));
    assert!(ci.may_read(&infra) && !ci.may_read(&site));
    let audit = store.api_token("sha-audit").await.unwrap().unwrap();
    assert!(audit.may_read(&infra) && audit.may_read(&site));
    assert_eq!(store.api_token("sha-other").await.unwrap(), None);
    let names: Vec<String> = store
        .api_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["audit", "ci"]);

    assert!(store.revoke_api_token("ci").await.unwrap());
    assert!(!store.revoke_api_token("ci").await.unwrap());
    assert_eq!(store.api_token("sha-ci").await.unwrap(), None);
}

fn command(pr: u64, run: Option<i64>, label: &str) -> crate::plan::live::NewCommand {
    crate::plan::live::NewCommand {
        owner: crate::plan::live::Owner {
            repo: repo(),
            pr: PrNumber(pr),
            run,
        },
        label: label.into(),
        kind: "plan",
    }
}

on_both!(fixture_on, a_commands_output_is_kept_as_it_runs_and_replaced_by_its_whole_kept_output_when_it_ends, #[tokio::test]);
async fn a_commands_output_is_kept_as_it_runs_and_replaced_by_its_whole_kept_output_when_it_ends(
    f: Fixture,
) {
    use crate::plan::live::Ending;
    use crate::store::Cursor;
    let id = f
        .store
        .open_command(&command(7, None, "[plan] app@dev"))
        .await
        .unwrap();
    let first = "estate: planning app@dev\n";
    f.store.append_output(id, first, false).await.unwrap();
    f.clock.advance(250);
    f.store
        .append_output(id, "estate: 1 to add: «bücket»\n", false)
        .await
        .unwrap();

    // A watcher on another replica reads on from where it was.
    let all = f
        .store
        .output_from(id, Cursor::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all.text, format!("{first}estate: 1 to add: «bücket»\n"));
    assert_eq!((all.ending, all.updated_at), (None, START + millis(250)));
    assert_eq!(all.cursor.chars, all.text.chars().count() as u64);
    f.store
        .append_output(id, "estate: planned\n", false)
        .await
        .unwrap();
    let more = f.store.output_from(id, all.cursor).await.unwrap().unwrap();
    assert_eq!(more.text, "estate: planned\n");
    let (_, running) = f
        .store
        .command(&repo(), PrNumber(7), id, true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.unwrap(), format!("{}{}", all.text, more.text));

    f.clock.advance(1_000);
    let whole = "estate: planning app@dev\n[wavegate: output cut at 40 bytes]\nlast\n";
    f.store
        .finish_command(id, Some(whole), true, Ending::Exited(1))
        .await
        .unwrap();
    f.store
        .append_output(id, "a straggler\n", false)
        .await
        .unwrap();

    let (row, output) = f
        .store
        .command(&repo(), PrNumber(7), id, true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        output.as_deref(),
        Some(whole),
        "the whole kept output, and nothing after the end"
    );
    assert_eq!(
        (row.label.as_str(), row.kind.as_str(), row.run, row.pr),
        ("[plan] app@dev", "plan", None, PrNumber(7))
    );
    assert_eq!(row.started_at, START);
    assert_eq!(row.finished_at, Some(START + millis(1_250)));
    assert_eq!(row.ending, Some(Ending::Exited(1)));
    assert!(row.truncated);
    // A watcher that had read the start goes on in the whole output.
    let rest = f
        .store
        .output_from(
            id,
            Cursor {
                part: 1,
                chars: first.chars().count() as u64,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest.text, "[wavegate: output cut at 40 bytes]\nlast\n");
    assert_eq!(rest.ending, Some(Ending::Exited(1)));
    assert_eq!(
        f.store
            .command(&repo(), PrNumber(8), id, false)
            .await
            .unwrap(),
        None,
        "another pull request has no such command"
    );
}

on_both!(fixture_on, a_pull_requests_commands_are_listed_oldest_first_the_newest_kept, #[tokio::test]);
async fn a_pull_requests_commands_are_listed_oldest_first_the_newest_kept(f: Fixture) {
    use crate::plan::live::Ending;
    let plan = f
        .store
        .open_command(&command(7, None, "[plan] app@dev"))
        .await
        .unwrap();
    let apply = f
        .store
        .open_command(&command(7, Some(3), "[apply] app@dev"))
        .await
        .unwrap();
    let other = f
        .store
        .open_command(&command(8, None, "[plan] app@dev"))
        .await
        .unwrap();
    f.store
        .append_output(apply, "applying\n", false)
        .await
        .unwrap();
    // Given up half-way: what was appended stays.
    f.store
        .finish_command(apply, None, false, Ending::Cancelled)
        .await
        .unwrap();

    let listed = f
        .store
        .commands_of(&repo(), PrNumber(7), 50, true)
        .await
        .unwrap();
    let seen: Vec<_> = listed
        .iter()
        .map(|(row, output)| (row.id, row.run, row.ending, output.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (plan, None, None, Some("")),
            (apply, Some(3), Some(Ending::Cancelled), Some("applying\n")),
        ]
    );
    let newest = f
        .store
        .commands_of(&repo(), PrNumber(7), 1, false)
        .await
        .unwrap();
    assert_eq!(
        newest
            .iter()
            .map(|(row, output)| (row.id, output.clone()))
            .collect::<Vec<_>>(),
        [(apply, None)]
    );
    assert_ne!(other, apply);
}

/// A store that signs its facts, as the server's does.
async fn signing(f: &Fixture) -> Store {
    let key = Arc::new(crate::gate::ledger::LedgerKey::from_seed(&[7; 32]));
    f.store.clone().signing_with(key).await.unwrap()
}

/// An operator's fact about pull request `pr`, by `alice`.
fn operator_fact(kind: crate::gate::ledger::FactKind, pr: u64) -> crate::gate::ledger::NewFact {
    use crate::gate::ledger::{Actor, FactData, NewFact, Source};
    NewFact {
        repo: repo().ledger_key(),
        gate: crate::model::GateId::Pr(PrNumber(pr)),
        kind,
        digest: Digest::repeated('2').into(),
        actor: Actor {
            id: 0,
            login: "alice".into(),
        },
        at: START,
        source: Source::Operator,
        data: FactData {
            reason: Some("because".into()),
            ..FactData::default()
        },
    }
}

/// The repository's whole chain, verified with the store's own key.
async fn verified_chain(store: &Store) -> crate::gate::ledger::Verified {
    let facts = store.repo_facts(&repo().ledger_key()).await.unwrap();
    let (key, start) = store.signer().unwrap();
    let check = crate::gate::ledger::SignatureCheck {
        key: &key,
        start: &start,
    };
    crate::gate::ledger::verify(&facts, Some(check)).unwrap()
}

/// Makes `key`'s only job dead: claimed and failed on its last attempt.
async fn dead_job(f: &Fixture, key: &str) -> JobId {
    let id = f.store.enqueue(job(key, 1)).await.unwrap();
    let claimed = f.store.claim("w-1", LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, id);
    let outcome = f.store.fail(id, "w-1", "the forge said no").await.unwrap();
    assert_eq!(outcome, FailOutcome::Dead);
    id
}

on_both!(fixture_on, a_stale_lock_is_released_with_a_signed_fact_and_the_runs_behind_it_are_named, #[tokio::test]);
async fn a_stale_lock_is_released_with_a_signed_fact_and_the_runs_behind_it_are_named(f: Fixture) {
    use crate::gate::ledger::FactKind;
    let store = signing(&f).await;
    let (first, _) = merged_run(&f, 1).await;
    let (mut second, _) = merged_run(&f, 2).await;
    let app_dev: MemberId = "app@dev".into();
    let held = store
        .lock_members(&repo(), first.id, std::slice::from_ref(&app_dev))
        .await
        .unwrap();
    assert_eq!(held, None);
    second.status = crate::apply::RunStatus::Waiting;
    second.record.wait = Some(crate::apply::Wait::Lock {
        member: app_dev.clone(),
        pr: PrNumber(1),
    });
    store.save_apply_run(&second).await.unwrap();
    let first_key = crate::jobs::queue_key(&repo(), PrNumber(1));

    // While a job of #1 is queued, it would carry the run on: nothing changes.
    let queued = store.enqueue(job(&first_key, 1)).await.unwrap();
    let refused = store
        .release_member_lock(
            (&repo(), &app_dev),
            (first.id, &first_key),
            operator_fact(FactKind::LockReleased, 1),
        )
        .await
        .unwrap();
    assert!(refused.is_none());
    assert_eq!(
        store.member_lock_holder(&repo(), "app@dev").await.unwrap(),
        Some(first.id)
    );
    assert!(store
        .repo_facts(&repo().ledger_key())
        .await
        .unwrap()
        .is_empty());

    // Once that job is dead, the lock goes, the fact is signed and chained,
    // and #2, which waited for the lock, is named to be resumed.
    f.store.claim("w-1", LEASE).await.unwrap();
    f.store.fail(queued, "w-1", "gone").await.unwrap();
    let (fact, waiting) = store
        .release_member_lock(
            (&repo(), &app_dev),
            (first.id, &first_key),
            operator_fact(FactKind::LockReleased, 1),
        )
        .await
        .unwrap()
        .expect("released");
    assert_eq!(
        waiting.iter().map(|r| r.pr).collect::<Vec<_>>(),
        [PrNumber(2)]
    );
    assert_eq!(
        store.member_lock_holder(&repo(), "app@dev").await.unwrap(),
        None
    );
    assert_eq!(fact.fact.kind, FactKind::LockReleased);
    assert!(fact.sig.is_some());
    let chain = verified_chain(&store).await;
    assert_eq!(chain.facts, 1);
    assert_eq!(chain.head.unwrap().hash, fact.hash);

    // Released once: a second release finds no lock of that run.
    let again = store
        .release_member_lock(
            (&repo(), &app_dev),
            (first.id, &first_key),
            operator_fact(FactKind::LockReleased, 1),
        )
        .await
        .unwrap();
    assert!(again.is_none());
}

on_both!(fixture_on, a_dead_job_is_queued_again_from_scratch_with_a_signed_fact, #[tokio::test]);
async fn a_dead_job_is_queued_again_from_scratch_with_a_signed_fact(f: Fixture) {
    use crate::gate::ledger::FactKind;
    let store = signing(&f).await;
    let before = store
        .append_fact(operator_fact(FactKind::Pending, 1))
        .await
        .unwrap();
    let id = dead_job(&f, "github:acme/infra#1").await;
    f.clock.advance(60_000);

    let fact = store
        .retry_dead_job(id, operator_fact(FactKind::JobRetried, 1))
        .await
        .unwrap()
        .expect("a dead job is queued again");

    let queued = store.job(id).await.unwrap().unwrap();
    assert_eq!(queued.status, JobStatus::Queued);
    assert_eq!(queued.attempts, 0);
    assert_eq!(queued.run_after, f.clock.now());
    assert_eq!(queued.lease_owner, None);
    assert_eq!(fact.prev, before.hash, "chained after the fact before");
    assert!(fact.sig.is_some());
    assert_eq!(verified_chain(&store).await.facts, 2);
    // It runs again, and only a dead job is queued again.
    assert_eq!(store.claim("w-2", LEASE).await.unwrap().unwrap().id, id);
    let not_dead = store
        .retry_dead_job(id, operator_fact(FactKind::JobRetried, 1))
        .await
        .unwrap();
    assert!(not_dead.is_none());
    assert_eq!(verified_chain(&store).await.facts, 2);
}

on_both!(fixture_on, a_drift_schedule_is_claimed_once_a_slot_and_its_issues_and_figures_read_back, #[tokio::test]);
async fn a_drift_schedule_is_claimed_once_a_slot_and_its_issues_and_figures_read_back(f: Fixture) {
    use crate::model::{DriftSubject, StageName};
    let repo_ref = repo_ref(None);
    f.store.upsert_repository(&repo_ref).await.unwrap();
    let scan = |_: &crate::forge::RepoRef| job("drift:github:acme/infra", 5);
    let rescan = Duration::from_secs(600);
    // Met for the first time: marked, read a rescan later.
    assert_eq!(f.store.claim_drift_scans(rescan, scan).await.unwrap(), 0);
    f.clock.advance(599_000);
    assert_eq!(f.store.claim_drift_scans(rescan, scan).await.unwrap(), 0);
    f.clock.advance(2_000);
    assert_eq!(f.store.claim_drift_scans(rescan, scan).await.unwrap(), 1);
    assert_eq!(
        f.store.claim_drift_scans(rescan, scan).await.unwrap(),
        0,
        "once"
    );

    let hour = Duration::from_secs(3600);
    let stages = [(StageName::new("prod"), hour)];
    f.store
        .sync_drift_schedule(&repo_ref, &stages)
        .await
        .unwrap();
    let check = |_: &crate::forge::RepoRef, _: &StageName| job("drift:github:acme/infra", 5);
    // Due at its slot, within the hour; claimed once there.
    assert_eq!(f.store.claim_due_drift_checks(check).await.unwrap(), 0);
    f.clock.advance(3_600_000);
    assert_eq!(f.store.claim_due_drift_checks(check).await.unwrap(), 1);
    assert_eq!(f.store.claim_due_drift_checks(check).await.unwrap(), 0);
    // Asked for soon (a pull request applied a drifted member): due now.
    f.store.drift_check_soon(&repo(), "prod").await.unwrap();
    assert_eq!(f.store.claim_due_drift_checks(check).await.unwrap(), 1);
    // Syncing again with the same interval keeps the slot; a stage no
    // longer checked leaves the schedule.
    f.store
        .sync_drift_schedule(&repo_ref, &stages)
        .await
        .unwrap();
    assert_eq!(f.store.claim_due_drift_checks(check).await.unwrap(), 0);
    f.store
        .count_drift_check(&repo(), "prod", true)
        .await
        .unwrap();
    f.store
        .count_drift_check(&repo(), "prod", false)
        .await
        .unwrap();

    let plan = f
        .store
        .save_plan(NewPlan {
            repo: repo(),
            pr: PrNumber(1001),
            head_sha: sha('a'),
            base_sha: sha('a'),
            digest: Some(Digest::repeated('2')),
            change_set: empty_set(),
            report: String::new(),
        })
        .await
        .unwrap();
    let since = f.store.now();
    let issue = DriftIssue {
        repo: repo(),
        number: PrNumber(1001),
        subject: DriftSubject::Member("net@prod".parse().unwrap()),
        open: true,
        drift: Some((Digest::repeated('2'), plan)),
        drifted: 1,
        commit: sha('a'),
        failing: None,
        since,
        changed_at: since,
        checked_at: since,
    };
    f.store.save_drift_issue(&issue).await.unwrap();
    assert_eq!(
        f.store.drift_issue(&repo(), PrNumber(1001)).await.unwrap(),
        Some(issue.clone())
    );
    assert_eq!(
        f.store.drift_issue(&repo(), PrNumber(7)).await.unwrap(),
        None
    );
    assert_eq!(
        f.store.open_drift_issues(&repo(), "prod").await.unwrap(),
        std::slice::from_ref(&issue)
    );
    f.clock.advance(60_000);
    let figures = f.store.figures().await.unwrap();
    let (stage, oldest_ms) = &figures.drift[0];
    assert_eq!(
        (
            stage.stage.as_str(),
            stage.drifted,
            stage.runs,
            stage.failures
        ),
        ("prod", 1, 2, 1)
    );
    assert_eq!(*oldest_ms, 60_000);
    // A second open issue of the same subject is refused: one per subject.
    let twin = DriftIssue {
        number: PrNumber(1002),
        ..issue.clone()
    };
    assert!(f.store.save_drift_issue(&twin).await.is_err());
    let closed = DriftIssue {
        open: false,
        ..issue
    };
    f.store.save_drift_issue(&closed).await.unwrap();
    assert!(f
        .store
        .open_drift_issues(&repo(), "prod")
        .await
        .unwrap()
        .is_empty());
    let figures = f.store.figures().await.unwrap();
    assert_eq!(figures.drift[0].0.drifted, 0);

    // A merge whose run has not started holds drift checks back.
    let prefix = "github:acme/infra#";
    assert!(!f.store.merge_in_hand(&repo(), prefix).await.unwrap());
    let merged = NewJob {
        kind: JobKind::Merged,
        ..job("github:acme/infra#5", 5)
    };
    f.store.enqueue(merged).await.unwrap();
    assert!(f.store.merge_in_hand(&repo(), prefix).await.unwrap());
    merged_run(&f, 5).await;
    assert!(
        !f.store.merge_in_hand(&repo(), prefix).await.unwrap(),
        "its run started"
    );
}

async fn a_dispatched_job_is_claimed_once_with_its_token_and_handed_back_once(f: Fixture) {
    let repo = RepoId::new(crate::model::ForgeKind::Forgejo, "acme/infra");
    let store = &f.store;
    store
        .add_dispatched_job(
            "j1",
            &repo,
            "{\"job\":1}",
            (DispatchAuth::Token, Some("claim-hash")),
            (LEASE, LEASE),
        )
        .await
        .unwrap();
    store
        .add_dispatched_job(
            "j2",
            &repo,
            "{\"job\":2}",
            (DispatchAuth::Oidc, None),
            (LEASE, LEASE),
        )
        .await
        .unwrap();
    store
        .set_dispatched_run("j1", 4242, Some("https://forge/runs/4242"))
        .await
        .unwrap();
    let j1 = store.dispatched_job("j1").await.unwrap().unwrap();
    assert_eq!(
        (j1.repo.clone(), j1.job.as_str(), j1.auth, j1.state),
        (
            repo.clone(),
            "{\"job\":1}",
            DispatchAuth::Token,
            DispatchState::Dispatched
        )
    );
    assert_eq!(
        (j1.run_id, j1.run_url.as_deref(), j1.run_sha.as_deref()),
        (Some(4242), Some("https://forge/runs/4242"), None)
    );
    store.set_dispatched_run_sha("j1", "c0ffee").await.unwrap();
    let j1 = store.dispatched_job("j1").await.unwrap().unwrap();
    assert_eq!(j1.run_sha.as_deref(), Some("c0ffee"));
    assert_eq!(store.dispatched_job("nope").await.unwrap(), None);

    // Another job's token, or none, does not claim a token job.
    for token in [Some("other-hash"), None] {
        assert_eq!(
            store.claim_dispatched_job("j1", token, "s1").await.unwrap(),
            ClaimOutcome::WrongToken
        );
    }
    assert_eq!(
        store
            .claim_dispatched_job("j1", Some("claim-hash"), "s1")
            .await
            .unwrap(),
        ClaimOutcome::Claimed
    );
    // Used up: the same token again is refused.
    assert_eq!(
        store
            .claim_dispatched_job("j1", Some("claim-hash"), "s2")
            .await
            .unwrap(),
        ClaimOutcome::NotClaimable(DispatchState::Claimed)
    );
    // An OIDC job is never claimed with a token.
    assert_eq!(
        store
            .claim_dispatched_job("j2", Some("claim-hash"), "s3")
            .await
            .unwrap(),
        ClaimOutcome::WrongToken
    );
    assert_eq!(
        store.claim_dispatched_job("j2", None, "s3").await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        store.claim_dispatched_job("nope", None, "s").await.unwrap(),
        ClaimOutcome::Unknown
    );
    assert!(store.dispatched_session_is("j1", "s1").await.unwrap());
    assert!(!store.dispatched_session_is("j1", "s3").await.unwrap());

    // A run queued past its time claims nothing; an unclaimed job is
    // given up on, a claimed one is not.
    store
        .add_dispatched_job(
            "j3",
            &repo,
            "{}",
            (DispatchAuth::Token, Some("late")),
            (LEASE, LEASE),
        )
        .await
        .unwrap();
    f.clock.advance(30_000);
    assert_eq!(
        store
            .claim_dispatched_job("j3", Some("late"), "s4")
            .await
            .unwrap(),
        ClaimOutcome::TooLate
    );
    assert_eq!(
        store.abandon_unclaimed_dispatched_job("j3").await.unwrap(),
        DispatchState::Abandoned
    );
    assert_eq!(
        store.abandon_unclaimed_dispatched_job("j1").await.unwrap(),
        DispatchState::Claimed
    );
    assert_eq!(
        store.progress_of("j1").await.unwrap().map(|p| p.state),
        Some(DispatchState::Claimed)
    );

    assert_eq!(
        store.finish_dispatched_job("j1", "s3", "{}").await.unwrap(),
        HandBack::WrongSession
    );
    assert_eq!(
        store
            .finish_dispatched_job("j1", "s1", "{\"ok\":true}")
            .await
            .unwrap(),
        HandBack::Recorded
    );
    assert_eq!(
        store
            .finish_dispatched_job("j1", "s1", "{\"ok\":false}")
            .await
            .unwrap(),
        HandBack::NotTaken(DispatchState::Finished)
    );
    let j1 = store.dispatched_job("j1").await.unwrap().unwrap();
    assert_eq!(j1.finished.as_deref(), Some("{\"ok\":true}"));
    store.forget_dispatched_payloads("j1").await.unwrap();
    let j1 = store.dispatched_job("j1").await.unwrap().unwrap();
    assert_eq!((j1.job.as_str(), j1.finished), ("", None));
    assert_eq!(j1.state, DispatchState::Finished);

    // Given up on: a late hand-back is refused; a finished job stays finished.
    assert_eq!(
        store.abandon_dispatched_job("j2").await.unwrap(),
        DispatchState::Abandoned
    );
    assert_eq!(
        store.finish_dispatched_job("j2", "s3", "{}").await.unwrap(),
        HandBack::NotTaken(DispatchState::Abandoned)
    );
    assert_eq!(
        store.abandon_dispatched_job("j1").await.unwrap(),
        DispatchState::Finished
    );
}
on_both!(fixture_on, a_dispatched_job_is_claimed_once_with_its_token_and_handed_back_once, #[tokio::test]);

async fn a_dispatched_jobs_streamed_output_is_taken_once_per_batch_from_its_session_and_bounded(
    f: Fixture,
) {
    let repo = RepoId::new(crate::model::ForgeKind::GitHub, "acme/infra");
    let store = &f.store;
    for id in ["j1", "j2"] {
        store
            .add_dispatched_job(id, &repo, "{}", (DispatchAuth::Oidc, None), (LEASE, LEASE))
            .await
            .unwrap();
    }
    // Nothing is taken before the job is claimed.
    assert_eq!(
        store
            .append_dispatched_output("j1", "s1", 0, "early\n", 100)
            .await
            .unwrap(),
        OutputAppend::NotTaken
    );
    store.claim_dispatched_job("j1", None, "s1").await.unwrap();
    store.claim_dispatched_job("j2", None, "s2").await.unwrap();

    let append = |seq: u64, text: &'static str| async move {
        store
            .append_dispatched_output("j1", "s1", seq, text, 20)
            .await
            .unwrap()
    };
    assert_eq!(append(0, "one\ntwo\n").await, OutputAppend::Appended);
    assert_eq!(append(1, "three\n").await, OutputAppend::Appended);
    // A retried post is taken once, even with other text.
    assert_eq!(append(1, "three again\n").await, OutputAppend::Repeated);
    // Another job's session appends nothing to this one.
    assert_eq!(
        store
            .append_dispatched_output("j1", "s2", 2, "forged\n", 20)
            .await
            .unwrap(),
        OutputAppend::NotTaken
    );
    // 14 bytes are kept: 7 more would pass the bound of 20, 6 do not.
    assert_eq!(append(2, "sixsix\n").await, OutputAppend::Full);
    assert_eq!(append(2, "fiver\n").await, OutputAppend::Appended);
    store
        .append_dispatched_output("j2", "s2", 0, "of j2\n", 20)
        .await
        .unwrap();

    assert_eq!(
        store.dispatched_output_after("j1", None, 10).await.unwrap(),
        [
            (0, "one\ntwo\n".to_owned()),
            (1, "three\n".to_owned()),
            (2, "fiver\n".to_owned())
        ]
    );
    assert_eq!(
        store
            .dispatched_output_after("j1", Some(0), 1)
            .await
            .unwrap(),
        [(1, "three\n".to_owned())]
    );
    assert_eq!(
        store
            .dispatched_output_after("j1", Some(2), 10)
            .await
            .unwrap(),
        []
    );

    // Handed back: the session is spent, and the output goes with the
    // payloads; a job still running keeps its own.
    store.finish_dispatched_job("j1", "s1", "{}").await.unwrap();
    assert_eq!(append(3, "late\n").await, OutputAppend::NotTaken);
    store.forget_dispatched_payloads("j2").await.unwrap();
    store.forget_dispatched_payloads("j1").await.unwrap();
    assert_eq!(
        store.dispatched_output_after("j1", None, 10).await.unwrap(),
        []
    );
    assert_eq!(
        store.dispatched_output_after("j2", None, 10).await.unwrap(),
        [(0, "of j2\n".to_owned())]
    );
}
on_both!(fixture_on, a_dispatched_jobs_streamed_output_is_taken_once_per_batch_from_its_session_and_bounded, #[tokio::test]);

/// A bot stopped while it waited leaves its jobs' records holding what
/// they carried: once each job is over for sure (its run stopped it), the
/// sweep gives it up and drops that; a job still within its time is left.
async fn dispatched_jobs_over_for_sure_are_given_up_and_forget_what_they_held(f: Fixture) {
    let repo = RepoId::new(crate::model::ForgeKind::GitHub, "acme/infra");
    let store = &f.store;
    let minute = Duration::from_secs(60);
    for (id, run_for) in [
        ("waiting", minute),
        ("running", minute),
        ("later", 60 * minute),
    ] {
        store
            .add_dispatched_job(
                id,
                &repo,
                "{\"plan\":1}",
                (DispatchAuth::Oidc, None),
                (minute, run_for),
            )
            .await
            .unwrap();
    }
    store
        .claim_dispatched_job("running", None, "s1")
        .await
        .unwrap();
    store
        .append_dispatched_output("running", "s1", 0, "planning\n", 100)
        .await
        .unwrap();
    f.clock.advance(90_000);
    assert_eq!(
        store
            .forget_dispatched_jobs_over(store.now())
            .await
            .unwrap(),
        0,
        "nothing is over before its run stopped it"
    );

    f.clock.advance(60_000);
    assert_eq!(
        store
            .forget_dispatched_jobs_over(store.now())
            .await
            .unwrap(),
        2
    );
    for id in ["waiting", "running"] {
        let record = store.dispatched_job(id).await.unwrap().unwrap();
        assert_eq!(
            (record.state, record.job.as_str(), record.finished),
            (DispatchState::Abandoned, "", None),
            "{id}"
        );
    }
    assert_eq!(
        store
            .dispatched_output_after("running", None, 10)
            .await
            .unwrap(),
        []
    );
    assert_eq!(
        store
            .claim_dispatched_job("waiting", None, "s2")
            .await
            .unwrap(),
        ClaimOutcome::NotClaimable(DispatchState::Abandoned)
    );
    let later = store.dispatched_job("later").await.unwrap().unwrap();
    assert_eq!(
        (later.state, later.job.as_str()),
        (DispatchState::Dispatched, "{\"plan\":1}")
    );
    assert_eq!(
        store
            .forget_dispatched_jobs_over(store.now())
            .await
            .unwrap(),
        0
    );
}
on_both!(fixture_on, dispatched_jobs_over_for_sure_are_given_up_and_forget_what_they_held, #[tokio::test]);
