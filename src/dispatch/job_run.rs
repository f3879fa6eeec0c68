//! `wavegate job run`: the step of the forge's workflow that runs one job
//! the bot dispatched. It proves it is the run the bot dispatched (the
//! run's OIDC token on GitHub, the single-use token of its inputs on
//! Forgejo with a proof made with the repository's run key), claims the job, checks the checkout is the job's commit, runs
//! the command in its own sandbox with the runner's environment (its
//! output, line by line, is the run's log, and streams back to the bot's
//! live console), and hands back what it left.

use super::output::Streamer;
use super::run_key::{RunKey, PROOF_HEADER, SECRET_NAME};
use super::{Claimed, HandedBack};
use crate::plan::executor::{remote_layout, Control, LocalExecutor, LocalTree};
use crate::plan::runner::{Cancel, LineTap};
use crate::sandbox::profile::Profiles;
use crate::sandbox::{Sandbox, SandboxSettings};
use anyhow::{bail, Context as _, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What `wavegate job run` is told.
#[derive(Debug, Clone)]
pub struct JobRunArgs {
    /// The bot's URL (the run's `wavegate` input).
    pub server: String,
    /// The job's id (the run's `job` input).
    pub job: String,
    /// The checkout of the job's commit.
    pub tree: PathBuf,
}

/// The runner's environment as the job run reads it.
pub struct RunnerEnv {
    /// Forgejo: the run's single-use token (`WAVEGATE_JOB_TOKEN`).
    pub job_token: Option<String>,
    /// Forgejo: the repository's run key, from its Actions secret
    /// (`WAVEGATE_RUN_KEY`), which the claim's proof is made with.
    pub run_key: Option<String>,
    /// GitHub: where the run's OIDC tokens are asked for, and with what.
    pub oidc_request: Option<(String, String)>,
    /// The runner's own paths a job sees, as the runner's operator lists
    /// them (`WAVEGATE_SANDBOX_READ`, `WAVEGATE_SANDBOX_APPLY_WRITE`, as on
    /// the bot): read-only, and the state applies write.
    pub read: Vec<PathBuf>,
    pub state: Vec<PathBuf>,
}

impl RunnerEnv {
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            job_token: var("WAVEGATE_JOB_TOKEN"),
            run_key: var(SECRET_NAME),
            oidc_request: var("ACTIONS_ID_TOKEN_REQUEST_URL")
                .zip(var("ACTIONS_ID_TOKEN_REQUEST_TOKEN")),
            read: paths(var("WAVEGATE_SANDBOX_READ")),
            state: paths(var("WAVEGATE_SANDBOX_APPLY_WRITE")),
        }
    }
}

