//! The GitHub App client: App JWT → installation tokens (one cache per
//! installation, refreshed 30 s before expiry and once after a 401), and the
//! REST calls wavegate makes on octocrab's raw `_get/_post/_patch`, each
//! through our retry wrapper with explicit `page`/`per_page` pagination.
//! The token cache is ours, not octocrab's installation handle's: that handle
//! re-checks expiry inside every request with its own buffer, cannot be told
//! a token was refused, and does not share its token with `git fetch`.
//! GitHub's JSON is read into our own minimal structs and converted here.

use super::actions::{
    forge_too_old, missing_workflow, undispatchable_workflow, DispatchedRun, LogTail, RunJob,
    RunStatus, RunStep, WorkflowDispatch, WorkflowRunState,
};
use super::listing::{self, ListedComment, ListedPull, ListedReview, Page, RateBudget};
use super::retry::{send_with_retry, Exchange, Failure, Reply, RetryPolicy, Settled};
use super::types::{
    since_param, unix_ms, CheckReport, CheckState, Comment, IssueEdit, Permission, Reaction,
    CHECK_SUMMARY_LIMIT,
};
use super::wire::{WireIssue, WirePull, WireRepository};
use super::{PrState, PullRequest, RepoRef};
use crate::config::settings::Secret;
use crate::model::{CommitSha, ForgeKind, PrNumber, UnixMs, User};
use anyhow::{anyhow, Context, Result};
use octocrab::models::AppId;
use octocrab::Octocrab;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PER_PAGE: usize = 100;

#[derive(Debug, Clone, Copy)]
enum Verb {
    Get,
    Post,
    Patch,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Patch => "PATCH",
        }
    }
}

/// How long before its expiry a token is replaced.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(30);

struct CachedToken {
    value: Secret,
    expires_at: SystemTime,
}

/// One installation's token cache, shared by every call for it. The lock is
/// held while a token is fetched, so concurrent first calls wait for one fetch.
struct Installation {
    id: u64,
    token: tokio::sync::Mutex<Option<CachedToken>>,
}

pub struct GitHubClient {
    app: Octocrab,
    /// The API root, which a relative redirect is read against.
    api_url: String,
    /// Carries no credentials: what a redirect away from the API (a job's
    /// log) is downloaded with.
    downloads: Octocrab,
    policy: RetryPolicy,
    installations: Mutex<HashMap<u64, Arc<Installation>>>,
    /// `owner/name` → installation, learned from `GET /repos/{o}/{r}/installation`.
    repo_installations: Mutex<HashMap<String, u64>>,
    bot_login: tokio::sync::OnceCell<String>,
    /// Each installation's budget as GitHub's latest answer to it stated.
    budgets: Mutex<HashMap<u64, RateBudget>>,
}

impl std::fmt::Debug for GitHubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHubClient").finish_non_exhaustive()
    }
}

impl GitHubClient {
    /// `api_url`: `https://api.github.com`, or a GHES/test forge's API root.
    pub fn new(
        api_url: &str,
        app_id: u64,
        private_key_pem: &Secret,
        policy: RetryPolicy,
    ) -> Result<Self> {
        let key = octocrab::EncodingKey::from_rsa_pem(private_key_pem.expose().as_bytes())
            .context("the GitHub App private key is not an RSA key in PEM form")?;
        let app = Octocrab::builder()
            .base_uri(api_url.trim_end_matches('/'))
            .map_err(|e| anyhow!("GitHub API URL `{api_url}` is not a URL: {e:?}"))?
            .app(AppId(app_id), key)
            .build()
            .map_err(|e| anyhow!("building the GitHub client failed: {e:?}"))?;
        let downloads = Octocrab::builder()
            .build()
            .map_err(|e| anyhow!("building the GitHub download client failed: {e:?}"))?;
        Ok(Self {
            app,
            api_url: api_url.trim_end_matches('/').to_owned(),
            downloads,
            policy,
            installations: Mutex::new(HashMap::new()),
            repo_installations: Mutex::new(HashMap::new()),
            bot_login: tokio::sync::OnceCell::new(),
            budgets: Mutex::new(HashMap::new()),
        })
    }

    /// The login the App's comments carry, `<slug>[bot]` (`GET /app`, asked once).
    pub(crate) async fn bot_login(&self) -> Result<String> {
        #[derive(Deserialize)]
        struct AppBody {
            slug: String,
        }
        let login = self
            .bot_login
            .get_or_try_init(|| async {
                let reply = self
                    .send(Verb::Get, "/app", None)
                    .await?
                    .success("GET /app")?;
                anyhow::Ok(format!("{}[bot]", reply.json::<AppBody>("GET /app")?.slug))
            })
            .await?;
        Ok(login.clone())
    }

