//! The Forgejo/Gitea client: token auth against `<url>/api/v1` over reqwest,
//! with our own serde structs (octocrab's types demand GitHub-only fields).
//! Every call goes through the shared retry wrapper.

use super::actions::{
    forge_too_old, missing_workflow, undispatchable_workflow, DispatchedRun, LogTail, RunJob,
    RunStatus, RunStep, WorkflowDispatch, WorkflowRunState,
};
use super::listing::{self, ListedComment, ListedPull, ListedReview, Page};
use super::retry::{send_with_retry, Exchange, Failure, Reply, RetryPolicy};
use super::types::{
    since_param, unix_ms, CheckReport, CheckState, Comment, IssueEdit, Permission, Reaction,
    STATUS_DESCRIPTION_LIMIT,
};
use super::wire::{WireIssue, WirePull, WireRepository};
use super::{PrState, PullRequest, RepoRef};
use crate::config::settings::Secret;
use crate::model::{CommitSha, ForgeKind, PrNumber, UnixMs, User};
use anyhow::{anyhow, Context, Result};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

/// Items per page of a listing: Forgejo's default `MAX_RESPONSE_ITEMS`.
const PAGE_LIMIT: usize = 50;

pub struct ForgejoClient {
    api: String,
    token: Secret,
    http: reqwest::Client,
    policy: RetryPolicy,
    /// The account the token belongs to: whose comments are ours.
    me: tokio::sync::OnceCell<User>,
}

