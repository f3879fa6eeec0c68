//! The pull-request shape GitHub's and Forgejo's REST APIs share, read with
//! our own serde structs; each forge says how it reads a user.

use super::{CommitSha, PrNumber, PullRequest, User};
use anyhow::{anyhow, Result};
use serde::Deserialize;

#[derive(Deserialize)]
struct WireRepo {
    full_name: String,
    clone_url: String,
}

#[derive(Deserialize)]
struct WireBranch {
    #[serde(rename = "ref")]
    name: String,
    sha: String,
    repo: Option<WireRepo>,
}

/// `GET /repos/{owner}/{repo}/pulls/{number}` on either forge.
#[derive(Deserialize)]
pub(super) struct WirePull<U> {
    number: u64,
    title: String,
    user: U,
    head: WireBranch,
    base: WireBranch,
}

impl<U: Into<User>> WirePull<U> {
    /// `call` names the request in errors.
    pub(super) fn into_pull_request(self, call: &str) -> Result<PullRequest> {
        let sha = |text: &str| CommitSha::parse(text).map_err(|e| anyhow!("{call}: {e}"));
        // A head repository that is gone (a deleted fork) counts as a fork.
        let from_fork = match (&self.head.repo, &self.base.repo) {
            (Some(head), Some(base)) => head.full_name != base.full_name,
            _ => true,
        };
        Ok(PullRequest {
            number: PrNumber(self.number),
            title: self.title,
            author: self.user.into(),
            head_sha: sha(&self.head.sha)?,
            base_sha: sha(&self.base.sha)?,
            head_ref: self.head.name,
            base_ref: self.base.name,
            head_clone_url: from_fork
                .then(|| self.head.repo.map(|r| r.clone_url))
                .flatten(),
            from_fork,
        })
    }
}
