//! The plan engine: fan-out derivation, plan files, digests, coverage, the
//! command runner and the change set a reviewer approves.

pub mod canonical;
pub mod path;
pub mod planfile;
pub mod terraform;
