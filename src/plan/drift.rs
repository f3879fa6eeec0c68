//! What a drift check decides (docs/drift.md), pure: which members drifted
//! (a plan of the default branch's head against what is deployed that is
//! not empty), how they are told (one issue per member, or one per stage),
//! and what becomes of each subject's issue: opened once, updated when the
//! drift changes, left alone when it does not, closed when it is clean.

use super::changeset::MemberStatus;
use super::outcome::MemberOutcome;
use crate::config::raw::DriftIssues;
use crate::model::{Digest, DriftSubject, MemberId, StageName};

/// What one member's plan says about its drift.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// Its plan changes nothing: what is deployed is what the code says.
    Clean,
    /// Its plan changes something.
    Drifted,
    /// It could not be planned: why.
    Failed(String),
    /// Nothing is known: its plan cannot tell (an opaque plan always
    /// applies), or it was not planned because an upstream failed.
    CannotTell,
}

pub(crate) fn finding(outcome: &MemberOutcome) -> Finding {
    match (&outcome.status, &outcome.plan) {
        (MemberStatus::Planned, Some(plan)) if plan.opaque => Finding::CannotTell,
        (MemberStatus::Planned, Some(plan)) if plan.is_empty() => Finding::Clean,
        (MemberStatus::Planned, Some(_)) => Finding::Drifted,
        // Its upstream's failure is told on the upstream's issue.
        (MemberStatus::Blocked, _) => Finding::CannotTell,
        _ => Finding::Failed(
            outcome
                .error
                .clone()
                .unwrap_or_else(|| "the plan failed".to_owned()),
        ),
    }
}

/// One subject's drift as this check found it: the members its issue
/// shows, and those that could not be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) subject: DriftSubject,
    pub(crate) drifted: Vec<MemberId>,
    /// Members that could not be planned, with why.
    pub(crate) failed: Vec<(MemberId, String)>,
}

impl Found {
    pub(crate) fn is_clean(&self) -> bool {
        self.drifted.is_empty() && self.failed.is_empty()
    }

