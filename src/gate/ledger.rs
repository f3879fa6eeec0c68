//! The gate ledger (docs/approvals-and-applying.md): append-only facts about gates (`pending`,
//! `approved`, `refused`, `revoked`, `spent`, and what happened beside them:
//! `hook`, `lock_released`, `job_retried`), each chained to the fact before
//! it in the same repository by a SHA-256 hash over its canonical JSON and
//! signed (Ed25519, over that hash) by the server's ledger key, and the
//! evaluation that decides whether a gate is satisfied for a digest.
//! Pure: the store persists facts, the worker decides when to append them,
//! `config::ledger_key` keeps the key.

pub use super::fact_data::FactData;
use crate::model::canonical::{DigestWriter, NumberForm};
use crate::model::{Digest, GateId, UnixMs};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The `prev` of the first fact of every repository: `sha256:` and 64 zeros.
pub(crate) fn genesis() -> Digest {
    Digest::repeated('0')
}

/// What a fact is about: one digest, or every digest, which only a
/// `revoked` fact names (`*`), to withdraw every approval of its actor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FactDigest {
    Of(Digest),
    Any,
}

impl FactDigest {
    const ANY: &'static str = "*";

    pub(crate) fn as_str(&self) -> &str {
        match self {
            Self::Of(digest) => digest.as_str(),
            Self::Any => Self::ANY,
        }
    }

    /// The digest named, unless the fact names every digest.
    pub(crate) fn digest(&self) -> Option<&Digest> {
        match self {
            Self::Of(digest) => Some(digest),
            Self::Any => None,
        }
    }
}

impl From<Digest> for FactDigest {
    fn from(digest: Digest) -> Self {
        Self::Of(digest)
    }
}

impl From<&Digest> for FactDigest {
    fn from(digest: &Digest) -> Self {
        Self::Of(digest.clone())
    }
}

impl PartialEq<Digest> for FactDigest {
    fn eq(&self, other: &Digest) -> bool {
        self.digest() == Some(other)
    }
}

impl fmt::Display for FactDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FactDigest {
    type Err = crate::model::NotADigest;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == Self::ANY {
            Ok(Self::Any)
        } else {
            text.parse().map(Self::Of)
        }
    }
}

impl Serialize for FactDigest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FactDigest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactKind {
    Pending,
    Approved,
    Refused,
    Revoked,
    Spent,
    /// What became of a hook's call in a run (`data.outcome`); no approval.
    Hook,
    /// An operator let go of a member's lock a stopped run held
    /// (`data.member`, `data.run`, `data.reason`); no approval.
    #[serde(rename = "lock_released")]
    LockReleased,
    /// An operator queued a dead job again (`data.job`); no approval.
    #[serde(rename = "job_retried")]
    JobRetried,
    /// `/apply <digest>` on a drift issue: an approval of that drift's plan,
    /// counted at the gate as `approved` is at a pull request's.
    #[serde(rename = "drift_approved")]
    DriftApproved,
    /// A drift run applied a member (`data.member`, `data.run`); no approval.
    #[serde(rename = "drift_applied")]
    DriftApplied,
}

impl FactKind {
    /// Every kind, in the order they came to be.
    pub(crate) const ALL: [FactKind; 10] = [
        FactKind::Pending,
        FactKind::Approved,
        FactKind::Refused,
        FactKind::Revoked,
        FactKind::Spent,
        FactKind::Hook,
        FactKind::LockReleased,
        FactKind::JobRetried,
        FactKind::DriftApproved,
        FactKind::DriftApplied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Pending => "pending",
            FactKind::Approved => "approved",
            FactKind::Refused => "refused",
            FactKind::Revoked => "revoked",
            FactKind::Spent => "spent",
            FactKind::Hook => "hook",
            FactKind::LockReleased => "lock_released",
            FactKind::JobRetried => "job_retried",
            FactKind::DriftApproved => "drift_approved",
            FactKind::DriftApplied => "drift_applied",
        }
    }

    /// Whether the fact approves its digest at its gate.
    pub(crate) fn approves(self) -> bool {
        matches!(self, FactKind::Approved | FactKind::DriftApproved)
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
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

/// What caused a fact: a comment, a review, wavegate itself (e.g. a report
/// posted), or an operator's action on its pages or API (the actor is the
/// logged-in login; its forge id is not known there, so `id` is 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    Comment { id: u64 },
    Review { id: u64 },
    Wavegate,
    Operator,
}

