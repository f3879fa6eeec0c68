//! What a page shows, built once from the store's records and rendered
//! twice: as HTML (`html.rs`) and as the JSON of `/api/v1/…`. A view holds
//! text, never markup; whatever a command printed or a person wrote stays
//! text here and is escaped where it is rendered.

use crate::apply::{AttemptRecord, RunStatus};
use crate::gate::ledger::{BrokenLink, Fact, PublicKey, Verified};
use crate::model::{RepoId, UnixMs};
use crate::plan::live::{Ending, Standing};
use crate::store::{
    ApplyRunRecord, CommandRow, Job, MemberLock, PlanRecord, PrRecord, PullRow, PullState,
};
use serde::Serialize;

/// A repository, with where its page and its API live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RepoView {
    pub(crate) forge: &'static str,
    pub(crate) name: String,
    pub(crate) page: String,
    pub(crate) api: String,
}

impl RepoView {
    pub(crate) fn of(repo: &RepoId) -> Self {
        let page = repo.page_path();
        Self {
            forge: repo.forge.as_str(),
            name: repo.full_name.clone(),
            api: format!("/api/v1{page}/pulls"),
            page,
        }
    }
}

/// One pull request in a repository's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PullRowView {
    pub(crate) number: u64,
    pub(crate) head: String,
    pub(crate) open: bool,
    /// waiting, applying, failed or done; none for an open pull request
    /// whose plan needs nothing from anyone (or is being planned).
    pub(crate) state: Option<&'static str>,
    pub(crate) report: Option<&'static str>,
    pub(crate) run: Option<RunRowView>,
    pub(crate) updated_at: UnixMs,
    pub(crate) page: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RunRowView {
    pub(crate) id: i64,
    pub(crate) status: &'static str,
    pub(crate) updated_at: UnixMs,
}

/// A repository's pull requests, one page of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PullsView {
    pub(crate) repo: RepoView,
    /// The filter asked for.
    pub(crate) state: Option<&'static str>,
    pub(crate) pulls: Vec<PullRowView>,
    /// The query of the next page (`?before=…`), when there may be one.
    pub(crate) next: Option<String>,
}

impl PullsView {
    pub(crate) fn of(
        id: &RepoId,
        state: Option<PullState>,
        rows: &[PullRow],
        per_page: u32,
    ) -> Self {
        let repo = RepoView::of(id);
        let pulls: Vec<PullRowView> = rows
            .iter()
            .map(|row| PullRowView {
                number: row.pr.0,
                head: row.head_sha.to_string(),
                open: row.open,
                state: row.state().map(PullState::as_str),
                report: row.report_status.map(|status| status.as_str()),
                run: row.run.map(|run| RunRowView {
                    id: run.id,
                    status: run.status.as_str(),
                    updated_at: run.updated_at,
                }),
                updated_at: row.updated_at,
                page: id.pull_page_path(row.pr),
            })
            .collect();
        let next = (pulls.len() == per_page as usize)
            .then(|| pulls.last())
            .flatten()
            .map(|last| match state {
                Some(state) => format!("?state={}&before={}", state.as_str(), last.number),
                None => format!("?before={}", last.number),
            });
        Self {
            repo,
            state: state.map(PullState::as_str),
            pulls,
            next,
        }
    }
}

/// A pull request: its report, the ledger facts of its gates and its run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PullView {
    pub(crate) repo: RepoView,
    pub(crate) number: u64,
    pub(crate) head: String,
    pub(crate) base_ref: String,
    pub(crate) open: bool,
    pub(crate) state: Option<&'static str>,
    pub(crate) report_status: Option<&'static str>,
    /// The digest of the change set last reported.
    pub(crate) digest: Option<String>,
    /// The report as posted (markdown), for the newest head planned.
    pub(crate) report: Option<String>,
    pub(crate) facts: Vec<FactView>,
    pub(crate) run: Option<RunView>,
    /// Its last commands, oldest first (with their output on the page).
    pub(crate) commands: Vec<CommandView>,
}

impl PullView {
    pub(crate) fn of(
        pr: &PrRecord,
        plan: Option<&PlanRecord>,
        facts: &[(Fact, bool)],
        run: Option<&ApplyRunRecord>,
    ) -> Self {
        Self {
            repo: RepoView::of(&pr.repo),
            number: pr.pr.0,
            head: pr.head_sha.to_string(),
            base_ref: pr.base_ref.clone(),
            open: pr.open,
            state: PullState::of(pr.open, pr.report_status, run.map(|run| run.status))
                .map(PullState::as_str),
            report_status: pr.report_status.map(|status| status.as_str()),
            digest: pr.report_digest.as_ref().map(ToString::to_string),
            report: plan.map(|plan| plan.report.clone()),
            facts: facts.iter().map(FactView::of).collect(),
            run: run.map(RunView::of),
            commands: Vec::new(),
        }
    }
}

