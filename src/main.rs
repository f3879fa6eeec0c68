//! The `wavegate` command line: `serve` (the bot), `plan` (a local dry run of
//! what the bot would post), `config check`, and `adapt terraform`.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use wavegate::config::{RepoConfig, CONFIG_FILE};
use wavegate::plan::engine::{self, PlanError, PlanOptions};
use wavegate::report;

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
    init_logging();
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
        } => {
            let mut options = PlanOptions::new(repo, base, head);
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

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WAVEGATE_LOG")
        .unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