/// A fact before it is chained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewFact {
    /// The repository's `RepoId` display form, e.g. `github:acme/infra`.
    pub repo: String,
    /// e.g. `pr-42`, `pr-42-prod`.
    pub gate: GateId,
    pub kind: FactKind,
    /// The digest the fact is about; a `revoked` fact may name every digest.
    pub digest: FactDigest,
    pub actor: Actor,
    /// Unix milliseconds.
    pub at: UnixMs,
    pub source: Source,
    /// The plan or run it was given in, why, and the like.
    pub data: FactData,
}

/// A fact in its repository's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// Position in the repository's chain, from 1.
    pub seq: i64,
    #[serde(flatten)]
    pub fact: NewFact,
    /// The hash of fact `seq - 1`, or [`genesis`] for the first.
    pub prev: Digest,
    pub hash: Digest,
    /// `ed25519:` + base64 of the ledger key's signature of `hash`; `None`
    /// for a fact written before wavegate signed its facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// A repository's newest fact, as published in the report so that a
/// ledger rewritten or cut short since can be told from the one the forge saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerHead {
    pub seq: i64,
    pub hash: Digest,
}

/// The server's signed record of when it began signing with a key, made at
/// its first start with that key: where each repository's chain stood then.
/// Facts up to those heads were written before signing (with this key);
/// every later fact, and every fact of a repository not listed, must carry
/// the key's signature. Signed, so whoever holds the database can neither
/// move the heads nor forge a record; a record removed is itself caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningStart {
    /// The public key, as [`PublicKey`] prints it.
    pub(crate) key: String,
    /// Unix ms.
    pub(crate) since: UnixMs,
    pub heads: std::collections::BTreeMap<String, LedgerHead>,
    pub(crate) sig: String,
}

impl SigningStart {
    pub fn new(
        key: &LedgerKey,
        since: UnixMs,
        heads: std::collections::BTreeMap<String, LedgerHead>,
    ) -> Self {
        let public = key.public().to_string();
        let sig = key.sign(&Self::message(&public, since, &heads));
        Self {
            key: public,
            since,
            heads,
            sig,
        }
    }

    /// What is signed: a fixed prefix (so no fact hash can be mistaken for
    /// it), then the key, the time and the heads as JSON (sorted by repository).
    fn message(
        key: &str,
        since: UnixMs,
        heads: &std::collections::BTreeMap<String, LedgerHead>,
    ) -> String {
        let heads = serde_json::to_string(heads).expect("heads serialise");
        format!(
            "wavegate ledger signing start\nkey {key}\nsince {}\nheads {heads}",
            since.millis()
        )
    }

    /// Whether `key` made this record, unchanged.
    pub fn verifies(&self, key: &PublicKey) -> bool {
        self.key == key.to_string()
            && key.verifies(
                &Self::message(&self.key, self.since, &self.heads),
                &self.sig,
            )
    }
}

pub use crate::model::signing::{KeyError, LedgerKey, PublicKey};

