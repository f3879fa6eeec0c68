//! How a gate's facts count: which approvals stand (neither revoked nor
//! spent), which plan each was given for, whether they let a digest through,
//! what stands for an earlier plan, which approvals expired, and what a
//! `/revoke` withdraws. Pure: the worker reads the facts and the forge, the
//! report words the outcome.

use super::fact_data::FactData;
use super::ledger::{Actor, Fact, FactDigest, FactKind, NewFact, Source};
use crate::model::Digest;
use crate::model::{CommitSha, UnixMs};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// Which of a gate's facts bear on the decision at hand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// A pull request's own gate, judged for its plan at `head` on `base`:
    /// an approval or revoke given at another head or base stands for
    /// another plan, whatever its digest; review approvals count only while
    /// the base's policy counts them.
    Plan {
        head: &'a CommitSha,
        base: &'a CommitSha,
        reviews_count: bool,
    },
    /// A gate of one apply run: the approvals given in that run, at or after
    /// `since` (a gate opened afresh counts only the approvals given since).
    Run { run: i64, since: UnixMs },
    /// The override of one member's denied plan: given in run `run`, or
    /// during review (before any run).
    Override { member: &'a str, run: i64 },
    /// Every approval of the gate.
    All,
}

/// Which plan a fact was given for, as it bears on the one judged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Given {
    /// The plan judged (or a fact bound to no plan).
    Judged,
    /// Another plan of the pull request: given at `head` on `base` (`None`
    /// for an approval from before approvals named their commits).
    Earlier {
        head: Option<CommitSha>,
        base: Option<CommitSha>,
    },
}

/// An approval that stands, with the plan it was given for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ballot<'a> {
    pub(crate) fact: &'a Fact,
    /// The digest it approves.
    pub(crate) digest: &'a Digest,
    pub(crate) given: &'a Given,
}

/// An approval that stands but lets the judged digest nothing: of another
/// digest, or given for another plan; or one of this digest that expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Elsewhere {
    pub(crate) by: Actor,
    pub(crate) digest: Digest,
    pub(crate) given: Given,
    /// When it was given (unix ms).
    pub(crate) at: UnixMs,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Evaluation {
    Satisfied {
        by: Vec<Actor>,
        count: usize,
        required: usize,
    },
    Waiting {
        have: Vec<Actor>,
        count: usize,
        required: usize,
    },
    /// No approval of this digest stands, but one of another does (or one
    /// given for another plan): the most recent such.
    Mismatch(Elsewhere),
}

/// How a gate stands for one digest, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) evaluation: Evaluation,
    /// When each counted approver last approved (unix ms), by login.
    pub(crate) approved_at: Vec<(String, UnixMs)>,
    /// Standing approvals that count for another digest or plan.
    pub(crate) elsewhere: Vec<Elsewhere>,
    /// Standing approvals of the digest that expired (`at`: when given).
    pub(crate) expired: Vec<Elsewhere>,
}

/// A gate's facts read for one scope: each fact with the plan it was given
/// for. Build once, ask many questions.
#[derive(Debug)]
pub(crate) struct Tally<'a> {
    /// The standing approvals, each with the plan it was given for, in seq
    /// order: worked out once, since every question starts from them.
    standing: Vec<(&'a Fact, &'a Digest, Given)>,
}

impl<'a> Tally<'a> {
    /// `facts`: every fact of the gate (any digest), in seq order.
    pub(crate) fn new(facts: &'a [Fact], scope: Scope<'_>) -> Self {
        let read: Vec<(&Fact, Given)> = facts
            .iter()
            .filter(|fact| in_scope(&fact.fact, scope))
            .map(|fact| (fact, given(&fact.fact, scope)))
            .collect();
        let standing = read
            .iter()
            .enumerate()
            .filter(|(index, (fact, given))| {
                fact.fact.kind.approves()
                    && !read[index + 1..].iter().any(|(later, later_given)| {
                        withdraws((&later.fact, later_given), (&fact.fact, given))
                    })
            })
            // An approval names one digest (`/approve` reads one); a fact
            // that names every digest approves nothing.
            .filter_map(|(_, (fact, given))| {
                Some((*fact, fact.fact.digest.digest()?, given.clone()))
            })
            .collect();
        Self { standing }
    }

