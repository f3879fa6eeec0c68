//! The forge operations the worker needs, one enum over the GitHub and
//! Forgejo clients: the report comment found again by its marker, the plan
//! check (check run or commit status), pull requests, permissions, reactions
//! and the header `git fetch` authenticates with.

use super::forgejo::ForgejoClient;
use super::github::GitHubClient;
use super::listing::{ListedComment, ListedPull, ListedReview, Page, RateBudget};
use super::{PrState, PullRequest, RepoRef};
use crate::config::settings::Secret;
use crate::model::{CommitSha, PrNumber, User};
use crate::report::REPORT_MARKER;
use anyhow::Result;
use base64::Engine;
use serde_json::json;
use std::sync::Arc;

pub use super::github::{convert_manifest, AppCredentials};

/// The plan check's name (GitHub) or status context (Forgejo), on a head.
pub const CHECK_NAME: &str = "wavegate/plan";
/// The apply run's check or status, on the merge commit.
pub const APPLY_CHECK_NAME: &str = "wavegate/apply";
/// GitHub's limit on a check run's output summary, in characters.
pub const CHECK_SUMMARY_LIMIT: usize = 65_535;
/// Forgejo's (and GitHub's) limit on a commit status description, in characters.
pub const STATUS_DESCRIPTION_LIMIT: usize = 140;

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

/// A comment on a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: u64,
    pub body: String,
    pub author: User,
    /// Written by this bot (GitHub: a Bot account; Forgejo: the token's user).
    pub ours: bool,
    /// When it was written and last edited (unix ms), as the forge says.
    pub created_at: Option<i64>,
    pub updated_at: Option<i64>,
}