/// A command run for a pull request or its apply run, and how it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CommandView {
    pub(crate) id: i64,
    /// `[apply] app@prod`.
    pub(crate) label: String,
    pub(crate) kind: String,
    /// The apply run it is of; none for a pull request's plans.
    pub(crate) run: Option<i64>,
    /// running, ended, or lost (its server stopped before it ended).
    pub(crate) state: &'static str,
    /// How it ended, as kept: `exited:0`, `signalled:9`, `timed-out`,
    /// `cancelled`, `not-started`.
    pub(crate) ending: Option<String>,
    /// How it ended (or stands), in words.
    pub(crate) description: String,
    pub(crate) succeeded: Option<bool>,
    pub(crate) started_at: UnixMs,
    pub(crate) finished_at: Option<UnixMs>,
    /// Its output went past the cap: the kept output says where it was cut.
    pub(crate) truncated: bool,
    /// Its output as server-sent events while it runs.
    pub(crate) live: String,
    /// Its whole kept output as JSON.
    pub(crate) api: String,
    /// Its kept output (redacted, capped), when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<String>,
}

impl CommandView {
    pub(crate) fn of(repo: &RepoId, row: &CommandRow, output: Option<String>, now: UnixMs) -> Self {
        let standing = Standing::of(row.ending, row.updated_at.millis(), now.millis());
        let (state, description) = match standing {
            Standing::Running => ("running", "running".to_owned()),
            Standing::Ended(ending) => ("ended", ending.describe()),
            Standing::Lost => (
                "lost",
                "lost: the server running it stopped before it ended".to_owned(),
            ),
        };
        let path = format!("{}/commands/{}", repo.pull_page_path(row.pr), row.id);
        Self {
            id: row.id,
            label: row.label.clone(),
            kind: row.kind.clone(),
            run: row.run,
            state,
            ending: row.ending.map(Ending::key),
            description,
            succeeded: row.ending.map(Ending::succeeded),
            started_at: row.started_at,
            finished_at: row.finished_at,
            truncated: row.truncated,
            live: format!("{path}/live"),
            api: format!("/api/v1{path}"),
            output,
        }
    }

    /// Lines of its kept output (where a live stream of it goes on from).
    pub(crate) fn lines(&self) -> usize {
        self.output
            .as_deref()
            .map_or(0, |text| text.matches('\n').count())
    }
}

/// A pull request's commands, without their output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CommandsView {
    pub(crate) commands: Vec<CommandView>,
}

/// A fact of the ledger, and whether it counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FactView {
    pub(crate) seq: i64,
    pub(crate) gate: String,
    pub(crate) kind: String,
    pub(crate) digest: String,
    pub(crate) by: String,
    pub(crate) at: UnixMs,
    /// False for a fact written outside wavegate (not signed by its key).
    pub(crate) counts: bool,
}

impl FactView {
    fn of((fact, counts): &(Fact, bool)) -> Self {
        Self {
            seq: fact.seq,
            gate: fact.fact.gate.to_string(),
            kind: fact.fact.kind.to_string(),
            digest: fact.fact.digest.to_string(),
            by: fact.fact.actor.login.clone(),
            at: fact.fact.at,
            counts: *counts,
        }
    }
}

