//! The vocabulary every other module speaks, with no I/O and no import of
//! the rest of the crate: who and where ([`RepoId`], [`PrNumber`],
//! [`CommitSha`], [`User`], [`ForgeKind`]), what was planned (canonical
//! JSON and its [`Digest`]s, [`MemberId`] `component@stage`, [`StageName`], a cost in [`Money`]) and where
//! approvals are recorded ([`GateId`]), and the components' dependency
//! graph ([`DependencyGraph`]), and text a pull request controls ([`Untrusted`], rendered
//! inert). Each has one `Display`/`FromStr`, so a
//! name is spelled and read in one place.

pub mod canonical;
mod digest;
mod gate_id;
mod graph;
mod ids;
mod job_kind;
mod member;
mod money;
pub(crate) mod signing;
pub(crate) mod time;
pub mod untrusted;

pub(crate) use digest::DIGEST_HEX_DIGITS;
pub use digest::{Digest, DigestOver, NotADigest, DIGEST_PREFIX};
pub use gate_id::GateId;
pub(crate) use gate_id::{approve_stage_words, stage_gate_key};
pub(crate) use graph::DependencyGraph;
pub use ids::{CommitSha, ForgeKind, PrNumber, RepoId, User};
pub use job_kind::{JobKind, UnknownJobKind};
pub use member::{DriftSubject, MemberId, PlanTarget, StageName, WaveName};
pub use money::{Money, NotAnAmount};
pub use time::UnixMs;
pub use untrusted::Untrusted;