impl LedgerKey {
    /// `fact`, signed.
    pub fn signed(&self, mut fact: Fact) -> Fact {
        fact.sig = Some(self.sign(fact.hash.as_str()));
        fact
    }
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
pub(crate) fn fact_hash(prev: &Digest, seq: i64, fact: &NewFact) -> Digest {
    let content = serde_json::to_value(HashedContent { seq, fact })
        .expect("a ledger fact serialises to JSON");
    let mut writer = DigestWriter::with_numbers(NumberForm::Version1);
    writer.raw(prev.as_str()).value(&content);
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
        None => (1, genesis()),
    };
    let hash = fact_hash(&prev, seq, &new);
    Fact {
        seq,
        fact: new,
        prev,
        hash,
        sig: None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkProblem {
    /// The stored hash is not the hash of the stored content.
    HashMismatch,
    /// `prev` is not the hash of the fact before (or not [`genesis`] for seq 1).
    PrevMismatch,
    /// The chain jumps over this seq.
    Missing,
    /// A fact whose seq is not the next one (a repeat or out of order).
    OutOfOrder { expected: i64 },
    /// A fact of another repository sits in this chain.
    ForeignRepo { repo: String },
    /// The signature is not the ledger key's signature of the hash.
    BadSignature,
    /// No signature, on a fact after the head the repository had when
    /// signing started (`None`: it had no fact then).
    Unsigned { signed_after: Option<i64> },
    /// The fact at the head recorded when signing started is another one.
    NotTheSignedHead,
    /// The chain ends before the head recorded when signing started.
    CutShort { had: i64 },
}

/// The first place a repository's chain does not hold together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the ledger of {repo} is broken at seq {seq}: {}; the ledger was changed outside \
     wavegate: restore it from a backup or an export",
    describe(.seq, .problem)
)]
pub struct BrokenLink {
    pub(crate) repo: String,
    pub seq: i64,
    pub(crate) problem: LinkProblem,
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
        LinkProblem::BadSignature => {
            "fact's signature is not the ledger key's (it was not written by wavegate)".into()
        }
        LinkProblem::Unsigned {
            signed_after: Some(head),
        } => format!(
            "fact is not signed, though every fact after seq {head} (where the chain stood when signing started) is (it was not written by wavegate)"
        ),
        LinkProblem::Unsigned { signed_after: None } => "fact is not signed, though every fact of this repository is (it had none when signing started; it was not written by wavegate)".into(),
        LinkProblem::NotTheSignedHead => {
            "fact is not the one recorded as the chain's head when signing started".into()
        }
        LinkProblem::CutShort { had } => {
            format!("the chain ends here, but it reached seq {had} when signing started")
        }
    }
}

/// Checks one repository's facts, given in seq order: seqs run 1, 2, 3…
/// without gaps, each `prev` names the hash before, each hash matches its
/// content. A fact removed from the end leaves no trace in the chain itself.
/// Signatures are not looked at: [`verify`] does.
pub fn verify_chain(facts: &[Fact]) -> Result<(), BrokenLink> {
    verify(facts, None).map(|_| ())
}

/// What verifying one repository's chain found, when it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub facts: usize,
    /// The newest fact; `None` for an empty chain.
    pub head: Option<LedgerHead>,
    /// `None` when signatures were not checked (no key).
    pub signatures: Option<Signatures>,
}

/// `3 facts, chain intact, all signed; head seq 3 sha256:…`.
impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.facts == 1 { "" } else { "s" };
        write!(f, "{} fact{plural}, chain intact", self.facts)?;
        if let Some(signatures) = self.signatures {
            match (signatures.signed, signatures.unsigned) {
                (_, 0) => write!(f, ", all signed")?,
                (0, unsigned) => write!(f, ", {unsigned} unsigned (written before signing)")?,
                (signed, unsigned) => write!(
                    f,
                    ", {signed} signed, {unsigned} unsigned (written before signing)"
                )?,
            }
        }
        if let Some(head) = &self.head {
            write!(f, "; head seq {} {}", head.seq, head.hash)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Signatures {
    /// Facts whose signature verifies.
    pub signed: usize,
    /// Facts written before wavegate signed its facts with this key (up to
    /// the head recorded when signing started).
    pub unsigned: usize,
}

/// The key facts are checked with and its [`SigningStart`] (verified by
/// the caller: [`SigningStart::verifies`]).
#[derive(Debug, Clone, Copy)]
pub struct SignatureCheck<'a> {
    pub key: &'a PublicKey,
    pub start: &'a SigningStart,
}

