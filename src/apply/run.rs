//! A run's transitions outside its waves, as pure functions of its status
//! and attempt record: whether the pull request's own approval still
//! stands, which approvals lapsed (expired, or their approver may no longer
//! approve), how it settles at the end of a job (its status, when
//! its wait was posted, the pending fact a new wait leaves, the approvals an
//! applied run spends, the locks it lets go, what the pull request is
//! told), how it stops when it cannot go on, how a dead-lettered job stops
//! it, and what `/retry` does to it. Each returns effects in the order the
//! worker carries them out; the news is typed, and `report::apply` words it.

pub(crate) use super::effect::News;
use super::effect::{Effect, Pending, Step};
use super::{settled_status, AttemptRecord, Lapsed, MemberState, RunStatus, Wait};
use crate::config::repo::Policy;
use crate::gate::counting::{Evaluation, Tally};
use crate::gate::ledger::Actor;
use crate::gate::policy::NotAllowed;
use crate::model::{Digest, GateId, MemberId, UnixMs};
use crate::plan::changeset::ChangeSet;
use std::collections::{BTreeSet, HashSet};

/// What settling a run needs besides its status and record.
#[derive(Debug, Clone)]
pub(crate) struct Settle<'a> {
    pub(crate) pr: crate::model::PrNumber,
    /// The pull request's approved digest and change set.
    pub(crate) digest: &'a Digest,
    pub(crate) approved: &'a ChangeSet,
    /// Every member of the run.
    pub(crate) members: &'a BTreeSet<MemberId>,
    /// The wait and what had failed ([`failures`]) as the job found them.
    pub(crate) previous_wait: Option<&'a Wait>,
    pub(crate) failed_before: &'a BTreeSet<String>,
    pub(crate) now: UnixMs,
}

/// The end of a job: the run's status, then what is recorded, spent, let
/// go, shown and said. A failure outranks a wait: it is said first, with
/// the new wait after it.
pub(crate) fn settle(
    s: &Settle<'_>,
    status: &mut RunStatus,
    record: &mut AttemptRecord,
) -> Vec<Effect> {
    *status = settled_status(record, s.members);
    if *status != RunStatus::Waiting {
        record.at = None;
    }
    let new_wait = record
        .wait
        .as_ref()
        .is_some_and(|w| w.is_new_since(s.previous_wait));
    if new_wait || (record.wait.is_none() && s.previous_wait.is_some()) {
        record.wait_posted_at = s.now;
    }
    let mut effects = Vec::new();
    if new_wait {
        effects.extend(pending_of(s, record).map(Effect::RecordPending));
    }
    // Also what a job left used up without spending it (a crash between
    // an apply and its spend).
    effects.extend(spend_used(record));
    if status.is_final() {
        effects.extend(spent(s, record));
    }
    if status.is_final() || *status == RunStatus::Failed {
        effects.push(Effect::Unlock);
    }
    effects.push(Effect::Publish);
    // The holder may have let go between our refusal and our saying we
    // wait: it wakes the runs it finds waiting, and we look again after
    // saving, so one of the two always sees the other.
    if let Some(Wait::Lock { member, .. }) = &record.wait {
        effects.push(Effect::ResumeIfUnlocked(member.clone()));
    }
    let newly_failed = *status == RunStatus::Failed && failures(record) != *s.failed_before;
    let new_wait = record.wait.clone().filter(|_| new_wait);
    let news = match status {
        RunStatus::Failed if newly_failed => Some(News::Failed {
            meanwhile: new_wait,
        }),
        RunStatus::Applied => Some(News::Applied),
        RunStatus::Ended => Some(News::Ended),
        _ => new_wait.map(News::Waits),
    };
    effects.extend(news.map(Effect::Say));
    effects
}

/// The run cannot go on for a reason given in `why_and_fix`: it fails,
/// shows so, and says why.
pub(crate) fn stop(status: &mut RunStatus, why_and_fix: String) -> Vec<Effect> {
    *status = RunStatus::Failed;
    vec![Effect::Publish, Effect::Say(News::CannotGoOn(why_and_fix))]
}

/// The run's job was dead-lettered: a run still going stops as failed, so
/// `/retry` resumes it from its record, and lets go of its locks.
pub(crate) fn gave_up(status: &mut RunStatus, attempts: u32, error: &str) -> Vec<Effect> {
    if status.is_final() {
        return Vec::new();
    }
    *status = RunStatus::Failed;
    vec![
        Effect::Save,
        Effect::Unlock,
        Effect::Say(News::GaveUp {
            attempts,
            error: error.to_owned(),
        }),
    ]
}

