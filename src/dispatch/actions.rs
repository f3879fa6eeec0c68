//! The bot's side of a job on the forge's CI: record it, dispatch the base
//! branch's workflow for it, and wait (through the store, so the replica
//! that took the hand-back need not be this one) until its run hands it
//! back, its run ends without doing so, no runner takes it in time, or the
//! job is cancelled. Whatever stops the wait gives the job up in the store,
//! so a late hand-back is refused, and cancels the run. Meanwhile the job
//! is a command of the live console, showing what its run streams back. A
//! run that ended without handing its job back is asked why: its failed
//! job and step, and the last lines of that job's log, shown as a
//! command's last output is.

use super::output::Shown;
use super::run_key::{RunKeys, SECRET_NAME};
use super::{inputs, random_hex, token_hash, DispatchedJob, HandedBack, RunnerProfile};
use crate::forge::actions::{RunJob, RunStatus, WorkflowDispatch, WorkflowRunState};
use crate::forge::client::ForgeClient;
use crate::forge::RepoRef;
use crate::model::ForgeKind;
use crate::plan::executor::{Finished, Job, RemoteExecutor};
use crate::plan::live::Console;
use crate::plan::runner::{with_last_output, Cancel, SpawnError};
use crate::sandbox::profile::{ActionsProfile, Executor, Profile};
use crate::store::{DispatchAuth, DispatchState, Store};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the store is read for what came back.
const POLL: Duration = Duration::from_millis(500);
/// How often the forge is asked whether the run still goes on.
const RUN_CHECK: Duration = Duration::from_secs(10);
/// The minutes a run gets beyond its job's timeout (checkout, setup, hand-back).
const RUN_SLACK_MINUTES: u64 = 15;
/// How long past the job's own timeout its run may take to hand it back.
const HAND_BACK_GRACE: Duration = Duration::from_secs(120);
/// How much of the end of a failed job's log is read.
const LOG_TAIL_BYTES: usize = 4 * 1024;
/// How many of its last lines a failure shows.
const LOG_TAIL_LINES: usize = 20;

/// Runs jobs of one repository on its forge's CI.
pub(crate) struct ActionsExecutor {
    pub(crate) store: Store,
    pub(crate) client: ForgeClient,
    pub(crate) repo: RepoRef,
    /// Whether runs can reach the bot (`WAVEGATE_PUBLIC_URL` is set, and
    /// the workflow names it): else no job is dispatched.
    pub(crate) reachable: bool,
    /// Forgejo: the repositories' run keys, set as their Actions secret
    /// before the first dispatch there; without them no job is dispatched.
    pub(crate) run_keys: Option<Arc<RunKeys>>,
}

impl RemoteExecutor for ActionsExecutor {
    fn run<'a>(
        &'a self,
        job: Job,
        profile: Arc<Profile>,
        cancel: Cancel,
        console: Option<Console>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Finished, SpawnError>> + Send + 'a>,
    > {
        Box::pin(self.run_job(job, profile, cancel, console))
    }
}

/// Why a dispatched job did not come back.
fn failed(why: String) -> SpawnError {
    SpawnError::Elsewhere { why, run: None }
}