/// [`verify_chain`], and with `signatures` each fact's signature too: facts
/// up to the head the repository had when signing started (pinned by the
/// signed [`SigningStart`]) are counted as written before signing; every
/// later fact must carry the key's signature of its hash. The first broken
/// fact is named.
pub fn verify(
    facts: &[Fact],
    signatures: Option<SignatureCheck<'_>>,
) -> Result<Verified, BrokenLink> {
    let Some(first) = facts.first() else {
        return Ok(Verified {
            facts: 0,
            head: None,
            signatures: signatures.map(|_| Signatures::default()),
        });
    };
    let repo = &first.fact.repo;
    let broken = |seq, problem| BrokenLink {
        repo: repo.clone(),
        seq,
        problem,
    };
    let genesis = genesis();
    let mut expected_prev = &genesis;
    let mut counted = Signatures::default();
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
        if fact.prev != *expected_prev {
            return Err(broken(fact.seq, LinkProblem::PrevMismatch));
        }
        if fact_hash(&fact.prev, fact.seq, &fact.fact) != fact.hash {
            return Err(broken(fact.seq, LinkProblem::HashMismatch));
        }
        if let Some(check) = &signatures {
            let pinned = check.start.heads.get(repo.as_str());
            match pinned.filter(|head| fact.seq <= head.seq) {
                Some(head) => {
                    if fact.seq == head.seq && fact.hash != head.hash {
                        return Err(broken(fact.seq, LinkProblem::NotTheSignedHead));
                    }
                    counted.unsigned += 1;
                }
                None => match &fact.sig {
                    Some(sig) if check.key.verifies(fact.hash.as_str(), sig) => counted.signed += 1,
                    Some(_) => return Err(broken(fact.seq, LinkProblem::BadSignature)),
                    None => {
                        let signed_after = pinned.map(|head| head.seq);
                        return Err(broken(fact.seq, LinkProblem::Unsigned { signed_after }));
                    }
                },
            }
        }
        expected_prev = &fact.hash;
    }
    let last = facts.last().expect("a chain with a first fact");
    if let Some(head) = signatures.and_then(|check| check.start.heads.get(repo.as_str())) {
        if head.seq > last.seq {
            let problem = LinkProblem::CutShort { had: head.seq };
            return Err(broken(last.seq + 1, problem));
        }
    }
    Ok(Verified {
        facts: facts.len(),
        head: Some(LedgerHead {
            seq: last.seq,
            hash: last.hash.clone(),
        }),
        signatures: signatures.map(|_| counted),
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Facts for tests of how the ledger and its gates read them.
    use super::*;

    pub(crate) const REPO: &str = "github:acme/infra";
    pub(crate) const GATE: &str = "pr-42";

    pub(crate) fn digest(c: char) -> Digest {
        Digest::repeated(c)
    }

    pub(crate) fn alice() -> Actor {
        Actor {
            id: 1,
            login: "alice".into(),
        }
    }

    pub(crate) fn bob() -> Actor {
        Actor {
            id: 2,
            login: "bob".into(),
        }
    }

    pub(crate) fn wavegate() -> Actor {
        Actor {
            id: 99,
            login: "wavegate[bot]".into(),
        }
    }

    pub(crate) fn new_fact(kind: FactKind, digest: impl Into<FactDigest>, actor: Actor) -> NewFact {
        NewFact {
            repo: REPO.into(),
            gate: GATE.parse().unwrap(),
            kind,
            digest: digest.into(),
            actor,
            at: UnixMs::from_millis(1_700_000_000_000),
            source: Source::Comment { id: 500 },
            data: FactData::default(),
        }
    }

    /// Chains the facts in order, giving each a later time than the one before.
    pub(crate) fn ledger(facts: Vec<NewFact>) -> Vec<Fact> {
        let mut chained: Vec<Fact> = Vec::new();
        for (offset, mut new) in (0..).zip(facts) {
            new.at += std::time::Duration::from_secs(offset);
            let fact = chain(chained.last(), new);
            chained.push(fact);
        }
        chained
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::model::signing::BASE64;
    use crate::model::time::in_tests::{millis, unix};
    use base64::Engine as _;
    use serde_json::json;

    fn sample_chain() -> Vec<Fact> {
        ledger(vec![
            new_fact(FactKind::Pending, digest('a'), wavegate()),
            new_fact(FactKind::Approved, digest('a'), alice()),
            NewFact {
                data: FactData::default().with_reason("the plan deletes the database"),
                source: Source::Review { id: 7 },
                ..new_fact(FactKind::Refused, digest('a'), bob())
            },
            new_fact(FactKind::Spent, digest('a'), wavegate()),
        ])
    }

    /// A chain written before `data` was typed, by the code of that time:
    /// one fact of each shape wavegate wrote, an old unbound approval, and
    /// one with keys from elsewhere. It must verify, read into the typed
    /// fields, and hash the same when written again.
    #[test]
    fn a_ledger_written_before_fact_data_was_typed_still_verifies() {
        let text = include_str!("testdata/facts-before-typed-data.json");
        let facts: Vec<Fact> = serde_json::from_str(text).unwrap();
        assert_eq!(facts.len(), 18);
        assert_eq!(verify_chain(&facts), Ok(()));
        let data = |seq: usize| &facts[seq - 1].fact.data;
        assert!(facts.iter().all(|f| f.fact.data.foreign.is_none()));
        assert!(facts[..16].iter().all(|f| f.fact.data.unknown.is_empty()));
        assert_eq!(data(1).members.as_ref().map(Vec::len), Some(2));
        assert!(data(3).head.is_some() && data(3).base.is_some());
        assert!(data(8).withdraws_everyones());
        assert_eq!(data(11).run, Some(12));
        assert!(data(11).merge.is_some());
        assert_eq!(
            data(14).member.as_ref().map(|m| m.to_string()).as_deref(),
            Some("db@prod")
        );
        assert_eq!(
            data(14).rules.as_deref(),
            Some(&["no-destroy".to_owned()][..])
        );
        assert!(data(14).refused.is_some());
        assert_eq!(*data(17), FactData::default());
        assert_eq!(data(18).unknown.len(), 2);
        let again: Vec<Fact> =
            serde_json::from_str(&serde_json::to_string(&facts).unwrap()).unwrap();
        assert_eq!(again, facts);
    }

    #[test]
    fn the_first_fact_follows_genesis_and_each_next_names_the_hash_before() {
        let facts = sample_chain();
        assert_eq!(facts[0].seq, 1);
        assert_eq!(facts[0].prev, genesis());
        for pair in facts.windows(2) {
            assert_eq!(pair[1].seq, pair[0].seq + 1);
            assert_eq!(pair[1].prev, pair[0].hash);
        }
        assert!(facts
            .iter()
            .all(|f| crate::model::Digest::is_digest(f.hash.as_str())));
        assert_eq!(verify_chain(&facts), Ok(()));
    }

    #[test]
    fn the_hash_covers_seq_and_the_previous_hash() {
        let fact = new_fact(FactKind::Approved, digest('a'), alice());
        let base = fact_hash(&genesis(), 1, &fact);
        assert_ne!(fact_hash(&genesis(), 2, &fact), base);
        assert_ne!(fact_hash(&digest('f'), 1, &fact), base);
        assert_eq!(fact_hash(&genesis(), 1, &fact.clone()), base);
    }

    #[test]
    fn an_empty_ledger_verifies() {
        assert_eq!(verify_chain(&[]), Ok(()));
    }

    #[test]
    fn changed_content_is_named_by_its_seq() {
        let mut facts = sample_chain();
        facts[2].fact.data = FactData::default().with_reason("fine by me");
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

    /// The kind is hashed in its serde form and stored in its `as_str`
    /// form: the two are one text, and it reads back.
    #[test]
    fn every_kind_is_stored_and_hashed_as_the_same_text() {
        for kind in FactKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.as_str()));
            assert_eq!(FactKind::parse(&kind.to_string()), Some(kind));
        }
        assert_eq!(FactKind::LockReleased.as_str(), "lock_released");
        assert_eq!(FactKind::JobRetried.as_str(), "job_retried");
        assert_eq!(
            serde_json::to_value(Source::Operator).unwrap(),
            json!({"kind": "operator"})
        );
    }

    /// Written by `openssl genpkey -algorithm ed25519` (PKCS#8 v1, no
    /// public key inside); `openssl pkey -pubout` gives OPENSSL_PUBLIC.
    const OPENSSL_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIA+mzp+zW5m8Jqkin8Czeuehw8h1aojyPDx4Se8O0ZLT
-----END PRIVATE KEY-----
";
    const OPENSSL_PUBLIC: &str = "ed25519:RgelajyHbdQEgbbUZ1gJTrdMGRQRb+aBYCMIZcaJwSs=";

    fn key(byte: u8) -> LedgerKey {
        LedgerKey::from_seed(&[byte; 32])
    }

    /// `sample_chain`, every fact signed by `key`.
    fn signed_chain(key: &LedgerKey) -> Vec<Fact> {
        sample_chain().into_iter().map(|f| key.signed(f)).collect()
    }

    /// The record a server starting with `key` makes of `chains`' heads.
    fn start_over(key: &LedgerKey, chains: &[&[Fact]]) -> SigningStart {
        let heads = chains
            .iter()
            .filter_map(|facts| facts.last())
            .map(|last| {
                let head = LedgerHead {
                    seq: last.seq,
                    hash: last.hash.clone(),
                };
                (last.fact.repo.clone(), head)
            })
            .collect();
        SigningStart::new(key, unix(1_700_000_000_000), heads)
    }

    fn checked<'a>(key: &'a PublicKey, start: &'a SigningStart) -> Option<SignatureCheck<'a>> {
        Some(SignatureCheck { key, start })
    }

    #[test]
    fn a_signature_verifies_with_its_public_key_only_and_for_its_hash_only() {
        let key = key(1);
        let hash = fact_hash(
            &genesis(),
            1,
            &new_fact(FactKind::Approved, digest('a'), alice()),
        );
        let sig = key.sign(hash.as_str());
        assert!(sig.starts_with("ed25519:"), "{sig}");
        assert!(key.public().verifies(hash.as_str(), &sig));
        assert!(!key.public().verifies(digest('b').as_str(), &sig));
        assert!(!self::key(2).public().verifies(hash.as_str(), &sig));
        for garbage in [
            "",
            "ed25519:",
            "ed25519:AAAA",
            &sig[8..],
            &sig.replace("ed25519:", "rsa:"),
        ] {
            assert!(!key.public().verifies(hash.as_str(), garbage), "{garbage}");
        }
    }

    #[test]
    fn a_public_key_reads_back_from_what_it_prints() {
        let public = key(1).public();
        let text = public.to_string();
        assert!(
            text.starts_with("ed25519:") && text.len() == 8 + 44,
            "{text}"
        );
        assert_eq!(text.parse::<PublicKey>(), Ok(public));
        assert_eq!(format!(" {text}\n").parse::<PublicKey>(), Ok(public));
        for bad in [
            "",
            "ed25519:",
            "ed25519:AAAA",
            &text[8..],
            "ssh-ed25519 AAAAC3Nza",
        ] {
            let error = bad.parse::<PublicKey>().unwrap_err();
            assert!(error.to_string().contains("wavegate ledger key"), "{error}");
        }
        // The identity point is a weak key: anything would verify under it.
        let weak = format!(
            "ed25519:{}",
            BASE64.encode({
                let mut bytes = [0u8; 32];
                bytes[0] = 1;
                bytes
            })
        );
        assert!(weak.parse::<PublicKey>().is_err());
    }

    #[test]
    fn a_key_reads_back_from_its_pem_and_from_openssls() {
        let key = key(3);
        let pem = key.to_pkcs8_pem();
        assert!(
            pem.starts_with("-----BEGIN PRIVATE KEY-----"),
            "{}",
            pem.as_str()
        );
        let back = LedgerKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(back.public(), key.public());
        let openssl = LedgerKey::from_pkcs8_pem(OPENSSL_PEM).unwrap();
        assert_eq!(openssl.public().to_string(), OPENSSL_PUBLIC);
        let error = LedgerKey::from_pkcs8_pem(
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap_err();
        assert!(error.to_string().contains("PKCS#8"), "{error}");
    }

    #[test]
    fn a_keys_debug_shows_its_public_half_only() {
        let key = key(4);
        let shown = format!("{key:?}");
        assert_eq!(shown, format!("LedgerKey({})", key.public()));
        assert!(!shown.contains(&BASE64.encode([4u8; 32])), "{shown}");
    }

    #[test]
    fn a_signed_chain_verifies_and_says_how_many_facts_are_signed() {
        let key = key(1);
        let start = start_over(&key, &[]);
        assert!(start.verifies(&key.public()));
        let facts = signed_chain(&key);
        let verified = verify(&facts, checked(&key.public(), &start)).unwrap();
        assert_eq!(
            verified,
            Verified {
                facts: 4,
                head: Some(LedgerHead {
                    seq: 4,
                    hash: facts[3].hash.clone()
                }),
                signatures: Some(Signatures {
                    signed: 4,
                    unsigned: 0
                }),
            }
        );
        assert_eq!(verify(&facts, None).unwrap().signatures, None);
        assert_eq!(verify_chain(&facts), Ok(()));
    }

    #[test]
    fn facts_up_to_the_head_pinned_when_signing_started_are_counted_unsigned_not_broken() {
        let key = key(1);
        let mut facts = sample_chain();
        let start = start_over(&key, &[&facts[..2]]);
        for fact in &mut facts[2..] {
            fact.sig = Some(key.sign(fact.hash.as_str()));
        }
        assert_eq!(
            verify(&facts, checked(&key.public(), &start))
                .unwrap()
                .signatures,
            Some(Signatures {
                signed: 2,
                unsigned: 2
            })
        );
    }

    #[test]
    fn an_unsigned_fact_after_the_pinned_head_is_broken_and_named() {
        let key = key(1);
        let mut facts = sample_chain();
        let start = start_over(&key, &[&facts[..1]]);
        for fact in &mut facts[1..] {
            fact.sig = Some(key.sign(fact.hash.as_str()));
        }
        facts[2].sig = None;
        let broken = verify(&facts, checked(&key.public(), &start)).unwrap_err();
        assert_eq!(
            (broken.seq, &broken.problem),
            (
                3,
                &LinkProblem::Unsigned {
                    signed_after: Some(1)
                }
            )
        );
        let message = broken.to_string();
        assert!(message.contains("broken at seq 3"), "{message}");
        assert!(message.contains("every fact after seq 1"), "{message}");
        assert!(message.contains("not written by wavegate"), "{message}");
        assert_eq!(verify_chain(&facts), Ok(()), "the chain itself holds");
    }

    #[test]
    fn a_forged_fact_chained_correctly_after_signed_ones_is_caught() {
        let key = key(1);
        let start = start_over(&key, &[]);
        let mut facts = signed_chain(&key);
        let forged = chain(
            facts.last(),
            new_fact(FactKind::Approved, digest('a'), bob()),
        );
        facts.push(forged.clone());
        assert_eq!(verify_chain(&facts), Ok(()), "its hash is right");
        let broken = verify(&facts, checked(&key.public(), &start)).unwrap_err();
        assert_eq!(broken.seq, 5);

        // Signed with another key, or with a signature lifted from another fact.
        for sig in [
            self::key(9).sign(forged.hash.as_str()),
            facts[1].sig.clone().unwrap(),
        ] {
            facts[4].sig = Some(sig);
            let broken = verify(&facts, checked(&key.public(), &start)).unwrap_err();
            assert_eq!((broken.seq, broken.problem), (5, LinkProblem::BadSignature));
        }
    }

    #[test]
    fn a_repository_forged_whole_after_signing_started_is_caught_at_its_first_fact() {
        let key = key(1);
        // The ledger was empty when the server started signing.
        let start = start_over(&key, &[]);
        let forged = sample_chain();
        let broken = verify(&forged, checked(&key.public(), &start)).unwrap_err();
        assert_eq!(
            (broken.seq, &broken.problem),
            (1, &LinkProblem::Unsigned { signed_after: None })
        );
        assert!(broken.to_string().contains("had none when signing started"));
    }

    #[test]
    fn a_bad_signature_is_broken_even_on_the_first_fact() {
        let key = key(1);
        let start = start_over(&key, &[]);
        let mut facts = signed_chain(&key);
        facts[0].sig = Some(self::key(2).sign(facts[0].hash.as_str()));
        let broken = verify(&facts, checked(&key.public(), &start)).unwrap_err();
        assert_eq!(
            (broken.seq, &broken.problem),
            (1, &LinkProblem::BadSignature)
        );
        assert!(broken
            .to_string()
            .contains("signature is not the ledger key's"));
    }

    #[test]
    fn the_facts_before_signing_are_pinned_a_rewrite_or_a_cut_is_named() {
        let key = key(1);
        let facts = sample_chain();
        let start = start_over(&key, &[&facts]);
        // Rewritten from seq 2 on, rechained: the pinned head is another fact.
        let rewritten = ledger(
            facts
                .iter()
                .map(|f| NewFact {
                    at: f.fact.at - millis(5_000),
                    ..f.fact.clone()
                })
                .take(4)
                .collect(),
        );
        let broken = verify(&rewritten, checked(&key.public(), &start)).unwrap_err();
        assert_eq!(
            (broken.seq, &broken.problem),
            (4, &LinkProblem::NotTheSignedHead)
        );
        // Cut short below the pinned head.
        let broken = verify(&facts[..2], checked(&key.public(), &start)).unwrap_err();
        assert_eq!(
            (broken.seq, &broken.problem),
            (3, &LinkProblem::CutShort { had: 4 })
        );
        assert!(broken
            .to_string()
            .contains("reached seq 4 when signing started"));
    }

    #[test]
    fn a_signing_start_verifies_only_unchanged_and_with_its_own_key() {
        let key = key(1);
        let facts = sample_chain();
        let start = start_over(&key, &[&facts]);
        assert!(start.verifies(&key.public()));
        assert!(!start.verifies(&self::key(2).public()));
        let mut moved = start.clone();
        moved.heads.get_mut(REPO).unwrap().seq = 2;
        assert!(!moved.verifies(&key.public()));
        let mut later = start.clone();
        later.since += millis(1);
        assert!(!later.verifies(&key.public()));
        let mut more = start.clone();
        more.heads.insert(
            "github:acme/other".into(),
            LedgerHead {
                seq: 9,
                hash: digest('e'),
            },
        );
        assert!(!more.verifies(&key.public()));
        // Its signature is of no use as a fact's.
        let mut fact = facts[0].clone();
        fact.sig = Some(start.sig.clone());
        let empty = start_over(&key, &[]);
        assert!(verify(&[fact], checked(&key.public(), &empty)).is_err());
    }

    #[test]
    fn a_signed_fact_reads_back_from_its_json_and_an_unsigned_one_has_no_sig_field() {
        let key = key(1);
        let signed = key.signed(sample_chain().remove(0));
        let line = serde_json::to_string(&signed).unwrap();
        assert_eq!(serde_json::from_str::<Fact>(&line).unwrap(), signed);
        let unsigned = serde_json::to_value(&sample_chain()[0]).unwrap();
        assert!(unsigned.get("sig").is_none(), "{unsigned}");
    }
}