/// What `/retry` did to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// What stopped starts over; the run goes on (save it, then resume it).
    Restarted,
    /// It goes on by itself; a nudge is harmless (its job re-reads the
    /// record) and resumes a run whose job was lost.
    Nudged,
    /// Every member applied: there is nothing to retry.
    NothingLeft,
}

/// `/retry`: a failed or ended run starts over from its record (members
/// that failed, were held, stood down, blocked or waited are planned again
/// first; applied ones stay applied).
pub(crate) fn retry(status: &mut RunStatus, record: &mut AttemptRecord) -> Retry {
    match status {
        RunStatus::Applied => Retry::NothingLeft,
        RunStatus::Failed | RunStatus::Ended => {
            record.reset_for_retry();
            *status = RunStatus::Running;
            Retry::Restarted
        }
        RunStatus::Waiting | RunStatus::Running => Retry::Nudged,
    }
}

/// The pull request's own gate, judged again on every job of its run
/// (`evaluation`: its approvals of `digest` that still count): a revoke
/// stops the run before anything more applies.
pub(crate) fn pr_gate(
    record: &mut AttemptRecord,
    evaluation: Evaluation,
    (gate, digest): (GateId, &Digest),
) -> Step {
    match evaluation {
        Evaluation::Satisfied { by, .. } => {
            record.pr_approved_by = by.into_iter().map(|a| a.login).collect();
            Step::Continue
        }
        _ => {
            record.pr_approved_by.clear();
            record.wait = Some(Wait::PrApproval {
                gate,
                digest: digest.clone(),
            });
            Step::Stop
        }
    }
}

/// The approvals of `digest` at `gate` that expired under `policy`'s
/// `approval_ttl` at `now` (by seq), each noted in the record's `lapsed`
/// so the run says why it waits. None expires once the run went through
/// the gate with it (`passed`).
pub(crate) fn expired_approvals(
    record: &mut AttemptRecord,
    tally: &Tally<'_>,
    (gate, passed): (&GateId, bool),
    (digest, policy): (&Digest, &Policy),
    now: UnixMs,
) -> HashSet<i64> {
    let ttl = policy.approval_ttl().filter(|_| !passed);
    let mut dropped = HashSet::new();
    for approval in tally.expired(digest, ttl, now) {
        note_lapsed(
            record,
            Lapsed {
                gate: gate.to_owned(),
                by: approval.fact.actor.login.clone(),
                why: format!(
                    "it expired at {} (`[policy] approval_ttl` is {})",
                    approval.fact.at + ttl.unwrap_or_default(),
                    policy.approval_ttl.as_deref().unwrap_or("?")
                ),
            },
        );
        dropped.insert(approval.seq);
    }
    dropped
}

/// The approvals of `digest` at `gate` (by seq) whose approver may no
/// longer approve, as `verdicts` says of each standing approver (asked of
/// the forge again whenever a run uses an approval), each noted in the
/// record's `lapsed`.
pub(crate) fn lost_approvals(
    record: &mut AttemptRecord,
    tally: &Tally<'_>,
    (gate, digest): (&GateId, &Digest),
    verdicts: &[(Actor, Result<(), NotAllowed>)],
) -> HashSet<i64> {
    let mut lost = HashSet::new();
    for (actor, verdict) in verdicts {
        if let Err(why) = verdict {
            note_lapsed(
                record,
                Lapsed {
                    gate: gate.to_owned(),
                    by: actor.login.clone(),
                    why: crate::gate::policy::lapsed_reason(why),
                },
            );
            lost.insert(actor.id);
        }
    }
    tally
        .approvals_of(digest)
        .filter(|approval| lost.contains(&approval.fact.actor.id))
        .map(|approval| approval.seq)
        .collect()
}

fn note_lapsed(record: &mut AttemptRecord, lapsed: Lapsed) {
    if !record.lapsed.contains(&lapsed) {
        record.lapsed.push(lapsed);
    }
}