    /// The installation serving `repo`: the delivery's, or asked of GitHub once.
    pub(crate) async fn installation_id(&self, repo: &RepoRef) -> Result<u64> {
        if let Some(id) = repo.installation {
            return Ok(id);
        }
        let full_name = &repo.id.full_name;
        if let Some(id) = self.repo_installations.lock().unwrap().get(full_name) {
            return Ok(*id);
        }
        #[derive(Deserialize)]
        struct InstallationBody {
            id: u64,
        }
        let route = format!("/repos/{full_name}/installation");
        let call = format!("GET {route}");
        let reply = self.send(Verb::Get, &route, None).await?.success(&call)?;
        let id = reply.json::<InstallationBody>(&call)?.id;
        self.repo_installations
            .lock()
            .unwrap()
            .insert(full_name.clone(), id);
        Ok(id)
    }

    async fn installation(&self, repo: &RepoRef) -> Result<Arc<Installation>> {
        let id = self.installation_id(repo).await?;
        let mut installations = self.installations.lock().unwrap();
        if let Some(handle) = installations.get(&id) {
            return Ok(handle.clone());
        }
        let handle = Arc::new(Installation {
            id,
            token: tokio::sync::Mutex::new(None),
        });
        installations.insert(id, handle.clone());
        Ok(handle)
    }

    /// The installation token for `repo` (cached; refreshed 30 s before expiry).
    pub(crate) async fn installation_token(&self, repo: &RepoRef) -> Result<Secret> {
        let installation = self.installation(repo).await?;
        let call = format!("POST /app/installations/{}/access_tokens", installation.id);
        let token = send_with_retry(&self.policy, &call, || async {
            self.token(&installation, None).await.map(Settled)
        })
        .await?;
        Ok(token.0)
    }

    /// A token valid for 30 s more: the cached one unless it is `rejected`
    /// (answered 401) or close to expiry, else a new one.
    async fn token(
        &self,
        installation: &Installation,
        rejected: Option<&Secret>,
    ) -> Result<Secret, Failure> {
        #[derive(Deserialize)]
        struct AccessToken {
            token: String,
            expires_at: String,
        }
        let mut slot = installation.token.lock().await;
        if let Some(cached) = slot.as_ref() {
            let fresh = cached.expires_at > SystemTime::now() + REFRESH_BEFORE_EXPIRY;
            if fresh && rejected != Some(&cached.value) {
                return Ok(cached.value.clone());
            }
        }
        let route = format!("/app/installations/{}/access_tokens", installation.id);
        let call = format!("POST {route}");
        let reply = attempt(&self.app, Verb::Post, &route, None, None).await?;
        if reply.status >= 400 {
            let (status, headers) = (reply.status, reply.headers.clone());
            let error = reply.success(&call).unwrap_err();
            return Err(Failure::answered(status, headers, error));
        }
        let body: AccessToken = reply.json(&call).map_err(Failure::permanent)?;
        let expires_at = chrono::DateTime::parse_from_rfc3339(&body.expires_at)
            .map_err(|e| Failure::permanent(anyhow!("{call}: expires_at: {e}")))?;
        let expires_at = UNIX_EPOCH
            + Duration::from_secs(u64::try_from(expires_at.timestamp()).unwrap_or_default());
        let value = Secret::new(body.token);
        *slot = Some(CachedToken {
            value: value.clone(),
            expires_at,
        });
        Ok(value)
    }

    /// A call as the App (its JWT). A create is sent once, as in [`Self::repo_call`].
    async fn send(&self, verb: Verb, route: &str, body: Option<&Value>) -> Result<Reply> {
        let call = format!("{} {route}", verb.as_str());
        let policy = match verb {
            Verb::Post => RetryPolicy {
                max_attempts: 1,
                ..self.policy.clone()
            },
            _ => self.policy.clone(),
        };
        send_with_retry(&policy, &call, || {
            attempt(&self.app, verb, route, body, None)
        })
        .await
    }

    /// The App's webhook deliveries, newest first, page by page (`GET
    /// /app/hook/deliveries`, following the `Link` header's next cursor),
    /// until a page reaches back to `since` (unix ms) or `most_pages` pages
    /// were read.
    pub(crate) async fn hook_deliveries(
        &self,
        since: UnixMs,
        most_pages: usize,
    ) -> Result<HookDeliveries> {
        let mut listed = HookDeliveries::default();
        let mut cursor: Option<String> = None;
        for _ in 0..most_pages {
            let route = match &cursor {
                Some(cursor) => format!("/app/hook/deliveries?per_page={PER_PAGE}&cursor={cursor}"),
                None => format!("/app/hook/deliveries?per_page={PER_PAGE}"),
            };
            let call = format!("GET {route}");
            let reply = self.send(Verb::Get, &route, None).await?.success(&call)?;
            let page: Vec<WireHookDelivery> = reply.json(&call)?;
            let reached_since = page
                .iter()
                .any(|d| unix_ms(&d.delivered_at).is_some_and(|at| at < since));
            listed.deliveries.extend(
                page.into_iter()
                    .filter_map(WireHookDelivery::into_hook_delivery),
            );
            cursor = next_cursor(&reply.headers);
            if reached_since || cursor.is_none() {
                return Ok(listed);
            }
        }
        listed.capped = true;
        Ok(listed)
    }

