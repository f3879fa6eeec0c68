//! The pull-request, issue and repository shapes GitHub's and Forgejo's
//! REST APIs share, read with our own serde structs; each forge says how it
//! reads a user.

use super::listing::ListedPull;
use super::types::unix_ms;
use super::{PrState, PullRequest};
use crate::model::{CommitSha, PrNumber, User};
use anyhow::{anyhow, Result};
use serde::Deserialize;

/// `GET /repos/{owner}/{repo}` on either forge: what wavegate reads of it.
#[derive(Deserialize)]
pub(super) struct WireRepository {
    pub(super) default_branch: String,
}

/// An issue as either forge answers its creation: what wavegate reads of it.
#[derive(Deserialize)]
pub(super) struct WireIssue {
    pub(super) number: u64,
}

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
    /// `open` or `closed`.
    state: String,
    #[serde(default)]
    merged: bool,
    merge_commit_sha: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
}

impl<U: Into<User>> WirePull<U> {
    /// A pull request as a listing shows it (with when it last changed).
    pub(super) fn into_listed(self, call: &str) -> Result<ListedPull> {
        let updated_at = self.updated_at.as_deref().and_then(unix_ms);
        let (pr, state) = self.into_pull_request(call)?;
        Ok(ListedPull {
            pr,
            state,
            updated_at,
        })
    }

    /// The pull request and where it stands; `call` names the request in
    /// errors. A merged pull request without a merge commit counts as closed
    /// (as its `closed` webhook would: nothing to apply).
    pub(super) fn into_pull_request(self, call: &str) -> Result<(PullRequest, PrState)> {
        let sha = |text: &str| CommitSha::parse(text).map_err(|e| anyhow!("{call}: {e}"));
        let state = match (self.state.as_str(), self.merged, &self.merge_commit_sha) {
            ("open", _, _) => PrState::Open,
            (_, true, Some(merge)) => PrState::Merged {
                merge_sha: sha(merge)?,
            },
            _ => PrState::Closed,
        };
        // A head repository that is gone (a deleted fork) counts as a fork.
        let from_fork = match (&self.head.repo, &self.base.repo) {
            (Some(head), Some(base)) => head.full_name != base.full_name,
            _ => true,
        };
        let pr = PullRequest {
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
        };
        Ok((pr, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Login {
        login: String,
    }

    impl From<Login> for User {
        fn from(user: Login) -> Self {
            User {
                id: 1,
                login: user.login,
                is_bot: false,
            }
        }
    }

    fn read(state: &str, merged: bool, merge: Option<&str>) -> PrState {
        let branch = |name: &str, sha: char| {
            json!({ "ref": name, "sha": sha.to_string().repeat(40),
                    "repo": { "full_name": "acme/infra", "clone_url": "https://x/acme/infra.git" } })
        };
        let body = json!({
            "number": 4, "title": "t", "user": { "login": "dev" },
            "head": branch("feature", 'a'), "base": branch("main", 'b'),
            "state": state, "merged": merged, "merge_commit_sha": merge,
        });
        let wire: WirePull<Login> = serde_json::from_value(body).unwrap();
        let (pr, state) = wire.into_pull_request("GET /pulls/4").unwrap();
        assert_eq!(pr.head_sha.as_str(), "a".repeat(40));
        state
    }

    #[test]
    fn the_state_says_open_closed_or_merged_as_what() {
        let merge = "d".repeat(40);
        // GitHub names the test merge commit of an open pull request too.
        assert_eq!(read("open", false, Some(&merge)), PrState::Open);
        assert_eq!(read("closed", false, None), PrState::Closed);
        assert_eq!(
            read("closed", true, Some(&merge)),
            PrState::Merged {
                merge_sha: CommitSha::parse(&merge).unwrap()
            }
        );
        assert_eq!(read("closed", true, None), PrState::Closed);
    }
}
