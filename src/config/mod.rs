//! Configuration: the repository's `wavegate.toml` (server settings come later).

pub mod repo;

pub use repo::{ConfigError, RepoConfig, CONFIG_FILE};