    /// Asks GitHub to deliver `delivery_id` again (`POST
    /// /app/hook/deliveries/{id}/attempts`); sent once, as a create.
    pub(crate) async fn redeliver(&self, delivery_id: u64) -> Result<()> {
        let route = format!("/app/hook/deliveries/{delivery_id}/attempts");
        let call = format!("POST {route}");
        self.send(Verb::Post, &route, None).await?.success(&call)?;
        Ok(())
    }

    /// A call as the installation serving `repo`; a 401 replaces the token once.
    async fn repo_call(
        &self,
        repo: &RepoRef,
        verb: Verb,
        route: &str,
        body: Option<&Value>,
    ) -> Result<Reply> {
        self.repo_call_if(repo, verb, route, body, None).await
    }

    /// [`Self::repo_call`], a GET sent with `If-None-Match: if_none_match`
    /// when given; the budget the answer states is kept.
    async fn repo_call_if(
        &self,
        repo: &RepoRef,
        verb: Verb,
        route: &str,
        body: Option<&Value>,
        if_none_match: Option<&str>,
    ) -> Result<Reply> {
        let installation = self.installation(repo).await?;
        let call = format!("{} {route}", verb.as_str());
        // A create that timed out may have happened: sending it again could
        // make a second comment, check or workflow run. The job's own retry
        // looks first. A cancel asked twice is the same cancel.
        let policy = match verb {
            Verb::Post if !route.ends_with("/cancel") => RetryPolicy {
                max_attempts: 1,
                ..self.policy.clone()
            },
            _ => self.policy.clone(),
        };
        let mut rejected: Option<Secret> = None;
        loop {
            let used = Mutex::new(None);
            let reply = send_with_retry(&policy, &call, || async {
                let token = self.token(&installation, rejected.as_ref()).await?;
                *used.lock().unwrap() = Some(token.clone());
                let crab = self
                    .app
                    .user_access_token(token.expose().to_owned())
                    .map_err(failure)?;
                attempt(&crab, verb, route, body, if_none_match).await
            })
            .await?;
            if let Some(budget) = RateBudget::from_headers(&reply.headers) {
                self.budgets.lock().unwrap().insert(installation.id, budget);
            }
            let used = used.into_inner().unwrap();
            if reply.status == 401 && rejected.is_none() && used.is_some() {
                rejected = used;
                continue;
            }
            return Ok(reply);
        }
    }

    /// The comments on the pull request (updated at or after `since`, if
    /// given), page by page.
    pub(crate) async fn comments(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        since: Option<UnixMs>,
    ) -> Result<Vec<Comment>> {
        let since = since.map_or_else(String::new, |t| format!("&since={}", since_param(t)));
        let mut all = Vec::new();
        for page in 1.. {
            let route = format!(
                "/repos/{}/issues/{}/comments?page={page}&per_page={PER_PAGE}{since}",
                repo.id.full_name, pr.0
            );
            let call = format!("GET {route}");
            let reply = self
                .repo_call(repo, Verb::Get, &route, None)
                .await?
                .success(&call)?;
            let batch: Vec<WireComment> = reply.json(&call)?;
            let last = batch.len() < PER_PAGE;
            let bot = self.bot_login().await?;
            all.extend(batch.into_iter().map(|c| {
                let mut comment = c.into_comment();
                comment.ours = comment.author.login == bot;
                comment
            }));
            if last {
                break;
            }
        }
        Ok(all)
    }

    pub(crate) async fn create_comment(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        body: &str,
    ) -> Result<u64> {
        let route = format!("/repos/{}/issues/{}/comments", repo.id.full_name, pr.0);
        let call = format!("POST {route}");
        let reply = self
            .repo_call(repo, Verb::Post, &route, Some(&json!({ "body": body })))
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
        let call = format!("POST {route}");
        let fields = json!({ "title": title, "body": body });
        let reply = self
            .repo_call(repo, Verb::Post, &route, Some(&fields))
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
        let call = format!("PATCH {route}");
        self.repo_call(repo, Verb::Patch, &route, Some(&edit.fields()))
            .await?
            .success(&call)?;
        Ok(())
    }

    /// `POST /repos/{o}/{r}/actions/workflows/{file}/dispatches` with
    /// `return_run_details`: 200 answers the run (`workflow-dispatch-response`);
    /// 204 is a GitHub that does not (the run started all the same).
    pub(crate) async fn dispatch_workflow(
        &self,
        repo: &RepoRef,
        dispatch: &WorkflowDispatch,
    ) -> Result<DispatchedRun> {
        #[derive(Deserialize)]
        struct DispatchResponse {
            workflow_run_id: u64,
            #[serde(default)]
            html_url: Option<String>,
        }
        let full_name = &repo.id.full_name;
        let route = format!(
            "/repos/{full_name}/actions/workflows/{}/dispatches",
            dispatch.workflow
        );
        let call = format!("POST {route}");
        let fields = json!({
            "ref": dispatch.git_ref,
            "inputs": dispatch.inputs,
            "return_run_details": true,
        });
        let reply = self
            .repo_call(repo, Verb::Post, &route, Some(&fields))
            .await?;
        let answer = format!("{} {}", reply.status, reply.message());
        let forge = ForgeKind::GitHub;
        match reply.status {
            204 => Err(forge_too_old(
                forge,
                &call,
                dispatch,
                "204 No Content",
                true,
            )),
            status if status < 400 => {
                let run: DispatchResponse = reply.json(&call)?;
                Ok(DispatchedRun {
                    id: run.workflow_run_id,
                    html_url: run.html_url,
                })
            }
            // GitHub Enterprise Server 3.20 and older refuse the field.
            400 | 422 if answer.contains("return_run_details") => {
                Err(forge_too_old(forge, &call, dispatch, &answer, false))
            }
            404 => Err(missing_workflow(forge, &call, full_name, dispatch, &answer)),
            422 => Err(undispatchable_workflow(
                forge, &call, full_name, dispatch, &answer,
            )),
            _ => Err(anyhow!("{call}: {answer}")),
        }
    }