/// An apply run by stage and wave, each member with its state and what its
/// latest command printed last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RunView {
    pub(crate) id: i64,
    pub(crate) status: &'static str,
    pub(crate) merge_sha: String,
    pub(crate) digest: String,
    pub(crate) approved_by: Vec<String>,
    /// The stage and wave it is at (`prod wave 2`).
    pub(crate) at: Option<String>,
    /// What it waits for, when it waits.
    pub(crate) waiting_for: Option<String>,
    /// The comment that ends the wait, when a person ends it.
    pub(crate) line_to_copy: Option<String>,
    pub(crate) stages: Vec<StageView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct StageView {
    pub(crate) stage: String,
    pub(crate) waves: Vec<Vec<MemberView>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MemberView {
    pub(crate) member: String,
    pub(crate) state: String,
    /// The end of its latest command's output (redacted when it ran).
    pub(crate) output: Option<OutputView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct OutputView {
    pub(crate) text: String,
    /// "all 3 lines", "last 30 of 120 lines".
    pub(crate) extent: String,
}

impl RunView {
    fn of(run: &ApplyRunRecord) -> Self {
        let record: &AttemptRecord = &run.record;
        let stages = record
            .layout
            .iter()
            .map(|(stage, waves)| StageView {
                stage: stage.to_string(),
                waves: waves
                    .iter()
                    .map(|wave| {
                        wave.iter()
                            .map(|member| MemberView {
                                member: member.to_string(),
                                state: record.state(member).label(),
                                output: record.printed.get(member).map(|tail| OutputView {
                                    text: tail.text.clone(),
                                    extent: tail.extent(),
                                }),
                            })
                            .collect()
                    })
                    .collect(),
            })
            .collect();
        Self {
            id: run.id,
            status: run.status.as_str(),
            merge_sha: run.merge_sha.to_string(),
            digest: run.digest.to_string(),
            approved_by: record.pr_approved_by.clone(),
            at: record
                .at
                .as_ref()
                .filter(|_| !run.status.is_final() || run.status == RunStatus::Failed)
                .map(|(stage, wave)| format!("{stage} wave {wave}")),
            waiting_for: record.wait.as_ref().map(crate::report::apply::waiting_for),
            line_to_copy: record
                .wait
                .as_ref()
                .and_then(crate::report::apply::line_to_copy),
            stages,
        }
    }
}

/// A repository's ledger: whether its chain verifies (or where it breaks),
/// the key that signs it, and one page of its facts, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LedgerView {
    pub(crate) repo: RepoView,
    /// The public key facts are signed with; none when the server signs none.
    pub(crate) key: Option<String>,
    /// The whole chain hashes through, and each fact after signing began
    /// carries the key's signature.
    pub(crate) verified: bool,
    /// "3 facts, chain intact, all signed; head seq 3 sha256:…", or what
    /// breaks it and where.
    pub(crate) verification: String,
    /// The newest fact's seq and hash.
    pub(crate) head: Option<HeadView>,
    pub(crate) facts: Vec<FactView>,
    /// The query of the next page (`?before=…`), when there may be one.
    pub(crate) next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct HeadView {
    pub(crate) seq: i64,
    pub(crate) hash: String,
}

impl LedgerView {
    pub(crate) fn of(
        id: &RepoId,
        key: Option<&PublicKey>,
        verified: &Result<Verified, BrokenLink>,
        facts: &[(Fact, bool)],
        per_page: u32,
    ) -> Self {
        let facts: Vec<FactView> = facts.iter().map(FactView::of).collect();
        let next = (facts.len() == per_page as usize)
            .then(|| facts.last())
            .flatten()
            .filter(|last| last.seq > 1)
            .map(|last| format!("?before={}", last.seq));
        Self {
            repo: RepoView::of(id),
            key: key.map(ToString::to_string),
            verified: verified.is_ok(),
            verification: match verified {
                Ok(verified) => verified.to_string(),
                Err(broken) => broken.to_string(),
            },
            head: verified
                .as_ref()
                .ok()
                .and_then(|verified| verified.head.as_ref())
                .map(|head| HeadView {
                    seq: head.seq,
                    hash: head.hash.to_string(),
                }),
            facts,
            next,
        }
    }
}

/// What holds a repository's members and what waits in its queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct QueueView {
    pub(crate) repo: RepoView,
    pub(crate) locks: Vec<LockView>,
    /// Queued, running and dead jobs of its pull requests, newest first.
    pub(crate) jobs: Vec<JobView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LockView {
    pub(crate) member: String,
    pub(crate) run: i64,
    pub(crate) pr: u64,
    pub(crate) since: UnixMs,
    pub(crate) page: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct JobView {
    pub(crate) id: i64,
    pub(crate) kind: String,
    pub(crate) status: &'static str,
    /// The pull request's queue key (`github:acme/infra#42`).
    pub(crate) key: String,
    pub(crate) attempts: u32,
    pub(crate) max_attempts: u32,
    /// Not claimed before this.
    pub(crate) run_after: UnixMs,
    /// Its last attempt failed (a dead job: it gave up). Why is in the
    /// server's log: an error can quote a forge's answer or a command's
    /// output, which a page anyone may read must not show.
    pub(crate) failed: bool,
}

impl QueueView {
    pub(crate) fn of(id: &RepoId, locks: &[MemberLock], jobs: &[Job]) -> Self {
        Self {
            repo: RepoView::of(id),
            locks: locks
                .iter()
                .map(|lock| LockView {
                    member: lock.member.clone(),
                    run: lock.run_id,
                    pr: lock.pr.0,
                    since: lock.since,
                    page: id.pull_page_path(lock.pr),
                })
                .collect(),
            jobs: jobs
                .iter()
                .map(|job| JobView {
                    id: job.id.0,
                    kind: job.kind.to_string(),
                    status: job.status.as_str(),
                    key: job.queue_key.clone(),
                    attempts: job.attempts,
                    max_attempts: job.max_attempts,
                    run_after: job.run_after,
                    failed: job.last_error.is_some(),
                })
                .collect(),
        }
    }
}

/// The server as it started: what runs here and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ServerView {
    pub(crate) version: &'static str,
    /// How commands are isolated, and what holds their limits.
    pub(crate) sandbox: String,
    /// Why no command can run, when the sandbox is on but unavailable.
    pub(crate) sandbox_problem: Option<String>,
    pub(crate) limits_held_by: &'static str,
    /// The operator's execution profiles, one line each.
    pub(crate) profiles: Vec<String>,
    /// Worker tasks claiming jobs on this replica.
    pub(crate) workers: usize,
    /// Each forge this server talks to, and where.
    pub(crate) forges: Vec<String>,
    pub(crate) public_url: Option<String>,
}