/// The members that failed, for telling a new failure from one said before.
/// Everything that failed: the failed members, and each `after.apply`
/// hook that failed after its members applied (`Settle::failed_before`).
pub(crate) fn failures(record: &AttemptRecord) -> BTreeSet<String> {
    let mut all = failed(record);
    all.extend(super::hooks::failures_after_apply(record).map(|h| h.call.label()));
    all
}

pub(crate) fn failed(record: &AttemptRecord) -> BTreeSet<String> {
    record
        .members
        .iter()
        .filter(|(_, s)| matches!(s, MemberState::Failed { .. }))
        .map(|(m, _)| m.to_string())
        .collect()
}

/// The approvals an ended run used, each spent so none lets anything
/// through again: the pull request's, and each approved stage gate (or
/// wave's) and round not spent yet.
fn spent(s: &Settle<'_>, record: &mut AttemptRecord) -> Vec<Effect> {
    let pr = crate::model::GateId::Pr(s.pr);
    let used: Vec<(GateId, Digest)> = std::iter::once((pr, s.digest.clone()))
        .chain(approved_gates(record).map(|(gate, set)| (gate.clone(), set.digest.clone())))
        .collect();
    spend(record, used)
}

/// The approvals of stage gates (a stage's or one wave's) and rounds
/// whose every member has applied (or ended without applying, on
/// purpose), not spent yet: each is spent now rather than when the run
/// ends (seeds 004: an approval is spent once the wave under it applied),
/// so a run that fails later and is never retried leaves none standing.
pub(crate) fn spend_used(record: &mut AttemptRecord) -> Vec<Effect> {
    let placed: BTreeSet<&MemberId> = record
        .layout
        .iter()
        .flat_map(|(_, waves)| waves.iter().flatten())
        .collect();
    let done = |m: &MemberId| {
        let state = record.state(m);
        let ended = state.is_applied()
            || matches!(
                state,
                MemberState::StoodDown { .. } | MemberState::Unaffected
            );
        ended && !record.after_apply_due.contains(m)
    };
    let used: Vec<(GateId, Digest)> = approved_gates(record)
        .filter(|(_, set)| {
            let mut members = set
                .members
                .iter()
                .map(|m| &m.member)
                .filter(|m| placed.contains(m))
                .peekable();
            members.peek().is_some() && members.all(done)
        })
        .map(|(gate, set)| (gate.clone(), set.digest.clone()))
        .collect();
    spend(record, used)
}

/// Each approved stage gate and round of the run, with the set approved.
fn approved_gates(record: &AttemptRecord) -> impl Iterator<Item = (&GateId, &ChangeSet)> {
    record
        .gate_sets()
        .filter(|(_, _, by)| !by.is_empty())
        .map(|(gate, set, _)| (gate, set))
}

/// Spends each of `used` that the run has not spent yet, and notes it.
fn spend(record: &mut AttemptRecord, used: Vec<(GateId, Digest)>) -> Vec<Effect> {
    used.into_iter()
        .filter(|used| record.spent.insert(used.clone()))
        .map(|(gate, digest)| Effect::SpendApproval { gate, digest })
        .collect()
}

