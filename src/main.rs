//! The `wavegate` command line: `serve` (the bot), `plan` (a local dry run of
//! what the bot would post), `config check`, `adapt terraform |
//! terraform-outputs | terraform-vars`, `ledger verify|export|key` (audit
//! the gate ledger), and `runs` and `run show` (a running server's runs,
//! read from its JSON API).

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use wavegate::config::ledger_key;
use wavegate::config::settings::LogFormat;
use wavegate::config::vars::{self, ServerVars};
use wavegate::config::{RepoConfig, CONFIG_FILE};
use wavegate::gate::ledger;
use wavegate::plan::engine::{self, PlanError, PlanOptions};
use wavegate::remote;
use wavegate::report;
use wavegate::sandbox::{Sandbox, SandboxSettings, SandboxVars};
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
    /// Run the bot: webhooks in, reports out. Settings come from WAVEGATE_* variables (`serve --help` lists them).
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
        /// Print the markdown PR comment on stdout, as the bot posts it for a
        /// plan nobody approved yet (approvals section included).
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
        /// Plans run at once within a wave (default: number of cores).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Run the plan commands without the sandbox the bot runs them in
        /// (they can then read and change whatever you can).
        #[arg(long)]
        no_sandbox: bool,
        /// The server's execution profiles file, so the plan runs with what
        /// the bot would give it (default: WAVEGATE_PROFILES).
        #[arg(long, value_name = "FILE", conflicts_with = "no_sandbox")]
        profiles: Option<PathBuf>,
    },
    /// Deploy every member of one revision of a local checkout, wave by wave,
    /// with no gate and no approval: to create a new estate's state (the bot
    /// applies changes after merge, behind its gates).
    Apply {
        /// Required: nothing but a local deploy is offered here.
        #[arg(long)]
        local: bool,
        /// The repository checkout.
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// The revision deployed (a branch, tag or commit).
        #[arg(long = "ref", value_name = "REV")]
        rev: String,
        /// Deploy only this stage's members.
        #[arg(long)]
        stage: Option<String>,
        /// The local ledger each apply is appended to (default: `wavegate-local-ledger.jsonl` in the checkout's `.git`).
        #[arg(long, value_name = "FILE")]
        ledger: Option<PathBuf>,
        /// Run the commands without the sandbox the bot runs them in.
        #[arg(long)]
        no_sandbox: bool,
        /// The server's execution profiles file (default: WAVEGATE_PROFILES).
        #[arg(long, value_name = "FILE", conflicts_with = "no_sandbox")]
        profiles: Option<PathBuf>,
    },
    /// Check a repository's wavegate.toml.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Turn another tool's JSON into the files wavegate reads and writes (stdin to stdout).
    Adapt {
        #[command(subcommand)]
        tool: AdaptTool,
    },
    /// The commands `[terraform]` in wavegate.toml runs (in the sandbox, like
    /// any command): find the root modules, plan, apply, read the outputs.
    Terraform {
        #[command(subcommand)]
        command: TerraformCommand,
    },
    /// Audit the gate ledger: check its hash chains and signatures, export its facts, print its public key.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
    /// Make, list and revoke the read-only tokens integrations read the JSON API (`/api/v1/…`) with.
    ApiToken {
        #[command(subcommand)]
        command: ApiTokenCommand,
    },
    /// List a repository's pull requests and runs from a running server's
    /// JSON API: where each stands, what it waits for, the comment to copy.
    /// With WAVEGATE_API_TOKEN set, it is sent as a bearer token.
    Runs {
        /// The server, e.g. https://wavegate.example.
        #[arg(long, value_name = "URL")]
        server: String,
        /// The repository as forge/owner/name, e.g. github/acme/infra.
        #[arg(long, value_name = "FORGE/OWNER/NAME")]
        repo: String,
        /// Only the pull requests in this state.
        #[arg(long, value_parser = ["waiting", "applying", "failed", "done"])]
        state: Option<String>,
    },
    /// One pull request's run, from a running server's JSON API.
    Run {
        #[command(subcommand)]
        command: RunCommand,
    },
    /// Print what a set-up needs.
    Init {
        #[command(subcommand)]
        command: InitCommand,
    },
    /// The forge's CI side of a profile with `executor = "actions"`.
    Job {
        #[command(subcommand)]
        command: JobCommand,
    },
}

