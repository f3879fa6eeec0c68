//! The pages and the JSON API: what the store knows of each repository's
//! pull requests, apply runs and ledger facts, as server-rendered HTML and
//! as JSON under `/api/v1/`, both built from the same views (`view.rs`);
//! and an operator's two actions on a repository's queue, releasing a
//! stale lock and retrying a dead job (`actions.rs`), each recorded in the
//! ledger.
//!
//! Until visitors can log in with the forge, the pages are shown only when
//! the operator opens them to whoever reaches the server
//! (`WAVEGATE_PUBLIC_PAGES=on`); otherwise every path here answers 404 and
//! says how to open them. Every answer carries a content security policy
//! that allows nothing from elsewhere and no inline script: the one script,
//! `/assets/live.js`, streams a running command's output into its page.

pub mod access;
mod actions;
mod html;
mod live;
mod login;
mod recent;
mod session;
mod stale;
mod view;

use crate::config::settings::{LoginSettings, Settings};
use crate::forge::registry::Forges;
use crate::gate::ledger;
use crate::gate::ledger::LedgerKey;
use crate::model::{ForgeKind, PrNumber, RepoId};
use crate::plan::live::Hub;
use crate::store::{PullState, Store};
use access::Visitor;
use anyhow::Context as _;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use recent::Recent;
use serde::Deserialize;
use std::sync::Arc;
pub(crate) use view::ServerView;
use view::{LedgerView, PullView, PullsView, QueueView, RepoView};

/// How long a ledger's verification is shown as of the same head before
/// the whole chain is read and checked again (a fact changed in the
/// database behind wavegate shows within this).
const VERIFIED_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// The last verification of each repository's ledger and the head it was
/// made at: a chain of thousands of signed facts is checked again only
/// when a fact is appended, or after [`VERIFIED_FOR`].
#[derive(Debug)]
pub(crate) struct Verifications(Recent<String, (Option<ledger::LedgerHead>, Verification)>);

type Verification = Result<ledger::Verified, ledger::BrokenLink>;

/// Repositories whose verification is kept at most.
const VERIFIED_LIMIT: usize = 10_000;

impl Default for Verifications {
    fn default() -> Self {
        Self(Recent::new(VERIFIED_FOR, VERIFIED_LIMIT))
    }
}

impl Verifications {
    fn get(&self, repo: &str, head: Option<&ledger::LedgerHead>) -> Option<Verification> {
        self.0
            .get(&repo.to_owned())
            .filter(|(at_head, _)| at_head.as_ref() == head)
            .map(|(_, verified)| verified)
    }

    fn put(&self, repo: String, head: Option<ledger::LedgerHead>, verified: Verification) {
        self.0.put(repo, (head, verified));
    }
}

/// Pull requests on one page of a repository's list.
pub(crate) const PAGE: u32 = 50;

#[derive(Clone)]
pub(crate) struct WebState {
    pub(crate) store: Store,
    /// The commands running on this server, for their live output.
    pub(crate) console: Hub,
    /// `WAVEGATE_PUBLIC_PAGES`: shown to anyone who reaches the server.
    pub(crate) open: bool,
    /// What the server page shows, as the server started.
    pub(crate) server: Arc<ServerView>,
    /// Who may log in with which forge, and who operates.
    pub(crate) login: Arc<LoginSettings>,
    /// The forges, asked (with the bot's credentials) what a visitor may see.
    pub(crate) forges: Arc<Forges>,
    /// Each ledger's verification, as of its head.
    pub(crate) verifications: Arc<Verifications>,
    /// What the forges said of visitors, lately.
    pub(crate) standings: Arc<access::StandingCache>,
    /// Signs the session and login cookies.
    pub(crate) cookies: session::CookieKey,
    /// Logins' calls to the forges (a code for a token, the token's user).
    pub(crate) http: reqwest::Client,
    /// `WAVEGATE_PUBLIC_URL`: where the forges send a visitor back to.
    pub(crate) public_url: Option<String>,
    pub(crate) github_api_url: String,
    pub(crate) forgejo_url: Option<String>,
    /// Wakes the workers when an operator action queues a job.
    pub(crate) wake: Arc<tokio::sync::Notify>,
}