    /// `GET /repos/{o}/{r}/actions/runs/{id}` (its pull requests left out).
    pub(crate) async fn workflow_run(&self, repo: &RepoRef, id: u64) -> Result<WorkflowRunState> {
        #[derive(Deserialize)]
        struct WireWorkflowRun {
            #[serde(default)]
            status: Option<String>,
            #[serde(default)]
            conclusion: Option<String>,
            #[serde(default)]
            html_url: Option<String>,
            #[serde(default)]
            head_sha: Option<String>,
        }
        let route = format!(
            "/repos/{}/actions/runs/{id}?exclude_pull_requests=true",
            repo.id.full_name
        );
        let call = format!("GET {route}");
        let reply = self
            .repo_call(repo, Verb::Get, &route, None)
            .await?
            .success(&call)?;
        let run: WireWorkflowRun = reply.json(&call)?;
        Ok(WorkflowRunState {
            status: RunStatus::from_github(run.status.as_deref(), run.conclusion.as_deref()),
            html_url: run.html_url,
            head_sha: run.head_sha.filter(|sha| !sha.is_empty()),
        })
    }

    /// `GET /repos/{o}/{r}/actions/runs/{id}/jobs`: the latest attempt's
    /// jobs (the first 100), with their steps.
    pub(crate) async fn workflow_run_jobs(&self, repo: &RepoRef, id: u64) -> Result<Vec<RunJob>> {
        #[derive(Deserialize)]
        struct WireJobs {
            jobs: Vec<WireJob>,
        }
        #[derive(Deserialize)]
        struct WireJob {
            id: u64,
            name: String,
            #[serde(default)]
            status: Option<String>,
            #[serde(default)]
            conclusion: Option<String>,
            #[serde(default)]
            html_url: Option<String>,
            #[serde(default)]
            steps: Vec<WireStep>,
        }
        #[derive(Deserialize)]
        struct WireStep {
            name: String,
            #[serde(default)]
            status: Option<String>,
            #[serde(default)]
            conclusion: Option<String>,
        }
        let full_name = &repo.id.full_name;
        let route =
            format!("/repos/{full_name}/actions/runs/{id}/jobs?filter=latest&per_page={PER_PAGE}");
        let call = format!("GET {route}");
        let reply = self.repo_call(repo, Verb::Get, &route, None).await?;
        if reply.status == 404 {
            return Err(anyhow!(
                "{call}: 404 {}: {full_name} has no workflow run {id}",
                reply.message()
            ));
        }
        let listed: WireJobs = reply.success(&call)?.json(&call)?;
        Ok(listed
            .jobs
            .into_iter()
            .map(|job| RunJob {
                id: job.id,
                name: job.name,
                status: RunStatus::from_github(job.status.as_deref(), job.conclusion.as_deref()),
                html_url: job.html_url,
                steps: job
                    .steps
                    .into_iter()
                    .map(|step| RunStep {
                        name: step.name,
                        status: RunStatus::from_github(
                            step.status.as_deref(),
                            step.conclusion.as_deref(),
                        ),
                    })
                    .collect(),
            })
            .collect())
    }

