//! The composition root: what `wavegate serve` starts and wires together —
//! the store (migrated, signing with the ledger key), the forges, the
//! sandbox, the HTTP server, the workers and the reconciler — and how it
//! stops. Nothing here decides anything; each part owns its own work.

use crate::config::Settings;
use crate::forge::registry::Forges;
use crate::git::Workspace;
use crate::sandbox::Sandbox;
use crate::server::{random_hex, router, setup, AppState};
use crate::store::{Clock, Store, SystemClock};
use crate::web;
use crate::worker::reconcile::Reconciler;
use crate::worker::{Worker, WorkerOptions};
use std::os::unix::fs::DirBuilderExt as _;
use std::sync::Arc;
use tokio::sync::Notify;

/// A running server and its workers.
pub struct Running {
    shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Stops a running server from another task.
#[derive(Clone)]
pub struct Stopper(Arc<tokio::sync::watch::Sender<bool>>);

impl Stopper {
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

impl Running {
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shutdown.clone())
    }

    /// Waits until the server stops (its [`Stopper`] was used): requests
    /// stop being taken and workers finish the job in hand.
    pub async fn wait(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Opens the store (running migrations), binds the listener and starts the
/// HTTP server and the workers.
pub async fn start(settings: &Settings, worker_options: WorkerOptions) -> anyhow::Result<Running> {
    use anyhow::Context as _;
    let worker_options = WorkerOptions {
        notify: settings.notify.clone(),
        operator: settings.operator.clone(),
        docs_url: settings
            .public_url
            .as_ref()
            .map(|url| format!("{url}/docs")),
        // Linked wherever someone can see them: open, or after a login.
        pages_url: settings
            .public_url
            .clone()
            .filter(|_| settings.public_pages || settings.login.any()),
        drift_floor: settings.drift_min_interval,
        jobs_url: settings.public_url.clone(),
        ..worker_options
    };
    for warning in
        settings.start_warnings(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()))
    {
        tracing::warn!("{warning}");
    }
    // Mirrors of private repositories and the App's key live here.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&settings.data_dir)
        .with_context(|| {
            format!(
                "WAVEGATE_DATA_DIR={}: cannot create it; point it at a writable directory",
                settings.data_dir.display()
            )
        })?;
    tracing::info!(
        "opening the database at {}",
        crate::store::redact_url(&settings.database_url)
    );
    let store = Store::open_with_clock(&settings.database_url, store_clock())
        .await
        .with_context(|| {
            format!(
                "WAVEGATE_DATABASE_URL={}",
                crate::store::redact_url(&settings.database_url)
            )
        })?;
    let key = ledger_key(settings, &store).await?;
    let run_keys = Arc::new(crate::dispatch::run_key::RunKeys::new(
        key.derived_secret(crate::dispatch::run_key::KEY_PURPOSE),
    ));
    let worker_options = WorkerOptions {
        run_keys: Some(run_keys.clone()),
        ..worker_options
    };
    let store = store.signing_with(key.clone()).await?;
    match store.signing_start(&key.public()).await? {
        Some(start) if start.verifies(&key.public()) => {}
        _ => tracing::error!(
            "the record of when this ledger began to be signed with {} does not verify: it was changed in the database; `wavegate ledger verify` fails until it is restored from a backup",
            key.public()
        ),
    }
    let forges = Arc::new(Forges::from_settings(settings)?);
    let sandbox = Arc::new(start_sandbox(settings).await?);
    let swept = crate::plan::engine::sweep_stale_job_dirs(&std::env::temp_dir());
    if swept > 0 {
        tracing::info!(
            swept,
            "removed job directories that stopped servers left behind"
        );
    }
    let wake = Arc::new(Notify::new());
    let refused = Arc::new(Notify::new());
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("WAVEGATE_LISTEN={}: cannot listen there", settings.listen))?;
    let addr = listener.local_addr()?;
    let (shutdown, stopping) = tokio::sync::watch::channel(false);