impl WebState {
    /// The state of the pages of a server with these settings.
    pub(crate) fn new(
        settings: &Settings,
        store: Store,
        console: Hub,
        forges: Arc<Forges>,
        ledger_key: &LedgerKey,
        server: ServerView,
        wake: Arc<tokio::sync::Notify>,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(15))
            .build()
            .context("an HTTP client for logins")?;
        Ok(Self {
            store,
            console,
            open: settings.public_pages,
            server: Arc::new(server),
            login: Arc::new(settings.login.clone()),
            forges,
            standings: Arc::default(),
            verifications: Arc::default(),
            cookies: session::CookieKey::new(ledger_key.derived_secret(session::KEY_PURPOSE)),
            http,
            public_url: settings.public_url.clone(),
            github_api_url: settings.github_api_url.clone(),
            forgejo_url: settings.forgejo.as_ref().map(|forgejo| forgejo.url.clone()),
            wake,
        })
    }

    fn endpoints(&self, forge: ForgeKind) -> login::Endpoints {
        login::Endpoints::of(forge, &self.github_api_url, self.forgejo_url.as_deref())
    }
}

pub(crate) fn router(state: WebState) -> Router {
    Router::new()
        .route("/repos", get(repos_page))
        .route("/repos/{forge}/{owner}/{name}", get(pulls_page))
        .route(
            "/repos/{forge}/{owner}/{name}/pulls/{number}",
            get(pull_page),
        )
        .route("/repos/{forge}/{owner}/{name}/ledger", get(ledger_page))
        .route("/repos/{forge}/{owner}/{name}/queue", get(queue_page))
        .route(
            "/repos/{forge}/{owner}/{name}/locks/{member}/release",
            post(actions::release_form),
        )
        .route(
            "/repos/{forge}/{owner}/{name}/jobs/{id}/retry",
            post(actions::retry_form),
        )
        .route("/server", get(server_page))
        .route("/api/v1/server", get(server_api))
        .route("/api/v1/repos", get(repos_api))
        .route("/api/v1/repos/{forge}/{owner}/{name}/queue", get(queue_api))
        .route(
            "/api/v1/repos/{forge}/{owner}/{name}/locks/{member}/release",
            post(actions::release_api),
        )
        .route(
            "/api/v1/repos/{forge}/{owner}/{name}/jobs/{id}/retry",
            post(actions::retry_api),
        )
        .route(
            "/api/v1/repos/{forge}/{owner}/{name}/ledger",
            get(ledger_api),
        )
        .route("/api/v1/repos/{forge}/{owner}/{name}/pulls", get(pulls_api))
        .route(
            "/api/v1/repos/{forge}/{owner}/{name}/pulls/{number}",
            get(pull_api),
        )
        .route(
            "/repos/{forge}/{owner}/{name}/pulls/{number}/commands/{id}/live",
            get(live::live),
        )
        .route(
            "/api/v1/repos/{forge}/{owner}/{name}/pulls/{number}/commands",
            get(live::commands_api),
        )
        .route(
            "/api/v1/repos/{forge}/{owner}/{name}/pulls/{number}/commands/{id}",
            get(live::command_api),
        )
        .route("/assets/wavegate.css", get(style))
        .route("/assets/live.js", get(live::script))
        .route("/login", get(login::login_page))
        .route("/login/{forge}", get(login::start))
        .route("/login/{forge}/callback", get(login::callback))
        .route("/logout", post(login::logout))
        .layer(middleware::map_response(with_security_headers))
        .with_state(state)
}

async fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The top of a page for `visitor`.
fn nav<'a>(state: &WebState, visitor: &'a Visitor) -> html::Nav<'a> {
    html::Nav {
        user: match visitor {
            Visitor::User(session) => Some((&session.login, &session.csrf)),
            _ => None,
        },
        can_log_in: state.login.any(),
    }
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        html::STYLE,
    )
}

/// Why a page or an API call has no answer; an API call gets it as JSON.
#[derive(Debug)]
pub(crate) enum Problem {
    /// The pages are closed to visitors who are not logged in.
    Closed,
    /// Only someone logged in may do this; says what, and where they were
    /// going.
    LogIn {
        why: String,
        next: String,
    },
    /// The forge could not be asked; says what to do.
    Unavailable(String),
    /// The request's credentials are not valid; says which and what to do.
    Unauthorized(String),
    /// The visitor is known and may not do this; says why.
    Forbidden(String),
    /// What was asked cannot be done as things stand; says why.
    Conflict(String),
    NotFound(String),
    BadQuery(String),
    Internal(anyhow::Error),
}