#[derive(Subcommand)]
enum InitCommand {
    /// Print the workflow file that runs the jobs of profiles with
    /// `executor = "actions"` (commit it to the default branch), and, on
    /// standard error, the permissions wavegate needs for it.
    Actions {
        #[arg(long, value_parser = ["github", "forgejo"])]
        forge: String,
        /// Where runs reach wavegate (its WAVEGATE_PUBLIC_URL), written
        /// into the workflow.
        #[arg(long, value_name = "URL")]
        server: String,
        /// The wavegate image the job runs in (deploy/Dockerfile's, of
        /// this version, unless you publish it under another name).
        #[arg(long, value_name = "IMAGE", default_value = concat!("wavegate:", env!("CARGO_PKG_VERSION")))]
        image: String,
    },
}

#[derive(Subcommand)]
enum JobCommand {
    /// Run one job wavegate dispatched to this workflow run: claim it (with
    /// the run's OIDC token on GitHub; WAVEGATE_JOB_TOKEN and a proof made
    /// with WAVEGATE_RUN_KEY on Forgejo), run it in the sandbox in the
    /// checkout, and hand back what it left. Exits 0 when the command
    /// succeeded.
    Run {
        /// The bot (the run's `wavegate` input).
        #[arg(long, value_name = "URL", env = "WAVEGATE_SERVER")]
        server: String,
        /// The job (the run's `job` input).
        #[arg(long, value_name = "ID", env = "WAVEGATE_JOB")]
        job: String,
        /// The checkout of the job's commit (the run's `sha` input).
        #[arg(long, value_name = "DIR", default_value = ".")]
        tree: PathBuf,
    },
}