    /// `GET /repos/{o}/{r}/actions/jobs/{id}/logs` answers 302 to a signed
    /// download URL (valid for a minute), which is read with no
    /// credentials, its end kept as it streams in. The URL is named in
    /// errors without its query, which holds the signature.
    pub(crate) async fn job_log_tail(
        &self,
        repo: &RepoRef,
        job_id: u64,
        max_bytes: usize,
    ) -> Result<String> {
        let full_name = &repo.id.full_name;
        let route = format!("/repos/{full_name}/actions/jobs/{job_id}/logs");
        let call = format!("GET {route}");
        let reply = self.repo_call(repo, Verb::Get, &route, None).await?;
        match reply.status {
            301 | 302 | 303 | 307 | 308 => {}
            200 => {
                let mut tail = LogTail::new(max_bytes);
                tail.push(reply.body.as_bytes());
                return Ok(tail.finish());
            }
            404 => {
                return Err(anyhow!(
                    "{call}: 404 {}: {full_name} has no workflow job {job_id}",
                    reply.message()
                ))
            }
            410 => {
                return Err(anyhow!(
                    "{call}: 410 {}: the log of job {job_id} is no longer kept",
                    reply.message()
                ))
            }
            _ => {
                let status = reply.status;
                reply.success(&call)?;
                return Err(anyhow!("{call}: {status} without a log"));
            }
        }
        let location = reply
            .headers
            .get(reqwest::header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| anyhow!("{call}: {} without a Location", reply.status))?;
        let url = reqwest::Url::parse(&format!("{}/", self.api_url))
            .and_then(|api| api.join(location))
            .map_err(|e| anyhow!("{call}: the log's Location is not a URL: {e}"))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(anyhow!("{call}: the log's Location is not an http(s) URL"));
        }
        let download = format!(
            "GET {}://{}{} (job {job_id}'s log)",
            url.scheme(),
            url.host_str().unwrap_or_default(),
            url.path()
        );
        let reply = send_with_retry(&self.policy, &download, || async {
            let exchange = Exchange::start(ForgeKind::GitHub);
            let outcome = download_tail(&self.downloads, url.as_str(), max_bytes).await;
            exchange.finish(&outcome);
            outcome
        })
        .await?
        .success(&download)?;
        if reply.status != 200 {
            return Err(anyhow!("{download}: {} without a log", reply.status));
        }
        Ok(reply.body)
    }

    /// `POST /repos/{o}/{r}/actions/runs/{id}/cancel`: 202, or 409 for a
    /// run already completed (left as it is: no error).
    pub(crate) async fn cancel_workflow_run(&self, repo: &RepoRef, id: u64) -> Result<()> {
        let route = format!("/repos/{}/actions/runs/{id}/cancel", repo.id.full_name);
        let call = format!("POST {route}");
        let reply = self.repo_call(repo, Verb::Post, &route, None).await?;
        if reply.status == 409 {
            return Ok(());
        }
        reply.success(&call)?;
        Ok(())
    }

    /// Edits a comment; `Ok(false)` when it is gone.
    pub(crate) async fn edit_comment(&self, repo: &RepoRef, id: u64, body: &str) -> Result<bool> {
        let route = format!("/repos/{}/issues/comments/{id}", repo.id.full_name);
        let call = format!("PATCH {route}");
        let reply = self
            .repo_call(repo, Verb::Patch, &route, Some(&json!({ "body": body })))
            .await?;
        if reply.status == 404 {
            return Ok(false);
        }
        reply.success(&call)?;
        Ok(true)
    }

    /// Creates the check run, or updates `known`; returns its id.
    pub(crate) async fn publish_check_run(
        &self,
        repo: &RepoRef,
        head: &CommitSha,
        known: Option<u64>,
        fields: Value,
    ) -> Result<u64> {
        #[derive(Deserialize)]
        struct CheckRunBody {
            id: u64,
        }
        if let Some(id) = known {
            let route = format!("/repos/{}/check-runs/{id}", repo.id.full_name);
            let call = format!("PATCH {route}");
            let reply = self
                .repo_call(repo, Verb::Patch, &route, Some(&fields))
                .await?;
            if reply.status != 404 {
                return Ok(reply.success(&call)?.json::<CheckRunBody>(&call)?.id);
            }
        }
        let route = format!("/repos/{}/check-runs", repo.id.full_name);
        let call = format!("POST {route}");
        let mut create = fields;
        create["head_sha"] = json!(head.as_str());
        let reply = self
            .repo_call(repo, Verb::Post, &route, Some(&create))
            .await?
            .success(&call)?;
        Ok(reply.json::<CheckRunBody>(&call)?.id)
    }

    /// The pull request as the forge has it now, and where it stands.
    pub(crate) async fn pull_request(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
    ) -> Result<(PullRequest, PrState)> {
        let route = format!("/repos/{}/pulls/{}", repo.id.full_name, pr.0);
        let call = format!("GET {route}");
        let reply = self
            .repo_call(repo, Verb::Get, &route, None)
            .await?
            .success(&call)?;
        reply
            .json::<WirePull<WireUser>>(&call)?
            .into_pull_request(&call)
    }

    pub(crate) async fn default_branch(&self, repo: &RepoRef) -> Result<String> {
        let route = format!("/repos/{}", repo.id.full_name);
        let call = format!("GET {route}");
        let reply = self
            .repo_call(repo, Verb::Get, &route, None)
            .await?
            .success(&call)?;
        Ok(reply.json::<WireRepository>(&call)?.default_branch)
    }

    /// The budget GitHub last stated for the installation serving `repo`.
    pub(crate) async fn rate_budget(&self, repo: &RepoRef) -> Result<Option<RateBudget>> {
        let id = self.installation_id(repo).await?;
        Ok(self.budgets.lock().unwrap().get(&id).copied())
    }

    /// One page of the repository's open pull requests, oldest first.
    pub(crate) async fn open_pulls_page(
        &self,
        repo: &RepoRef,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedPull>> {
        let route = format!(
            "/repos/{}/pulls?state=open&sort=created&direction=asc&per_page={PER_PAGE}&page={page}",
            repo.id.full_name
        );
        let call = format!("GET {route}");
        let reply = self
            .repo_call_if(repo, Verb::Get, &route, None, etag)
            .await?;
        listing::read_page(reply, &call, PER_PAGE, |wire: WirePull<WireUser>| {
            wire.into_listed(&call).map(Some)
        })
    }

    /// One page of the comments on the repository's issues and pull
    /// requests updated at or after `since` (unix ms), oldest update first.
    pub(crate) async fn repo_comments_page(
        &self,
        repo: &RepoRef,
        since: Option<UnixMs>,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedComment>> {
        let since = since.map_or_else(String::new, |t| format!("&since={}", since_param(t)));
        let route = format!(
            "/repos/{}/issues/comments?sort=updated&direction=asc&per_page={PER_PAGE}&page={page}{since}",
            repo.id.full_name
        );
        let call = format!("GET {route}");
        let reply = self
            .repo_call_if(repo, Verb::Get, &route, None, etag)
            .await?;
        let bot = self.bot_login().await?;
        listing::read_page(reply, &call, PER_PAGE, |wire: WireComment| {
            let Some(pr) = wire.issue_url.as_deref().and_then(listing::number_from_url) else {
                return Ok(None);
            };
            let mut comment = wire.into_comment();
            comment.ours = comment.author.login == bot;
            Ok(Some(ListedComment { pr, comment }))
        })
    }

    /// One page of the pull request's reviews, oldest first; reviews not
    /// submitted yet (`PENDING`) are left out.
    pub(crate) async fn pull_reviews_page(
        &self,
        repo: &RepoRef,
        pr: PrNumber,
        page: u32,
        etag: Option<&str>,
    ) -> Result<Page<ListedReview>> {
        let route = format!(
            "/repos/{}/pulls/{}/reviews?per_page={PER_PAGE}&page={page}",
            repo.id.full_name, pr.0
        );
        let call = format!("GET {route}");
        let reply = self
            .repo_call_if(repo, Verb::Get, &route, None, etag)
            .await?;
        if reply.status == 304 {
            return Ok(Page::NotModified);
        }
        let reply = reply.success(&call)?;
        let (etag, more) = (
            listing::etag(&reply.headers),
            listing::has_next_link(&reply.headers),
        );
        let batch: Vec<WireReview> = reply.json(&call)?;
        let full = batch.len() >= PER_PAGE;
        let bot = self.bot_login().await?;
        let items = batch
            .into_iter()
            .filter_map(|wire| wire.into_listed(&bot))
            .collect();
        Ok(Page::Fresh {
            items,
            etag,
            more: more || full,
        })
    }

    /// `GET /orgs/{org}/teams/{team}/memberships/{user}`: an active membership.
    pub(crate) async fn in_team(&self, repo: &RepoRef, slug: &str, login: &str) -> Result<bool> {
        #[derive(Deserialize)]
        struct Membership {
            state: String,
        }
        let route = format!("/orgs/{}/teams/{slug}/memberships/{login}", repo.id.owner());
        let call = format!("GET {route}");
        let reply = self.repo_call(repo, Verb::Get, &route, None).await?;
        if reply.status == 404 {
            return Ok(false);
        }
        let membership: Membership = reply.success(&call)?.json(&call)?;
        Ok(membership.state == "active")
    }

    pub(crate) async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission> {
        #[derive(Deserialize)]
        struct PermissionBody {
            permission: String,
        }
        let route = format!(
            "/repos/{}/collaborators/{login}/permission",
            repo.id.full_name
        );
        let call = format!("GET {route}");
        let reply = self
            .repo_call(repo, Verb::Get, &route, None)
            .await?
            .success(&call)?;
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
        let call = format!("POST {route}");
        self.repo_call(
            repo,
            Verb::Post,
            &route,
            Some(&json!({ "content": reaction.as_str() })),
        )
        .await?
        .success(&call)?;
        Ok(())
    }
}

/// Every request to GitHub goes through here (octocrab's raw calls), and
/// is counted here.
async fn attempt(
    crab: &Octocrab,
    verb: Verb,
    route: &str,
    body: Option<&Value>,
    if_none_match: Option<&str>,
) -> Result<Reply, Failure> {
    let exchange = Exchange::start(ForgeKind::GitHub);
    let outcome = send_once(crab, verb, route, body, if_none_match).await;
    exchange.finish(&outcome);
    outcome
}

async fn send_once(
    crab: &Octocrab,
    verb: Verb,
    route: &str,
    body: Option<&Value>,
    if_none_match: Option<&str>,
) -> Result<Reply, Failure> {
    let conditional = if_none_match.and_then(|tag| {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::IF_NONE_MATCH, tag.parse().ok()?);
        Some(headers)
    });
    let response = match verb {
        Verb::Get => crab._get_with_headers(route, conditional).await,
        Verb::Post => crab._post(route, body).await,
        Verb::Patch => crab._patch(route, body).await,
    }
    .map_err(failure)?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = crab.body_to_string(response).await.map_err(failure)?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// Reads `url` with `crab`, keeping at most the last `max_bytes` of the
/// body as it streams in.
async fn download_tail(crab: &Octocrab, url: &str, max_bytes: usize) -> Result<Reply, Failure> {
    use futures_util::StreamExt as _;
    let response = crab._get(url).await.map_err(failure)?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut chunks = axum::body::Body::new(response.into_body()).into_data_stream();
    let mut tail = LogTail::new(max_bytes);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| Failure::transient(anyhow!("reading the log: {e}")))?;
        tail.push(&chunk);
    }
    Ok(Reply {
        status,
        headers,
        body: tail.finish(),
    })
}

