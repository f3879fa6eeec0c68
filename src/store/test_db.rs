//! Databases for the store's tests: a SQLite file in a temp dir, or a fresh
//! PostgreSQL database (dropped afterwards) on the server `.ci/run` starts.
//! `on_both!` runs one test story on each (and, if told, on a third
//! database of the test's own making).

use super::Backend;
use tempfile::TempDir;

/// A database one test owns, by URL.
pub(super) struct TestDatabase {
    pub(crate) url: String,
    _dir: TempDir,
    _postgres: Option<PostgresDatabase>,
}

impl TestDatabase {
    pub(crate) async fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (url, postgres) = match backend {
            Backend::Sqlite => (sqlite_url(&dir), None),
            Backend::Postgres => {
                let (database, url) = PostgresDatabase::create().await;
                (url, Some(database))
            }
        };
        Self {
            url,
            _dir: dir,
            _postgres: postgres,
        }
    }

    /// A SQLite file whose URL ends in `?{options}`.
    pub(crate) fn sqlite_with_options(options: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            url: format!("{}?{options}", sqlite_url(&dir)),
            _dir: dir,
            _postgres: None,
        }
    }
}

fn sqlite_url(dir: &TempDir) -> String {
    format!("sqlite://{}", dir.path().join("wavegate.db").display())
}

/// Where the PostgreSQL tests make their databases (trust auth on these
/// machines; `.ci/run` starts the server).
pub(super) fn postgres_admin_url() -> String {
    std::env::var("WAVEGATE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh PostgreSQL database for one test, dropped after it.
struct PostgresDatabase {
    name: String,
}

impl PostgresDatabase {
    async fn create() -> (Self, String) {
        sqlx::any::install_default_drivers();
        let name = format!(
            "wavegate_test_{}_{}",
            std::process::id(),
            NEXT_DATABASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let admin = postgres_admin_url();
        let pool = sqlx::AnyPool::connect(&admin).await.unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin} (start it, or set WAVEGATE_TEST_POSTGRES_URL): {e}")
        });
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name}"
        )))
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&pool)
            .await
            .unwrap();
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        let url = format!("{base}/{name}");
        (Self { name }, url)
    }
}

static NEXT_DATABASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop cannot wait on the test's runtime: a thread of its own does.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(pool) = sqlx::AnyPool::connect(&postgres_admin_url()).await {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&pool).await;
                }
            });
        })
        .join();
    }
}

/// Runs the store test `$name(fixture)` on SQLite and on PostgreSQL, as
/// `$name::sqlite` and `$name::postgres`; `$fixture(backend)` makes what the
/// test gets. `and $extra on $extra_fixture` adds a third run,
/// `$name::$extra`, on what `$extra_fixture()` makes.
macro_rules! on_both {
    ($fixture:ident, $name:ident, #[$test:meta] $(, and $extra:ident on $extra_fixture:ident)?) => {
        mod $name {
            #[$test]
            async fn sqlite() {
                super::$name(super::$fixture($crate::store::Backend::Sqlite).await).await
            }

            #[$test]
            async fn postgres() {
                super::$name(super::$fixture($crate::store::Backend::Postgres).await).await
            }

            $(
                #[$test]
                async fn $extra() {
                    super::$name(super::$extra_fixture().await).await
                }
            )?
        }
    };
}
pub(super) use on_both;
