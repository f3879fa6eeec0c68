//! Configuration: the repository's `wavegate.toml`.