/// `since` as both forges read it: RFC 3339, UTC, to the second (rounded
/// down, so that the comment `since` came from is listed again).
pub fn since_param(since: i64) -> String {
    chrono::DateTime::from_timestamp_millis(since)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Unix ms of an RFC 3339 time, as the forges write them.
pub(super) fn unix_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
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
    pub fn from_forge(text: &str) -> Self {
        match text {
            "admin" | "owner" => Permission::Admin,
            "maintain" => Permission::Maintain,
            "write" => Permission::Write,
            "triage" => Permission::Triage,
            "read" => Permission::Read,
            _ => Permission::None,
        }
    }

    pub fn can_write(self) -> bool {
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
    pub fn as_str(self) -> &'static str {
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

#[derive(Debug, Clone)]
pub enum ForgeClient {
    GitHub(Arc<GitHubClient>),
    Forgejo(Arc<ForgejoClient>),
}

impl ForgeClient {
    /// The report comment: edit `known` if given and still there, else find
    /// ours by [`REPORT_MARKER`] among the PR's comments and edit it, else
    /// create it. Returns its id.
    pub async fn upsert_report(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        known: Option<u64>,
        body: &str,
    ) -> Result<u64> {
        if let Some(id) = known {
            if self.edit_comment(repo, id, body).await? {
                return Ok(id);
            }
        }
        let existing = self
            .comments(repo, pr)
            .await?
            .into_iter()
            .find(|c| c.ours && c.body.contains(REPORT_MARKER));
        if let Some(report) = existing {
            if self.edit_comment(repo, report.id, body).await? {
                return Ok(report.id);
            }
        }
        self.reply(repo, pr, body).await
    }

    /// A new comment on the pull request; returns its id.
    pub async fn reply(&self, repo: &RepoRef, pr: PrNumber, body: &str) -> Result<u64> {
        match self {
            ForgeClient::GitHub(c) => c.create_comment(repo, pr, body).await,
            ForgeClient::Forgejo(c) => c.create_comment(repo, pr, body).await,
        }
    }

    pub async fn comments(&self, repo: &RepoRef, pr: PrNumber) -> Result<Vec<Comment>> {
        self.comments_since(repo, pr, None).await
    }

    /// The comments on the pull request updated at or after `since` (unix
    /// ms, read to the second), or all of them.
    pub async fn comments_since(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        since: Option<i64>,
    ) -> Result<Vec<Comment>> {
        match self {
            ForgeClient::GitHub(c) => c.comments(repo, pr, since).await,
            ForgeClient::Forgejo(c) => c.comments(repo, pr, since).await,
        }
    }

    async fn edit_comment(&self, repo: &RepoRef, id: u64, body: &str) -> Result<bool> {
        match self {
            ForgeClient::GitHub(c) => c.edit_comment(repo, id, body).await,
            ForgeClient::Forgejo(c) => c.edit_comment(repo, id, body).await,
        }
    }

    /// GitHub: check run [`CHECK_NAME`] on `head` (created, or `known`
    /// updated); returns its id. Forgejo: commit status with that context;
    /// returns None.
    pub async fn publish_check(
        &self,
        repo: &RepoRef,
        head: &CommitSha,
        known: Option<u64>,
        report: &CheckReport,
    ) -> Result<Option<u64>> {
        match self {
            ForgeClient::GitHub(c) => {
                let mut fields = json!({
                    "name": report.name,
                    "output": {
                        "title": report.title,
                        "summary": fit_summary(&report.summary, CHECK_SUMMARY_LIMIT),
                    },
                });
                match github_conclusion(report.state) {
                    Some(conclusion) => {
                        fields["status"] = json!("completed");
                        fields["conclusion"] = json!(conclusion);
                    }
                    None => fields["status"] = json!("in_progress"),
                }
                if let Some(url) = &report.details_url {
                    fields["details_url"] = json!(url);
                }
                c.publish_check_run(repo, head, known, fields)
                    .await
                    .map(Some)
            }
            ForgeClient::Forgejo(c) => {
                let description = cut(&report.title, STATUS_DESCRIPTION_LIMIT);
                c.set_status(
                    repo,
                    head,
                    report.name,
                    forgejo_state(report.state),
                    &description,
                    report.details_url.as_deref(),
                )
                .await
                .map(|()| None)
            }
        }
    }

    pub async fn pull_request(&self, repo: &RepoRef, pr: PrNumber) -> Result<PullRequest> {
        Ok(self.pull_request_state(repo, pr).await?.0)
    }

    /// The pull request and whether it is open, closed or merged (and as what).
    pub async fn pull_request_state(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<(PullRequest, PrState)> {
        match self {
            ForgeClient::GitHub(c) => c.pull_request(repo, pr).await,
            ForgeClient::Forgejo(c) => c.pull_request(repo, pr).await,
        }
    }

    /// One page (from 1) of the repository's open pull requests, asked for
    /// with the `ETag` of the last answer for that page.
    pub async fn open_pulls_page(
        &self,
        repo: &RepoRef,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedPull>> {
        match self {
            ForgeClient::GitHub(c) => c.open_pulls_page(repo, page, etag).await,
            ForgeClient::Forgejo(c) => c.open_pulls_page(repo, page, etag).await,
        }
    }

    /// One page (from 1) of the comments on the repository's issues and
    /// pull requests updated at or after `since` (unix ms, to the second).
    pub async fn repo_comments_page(
        &self,
        repo: &RepoRef,
        since: Option<i64>,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedComment>> {
        match self {
            ForgeClient::GitHub(c) => c.repo_comments_page(repo, since, page, etag).await,
            ForgeClient::Forgejo(c) => c.repo_comments_page(repo, since, page, etag).await,
        }
    }

    /// One page (from 1) of the pull request's submitted reviews, oldest
    /// first, asked for with the `ETag` of the last answer for that page.
    pub async fn pull_reviews_page(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedReview>> {
        match self {
            ForgeClient::GitHub(c) => c.pull_reviews_page(repo, pr, page, etag).await,
            ForgeClient::Forgejo(c) => c.pull_reviews_page(repo, pr, page, etag).await,
        }
    }

    /// The request budget the forge last stated for `repo`'s credentials
    /// (GitHub: its installation's); None where the forge states none.
    pub async fn rate_budget(&self, repo: &RepoRef) -> Result<Option<RateBudget>> {
        match self {
            ForgeClient::GitHub(c) => c.rate_budget(repo).await,
            ForgeClient::Forgejo(_) => Ok(None),
        }
    }

    pub async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission> {
        match self {
            ForgeClient::GitHub(c) => c.permission(repo, login).await,
            ForgeClient::Forgejo(c) => c.permission(repo, login).await,
        }
    }

    /// The login this bot's comments carry.
    pub async fn bot_login(&self) -> Result<String> {
        match self {
            ForgeClient::GitHub(c) => c.bot_login().await,
            ForgeClient::Forgejo(c) => c.login().await,
        }
    }

    /// Whether `login` is an active member of the team `slug` of the
    /// repository's owner (GitHub). Forgejo teams are not consulted: false.
    pub async fn in_team(&self, repo: &RepoRef, slug: &str, login: &str) -> Result<bool> {
        match self {
            ForgeClient::GitHub(c) => c.in_team(repo, slug, login).await,
            ForgeClient::Forgejo(_) => Ok(false),
        }
    }

    pub async fn react(&self, repo: &RepoRef, comment_id: u64, reaction: Reaction) -> Result<()> {
        match self {
            ForgeClient::GitHub(c) => c.react(repo, comment_id, reaction).await,
            ForgeClient::Forgejo(c) => c.react(repo, comment_id, reaction).await,
        }
    }

    /// The value of an `Authorization` header for `git fetch` over http(s),
    /// or None for other URLs (file://, paths).
    pub async fn git_auth_header(&self, repo: &RepoRef) -> Result<Option<Secret>> {
        let url = repo.clone_url.to_ascii_lowercase();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Ok(None);
        }
        match self {
            ForgeClient::GitHub(c) => {
                let token = c.installation_token(repo).await?;
                let pair = format!("x-access-token:{}", token.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Ok(Some(Secret::new(format!("Basic {encoded}"))))
            }
            ForgeClient::Forgejo(c) => {
                Ok(Some(Secret::new(format!("token {}", c.token().expose()))))
            }
        }
    }
}

fn github_conclusion(state: CheckState) -> Option<&'static str> {
    match state {
        CheckState::InProgress => None,
        CheckState::ActionRequired => Some("action_required"),
        CheckState::Success => Some("success"),
        CheckState::Failure => Some("failure"),
        CheckState::Neutral => Some("neutral"),
    }
}

fn forgejo_state(state: CheckState) -> &'static str {
    match state {
        CheckState::InProgress | CheckState::ActionRequired => "pending",
        CheckState::Success | CheckState::Neutral => "success",
        CheckState::Failure => "failure",
    }
}

/// `text` cut to at most `limit` characters, ending in `…` when cut.
fn cut(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(limit.saturating_sub(1)).collect();
    kept.push('…');
    kept
}

const TRUNCATION_NOTE: &str =
    "\n\n… (truncated to fit the check's limit; the full report is in the pull request comment)";

/// `summary` within `limit` characters; a cut summary says so at its end.
fn fit_summary(summary: &str, limit: usize) -> String {
    if summary.chars().count() <= limit {
        return summary.to_owned();
    }
    let room = limit.saturating_sub(TRUNCATION_NOTE.chars().count());
    let mut kept: String = summary.chars().take(room).collect();
    kept.push_str(TRUNCATION_NOTE);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_within_the_limit_is_left_alone() {
        assert_eq!(fit_summary("short", 10), "short");
    }

    #[test]
    fn an_oversized_summary_is_cut_to_the_limit_and_says_so() {
        let summary = "é".repeat(CHECK_SUMMARY_LIMIT + 10);
        let fitted = fit_summary(&summary, CHECK_SUMMARY_LIMIT);
        assert_eq!(fitted.chars().count(), CHECK_SUMMARY_LIMIT);
        assert!(fitted.ends_with(TRUNCATION_NOTE));
    }

    #[test]
    fn a_long_title_is_cut_to_140_characters_with_an_ellipsis() {
        let title = "x".repeat(200);
        let description = cut(&title, STATUS_DESCRIPTION_LIMIT);
        assert_eq!(description.chars().count(), 140);
        assert!(description.ends_with('…'));
        assert_eq!(cut("fits", 140), "fits");
    }

    #[test]
    fn waiting_for_approval_is_pending_on_forgejo_and_action_required_on_github() {
        assert_eq!(forgejo_state(CheckState::ActionRequired), "pending");
        assert_eq!(
            github_conclusion(CheckState::ActionRequired),
            Some("action_required")
        );
        assert_eq!(github_conclusion(CheckState::InProgress), None);
    }

    #[test]
    fn forge_permission_words_order_from_none_to_admin() {
        assert!(Permission::from_forge("owner").can_write());
        assert!(Permission::from_forge("write").can_write());
        assert!(!Permission::from_forge("triage").can_write());
        assert!(!Permission::from_forge("nonsense").can_write());
    }
}
