//! Configuration: the repository's `wavegate.toml` and the server's settings.

pub mod repo;
pub mod settings;

pub use repo::{ConfigError, RepoConfig, CONFIG_FILE};
pub use settings::Settings;