/// Classifies an octocrab error; its `Display` is only "GitHub", so the
/// error carries the `Debug` form.
fn failure(error: octocrab::Error) -> Failure {
    match error {
        octocrab::Error::GitHub { source, .. } => Failure::answered(
            source.status_code.as_u16(),
            source.headers.clone().unwrap_or_default(),
            anyhow!("{} {}", source.status_code.as_u16(), source.message),
        ),
        octocrab::Error::Service { .. } | octocrab::Error::Hyper { .. } => {
            Failure::transient(anyhow!("{error:?}"))
        }
        other => Failure::permanent(anyhow!("{other:?}")),
    }
}

/// The App's credentials from the manifest flow.
#[derive(Debug, Clone)]
pub struct AppCredentials {
    pub id: u64,
    pub slug: String,
    pub pem: Secret,
    pub webhook_secret: Option<Secret>,
    pub(crate) html_url: String,
}

/// Exchanges a manifest-flow `code` for the new App's credentials
/// (`POST /app-manifests/{code}/conversions`, unauthenticated).
/// GitHub's web host (where people create Apps and log in): github.com for
/// api.github.com, the host for GitHub Enterprise (`https://host/api/v3`), the API URL itself otherwise.
pub(crate) fn web_url(api_url: &str) -> String {
    let api = api_url.trim_end_matches('/');
    if api == "https://api.github.com" {
        "https://github.com".into()
    } else if let Some(host) = api.strip_suffix("/api/v3") {
        host.into()
    } else {
        api.into()
    }
}