impl From<anyhow::Error> for Problem {
    fn from(error: anyhow::Error) -> Self {
        Problem::Internal(error)
    }
}

impl Problem {
    fn status_and_message(self) -> (StatusCode, String) {
        match self {
            Problem::Closed => (
                StatusCode::NOT_FOUND,
                "The pages are off. An operator opens them to anyone who can reach this server with WAVEGATE_PUBLIC_PAGES=on.".into(),
            ),
            Problem::LogIn { why, .. } => (StatusCode::UNAUTHORIZED, why),
            Problem::Unavailable(message) => (StatusCode::SERVICE_UNAVAILABLE, message),
            Problem::Unauthorized(message) => (StatusCode::UNAUTHORIZED, message),
            Problem::Forbidden(message) => (StatusCode::FORBIDDEN, message),
            Problem::Conflict(message) => (StatusCode::CONFLICT, message),
            Problem::NotFound(message) => (StatusCode::NOT_FOUND, message),
            Problem::BadQuery(message) => (StatusCode::BAD_REQUEST, message),
            Problem::Internal(error) => {
                tracing::error!(error = ?error, "a page could not be read from the store");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The store could not be read; the server's log says why.".into(),
                )
            }
        }
    }
}

/// A problem shown as a page.
struct PageProblem(Problem);

impl From<Problem> for PageProblem {
    fn from(problem: Problem) -> Self {
        PageProblem(problem)
    }
}

impl IntoResponse for PageProblem {
    fn into_response(self) -> Response {
        if let Problem::LogIn { next, .. } = &self.0 {
            let to = format!("/login?next={}", html::encode_component(next));
            return Redirect::to(&to).into_response();
        }
        let (status, message) = self.0.status_and_message();
        let title = status.canonical_reason().unwrap_or("Error");
        (
            status,
            Html(html::problem(&html::Nav::default(), title, &message).into_string()),
        )
            .into_response()
    }
}

/// A problem answered as `{"error": "…"}`.
struct ApiProblem(Problem);

impl From<Problem> for ApiProblem {
    fn from(problem: Problem) -> Self {
        ApiProblem(problem)
    }
}

impl IntoResponse for ApiProblem {
    fn into_response(self) -> Response {
        let (status, message) = self.0.status_and_message();
        (status, Json(serde_json::json!({ "error": message }))).into_response()
    }
}

/// A page's query, or what is wrong with it in the page's own words (an
/// unknown parameter, a number that is not one).
fn read<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, Problem> {
    query
        .map(|Query(query)| query)
        .map_err(|rejection| Problem::BadQuery(rejection.body_text()))
}

/// `{forge}/{owner}/{name}` of a repository the store knows and `visitor`
/// may read.
async fn readable_repo(
    state: &WebState,
    visitor: &Visitor,
    path: &(String, String, String),
) -> Result<RepoId, Problem> {
    let repo = repo_at(path)?;
    // Access first: whether wavegate knows a repository is told only to
    // whoever may read it.
    access::may_read(state, visitor, &repo).await?;
    known(&state.store, repo).await
}

/// The repository `{forge}/{owner}/{name}` names, known or not.
fn repo_at((forge, owner, name): &(String, String, String)) -> Result<RepoId, Problem> {
    let kind: ForgeKind = forge.parse().map_err(Problem::NotFound)?;
    Ok(RepoId::new(kind, format!("{owner}/{name}")))
}