#[derive(Subcommand)]
enum ApiTokenCommand {
    /// Make a token and print it (once: only its hash is kept). Send it as
    /// `Authorization: Bearer <token>`.
    Create {
        /// What the token is for, to list and revoke it by (e.g. `dashboards`).
        name: String,
        /// A repository it may read, e.g. github:acme/infra (repeat for more);
        /// without one it reads every repository.
        #[arg(long = "repo", value_name = "FORGE:OWNER/NAME")]
        repos: Vec<String>,
        /// The database (default: WAVEGATE_DATABASE_URL, else sqlite://wavegate.db).
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
    /// List the tokens: name, what they read, when they were made.
    List {
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
    /// Revoke a token by name: it is refused from the next request on.
    Revoke {
        name: String,
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
}

#[derive(Subcommand)]
enum RunCommand {
    /// Print a pull request's run by stage and wave, what it waits for, the
    /// comment to copy and the ledger facts of its gates.
    Show {
        /// The server, e.g. https://wavegate.example.
        #[arg(long, value_name = "URL")]
        server: String,
        /// The repository as forge/owner/name, e.g. github/acme/infra.
        #[arg(value_name = "FORGE/OWNER/NAME")]
        repo: String,
        /// The pull request's number.
        number: u64,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Recompute every repository's hash chain and check every fact's
    /// signature; exit 1 naming the first bad fact.
    Verify {
        /// The database (default: WAVEGATE_DATABASE_URL, else sqlite://wavegate.db).
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// The ledger's public key, `ed25519:…` as `wavegate ledger key`
        /// prints it, or a file holding that line. Default: the server's key
        /// file if readable here (WAVEGATE_LEDGER_KEY_FILE, else
        /// ledger/key.pem in WAVEGATE_DATA_DIR); without one only the chains
        /// are checked.
        #[arg(long, value_name = "PUBLIC")]
        key: Option<String>,
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
    /// Print the public key the ledger's facts are signed with, for `ledger verify --key`.
    Key {
        /// The server's data dir, holding ledger/key.pem (default:
        /// WAVEGATE_LEDGER_KEY_FILE, else WAVEGATE_DATA_DIR, else wavegate-data).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// The key file itself, as WAVEGATE_LEDGER_KEY_FILE names it.
        #[arg(long, value_name = "FILE", conflicts_with = "data_dir")]
        key: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum TerraformCommand {
    /// Write the root modules of the checkout at ROOT as a units file.
    Discover {
        units_file: PathBuf,
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Init, select the stage's workspace, plan to a binary plan beside
    /// PLAN_FILE and write PLAN_FILE from `show -json`.
    Plan {
        plan_file: PathBuf,
        inputs_file: PathBuf,
        #[command(flatten)]
        member: TfMember,
    },
    /// Apply the binary plan saved beside PLAN_FILE and write the outputs.
    Apply {
        plan_file: PathBuf,
        outputs_file: PathBuf,
        #[command(flatten)]
        member: TfMember,
    },
    /// Write what is deployed now (`{}` where nothing is).
    Outputs {
        outputs_file: PathBuf,
        #[command(flatten)]
        member: TfMember,
    },
}

/// The member a `wavegate terraform` command runs for.
#[derive(clap::Args)]
struct TfMember {
    /// `terraform` or `tofu`, or the program's absolute path.
    #[arg(long, default_value = "terraform")]
    binary: String,
    #[arg(long)]
    stage: String,
    /// The member's directory, relative to the repository root.
    #[arg(long)]
    dir: String,
    /// Where the stage's own directory is (`stage_dirs` filled in): a
    /// member under it uses the default workspace.
    #[arg(long)]
    stage_dir: Option<String>,
}

impl From<TfMember> for wavegate::plan::terraform_run::TfOptions {
    fn from(member: TfMember) -> Self {
        Self {
            binary: member.binary,
            stage: wavegate::model::StageName::new(member.stage),
            dir: member.dir,
            stage_dir: member.stage_dir,
        }
    }
}

#[derive(Subcommand)]
enum AdaptTool {
    /// Read `terraform show -json PLANFILE` (or `tofu show -json`) on stdin; write a plan file.
    Terraform,
    /// Read `terraform output -json` on stdin; write the flat outputs file
    /// (`{"name": value}`) apply and outputs commands write. Sensitive
    /// outputs are left out and named on stderr.
    TerraformOutputs {
        /// Keep sensitive outputs too. The outputs file cannot mark a value
        /// sensitive: a downstream's input read from it is shown in the report.
        #[arg(long)]
        keep_sensitive: bool,
    },
    /// Read wavegate's inputs file (`{inputs_file}`) on stdin; write its known
    /// inputs as a `.tfvars.json` for `-var-file=`. Unknown inputs are named
    /// on stderr: Terraform cannot plan with an unknown variable, so each
    /// keeps its default.
    TerraformVars,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate wavegate.toml in the working tree of DIR, and the
    /// execution profiles it names against the server's.
    Check {
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// The server's execution profiles file (default: WAVEGATE_PROFILES).
        #[arg(long, value_name = "FILE")]
        profiles: Option<PathBuf>,
        /// The repository as the forge names it (`owner/name`): profiles
        /// the operator keeps for other repositories are refused.
        #[arg(long, value_name = "OWNER/NAME")]
        repository: Option<String>,
        /// The operator's central configuration (default:
        /// WAVEGATE_REPOS_CONFIG): what it imposes on `--repository` is
        /// merged in, as the bot merges it.
        #[arg(long, value_name = "FILE")]
        repos_config: Option<PathBuf>,
        /// Take a member whose `dir` is not in the checkout as a warning,
        /// not an error: a component declared ahead of its code.
        #[arg(long)]
        allow_missing_dirs: bool,
    },
}

fn main() -> ExitCode {
    let command =
        Cli::command().mut_subcommand("serve", |serve| serve.after_long_help(vars::listing()));
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    if !matches!(cli.command, Command::Serve) {
        // A command-line tool whose reader stopped early (`| head`) ends
        // quietly, as other tools do, instead of panicking on the closed
        // pipe. The server keeps Rust's default: a peer that goes away is
        // an error it handles.
        // SAFETY: restoring a signal's default disposition before any
        // other thread exists has no preconditions. (rustix has no safe
        // call for it.)
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let vars = ServerVars::from_env();
    // Logging starts before the other settings are checked, so that their
    // errors are logged as asked.
    match wavegate::config::settings::log_format(&vars.log_format)
        .and_then(|format| Ok((format, log_filter(&vars.log)?)))
    {
        Ok((format, filter)) => init_logging(format, filter),
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
            profiles,
        } => {
            let sandbox = match local_sandbox(no_sandbox, profiles.as_deref(), &vars.sandbox) {
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
        Command::Apply {
            local,
            repo,
            rev,
            stage,
            ledger,
            no_sandbox,
            profiles,
        } => {
            if !local {
                return usage_error("`wavegate apply` deploys only with --local: changes are applied by the bot after merge, behind their gates; `apply --local` creates a new estate's state from a local checkout");
            }
            let sandbox = match local_sandbox(no_sandbox, profiles.as_deref(), &vars.sandbox) {
                Ok(sandbox) => sandbox,
                Err(e) => return usage_error(&e),
            };
            let ledger = ledger.unwrap_or_else(|| {
                let git = repo.join(".git");
                if git.is_dir() { git } else { repo.clone() }.join("wavegate-local-ledger.jsonl")
            });
            let mut options = PlanOptions::new(repo, rev.clone(), rev, sandbox);
            options.stage = stage;
            run_apply_local(&options, &ledger)
        }
        Command::Config {
            command:
                ConfigCommand::Check {
                    repo,
                    profiles,
                    repository,
                    repos_config,
                    allow_missing_dirs,
                },
        } => config_check(
            repo,
            profiles.as_deref(),
            (repository.as_deref(), repos_config),
            allow_missing_dirs,
            &vars,
        ),
        Command::Adapt { tool } => adapt(tool),
        Command::Terraform { command } => terraform(command),
        Command::Ledger { command } => ledger_command(command, &vars),
        Command::Init {
            command:
                InitCommand::Actions {
                    forge,
                    image,
                    server,
                },
        } => {
            let forge = match forge.as_str() {
                "github" => wavegate::model::ForgeKind::GitHub,
                _ => wavegate::model::ForgeKind::Forgejo,
            };
            if !(server.starts_with("https://") || server.starts_with("http://")) {
                return usage_error(&format!(
                    "--server `{server}` is not a URL; give wavegate's WAVEGATE_PUBLIC_URL, e.g. https://wavegate.example.com"
                ));
            }
            let server = server.trim_end_matches('/');
            print!(
                "{}",
                wavegate::dispatch::workflow::render(forge, &image, server)
            );
            eprintln!("{}", wavegate::dispatch::workflow::permissions(forge));
            ExitCode::SUCCESS
        }
        Command::Job {
            command: JobCommand::Run { server, job, tree },
        } => {
            let args = wavegate::dispatch::job_run::JobRunArgs { server, job, tree };
            let env = wavegate::dispatch::job_run::RunnerEnv::from_process();
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
            match runtime.block_on(wavegate::dispatch::job_run::run(&args, &env)) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Runs {
            server,
            repo,
            state,
        } => remote_command(&server, &repo, |api, repo| async move {
            let list = api.pulls(&repo, state.as_deref()).await?;
            let mut waits = Vec::new();
            for row in list
                .pulls
                .iter()
                .filter(|row| row.state.as_deref() == Some("waiting"))
            {
                waits.push((row.number, api.pull(&repo, row.number).await?));
            }
            Ok(remote::runs_table(&repo, &list, &waits))
        }),
        Command::Run {
            command:
                RunCommand::Show {
                    server,
                    repo,
                    number,
                },
        } => remote_command(&server, &repo, |api, repo| async move {
            let pull = api.pull(&repo, number).await?;
            Ok(remote::run_summary(&repo, &pull))
        }),
        Command::ApiToken { command } => api_token_command(command, &vars),
    }
}

fn api_token_command(command: ApiTokenCommand, vars: &ServerVars) -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    let done: anyhow::Result<ExitCode> = runtime.block_on(async {
        match command {
            ApiTokenCommand::Create {
                name,
                repos,
                database,
            } => {
                let name = name.trim();
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Ok(usage_error(
                        "a token's name is one word of letters, digits, `-` and `_`, e.g. `dashboards`",
                    ));
                }
                let repos = match repos
                    .iter()
                    .map(|repo| repo.parse::<wavegate::model::RepoId>())
                    .collect::<Result<Vec<_>, _>>()
                {
                    Ok(repos) => repos,
                    Err(e) => return Ok(usage_error(&format!("--repo: {e}"))),
                };
                let store = open_ledger(database, vars).await?;
                let token = wavegate::web::access::new_api_token();
                let hash = wavegate::web::access::token_hash(&token);
                let scope = (!repos.is_empty()).then_some(repos.as_slice());
                if !store.add_api_token(name, &hash, scope).await? {
                    return Ok(usage_error(&format!(
                        "there is a token named {name} already; revoke it first (`wavegate api-token revoke {name}`) or choose another name"
                    )));
                }
                eprintln!(
                    "made the API token {name}, reading {}; it is shown once, here:",
                    token_reach(scope)
                );
                println!("{token}");
                Ok(ExitCode::SUCCESS)
            }
            ApiTokenCommand::List { database } => {
                let store = open_ledger(database, vars).await?;
                for token in store.api_tokens().await? {
                    println!(
                        "{}\t{}\tmade {}",
                        token.name,
                        token_reach(token.repos.as_deref()),
                        token.created_at
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            ApiTokenCommand::Revoke { name, database } => {
                let store = open_ledger(database, vars).await?;
                if store.revoke_api_token(&name).await? {
                    eprintln!("revoked the API token {name}");
                    Ok(ExitCode::SUCCESS)
                } else {
                    Ok(usage_error(&format!(
                        "there is no API token named {name}; `wavegate api-token list` names them"
                    )))
                }
            }
        }
    });
    done.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::from(2)
    })
}

/// What a token reads, in words.
fn token_reach(repos: Option<&[wavegate::model::RepoId]>) -> String {
    match repos {
        None => "every repository".into(),
        Some(repos) => repos
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Asks `server`'s API about `repo` with `ask` and prints what it answers;
/// a failure is one line on stderr naming the problem and its fix, exit 1.
fn remote_command<F, Fut>(server: &str, repo: &str, ask: F) -> ExitCode
where
    F: FnOnce(std::sync::Arc<remote::Api>, wavegate::model::RepoId) -> Fut,
    Fut: std::future::Future<Output = Result<String, remote::RemoteError>>,
{
    let token = std::env::var(remote::TOKEN_VAR).ok();
    let asked = remote::parse_repo(repo).and_then(|repo| {
        let api = std::sync::Arc::new(remote::Api::new(server, token)?);
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
        runtime.block_on(ask(api, repo))
    });
    match asked {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn ledger_command(command: LedgerCommand, vars: &ServerVars) -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    let done = runtime.block_on(async {
        match command {
            LedgerCommand::Verify { database, key } => {
                let key = match key {
                    Some(given) => match public_key_given(&given) {
                        Ok(key) => Ok((key, "--key".to_owned())),
                        Err(e) => return Ok(usage_error(&e)),
                    },
                    None => server_public_key(vars),
                };
                let store = open_ledger(database, vars).await?;
                verify_ledger(&store, key).await
            }
            LedgerCommand::Key { data_dir, key } => {
                let path = match (key, data_dir) {
                    (Some(file), _) => file,
                    (None, Some(dir)) => ledger_key::in_data_dir(&dir),
                    (None, None) => ledger_key::server_key_path(
                        vars.ledger_key_file.as_deref(),
                        &vars.data_dir,
                    ),
                };
                if !path.exists() {
                    return Ok(usage_error(&format!(
                        "there is no ledger key at {}: the server creates it in its data dir at first start; give the data dir with --data-dir DIR or the key file with --key FILE",
                        path.display()
                    )));
                }
                println!("{}", ledger_key::public_of(&path)?);
                Ok(ExitCode::SUCCESS)
            }
            LedgerCommand::Export { repo, database } => {
                let store = open_ledger(database, vars).await?;
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

async fn open_ledger(database: Option<String>, vars: &ServerVars) -> anyhow::Result<Store> {
    Store::open_existing(database.as_deref().unwrap_or(&vars.database_url)).await
}

/// `--key`: the public key's text, or a file holding it.
fn public_key_given(given: &str) -> Result<ledger::PublicKey, String> {
    if let Ok(key) = given.parse() {
        return Ok(key);
    }
    match std::fs::read_to_string(given) {
        Ok(text) => text
            .parse()
            .map_err(|e| format!("--key: the file {given} does not hold a public key: {e}")),
        Err(_) => given.parse().map_err(|e| format!("--key: {e}")),
    }
}

/// The server's public key, when its key file is readable here, and where
/// it came from; else why signatures cannot be checked.
fn server_public_key(vars: &ServerVars) -> Result<(ledger::PublicKey, String), String> {
    let path = ledger_key::server_key_path(vars.ledger_key_file.as_deref(), &vars.data_dir);
    match ledger_key::public_of(&path) {
        Ok(key) => Ok((key, path.display().to_string())),
        Err(_) if !path.exists() => Err(format!("no ledger key at {}", path.display())),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// One line per repository (with its head, to compare with the one the
/// forge shows); exit 1 when any chain or signature is bad, a chain cannot
/// be read, or the record of when signing began is missing or changed.
async fn verify_ledger(
    store: &Store,
    key: Result<(ledger::PublicKey, String), String>,
) -> anyhow::Result<ExitCode> {
    let mut all_intact = true;
    let start = match &key {
        Ok((key, from)) => {
            println!("checking signatures with {key} (from {from})");
            match store.signing_start(key).await? {
                Some(start) if start.verifies(key) => Some(start),
                Some(_) => {
                    all_intact = false;
                    println!(
                        "the record of when signing with {key} began is not signed by it: it was changed in the database; restore it from a backup"
                    );
                    None
                }
                None => {
                    all_intact = false;
                    println!(
                        "there is no record that this ledger was ever signed with {key}: it is not this ledger's key (`wavegate ledger key` on the server prints it), or the record was removed from the database"
                    );
                    None
                }
            }
        }
        Err(_) => None,
    };
    let check = match (&key, &start) {
        (Ok((key, _)), Some(start)) => Some(ledger::SignatureCheck { key, start }),
        _ => None,
    };
    let repos = store.ledger_repos().await?;
    if repos.is_empty() {
        println!("the ledger holds no facts yet");
    }
    for repo in &repos {
        let facts = match store.repo_facts(repo).await {
            Ok(facts) => facts,
            Err(e) => {
                all_intact = false;
                println!("{repo}: the ledger cannot be read: {e:#}");
                continue;
            }
        };
        match ledger::verify(&facts, check) {
            Ok(verified) => println!("{repo}: {verified}"),
            Err(broken) => {
                all_intact = false;
                println!("{broken}");
                if let Some(fact) = facts.iter().find(|f| f.seq == broken.seq) {
                    println!("  seq {}: {}", fact.seq, describe_fact(fact));
                }
            }
        }
    }
    if let Some(start) = &start {
        for (repo, head) in &start.heads {
            if !repos.contains(repo) {
                all_intact = false;
                println!(
                    "the ledger of {repo} is gone: it reached seq {} when signing started, and has no fact now; restore it from a backup or an export",
                    head.seq
                );
            }
        }
    }
    if let Err(why) = &key {
        println!(
            "signatures not checked: {why}; give the ledger's public key with --key (`wavegate ledger key` on the server prints it)"
        );
    }
    Ok(if all_intact {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What a fact says, to name it: `approved sha256:… by alice (id 7) at …`.
fn describe_fact(fact: &ledger::Fact) -> String {
    let at = chrono::DateTime::from_timestamp_millis(fact.fact.at.millis())
        .map_or_else(|| fact.fact.at.millis().to_string(), |t| t.to_rfc3339());
    format!(
        "{} {} at gate {} by {} (id {}) at {at}",
        fact.fact.kind, fact.fact.digest, fact.fact.gate, fact.fact.actor.login, fact.fact.actor.id
    )
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
            heartbeat: settings.heartbeat,
            ..Default::default()
        };
        let running = wavegate::app::start(&settings, options).await?;
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

/// The server's sandbox settings as this process's environment declares
/// them, with `profiles` standing for `WAVEGATE_PROFILES` when given.
fn sandbox_settings(
    profiles: Option<&std::path::Path>,
    declared: &SandboxVars,
) -> Result<SandboxSettings, String> {
    let mut declared = declared.clone();
    if let Some(p) = profiles {
        declared.profiles = Some(std::path::absolute(p).unwrap_or_else(|_| p.to_owned()));
    }
    SandboxSettings::from_vars(&declared, &|name| std::env::var(name).ok())
        .map_err(|e| format!("{e:#}"))
}

/// The sandbox `wavegate plan` runs commands in: the bot's, with the same
/// `WAVEGATE_SANDBOX*` settings and profiles, unless `--no-sandbox`.
fn local_sandbox(
    no_sandbox: bool,
    profiles: Option<&std::path::Path>,
    declared: &SandboxVars,
) -> Result<std::sync::Arc<Sandbox>, String> {
    if no_sandbox {
        return Ok(std::sync::Arc::new(Sandbox::off()));
    }
    let settings = sandbox_settings(profiles, declared)?;
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
                print!("{}", report::markdown::as_posted(&change));
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

fn run_apply_local(options: &PlanOptions, ledger: &std::path::Path) -> ExitCode {
    eprintln!(
        "WARNING: apply --local deploys every member of this revision with no gate, no approval and no review, and records it only in its own local ledger ({}). It is for creating a new estate's state; changes go through pull requests.",
        ledger.display()
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    match runtime.block_on(wavegate::plan::bootstrap::apply_local(options, ledger)) {
        Ok(done) => {
            use wavegate::plan::bootstrap::Applied;
            for (member, applied) in &done.members {
                match applied {
                    Applied::Applied { plan_digest } => {
                        println!("applied {member} (plan {plan_digest})")
                    }
                    Applied::Failed { error } => println!("failed {member}: {error}"),
                    Applied::NotTried => println!("not tried {member}: something before it failed"),
                }
            }
            let short = &done.commit[..done.commit.len().min(12)];
            if done.succeeded() {
                println!("{short}: every member applied");
                ExitCode::SUCCESS
            } else {
                println!("{short}: stopped at the first member that did not apply; fix it and run again (what applied plans to no change)");
                ExitCode::from(1)
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

fn config_check(
    repo: PathBuf,
    profiles: Option<&std::path::Path>,
    (repository, repos_config): (Option<&str>, Option<PathBuf>),
    allow_missing_dirs: bool,
    vars: &ServerVars,
) -> ExitCode {
    let asked = repos_config.is_some();
    let repos_config = repos_config.or_else(|| vars.repos_config.clone());
    let imposed = match (&repos_config, repository) {
        (None, _) => Default::default(),
        (Some(file), None) if !asked => {
            eprintln!(
                "warning: WAVEGATE_REPOS_CONFIG ({}) is not applied: it applies by repository; name it with --repository owner/name",
                file.display()
            );
            Default::default()
        }
        (Some(file), Some(repository)) => {
            match wavegate::config::operator::OperatorConfig::read(file) {
                Ok(operator) => operator.for_repo(repository),
                Err(e) => return usage_error(&format!("{e:#}")),
            }
        }
        (Some(file), None) => {
            return usage_error(&format!(
                "{} is the operator's configuration, which applies by repository: name it with --repository owner/name",
                file.display()
            ))
        }
    };
    let settings = match sandbox_settings(profiles, &vars.sandbox) {
        Ok(settings) => settings,
        Err(e) => return usage_error(&e),
    };
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
    let checked =
        RepoConfig::parse_with(&path.display().to_string(), &text, &imposed).and_then(|config| {
            config.check_profiles(settings.profiles(), repository)?;
            Ok(config)
        });
    match checked {
        Ok(config) => {
            // `[terraform]`'s root modules are found here as a plan finds them.
            let config = match wavegate::plan::terraform_run::with_roots(&config, &repo) {
                Ok(config) => config,
                Err(e) => {
                    return usage_error(&format!(
                        "{}: `[terraform]` finds no valid root modules here: {e}",
                        path.display()
                    ))
                }
            };
            println!(
                "{}: ok ({} stages, {} components; execution profiles on this server: {})",
                path.display(),
                config.stages.len(),
                config.components.len(),
                settings.profiles().names()
            );
            if let Some(from) = config.from_operator() {
                println!(
                    "from the operator ({}): {}",
                    from.source,
                    from.keys.join(", ")
                );
            }
            match checkout_files(&repo) {
                Ok(files) => {
                    match wavegate::plan::rego::check_in(&config, &repo, &files) {
                            Ok(0) => {}
                            Ok(read) => println!("Rego policies: {read} file(s) compile, each rule declared (the bot reads them from the base branch)"),
                            Err(e) => return usage_error(&format!("{}: `[[policy.rego]]`: {e}", path.display())),
                        }
                    let survey = wavegate::plan::survey::survey(&config, &files);
                    print_survey(&survey, allow_missing_dirs);
                    if !survey.missing_dirs.is_empty() && !allow_missing_dirs {
                        return ExitCode::from(1);
                    }
                }
                Err(e) => eprintln!("warning: could not list the checkout's files, so they were not surveyed: {e:#}"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e.to_string()),
    }
}

/// The files of the checkout at `repo`, relative to it: git's list where it
/// is a git work tree (what a pull request can change), else every file
/// under it but `.git`.
fn checkout_files(repo: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let listed = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output();
    if let Some(out) = listed.ok().filter(|o| o.status.success()) {
        return Ok(out
            .stdout
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect());
    }
    let mut files = Vec::new();
    let mut dirs = vec![repo.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                if entry.file_name() != ".git" {
                    dirs.push(path);
                }
            } else if let Ok(relative) = path.strip_prefix(repo) {
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The members the config expands to, and what in the checkout it leaves
/// out: directories that are not there, files no component claims.
fn print_survey(survey: &wavegate::plan::survey::Survey, allow_missing_dirs: bool) {
    use std::fmt::Write as _;
    let mut text = format!("members ({}), in waves:\n", survey.members.len());
    for m in &survey.members {
        let dir = if m.dir.is_empty() { "no dir" } else { &m.dir };
        let dir = match &m.workspace {
            Some(workspace) => format!("{dir}, workspace {workspace}"),
            None => dir.to_owned(),
        };
        let _ = writeln!(
            text,
            "  {} · wave {}: {} ({dir})",
            m.stage, m.wave, m.member
        );
    }
    for (member, dir) in &survey.missing_dirs {
        let (what, fix) = if allow_missing_dirs {
            ("warning", "")
        } else {
            (
                "error",
                "; a component declared ahead of its code passes with --allow-missing-dirs",
            )
        };
        let _ = writeln!(
            text,
            "{what}: {member}'s dir `{dir}` is not in the checkout: its plans fail until it is (add it, or fix `dir`){fix}"
        );
    }
    if !survey.unclaimed.is_empty() {
        const SHOWN: usize = 20;
        let _ = writeln!(
            text,
            "warning: {} file(s) no component claims and no `ignore` covers: a change to one plans nothing. Claim each with a component's `paths` or `shared` (`[defaults] shared` for every component), or `ignore` it:",
            survey.unclaimed.len()
        );
        for file in survey.unclaimed.iter().take(SHOWN) {
            let _ = writeln!(text, "  {file}");
        }
        if survey.unclaimed.len() > SHOWN {
            let _ = writeln!(text, "  … and {} more", survey.unclaimed.len() - SHOWN);
        }
    }
    // A reader that stopped early (`| head`) is no error of the check's.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

/// Reads `WAVEGATE_LOG`: a filter that does not parse is refused, not
/// quietly replaced by `info` (an operator asking for `debug` would never
/// learn why it does not show).
fn log_filter(text: &str) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    tracing_subscriber::EnvFilter::try_new(text).map_err(|e| {
        anyhow::anyhow!(
            "WAVEGATE_LOG=`{text}` is not a log filter ({e}); write it like `info` or `info,wavegate=debug`"
        )
    })
}

fn init_logging(format: LogFormat, filter: tracing_subscriber::EnvFilter) {
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

fn terraform(command: TerraformCommand) -> ExitCode {
    use wavegate::plan::terraform_run as run;
    let done = match command {
        TerraformCommand::Discover { units_file, root } => run::discover(&units_file, &root),
        TerraformCommand::Plan {
            plan_file,
            inputs_file,
            member,
        } => run::plan(&plan_file, &inputs_file, &member.into()),
        TerraformCommand::Apply {
            plan_file,
            outputs_file,
            member,
        } => run::apply(&plan_file, &outputs_file, &member.into()),
        TerraformCommand::Outputs {
            outputs_file,
            member,
        } => run::outputs(&outputs_file, &member.into()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wavegate terraform: {e}");
            ExitCode::from(1)
        }
    }
}

fn adapt(tool: AdaptTool) -> ExitCode {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        return usage_error(&format!("cannot read standard input: {e}"));
    }
    let adapted = match tool {
        AdaptTool::Terraform => {
            wavegate::plan::terraform::adapt_terraform(&input).map_err(|e| e.to_string())
        }
        AdaptTool::TerraformOutputs { keep_sensitive } => {
            wavegate::plan::terraform::adapt_terraform_outputs(&input, keep_sensitive)
                .map(|flat| {
                    if !flat.left_out.is_empty() {
                        eprintln!(
                            "wavegate: left out sensitive outputs {}: an outputs file cannot mark a value sensitive, and the report shows every input read from it (--keep-sensitive keeps them)",
                            flat.left_out.join(", ")
                        );
                    }
                    serde_json::Value::Object(flat.outputs)
                })
                .map_err(|e| e.to_string())
        }
        AdaptTool::TerraformVars => wavegate::plan::terraform::adapt_terraform_vars(&input)
            .map(|(vars, unknown)| {
                if !unknown.is_empty() {
                    eprintln!(
                        "wavegate: inputs {} are known only after their upstream applies; Terraform cannot plan with an unknown variable, so each keeps its default",
                        unknown.join(", ")
                    );
                }
                serde_json::Value::Object(vars)
            })
            .map_err(|e| e.to_string()),
    };
    match adapted {
        Ok(value) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&value).expect("JSON serialises")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
