//! Forges: our own event enum and newtypes (forge payloads are converted at
//! the boundary and never reach the domain), webhook parsing, and the GitHub
//! and Forgejo API clients.

pub mod client;
pub mod events;
pub mod forgejo;
pub mod github;
pub mod listing;
pub mod registry;
pub mod retry;
pub mod webhook;
mod wire;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which forge a repository lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    GitHub,
    /// Forgejo and Gitea share the API and payloads.
    Forgejo,
}

impl ForgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ForgeKind::GitHub => "github",
            ForgeKind::Forgejo => "forgejo",
        }
    }
}

impl fmt::Display for ForgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A repository: its forge and `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RepoId {
    pub forge: ForgeKind,
    /// `owner/name`, as the forge spells it.
    pub full_name: String,
}

impl RepoId {
    pub fn new(forge: ForgeKind, full_name: impl Into<String>) -> Self {
        Self {
            forge,
            full_name: full_name.into(),
        }
    }

    pub fn owner(&self) -> &str {
        self.full_name
            .split_once('/')
            .map_or(&self.full_name[..], |(o, _)| o)
    }

    pub fn name(&self) -> &str {
        self.full_name.split_once('/').map_or("", |(_, n)| n)
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.forge, self.full_name)
    }
}

/// A pull request's number within its repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PrNumber(pub u64);

impl fmt::Display for PrNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A full commit sha (40 or 64 lowercase hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CommitSha(String);

impl CommitSha {
    pub fn parse(text: &str) -> Result<Self, String> {
        let ok = matches!(text.len(), 40 | 64)
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!("`{text}` is not a full commit sha"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl TryFrom<String> for CommitSha {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<CommitSha> for String {
    fn from(sha: CommitSha) -> Self {
        sha.0
    }
}

impl fmt::Display for CommitSha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A change-set digest, `sha256:<64 hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PlanDigest(String);

impl PlanDigest {
    pub fn parse(text: &str) -> Result<Self, String> {
        if crate::plan::canonical::is_digest(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!("`{text}` is not a sha256 digest"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PlanDigest {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<PlanDigest> for String {
    fn from(d: PlanDigest) -> Self {
        d.0
    }
}

impl fmt::Display for PlanDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A forge account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u64,
    pub login: String,
    /// A bot or app account (GitHub `type: "Bot"`, `[bot]` logins).
    pub is_bot: bool,
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A comment created on a pull request (edits and deletions are not events).
    Comment {
        repo: RepoRef,
        pr: PrNumber,
        comment_id: u64,
        author: User,
        body: String,
        /// When the comment was written (unix ms), as the forge says.
        written_at: Option<i64>,
    },
    Review {
        repo: RepoRef,
        pr: PrNumber,
        review_id: u64,
        author: User,
        state: ReviewState,
        commit: Option<CommitSha>,
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