/// `repo`, if an event of it ever reached this server.
async fn known(store: &Store, repo: RepoId) -> Result<RepoId, Problem> {
    if store.knows_repository(&repo).await? {
        Ok(repo)
    } else {
        Err(Problem::NotFound(format!(
            "wavegate knows no repository {repo}: none of its events reached this server"
        )))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    before: Option<u64>,
}

/// The repositories the store knows that `visitor` may read.
async fn known_repos(state: &WebState, visitor: &Visitor) -> Result<Vec<RepoView>, Problem> {
    access::may_browse(state, visitor)?;
    let mut repos = Vec::new();
    for repo in state.store.repositories().await?.into_keys() {
        match access::may_read(state, visitor, &repo).await {
            Ok(()) => repos.push(repo),
            Err(Problem::Forbidden(_)) => {}
            // One repository the forge could not answer for is left out
            // (and logged), not the whole list.
            Err(Problem::Unavailable(_)) => {}
            Err(problem) => return Err(problem),
        }
    }
    repos.sort_by(|a, b| (a.forge.as_str(), &a.full_name).cmp(&(b.forge.as_str(), &b.full_name)));
    Ok(repos.iter().map(RepoView::of).collect())
}

async fn pulls_of(
    state: &WebState,
    visitor: &Visitor,
    path: &(String, String, String),
    query: ListQuery,
) -> Result<PullsView, Problem> {
    let repo = readable_repo(state, visitor, path).await?;
    let filter = query
        .state
        .as_deref()
        .filter(|state| !state.is_empty())
        .map(str::parse::<PullState>)
        .transpose()
        .map_err(Problem::BadQuery)?;
    let before = match query.before {
        Some(n) if i64::try_from(n).is_err() => {
            return Err(Problem::BadQuery(format!(
                "`before={n}` is past any pull request number"
            )))
        }
        before => before.map(PrNumber),
    };
    let rows = state.store.pull_rows(&repo, filter, before, PAGE).await?;
    Ok(PullsView::of(&repo, filter, &rows, PAGE))
}

/// A pull request, with its commands' kept output when `outputs` (its
/// page; the API lists them without).
async fn pull_of(
    state: &WebState,
    visitor: &Visitor,
    (forge, owner, name, number): (String, String, String, u64),
    outputs: bool,
) -> Result<PullView, Problem> {
    let repo = readable_repo(state, visitor, &(forge, owner, name)).await?;
    let store = &state.store;
    let pr = PrNumber(number);
    let Some(record) = store.pr(&repo, pr).await? else {
        return Err(Problem::NotFound(format!(
            "wavegate has heard of no pull request {pr} in {repo}"
        )));
    };
    let plan = store.latest_plan(&repo, pr).await?;
    let facts = store.pr_facts(&repo.ledger_key(), pr).await?;
    let run = store.apply_run(&repo, pr).await?;
    let commands = store
        .commands_of(&repo, pr, live::COMMANDS, outputs)
        .await?;
    let now = store.now();
    let mut view = PullView::of(&record, plan.as_ref(), &facts, run.as_ref());
    view.commands = commands
        .into_iter()
        .map(|(row, output)| view::CommandView::of(&repo, &row, output, now))
        .collect();
    Ok(view)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LedgerQuery {
    before: Option<i64>,
}

/// The ledger of a repository: its whole chain verified (hashes, and with
/// the server's key its signatures), and one page of its facts.
async fn ledger_of(
    state: &WebState,
    visitor: &Visitor,
    path: &(String, String, String),
    query: LedgerQuery,
) -> Result<LedgerView, Problem> {
    let repo = readable_repo(state, visitor, path).await?;
    let store = &state.store;
    let key = repo.ledger_key();
    let signer = store.signer();
    let head = store.ledger_head(&key).await?;
    let verified = match state.verifications.get(&key, head.as_ref()) {
        Some(verified) => verified,
        None => {
            let facts = store.repo_facts(&key).await?;
            // Every hash and signature of the chain: CPU work, kept off the runtime.
            let signer = signer.clone();
            let verified = tokio::task::spawn_blocking(move || {
                let check = signer
                    .as_ref()
                    .map(|(key, start)| ledger::SignatureCheck { key, start });
                ledger::verify(&facts, check)
            })
            .await
            .map_err(|e| {
                Problem::Internal(anyhow::anyhow!("verifying the ledger of {repo}: {e}"))
            })?;
            state.verifications.put(key.clone(), head, verified.clone());
            verified
        }
    };
    let facts = store.repo_facts_page(&key, query.before, PAGE).await?;
    Ok(LedgerView::of(
        &repo,
        signer.as_ref().map(|(key, _)| key),
        &verified,
        &facts,
        PAGE,
    ))
}

async fn ledger_page(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String)>,
    query: Result<Query<LedgerQuery>, QueryRejection>,
) -> Result<Html<String>, PageProblem> {
    let view = ledger_of(&state, &visitor, &path, read(query)?).await?;
    Ok(Html(
        html::ledger(&nav(&state, &visitor), &view).into_string(),
    ))
}

async fn ledger_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String)>,
    query: Result<Query<LedgerQuery>, QueryRejection>,
) -> Result<Json<LedgerView>, ApiProblem> {
    Ok(Json(
        ledger_of(&state, &visitor, &path, read(query)?).await?,
    ))
}

