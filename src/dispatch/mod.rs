//! Jobs the bot hands to the forge's CI (profiles with `executor =
//! "actions"`), and who may claim and hand them back. The bot records each
//! job, dispatches the base branch's workflow for it ([`actions`]), and
//! waits; the run's `wavegate job run` ([`job_run`]) claims the job (proving
//! it is the run the bot dispatched: its OIDC token on GitHub, a single-use
//! token on Forgejo with a proof made with the repository's [`run_key`]),
//! runs it in its own sandbox and hands back what a
//! local command would have: the same [`Finished`], validated and digested
//! above the executor as any other. While it runs, its output streams back
//! into the live console ([`output`]). [`oidc`] tells a GitHub Actions run by
//! its OIDC token: signed by the issuer's key, for this bot's audience, and
//! of the repository, environment, run, commit and base-branch workflow the
//! bot dispatched. What a bot stopped while it waited leaves in the store
//! is dropped once the job is over for sure ([`forget_jobs_over`]).

pub(crate) mod actions;
pub mod job_run;
pub mod oidc;
pub(crate) mod output;
pub mod run_key;
pub mod workflow;

use crate::model::ForgeKind;
use crate::plan::executor::{Finished, Job};
use crate::sandbox::profile::{Limits, Profile};
use crate::sandbox::Network;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often the store is swept for jobs over for sure.
const SWEEP_EVERY: Duration = Duration::from_secs(600);
/// How long past the time its run stopped it a job is left alone: the bot
/// that waits for it has cancelled the run and heard it ended by then.
const OVER_FOR_SURE: Duration = Duration::from_secs(3600);

/// Every [`SWEEP_EVERY`] until `shutdown`, gives up on the jobs over for
/// sure that a bot stopped while it waited left behind, and drops what
/// they carried, handed back or streamed (a plan file may hold secrets).
pub(crate) async fn forget_jobs_over(
    store: crate::store::Store,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        match store
            .forget_dispatched_jobs_over(store.now() - OVER_FOR_SURE)
            .await
        {
            Ok(0) => {}
            Ok(forgotten) => tracing::info!(
                target: "wavegate::dispatch",
                forgotten,
                "gave up on jobs on the CI whose bot stopped while it waited, and dropped what they held"
            ),
            Err(error) => tracing::warn!(target: "wavegate::dispatch", "{error:#}"),
        }
        tokio::select! {
            () = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
    }
}

/// What a run gets when it claims its job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DispatchedJob {
    pub(crate) forge: ForgeKind,
    /// `owner/name`.
    pub(crate) repository: String,
    pub(crate) job: Job,
    pub(crate) profile: RunnerProfile,
    /// The workflow run is of this file at this branch (`refs/heads/…`):
    /// a run of any other is not the one dispatched.
    pub(crate) workflow: String,
    pub(crate) workflow_ref: String,
    /// The forge's environment the run must be in.
    pub(crate) environment: Option<String>,
}

/// What of a profile a runner applies: literal variables (never a secret:
/// those are the runner's own), the network, the limits, the timeout cap,
/// the setup, and the OIDC tokens to put in variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RunnerProfile {
    pub(crate) name: String,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) network: String,
    pub(crate) limits: Limits,
    pub(crate) max_timeout_secs: u64,
    pub(crate) setup: Vec<Vec<String>>,
    /// Variable name → audience.
    pub(crate) id_tokens: BTreeMap<String, String>,
}

impl RunnerProfile {
    pub(crate) fn of(profile: &Profile) -> Self {
        let id_tokens = match &profile.executor {
            crate::sandbox::profile::Executor::Actions(actions) => actions.id_tokens.clone(),
            crate::sandbox::profile::Executor::Local => BTreeMap::new(),
        };
        Self {
            name: profile.name.clone(),
            env: profile.env.clone(),
            network: profile.network.as_str().to_owned(),
            limits: profile.limits,
            max_timeout_secs: profile.max_timeout.as_secs(),
            setup: profile.setup.clone(),
            id_tokens,
        }
    }

