//! Git, through the `git` CLI and one hardened command builder
//! ([`command`]): the repositories' bare mirrors, fetched by commit
//! ([`mirror`]), and what a job reads from them ([`repo`]: revisions, a
//! file at a commit, changed paths, the target before a merge, a commit's
//! files in a fresh directory). The reads block; async code runs them
//! through [`off_runtime`], never on the runtime's own threads.

pub(crate) mod command;
pub(crate) mod mirror;
mod repo;

pub use mirror::{FetchRequest, Workspace};
pub use repo::{
    changed_paths, export_tree, is_repository, list_files, read_file, resolve, target_before_merge,
};

/// Runs blocking git work on the blocking pool, off the async runtime's threads.
pub(crate) async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| anyhow::anyhow!("a git task stopped: {e}"))?
}
