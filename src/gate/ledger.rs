//! The gate ledger (DESIGN §7): append-only facts about gates (`pending`,
//! `approved`, `refused`, `revoked`, `spent`), each chained to the fact before
//! it in the same repository by a SHA-256 hash over its canonical JSON, and
//! the evaluation that decides whether a gate is satisfied for a digest.
//! Pure: the store persists facts, the worker decides when to append them.

use crate::plan::canonical::{DigestWriter, NumberForm};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;

/// The `prev` of the first fact of every repository.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The digest a `revoked` fact names to withdraw every approval of its actor.
pub const ANY_DIGEST: &str = "*";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactKind {
    Pending,
    Approved,
    Refused,
    Revoked,
    Spent,
}

impl FactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Pending => "pending",
            FactKind::Approved => "approved",
            FactKind::Refused => "refused",
            FactKind::Revoked => "revoked",
            FactKind::Spent => "spent",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            FactKind::Pending,
            FactKind::Approved,
            FactKind::Refused,
            FactKind::Revoked,
            FactKind::Spent,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for FactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A forge user: the id is what identifies them (logins can be renamed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub id: u64,
    pub login: String,
}

/// What caused a fact: a comment, a review, or wavegate itself (e.g. a report posted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    Comment { id: u64 },
    Review { id: u64 },
    Wavegate,
}

/// A fact before it is chained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewFact {
    /// The repository's `RepoId` display form, e.g. `github:acme/infra`.
    pub repo: String,
    /// e.g. `pr-42`, `pr-42-prod`.
    pub gate: String,
    pub kind: FactKind,
    /// The digest the fact is about; a `revoked` fact may name [`ANY_DIGEST`].
    pub digest: String,
    pub actor: Actor,
    /// Unix milliseconds.
    pub at: i64,
    pub source: Source,
    /// Anything else worth keeping, e.g. `{"reason": "..."}`; `Null` when none.
    pub data: serde_json::Value,
}

/// A fact in its repository's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// Position in the repository's chain, from 1.
    pub seq: i64,
    #[serde(flatten)]
    pub fact: NewFact,
    /// The hash of fact `seq - 1`, or [`GENESIS`] for the first.
    pub prev: String,
    pub hash: String,
}

/// What a fact's hash covers: everything but `prev` and `hash`.
#[derive(Serialize)]
struct HashedContent<'a> {
    seq: i64,
    #[serde(flatten)]
    fact: &'a NewFact,
}

/// `sha256:` + hex(sha256(`prev` || canonical JSON of the fact with its seq)).
///
/// Integers are written exactly, as when the chain was started: facts carry
/// no format version, so the hash of a fact written before must not change.
/// Facts hold ids, times and sequence numbers, below 2^53, where this is also
/// RFC 8785's form.
pub fn fact_hash(prev: &str, seq: i64, fact: &NewFact) -> String {
    let content = serde_json::to_value(HashedContent { seq, fact })
        .expect("a ledger fact serialises to JSON");
    let mut writer = DigestWriter::with_numbers(NumberForm::Version1);
    writer.raw(prev).value(&content);
    writer.finish()
}

/// Chains `new` after `last`, the newest fact of the same repository (`None`
/// when the repository has none yet).
pub fn chain(last: Option<&Fact>, new: NewFact) -> Fact {
    debug_assert!(
        last.is_none_or(|last| last.fact.repo == new.repo),
        "a fact is chained after a fact of its own repository"
    );
    let (seq, prev) = match last {
        Some(last) => (last.seq + 1, last.hash.clone()),
        None => (1, GENESIS.to_owned()),
    };
    let hash = fact_hash(&prev, seq, &new);
    Fact {
        seq,
        fact: new,
        prev,
        hash,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkProblem {
    /// The stored hash is not the hash of the stored content.
    HashMismatch,
    /// `prev` is not the hash of the fact before (or not [`GENESIS`] for seq 1).
    PrevMismatch,
    /// The chain jumps over this seq.
    Missing,
    /// A fact whose seq is not the next one (a repeat or out of order).
    OutOfOrder { expected: i64 },
    /// A fact of another repository sits in this chain.
    ForeignRepo { repo: String },
}

/// The first place a repository's chain does not hold together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the ledger of {repo} is broken at seq {seq}: {}; the ledger was changed outside \
     wavegate: restore it from a backup or an export",
    describe(.seq, .problem)
)]
pub struct BrokenLink {
    pub repo: String,
    pub seq: i64,
    pub problem: LinkProblem,
}