/// What the run's wait asks of a person, for its `pending` fact; none for
/// waits that end by themselves.
fn pending_of(s: &Settle<'_>, record: &AttemptRecord) -> Option<Pending> {
    let pr = s.pr;
    let wait = record.wait.as_ref()?;
    let members = record.members_of_wait(wait).unwrap_or_else(|| {
        s.approved
            .members
            .iter()
            .map(|m| m.member.clone())
            .collect()
    });
    let (gate, digest, description) = match wait {
        Wait::PrApproval { gate, digest } => (
            gate,
            digest,
            format!("merged pull request {pr} waits for an approval of its change set"),
        ),
        Wait::Stage { stage, gate, digest } => (
            gate,
            digest,
            format!("stage {stage} of pull request {pr} waits for `{}` of its plans on the merge commit", gate.approve_words()),
        ),
        Wait::Round { round, gate, digest } => (
            gate,
            digest,
            format!("round {round} of pull request {pr}: plans that moved since they were approved"),
        ),
        Wait::Override { gate, digest, .. } => (
            gate,
            digest,
            format!(
                "the policy denied {}; an overrider may let each through",
                wait.denials()
                    .iter()
                    .map(|d| format!("{}'s plan {} ({})", d.member, d.digest, d.rules.join(", ")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Wait::Hook {
            stage,
            moment,
            hook,
            gate,
            digest,
            hold,
            ..
        } => (
            gate,
            digest,
            if *hold {
                format!("the {moment} hook `{hook}` of stage {stage} of pull request {pr} holds the stage until this is approved")
            } else {
                format!("the {moment} hook `{hook}` of stage {stage} of pull request {pr} failed; approving lets the stage go on")
            },
        ),
        Wait::Lock { .. } | Wait::EarlierAttempt { .. } | Wait::Holder { .. } => return None,
    };
    Some(Pending {
        gate: gate.clone(),
        digest: digest.clone(),
        members,
        description,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::tests::{plan, set_of};
    use crate::apply::{Round, StageGate};
    use crate::model::time::in_tests::unix;
    use crate::model::PrNumber;
    use serde_json::Map;

    const NOW: UnixMs = unix(5_000);

    fn applied() -> MemberState {
        MemberState::Applied {
            plan_digest: Digest::repeated('d'),
            outputs: Map::new(),
            note: None,
        }
    }

    fn round(number: u32, approved_by: &[&str]) -> Round {
        let set = set_of(&[&plan("app@prod", &number.to_string())]);
        Round {
            number,
            gate: crate::model::GateId::Round(PrNumber(7), number),
            stage: "prod".into(),
            change_set: set,
            reasons: vec!["app@prod: moved".into()],
            filled: vec![],
            approved_by: approved_by.iter().map(|a| (*a).to_owned()).collect(),
            mismatch: None,
        }
    }

    struct Job {
        pr_digest: Digest,
        approved: ChangeSet,
        members: BTreeSet<MemberId>,
        previous_wait: Option<Wait>,
        failed_before: BTreeSet<String>,
    }

    impl Job {
        fn new(members: &[&str]) -> Self {
            Job {
                pr_digest: Digest::repeated('7'),
                approved: set_of(&[&plan("app@prod", "a")]),
                members: members.iter().map(|m| (*m).into()).collect(),
                previous_wait: None,
                failed_before: BTreeSet::new(),
            }
        }

        fn settle(&self, status: &mut RunStatus, record: &mut AttemptRecord) -> Vec<Effect> {
            let s = Settle {
                pr: PrNumber(7),
                digest: &self.pr_digest,
                approved: &self.approved,
                members: &self.members,
                previous_wait: self.previous_wait.as_ref(),
                failed_before: &self.failed_before,
                now: NOW,
            };
            settle(&s, status, record)
        }
    }

    #[test]
    fn a_run_that_applied_spends_every_approval_it_used_lets_go_and_says_so() {
        let job = Job::new(&["app@dev", "app@prod"]);
        let mut record = AttemptRecord::default();
        record.set(&"app@dev".into(), applied());
        record.set(&"app@prod".into(), applied());
        record.at = Some(("prod".into(), 1));
        record.stages.insert(
            "prod".into(),
            StageGate {
                approved_by: vec!["erin".into()],
                ..StageGate::open_for_test("pr-7-prod", set_of(&[&plan("app@prod", "a")]))
            },
        );
        record.rounds = vec![round(2, &["erin"]), round(3, &[])];
        let mut status = RunStatus::Running;
        let effects = job.settle(&mut status, &mut record);
        let spend = |gate: &str, digest: &Digest| Effect::SpendApproval {
            gate: gate.parse().unwrap(),
            digest: digest.clone(),
        };
        assert_eq!(
            effects,
            [
                spend("pr-7", &job.pr_digest),
                spend("pr-7-prod", &record.stages["prod"].change_set.digest),
                spend("pr-7-round-2", &record.rounds[0].change_set.digest),
                Effect::Unlock,
                Effect::Publish,
                Effect::Say(News::Applied),
            ],
            "the unapproved round 3 spends nothing"
        );
        assert_eq!((status, record.at), (RunStatus::Applied, None));
    }

    #[test]
    fn an_approval_is_spent_once_what_it_let_through_applied_and_never_twice() {
        let wave_gate = |gate: &str, members: &[&str]| {
            let plans: Vec<_> = members.iter().map(|m| plan(m, "a")).collect();
            StageGate {
                approved_by: vec!["erin".into()],
                ..StageGate::open_for_test(gate, set_of(&plans.iter().collect::<Vec<_>>()))
            }
        };
        let mut record = AttemptRecord {
            layout: vec![(
                "prod".into(),
                vec![
                    vec!["net@prod".into()],
                    vec!["app@prod".into(), "db@prod".into()],
                ],
            )],
            ..AttemptRecord::default()
        };
        record.stages.insert(
            "prod wave 1".into(),
            wave_gate("pr-7-prod-wave-1", &["net@prod"]),
        );
        record.stages.insert(
            "prod wave 2".into(),
            wave_gate("pr-7-prod-wave-2", &["app@prod", "db@prod"]),
        );
        let spend = |key: &str, record: &AttemptRecord| Effect::SpendApproval {
            gate: record.stages[key].gate.clone(),
            digest: record.stages[key].change_set.digest.clone(),
        };
        assert_eq!(spend_used(&mut record), [], "nothing applied yet");

        record.set(&"net@prod".into(), applied());
        record.after_apply_due.insert("net@prod".into());
        assert_eq!(spend_used(&mut record), [], "its after.apply hooks are due");
        record.after_apply_due.clear();
        assert_eq!(spend_used(&mut record), [spend("prod wave 1", &record)]);
        assert_eq!(spend_used(&mut record), [], "spent once");

        record.set(&"app@prod".into(), applied());
        record.set(
            &"db@prod".into(),
            MemberState::Failed {
                error: "boom".into(),
            },
        );
        assert_eq!(
            spend_used(&mut record),
            [],
            "db@prod may still apply under it"
        );
        record.set(
            &"db@prod".into(),
            MemberState::StoodDown {
                reason: "a newer push".into(),
            },
        );
        assert_eq!(spend_used(&mut record), [spend("prod wave 2", &record)]);
        // `/retry` starts db@prod over: wave 2's spent approval is read from
        // the ledger again (it lets nothing through twice); wave 1's stays.
        let mut retried = record.clone();
        retried.reset_for_retry();
        let wave_1 = &record.stages["prod wave 1"];
        assert_eq!(
            retried.spent,
            [(wave_1.gate.clone(), wave_1.change_set.digest.clone())].into()
        );

        // The run's end spends the pull request's approval, and nothing twice.
        let job = Job::new(&["net@prod", "app@prod", "db@prod"]);
        let mut status = RunStatus::Running;
        let effects = job.settle(&mut status, &mut record);
        let spends: Vec<&Effect> = effects
            .iter()
            .filter(|e| matches!(e, Effect::SpendApproval { .. }))
            .collect();
        assert_eq!(
            spends,
            [&Effect::SpendApproval {
                gate: "pr-7".parse().unwrap(),
                digest: job.pr_digest.clone(),
            }]
        );
    }

    #[test]
    fn a_new_wait_for_a_person_leaves_a_pending_fact_and_is_said_once() {
        let mut job = Job::new(&["app@prod"]);
        let mut record = AttemptRecord {
            rounds: vec![round(2, &[])],
            ..AttemptRecord::default()
        };
        let wait = Wait::Round {
            round: 2,
            gate: "pr-7-round-2".parse().unwrap(),
            digest: record.rounds[0].change_set.digest.clone(),
        };
        record.wait = Some(wait.clone());
        let mut status = RunStatus::Running;
        assert_eq!(
            job.settle(&mut status, &mut record),
            [
                Effect::RecordPending(Pending {
                    gate: "pr-7-round-2".parse().unwrap(),
                    digest: record.rounds[0].change_set.digest.clone(),
                    members: vec!["app@prod".into()],
                    description:
                        "round 2 of pull request #7: plans that moved since they were approved"
                            .into(),
                }),
                Effect::Publish,
                Effect::Say(News::Waits(wait.clone())),
            ]
        );
        assert_eq!((status, record.wait_posted_at), (RunStatus::Waiting, NOW));

        // The next job finds the same wait: shown again, not said again.
        job.previous_wait = Some(wait);
        record.wait_posted_at = unix(1);
        assert_eq!(job.settle(&mut status, &mut record), [Effect::Publish]);
        assert_eq!(
            record.wait_posted_at,
            unix(1),
            "the wait was posted earlier"
        );
    }

    #[test]
    fn a_new_failure_outranks_a_new_wait_and_is_said_with_it_once() {
        let mut job = Job::new(&["app@dev", "db@dev"]);
        let mut record = AttemptRecord::default();
        record.set(
            &"app@dev".into(),
            MemberState::Failed {
                error: "exit 1".into(),
            },
        );
        let wait = Wait::Lock {
            member: "db@dev".into(),
            pr: crate::model::PrNumber(3),
        };
        record.wait = Some(wait.clone());
        let mut status = RunStatus::Running;
        assert_eq!(
            job.settle(&mut status, &mut record),
            [
                Effect::Unlock,
                Effect::Publish,
                Effect::ResumeIfUnlocked("db@dev".into()),
                Effect::Say(News::Failed {
                    meanwhile: Some(wait.clone())
                }),
            ],
            "a lock wait leaves no pending fact and is looked at again after saving"
        );
        assert_eq!(status, RunStatus::Failed);

        job.failed_before = failures(&record);
        job.previous_wait = Some(wait);
        assert_eq!(
            job.settle(&mut status, &mut record),
            [
                Effect::Unlock,
                Effect::Publish,
                Effect::ResumeIfUnlocked("db@dev".into())
            ]
        );
    }

    #[test]
    fn a_member_that_stood_down_ends_the_run() {
        let job = Job::new(&["app@dev"]);
        let mut record = AttemptRecord::default();
        record.set(
            &"app@dev".into(),
            MemberState::StoodDown {
                reason: "frozen".into(),
            },
        );
        let mut status = RunStatus::Running;
        let effects = job.settle(&mut status, &mut record);
        assert_eq!(status, RunStatus::Ended);
        assert_eq!(effects.last(), Some(&Effect::Say(News::Ended)));
    }

    #[test]
    fn a_run_stopped_or_given_up_fails_and_says_why_and_a_finished_one_stays_finished() {
        let mut status = RunStatus::Running;
        assert_eq!(
            stop(&mut status, "the config is broken".into()),
            [
                Effect::Publish,
                Effect::Say(News::CannotGoOn("the config is broken".into()))
            ]
        );
        assert_eq!(status, RunStatus::Failed);

        let mut status = RunStatus::Waiting;
        let effects = gave_up(&mut status, 4, "timeout");
        assert_eq!(effects[..2], [Effect::Save, Effect::Unlock]);
        assert_eq!(status, RunStatus::Failed);

        let mut status = RunStatus::Applied;
        assert_eq!(gave_up(&mut status, 4, "timeout"), []);
        assert_eq!(status, RunStatus::Applied);
    }

    #[test]
    fn retry_starts_a_stopped_run_over_and_leaves_a_going_one_be() {
        let mut record = AttemptRecord::default();
        record.set(&"app@dev".into(), applied());
        record.set(
            &"db@dev".into(),
            MemberState::Failed {
                error: "exit 1".into(),
            },
        );
        let mut status = RunStatus::Failed;
        assert_eq!(retry(&mut status, &mut record), Retry::Restarted);
        assert_eq!(status, RunStatus::Running);
        assert_eq!(record.state("db@dev"), MemberState::NotStarted);
        assert!(record.state("app@dev").is_applied());

        let mut status = RunStatus::Waiting;
        assert_eq!(retry(&mut status, &mut record), Retry::Nudged);
        assert_eq!(status, RunStatus::Waiting);

        let mut status = RunStatus::Applied;
        assert_eq!(retry(&mut status, &mut record), Retry::NothingLeft);
    }

    mod approvals {
        //! Whether a run's gates still count the approvals they were given.
        use super::*;
        use crate::gate::counting::Scope;
        use crate::gate::ledger::testing::{alice, bob, digest, ledger, new_fact};
        use crate::gate::ledger::FactKind;
        use std::time::Duration;

        /// When `new_fact` dates a fact.
        const GIVEN: UnixMs = UnixMs::from_millis(1_700_000_000_000);
        const HOUR: Duration = Duration::from_secs(3600);

        fn gate() -> GateId {
            GateId::Pr(PrNumber(42))
        }

        fn approvals_of_a_by_alice_and_bob() -> Vec<crate::gate::ledger::Fact> {
            ledger(vec![
                new_fact(FactKind::Approved, digest('a'), alice()),
                new_fact(FactKind::Approved, digest('a'), bob()),
            ])
        }

        fn policy(ttl: Option<&str>) -> Policy {
            Policy {
                approval_ttl: ttl.map(str::to_owned),
                ..Policy::default()
            }
        }

        #[test]
        fn the_pull_request_gate_goes_on_while_its_approval_stands_and_names_who_gave_it() {
            let facts = approvals_of_a_by_alice_and_bob();
            let tally = Tally::new(&facts, Scope::All);
            let mut record = AttemptRecord::default();
            let step = pr_gate(
                &mut record,
                tally.evaluate(&digest('a'), 1),
                (gate(), &digest('a')),
            );
            assert_eq!(step, Step::Continue);
            assert_eq!(record.pr_approved_by, ["alice", "bob"]);
            assert_eq!(record.wait, None);
        }

        #[test]
        fn a_revoked_pull_request_approval_stops_the_run_waiting_for_a_new_one() {
            let facts = ledger(vec![
                new_fact(FactKind::Approved, digest('a'), alice()),
                new_fact(FactKind::Revoked, digest('a'), alice()),
            ]);
            let tally = Tally::new(&facts, Scope::All);
            let mut record = AttemptRecord {
                pr_approved_by: vec!["alice".into()],
                ..AttemptRecord::default()
            };
            let step = pr_gate(
                &mut record,
                tally.evaluate(&digest('a'), 1),
                (gate(), &digest('a')),
            );
            assert_eq!(step, Step::Stop);
            assert!(record.pr_approved_by.is_empty());
            assert_eq!(
                record.wait,
                Some(Wait::PrApproval {
                    gate: gate(),
                    digest: digest('a')
                })
            );
        }

        #[test]
        fn an_approval_older_than_the_ttl_lapses_and_the_record_says_when_it_expired() {
            let facts = approvals_of_a_by_alice_and_bob();
            let tally = Tally::new(&facts, Scope::All);
            let mut record = AttemptRecord::default();
            // Alice's approval is a second older than Bob's: only hers expired.
            let now = GIVEN + HOUR + Duration::from_millis(500);
            let ttl = policy(Some("1h"));
            let dropped = expired_approvals(
                &mut record,
                &tally,
                (&gate(), false),
                (&digest('a'), &ttl),
                now,
            );
            assert_eq!(dropped, HashSet::from([facts[0].seq]));
            assert_eq!(record.lapsed.len(), 1);
            assert_eq!(record.lapsed[0].by, "alice");
            assert!(
                record.lapsed[0].why.starts_with("it expired at ")
                    && record.lapsed[0]
                        .why
                        .ends_with("(`[policy] approval_ttl` is 1h)"),
                "{}",
                record.lapsed[0].why
            );
            // Looked at again in a later job: noted once.
            expired_approvals(
                &mut record,
                &tally,
                (&gate(), false),
                (&digest('a'), &ttl),
                now,
            );
            assert_eq!(record.lapsed.len(), 1);
        }

        #[test]
        fn nothing_expires_without_a_ttl_or_once_the_run_went_through_the_gate() {
            let facts = approvals_of_a_by_alice_and_bob();
            let tally = Tally::new(&facts, Scope::All);
            let mut record = AttemptRecord::default();
            let later = GIVEN + 100 * HOUR;
            let no_ttl = policy(None);
            let at = (&digest('a'), &no_ttl);
            assert!(expired_approvals(&mut record, &tally, (&gate(), false), at, later).is_empty());
            let ttl = policy(Some("1h"));
            let passed = (&gate(), true);
            let at = (&digest('a'), &ttl);
            assert!(expired_approvals(&mut record, &tally, passed, at, later).is_empty());
            assert!(record.lapsed.is_empty());
        }

        #[test]
        fn an_approver_who_may_no_longer_approve_loses_every_approval_of_the_digest() {
            let facts = ledger(vec![
                new_fact(FactKind::Approved, digest('a'), alice()),
                new_fact(FactKind::Approved, digest('a'), bob()),
                new_fact(FactKind::Approved, digest('a'), alice()),
            ]);
            let tally = Tally::new(&facts, Scope::All);
            let mut record = AttemptRecord::default();
            let verdicts = [(alice(), Err(NotAllowed::NoWriteAccess)), (bob(), Ok(()))];
            let lost = lost_approvals(&mut record, &tally, (&gate(), &digest('a')), &verdicts);
            assert_eq!(lost, HashSet::from([facts[0].seq, facts[2].seq]));
            assert_eq!(
                record.lapsed,
                [Lapsed {
                    gate: gate(),
                    by: "alice".into(),
                    why: crate::gate::policy::lapsed_reason(&NotAllowed::NoWriteAccess),
                }]
            );
        }
    }
}