/// Who holds which member locked, and the repository's unfinished jobs.
async fn queue_of(
    state: &WebState,
    visitor: &Visitor,
    path: &(String, String, String),
) -> Result<QueueView, Problem> {
    let repo = readable_repo(state, visitor, path).await?;
    let store = &state.store;
    let locks = store.member_locks(&repo).await?;
    let jobs = store
        .unfinished_jobs(&crate::jobs::queue_key_prefix(&repo), PAGE)
        .await?;
    Ok(QueueView::of(&repo, &locks, &jobs))
}

async fn queue_page(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String)>,
) -> Result<Html<String>, PageProblem> {
    let view = queue_of(&state, &visitor, &path).await?;
    Ok(Html(
        html::queue(&nav(&state, &visitor), &view).into_string(),
    ))
}

async fn queue_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String)>,
) -> Result<Json<QueueView>, ApiProblem> {
    Ok(Json(queue_of(&state, &visitor, &path).await?))
}

async fn server_page(
    State(state): State<WebState>,
    visitor: Visitor,
) -> Result<Html<String>, PageProblem> {
    access::may_browse(&state, &visitor)?;
    Ok(Html(
        html::server(&nav(&state, &visitor), &state.server).into_string(),
    ))
}

async fn server_api(
    State(state): State<WebState>,
    visitor: Visitor,
) -> Result<Json<ServerView>, ApiProblem> {
    access::may_browse(&state, &visitor)?;
    Ok(Json(ServerView::clone(&state.server)))
}

async fn repos_page(
    State(state): State<WebState>,
    visitor: Visitor,
) -> Result<Html<String>, PageProblem> {
    let repos = known_repos(&state, &visitor).await?;
    Ok(Html(
        html::repos(&nav(&state, &visitor), &repos).into_string(),
    ))
}

async fn pulls_page(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String)>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Html<String>, PageProblem> {
    let view = pulls_of(&state, &visitor, &path, read(query)?).await?;
    Ok(Html(
        html::pulls(&nav(&state, &visitor), &view).into_string(),
    ))
}

async fn pull_page(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String, u64)>,
) -> Result<Html<String>, PageProblem> {
    let view = pull_of(&state, &visitor, path, true).await?;
    Ok(Html(
        html::pull(&nav(&state, &visitor), &view).into_string(),
    ))
}

async fn repos_api(
    State(state): State<WebState>,
    visitor: Visitor,
) -> Result<Json<Vec<RepoView>>, ApiProblem> {
    Ok(Json(known_repos(&state, &visitor).await?))
}

async fn pulls_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String)>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<PullsView>, ApiProblem> {
    Ok(Json(pulls_of(&state, &visitor, &path, read(query)?).await?))
}

async fn pull_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path(path): Path<(String, String, String, u64)>,
) -> Result<Json<PullView>, ApiProblem> {
    Ok(Json(pull_of(&state, &visitor, path, false).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(seq: i64) -> ledger::LedgerHead {
        ledger::LedgerHead {
            seq,
            hash: ledger::genesis(),
        }
    }

    #[test]
    fn a_ledger_is_verified_again_once_a_fact_is_appended() {
        let verifications = Verifications::default();
        let verified = Ok(ledger::Verified {
            facts: 3,
            head: Some(head(3)),
            signatures: None,
        });
        assert_eq!(verifications.get("github:acme/infra", Some(&head(3))), None);
        verifications.put("github:acme/infra".into(), Some(head(3)), verified.clone());
        assert_eq!(
            verifications.get("github:acme/infra", Some(&head(3))),
            Some(verified)
        );
        assert_eq!(verifications.get("github:acme/infra", Some(&head(4))), None);
        assert_eq!(verifications.get("github:acme/site", Some(&head(3))), None);
    }
}
