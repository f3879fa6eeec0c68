//! The forge operations the worker needs, one enum over the GitHub and
//! Forgejo clients: the report comment found again by its marker, the plan
//! check (check run or commit status), pull requests, issues, permissions,
//! reactions, workflow dispatches, runs, their jobs and the end of a job's
//! log (GitHub Actions, Forgejo Actions), Forgejo's Actions secrets and the
//! header `git fetch`
//! authenticates with.

use super::actions::{DispatchedRun, RunJob, WorkflowDispatch, WorkflowRunState};
use super::forgejo::ForgejoClient;
use super::github::GitHubClient;
use super::listing::{ListedComment, ListedPull, ListedReview, Page, RateBudget};
use super::types::{CheckReport, Comment, IssueEdit, Permission, Reaction, ISSUE_BODY_LIMIT};
use super::{PrState, PullRequest, RepoRef};
use crate::config::settings::Secret;
use crate::model::{CommitSha, PrNumber, UnixMs};
use anyhow::{bail, Result};
use base64::Engine;
use std::sync::Arc;

pub use super::github::{convert_manifest, AppCredentials};

#[derive(Debug, Clone)]
pub enum ForgeClient {
    GitHub(Arc<GitHubClient>),
    Forgejo(Arc<ForgejoClient>),
}

impl ForgeClient {
    /// The report comment: edit `known` if given and still there, else find
    /// ours by `marker` (a line only the report carries) among the PR's
    /// comments and edit it, else create it. Returns its id.
    pub async fn upsert_report(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        known: Option<u64>,
        marker: &str,
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
            .find(|c| c.ours && c.body.contains(marker));
        if let Some(report) = existing {
            if self.edit_comment(repo, report.id, body).await? {
                return Ok(report.id);
            }
        }
        self.reply(repo, pr, body).await
    }

    /// Opens an issue; answers its number (issues and pull requests share
    /// one sequence on both forges). A body over [`ISSUE_BODY_LIMIT`]
    /// characters is refused unsent.
    pub async fn open_issue(&self, repo: &RepoRef, title: &str, body: &str) -> Result<PrNumber> {
        within_issue_limit(body)?;
        match self {
            ForgeClient::GitHub(c) => c.open_issue(repo, title, body).await,
            ForgeClient::Forgejo(c) => c.open_issue(repo, title, body).await,
        }
    }

    /// Changes an issue's title, body and/or state (each only when given).
    /// A body over [`ISSUE_BODY_LIMIT`] characters is refused unsent.
    pub async fn edit_issue(
        &self,
        repo: &RepoRef,
        number: PrNumber,
        edit: &IssueEdit<'_>,
    ) -> Result<()> {
        if edit.is_empty() {
            return Ok(());
        }
        if let Some(body) = edit.body {
            within_issue_limit(body)?;
        }
        match self {
            ForgeClient::GitHub(c) => c.edit_issue(repo, number, edit).await,
            ForgeClient::Forgejo(c) => c.edit_issue(repo, number, edit).await,
        }
    }

    /// Dispatches `dispatch.workflow` on `dispatch.git_ref` (GitHub `POST
    /// …/actions/workflows/{file}/dispatches` with `return_run_details`,
    /// Forgejo the same path with `return_run_info`) and answers the run it
    /// started. Sent once: a dispatch that timed out may have started a run.
    /// A dispatch neither forge takes is refused unsent; a missing workflow,
    /// one without a `workflow_dispatch` trigger, or a forge too old to
    /// name the run it started is an error that says what to do.
    pub async fn dispatch_workflow(
        &self,
        repo: &RepoRef,
        dispatch: &WorkflowDispatch,
    ) -> Result<DispatchedRun> {
        dispatch.check()?;
        match self {
            ForgeClient::GitHub(c) => c.dispatch_workflow(repo, dispatch).await,
            ForgeClient::Forgejo(c) => c.dispatch_workflow(repo, dispatch).await,
        }
    }

    /// Where the run `id` stands (`GET …/actions/runs/{id}` on both forges).
    pub async fn workflow_run(&self, repo: &RepoRef, id: u64) -> Result<WorkflowRunState> {
        match self {
            ForgeClient::GitHub(c) => c.workflow_run(repo, id).await,
            ForgeClient::Forgejo(c) => c.workflow_run(repo, id).await,
        }
    }

    /// The jobs of run `id`, with their steps (GitHub `GET
    /// …/actions/runs/{id}/jobs`, its latest attempt's; Forgejo the same
    /// path, then `GET …/actions/jobs/{job}` for each job's steps).
    pub async fn workflow_run_jobs(&self, repo: &RepoRef, id: u64) -> Result<Vec<RunJob>> {
        match self {
            ForgeClient::GitHub(c) => c.workflow_run_jobs(repo, id).await,
            ForgeClient::Forgejo(c) => c.workflow_run_jobs(repo, id).await,
        }
    }

