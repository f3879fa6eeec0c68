//! GitHub Actions and Forgejo Actions in our own terms: a workflow dispatch
//! asked for (checked before it is sent), the run it started, where a run
//! stands, both forges' status and conclusion words read into one enum, a
//! run's jobs and their steps, and the end of a job's log, kept as it
//! streams in so that a long log is never held whole.
//! What a refused dispatch means (no such workflow, no `workflow_dispatch`
//! trigger, a forge too old to name the run it started) is said here once,
//! with the fix, for both clients.

use crate::model::ForgeKind;
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most inputs GitHub takes in one dispatch (its API description's
/// `maxProperties`); Forgejo is held to the same.
pub(crate) const MOST_INPUTS: usize = 25;
/// GitHub's cap on a dispatch's inputs, in characters of their JSON;
/// Forgejo is held to the same.
pub(crate) const INPUTS_LIMIT: usize = 65_535;

/// A `workflow_dispatch` to ask of the forge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowDispatch {
    /// The workflow's file name, e.g. `wavegate.yml`, as both APIs take it
    /// in the path (GitHub looks in `.github/workflows/`, Forgejo in
    /// `.forgejo/workflows/`).
    pub workflow: String,
    /// The branch whose version of the workflow runs.
    pub git_ref: String,
    /// The workflow's `inputs`, by name.
    pub inputs: BTreeMap<String, String>,
}

impl WorkflowDispatch {
    /// Refuses, unsent, a dispatch neither forge would take: a workflow
    /// that is not a plain file name, no branch, more than [`MOST_INPUTS`]
    /// inputs or more than [`INPUTS_LIMIT`] characters of them.
    pub(crate) fn check(&self) -> Result<()> {
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
        if self.workflow.is_empty() || !self.workflow.chars().all(plain) {
            bail!(
                "the workflow `{}` is not a file name (like `wavegate.yml`); it was not dispatched",
                self.workflow
            );
        }
        if self.git_ref.trim().is_empty() {
            bail!(
                "no branch to run the workflow `{}` on; it was not dispatched",
                self.workflow
            );
        }
        if self.inputs.len() > MOST_INPUTS {
            bail!(
                "{} inputs to the workflow `{}` are more than the {MOST_INPUTS} GitHub takes; it was not dispatched",
                self.inputs.len(),
                self.workflow
            );
        }
        let length = serde_json::to_string(&self.inputs).map_or(0, |text| text.chars().count());
        if length > INPUTS_LIMIT {
            bail!(
                "the inputs to the workflow `{}` are {length} characters, more than the {INPUTS_LIMIT} GitHub takes; it was not dispatched",
                self.workflow
            );
        }
        Ok(())
    }
}

/// The run a dispatch started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchedRun {
    /// The run's id, as `GET …/actions/runs/{id}` takes it on both forges.
    pub id: u64,
    /// The run's page, when the forge said.
    pub html_url: Option<String>,
}

/// Where a run stands, as the forge answers now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRunState {
    pub status: RunStatus,
    pub html_url: Option<String>,
    /// The commit the run runs at (the head of the branch it was
    /// dispatched on, when it was).
    pub head_sha: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum RunStatus {
    /// Not started: waiting for a runner, for approval or for other runs.
    Queued,
    /// Started, and not finished as far as the forge's words tell: a word
    /// neither forge documents reads as this, so that a run is never taken
    /// for finished (and an apply for over) on a word not understood.
    InProgress,
    Completed {
        conclusion: RunConclusion,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunConclusion {
    Success,
    Failure,
    Cancelled,
    /// Stopped at its time limit (GitHub; Forgejo says `failure`).
    TimedOut,
    /// Any other word, as the forge wrote it (`skipped`, `neutral`,
    /// `action_required`, `startup_failure`, `stale`, …).
    Other(String),
}

impl std::fmt::Display for RunConclusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Success => "success",
            Self::Failure => "failure",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timed out",
            Self::Other(word) => word,
        })
    }
}

