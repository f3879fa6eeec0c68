//! Configuration: the repository's `wavegate.toml`, the server's settings
//! (declared in `vars`, checked in `settings`) and its ledger key.

pub(crate) mod base;
pub(crate) mod check;
pub(crate) mod cost;
pub(crate) mod discover;
pub(crate) mod drift;
pub(crate) mod execution;
pub(crate) mod glob;
pub(crate) mod groups;
pub(crate) mod hooks;
pub mod ledger_key;
pub mod operator;
pub(crate) mod quiet;
pub(crate) mod raw;
pub mod repo;
mod secret;
pub mod settings;
pub mod terraform;
pub mod vars;

pub(crate) use base::BaseRules;
pub use check::ConfigError;
pub use raw::CONFIG_FILE;
pub use repo::RepoConfig;
pub use settings::{Settings, DEFAULT_HEARTBEAT};