pub async fn convert_manifest(api_url: &str, code: &str) -> Result<AppCredentials> {
    #[derive(Deserialize)]
    struct Conversion {
        id: u64,
        slug: String,
        pem: String,
        webhook_secret: Option<String>,
        html_url: String,
    }
    let http = reqwest::Client::builder()
        .user_agent("wavegate")
        .build()
        .context("building the HTTP client")?;
    let url = format!(
        "{}/app-manifests/{code}/conversions",
        api_url.trim_end_matches('/')
    );
    let call = "POST /app-manifests/{code}/conversions";
    // The code works once: a retry after a lost answer could only fail.
    let once = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let reply = send_with_retry(&once, call, || async {
        let exchange = Exchange::start(ForgeKind::GitHub);
        let outcome = async {
            let response = http
                .post(&url)
                .header("accept", "application/vnd.github+json")
                .send()
                .await
                .map_err(|e| Failure::transient(anyhow!("{:?}", e.without_url())))?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response
                .text()
                .await
                .map_err(|e| Failure::transient(anyhow!("{:?}", e.without_url())))?;
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
    .await?
    .success(call)?;
    let c: Conversion = reply.json(call)?;
    Ok(AppCredentials {
        id: c.id,
        slug: c.slug,
        pem: Secret::new(c.pem),
        webhook_secret: c.webhook_secret.map(Secret::new),
        html_url: c.html_url,
    })
}

/// One attempt to deliver a webhook, as the App's delivery log lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookDelivery {
    /// This attempt's id (what a redelivery is asked for by).
    pub(crate) id: u64,
    /// `X-GitHub-Delivery`, shared by every attempt of one event.
    pub(crate) guid: String,
    /// Unix ms.
    pub(crate) delivered_at: UnixMs,
    /// What the bot answered; 0 when nothing answered.
    pub(crate) status_code: u16,
    pub(crate) redelivery: bool,
    pub(crate) event: String,
    pub(crate) installation_id: Option<u64>,
}

impl HookDelivery {
    pub(crate) fn succeeded(&self) -> bool {
        (200..300).contains(&self.status_code)
    }
}

/// What [`GitHubClient::hook_deliveries`] listed, and whether it stopped at
/// its page cap before reaching back to the time asked for.
#[derive(Debug, Default)]
pub(crate) struct HookDeliveries {
    pub(crate) deliveries: Vec<HookDelivery>,
    pub(crate) capped: bool,
}

/// GitHub's `hook-delivery-item`: the fields read.
#[derive(Deserialize)]
struct WireHookDelivery {
    id: u64,
    guid: String,
    delivered_at: String,
    redelivery: bool,
    status_code: u16,
    event: String,
    #[serde(default)]
    installation_id: Option<u64>,
}

impl WireHookDelivery {
    /// None when `delivered_at` is not a time (such an entry cannot be placed).
    fn into_hook_delivery(self) -> Option<HookDelivery> {
        Some(HookDelivery {
            delivered_at: unix_ms(&self.delivered_at)?,
            id: self.id,
            guid: self.guid,
            status_code: self.status_code,
            redelivery: self.redelivery,
            event: self.event,
            installation_id: self.installation_id,
        })
    }
}

/// The `cursor` of the `Link` header's `rel="next"` URL.
fn next_cursor(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        if !is_next {
            return None;
        }
        let url = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let (_, query) = url.split_once('?')?;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("cursor="))
            .filter(|cursor| !cursor.is_empty())
            .map(str::to_owned)
    })
}