impl RunStatus {
    /// GitHub's `workflow-run` `status` and `conclusion` (both nullable):
    /// `queued`, `requested`, `waiting` and `pending` (or none) are queued,
    /// `in_progress` in progress, `completed` completed with its conclusion.
    pub(crate) fn from_github(status: Option<&str>, conclusion: Option<&str>) -> Self {
        match status {
            None | Some("queued" | "requested" | "waiting" | "pending") => RunStatus::Queued,
            Some("completed") => RunStatus::Completed {
                conclusion: match conclusion {
                    Some("success") => RunConclusion::Success,
                    Some("failure") => RunConclusion::Failure,
                    Some("cancelled") => RunConclusion::Cancelled,
                    Some("timed_out") => RunConclusion::TimedOut,
                    Some(other) => RunConclusion::Other(other.to_owned()),
                    None => RunConclusion::Other("none".into()),
                },
            },
            Some(_) => RunStatus::InProgress,
        }
    }

    /// Forgejo's `ActionRun` `status`, one word for both (its
    /// `actions.Status`): `waiting`, `blocked` and `unknown` (nothing ran
    /// yet) are queued, `running` in progress, `success`, `failure`,
    /// `cancelled` and `skipped` completed.
    pub(crate) fn from_forgejo(status: &str) -> Self {
        let completed = |conclusion| RunStatus::Completed { conclusion };
        match status {
            "waiting" | "blocked" | "unknown" => RunStatus::Queued,
            "success" => completed(RunConclusion::Success),
            "failure" => completed(RunConclusion::Failure),
            "cancelled" => completed(RunConclusion::Cancelled),
            "skipped" => completed(RunConclusion::Other("skipped".into())),
            _ => RunStatus::InProgress,
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(self, RunStatus::Completed { .. })
    }
}

/// One job of a workflow run, as the forge answers now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunJob {
    /// The job's id, as `GET …/actions/jobs/{id}/logs` takes it.
    pub id: u64,
    /// Its name: the workflow's key under `jobs:`, or its `name:`.
    pub name: String,
    /// Read like a run's status, in the same words on both forges.
    pub status: RunStatus,
    /// The job's page, when the forge said.
    pub html_url: Option<String>,
    /// Its steps in order, the forge's own (set-up, clean-up) included;
    /// none for a job no runner took.
    pub steps: Vec<RunStep>,
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStep {
    pub name: String,
    pub status: RunStatus,
}

impl RunJob {
    /// Whether the job ended other than in success or skipped.
    pub fn failed(&self) -> bool {
        matches!(&self.status, RunStatus::Completed { conclusion } if conclusion.failed())
    }

    /// The first of its steps that ended other than in success or skipped.
    pub fn failed_step(&self) -> Option<&RunStep> {
        self.steps.iter().find(|step| {
            matches!(&step.status, RunStatus::Completed { conclusion } if conclusion.failed())
        })
    }
}

impl RunConclusion {
    /// Neither success nor a skip: something went wrong, or was stopped.
    fn failed(&self) -> bool {
        !matches!(self, Self::Success)
            && !matches!(self, Self::Other(word) if word == "skipped" || word == "neutral")
    }
}

/// The last bytes of a stream, read chunk by chunk: at most `max_bytes`
/// are kept (and twice that held between trims).
#[derive(Debug)]
pub(crate) struct LogTail {
    kept: Vec<u8>,
    max_bytes: usize,
    cut: bool,
}

impl LogTail {
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            kept: Vec::new(),
            max_bytes,
            cut: false,
        }
    }

    /// The stream starts within the log (a range from its end), not at
    /// its start: its first line is as good as cut.
    pub(crate) fn starts_within(&mut self) {
        self.cut = true;
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.kept.extend_from_slice(chunk);
        if self.kept.len() > self.max_bytes.saturating_mul(2).max(64 * 1024) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.kept.len() > self.max_bytes {
            let excess = self.kept.len() - self.max_bytes;
            self.kept.drain(..excess);
            self.cut = true;
        }
    }

    /// The text kept. When the start was cut off, so is the partial line
    /// it left (unless it is the only line); bytes that are not UTF-8
    /// (a character cut in two) read as U+FFFD.
    pub(crate) fn finish(mut self) -> String {
        self.trim();
        let mut start = 0;
        if self.cut {
            if let Some(newline) = self.kept.iter().position(|b| *b == b'\n') {
                if newline + 1 < self.kept.len() {
                    start = newline + 1;
                }
            }
        }
        String::from_utf8_lossy(&self.kept[start..]).into_owned()
    }
}