    let setup = Arc::new(setup::SetupState::new());
    if !forges.github_configured() {
        let base = settings
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        tracing::warn!(
            "no GitHub App is configured: to create one, open {base}/setup?token={} (this link works until an App exists)",
            setup.token()
        );
    }
    let state = AppState {
        store: store.clone(),
        forges: forges.clone(),
        wake: wake.clone(),
        public_url: settings.public_url.clone(),
        setup,
        sandbox: sandbox.clone(),
        refused: refused.clone(),
        run_keys,
        run_tokens: Arc::new(
            crate::dispatch::oidc::Jwks::new(&settings.actions_oidc_issuer)
                .context("WAVEGATE_ACTIONS_OIDC_ISSUER")?,
        ),
    };
    let console = crate::plan::live::Hub::default();
    let pages = web::WebState::new(
        settings,
        store.clone(),
        console.clone(),
        forges.clone(),
        &key,
        web::ServerView {
            version: env!("CARGO_PKG_VERSION"),
            sandbox: sandbox.describe(),
            sandbox_problem: sandbox.problem().map(str::to_owned),
            limits_held_by: sandbox.limits_mechanism(),
            profiles: sandbox
                .profiles()
                .iter()
                .map(|profile| format!("{}: {}", profile.name, profile.describe()))
                .collect(),
            workers: settings.workers,
            forges: forge_lines(settings, &forges),
            public_url: settings.public_url.clone(),
        },
        wake.clone(),
    )?;
    let mut tasks = Vec::new();
    let mut http_stopping = stopping.clone();
    tasks.push(tokio::spawn(async move {
        let served = axum::serve(listener, router(state).merge(web::router(pages)))
            .with_graceful_shutdown(async move {
                let _ = http_stopping.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(error) = served {
            tracing::error!("the HTTP server stopped: {error}");
        }
    }));
    let workspace = Workspace::new(&settings.data_dir);
    for n in 0..settings.workers {
        let worker = Worker {
            // Unique per start: a restarted container keeps its hostname and pid.
            id: format!(
                "{}-{}-{}-{n}",
                hostname(),
                std::process::id(),
                random_hex(4)
            ),
            store: store.clone(),
            forges: forges.clone(),
            workspace: workspace.clone(),
            wake: wake.clone(),
            options: worker_options.clone(),
            sandbox: sandbox.clone(),
            cancel: Default::default(),
            base_rules: Default::default(),
            console: console.clone(),
        };
        tasks.push(tokio::spawn(worker.run(stopping.clone())));
    }
    tasks.push(tokio::spawn(crate::dispatch::forget_jobs_over(
        store.clone(),
        stopping.clone(),
    )));
    match settings.reconcile_every {
        Some(every) => {
            let reconciler = Reconciler::new(
                store.clone(),
                forges.clone(),
                wake.clone(),
                settings.reconcile_budget,
            );
            tasks.push(tokio::spawn(reconciler.run(
                every,
                refused,
                stopping.clone(),
            )));
        }
        None => tracing::info!("reconciliation is off (WAVEGATE_RECONCILE_EVERY=off)"),
    }
    match settings.drift_min_interval {
        Some(floor) => {
            let clock =
                crate::worker::drift_clock::DriftClock::new(store.clone(), wake.clone(), floor);
            tasks.push(tokio::spawn(clock.run(stopping.clone())));
        }
        None => tracing::info!("drift checks are off (WAVEGATE_DRIFT_MIN_INTERVAL=off)"),
    }
    tracing::info!(%addr, workers = settings.workers, "wavegate is listening");
    Ok(Running {
        shutdown: Arc::new(shutdown),
        tasks,
    })
}

/// The key every fact is signed with: `WAVEGATE_LEDGER_KEY_FILE`'s, else the
/// data dir's (generated at first start). Says which, and warns when the
/// ledger's newest signed facts were signed by another key (a lost key, or
/// replicas that do not share one) or one replica among several keeps its own.
async fn ledger_key(
    settings: &Settings,
    store: &Store,
) -> anyhow::Result<Arc<crate::gate::ledger::LedgerKey>> {
    use crate::config::ledger_key;
    let (key, origin) = match &settings.ledger_key {
        Some((path, key)) => (
            key.clone(),
            format!("{} ({})", path.display(), ledger_key::VAR),
        ),
        None => {
            let (key, generated) = ledger_key::load_or_generate(&settings.data_dir)?;
            let path = ledger_key::in_data_dir(&settings.data_dir);
            if generated {
                tracing::info!(
                    "generated the ledger key {}: back it up with the database (facts it signed verify with no other key)",
                    path.display()
                );
            }
            if store.backend() == crate::store::Backend::Postgres {
                tracing::warn!(
                    "the ledger key is this server's own ({}): every replica on this database must sign with the same key, kept where it outlives the container; give each the same file with {}",
                    path.display(),
                    ledger_key::VAR
                );
            }
            (Arc::new(key), path.display().to_string())
        }
    };
    let public = key.public();
    tracing::info!(key = %public, "ledger facts are signed with {origin}");
    let newest = store.newest_signed_facts().await?;
    let foreign: Vec<String> = newest
        .iter()
        .filter(|fact| {
            !fact
                .sig
                .as_deref()
                .is_some_and(|sig| public.verifies(fact.hash.as_str(), sig))
        })
        .map(|fact| format!("{} seq {}", fact.fact.repo, fact.seq))
        .collect();
    if !foreign.is_empty() && foreign.len() == newest.len() {
        tracing::error!(
            "no repository's newest signed fact verifies with this server's ledger key {public} ({}): the key changed (a lost data dir, replicas with keys of their own); give the server the key its facts were signed with ({}), or `wavegate ledger verify` fails for every fact signed from now on",
            foreign.join(", "),
            ledger_key::VAR
        );
    } else if !foreign.is_empty() {
        tracing::error!(
            "signed facts that do not verify with this server's ledger key {public}: {}; they were not written by wavegate: run `wavegate ledger verify`",
            foreign.join(", ")
        );
    }
    Ok(key)
}

/// The store's clock: the system's, unless a build with the tests'
/// `test-clock` feature is told to shift it (`WAVEGATE_TEST_CLOCK_SHIFT_FILE`:
/// see `ShiftedClock`).
fn store_clock() -> Arc<dyn Clock> {
    #[cfg(feature = "test-clock")]
    if let Some(file) = std::env::var_os("WAVEGATE_TEST_CLOCK_SHIFT_FILE") {
        tracing::warn!(
            "a test build: the store's clock is the system's moved on by the milliseconds in {}",
            std::path::Path::new(&file).display()
        );
        return Arc::new(crate::store::ShiftedClock::new(file));
    }
    Arc::new(SystemClock)
}

/// Checks the operator's sandbox paths against what commands must never see,
/// then tries the sandbox. One that cannot run here leaves the server up (it
/// takes webhooks and says what is wrong) with every command refused.
async fn start_sandbox(settings: &Settings) -> anyhow::Result<Sandbox> {
    let database = crate::store::sqlite_file(&settings.database_url);
    let key = settings
        .github
        .as_ref()
        .and_then(|g| g.private_key_file.clone());
    let mut secrets: Vec<(&str, &std::path::Path)> = vec![("the data dir", &settings.data_dir)];
    if let Some(database) = &database {
        secrets.push(("the database", database));
    }
    if let Some(key) = &key {
        secrets.push(("the App's private key", key));
    }
    if let Some((ledger_key, _)) = &settings.ledger_key {
        secrets.push(("the ledger key", ledger_key));
    }
    let tree_cache = crate::sandbox::trees::cache_dir();
    secrets.push(("every repository's cached trees", &tree_cache));
    settings
        .sandbox
        .check_exposure(&secrets, &std::env::temp_dir())?;
    let sandbox = Sandbox::probe(settings.sandbox.clone()).await;
    match sandbox.problem() {
        Some(problem) => tracing::error!(
            "the sandbox is unavailable, so no plan or apply command will run until it is fixed: {problem}"
        ),
        None if sandbox.is_off() => tracing::warn!(
            "WAVEGATE_SANDBOX=none: plan and apply commands run without a sandbox, as this server's user, and every report says so"
        ),
        None => tracing::info!("commands run in the sandbox: {}", sandbox.describe()),
    }
    crate::metrics::global()
        .sandbox_limits
        .get_or_create(&crate::metrics::MechanismLabels {
            mechanism: sandbox.limits_mechanism().to_owned(),
        })
        .set(1);
    if !sandbox.is_off() && sandbox.problem().is_none() && rustix::process::geteuid().is_root() {
        tracing::warn!(
            "wavegate runs as root: its sandboxed commands are root outside their namespaces, so what the sandbox shows them (the system read-only, their job, the WAVEGATE_SANDBOX_* paths) is no longer guarded by file modes; run wavegate as a user of its own (the container image uses uid 10001)"
        );
    }
    Ok(sandbox)
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "wavegate".into())
}

/// The forges this server talks to, one line each, for the server page.
fn forge_lines(settings: &Settings, forges: &Forges) -> Vec<String> {
    let mut lines = vec![if forges.github_configured() {
        format!(
            "GitHub App, API at {}",
            crate::store::redact_url(forges.github_api_url())
        )
    } else {
        format!(
            "GitHub: no App yet (API at {}; /setup creates one)",
            crate::store::redact_url(forges.github_api_url())
        )
    }];
    if let Some(forgejo) = &settings.forgejo {
        lines.push(format!(
            "Forgejo at {}",
            crate::store::redact_url(&forgejo.url)
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, String)]) -> Settings {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned()).unwrap()
    }

