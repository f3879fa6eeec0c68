//! What a pull request shows of wavegate: the one report comment (its body
//! is the check's summary), the check on the head, and after merge the
//! run's section and the `wavegate/apply` check on the merge commit; the
//! store remembers what was posted, so each is updated rather than repeated.

use crate::apply::{AttemptRecord, MemberState, RunStatus, Wait};
use crate::forge::types::{CheckReport, CheckState};
use crate::model::{CommitSha, Digest, PrNumber};
use crate::plan::changeset::{ChangeSet, MemberStatus};
use crate::report::apply::{self as apply_report, RunView};
use crate::store::{ApplyRunRecord, PlanRecord, PrRecord, PrReport, ReportStatus, Store};
use crate::worker::ctx::Forge;
use anyhow::Result;

/// What a report shows: for which pull request and head, the check already
/// posted there, the digest it binds and where its gate stands.
pub(super) struct Shown<'a> {
    pub(super) pr: PrNumber,
    pub(super) head: &'a CommitSha,
    pub(super) check_id: Option<u64>,
    pub(super) digest: Option<Digest>,
    pub(super) status: ReportStatus,
    /// The forge CI runs its members' plans ran in.
    pub(super) runs: CiRuns,
}

/// The runs on the forge's CI that a check is about, for where its
/// "Details" lead: a run whose command failed (its log says why), else
/// this server's page of the pull request (which names every run), else
/// the first member's run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct CiRuns {
    failed: Option<String>,
    first: Option<String>,
}

impl CiRuns {
    /// The runs of `set`'s members' plans.
    pub(super) fn of_plan(set: &ChangeSet) -> Self {
        let run = |failed: bool| {
            set.members
                .iter()
                .filter(|m| !failed || m.status == MemberStatus::PlanFailed)
                .find_map(|m| m.ran_on.clone())
        };
        Self {
            failed: run(true),
            first: run(false),
        }
    }

    /// The runs of `record`'s members' latest applies.
    fn of_apply(record: &AttemptRecord) -> Self {
        let failed = record.ran_on.iter().find_map(|(member, url)| {
            matches!(record.members.get(member), Some(MemberState::Failed { .. }))
                .then(|| url.clone())
        });
        Self {
            failed,
            first: record.ran_on.values().next().cloned(),
        }
    }

    fn details_url(self, page: Option<String>) -> Option<String> {
        self.failed.or(page).or(self.first)
    }
}

/// Posts the report comment and the check on the head, and records both.
pub(super) async fn publish_report(
    store: &Store,
    forge: Forge<'_>,
    shown: Shown<'_>,
    report: CheckReport,
) -> Result<()> {
    let known = store.pr(&forge.repo.id, shown.pr).await?;
    let body = with_line(&report.summary, forge.page_line(shown.pr, "report"));
    let comment_id = forge
        .client
        .upsert_report(
            forge.repo,
            shown.pr,
            known.as_ref().and_then(|r| r.report_comment_id),
            crate::report::REPORT_MARKER,
            &body,
        )
        .await?;
    let check_id = shown
        .check_id
        .or_else(|| known_check(known.as_ref(), shown.head));
    let report = report.linked(shown.runs.details_url(forge.pull_page(shown.pr)));
    let check_id = forge
        .client
        .publish_check(forge.repo, shown.head, check_id, &report)
        .await?;
    store
        .set_pr_report(
            &forge.repo.id,
            shown.pr,
            PrReport {
                head_sha: shown.head.clone(),
                digest: shown.digest,
                comment_id: Some(comment_id),
                check_id,
                status: Some(shown.status),
            },
        )
        .await
}

/// The report with the run's section, and the `wavegate/apply` check on
/// the merge commit; the run is saved with its check.
pub(super) async fn publish_run(
    store: &Store,
    forge: Forge<'_>,
    run: &mut ApplyRunRecord,
    plan: &PlanRecord,
) -> Result<()> {
    let view = RunView {
        merge_sha: run.merge_sha.as_str(),
        status: run.status,
        record: &run.record,
    };
    let report = plan.report.trim_end();
    let line = forge.page_line(run.pr, "run");
    let line_size = line.as_ref().map_or(0, |line| line.chars().count() + 2);
    let room = crate::report::COMMENT_LIMIT.saturating_sub(report.chars().count() + 2 + line_size);
    let section = apply_report::render_within(&view, room);
    let title = apply_report::title(&view);
    let body = with_line(&format!("{report}\n\n{section}"), line);
    let known = store.pr(&run.repo.id, run.pr).await?;
    let comment_id = forge
        .client
        .upsert_report(
            &run.repo,
            run.pr,
            known.as_ref().and_then(|r| r.report_comment_id),
            crate::report::REPORT_MARKER,
            &body,
        )
        .await?;
    if let Some(known) = known.filter(|k| k.report_comment_id != Some(comment_id)) {
        if let Some(head) = known.report_head.clone() {
            store
                .set_pr_report(
                    &run.repo.id,
                    run.pr,
                    PrReport {
                        head_sha: head,
                        digest: known.report_digest.clone(),
                        comment_id: Some(comment_id),
                        check_id: known.check_id,
                        status: known.report_status,
                    },
                )
                .await?;
        }
    }
    // A drift run's commit is the default branch's, whose checks are its
    // merges' own: the drift issue shows the run.
    if store.drift_issue(&run.repo.id, run.pr).await?.is_some() {
        return store.save_apply_run(run).await;
    }
    let report = CheckReport::apply(run_check_state(run.status, &run.record), title, body)
        .linked(CiRuns::of_apply(&run.record).details_url(forge.pull_page(run.pr)));
    let check_id = forge
        .client
        .publish_check(&run.repo, &run.merge_sha, run.check_id, &report)
        .await?;
    run.check_id = check_id.or(run.check_id);
    store.save_apply_run(run).await
}