/// Where `forge` looks for a workflow file named in a dispatch.
fn workflow_dir(forge: ForgeKind) -> &'static str {
    match forge {
        ForgeKind::GitHub => ".github/workflows",
        ForgeKind::Forgejo => ".forgejo/workflows",
    }
}

fn init_command(forge: ForgeKind) -> &'static str {
    match forge {
        ForgeKind::GitHub => "wavegate init actions --forge github",
        ForgeKind::Forgejo => "wavegate init actions --forge forgejo",
    }
}

/// The forge has no workflow by the dispatch's name (GitHub, Forgejo:
/// 404): where it must be, and how to write one.
pub(crate) fn missing_workflow(
    forge: ForgeKind,
    call: &str,
    full_name: &str,
    dispatch: &WorkflowDispatch,
    answer: &str,
) -> anyhow::Error {
    let file = &dispatch.workflow;
    let dir = workflow_dir(forge);
    let older = match forge {
        ForgeKind::GitHub => "",
        ForgeKind::Forgejo => "; a Forgejo without the dispatch API answers 404 too",
    };
    anyhow!(
        "{call}: {answer}: {full_name} has no workflow `{file}` to dispatch on `{}`: \
         commit the workflow `{}` prints as {dir}/{file} on the default branch \
         (it must have an `on: workflow_dispatch` trigger){older}",
        dispatch.git_ref,
        init_command(forge),
    )
}

/// The forge refused to dispatch the workflow it has (GitHub 422: no
/// `workflow_dispatch` trigger, or no such branch): what it said, and the fix.
pub(crate) fn undispatchable_workflow(
    forge: ForgeKind,
    call: &str,
    full_name: &str,
    dispatch: &WorkflowDispatch,
    answer: &str,
) -> anyhow::Error {
    let file = &dispatch.workflow;
    let dir = workflow_dir(forge);
    if answer.contains("No ref found") {
        return anyhow!(
            "{call}: {answer}: {full_name} has no branch `{}` to run the workflow `{file}` on",
            dispatch.git_ref
        );
    }
    if answer.contains("Unexpected inputs") {
        return anyhow!(
            "{call}: {answer}: the workflow `{file}` of {full_name} does not declare every \
             input wavegate gives it: replace {dir}/{file} on the default branch with what \
             `{}` prints",
            init_command(forge),
        );
    }
    anyhow!(
        "{call}: {answer}: the workflow `{file}` of {full_name} cannot be dispatched: \
         check that {dir}/{file} is on the default branch and has an `on: workflow_dispatch` \
         trigger (`{}` prints one that has)",
        init_command(forge),
    )
}