    #[tokio::test]
    async fn a_sandbox_path_that_would_show_commands_the_ledger_key_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let host = tempfile::tempdir().unwrap();
        let secrets = host.path().join("secrets");
        std::fs::create_dir(&secrets).unwrap();
        let key_file = secrets.join("ledger.pem");
        let key = crate::gate::ledger::LedgerKey::from_seed(&[1; 32]);
        std::fs::write(&key_file, key.to_pkcs8_pem().as_bytes()).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400)).unwrap();
        let base = [
            (
                "WAVEGATE_DATA_DIR",
                host.path().join("data").display().to_string(),
            ),
            ("WAVEGATE_LEDGER_KEY_FILE", key_file.display().to_string()),
        ];
        for read in [&secrets, &key_file] {
            let mut vars = base.to_vec();
            vars.push(("WAVEGATE_SANDBOX_READ", read.display().to_string()));
            let error = start_sandbox(&settings(&vars))
                .await
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with("WAVEGATE_SANDBOX_READ:")
                    && error.contains("would let every command see the ledger key"),
                "{error}"
            );
        }
        let mut vars = base.to_vec();
        vars.push((
            "WAVEGATE_SANDBOX_READ",
            host.path().join("tools").display().to_string(),
        ));
        std::fs::create_dir(host.path().join("tools")).unwrap();
        start_sandbox(&settings(&vars)).await.unwrap();
    }

    #[tokio::test]
    async fn the_server_keeps_its_ledger_key_and_signs_with_it_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("wavegate.db").display());
        let vars = [
            (
                "WAVEGATE_DATA_DIR",
                dir.path().join("data").display().to_string(),
            ),
            ("WAVEGATE_DATABASE_URL", url.clone()),
        ];
        let settings = settings(&vars);
        let store = Store::open(&url).await.unwrap();
        let first = ledger_key(&settings, &store).await.unwrap();
        let again = ledger_key(&settings, &store).await.unwrap();
        assert_eq!(first.public(), again.public());
        assert_eq!(
            crate::config::ledger_key::public_of(&crate::config::ledger_key::in_data_dir(
                &settings.data_dir
            ))
            .unwrap(),
            first.public()
        );
    }
}