impl ActionsExecutor {
    async fn run_job(
        &self,
        job: Job,
        profile: Arc<Profile>,
        cancel: Cancel,
        console: Option<Console>,
    ) -> Result<Finished, SpawnError> {
        let Executor::Actions(actions) = &profile.executor else {
            return Err(failed(format!(
                "execution profile `{}` does not run on the forge's CI",
                profile.name
            )));
        };
        if !self.reachable {
            return Err(SpawnError::Profile(format!(
                "execution profile `{}` runs its commands on the forge's CI, whose runs reach the bot at WAVEGATE_PUBLIC_URL, which is not set; ask the operator to set it",
                profile.name
            )));
        }
        let forge = self.repo.id.forge;
        if forge == ForgeKind::Forgejo && !actions.id_tokens.is_empty() {
            return Err(SpawnError::Profile(format!(
                "execution profile `{}` asks for OIDC tokens (`id_tokens`), which Forgejo Actions does not give; give the runner its credentials through the environment's secrets instead",
                profile.name
            )));
        }
        let branch = self.client.default_branch(&self.repo).await.map_err(|e| {
            failed(format!(
                "cannot read the repository's default branch, whose workflow runs the job: {e:#}"
            ))
        })?;
        if forge == ForgeKind::Forgejo {
            self.set_run_key().await?;
        }
        let id = random_hex(16);
        let label = job.label.clone();
        let timeout = job.timeout;
        let commit = job.commit.clone();
        let dispatched = DispatchedJob {
            forge,
            repository: self.repo.id.full_name.clone(),
            job,
            profile: RunnerProfile::of(&profile),
            workflow: actions.workflow.clone(),
            workflow_ref: format!("refs/heads/{branch}"),
            environment: actions.environment.clone(),
        };
        let (auth, token) = match forge {
            ForgeKind::GitHub => (DispatchAuth::Oidc, None),
            ForgeKind::Forgejo => (DispatchAuth::Token, Some(random_hex(32))),
        };
        let json = serde_json::to_string(&dispatched).expect("a job serialises");
        self.store
            .add_dispatched_job(
                &id,
                &self.repo.id,
                &json,
                (auth, token.as_deref().map(token_hash).as_deref()),
                (actions.queue_timeout, timeout),
            )
            .await
            .map_err(|e| {
                failed(format!(
                    "cannot record the job before dispatching it: {e:#}"
                ))
            })?;
        let mut run_inputs = BTreeMap::from([
            (inputs::JOB.to_owned(), id.clone()),
            (
                inputs::TIMEOUT.to_owned(),
                (timeout.as_secs().div_ceil(60) + RUN_SLACK_MINUTES).to_string(),
            ),
            (inputs::SHA.to_owned(), commit),
            (
                inputs::RUNNER.to_owned(),
                serde_json::to_string(&actions.runner).expect("labels serialise"),
            ),
            (
                inputs::ENVIRONMENT.to_owned(),
                actions.environment.clone().unwrap_or_default(),
            ),
        ]);
        if let Some(token) = token {
            run_inputs.insert(inputs::TOKEN.to_owned(), token);
        }
        let dispatch = WorkflowDispatch {
            workflow: actions.workflow_file().to_owned(),
            git_ref: branch.clone(),
            inputs: run_inputs,
        };
        let run = match self.client.dispatch_workflow(&self.repo, &dispatch).await {
            Ok(run) => run,
            Err(e) => {
                let _ = self.store.abandon_dispatched_job(&id).await;
                return Err(failed(format!(
                    "cannot dispatch workflow {} on {branch}: {e:#}",
                    actions.workflow
                )));
            }
        };
        let url = run
            .html_url
            .clone()
            .unwrap_or_else(|| format!("run {}", run.id));
        if let Err(e) = self
            .store
            .set_dispatched_run(&id, run.id, run.html_url.as_deref())
            .await
        {
            tracing::warn!(target: "wavegate::dispatch", "{label}: cannot record run {url}: {e:#}");
        }
        tracing::info!(target: "wavegate::dispatch", "{label}: dispatched to {url} (job {id})");
        let mut shown = console
            .as_ref()
            .map(|console| Shown::start(console, &dispatched.job, &url));
        // A run's OIDC token names its commit: the claim waits until the
        // forge has said which commit the dispatched run is at.
        let mut run_sha_known = auth != DispatchAuth::Oidc;
        if !run_sha_known {
            if let Ok(state) = self.client.workflow_run(&self.repo, run.id).await {
                run_sha_known = self.record_run_sha(&id, &state).await;
            }
        }
        let waited = self
            .wait(
                &id,
                (run.id, &url),
                (actions, timeout),
                (run_sha_known, cancel),
                &mut shown,
            )
            .await;
        let ran_on = |finished: Finished| Finished {
            ran_on: run.html_url.clone(),
            ..finished
        };
        let result = match waited {
            Ok(finished) => Ok(ran_on(finished)),
            Err(why) => {
                let late = if self.store.abandon_dispatched_job(&id).await.ok()
                    == Some(DispatchState::Finished)
                {
                    // The hand-back came as the wait gave up: take it.
                    self.handed_back(&id, &url).await.ok().flatten()
                } else {
                    None
                };
                match late {
                    Some(finished) => finished.map(ran_on),
                    None => {
                        if let Err(e) = self.client.cancel_workflow_run(&self.repo, run.id).await {
                            tracing::warn!(target: "wavegate::dispatch", "{label}: cannot cancel {url}: {e:#}");
                        }
                        Err(failed(why))
                    }
                }
            }
        };
        if let Some(mut shown) = shown {
            shown.catch_up(&self.store, &id).await;
            shown.end(&result);
        }
        // What the job carried (a plan file), streamed and handed back is
        // the engine's now; the record keeps only where it stood.
        if let Err(e) = self.store.forget_dispatched_payloads(&id).await {
            tracing::warn!(target: "wavegate::dispatch", "{label}: {e:#}");
        }
        result.map_err(|e| match e {
            SpawnError::Elsewhere { why, run: None } => SpawnError::Elsewhere {
                why,
                run: run.html_url.clone(),
            },
            other => other,
        })
    }

