//! The plan engine: fan-out derivation, plan files, digests, coverage, the
//! command runner and the change set a reviewer approves.

pub mod bootstrap;
pub(crate) mod changeset;
pub(crate) mod cost;
pub(crate) mod coverage;
pub(crate) mod drift;
pub mod engine;
pub(crate) mod executor;
pub mod fanout;
pub(crate) mod hook_run;
pub mod live;
pub mod outcome;
pub mod path;
pub mod planfile;
pub(crate) mod preview;
pub(crate) mod redact;
pub mod rego;
pub(crate) mod runner;
pub mod survey;
pub(crate) mod tail;
pub mod targets;
pub mod terraform;
pub mod terraform_run;