    /// Approvals neither revoked by their approver (or by an admin for
    /// everyone) nor spent by an apply of their digest, in seq order.
    pub(crate) fn standing(&self) -> impl Iterator<Item = Ballot<'_>> + '_ {
        self.standing.iter().map(|(fact, digest, given)| Ballot {
            fact,
            digest,
            given,
        })
    }

    /// Whether the gate lets `digest` through. Standing approvals of exactly
    /// `digest`, given for the plan judged, count once per approver id;
    /// `refused` and `pending` never count. Short of `required`, a gate with
    /// no approval of `digest` but one standing elsewhere is a mismatch
    /// naming the most recent such.
    pub(crate) fn evaluate(&self, digest: &Digest, required: usize) -> Evaluation {
        self.evaluate_without(digest, required, &HashSet::new())
    }

    /// As [`Tally::evaluate`], leaving out the approvals (by seq) in `dropped`:
    /// expired, or given by someone who may no longer approve.
    pub(crate) fn evaluate_without(
        &self,
        digest: &Digest,
        required: usize,
        dropped: &HashSet<i64>,
    ) -> Evaluation {
        let mut counted = HashSet::new();
        let mut approvers = Vec::new();
        let mut elsewhere = None;
        for ballot in self.standing().filter(|b| !dropped.contains(&b.fact.seq)) {
            if counts_for(&ballot, digest) {
                if counted.insert(ballot.fact.fact.actor.id) {
                    approvers.push(ballot.fact.fact.actor.clone());
                }
            } else {
                elsewhere = Some(ballot);
            }
        }
        let count = approvers.len();
        if count >= required {
            return Evaluation::Satisfied {
                by: approvers,
                count,
                required,
            };
        }
        match elsewhere {
            Some(ballot) if count == 0 => Evaluation::Mismatch(ballot.elsewhere()),
            _ => Evaluation::Waiting {
                have: approvers,
                count,
                required,
            },
        }
    }

    /// The standing approvals of `digest` given for the plan judged, in seq order.
    pub(crate) fn approvals_of<'t>(
        &'t self,
        digest: &'t Digest,
    ) -> impl Iterator<Item = &'t Fact> + 't {
        self.standing()
            .filter(move |b| counts_for(b, digest))
            .map(|b| b.fact)
    }

    /// Every standing approver of `digest` (given for the plan judged), once
    /// each, leaving out the approvals (by seq) in `dropped`.
    pub(crate) fn approvers_of(&self, digest: &Digest, dropped: &HashSet<i64>) -> Vec<Actor> {
        let mut seen = HashSet::new();
        self.approvals_of(digest)
            .filter(|f| !dropped.contains(&f.seq) && seen.insert(f.fact.actor.id))
            .map(|f| f.fact.actor.clone())
            .collect()
    }

    /// Standing approvals that do not count for `digest` (for the report's
    /// "for an earlier plan"): one per approver, digest and plan, the most
    /// recent, in seq order.
    pub(crate) fn elsewhere(&self, digest: &Digest) -> Vec<Elsewhere> {
        let standing: Vec<Ballot<'_>> = self
            .standing()
            .filter(|ballot| !counts_for(ballot, digest))
            .collect();
        let mut seen = HashSet::new();
        let mut newest_first: Vec<Elsewhere> = standing
            .into_iter()
            .rev()
            .filter(|b| seen.insert((b.fact.fact.actor.id, b.fact.fact.digest.as_str(), b.given)))
            .map(|b| b.elsewhere())
            .collect();
        newest_first.reverse();
        newest_first
    }

    /// The standing approvals of `digest` (given for the plan judged) older
    /// than `ttl` at `now`, by seq.
    pub(crate) fn expired<'t>(
        &'t self,
        digest: &'t Digest,
        ttl: Option<Duration>,
        now: UnixMs,
    ) -> Vec<&'t Fact> {
        self.approvals_of(digest)
            .filter(|f| super::policy::expired(f.fact.at, ttl, now))
            .collect()
    }

    /// Where the gate stands for `digest`, `required` approvals needed, each
    /// counting for `ttl` after it was given (none: for ever).
    pub(crate) fn count(
        &self,
        digest: &Digest,
        required: usize,
        ttl: Option<Duration>,
        now: UnixMs,
    ) -> Counted {
        let expired = self.expired(digest, ttl, now);
        let dropped: HashSet<i64> = expired.iter().map(|fact| fact.seq).collect();
        let mut approved_at = BTreeMap::new();
        for ballot in self.standing() {
            if counts_for(&ballot, digest) && !dropped.contains(&ballot.fact.seq) {
                let approval = &ballot.fact.fact;
                approved_at.insert(approval.actor.login.clone(), approval.at);
            }
        }
        Counted {
            evaluation: self.evaluate_without(digest, required, &dropped),
            approved_at: approved_at.into_iter().collect(),
            elsewhere: self.elsewhere(digest),
            expired: expired
                .into_iter()
                .map(|fact| Elsewhere {
                    by: fact.fact.actor.clone(),
                    digest: digest.clone(),
                    given: Given::Judged,
                    at: fact.fact.at,
                })
                .collect(),
        }
    }

    /// Whether `actor` has an approval standing here, of any digest.
    pub(crate) fn has_standing_approval_by(&self, actor: u64) -> bool {
        self.standing().any(|b| b.fact.fact.actor.id == actor)
    }
}