impl std::fmt::Debug for ForgejoClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgejoClient")
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl ForgejoClient {
    /// `url`: the instance root, e.g. `https://codeberg.org`.
    pub fn new(url: &str, token: Secret, policy: RetryPolicy) -> Result<Self> {
        let http = reqwest::Client::builder()
            .user_agent("wavegate")
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            api: format!("{}/api/v1", url.trim_end_matches('/')),
            token,
            http,
            policy,
            me: tokio::sync::OnceCell::new(),
        })
    }

    /// The token, for `git fetch` over http(s).
    pub(crate) fn token(&self) -> &Secret {
        &self.token
    }

    async fn call(&self, method: Method, route: &str, body: Option<&Value>) -> Result<Reply> {
        self.call_if(method, route, body, None).await
    }

    /// [`Self::call`], sent with `If-None-Match: if_none_match` when given.
    async fn call_if(
        &self,
        method: Method,
        route: &str,
        body: Option<&Value>,
        if_none_match: Option<&str>,
    ) -> Result<Reply> {
        let call = format!("{method} /api/v1{route}");
        let url = format!("{}{route}", self.api);
        // A create that timed out may have happened: sending it again could
        // make a second comment or workflow run. The job's own retry looks
        // first. A status set twice is the same status, a cancel asked twice
        // the same cancel.
        let idempotent = route.contains("/statuses/") || route.ends_with("/cancel");
        let policy = if method == Method::POST && !idempotent {
            RetryPolicy {
                max_attempts: 1,
                ..self.policy.clone()
            }
        } else {
            self.policy.clone()
        };
        send_with_retry(&policy, &call, || async {
            let exchange = Exchange::start(ForgeKind::Forgejo);
            let outcome = async {
                let mut request = self
                    .http
                    .request(method.clone(), &url)
                    .header("authorization", format!("token {}", self.token.expose()))
                    .header("accept", "application/json");
                if let Some(body) = body {
                    request = request.json(body);
                }
                if let Some(tag) = if_none_match {
                    request = request.header("if-none-match", tag);
                }
                let response = request.send().await.map_err(transport_failure)?;
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let body = response.text().await.map_err(transport_failure)?;
                Ok(Reply {
                    status,
                    headers,
                    body,
                })
            }
            .await;
            exchange.finish(&outcome);
            outcome
        })
        .await
    }

    async fn me(&self) -> Result<&User> {
        self.me
            .get_or_try_init(|| async {
                let call = "GET /api/v1/user";
                let reply = self.call(Method::GET, "/user", None).await?.success(call)?;
                Ok(reply.json::<WireUser>(call)?.into_user())
            })
            .await
    }

    /// Every comment on the pull request (Forgejo lists them in one answer).
    /// The bot user's login (`GET /user`, asked once).
    pub(crate) async fn login(&self) -> Result<String> {
        Ok(self.me().await?.login.clone())
    }

    /// The comments on the pull request updated at or after `since`, if
    /// given (Forgejo lists them in one answer).
    pub(crate) async fn comments(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        since: Option<UnixMs>,
    ) -> Result<Vec<Comment>> {
        let me = self.me().await?.login.clone();
        let since = since.map_or_else(String::new, |t| format!("?since={}", since_param(t)));
        let route = format!(
            "/repos/{}/issues/{}/comments{since}",
            repo.id.full_name, pr.0
        );
        let call = format!("GET /api/v1{route}");
        let reply = self.call(Method::GET, &route, None).await?.success(&call)?;
        let comments: Vec<WireComment> = reply.json(&call)?;
        Ok(comments.into_iter().map(|c| c.into_comment(&me)).collect())
    }

    /// One page of the repository's open pull requests, oldest first.
    pub(crate) async fn open_pulls_page(
        &self,
        repo: &RepoRef,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedPull>> {
        let route = format!(
            "/repos/{}/pulls?state=open&sort=oldest&limit={PAGE_LIMIT}&page={page}",
            repo.id.full_name
        );
        let call = format!("GET /api/v1{route}");
        let reply = self.call_if(Method::GET, &route, None, etag).await?;
        listing::read_page(reply, &call, PAGE_LIMIT, |wire: WirePull<WireUser>| {
            wire.into_listed(&call).map(Some)
        })
    }

    /// One page of the comments on the repository's issues and pull
    /// requests updated at or after `since` (unix ms).
    pub(crate) async fn repo_comments_page(
        &self,
        repo: &RepoRef,
        since: Option<UnixMs>,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedComment>> {
        let me = self.me().await?.login.clone();
        let since = since.map_or_else(String::new, |t| format!("&since={}", since_param(t)));
        let route = format!(
            "/repos/{}/issues/comments?limit={PAGE_LIMIT}&page={page}{since}",
            repo.id.full_name
        );
        let call = format!("GET /api/v1{route}");
        let reply = self.call_if(Method::GET, &route, None, etag).await?;
        listing::read_page(reply, &call, PAGE_LIMIT, |wire: WireComment| {
            let url = [&wire.pull_request_url, &wire.issue_url]
                .into_iter()
                .flatten()
                .find(|u| !u.is_empty());
            let Some(pr) = url.and_then(|u| listing::number_from_url(u)) else {
                return Ok(None);
            };
            Ok(Some(ListedComment {
                pr,
                comment: wire.into_comment(&me),
            }))
        })
    }

    /// One page of the pull request's reviews, oldest first; reviews not
    /// submitted (`PENDING`, `REQUEST_REVIEW`) are left out.
    pub(crate) async fn pull_reviews_page(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedReview>> {
        let me = self.me().await?.login.clone();
        let route = format!(
            "/repos/{}/pulls/{}/reviews?limit={PAGE_LIMIT}&page={page}",
            repo.id.full_name, pr.0
        );
        let call = format!("GET /api/v1{route}");
        let reply = self.call_if(Method::GET, &route, None, etag).await?;
        if reply.status == 304 {
            return Ok(Page::NotModified);
        }
        let reply = reply.success(&call)?;
        let (etag, more) = (
            listing::etag(&reply.headers),
            listing::has_next_link(&reply.headers),
        );
        let batch: Vec<WireReview> = reply.json(&call)?;
        let full = batch.len() >= PAGE_LIMIT;
        let items = batch
            .into_iter()
            .filter_map(|wire| wire.into_listed(&me))
            .collect();
        Ok(Page::Fresh {
            items,
            etag,
            more: more || full,
        })
    }

    pub(crate) async fn create_comment(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        body: &str,
    ) -> Result<u64> {
        let route = format!("/repos/{}/issues/{}/comments", repo.id.full_name, pr.0);
        let call = format!("POST /api/v1{route}");
        let reply = self
            .call(Method::POST, &route, Some(&json!({ "body": body })))
            .await?
            .success(&call)?;
        Ok(reply.json::<WireComment>(&call)?.id)
    }

    pub(crate) async fn open_issue(
        &self,
        repo: &RepoRef,
        title: &str,
        body: &str,
    ) -> Result<PrNumber> {
        let route = format!("/repos/{}/issues", repo.id.full_name);
        let call = format!("POST /api/v1{route}");
        let fields = json!({ "title": title, "body": body });
        let reply = self
            .call(Method::POST, &route, Some(&fields))
            .await?
            .success(&call)?;
        Ok(PrNumber(reply.json::<WireIssue>(&call)?.number))
    }

    pub(crate) async fn edit_issue(
        &self,
        repo: &RepoRef,
        number: PrNumber,
        edit: &IssueEdit<'_>,
    ) -> Result<()> {
        let route = format!("/repos/{}/issues/{}", repo.id.full_name, number.0);
        let call = format!("PATCH /api/v1{route}");
        self.call(Method::PATCH, &route, Some(&edit.fields()))
            .await?
            .success(&call)?;
        Ok(())
    }

    /// `POST /repos/{o}/{r}/actions/workflows/{file}/dispatches` with
    /// `return_run_info`: 201 answers the run's id (`DispatchWorkflowRun`:
    /// no page), whose page is then read off the run; 204 is a Forgejo that
    /// does not answer the run (it started all the same). Forgejo reads the
    /// workflow at the ref from `.forgejo/workflows` (else `.gitea/…`, else
    /// `.github/…`) and dispatches it whatever its `on:` says.
    pub(crate) async fn dispatch_workflow(
        &self,
        repo: &RepoRef,
        dispatch: &WorkflowDispatch,
    ) -> Result<DispatchedRun> {
        #[derive(Deserialize)]
        struct WireDispatchedRun {
            id: u64,
        }
        let full_name = &repo.id.full_name;
        let route = format!(
            "/repos/{full_name}/actions/workflows/{}/dispatches",
            dispatch.workflow
        );
        let call = format!("POST /api/v1{route}");
        let fields = json!({
            "ref": dispatch.git_ref,
            "inputs": dispatch.inputs,
            "return_run_info": true,
        });
        let reply = self.call(Method::POST, &route, Some(&fields)).await?;
        let answer = format!("{} {}", reply.status, reply.message());
        let forge = ForgeKind::Forgejo;
        let id = match reply.status {
            204 => {
                return Err(forge_too_old(
                    forge,
                    &call,
                    dispatch,
                    "204 No Content",
                    true,
                ))
            }
            status if status < 400 => reply.json::<WireDispatchedRun>(&call)?.id,
            // A workflow not found is a 500 on some Forgejo versions.
            status if status == 404 || (status == 500 && answer.contains("workflow not found")) => {
                return Err(missing_workflow(forge, &call, full_name, dispatch, &answer))
            }
            422 => {
                return Err(undispatchable_workflow(
                    forge, &call, full_name, dispatch, &answer,
                ))
            }
            _ => return Err(anyhow!("{call}: {answer}")),
        };
        // The run exists whatever the read of its page gives.
        let html_url = match self.workflow_run(repo, id).await {
            Ok(run) => run.html_url,
            Err(error) => {
                tracing::warn!(
                    run = id,
                    "reading the page of a dispatched run failed: {error:#}"
                );
                None
            }
        };
        Ok(DispatchedRun { id, html_url })
    }

    /// `GET /repos/{o}/{r}/actions/runs/{id}` (`ActionRun`).
    pub(crate) async fn workflow_run(&self, repo: &RepoRef, id: u64) -> Result<WorkflowRunState> {
        #[derive(Deserialize)]
        struct WireActionRun {
            #[serde(default)]
            status: String,
            #[serde(default)]
            html_url: Option<String>,
            #[serde(default)]
            commit_sha: Option<String>,
        }
        let route = format!("/repos/{}/actions/runs/{id}", repo.id.full_name);
        let call = format!("GET /api/v1{route}");
        let reply = self.call(Method::GET, &route, None).await?.success(&call)?;
        let run: WireActionRun = reply.json(&call)?;
        Ok(WorkflowRunState {
            status: RunStatus::from_forgejo(&run.status),
            html_url: run.html_url.filter(|url| !url.is_empty()),
            head_sha: run.commit_sha.filter(|sha| !sha.is_empty()),
        })
    }

    /// `GET /repos/{o}/{r}/actions/runs/{id}/jobs` (`ActionRunJob`s, which
    /// carry no steps there), then `GET /repos/{o}/{r}/actions/jobs/{job}`
    /// for each job's steps.
    pub(crate) async fn workflow_run_jobs(&self, repo: &RepoRef, id: u64) -> Result<Vec<RunJob>> {
        let full_name = &repo.id.full_name;
        let route = format!("/repos/{full_name}/actions/runs/{id}/jobs");
        let call = format!("GET /api/v1{route}");
        let reply = self.call(Method::GET, &route, None).await?;
        if reply.status == 404 {
            return Err(anyhow!(
                "{call}: 404 {}: {full_name} has no workflow run {id} (a Forgejo without this endpoint answers 404 too)",
                reply.message()
            ));
        }
        let listed: Vec<WireActionJob> = reply.success(&call)?.json(&call)?;
        let mut jobs = Vec::with_capacity(listed.len());
        for job in listed {
            let job = match job.steps {
                Some(_) => job,
                None => {
                    let route = format!("/repos/{full_name}/actions/jobs/{}", job.id);
                    let call = format!("GET /api/v1{route}");
                    let reply = self.call(Method::GET, &route, None).await?.success(&call)?;
                    reply.json(&call)?
                }
            };
            jobs.push(RunJob {
                id: job.id,
                name: job.name,
                status: RunStatus::from_forgejo(&job.status),
                html_url: job.html_url.filter(|url| !url.is_empty()),
                steps: job
                    .steps
                    .unwrap_or_default()
                    .into_iter()
                    .map(|step| RunStep {
                        name: step.name,
                        status: RunStatus::from_forgejo(&step.status),
                    })
                    .collect(),
            });
        }
        Ok(jobs)
    }

    /// `GET /repos/{o}/{r}/actions/jobs/{id}/logs`, the plain text, asked
    /// for from its end (`Range: bytes=-max_bytes`, which Forgejo answers
    /// 206; an empty log 416) and its end kept as it streams in whatever
    /// the answer.
    pub(crate) async fn job_log_tail(
        &self,
        repo: &RepoRef,
        job_id: u64,
        max_bytes: usize,
    ) -> Result<String> {
        let full_name = &repo.id.full_name;
        let route = format!("/repos/{full_name}/actions/jobs/{job_id}/logs");
        let call = format!("GET /api/v1{route}");
        let url = format!("{}{route}", self.api);
        let reply = send_with_retry(&self.policy, &call, || async {
            let exchange = Exchange::start(ForgeKind::Forgejo);
            let outcome = async {
                let mut response = self
                    .http
                    .get(&url)
                    .header("authorization", format!("token {}", self.token.expose()))
                    .header("accept", "text/plain")
                    .header("range", format!("bytes=-{max_bytes}"))
                    .send()
                    .await
                    .map_err(transport_failure)?;
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let mut tail = LogTail::new(max_bytes);
                if status == 206 && !range_starts_at_zero(&headers) {
                    tail.starts_within();
                }
                while let Some(chunk) = response.chunk().await.map_err(transport_failure)? {
                    tail.push(&chunk);
                }
                Ok(Reply {
                    status,
                    headers,
                    body: tail.finish(),
                })
            }
            .await;
            exchange.finish(&outcome);
            outcome
        })
        .await?;
        match reply.status {
            200 | 206 => Ok(reply.body),
            416 => Ok(String::new()),
            404 => Err(anyhow!(
                "{call}: 404 {}: {full_name} has no workflow job {job_id}",
                reply.message()
            )),
            _ => {
                let status = reply.status;
                reply.success(&call)?;
                Err(anyhow!("{call}: {status} without a log"))
            }
        }
    }

    /// `POST /repos/{o}/{r}/actions/runs/{id}/cancel`: 204, a run already
    /// finished included (Forgejo leaves it as it is). A Forgejo without
    /// this endpoint answers 404; the run then ends at its own timeout.
    pub(crate) async fn cancel_workflow_run(&self, repo: &RepoRef, id: u64) -> Result<()> {
        let route = format!("/repos/{}/actions/runs/{id}/cancel", repo.id.full_name);
        let call = format!("POST /api/v1{route}");
        let reply = self.call(Method::POST, &route, None).await?;
        if reply.status == 404 {
            return Err(anyhow!(
                "{call}: 404 {}: no run {id} in {} (a Forgejo without this endpoint answers 404 too; the run then ends at its own timeout)",
                reply.message(),
                repo.id.full_name
            ));
        }
        reply.success(&call)?;
        Ok(())
    }

    /// `PUT /repos/{o}/{r}/actions/secrets/{name}` (`CreateOrUpdateSecretOption`):
    /// 201 created, 204 replaced. Forgejo lets only those who administer
    /// the repository set its secrets, with a token of the
    /// `write:repository` scope; a refusal (403, or 404 from a Forgejo
    /// that hides what the token may not see) says so.
    pub(crate) async fn set_actions_secret(
        &self,
        repo: &RepoRef,
        name: &str,
        value: &str,
    ) -> Result<()> {
        let full_name = &repo.id.full_name;
        let route = format!("/repos/{full_name}/actions/secrets/{name}");
        let call = format!("PUT /api/v1{route}");
        let reply = self
            .call(Method::PUT, &route, Some(&json!({ "data": value })))
            .await?;
        if matches!(reply.status, 401 | 403 | 404) {
            return Err(anyhow!(
                "{call}: {} {}: Forgejo did not let wavegate set the Actions secret {name} of {full_name}; give wavegate's token the write:repository scope and its user the right to administer the repository",
                reply.status,
                reply.message()
            ));
        }
        reply.success(&call)?;
        Ok(())
    }

    /// Edits a comment; `Ok(false)` when it is gone.
    pub(crate) async fn edit_comment(&self, repo: &RepoRef, id: u64, body: &str) -> Result<bool> {
        let route = format!("/repos/{}/issues/comments/{id}", repo.id.full_name);
        let call = format!("PATCH /api/v1{route}");
        let reply = self
            .call(Method::PATCH, &route, Some(&json!({ "body": body })))
            .await?;
        if reply.status == 404 {
            return Ok(false);
        }
        reply.success(&call)?;
        Ok(true)
    }

    /// Sets the commit status `context` on `sha`.
    /// The commit status for `report`: its name as the context, its title
    /// (cut to the 140 characters a status holds) as the description.
    pub(crate) async fn publish_status(
        &self,
        repo: &RepoRef,
        sha: &CommitSha,
        report: &CheckReport,
    ) -> Result<()> {
        self.set_status(
            repo,
            sha,
            report.name,
            forgejo_state(report.state),
            &cut(&report.title, STATUS_DESCRIPTION_LIMIT),
            report.details_url.as_deref(),
        )
        .await
    }

    pub(crate) async fn set_status(
        &self,
        repo: &RepoRef,
        sha: &CommitSha,
        context: &str,
        state: &str,
        description: &str,
        target_url: Option<&str>,
    ) -> Result<()> {
        let route = format!("/repos/{}/statuses/{sha}", repo.id.full_name);
        let call = format!("POST /api/v1{route}");
        let mut body = json!({ "context": context, "state": state, "description": description });
        if let Some(url) = target_url {
            body["target_url"] = json!(url);
        }
        self.call(Method::POST, &route, Some(&body))
            .await?
            .success(&call)?;
        Ok(())
    }

    /// The pull request as the forge has it now, and where it stands.
    pub(crate) async fn pull_request(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<(PullRequest, PrState)> {
        let route = format!("/repos/{}/pulls/{}", repo.id.full_name, pr.0);
        let call = format!("GET /api/v1{route}");
        let reply = self.call(Method::GET, &route, None).await?.success(&call)?;
        reply
            .json::<WirePull<WireUser>>(&call)?
            .into_pull_request(&call)
    }

    pub(crate) async fn default_branch(&self, repo: &RepoRef) -> Result<String> {
        let route = format!("/repos/{}", repo.id.full_name);
        let call = format!("GET /api/v1{route}");
        let reply = self.call(Method::GET, &route, None).await?.success(&call)?;
        Ok(reply.json::<WireRepository>(&call)?.default_branch)
    }

    /// A user's permission on the repository. Forgejo answers 403 unless the
    /// bot's account is a repository admin; the error says so.
    pub(crate) async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission> {
        #[derive(Deserialize)]
        struct PermissionBody {
            permission: String,
        }
        let route = format!(
            "/repos/{}/collaborators/{login}/permission",
            repo.id.full_name
        );
        let call = format!("GET /api/v1{route}");
        let reply = self.call(Method::GET, &route, None).await?;
        if reply.status == 403 {
            return Err(anyhow!(
                "{call}: 403: Forgejo only tells repository admins; make the bot's account an admin of {}",
                repo.id.full_name
            ));
        }
        let reply = reply.success(&call)?;
        Ok(Permission::from_forge(
            &reply.json::<PermissionBody>(&call)?.permission,
        ))
    }

    pub(crate) async fn react(
        &self,
        repo: &RepoRef,
        comment_id: u64,
        reaction: Reaction,
    ) -> Result<()> {
        let route = format!(
            "/repos/{}/issues/comments/{comment_id}/reactions",
            repo.id.full_name
        );
        let call = format!("POST /api/v1{route}");
        self.call(
            Method::POST,
            &route,
            Some(&json!({ "content": reaction.as_str() })),
        )
        .await?
        .success(&call)?;
        Ok(())
    }
}

/// Whether a 206's `Content-Range: bytes START-END/TOTAL` starts at 0.
fn range_starts_at_zero(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_RANGE)
        .and_then(|value| value.to_str().ok())
        .and_then(|range| range.trim().strip_prefix("bytes "))
        .is_some_and(|range| range.starts_with("0-"))
}

fn transport_failure(error: reqwest::Error) -> Failure {
    if error.is_builder() {
        Failure::permanent(anyhow!("{error:?}"))
    } else {
        Failure::transient(anyhow!("{error:?}"))
    }
}

/// Forgejo's `ActionRunJob`, as far as it is read.
#[derive(Deserialize)]
struct WireActionJob {
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    steps: Option<Vec<WireActionStep>>,
}

/// Forgejo's `ActionRunJobStep`: its status in the run's words.
#[derive(Deserialize)]
struct WireActionStep {
    #[serde(default)]
    name: String,
    #[serde(default)]
    status: String,
}

#[derive(Deserialize)]
struct WireUser {
    /// Forgejo's system accounts have negative ids (ghost -1, actions -2).
    id: i64,
    login: String,
}

impl WireUser {
    fn into_user(self) -> User {
        let system = self.id < 0;
        User {
            is_bot: system || self.login.ends_with("[bot]"),
            id: u64::try_from(self.id).unwrap_or(0),
            login: self.login,
        }
    }
}

#[derive(Deserialize)]
struct WireComment {
    id: u64,
    #[serde(default)]
    body: String,
    user: WireUser,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    issue_url: Option<String>,
    #[serde(default)]
    pull_request_url: Option<String>,
}

impl WireComment {
    /// `me`: the bot user's login (its comments are ours).
    fn into_comment(self, me: &str) -> Comment {
        let author = self.user.into_user();
        Comment {
            id: self.id,
            body: self.body,
            ours: author.login == me,
            author,
            created_at: self.created_at.as_deref().and_then(unix_ms),
            updated_at: self.updated_at.as_deref().and_then(unix_ms),
        }
    }
}

/// Forgejo's `PullReview`: a dismissed review keeps its `state` and is
/// flagged `dismissed`; `user` is null for a deleted account.
#[derive(Deserialize)]
struct WireReview {
    id: u64,
    #[serde(default)]
    user: Option<WireUser>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    dismissed: bool,
    #[serde(default)]
    commit_id: Option<String>,
    #[serde(default)]
    submitted_at: Option<String>,
}

impl WireReview {
    /// `me`: the bot user's login. None: not a submitted review.
    fn into_listed(self, me: &str) -> Option<ListedReview> {
        let state = listing::review_state(&self.state, self.dismissed)?;
        let author = self.user.map_or(
            User {
                id: 0,
                login: "ghost".into(),
                is_bot: true,
            },
            WireUser::into_user,
        );
        Some(ListedReview {
            id: self.id,
            ours: author.login == me,
            author,
            state,
            commit: self
                .commit_id
                .as_deref()
                .filter(|sha| !sha.is_empty())
                .and_then(|sha| CommitSha::parse(sha).ok()),
            submitted_at: self.submitted_at.as_deref().and_then(unix_ms),
        })
    }
}

impl From<WireUser> for User {
    fn from(user: WireUser) -> Self {
        user.into_user()
    }
}

/// A commit status's state for a check: Forgejo has no "action required",
/// so waiting for approval is pending.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_from_the_start_of_the_log_is_told_apart() {
        let range = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::CONTENT_RANGE, value.parse().unwrap());
            range_starts_at_zero(&headers)
        };
        assert!(range("bytes 0-99/100"));
        assert!(!range("bytes 900-999/1000"));
        assert!(!range_starts_at_zero(&reqwest::header::HeaderMap::new()));
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
    fn waiting_for_approval_is_pending() {
        assert_eq!(forgejo_state(CheckState::ActionRequired), "pending");
    }
}
