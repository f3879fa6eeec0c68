//! wavegate: plan every component a pull request touches, bind the plans into
//! one digest a reviewer approves, and apply in waves behind gates.
//!
//! The domain (`plan`, `gate`, `apply`, `report`) never imports the edges (`forge`, `store`,
//! `server`, `worker`); the worker is the one place that ties them together.
//! `model` is the vocabulary all of them speak and imports nothing; `metrics`
//! is a leaf every module may record into; `app` is the composition root
//! that starts them all.
//!
//! Items are `pub(crate)` unless the binary, the tests or the benches use
//! them; `unreachable_pub` keeps it so, and dead code stays visible.

#![warn(unreachable_pub)]

pub mod app;
pub mod apply;
pub mod config;
// The integration tests check run tokens through its real key fetcher.
pub mod dispatch;
pub mod forge;
pub mod gate;
pub mod git;
pub mod jobs;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod plan;
pub mod remote;
pub mod report;
// The code that confines hostile input: unsafe code only in the modules it
// allows it in (std's pre_exec, and calls rustix has no safe form of).
#[deny(unsafe_code)]
pub mod sandbox;
pub mod server;
pub mod store;
pub mod web;
pub mod worker;

#[cfg(test)]
mod layering;