fn paths(list: Option<String>) -> Vec<PathBuf> {
    list.unwrap_or_default()
        .split(':')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Variables of the runner's own that no command gets: what would let it
/// act as the run (claim or hand back a job, mint tokens, call the forge
/// as the workflow).
const RUNNER_SECRETS: &[&str] = &[
    "WAVEGATE_JOB_TOKEN",
    SECRET_NAME,
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "GITHUB_TOKEN",
    "GITEA_TOKEN",
    "FORGEJO_TOKEN",
];

/// Runs the job; true when its command succeeded.
pub async fn run(args: &JobRunArgs, env: &RunnerEnv) -> Result<bool> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .context("cannot make an HTTP client")?;
    let server = args.server.trim_end_matches('/');
    let (proof, run_proof) = match (&env.oidc_request, &env.job_token) {
        (Some(request), _) => (oidc_token(&http, request, server).await?, None),
        (None, Some(token)) => {
            let key = env.run_key.as_deref().and_then(RunKey::from_hex).with_context(|| {
                format!("this run has no run key to prove its claim with, or not the 64 hex digits wavegate set: pass the repository's Actions secret to the step as `{SECRET_NAME}: ${{{{ secrets.{SECRET_NAME} }}}}` (`wavegate init actions --forge forgejo` prints the workflow); wavegate sets the secret before it dispatches")
            })?;
            let run_proof = key.proof(&args.job, token);
            (token.clone(), Some(run_proof))
        }
        (None, None) => bail!(
            "this run has no way to prove it is the one wavegate dispatched: on GitHub give the job `permissions: id-token: write`; on Forgejo pass the `token` input as WAVEGATE_JOB_TOKEN (`wavegate init actions` prints the workflow)"
        ),
    };
    let claimed: Claimed = {
        let url = format!("{server}/api/jobs/{}/claim", args.job);
        let mut tries = 0;
        let response = loop {
            let mut request = http.post(&url).bearer_auth(&proof);
            if let Some(run_proof) = &run_proof {
                request = request.header(PROOF_HEADER, run_proof);
            }
            let response = request
                .send()
                .await
                .with_context(|| format!("cannot reach wavegate at {url}"))?;
            // Too early: the bot has not recorded the run yet; unavailable:
            // its database or the issuer's keys did not answer.
            let again = matches!(
                response.status(),
                reqwest::StatusCode::TOO_EARLY | reqwest::StatusCode::SERVICE_UNAVAILABLE
            );
            tries += 1;
            if !again || tries >= 30 {
                break response;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            bail!(
                "wavegate refused to hand over job {} ({status}): {}",
                args.job,
                text.trim()
            );
        }
        response
            .json()
            .await
            .context("wavegate's answer to the claim is not a job this version reads; run the same version as the bot")?
    };
    let streamer = Streamer::start(
        http.clone(),
        format!("{server}/api/jobs/{}/output", args.job),
        claimed.session.clone(),
    );
    let ran = run_claimed(&claimed, args, env, &http, streamer.tap()).await;
    streamer.finish().await;
    let handed_back = match ran {
        Ok(finished) => HandedBack::Finished(finished),
        Err(e) => {
            eprintln!("wavegate job run: {e:#}");
            HandedBack::Failed(format!("{e:#}"))
        }
    };
    let succeeded = matches!(&handed_back, HandedBack::Finished(f) if f.outcome.succeeded());
    let url = format!("{server}/api/jobs/{}/finished", args.job);
    let body = serde_json::to_vec(&handed_back).context("what the job left cannot be written")?;
    // A blip or a bot restarting must not lose an apply's result: ask again.
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = http
            .post(&url)
            .bearer_auth(&claimed.session)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .timeout(Duration::from_secs(600))
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => break,
            // An earlier try got through, its answer lost on the way.
            Ok(response) if response.status() == reqwest::StatusCode::CONFLICT && tries > 1 => {
                break
            }
            Ok(response) if response.status().is_server_error() && tries < 10 => {}
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                bail!(
                    "wavegate refused what job {} handed back ({status}): {}",
                    args.job,
                    text.trim()
                );
            }
            Err(e) if tries < 10 => {
                eprintln!("wavegate job run: cannot hand the job back yet ({e}); trying again")
            }
            Err(e) => return Err(e).with_context(|| format!("cannot hand the job back to {url}")),
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    Ok(succeeded)
}