    /// Makes sure the repository's Actions secret [`SECRET_NAME`] holds
    /// its run key (set at the first dispatch there and hourly after, in
    /// case it was deleted): a Forgejo run proves its claim with it.
    async fn set_run_key(&self) -> Result<(), SpawnError> {
        let Some(keys) = &self.run_keys else {
            return Err(failed(
                "this wavegate has no run keys to prove Forgejo runs with; it dispatches no job there".into(),
            ));
        };
        let repo = &self.repo.id;
        if keys.is_set(repo) {
            return Ok(());
        }
        self.client
            .set_actions_secret(&self.repo, SECRET_NAME, &keys.of(repo).to_hex())
            .await
            .map_err(|e| {
                failed(format!(
                    "cannot set the repository's Actions secret {SECRET_NAME}, whose key the job's run proves itself with, so nothing was dispatched: {e:#}"
                ))
            })?;
        keys.mark_set(repo);
        tracing::info!(target: "wavegate::dispatch", "{repo}: set the Actions secret {SECRET_NAME} to the repository's run key");
        Ok(())
    }

    /// Waits for job `id` to be handed back by `run`. A job no run
    /// claimed in time is given up on; one a run claimed is waited for
    /// until the forge says its run ended (cancelled, once past its
    /// timeout): while it runs, it may still apply, and what it streams
    /// back is `shown`.
    async fn wait(
        &self,
        id: &str,
        (run, url): (u64, &str),
        (actions, timeout): (&ActionsProfile, Duration),
        (mut run_sha_known, mut cancel): (bool, Cancel),
        shown: &mut Option<Shown>,
    ) -> Result<Finished, String> {
        let mut last_run_check = tokio::time::Instant::now();
        let mut overdue: Option<String> = None;
        loop {
            let progress = self
                .store
                .progress_of(id)
                .await
                .map_err(|e| format!("cannot read the dispatched job: {e:#}"))?
                .ok_or_else(|| "the dispatched job is no longer recorded".to_owned())?;
            if let Some(shown) = shown {
                shown.follow(&self.store, id, progress.state).await;
            }
            let now = self.store.now();
            match progress.state {
                DispatchState::Finished => {
                    if let Some(finished) = self.handed_back(id, url).await? {
                        return finished.map_err(|e| e.to_string());
                    }
                }
                DispatchState::Dispatched if now >= progress.claim_by => {
                    match self
                        .store
                        .abandon_unclaimed_dispatched_job(id)
                        .await
                        .map_err(|e| format!("cannot give up on the dispatched job: {e:#}"))?
                    {
                        DispatchState::Abandoned => {
                            let status = self.client.workflow_run(&self.repo, run).await.ok();
                            let why = match status.map(|s| s.status) {
                                Some(RunStatus::InProgress) => "its run started but did not take the job (its checkout or image pull took too long?)".to_owned(),
                                _ => format!(
                                    "no runner with the labels {} took it, or the run waits for the environment's reviewers",
                                    actions.runner.join(", ")
                                ),
                            };
                            return Err(format!(
                                "{url} did not take the job within {}: {why}; ask the operator for a runner with those labels, approve the deployment, or raise `queue_timeout` in the execution profile",
                                crate::model::time::humanize(actions.queue_timeout)
                            ));
                        }
                        // A run claimed it just now: wait for it.
                        _ => continue,
                    }
                }
                DispatchState::Claimed
                    if overdue.is_none()
                        && progress
                            .claimed_at
                            .is_some_and(|at| now >= at + timeout + HAND_BACK_GRACE) =>
                {
                    overdue = Some(format!(
                        "{url} took the job but did not hand it back within its timeout of {}",
                        crate::model::time::humanize(timeout)
                    ));
                    if let Err(e) = self.client.cancel_workflow_run(&self.repo, run).await {
                        tracing::warn!(target: "wavegate::dispatch", "cannot cancel {url}: {e:#}");
                    }
                    last_run_check = tokio::time::Instant::now() - RUN_CHECK;
                }
                DispatchState::Abandoned => {
                    return Err(format!("the job was given up on; see {url}"));
                }
                _ => {}
            }
            if last_run_check.elapsed() >= RUN_CHECK {
                last_run_check = tokio::time::Instant::now();
                match self.client.workflow_run(&self.repo, run).await {
                    Ok(state) => {
                        if !run_sha_known {
                            run_sha_known = self.record_run_sha(id, &state).await;
                        }
                        if let RunStatus::Completed { conclusion } = state.status {
                            // It may have handed the job back just before.
                            if let Some(finished) = self.handed_back(id, url).await? {
                                return finished.map_err(|e| e.to_string());
                            }
                            let ended = overdue.unwrap_or_else(|| {
                                format!("{url} ended ({conclusion}) without handing the job back")
                            });
                            return Err(self.why_run_ended(run, ended).await);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "wavegate::dispatch", "cannot read {url}: {e:#}")
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = cancel.cancelled() => return Err(format!("the job was stopped; {url} is cancelled")),
            }
        }
    }

    /// Records the commit `state`'s run is at, for the claim to compare
    /// with its token's; answers whether it is recorded.
    async fn record_run_sha(&self, id: &str, state: &WorkflowRunState) -> bool {
        let Some(sha) = &state.head_sha else {
            return false;
        };
        match self.store.set_dispatched_run_sha(id, sha).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(target: "wavegate::dispatch", "job {id}: {e:#}");
                false
            }
        }
    }