/// `body` with `line` under it, when there is one and the comment has
/// room for it (a report at the forge's limit goes without).
fn with_line(body: &str, line: Option<String>) -> String {
    match line {
        Some(line)
            if body.chars().count() + line.chars().count() + 2 <= crate::report::COMMENT_LIMIT =>
        {
            format!("{body}\n\n{line}")
        }
        _ => body.to_owned(),
    }
}

/// The check already posted on this head, to be updated rather than repeated.
pub(super) fn known_check(known: Option<&PrRecord>, head: &CommitSha) -> Option<u64> {
    known
        .filter(|r| r.report_head.as_ref() == Some(head))
        .and_then(|r| r.check_id)
}

/// Where a run's `wavegate/apply` check stands: a run that waits for a
/// person asks for action; one that waits for a lock, a holder or an
/// earlier apply goes on by itself.
fn run_check_state(status: RunStatus, record: &AttemptRecord) -> CheckState {
    match status {
        RunStatus::Running => CheckState::InProgress,
        RunStatus::Waiting if record.wait.as_ref().is_some_and(Wait::needs_a_person) => {
            CheckState::ActionRequired
        }
        RunStatus::Waiting => CheckState::InProgress,
        RunStatus::Failed => CheckState::Failure,
        RunStatus::Applied => CheckState::Success,
        RunStatus::Ended => CheckState::Neutral,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ForgeKind, MemberId, RepoId};

    fn sha(digit: char) -> CommitSha {
        CommitSha::parse(&digit.to_string().repeat(40)).unwrap()
    }

    fn record_of(report_head: Option<char>, check_id: Option<u64>) -> PrRecord {
        PrRecord {
            repo: RepoId::new(ForgeKind::GitHub, "acme/infra"),
            pr: PrNumber(7),
            head_sha: sha('b'),
            base_ref: "main".into(),
            open: true,
            report_comment_id: Some(1),
            check_id,
            report_head: report_head.map(sha),
            report_digest: None,
            report_status: None,
            pusher: None,
        }
    }

    #[test]
    fn a_check_is_updated_only_on_the_head_it_was_posted_for() {
        let head = sha('b');
        assert_eq!(
            known_check(Some(&record_of(Some('b'), Some(9))), &head),
            Some(9)
        );
        assert_eq!(
            known_check(Some(&record_of(Some('a'), Some(9))), &head),
            None
        );
        assert_eq!(known_check(None, &head), None);
    }

    #[test]
    fn a_check_leads_to_a_failed_ci_run_before_the_page_and_to_the_first_run_without_a_page() {
        let page = || Some("https://wavegate.example/prs/7".to_owned());
        let run = |n: u32| format!("https://github.com/acme/infra/actions/runs/{n}");
        let record = AttemptRecord {
            members: [
                ("app@prod".into(), MemberState::NotStarted),
                (
                    "dns@prod".into(),
                    MemberState::Failed {
                        error: "exit 1".into(),
                    },
                ),
                (
                    "network@prod".into(),
                    MemberState::Applied {
                        plan_digest: Digest::repeated('d'),
                        outputs: Default::default(),
                        note: None,
                    },
                ),
            ]
            .into(),
            ran_on: [("dns@prod".into(), run(2)), ("network@prod".into(), run(1))].into(),
            ..AttemptRecord::default()
        };
        assert_eq!(CiRuns::of_apply(&record).details_url(page()), Some(run(2)));

        let mut applied = record.clone();
        applied.ran_on.remove("dns@prod");
        let runs = CiRuns::of_apply(&applied);
        assert_eq!(runs.clone().details_url(page()), page());
        assert_eq!(runs.details_url(None), Some(run(1)));
        assert_eq!(
            CiRuns::of_apply(&AttemptRecord::default()).details_url(None),
            None
        );
    }

    #[test]
    fn a_run_waiting_for_a_person_asks_for_action_and_one_waiting_for_a_lock_goes_on() {
        let waiting_for = |wait: Wait| AttemptRecord {
            wait: Some(wait),
            ..AttemptRecord::default()
        };
        let approval = waiting_for(Wait::PrApproval {
            gate: crate::model::GateId::Pr(PrNumber(7)),
            digest: Digest::repeated('d'),
        });
        let lock = waiting_for(Wait::Lock {
            member: MemberId::from("app@prod"),
            pr: PrNumber(8),
        });
        let none = AttemptRecord::default();
        assert_eq!(
            run_check_state(RunStatus::Waiting, &approval),
            CheckState::ActionRequired
        );
        assert_eq!(
            run_check_state(RunStatus::Waiting, &lock),
            CheckState::InProgress
        );
        assert_eq!(
            run_check_state(RunStatus::Running, &none),
            CheckState::InProgress
        );
        assert_eq!(
            run_check_state(RunStatus::Failed, &none),
            CheckState::Failure
        );
        assert_eq!(
            run_check_state(RunStatus::Applied, &none),
            CheckState::Success
        );
        assert_eq!(
            run_check_state(RunStatus::Ended, &none),
            CheckState::Neutral
        );
    }
}