/// Runs the claimed job in this runner's sandbox, in the checkout; each
/// line its command prints goes to `tap` too.
async fn run_claimed(
    claimed: &Claimed,
    args: &JobRunArgs,
    env: &RunnerEnv,
    http: &reqwest::Client,
    tap: LineTap,
) -> Result<crate::plan::executor::Finished> {
    let dispatched = &claimed.job;
    let tree = std::path::absolute(&args.tree)
        .with_context(|| format!("cannot read the checkout at {}", args.tree.display()))?;
    let head = checkout_head(&tree)?;
    if head != dispatched.job.commit {
        bail!(
            "the checkout at {} is commit {head}, not the job's {}; check out the `sha` input (`actions/checkout` with `ref: ${{{{ inputs.sha }}}}`)",
            tree.display(),
            dispatched.job.commit
        );
    }
    let mut job = dispatched.job.clone();
    let mut secrets = Vec::new();
    for (variable, audience) in &dispatched.profile.id_tokens {
        let request = env.oidc_request.as_ref().with_context(|| {
            format!("the job asks for an OIDC token for {audience} in {variable}, and this run cannot mint one; give the workflow's job `permissions: id-token: write`")
        })?;
        let token = oidc_token(http, request, audience).await?;
        secrets.push(token.clone());
        job.env.push((variable.clone(), token));
    }
    for name in RUNNER_SECRETS {
        job.pass_env.retain(|n| n != name);
    }
    let mut profile = dispatched
        .profile
        .profile(secrets)
        .map_err(anyhow::Error::msg)?;
    profile.read = env.read.clone();
    profile.state = env.state.clone();
    for (what, path) in profile.paths() {
        if !path.is_absolute() || !path.exists() {
            bail!(
                "the runner's {} path `{}` is not an absolute path that exists here; correct WAVEGATE_SANDBOX_{} in the workflow's environment",
                what,
                path.display(),
                if what == "read" { "READ" } else { "APPLY_WRITE" }
            );
        }
    }
    let settings = SandboxSettings {
        mode: runner_sandbox_mode()?,
        profiles: Profiles::only_named(profile),
        tree_cache: None,
        ..SandboxSettings::default()
    };
    let sandbox = Sandbox::probe(settings).await;
    if let Some(problem) = sandbox.problem() {
        bail!("the job runs in the sandbox, and on this runner {problem}");
    }
    let scratch = tempfile::Builder::new()
        .prefix("wavegate-job-")
        .tempdir()
        .context("cannot make the job's directory")?;
    // Setup and command end by the time the bot counts the job as over.
    let (canceller, cancel) = Cancel::new();
    let has = Duration::from_millis(claimed.ends_within_ms);
    let out_of_time = tokio::spawn(async move {
        tokio::time::sleep(has).await;
        canceller.cancel();
    });
    let executor = LocalExecutor::new(
        Arc::new(sandbox),
        LocalTree {
            commit: job.commit.clone(),
            tree,
            lower: None,
            dir: scratch.path().join("executor"),
        },
        None,
        cancel,
        None,
    );
    let job = job.relocated(&remote_layout(), &executor.layout(&job.name));
    let control = Control {
        tap: Some(tap),
        ..Control::default()
    };
    let finished = executor.run(&job, control).await;
    if out_of_time.is_finished() {
        bail!(
            "the job had {} from its claim, its profile's setup included, and was stopped there: past it the bot counts its command as over; keep long installs in the runner's image",
            crate::model::time::humanize(has)
        );
    }
    out_of_time.abort();
    finished.map_err(|e| anyhow::anyhow!("{e}"))
}

/// `WAVEGATE_SANDBOX` on the runner: `bwrap` (the default), or `none` on
/// a runner that cannot make user namespaces and is itself thrown away
/// after the job (a hosted runner's VM).
fn runner_sandbox_mode() -> Result<crate::sandbox::Mode> {
    match std::env::var("WAVEGATE_SANDBOX").as_deref() {
        Err(_) | Ok("" | "bwrap") => Ok(crate::sandbox::Mode::Bwrap),
        Ok("none") => Ok(crate::sandbox::Mode::None),
        Ok(other) => bail!(
            "WAVEGATE_SANDBOX=`{other}` is not a sandbox; use `bwrap` (the default) or `none`"
        ),
    }
}

/// The commit checked out at `tree`.
fn checkout_head(tree: &std::path::Path) -> Result<String> {
    let output = crate::git::command::git(tree, None)
        .args(["rev-parse", "HEAD"])
        .output()
        .with_context(|| format!("cannot run git in {}", tree.display()))?;
    if !output.status.success() {
        bail!(
            "{} is not a checkout of the job's commit ({}); check out the `sha` input first",
            tree.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The run's OIDC token for `audience` (GitHub Actions).
async fn oidc_token(
    http: &reqwest::Client,
    (url, bearer): &(String, String),
    audience: &str,
) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Token {
        value: String,
    }
    let response = http
        .get(url)
        .query(&[("audience", audience)])
        .bearer_auth(bearer)
        .send()
        .await
        .context("cannot ask the run for its OIDC token")?;
    let status = response.status();
    if !status.is_success() {
        bail!("the run's OIDC token for {audience} was refused ({status})");
    }
    Ok(response
        .json::<Token>()
        .await
        .context("the run's OIDC token answer has no `value`")?
        .value)
}
