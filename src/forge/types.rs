//! What the forge operations speak in, shared by the enum over the clients
//! (`client`) and each client (`github`, `forgejo`): checks, comments,
//! issues, permissions, reactions, and how both forges write times.

use crate::model::{UnixMs, User};
use serde_json::{json, Value};

/// The plan check's name (GitHub) or status context (Forgejo), on a head.
pub const CHECK_NAME: &str = "wavegate/plan";
/// The apply run's check or status, on the merge commit.
pub(crate) const APPLY_CHECK_NAME: &str = "wavegate/apply";
/// GitHub's limit on a check run's output summary, in characters.
pub(crate) const CHECK_SUMMARY_LIMIT: usize = 65_535;
/// Forgejo's (and GitHub's) limit on a commit status description, in characters.
pub(crate) const STATUS_DESCRIPTION_LIMIT: usize = 140;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckState {
    InProgress,
    ActionRequired,
    Success,
    Failure,
    Neutral,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// [`CHECK_NAME`] or [`APPLY_CHECK_NAME`].
    pub name: &'static str,
    pub state: CheckState,
    pub title: String,
    /// Markdown.
    pub summary: String,
    pub details_url: Option<String>,
}

impl CheckReport {
    /// The plan check ([`CHECK_NAME`]) on a pull request's head.
    pub(crate) fn plan(state: CheckState, title: String, summary: String) -> Self {
        Self {
            name: CHECK_NAME,
            state,
            title,
            summary,
            details_url: None,
        }
    }

    /// The check, linking to the page that shows more (the pull request's,
    /// when this server shows its pages).
    pub(crate) fn linked(self, details_url: Option<String>) -> Self {
        Self {
            details_url,
            ..self
        }
    }

    /// The apply check ([`APPLY_CHECK_NAME`]) on a merge commit.
    pub(crate) fn apply(state: CheckState, title: String, summary: String) -> Self {
        Self {
            name: APPLY_CHECK_NAME,
            ..Self::plan(state, title, summary)
        }
    }
}

/// A comment on a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: u64,
    pub body: String,
    pub(crate) author: User,
    /// Written by this bot (GitHub: a Bot account; Forgejo: the token's user).
    pub(crate) ours: bool,
    /// When it was written and last edited (unix ms), as the forge says.
    pub created_at: Option<UnixMs>,
    pub updated_at: Option<UnixMs>,
}

/// The longest issue body sent, in characters: GitHub's cap (as on a
/// comment); Forgejo states none, and is held to the same.
pub(crate) const ISSUE_BODY_LIMIT: usize = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueState {
    Open,
    Closed,
}

/// What to change of an issue; a field left `None` stays as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IssueEdit<'a> {
    pub title: Option<&'a str>,
    pub body: Option<&'a str>,
    pub state: Option<IssueState>,
}

impl IssueEdit<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        self.title.is_none() && self.body.is_none() && self.state.is_none()
    }

    /// The edit's JSON, in the fields both forges name alike.
    pub(crate) fn fields(&self) -> Value {
        let mut fields = json!({});
        if let Some(title) = self.title {
            fields["title"] = json!(title);
        }
        if let Some(body) = self.body {
            fields["body"] = json!(body);
        }
        if let Some(state) = self.state {
            fields["state"] = json!(match state {
                IssueState::Open => "open",
                IssueState::Closed => "closed",
            });
        }
        fields
    }
}

/// `since` as both forges read it: RFC 3339, UTC, to the second (rounded
/// down, so that the comment `since` came from is listed again).
pub(crate) fn since_param(since: UnixMs) -> String {
    chrono::DateTime::from_timestamp_millis(since.millis())
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Unix ms of an RFC 3339 time, as the forges write them.
pub(super) fn unix_ms(text: &str) -> Option<UnixMs> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| UnixMs::from_millis(t.timestamp_millis()))
}

/// A user's permission on a repository, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

impl Permission {
    /// Reads the forge's word (`admin`, `write`, …; Forgejo `owner` is admin).
    pub(crate) fn from_forge(text: &str) -> Self {
        match text {
            "admin" | "owner" => Permission::Admin,
            "maintain" => Permission::Maintain,
            "write" => Permission::Write,
            "triage" => Permission::Triage,
            "read" => Permission::Read,
            _ => Permission::None,
        }
    }

    pub(crate) fn can_write(self) -> bool {
        self >= Permission::Write
    }
}

/// A reaction on a comment (the same words on both forges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    PlusOne,
    MinusOne,
    Confused,
    Eyes,
    Rocket,
    Heart,
    Hooray,
    Laugh,
}

impl Reaction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reaction::PlusOne => "+1",
            Reaction::MinusOne => "-1",
            Reaction::Confused => "confused",
            Reaction::Eyes => "eyes",
            Reaction::Rocket => "rocket",
            Reaction::Heart => "heart",
            Reaction::Hooray => "hooray",
            Reaction::Laugh => "laugh",
        }
    }
}