fn describe(seq: &i64, problem: &LinkProblem) -> String {
    match problem {
        LinkProblem::HashMismatch => "hash does not match its content".into(),
        LinkProblem::PrevMismatch if *seq == 1 => "prev is not the genesis hash".into(),
        LinkProblem::PrevMismatch => format!("prev does not name fact {}'s hash", seq - 1),
        LinkProblem::Missing => format!("seq {seq} missing"),
        LinkProblem::OutOfOrder { expected } => {
            format!("seq {seq} found where seq {expected} was expected")
        }
        LinkProblem::ForeignRepo { repo } => format!("fact belongs to {repo}"),
    }
}

/// Checks one repository's facts, given in seq order: seqs run 1, 2, 3…
/// without gaps, each `prev` names the hash before, each hash matches its
/// content. A fact removed from the end leaves no trace in the chain itself.
pub fn verify_chain(facts: &[Fact]) -> Result<(), BrokenLink> {
    let Some(first) = facts.first() else {
        return Ok(());
    };
    let repo = &first.fact.repo;
    let broken = |seq, problem| BrokenLink {
        repo: repo.clone(),
        seq,
        problem,
    };
    let mut expected_prev = GENESIS;
    for (expected_seq, fact) in (1..).zip(facts) {
        if fact.fact.repo != *repo {
            let problem = LinkProblem::ForeignRepo {
                repo: fact.fact.repo.clone(),
            };
            return Err(broken(fact.seq, problem));
        }
        if fact.seq > expected_seq {
            return Err(broken(expected_seq, LinkProblem::Missing));
        }
        if fact.seq < expected_seq {
            let problem = LinkProblem::OutOfOrder {
                expected: expected_seq,
            };
            return Err(broken(fact.seq, problem));
        }
        if fact.prev != expected_prev {
            return Err(broken(fact.seq, LinkProblem::PrevMismatch));
        }
        if fact_hash(&fact.prev, fact.seq, &fact.fact) != fact.hash {
            return Err(broken(fact.seq, LinkProblem::HashMismatch));
        }
        expected_prev = &fact.hash;
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluation {
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
    /// No approval of this digest stands, but one of another does.
    Mismatch { approved: String, by: Actor },
}

/// Approvals neither revoked by their actor (for their digest or
/// [`ANY_DIGEST`]) nor spent by an apply of their digest, in seq order.
fn standing_approvals(facts: &[Fact]) -> impl Iterator<Item = &NewFact> {
    facts.iter().enumerate().filter_map(|(index, fact)| {
        let approval = &fact.fact;
        if approval.kind != FactKind::Approved {
            return None;
        }
        let withdrawn = facts[index + 1..].iter().any(|later| {
            let later = &later.fact;
            match later.kind {
                FactKind::Revoked => {
                    let same_digest = later.digest == approval.digest || later.digest == ANY_DIGEST;
                    // A repository admin's revoke (`data.all`) withdraws everyone's.
                    let everyone = later.data.get("all") == Some(&serde_json::Value::Bool(true));
                    same_digest && (everyone || later.actor.id == approval.actor.id)
                }
                FactKind::Spent => later.digest == approval.digest,
                _ => false,
            }
        });
        (!withdrawn).then_some(approval)
    })
}

/// Whether a gate lets `digest` through. `facts`: every fact of the gate (any
/// digest) in seq order. Standing approvals of exactly `digest` count once per
/// actor id; `refused` and `pending` never count. Short of `required`, a gate
/// with no approval of `digest` but a standing one of another digest is a
/// mismatch naming the most recent such approval.
pub fn evaluate(facts: &[Fact], digest: &str, required: usize) -> Evaluation {
    let mut counted = HashSet::new();
    let mut approvers = Vec::new();
    let mut other_digest = None;
    for approval in standing_approvals(facts) {
        if approval.digest == digest {
            if counted.insert(approval.actor.id) {
                approvers.push(approval.actor.clone());
            }
        } else {
            other_digest = Some(approval);
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
    match other_digest {
        Some(approval) if count == 0 => Evaluation::Mismatch {
            approved: approval.digest.clone(),
            by: approval.actor.clone(),
        },
        _ => Evaluation::Waiting {
            have: approvers,
            count,
            required,
        },
    }
}

/// Standing approvals of digests other than `digest` (for the report's "for an
/// earlier plan"): one per actor and digest, the most recent, in seq order.
pub fn stale_approvals(facts: &[Fact], digest: &str) -> Vec<(Actor, String, i64)> {
    let stale: Vec<&NewFact> = standing_approvals(facts)
        .filter(|approval| approval.digest != digest)
        .collect();
    let mut seen = HashSet::new();
    let mut newest_first: Vec<(Actor, String, i64)> = stale
        .into_iter()
        .rev()
        .filter(|approval| seen.insert((approval.actor.id, approval.digest.as_str())))
        .map(|approval| (approval.actor.clone(), approval.digest.clone(), approval.at))
        .collect();
    newest_first.reverse();
    newest_first
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REPO: &str = "github:acme/infra";
    const GATE: &str = "pr-42";

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn alice() -> Actor {
        Actor {
            id: 1,
            login: "alice".into(),
        }
    }

    fn bob() -> Actor {
        Actor {
            id: 2,
            login: "bob".into(),
        }
    }

    fn wavegate() -> Actor {
        Actor {
            id: 99,
            login: "wavegate[bot]".into(),
        }
    }

    fn new_fact(kind: FactKind, digest: &str, actor: Actor) -> NewFact {
        NewFact {
            repo: REPO.into(),
            gate: GATE.into(),
            kind,
            digest: digest.into(),
            actor,
            at: 1_700_000_000_000,
            source: Source::Comment { id: 500 },
            data: serde_json::Value::Null,
        }
    }

    /// Chains the facts in order, giving each a later time than the one before.
    fn ledger(facts: Vec<NewFact>) -> Vec<Fact> {
        let mut chained: Vec<Fact> = Vec::new();
        for (offset, mut new) in (0..).zip(facts) {
            new.at += offset * 1000;
            let fact = chain(chained.last(), new);
            chained.push(fact);
        }
        chained
    }

    fn sample_chain() -> Vec<Fact> {
        ledger(vec![
            new_fact(FactKind::Pending, &digest('a'), wavegate()),
            new_fact(FactKind::Approved, &digest('a'), alice()),
            NewFact {
                data: json!({"reason": "the plan deletes the database"}),
                source: Source::Review { id: 7 },
                ..new_fact(FactKind::Refused, &digest('a'), bob())
            },
            new_fact(FactKind::Spent, &digest('a'), wavegate()),
        ])
    }

    #[test]
    fn the_first_fact_follows_genesis_and_each_next_names_the_hash_before() {
        let facts = sample_chain();
        assert_eq!(facts[0].seq, 1);
        assert_eq!(facts[0].prev, GENESIS);
        for pair in facts.windows(2) {
            assert_eq!(pair[1].seq, pair[0].seq + 1);
            assert_eq!(pair[1].prev, pair[0].hash);
        }
        assert!(facts
            .iter()
            .all(|f| crate::plan::canonical::is_digest(&f.hash)));
        assert_eq!(verify_chain(&facts), Ok(()));
    }

    #[test]
    fn the_hash_covers_seq_and_the_previous_hash() {
        let fact = new_fact(FactKind::Approved, &digest('a'), alice());
        let base = fact_hash(GENESIS, 1, &fact);
        assert_ne!(fact_hash(GENESIS, 2, &fact), base);
        assert_ne!(fact_hash(&digest('f'), 1, &fact), base);
        assert_eq!(fact_hash(GENESIS, 1, &fact.clone()), base);
    }

    #[test]
    fn an_empty_ledger_verifies() {
        assert_eq!(verify_chain(&[]), Ok(()));
    }

    #[test]
    fn changed_content_is_named_by_its_seq() {
        let mut facts = sample_chain();
        facts[2].fact.data = json!({"reason": "fine by me"});
        let broken = verify_chain(&facts).unwrap_err();
        assert_eq!(
            broken,
            BrokenLink {
                repo: REPO.into(),
                seq: 3,
                problem: LinkProblem::HashMismatch
            }
        );
        let message = broken.to_string();
        assert!(message.contains(REPO), "{message}");
        assert!(message.contains("seq 3"), "{message}");
        assert!(
            message.contains("hash does not match its content"),
            "{message}"
        );
        assert!(message.contains("restore"), "{message}");
    }

    #[test]
    fn a_changed_actor_breaks_the_chain_too() {
        let mut facts = sample_chain();
        facts[1].fact.actor = bob();
        assert_eq!(verify_chain(&facts).unwrap_err().seq, 2);
    }

    #[test]
    fn content_rehashed_to_fit_breaks_the_next_link() {
        let mut facts = sample_chain();
        facts[1].fact.actor = bob();
        facts[1].hash = fact_hash(&facts[1].prev, 2, &facts[1].fact);
        let broken = verify_chain(&facts).unwrap_err();
        assert_eq!(
            (broken.seq, &broken.problem),
            (3, &LinkProblem::PrevMismatch)
        );
        assert!(broken
            .to_string()
            .contains("prev does not name fact 2's hash"));
    }

    #[test]
    fn a_first_fact_not_after_genesis_is_broken() {
        let mut facts = sample_chain();
        facts[0].prev = digest('b');
        facts[0].hash = fact_hash(&facts[0].prev, 1, &facts[0].fact);
        let broken = verify_chain(&facts[..1]).unwrap_err();
        assert_eq!((broken.seq, broken.problem), (1, LinkProblem::PrevMismatch));
    }

    #[test]
    fn a_removed_fact_is_named_as_the_missing_seq() {
        let mut facts = sample_chain();
        facts.remove(1);
        let broken = verify_chain(&facts).unwrap_err();
        assert_eq!((broken.seq, &broken.problem), (2, &LinkProblem::Missing));
        assert!(broken.to_string().contains("seq 2 missing"));
    }

    #[test]
    fn a_chain_that_does_not_start_at_one_is_missing_seq_one() {
        let facts = sample_chain();
        let broken = verify_chain(&facts[1..]).unwrap_err();
        assert_eq!((broken.seq, broken.problem), (1, LinkProblem::Missing));
    }

    #[test]
    fn a_repeated_seq_is_out_of_order() {
        let mut facts = sample_chain();
        facts.insert(2, facts[1].clone());
        let broken = verify_chain(&facts).unwrap_err();
        assert_eq!(
            (broken.seq, broken.problem),
            (2, LinkProblem::OutOfOrder { expected: 3 })
        );
    }

    #[test]
    fn a_fact_moved_to_another_repository_is_foreign_to_the_chain() {
        let mut facts = sample_chain();
        facts[3].fact.repo = "github:acme/other".into();
        let broken = verify_chain(&facts).unwrap_err();
        assert_eq!(
            (broken.repo.as_str(), broken.seq, broken.problem),
            (
                REPO,
                4,
                LinkProblem::ForeignRepo {
                    repo: "github:acme/other".into()
                }
            )
        );
    }

    #[test]
    fn a_fact_reads_back_from_its_json_unchanged() {
        let facts = sample_chain();
        for fact in &facts {
            let line = serde_json::to_string(fact).unwrap();
            let back: Fact = serde_json::from_str(&line).unwrap();
            assert_eq!(&back, fact);
        }
        let refused = serde_json::to_value(&facts[2]).unwrap();
        assert_eq!(refused["kind"], "refused");
        assert_eq!(refused["source"], json!({"kind": "review", "id": 7}));
        assert_eq!(refused["actor"], json!({"id": 2, "login": "bob"}));
    }

    #[test]
    fn one_approval_satisfies_a_gate_that_requires_one() {
        let facts = ledger(vec![
            new_fact(FactKind::Pending, &digest('a'), wavegate()),
            new_fact(FactKind::Approved, &digest('a'), alice()),
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
        let facts = ledger(vec![new_fact(FactKind::Approved, &digest('a'), alice())]);
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
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('a'), renamed),
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
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('a'), bob()),
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
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Revoked, &digest('a'), alice()),
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
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Revoked, &digest('a'), bob()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied { count: 1, .. }
        ));
    }

    #[test]
    fn an_admins_revoke_withdraws_every_approval_of_its_digest() {
        let mut revoke = new_fact(FactKind::Revoked, &digest('a'), bob());
        revoke.data = json!({ "all": true });
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('b'), alice()),
            revoke,
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Mismatch { .. }
        ));
        assert_eq!(
            stale_approvals(&facts, &digest('a')).len(),
            1,
            "digest b's stands"
        );
    }

    #[test]
    fn a_revoke_of_every_digest_withdraws_approvals_of_any_digest() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('b'), alice()),
            new_fact(FactKind::Revoked, ANY_DIGEST, alice()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('b'), 1),
            Evaluation::Waiting { count: 0, .. }
        ));
        assert_eq!(stale_approvals(&facts, &digest('b')), vec![]);
    }

    #[test]
    fn an_approval_given_again_after_a_revoke_counts() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Revoked, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('a'), alice()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied { count: 1, .. }
        ));
    }

    #[test]
    fn a_spent_approval_does_not_count_again() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('a'), bob()),
            new_fact(FactKind::Spent, &digest('a'), wavegate()),
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
    fn spending_one_digest_leaves_approvals_of_another_standing() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Spent, &digest('b'), wavegate()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('a'), 1),
            Evaluation::Satisfied { count: 1, .. }
        ));
    }

    #[test]
    fn an_approval_of_another_digest_is_a_mismatch_naming_the_newest_one() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('b'), bob()),
            new_fact(FactKind::Pending, &digest('c'), wavegate()),
        ]);
        assert_eq!(
            evaluate(&facts, &digest('c'), 1),
            Evaluation::Mismatch {
                approved: digest('b'),
                by: bob()
            }
        );
    }

    #[test]
    fn a_partly_approved_digest_waits_rather_than_mismatches() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('b'), bob()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('b'), 2),
            Evaluation::Waiting { count: 1, .. }
        ));
    }

    #[test]
    fn a_spent_approval_of_another_digest_is_no_mismatch() {
        let facts = ledger(vec![
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Spent, &digest('a'), wavegate()),
        ]);
        assert!(matches!(
            evaluate(&facts, &digest('b'), 1),
            Evaluation::Waiting { count: 0, .. }
        ));
    }

    #[test]
    fn a_refusal_and_a_pending_fact_never_count() {
        let facts = ledger(vec![
            new_fact(FactKind::Pending, &digest('a'), wavegate()),
            new_fact(FactKind::Refused, &digest('a'), bob()),
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
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('b'), bob()),
            new_fact(FactKind::Approved, &digest('a'), alice()),
            new_fact(FactKind::Approved, &digest('c'), alice()),
            new_fact(FactKind::Approved, &digest('d'), bob()),
            new_fact(FactKind::Revoked, &digest('d'), bob()),
        ]);
        assert_eq!(
            stale_approvals(&facts, &digest('c')),
            vec![
                (bob(), digest('b'), facts[1].fact.at),
                (alice(), digest('a'), facts[2].fact.at),
            ]
        );
    }
}