/// The forge did not answer with the run it started (204: it does not
/// know `return_run_details` / `return_run_info`), or refused that field:
/// which version is needed. `started`: whether the run was started anyway.
pub(crate) fn forge_too_old(
    forge: ForgeKind,
    call: &str,
    dispatch: &WorkflowDispatch,
    answer: &str,
    started: bool,
) -> anyhow::Error {
    let (field, needed) = match forge {
        ForgeKind::GitHub => (
            "return_run_details",
            "github.com (since February 2026) or GitHub Enterprise Server 3.21 or later",
        ),
        ForgeKind::Forgejo => ("return_run_info", "Forgejo 11 or later"),
    };
    let outcome = if started {
        "the workflow run started, but wavegate cannot follow a run it cannot name; \
         find it on the repository's Actions page"
    } else {
        "no run was started"
    };
    anyhow!(
        "{call}: {answer}: this forge does not answer a dispatch of `{}` with the run it \
         started (`{field}`): {outcome}; running jobs on the forge's CI needs {needed}",
        dispatch.workflow
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(conclusion: RunConclusion) -> RunStatus {
        RunStatus::Completed { conclusion }
    }

    #[test]
    fn github_words_read_as_our_status() {
        let read = RunStatus::from_github;
        for waiting in ["queued", "requested", "waiting", "pending"] {
            assert_eq!(read(Some(waiting), None), RunStatus::Queued, "{waiting}");
        }
        assert_eq!(read(None, None), RunStatus::Queued);
        assert_eq!(read(Some("in_progress"), None), RunStatus::InProgress);
        let done = |conclusion| read(Some("completed"), Some(conclusion));
        assert_eq!(done("success"), completed(RunConclusion::Success));
        assert_eq!(done("failure"), completed(RunConclusion::Failure));
        assert_eq!(done("cancelled"), completed(RunConclusion::Cancelled));
        assert_eq!(done("timed_out"), completed(RunConclusion::TimedOut));
        for other in [
            "neutral",
            "skipped",
            "stale",
            "action_required",
            "startup_failure",
        ] {
            assert_eq!(done(other), completed(RunConclusion::Other(other.into())));
        }
        assert_eq!(
            read(Some("completed"), None),
            completed(RunConclusion::Other("none".into()))
        );
    }

    #[test]
    fn forgejo_words_read_as_our_status() {
        let read = RunStatus::from_forgejo;
        for waiting in ["waiting", "blocked", "unknown"] {
            assert_eq!(read(waiting), RunStatus::Queued, "{waiting}");
        }
        assert_eq!(read("running"), RunStatus::InProgress);
        assert_eq!(read("success"), completed(RunConclusion::Success));
        assert_eq!(read("failure"), completed(RunConclusion::Failure));
        assert_eq!(read("cancelled"), completed(RunConclusion::Cancelled));
        assert_eq!(
            read("skipped"),
            completed(RunConclusion::Other("skipped".into()))
        );
    }

    #[test]
    fn a_status_word_not_understood_is_never_taken_for_finished() {
        assert_eq!(
            RunStatus::from_github(Some("exploded"), Some("success")),
            RunStatus::InProgress
        );
        assert_eq!(RunStatus::from_forgejo(""), RunStatus::InProgress);
        assert_eq!(RunStatus::from_forgejo("Success"), RunStatus::InProgress);
        assert!(!RunStatus::InProgress.is_finished());
        assert!(completed(RunConclusion::Other("x".into())).is_finished());
    }

    fn job(status: RunStatus, steps: &[(&str, RunStatus)]) -> RunJob {
        RunJob {
            id: 1,
            name: "job".into(),
            status,
            html_url: None,
            steps: steps
                .iter()
                .map(|(name, status)| RunStep {
                    name: (*name).into(),
                    status: status.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_failed_step_is_the_first_that_neither_succeeded_nor_was_skipped() {
        let skipped = completed(RunConclusion::Other("skipped".into()));
        let failed = job(
            completed(RunConclusion::Failure),
            &[
                ("Set up job", completed(RunConclusion::Success)),
                ("lint", skipped.clone()),
                (
                    "Run actions/checkout@v4",
                    completed(RunConclusion::Cancelled),
                ),
                ("wavegate job run", completed(RunConclusion::Failure)),
            ],
        );
        assert!(failed.failed());
        assert_eq!(
            failed.failed_step().unwrap().name,
            "Run actions/checkout@v4"
        );
        let passed = job(completed(RunConclusion::Success), &[("a", skipped)]);
        assert!(!passed.failed() && passed.failed_step().is_none());
        assert!(!job(RunStatus::InProgress, &[("a", RunStatus::InProgress)]).failed());
        assert!(job(completed(RunConclusion::TimedOut), &[]).failed());
    }

    #[test]
    fn a_log_tail_keeps_the_last_bytes_from_a_whole_line() {
        let mut tail = LogTail::new(10);
        tail.push(b"first\nsec");
        tail.push(b"ond\nthird\n");
        assert_eq!(tail.finish(), "third\n", "the cut line `ond` is dropped");

        let mut whole = LogTail::new(100);
        whole.push(b"a\nb\n");
        assert_eq!(whole.finish(), "a\nb\n");

        let mut ranged = LogTail::new(100);
        ranged.starts_within();
        ranged.push(b"ond\nthird\n");
        assert_eq!(ranged.finish(), "third\n");

        let mut one_line = LogTail::new(4);
        one_line.push(b"abcdefgh");
        assert_eq!(one_line.finish(), "efgh", "a single cut line is kept");
    }

    #[test]
    fn a_long_stream_is_held_within_bounds_as_it_comes() {
        let mut tail = LogTail::new(1_000);
        for i in 0..10_000 {
            tail.push(format!("line {i}\n").as_bytes());
            assert!(tail.kept.len() <= 64 * 1024 + 16);
        }
        let text = tail.finish();
        assert!(text.len() <= 1_000 && text.starts_with("line "), "{text}");
        assert!(text.ends_with("line 9999\n"));
    }

    #[test]
    fn a_character_cut_in_two_reads_as_a_replacement() {
        let mut tail = LogTail::new(5);
        tail.push("xé1234".as_bytes());
        assert_eq!(tail.finish(), "\u{fffd}1234");
    }

    fn dispatch(workflow: &str, inputs: usize) -> WorkflowDispatch {
        WorkflowDispatch {
            workflow: workflow.into(),
            git_ref: "main".into(),
            inputs: (0..inputs)
                .map(|i| (format!("in{i}"), "v".into()))
                .collect(),
        }
    }

    #[test]
    fn a_dispatch_neither_forge_takes_is_refused_unsent() {
        assert!(dispatch("wavegate.yml", MOST_INPUTS).check().is_ok());
        for bad in ["", ".github/workflows/wavegate.yml", "a b.yml", "x?y=1"] {
            let error = dispatch(bad, 0).check().unwrap_err().to_string();
            assert!(error.contains("not a file name"), "{bad}: {error}");
        }
        let error = dispatch("w.yml", MOST_INPUTS + 1).check().unwrap_err();
        assert!(error.to_string().contains("more than the 25"), "{error}");
        let mut big = dispatch("w.yml", 0);
        big.inputs.insert("job".into(), "x".repeat(INPUTS_LIMIT));
        let error = big.check().unwrap_err();
        assert!(error.to_string().contains("65535"), "{error}");
        let mut no_branch = dispatch("w.yml", 0);
        no_branch.git_ref = " ".into();
        assert!(no_branch.check().is_err());
    }

    #[test]
    fn a_refusal_names_the_file_and_the_fix() {
        let d = dispatch("wavegate.yml", 0);
        let missing = missing_workflow(
            ForgeKind::GitHub,
            "POST x",
            "acme/infra",
            &d,
            "404 Not Found",
        );
        let text = missing.to_string();
        assert!(text.contains(".github/workflows/wavegate.yml"), "{text}");
        assert!(text.contains("wavegate init actions"), "{text}");
        let text =
            undispatchable_workflow(ForgeKind::Forgejo, "POST x", "acme/infra", &d, "422 no")
                .to_string();
        assert!(text.contains(".forgejo/workflows/wavegate.yml"), "{text}");
        assert!(text.contains("workflow_dispatch"), "{text}");
        let text = undispatchable_workflow(
            ForgeKind::GitHub,
            "POST x",
            "acme/infra",
            &d,
            "422 No ref found for: main",
        )
        .to_string();
        assert!(text.contains("no branch `main`"), "{text}");
        let text = undispatchable_workflow(
            ForgeKind::GitHub,
            "POST x",
            "acme/infra",
            &d,
            "422 Unexpected inputs provided: [\"job\"]",
        )
        .to_string();
        assert!(text.contains("does not declare every input"), "{text}");
        let text = forge_too_old(ForgeKind::GitHub, "POST x", &d, "204", true).to_string();
        assert!(text.contains("return_run_details") && text.contains("run started"));
    }
}