    /// `ended` (how run `run` ended without handing its job back), and
    /// why as the forge tells: the job that failed (or the last), the step
    /// it failed at and the last lines of its log. What cannot be read is
    /// logged, and the run's log named instead.
    async fn why_run_ended(&self, run: u64, ended: String) -> String {
        let jobs = match self.client.workflow_run_jobs(&self.repo, run).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(target: "wavegate::dispatch", "cannot read the jobs of run {run}: {e:#}");
                return format!("{ended}; its log says why");
            }
        };
        let Some(job) = jobs.iter().find(|job| job.failed()).or(jobs.last()) else {
            return format!("{ended}; its log says why");
        };
        let ended = format!("{ended}: {}", job_failure(job));
        match self
            .client
            .job_log_tail(&self.repo, job.id, LOG_TAIL_BYTES)
            .await
        {
            Ok(log) => with_last_output(ended, &last_log_lines(&log, LOG_TAIL_LINES)),
            Err(e) => {
                tracing::warn!(target: "wavegate::dispatch", "cannot read the log of job {} of run {run}: {e:#}", job.id);
                format!("{ended}; its log says why")
            }
        }
    }

    /// What job `id`'s run handed back, once it did.
    async fn handed_back(
        &self,
        id: &str,
        url: &str,
    ) -> Result<Option<Result<Finished, SpawnError>>, String> {
        let record = self
            .store
            .dispatched_job(id)
            .await
            .map_err(|e| format!("cannot read the dispatched job: {e:#}"))?;
        let Some(text) = record.and_then(|r| r.finished) else {
            return Ok(None);
        };
        Ok(Some(match serde_json::from_str::<HandedBack>(&text) {
            Ok(HandedBack::Finished(finished)) => Ok(finished),
            Ok(HandedBack::Failed(why)) => Err(failed(format!("{url}: {why}"))),
            Err(e) => Err(failed(format!(
                "{url} handed back something this wavegate cannot read ({e}); run the same version on the runner as on the bot"
            ))),
        }))
    }
}