impl Ballot<'_> {
    fn elsewhere(&self) -> Elsewhere {
        Elsewhere {
            by: self.fact.fact.actor.clone(),
            digest: self.digest.clone(),
            given: self.given.clone(),
            at: self.fact.fact.at,
        }
    }
}

fn counts_for(ballot: &Ballot<'_>, digest: &Digest) -> bool {
    *ballot.given == Given::Judged && ballot.digest == digest
}

fn in_scope(fact: &NewFact, scope: Scope<'_>) -> bool {
    let withdrawal = matches!(fact.kind, FactKind::Revoked | FactKind::Spent);
    match scope {
        Scope::Plan { reviews_count, .. } => {
            reviews_count || !(fact.kind.approves() && matches!(fact.source, Source::Review { .. }))
        }
        Scope::Run { run, since } => {
            withdrawal
                || (fact.data.run == Some(run) && (!fact.kind.approves() || fact.at >= since))
        }
        Scope::Override { member, run } => {
            withdrawal
                || (fact.data.member.as_ref().is_some_and(|m| *m == *member)
                    && fact.data.run.is_none_or(|given_in| given_in == run))
        }
        Scope::All => true,
    }
}

fn given(fact: &NewFact, scope: Scope<'_>) -> Given {
    let Scope::Plan { head, base, .. } = scope else {
        return Given::Judged;
    };
    let bound =
        (fact.kind.approves() || fact.kind == FactKind::Revoked) && fact.digest != FactDigest::Any;
    let FactData {
        head: given_head,
        base: given_base,
        ..
    } = &fact.data;
    if bound && (given_head.as_ref() != Some(head) || given_base.as_ref() != Some(base)) {
        Given::Earlier {
            head: given_head.clone(),
            base: given_base.clone(),
        }
    } else {
        Given::Judged
    }
}

/// Whether `later` withdraws `approval`: a revoke of its digest (given for
/// the same plan) or of any digest, by its approver or an admin's for
/// everyone; or a spend of its digest by an apply of the plan judged.
fn withdraws(
    (later, later_given): (&NewFact, &Given),
    (approval, given): (&NewFact, &Given),
) -> bool {
    match later.kind {
        FactKind::Revoked => {
            let same = later.digest == FactDigest::Any
                || (later.digest == approval.digest && later_given == given);
            same && (later.data.withdraws_everyones() || later.actor.id == approval.actor.id)
        }
        FactKind::Spent => later.digest == approval.digest && *given == Given::Judged,
        _ => false,
    }
}

