//! Who and where: the forge, a repository, a pull request's number, a
//! commit, an account. Forge payloads are converted into these at the
//! boundary (`forge::events`); nothing past it sees a forge's own types.

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
    pub(crate) fn as_str(self) -> &'static str {
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

impl std::str::FromStr for ForgeKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        [ForgeKind::GitHub, ForgeKind::Forgejo]
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| format!("`{text}` is not a forge wavegate knows; use github or forgejo"))
    }
}

/// A repository: its forge and `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RepoId {
    pub(crate) forge: ForgeKind,
    /// `owner/name`, as the forge spells it.
    pub(crate) full_name: String,
}

impl RepoId {
    pub fn new(forge: ForgeKind, full_name: impl Into<String>) -> Self {
        Self {
            forge,
            full_name: full_name.into(),
        }
    }

    /// Where its page is on this server: `/repos/github/acme/infra`.
    pub(crate) fn page_path(&self) -> String {
        format!("/repos/{}/{}", self.forge, self.full_name)
    }

    /// Where one of its pull requests' page is: `/repos/github/acme/infra/pulls/42`.
    pub(crate) fn pull_page_path(&self, pr: PrNumber) -> String {
        format!("{}/pulls/{}", self.page_path(), pr.0)
    }

    pub(crate) fn owner(&self) -> &str {
        self.full_name
            .split_once('/')
            .map_or(&self.full_name[..], |(o, _)| o)
    }

    pub(crate) fn name(&self) -> &str {
        self.full_name.split_once('/').map_or("", |(_, n)| n)
    }
}

impl RepoId {
    /// The repository's key in the ledger (`github:acme/infra`): stored in
    /// every fact and hashed into its chain, so its spelling never changes,
    /// whatever `Display` may come to show.
    pub(crate) fn ledger_key(&self) -> String {
        format!("{}:{}", self.forge, self.full_name)
    }
}

/// As logs and replies name it: `github:acme/infra`.
impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.forge, self.full_name)
    }
}

/// Reads `github:acme/infra` (as logs and replies name it) or
/// `github/acme/infra` (as the pages' addresses do).
impl std::str::FromStr for RepoId {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (forge, full_name) = text
            .split_once(':')
            .or_else(|| text.split_once('/'))
            .ok_or_else(|| format!("`{text}` is not a repository; write it as forge:owner/name, e.g. github:acme/infra"))?;
        let forge = forge.parse()?;
        match full_name.split_once('/') {
            Some((owner, name)) if !owner.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(RepoId::new(forge, full_name))
            }
            _ => Err(format!(
                "`{text}` is not a repository; write it as forge:owner/name, e.g. github:acme/infra"
            )),
        }
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

    pub(crate) fn short(&self) -> &str {
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

/// A forge account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u64,
    pub login: String,
    /// A bot or app account (GitHub `type: "Bot"`, `[bot]` logins).
    pub is_bot: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts written before carry this key: it may never change.
    #[test]
    fn a_repository_s_ledger_key_is_forge_colon_full_name() {
        let repo = RepoId::new(ForgeKind::GitHub, "acme/infra");
        assert_eq!(repo.ledger_key(), "github:acme/infra");
        let repo = RepoId::new(ForgeKind::Forgejo, "acme/site");
        assert_eq!(repo.ledger_key(), "forgejo:acme/site");
        assert_eq!((repo.owner(), repo.name()), ("acme", "site"));
    }

    #[test]
    fn a_repository_reads_as_logs_or_as_addresses_name_it() {
        let repo = RepoId::new(ForgeKind::GitHub, "acme/infra");
        assert_eq!("github:acme/infra".parse(), Ok(repo.clone()));
        assert_eq!("github/acme/infra".parse(), Ok(repo.clone()));
        assert_eq!(repo.to_string().parse(), Ok(repo));
        for wrong in [
            "acme/infra",
            "github:acme",
            "github:acme/",
            "gitlab:a/b",
            "github:a/b/c",
        ] {
            assert!(wrong.parse::<RepoId>().is_err(), "{wrong}");
        }
    }
}
