//! wavegate: plan every component a pull request touches, bind the plans into
//! one digest a reviewer approves, and apply in waves behind gates.
//!
//! The domain (`plan`, `report`) never imports the edges; `main.rs` and later
//! the server and worker tie it to git, processes and forges.

pub mod config;
pub mod forge;
pub mod plan;
pub mod report;
pub mod store;