    /// The failures as one text, to tell whether they changed.
    pub(crate) fn failing(&self) -> Option<String> {
        (!self.failed.is_empty()).then(|| {
            self.failed
                .iter()
                .map(|(member, why)| format!("{member}: {why}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// The subjects of `stage` as `issues` tells them, from each member's
/// finding (members that cannot tell are left out). Every other member is a
/// subject of its own when issues are per member, found clean or not, so
/// an open issue of a member found clean is closed.
pub(crate) fn subjects(
    stage: &StageName,
    findings: &[(MemberId, Finding)],
    issues: DriftIssues,
) -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    for (member, finding) in findings {
        let subject = match issues {
            // Nothing is known of it: its issue, if any, stays as it is.
            DriftIssues::Member if *finding == Finding::CannotTell => continue,
            DriftIssues::Member => DriftSubject::Member(member.clone()),
            DriftIssues::Stage => DriftSubject::Stage(stage.clone()),
        };
        let at = match found.iter().position(|f| f.subject == subject) {
            Some(at) => at,
            None => {
                found.push(Found {
                    subject,
                    drifted: Vec::new(),
                    failed: Vec::new(),
                });
                found.len() - 1
            }
        };
        match finding {
            Finding::Drifted => found[at].drifted.push(member.clone()),
            Finding::Failed(why) => found[at].failed.push((member.clone(), why.clone())),
            Finding::Clean | Finding::CannotTell => {}
        }
    }
    found
}

/// A subject's open issue as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Told {
    pub(crate) digest: Option<Digest>,
    pub(crate) failing: Option<String>,
    /// An apply run started from it (its number is spent on that run).
    pub(crate) has_run: bool,
}

/// What becomes of a subject's issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to tell, and no issue.
    Nothing,
    /// A new issue; `news`: the drift is new (not a failure alone).
    Open { news: bool },
    /// Its issue shows the new drift or failure; `news`: the drift moved.
    Update { news: bool },
    /// The drift moved on an issue an apply run was started from: that
    /// issue is closed, pointing at a new one.
    Supersede,
    /// Its issue stays as it is.
    Unchanged,
    /// Clean: its issue is closed.
    Close,
}

/// `digest`: of the drifted members' plans, when any drifted.
pub(crate) fn verdict(found: &Found, digest: Option<&Digest>, told: Option<&Told>) -> Verdict {
    let failing = found.failing();
    let Some(told) = told else {
        return match (digest, failing) {
            (Some(_), _) => Verdict::Open { news: true },
            (None, Some(_)) => Verdict::Open { news: false },
            (None, None) => Verdict::Nothing,
        };
    };
    if found.is_clean() {
        return Verdict::Close;
    }
    let drift_moved = digest.is_some() && digest != told.digest.as_ref();
    if drift_moved && told.has_run {
        return Verdict::Supersede;
    }
    // A check that only fails keeps the drift it showed before: nothing
    // is known to have changed about it.
    if drift_moved || failing != told.failing {
        return Verdict::Update { news: drift_moved };
    }
    Verdict::Unchanged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> MemberId {
        name.parse().unwrap()
    }

    fn found(drifted: &[&str], failed: &[&str]) -> Found {
        Found {
            subject: DriftSubject::Member(member("net@prod")),
            drifted: drifted.iter().map(|m| member(m)).collect(),
            failed: failed
                .iter()
                .map(|m| (member(m), "exit 1".to_owned()))
                .collect(),
        }
    }

    fn told(digest: Option<char>, failing: Option<&str>, has_run: bool) -> Told {
        Told {
            digest: digest.map(Digest::repeated),
            failing: failing.map(str::to_owned),
            has_run,
        }
    }

    #[test]
    fn new_drift_opens_an_issue_and_is_news_a_failure_alone_opens_one_quietly() {
        let a = Digest::repeated('a');
        assert_eq!(
            verdict(&found(&["net@prod"], &[]), Some(&a), None),
            Verdict::Open { news: true }
        );
        assert_eq!(
            verdict(&found(&[], &["net@prod"]), None, None),
            Verdict::Open { news: false }
        );
        assert_eq!(verdict(&found(&[], &[]), None, None), Verdict::Nothing);
    }

    #[test]
    fn the_same_drift_again_changes_nothing_and_tells_no_one() {
        let a = Digest::repeated('a');
        let known = told(Some('a'), None, false);
        assert_eq!(
            verdict(&found(&["net@prod"], &[]), Some(&a), Some(&known)),
            Verdict::Unchanged
        );
    }

    #[test]
    fn drift_that_moved_updates_its_issue_and_is_news() {
        let b = Digest::repeated('b');
        let known = told(Some('a'), None, false);
        assert_eq!(
            verdict(&found(&["net@prod"], &[]), Some(&b), Some(&known)),
            Verdict::Update { news: true }
        );
    }

    #[test]
    fn drift_that_moved_after_an_apply_was_started_gets_a_new_issue() {
        let b = Digest::repeated('b');
        let known = told(Some('a'), None, true);
        assert_eq!(
            verdict(&found(&["net@prod"], &[]), Some(&b), Some(&known)),
            Verdict::Supersede
        );
    }

    #[test]
    fn a_failure_updates_the_issue_once_and_keeps_its_drift() {
        let known = told(Some('a'), None, false);
        assert_eq!(
            verdict(&found(&[], &["net@prod"]), None, Some(&known)),
            Verdict::Update { news: false }
        );
        let still = told(Some('a'), Some("net@prod: exit 1"), false);
        assert_eq!(
            verdict(&found(&[], &["net@prod"]), None, Some(&still)),
            Verdict::Unchanged
        );
    }

    #[test]
    fn a_clean_subject_closes_its_issue() {
        let known = told(Some('a'), Some("net@prod: exit 1"), true);
        assert_eq!(
            verdict(&found(&[], &[]), None, Some(&known)),
            Verdict::Close
        );
    }

    #[test]
    fn members_are_subjects_of_their_own_or_of_their_stage() {
        let stage = StageName::new("prod");
        let findings = vec![
            (member("net@prod"), Finding::Drifted),
            (member("app@prod"), Finding::Clean),
            (member("db@prod"), Finding::Failed("exit 1".into())),
            (member("job@prod"), Finding::CannotTell),
        ];
        let each = subjects(&stage, &findings, DriftIssues::Member);
        assert_eq!(each.len(), 3, "one that cannot tell is no subject");
        assert_eq!(each[0].drifted, vec![member("net@prod")]);
        assert!(each[1].is_clean());
        assert_eq!(each[2].failing().as_deref(), Some("db@prod: exit 1"));
        let one = subjects(&stage, &findings, DriftIssues::Stage);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].subject, DriftSubject::Stage(stage));
        assert_eq!(one[0].drifted, vec![member("net@prod")]);
        assert_eq!(one[0].failed.len(), 1);
    }
}