#[derive(Deserialize)]
struct WireUser {
    id: u64,
    login: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

impl WireUser {
    fn into_user(self) -> User {
        let is_bot = self.kind.as_deref() == Some("Bot") || self.login.ends_with("[bot]");
        User {
            id: self.id,
            login: self.login,
            is_bot,
        }
    }
}

#[derive(Deserialize)]
struct WireComment {
    id: u64,
    #[serde(default)]
    issue_url: Option<String>,
    #[serde(default)]
    body: Option<String>,
    user: Option<WireUser>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
}

impl WireComment {
    fn into_comment(self) -> Comment {
        let author = self.user.map(WireUser::into_user).unwrap_or(User {
            id: 0,
            login: "ghost".into(),
            is_bot: false,
        });
        Comment {
            id: self.id,
            body: self.body.unwrap_or_default(),
            ours: author.is_bot,
            author,
            created_at: self.created_at.as_deref().and_then(unix_ms),
            updated_at: self.updated_at.as_deref().and_then(unix_ms),
        }
    }
}

/// `GET /repos/{o}/{r}/pulls/{n}/reviews`: `user` is null for a deleted
/// account, `commit_id` for a review of a commit since force-pushed away.
#[derive(Deserialize)]
struct WireReview {
    id: u64,
    user: Option<WireUser>,
    state: String,
    #[serde(default)]
    commit_id: Option<String>,
    #[serde(default)]
    submitted_at: Option<String>,
}

impl WireReview {
    /// `bot`: this App's login. None: not a submitted review.
    fn into_listed(self, bot: &str) -> Option<ListedReview> {
        let state = listing::review_state(&self.state, false)?;
        let author = self.user.map(WireUser::into_user).unwrap_or(User {
            id: 0,
            login: "ghost".into(),
            is_bot: true,
        });
        Some(ListedReview {
            id: self.id,
            ours: author.login == bot,
            author,
            state,
            commit: self
                .commit_id
                .as_deref()
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

/// The check run's fields for `report`: its name, title and summary (cut to
/// GitHub's limit, saying so), and its status and conclusion.
pub(crate) fn check_run_fields(report: &CheckReport) -> Value {
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
    fields
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
    use crate::model::time::in_tests::unix;

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
    fn waiting_for_approval_is_action_required_and_running_has_no_conclusion() {
        assert_eq!(
            github_conclusion(CheckState::ActionRequired),
            Some("action_required")
        );
        assert_eq!(github_conclusion(CheckState::InProgress), None);
    }
    use reqwest::header::HeaderMap;

    #[test]
    fn a_listed_delivery_becomes_ours_as_github_documents_it() {
        // The `hook-delivery-items` example of GitHub's OpenAPI description.
        let page: Vec<WireHookDelivery> = serde_json::from_value(json!([
            {
                "id": 12345678, "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
                "delivered_at": "2019-06-03T00:57:16Z", "redelivery": false,
                "duration": 0.27, "status": "OK", "status_code": 200,
                "event": "issues", "action": "opened", "installation_id": 123,
                "repository_id": 456, "throttled_at": "2019-06-03T00:57:16Z"
            },
            {
                "id": 123456789, "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
                "delivered_at": "2019-06-04T00:57:16Z", "redelivery": true,
                "duration": 0.28, "status": "Invalid HTTP Response: 503", "status_code": 503,
                "event": "issues", "action": null, "installation_id": null,
                "repository_id": null, "throttled_at": null
            }
        ]))
        .unwrap();
        let ours: Vec<HookDelivery> = page
            .into_iter()
            .filter_map(WireHookDelivery::into_hook_delivery)
            .collect();
        assert_eq!(
            ours[0],
            HookDelivery {
                id: 12345678,
                guid: "0b989ba4-242f-11e5-81e1-c7b6966d2516".into(),
                delivered_at: unix(1_559_523_436_000),
                status_code: 200,
                redelivery: false,
                event: "issues".into(),
                installation_id: Some(123),
            }
        );
        assert!(ours[0].succeeded());
        assert!(!ours[1].succeeded());
        assert_eq!(ours[1].installation_id, None);
    }

    fn link(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("link", value.parse().unwrap());
        headers
    }

    #[test]
    fn the_next_page_is_the_cursor_of_the_link_headers_next_url() {
        let headers = link(
            "<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_12077215967>; rel=\"next\", \
             <https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_1>; rel=\"prev\"",
        );
        assert_eq!(next_cursor(&headers).as_deref(), Some("v1_12077215967"));
        let last_page = link(
            "<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_9>; rel=\"prev\"",
        );
        assert_eq!(next_cursor(&last_page), None);
        assert_eq!(next_cursor(&HeaderMap::new()), None);
    }
}