/// Which job of a run failed and where: "its job `apply` failed at step
/// `wavegate job run`", or how it ended when no step says.
fn job_failure(job: &RunJob) -> String {
    let name = &job.name;
    match (job.failed_step(), &job.status) {
        (Some(step), _) => format!("its job `{name}` failed at step `{}`", step.name),
        (None, RunStatus::Completed { conclusion }) => {
            format!("its job `{name}` ended ({conclusion})")
        }
        (None, _) => format!("its job `{name}` did not finish"),
    }
}

/// The last `most` lines of a job's log that are not blank, without the
/// time each forge puts before a line (`2024-05-01T10:00:00.1234567Z `)
/// or a byte-order mark.
fn last_log_lines(log: &str, most: usize) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(|line| without_timestamp(line.trim_start_matches('\u{feff}')).trim_end())
        .filter(|line| !line.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(most)..].join("\n")
}

/// `line` without a leading RFC 3339 UTC time and the space after it.
fn without_timestamp(line: &str) -> &str {
    let Some((stamp, rest)) = line.split_once(' ') else {
        return line;
    };
    let bytes = stamp.as_bytes();
    let dated = bytes.len() >= 20
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':'
        && bytes[16] == b':'
        && stamp.ends_with('Z')
        && bytes[..19]
            .iter()
            .enumerate()
            .all(|(i, b)| matches!(i, 4 | 7 | 10 | 13 | 16) || b.is_ascii_digit());
    if dated {
        rest
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::actions::{RunConclusion, RunStep};

    fn completed(conclusion: RunConclusion) -> RunStatus {
        RunStatus::Completed { conclusion }
    }

    #[test]
    fn a_failed_job_names_the_step_it_failed_at_or_how_it_ended() {
        let mut job = RunJob {
            id: 7,
            name: "job".into(),
            status: completed(RunConclusion::Failure),
            html_url: None,
            steps: vec![
                RunStep {
                    name: "Set up job".into(),
                    status: completed(RunConclusion::Success),
                },
                RunStep {
                    name: "Run actions/checkout@v4".into(),
                    status: completed(RunConclusion::Failure),
                },
            ],
        };
        assert_eq!(
            job_failure(&job),
            "its job `job` failed at step `Run actions/checkout@v4`"
        );
        job.steps.clear();
        assert_eq!(job_failure(&job), "its job `job` ended (failure)");
        job.status = RunStatus::InProgress;
        assert_eq!(job_failure(&job), "its job `job` did not finish");
    }

    #[test]
    fn the_last_lines_of_a_log_lose_their_times_and_blanks() {
        let log = "\u{feff}2024-05-01T10:00:00.1234567Z ##[group]Run wavegate job run\r\n\
                   2024-05-01T10:00:01Z plan: 3 to add\n\
                   \n\
                   2024-05-01T10:00:02.5Z Error: pulling image: manifest unknown\n\
                   2024-05-01 not a time\n";
        assert_eq!(
            last_log_lines(log, 20),
            "##[group]Run wavegate job run\nplan: 3 to add\nError: pulling image: manifest unknown\n2024-05-01 not a time"
        );
        let many: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        let last = last_log_lines(&many, LOG_TAIL_LINES);
        assert_eq!(last.lines().count(), 20);
        assert!(last.starts_with("line 31\n") && last.ends_with("line 50"));
        assert_eq!(last_log_lines("\n \n", 20), "");
    }

    #[test]
    fn the_failure_reads_as_a_command_failure_with_its_last_output() {
        let why = with_last_output(
            "run 5 ended (failure) without handing the job back: its job `job` failed at step `x`"
                .into(),
            &last_log_lines("2024-05-01T10:00:00Z boom\n", 20),
        );
        assert_eq!(
            why,
            "run 5 ended (failure) without handing the job back: its job `job` failed at step `x`; last output:\nboom"
        );
    }
}
