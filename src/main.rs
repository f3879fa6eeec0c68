//! The `wavegate` command line: `serve` (the bot), `plan` (a local dry run of
//! what the bot would post), `config check`, `adapt terraform`, and `ledger
//! verify|export` (audit the gate ledger).

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use wavegate::config::settings::{LogFormat, DEFAULT_DATABASE_URL};
use wavegate::config::{RepoConfig, CONFIG_FILE};
use wavegate::gate::ledger;
use wavegate::plan::engine::{self, PlanError, PlanOptions};
use wavegate::report;
use wavegate::sandbox::{Sandbox, SandboxSettings};
use wavegate::store::Store;

#[derive(Parser)]
#[command(
    name = "wavegate",
    version,
    about = "Plan infrastructure changes per component and stage, bound to one approvable digest"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bot: webhooks in, reports out. Settings come from WAVEGATE_* variables (see README).
    Serve,
    /// Plan a change between two revisions of a local repository, as the bot would.
    Plan {
        /// The repository checkout.
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// The base revision (the PR's target).
        #[arg(long)]
        base: String,
        /// The head revision (the PR's tip).
        #[arg(long)]
        head: String,
        /// Plan only this stage's members.
        #[arg(long)]
        stage: Option<String>,
        /// JSON mapping component@stage to outputs, used for upstreams not in the change.
        #[arg(long, value_name = "FILE")]
        outputs: Option<PathBuf>,
        /// Print the JSON report on stdout.
        #[arg(long)]
        json: bool,
        /// Print the markdown PR comment on stdout.
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
        /// Plans run at once within a wave (default: number of cores).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Run the plan commands without the sandbox the bot runs them in
        /// (they can then read and change whatever you can).
        #[arg(long)]
        no_sandbox: bool,
    },
    /// Check a repository's wavegate.toml.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Turn another tool's plan into a wavegate plan file (stdin to stdout).
    Adapt {
        #[command(subcommand)]
        tool: AdaptTool,
    },
    /// Audit the gate ledger: check its hash chains or export its facts.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Recompute every repository's hash chain; exit 1 naming the first broken link.
    Verify {
        /// The database (default: WAVEGATE_DATABASE_URL, else sqlite://wavegate.db).
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
    /// Write the facts as JSON lines, one fact per line, to standard output.
    Export {
        /// Only this repository's facts, e.g. github:acme/infra.
        #[arg(long)]
        repo: Option<String>,
        /// The database (default: WAVEGATE_DATABASE_URL, else sqlite://wavegate.db).
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
}

#[derive(Subcommand)]
enum AdaptTool {
    /// Read `terraform show -json PLANFILE` (or `tofu show -json`) on stdin.
    Terraform,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate wavegate.toml in the working tree of DIR.
    Check {
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logging starts before the other settings are read, so that their
    // errors are logged as asked; this one variable is read first.
    let log_format = std::env::var("WAVEGATE_LOG_FORMAT").ok();
    match wavegate::config::settings::log_format(log_format.as_deref()) {
        Ok(format) => init_logging(format),
        Err(e) => return usage_error(&format!("{e:#}")),
    }
    match cli.command {
        Command::Serve => serve(),
        Command::Plan {
            repo,
            base,
            head,
            stage,
            outputs,
            json,
            markdown,
            concurrency,
            no_sandbox,
        } => {
            let sandbox = match local_sandbox(no_sandbox) {
                Ok(sandbox) => sandbox,
                Err(e) => return usage_error(&e),
            };
            let mut options = PlanOptions::new(repo, base, head, sandbox);
            options.stage = stage;
            if let Some(n) = concurrency {
                options.concurrency = n.max(1);
            }
            if let Some(path) = outputs {
                let seeded = std::fs::read_to_string(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|text| engine::parse_seeded(&text));
                match seeded {
                    Ok(s) => options.seeded = s,
                    Err(e) => return usage_error(&format!("--outputs {}: {e}", path.display())),
                }
            }
            run_plan(options, json, markdown)
        }
        Command::Config {
            command: ConfigCommand::Check { repo },
        } => config_check(repo),
        Command::Adapt {
            tool: AdaptTool::Terraform,
        } => adapt_terraform(),
        Command::Ledger { command } => ledger_command(command),
    }
}

fn ledger_command(command: LedgerCommand) -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    let done = runtime.block_on(async {
        match command {
            LedgerCommand::Verify { database } => {
                let store = open_ledger(database).await?;
                verify_ledger(&store).await
            }
            LedgerCommand::Export { repo, database } => {
                let store = open_ledger(database).await?;
                export_ledger(&store, repo).await?;
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    done.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::from(2)
    })
}

async fn open_ledger(database: Option<String>) -> anyhow::Result<Store> {
    let url = database
        .or_else(|| std::env::var("WAVEGATE_DATABASE_URL").ok())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    Store::open_existing(&url).await
}

/// One line per repository; exit 1 when any chain is broken or unreadable.
async fn verify_ledger(store: &Store) -> anyhow::Result<ExitCode> {
    let repos = store.ledger_repos().await?;
    if repos.is_empty() {
        println!("the ledger holds no facts yet");
    }
    let mut all_intact = true;
    for repo in repos {
        let facts = match store.repo_facts(&repo).await {
            Ok(facts) => facts,
            Err(e) => {
                all_intact = false;
                println!("{repo}: the ledger cannot be read: {e:#}");
                continue;
            }
        };
        match ledger::verify_chain(&facts) {
            Ok(()) => {
                let plural = if facts.len() == 1 { "" } else { "s" };
                println!("{repo}: {} fact{plural}, chain intact", facts.len());
            }
            Err(broken) => {
                all_intact = false;
                println!("{broken}");
            }
        }
    }
    Ok(if all_intact {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn export_ledger(store: &Store, repo: Option<String>) -> anyhow::Result<()> {
    let repos = match repo {
        Some(repo) => vec![repo],
        None => store.ledger_repos().await?,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for repo in repos {
        for fact in store.repo_facts(&repo).await? {
            let line = serde_json::to_string(&fact)?;
            if let Err(e) = writeln!(out, "{line}") {
                return quiet_when_reader_left(e);
            }
        }
    }
    out.flush().or_else(quiet_when_reader_left)
}

/// A reader that stops early (`| head`) is not an export failure.
fn quiet_when_reader_left(e: std::io::Error) -> anyhow::Result<()> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(anyhow::Error::new(e).context("writing the export"))
    }
}

fn serve() -> ExitCode {
    let settings = match wavegate::config::Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => return usage_error(&format!("{e:#}")),
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    let served = runtime.block_on(async {
        let options = wavegate::worker::WorkerOptions {
            lease: settings.job_lease,
            held_retry: settings.held_retry,
            ..Default::default()
        };
        let running = wavegate::server::start(&settings, options).await?;
        let stop = running.stopper();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing the jobs in hand");
            stop.stop();
        });
        running.wait().await;
        anyhow::Ok(())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

/// The sandbox `wavegate plan` runs commands in: the bot's, with the same
/// `WAVEGATE_SANDBOX*` settings, unless `--no-sandbox`.
fn local_sandbox(no_sandbox: bool) -> Result<std::sync::Arc<Sandbox>, String> {
    if no_sandbox {
        return Ok(std::sync::Arc::new(Sandbox::off()));
    }
    let settings = SandboxSettings::from_lookup(|name| std::env::var(name).ok())
        .map_err(|e| format!("{e:#}"))?;
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    let sandbox = runtime.block_on(Sandbox::probe(settings));
    match sandbox.problem() {
        Some(problem) => Err(format!(
            "plan commands run in the sandbox, as the bot runs them, and {problem}; or pass --no-sandbox to run them as yourself"
        )),
        None => Ok(std::sync::Arc::new(sandbox)),
    }
}

fn run_plan(options: PlanOptions, json: bool, markdown: bool) -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    match runtime.block_on(engine::plan_change(&options)) {
        Ok(change) => {
            eprint!("{}", report::text::render(&change));
            if json {
                println!("{}", report::json::to_string(&change));
            } else if markdown {
                print!("{}", report::markdown::render(&change));
            }
            if change.any_failed() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(PlanError::Config(e)) => usage_error(&e.to_string()),
        Err(PlanError::Usage(e)) => usage_error(&e),
        Err(PlanError::Internal(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn config_check(repo: PathBuf) -> ExitCode {
    let path = repo.join(CONFIG_FILE);
    let text = match std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))
    {
        Ok(t) => t,
        Err(e) => {
            return usage_error(&format!(
                "{e:#}; run it in a repository root or pass --repo DIR"
            ))
        }
    };
    match RepoConfig::parse(&path.display().to_string(), &text) {
        Ok(config) => {
            println!(
                "{}: ok ({} stages, {} components)",
                path.display(),
                config.stages.len(),
                config.components.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WAVEGATE_LOG")
        .unwrap_or_else(|_| "info".into());
    let logger = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logger
            .without_time()
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // One object per line: timestamp, level, target, the event's fields,
        // and the spans it ran in (a job's repo, pr, delivery and id).
        LogFormat::Json => logger
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

fn adapt_terraform() -> ExitCode {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        return usage_error(&format!("cannot read standard input: {e}"));
    }
    match wavegate::plan::terraform::adapt_terraform(&input) {
        Ok(plan) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&plan).expect("a plan file serialises")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
