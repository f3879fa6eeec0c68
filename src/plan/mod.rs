//! The plan engine: fan-out derivation, plan files, digests, coverage, the
//! command runner and the change set a reviewer approves.

pub mod changeset;
pub mod coverage;
pub mod engine;
pub mod fanout;
pub mod path;
pub mod planfile;
pub mod preview;
pub mod redact;
pub mod runner;
pub mod terraform;
