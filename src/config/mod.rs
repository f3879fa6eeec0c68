//! Configuration: the repository's `wavegate.toml`, the server's settings
//! and its ledger key.

pub mod base;
pub mod glob;
pub mod ledger_key;
pub mod repo;
pub mod settings;

pub use base::BaseRules;
pub use repo::{ConfigError, RepoConfig, CONFIG_FILE};
pub use settings::Settings;
