//! Forges: our own event enum and newtypes (forge payloads are converted at
//! the boundary and never reach the domain), webhook parsing, the GitHub
//! and Forgejo API clients, and their Actions (workflow dispatches and runs)
//! in our own terms.

pub mod actions;
pub mod client;
pub mod events;
pub mod forgejo;
pub mod github;
pub mod listing;
pub mod registry;
pub mod retry;
pub mod types;
pub mod webhook;
mod wire;

use crate::model::{CommitSha, ForgeKind, PrNumber, RepoId, UnixMs, User};
use serde::{Deserialize, Serialize};

/// The repository an event is about, with what the worker needs to fetch it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoRef {
    pub id: RepoId,
    /// The forge's numeric repository id.
    pub forge_id: u64,
    /// Where `git fetch` reads it (https, ssh or file).
    pub clone_url: String,
    /// The GitHub App installation the delivery came through, if any.
    pub installation: Option<u64>,
}

/// A pull request as an event describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequest {
    pub number: PrNumber,
    pub title: String,
    pub author: User,
    pub head_sha: CommitSha,
    pub head_ref: String,
    pub base_ref: String,
    pub base_sha: CommitSha,
    /// The head lives in another repository (a fork).
    pub from_fork: bool,
    /// Where to fetch the head from when it is a fork.
    pub head_clone_url: Option<String>,
}

/// Where a pull request stands, as the forge answers now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrState {
    Open,
    /// Closed without merging.
    Closed,
    Merged {
        merge_sha: CommitSha,
    },
}

/// What happened to a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PrAction {
    Opened,
    Reopened,
    /// New commits (`synchronize`; Forgejo `synchronized`).
    Pushed,
    /// The base branch changed (`edited` with `changes.base`).
    BaseChanged,
    Closed {
        merged: bool,
        merge_sha: Option<CommitSha>,
    },
}

/// The state of a submitted review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
}

/// A webhook delivery, in our own terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    PullRequest {
        repo: RepoRef,
        pr: PullRequest,
        action: PrAction,
        /// Who caused it: for a push, who pushed the new head.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sender: Option<User>,
    },
    /// A comment created on a pull request, or on an issue when a line of it
    /// opens with `/apply` (edits and deletions are not events).
    Comment {
        repo: RepoRef,
        /// The pull request's number, or the issue's.
        pr: PrNumber,
        comment_id: u64,
        author: User,
        body: String,
        /// When the comment was written (unix ms), as the forge says.
        written_at: Option<UnixMs>,
    },
    Review {
        repo: RepoRef,
        pr: PrNumber,
        review_id: u64,
        author: User,
        state: ReviewState,
        commit: Option<CommitSha>,
        /// When it was submitted (unix ms, to the second), when the payload
        /// says (GitHub's does; Forgejo's does not).
        submitted_at: Option<UnixMs>,
    },
    Installation {
        installation: u64,
        account: String,
        created: bool,
    },
    Ping,
    /// A reviewer asked for the check to run again.
    CheckRunRerequested {
        repo: RepoRef,
        head_sha: CommitSha,
        prs: Vec<PrNumber>,
    },
}