    /// At most the last `max_bytes` of job `job_id`'s log (`GET
    /// …/actions/jobs/{id}/logs`; GitHub answers with where to download it,
    /// which is read without the forge's credentials), starting at a whole
    /// line where there is one. The log is read as it streams in and only
    /// its end is kept.
    pub async fn job_log_tail(
        &self,
        repo: &RepoRef,
        job_id: u64,
        max_bytes: usize,
    ) -> Result<String> {
        match self {
            ForgeClient::GitHub(c) => c.job_log_tail(repo, job_id, max_bytes).await,
            ForgeClient::Forgejo(c) => c.job_log_tail(repo, job_id, max_bytes).await,
        }
    }

    /// Asks the forge to cancel the run `id` (`POST …/actions/runs/{id}/cancel`
    /// on both forges); a run already finished is left as it is, and that is
    /// no error. The forge cancels in its own time: read the run to see it.
    pub async fn cancel_workflow_run(&self, repo: &RepoRef, id: u64) -> Result<()> {
        match self {
            ForgeClient::GitHub(c) => c.cancel_workflow_run(repo, id).await,
            ForgeClient::Forgejo(c) => c.cancel_workflow_run(repo, id).await,
        }
    }

    /// Sets the repository's Actions secret `name` to `value` (Forgejo
    /// `PUT …/actions/secrets/{name}`), created or replaced. GitHub's
    /// secrets are sealed to the repository's public key first, and its
    /// runs prove themselves with OIDC: not asked of it.
    pub async fn set_actions_secret(&self, repo: &RepoRef, name: &str, value: &str) -> Result<()> {
        match self {
            ForgeClient::GitHub(_) => {
                bail!("wavegate sets no Actions secret on GitHub; its runs prove themselves with their OIDC token")
            }
            ForgeClient::Forgejo(c) => c.set_actions_secret(repo, name, value).await,
        }
    }

    /// A new comment on the pull request (or issue); returns its id.
    pub async fn reply(&self, repo: &RepoRef, pr: PrNumber, body: &str) -> Result<u64> {
        match self {
            ForgeClient::GitHub(c) => c.create_comment(repo, pr, body).await,
            ForgeClient::Forgejo(c) => c.create_comment(repo, pr, body).await,
        }
    }

    pub(crate) async fn comments(&self, repo: &RepoRef, pr: PrNumber) -> Result<Vec<Comment>> {
        self.comments_since(repo, pr, None).await
    }

    /// The comments on the pull request updated at or after `since` (unix
    /// ms, read to the second), or all of them.
    pub async fn comments_since(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        since: Option<UnixMs>,
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
            ForgeClient::GitHub(c) => c
                .publish_check_run(repo, head, known, super::github::check_run_fields(report))
                .await
                .map(Some),
            ForgeClient::Forgejo(c) => c.publish_status(repo, head, report).await.map(|()| None),
        }
    }

    /// The repository's default branch, as the forge answers now.
    pub(crate) async fn default_branch(&self, repo: &RepoRef) -> Result<String> {
        match self {
            ForgeClient::GitHub(c) => c.default_branch(repo).await,
            ForgeClient::Forgejo(c) => c.default_branch(repo).await,
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
    pub(crate) async fn open_pulls_page(
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
    pub(crate) async fn repo_comments_page(
        &self,
        repo: &RepoRef,
        since: Option<UnixMs>,
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
    pub(crate) async fn rate_budget(&self, repo: &RepoRef) -> Result<Option<RateBudget>> {
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
    pub(crate) async fn bot_login(&self) -> Result<String> {
        match self {
            ForgeClient::GitHub(c) => c.bot_login().await,
            ForgeClient::Forgejo(c) => c.login().await,
        }
    }

    /// Whether `login` is an active member of the team `slug` of the
    /// repository's owner (GitHub). Forgejo teams are not consulted: false.
    pub(crate) async fn in_team(&self, repo: &RepoRef, slug: &str, login: &str) -> Result<bool> {
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

fn within_issue_limit(body: &str) -> Result<()> {
    let length = body.chars().count();
    if length > ISSUE_BODY_LIMIT {
        bail!(
            "an issue body of {length} characters is longer than the {ISSUE_BODY_LIMIT} GitHub takes; it was not sent"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forge_permission_words_order_from_none_to_admin() {
        assert!(Permission::from_forge("owner").can_write());
        assert!(Permission::from_forge("write").can_write());
        assert!(!Permission::from_forge("triage").can_write());
        assert!(!Permission::from_forge("nonsense").can_write());
    }
}