/// A revoke `/revoke` records at one gate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Withdrawal {
    /// Every digest, for the commenter's own approvals.
    pub(crate) digest: FactDigest,
    pub(crate) data: FactData,
}

/// What `/revoke` by `by` withdraws at one gate (`facts`: all of that gate's):
/// their own standing approvals, of any digest; and, when `admin_over` names
/// the current plan (its digest and binding) because they are a repository
/// admin, everyone else's standing approvals of that digest.
pub(crate) fn revoke(
    facts: &[Fact],
    by: u64,
    admin_over: Option<(&Digest, &FactData)>,
) -> Vec<Withdrawal> {
    let tally = Tally::new(facts, Scope::All);
    let mut withdrawals = Vec::new();
    if tally.has_standing_approval_by(by) {
        withdrawals.push(Withdrawal {
            digest: FactDigest::Any,
            data: FactData::default().with_reason("revoked by the approver"),
        });
    }
    if let Some((digest, binding)) = admin_over {
        let others = tally
            .standing()
            .any(|b| b.fact.fact.actor.id != by && b.digest == digest);
        if others {
            withdrawals.push(Withdrawal {
                digest: digest.into(),
                data: FactData {
                    all: Some(true),
                    ..binding.clone()
                }
                .with_reason("revoked by a repository admin"),
            });
        }
    }
    withdrawals
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::ledger::{self, testing::*};
    use crate::model::time::in_tests::{millis, unix};

    fn evaluate(facts: &[Fact], digest: &Digest, required: usize) -> Evaluation {
        Tally::new(facts, Scope::All).evaluate(digest, required)
    }

    fn stale(facts: &[Fact], digest: &Digest) -> Vec<Elsewhere> {
        Tally::new(facts, Scope::All).elsewhere(digest)
    }

    fn elsewhere(by: Actor, d: char, at: UnixMs) -> Elsewhere {
        Elsewhere {
            by,
            digest: digest(d),
            given: Given::Judged,
            at,
        }
    }

    #[test]
    fn one_approval_satisfies_a_gate_that_requires_one() {
        let facts = ledger(vec![
            new_fact(FactKind::Pending, digest('a'), wavegate()),
            new_fact(FactKind::Approved, digest('a'), alice()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied {
                by: vec![alice()],
                count: 1,
                required: 1
            }
        );
    }

    #[test]
    fn two_required_and_one_given_waits_for_the_second() {
        let facts = ledger(vec![new_fact(FactKind::Approved, digest('a'), alice())]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 2),
            Evaluation::Waiting {
                have: vec![alice()],
                count: 1,
                required: 2
            }
        );
    }

    #[test]
    fn the_same_approver_twice_counts_once() {
        let renamed = Actor {
            id: alice().id,
            login: "alice-renamed".into(),
        };
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('a'), renamed),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 2),
            Evaluation::Waiting {
                have: vec![alice()],
                count: 1,
                required: 2
            }
        );
    }

    #[test]
    fn two_distinct_approvers_satisfy_two_required() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('a'), bob()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 2),
            Evaluation::Satisfied {
                by: vec![alice(), bob()],
                count: 2,
                required: 2
            }
        );
    }

    #[test]
    fn a_revoked_approval_no_longer_counts() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Revoked, digest('a'), alice()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Waiting {
                have: vec![],
                count: 0,
                required: 1
            }
        );
    }

    #[test]
    fn a_revoke_by_someone_else_leaves_the_approval_standing() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Revoked, digest('a'), bob()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied { count: 1, .. }
        ));
    }

    #[test]
    fn an_admins_revoke_withdraws_every_approval_of_its_digest() {
        let mut revoke = new_fact(FactKind::Revoked, digest('a'), bob());
        revoke.data.all = Some(true);
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('b'), alice()),
            revoke,
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Mismatch { .. }
        ));
        assert_eq!(stale(&facts, &digest('a')).len(), 1, "digest b's stands");
    }

    #[test]
    fn a_revoke_of_every_digest_withdraws_approvals_of_any_digest() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('b'), alice()),
            new_fact(FactKind::Revoked, FactDigest::Any, alice()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('b'), 1),
            Evaluation::Waiting { count: 0, .. }
        ));
        assert_eq!(stale(&facts, &digest('b')), vec![]);
    }

    #[test]
    fn an_approval_given_again_after_a_revoke_counts() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Revoked, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('a'), alice()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied { count: 1, .. }
        ));
    }

    #[test]
    fn a_spent_approval_does_not_count_again() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('a'), bob()),
            new_fact(FactKind::Spent, digest('a'), wavegate()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Waiting {
                have: vec![],
                count: 0,
                required: 1
            }
        );
    }

    /// An operator's release of a lock or retry of a job is recorded in a
    /// pull request's gate, by a person, about its digest: it neither
    /// approves nor withdraws an approval, in any scope.
    #[test]
    fn a_drift_approval_counts_as_an_approval_and_is_revoked_like_one() {
        let approved = ledger(vec![new_fact(
            FactKind::DriftApproved,
            digest('a'),
            alice(),
        )]);
        assert!(matches!(
            evaluate(&approved, &digest('a'), 1),
            Evaluation::Satisfied { .. }
        ));
        let revoked = ledger(vec![
            new_fact(FactKind::DriftApproved, digest('a'), alice()),
            new_fact(FactKind::Revoked, digest('a'), alice()),
        ]);
        assert!(matches!(
            evaluate(&revoked, &digest('a'), 1),
            Evaluation::Waiting { .. }
        ));
    }

    #[test]
    fn an_operators_lock_release_or_job_retry_approves_and_withdraws_nothing() {
        let by_alice = |kind| NewFact {
            data: FactData {
                run: Some(7),
                member: Some("app@prod".parse().unwrap()),
                ..FactData::default()
            },
            ..new_fact(kind, digest('a'), alice())
        };
        for kind in [
            FactKind::LockReleased,
            FactKind::JobRetried,
            FactKind::DriftApplied,
        ] {
            let alone = ledger(vec![by_alice(kind)]);
            assert_eq!(
                evaluate(&alone, &digest('a'), 1),
                Evaluation::Waiting {
                    have: vec![],
                    count: 0,
                    required: 1
                },
                "{kind}"
            );
            let after_an_approval = ledger(vec![
                new_fact(FactKind::Approved, digest('a'), bob()),
                by_alice(kind),
            ]);
            for scope in [
                Scope::All,
                Scope::Run {
                    run: 7,
                    since: UnixMs::from_millis(0),
                },
                Scope::Override {
                    member: "app@prod",
                    run: 7,
                },
            ] {
                let standing: Vec<_> = Tally::new(&after_an_approval, scope)
                    .standing()
                    .map(|ballot| ballot.fact.fact.kind)
                    .collect();
                assert!(
                    standing.iter().all(|kind| *kind == FactKind::Approved),
                    "{kind}: {standing:?}"
                );
            }
            assert!(matches!(
                evaluate(&after_an_approval, &digest('a'), 1),
                Evaluation::Satisfied { count: 1, .. }
            ));
        }
    }

    #[test]
    fn spending_one_digest_leaves_approvals_of_another_standing() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Spent, digest('b'), wavegate()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied { count: 1, .. }
        ));
    }

    #[test]
    fn an_approval_of_another_digest_is_a_mismatch_naming_the_newest_one() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('b'), bob()),
            new_fact(FactKind::Pending, digest('c'), wavegate()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('c'), 1),
            Evaluation::Mismatch(Elsewhere {
                by: bob(),
                digest: digest('b'),
                given: Given::Judged,
                at: facts[1].fact.at,
            })
        );
    }

    #[test]
    fn a_partly_approved_digest_waits_rather_than_mismatches() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('b'), bob()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('b'), 2),
            Evaluation::Waiting { count: 1, .. }
        ));
    }

    #[test]
    fn a_spent_approval_of_another_digest_is_no_mismatch() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Spent, digest('a'), wavegate()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('b'), 1),
            Evaluation::Waiting { count: 0, .. }
        ));
    }

    #[test]
    fn a_refusal_and_a_pending_fact_never_count() {
        let facts = ledger(vec![
            new_fact(FactKind::Pending, digest('a'), wavegate()),
            new_fact(FactKind::Refused, digest('a'), bob()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Waiting {
                have: vec![],
                count: 0,
                required: 1
            }
        );
    }

    #[test]
    fn stale_approvals_list_each_actor_and_digest_once_with_the_newest_time() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('b'), bob()),
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('c'), alice()),
            new_fact(FactKind::Approved, digest('d'), bob()),
            new_fact(FactKind::Revoked, digest('d'), bob()),
        ]);
        assert_eq!(
            stale(&facts, &digest('c')),
            vec![
                elsewhere(bob(), 'b', facts[1].fact.at),
                elsewhere(alice(), 'a', facts[2].fact.at),
            ]
        );
    }

    fn sha(c: char) -> CommitSha {
        CommitSha::parse(&c.to_string().repeat(40)).unwrap()
    }

    /// An approval of digest `a` by alice given at `head` on base `b`.
    fn approval_at(head: char, source: Source) -> NewFact {
        NewFact {
            source,
            data: FactData::at_plan(&sha(head), &sha('b')),
            ..new_fact(FactKind::Approved, digest('a'), alice())
        }
    }

    fn plan_at(head: &CommitSha, reviews_count: bool) -> Scope<'_> {
        static BASE: std::sync::OnceLock<CommitSha> = std::sync::OnceLock::new();
        Scope::Plan {
            head,
            base: BASE.get_or_init(|| sha('b')),
            reviews_count,
        }
    }

    #[test]
    fn an_approval_counts_only_for_the_head_and_base_it_was_given_at() {
        let facts = ledger(vec![approval_at('a', Source::Comment { id: 1 })]);
        let (old, pushed) = (sha('a'), sha('c'));
        assert!(matches!(
            Tally::new(&facts, plan_at(&old, false)).evaluate(&digest('a'), 1),
            Evaluation::Satisfied { .. }
        ));
        // A push that leaves the digest unchanged: the approval is for an earlier plan.
        let tally = Tally::new(&facts, plan_at(&pushed, false));
        let earlier = Given::Earlier {
            head: Some(old.clone()),
            base: Some(sha('b')),
        };
        let Evaluation::Mismatch(approved) = tally.evaluate(&digest('a'), 1) else {
            panic!("an approval at another head lets nothing through");
        };
        assert_eq!(approved.given, earlier);
        assert_eq!(tally.elsewhere(&digest('a'))[0].given, earlier);
    }

    #[test]
    fn an_approval_from_before_approvals_named_their_commits_stands_for_an_earlier_plan() {
        let facts = ledger(vec![new_fact(FactKind::Approved, digest('a'), alice())]);
        let head = sha('a');
        let Evaluation::Mismatch(approved) =
            Tally::new(&facts, plan_at(&head, false)).evaluate(&digest('a'), 1)
        else {
            panic!("an unbound approval lets nothing through");
        };
        assert_eq!(
            approved.given,
            Given::Earlier {
                head: None,
                base: None
            }
        );
    }

    #[test]
    fn review_approvals_count_only_while_the_base_allows_them() {
        let facts = ledger(vec![approval_at('a', Source::Review { id: 9 })]);
        let head = sha('a');
        assert!(matches!(
            Tally::new(&facts, plan_at(&head, true)).evaluate(&digest('a'), 1),
            Evaluation::Satisfied { .. }
        ));
        assert!(matches!(
            Tally::new(&facts, plan_at(&head, false)).evaluate(&digest('a'), 1),
            Evaluation::Waiting { count: 0, .. }
        ));
    }

    #[test]
    fn a_spend_withdraws_the_approvals_of_the_plan_it_applied_only() {
        let facts = ledger(vec![
            approval_at('a', Source::Comment { id: 1 }),
            new_fact(FactKind::Spent, digest('a'), wavegate()),
        ]);
        let (applied, other) = (sha('a'), sha('c'));
        assert!(Tally::new(&facts, plan_at(&applied, false))
            .elsewhere(&digest('a'))
            .is_empty());
        assert_eq!(
            Tally::new(&facts, plan_at(&other, false))
                .elsewhere(&digest('a'))
                .len(),
            1
        );
    }

    #[test]
    fn a_run_gate_counts_the_approvals_of_its_run_given_since_it_opened() {
        let in_run = |run: i64| FactData::in_run(run, &sha('e'));
        let facts = ledger(vec![
            NewFact {
                data: in_run(7),
                ..new_fact(FactKind::Approved, digest('a'), alice())
            },
            NewFact {
                data: in_run(8),
                ..new_fact(FactKind::Approved, digest('a'), bob())
            },
        ]);
        let opened = facts[0].fact.at;
        let count = |run, since| match Tally::new(&facts, Scope::Run { run, since })
            .evaluate(&digest('a'), 1)
        {
            Evaluation::Satisfied { by, .. } => by,
            _ => Vec::new(),
        };
        assert_eq!(count(7, opened), vec![alice()]);
        assert_eq!(count(7, opened + millis(1)), vec![]);
        assert_eq!(count(8, unix(0)), vec![bob()]);
        assert_eq!(count(9, unix(0)), vec![]);
    }

    #[test]
    fn an_override_counts_for_its_member_in_its_run_or_from_review() {
        let overriding = |member: &str, run: Option<i64>| NewFact {
            data: FactData {
                member: Some(member.parse().unwrap()),
                run,
                ..FactData::default()
            },
            ..new_fact(FactKind::Approved, digest('a'), alice())
        };
        let facts = ledger(vec![
            overriding("db@prod", None),
            overriding("app@prod", Some(3)),
        ]);
        let lets_through = |member, run| {
            matches!(
                Tally::new(&facts, Scope::Override { member, run }).evaluate(&digest('a'), 1),
                Evaluation::Satisfied { .. }
            )
        };
        assert!(lets_through("db@prod", 5));
        assert!(lets_through("app@prod", 3));
        assert!(!lets_through("app@prod", 4));
        assert!(!lets_through("dns@prod", 3));
    }

    #[test]
    fn expired_approvals_stop_counting_and_are_listed_with_when_they_were_given() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('a'), bob()),
        ]);
        let tally = Tally::new(&facts, Scope::All);
        let now = facts[1].fact.at + millis(500);
        let counted = tally.count(&digest('a'), 1, Some(millis(1_000)), now);
        assert!(
            matches!(&counted.evaluation, Evaluation::Satisfied { by, .. } if *by == vec![bob()])
        );
        assert_eq!(
            counted.expired,
            vec![elsewhere(alice(), 'a', facts[0].fact.at)]
        );
        assert_eq!(
            counted.approved_at,
            vec![("bob".to_owned(), facts[1].fact.at)]
        );
    }

    #[test]
    fn revoke_withdraws_ones_own_approvals_of_any_digest_and_an_admins_everyones() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, digest('a'), alice()),
            new_fact(FactKind::Approved, digest('b'), bob()),
        ]);
        let own = revoke(&facts, alice().id, None);
        assert_eq!(own.len(), 1);
        assert_eq!(own[0].digest, FactDigest::Any);
        assert!(revoke(&facts, 77, None).is_empty());

        let binding = FactData::at_plan(&sha('a'), &sha('b'));
        let by_admin = revoke(&facts, 77, Some((&digest('b'), &binding)));
        assert_eq!(by_admin.len(), 1);
        assert_eq!(by_admin[0].digest, digest('b'));
        assert!(by_admin[0].data.withdraws_everyones());
        assert_eq!(by_admin[0].data.head, Some(sha('a')));

        let mut after = facts.clone();
        let mut withdrawn = new_fact(FactKind::Revoked, by_admin[0].digest.clone(), wavegate());
        withdrawn.data = by_admin[0].data.clone();
        after.push(ledger::chain(after.last(), withdrawn));
        // Bob's approval is withdrawn; alice's, of another digest, stands.
        assert!(matches!(
            Tally::new(&after, Scope::All).evaluate(&digest('b'), 1),
            Evaluation::Mismatch(e) if e.by == alice()
        ));
    }
}