    /// The profile the runner's sandbox runs the job with; `secrets` (the
    /// run's OIDC tokens) are redacted from what the command prints.
    pub(crate) fn profile(&self, secrets: Vec<String>) -> Result<Profile, String> {
        let network = match self.network.as_str() {
            "none" => Network::None,
            "egress" => Network::Egress,
            "host" => Network::Host,
            other => return Err(format!("the job's network `{other}` is unknown to this wavegate; run the same version as the bot")),
        };
        let mut profile = Profile::from_sandbox_settings(Vec::new(), Vec::new(), network);
        profile.name = self.name.clone();
        profile.env = self.env.clone();
        profile.secrets = secrets;
        profile.limits = self.limits;
        profile.max_timeout = Duration::from_secs(self.max_timeout_secs);
        profile.setup = self.setup.clone();
        profile.from_settings = false;
        Ok(profile)
    }
}

/// The answer to a claim.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Claimed {
    pub(crate) job: DispatchedJob,
    /// Hands the job back; good for this job only, once.
    pub(crate) session: String,
    /// From the claim, how long the job has, its setup included: the bot
    /// counts its command as over by then (an apply's attempt deadline),
    /// so the runner stops it there.
    pub(crate) ends_within_ms: u64,
}

/// What a run hands back: how the job ended, or why it could not run.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) enum HandedBack {
    Finished(Finished),
    /// It never started (its setup, its sandbox, the checkout).
    Failed(String),
}

/// What a hand-back may weigh: the files a job carries, base64-encoded,
/// and its output, JSON-escaped (a control byte becomes six).
pub(crate) const HAND_BACK_LIMIT: usize =
    (crate::plan::executor::MAX_CARRIED_BYTES as usize) / 3 * 4 + (16 << 20);

/// `bytes` random bytes as hex, from the kernel: a job's id, a token.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the kernel gives random bytes");
    hex::encode(buffer)
}

/// How a token is kept: its SHA-256, in hex.
pub(crate) fn token_hash(token: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// The inputs every dispatched workflow run gets (`wavegate init actions`
/// declares them).
pub(crate) mod inputs {
    /// The job's id.
    pub(crate) const JOB: &str = "job";
    /// The run's time limit, in minutes: the job's timeout and room for
    /// the checkout and the profile's setup.
    pub(crate) const TIMEOUT: &str = "timeout";
    /// The commit to check out.
    pub(crate) const SHA: &str = "sha";
    /// The runner labels, as a JSON list (`runs-on: ${{ fromJSON(inputs.runner) }}`).
    pub(crate) const RUNNER: &str = "runner";
    /// The forge's environment, or empty.
    pub(crate) const ENVIRONMENT: &str = "environment";
    /// Forgejo: the single-use token that claims the job.
    pub(crate) const TOKEN: &str = "token";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_profile_carries_no_secret_and_reads_back_as_the_profile_it_was() {
        let mut profile = Profile::from_sandbox_settings(Vec::new(), Vec::new(), Network::Egress);
        profile.name = "prod".into();
        profile.env = vec![("AWS_REGION".into(), "eu-west-1".into())];
        profile.setup = vec![vec!["tfenv".into(), "use".into()]];
        profile.max_timeout = Duration::from_secs(1800);
        profile.from_settings = false;
        let runner = RunnerProfile::of(&profile);
        let json = serde_json::to_string(&runner).unwrap();
        let back: RunnerProfile = serde_json::from_str(&json).unwrap();
        assert_eq!(back.profile(Vec::new()).unwrap(), profile);
        assert!(back
            .profile(Vec::new())
            .map(|p| p.secrets.is_empty())
            .unwrap());
    }

    #[test]
    fn a_token_is_kept_by_a_hash_that_does_not_show_it() {
        let token = random_hex(32);
        assert_eq!(token.len(), 64);
        assert_ne!(random_hex(32), token);
        let hash = token_hash(&token);
        assert_eq!(hash, token_hash(&token));
        assert!(!hash.contains(&token));
    }
}
