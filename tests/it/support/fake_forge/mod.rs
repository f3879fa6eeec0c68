//! A stateful fake of the GitHub and Forgejo REST subsets wavegate calls,
//! served over real HTTP on 127.0.0.1: GitHub at `/`, Forgejo at `/api/v1`.
//! It checks auth the way the forges do (App JWTs, expiring installation
//! tokens, Forgejo tokens), keeps what the bot wrote, logs every request for
//! assertions and the conformance check, and fails on demand. Like GitHub,
//! it can deliver webhooks to the bot's App webhook, logs each attempt, and
//! lists and redelivers them through `/app/hook/deliveries`.
//!
//! One module per resource, each holding what a test does to it, its
//! routes (each operation written once for both forges, what differs being
//! each forge's own) and its JSON per forge: `pulls`, `issues`, `reviews`,
//! `comments` (and reactions), `checks` (GitHub's check runs, Forgejo's
//! commit statuses), `actions` (workflow dispatches, runs, their jobs and
//! logs, the workflow read from the repository's git), `people` (users,
//! permissions, teams), `app` (the GitHub App: tokens, installations,
//! webhook deliveries) and `oidc` (the Actions OIDC issuer: its keys, and
//! the run tokens it signs).
//! `state` is what the fake holds, `http` the plumbing and paging both
//! forges share; this file starts the server, authenticates and routes.

// Handlers return a refusal as the `Err` response so `?` answers early; its size is no concern here.
#![allow(clippy::result_large_err)]

mod actions;
mod app;
mod checks;
mod comments;
mod http;
mod issues;
mod oauth;
mod oidc;
mod people;
mod pulls;
mod reviews;
mod state;

pub use actions::RunsHandle;
use http::*;
pub use oidc::{RunToken, OIDC_KEY_ID};
pub use state::*;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use octocrab::jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wavegate::config::settings::Secret;
use wavegate::forge::RepoRef;
use wavegate::model::{ForgeKind, RepoId};

pub const APP_ID: u64 = 4242;
pub const APP_SLUG: &str = "wavegate";
/// The login GitHub gives the App's comments.
pub const GITHUB_BOT_LOGIN: &str = "wavegate[bot]";
pub const FORGEJO_BOT_LOGIN: &str = "wavegate-bot";
pub const FORGEJO_BOT_TOKEN: &str = "forgejo-bot-token-0123456789";
pub const MANIFEST_WEBHOOK_SECRET: &str = "manifest-webhook-secret";

const APP_PRIVATE_KEY: &str = include_str!("../test-app-key.pem");
const APP_PUBLIC_KEY: &str = include_str!("../test-app-key.pub.pem");

/// The fake App's private key (what `convert_manifest` hands out).
pub fn app_private_key() -> Secret {
    Secret::new(APP_PRIVATE_KEY)
}

pub struct FakeForge {
    url: String,
    state: Arc<Mutex<State>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeForge {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeForge {
    pub async fn start() -> Self {
        let listener = crate::support::bot::listen_on_a_free_port().await;
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut forgejo_tokens = HashMap::new();
        forgejo_tokens.insert(FORGEJO_BOT_TOKEN.to_owned(), FORGEJO_BOT_LOGIN.to_owned());
        let state = Arc::new(Mutex::new(State {
            next_id: 1000,
            users: HashMap::new(),
            repos: Vec::new(),
            installations: HashMap::new(),
            tokens: Vec::new(),
            token_lifetime: Duration::from_secs(3600),
            forgejo_tokens,
            forgejo_bot_admin: true,
            teams: HashMap::new(),
            manifest_codes: HashSet::new(),
            fail_rules: Vec::new(),
            requests: Vec::new(),
            rate_limit: 5000,
            rate_reset: unix_secs(SystemTime::now()) + 3600,
            budget_used: HashMap::new(),
            not_modified: 0,
            app_webhook: None,
            hook_deliveries: Vec::new(),
            outbox: Vec::new(),
            clock_behind: Duration::ZERO,
            oauth: Default::default(),
            base_url: url.clone(),
            dispatched: tokio::sync::broadcast::channel(256).0,
            log_downloads: Vec::new(),
            oidc: Default::default(),
        }));
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(32 * 1024 * 1024))
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake forge server");
        });
        Self { url, state, server }
    }

    /// The GitHub API root and the Forgejo instance root (API under `/api/v1`).
    pub fn url(&self) -> &str {
        &self.url
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// What the repository holds in `field` that `keep` keeps, in order.
    fn listed<T: Clone>(
        &self,
        repo: &RepoHandle,
        field: impl Fn(&Repo) -> &Vec<T>,
        keep: impl Fn(&T) -> bool,
    ) -> Vec<T> {
        self.with(|s| {
            field(s.repo_of(repo))
                .iter()
                .filter(|x| keep(x))
                .cloned()
                .collect()
        })
    }

    /// Registers `full_name` on GitHub, the App installed on it as `installation`.
    pub fn add_github_repo(
        &self,
        full_name: &str,
        clone_url: &str,
        installation: u64,
    ) -> RepoHandle {
        self.with(|s| {
            let owner = full_name.split('/').next().unwrap_or_default().to_owned();
            s.installations.entry(installation).or_insert(owner);
            let handle = RepoHandle {
                forge: ForgeKind::GitHub,
                full_name: full_name.to_owned(),
                id: s.id(),
                clone_url: clone_url.to_owned(),
                installation: Some(installation),
            };
            s.repos.push(Repo::new(handle.clone()));
            handle
        })
    }

    /// Registers `full_name` on Forgejo.
    pub fn add_forgejo_repo(&self, full_name: &str, clone_url: &str) -> RepoHandle {
        self.with(|s| {
            let handle = RepoHandle {
                forge: ForgeKind::Forgejo,
                full_name: full_name.to_owned(),
                id: s.id(),
                clone_url: clone_url.to_owned(),
                installation: None,
            };
            s.repos.push(Repo::new(handle.clone()));
            handle
        })
    }

    /// Makes `branch` the repository's default branch.
    pub fn set_default_branch(&self, repo: &RepoHandle, branch: &str) {
        self.with(|s| s.repo_of(repo).default_branch = branch.to_owned());
    }

    /// The next request whose method and path start match answers `status`
    /// with `headers` (and a JSON message) instead of being served.
    pub fn fail_next(
        &self,
        method: &str,
        path_prefix: &str,
        status: u16,
        headers: &[(&str, &str)],
    ) {
        self.with(|s| {
            s.fail_rules.push(FailRule {
                method: method.to_ascii_uppercase(),
                path_prefix: path_prefix.to_owned(),
                status,
                headers: headers
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                    .collect(),
            })
        })
    }

    /// The forge's clock, which dates what it holds (pull requests'
    /// updates, comments, reviews, tokens, webhook deliveries).
    pub fn now(&self) -> SystemTime {
        self.with(|s| s.now())
    }

    /// From now on the forge's clock runs `behind` the wall clock the bot
    /// reads: what the forge writes meanwhile is dated as if written that
    /// much earlier (a test moves this clock instead of sleeping until the
    /// bot's has moved on). `Duration::ZERO` sets it right again.
    pub fn set_clock_behind(&self, behind: Duration) {
        self.with(|s| s.clock_behind = behind)
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.with(|s| s.requests.clone())
    }

    /// GitHub's budget per installation becomes `limit` (5,000 an hour
    /// unless set) in a window that resets in `resets_in` (then hourly);
    /// what was spent so far stays spent until then.
    pub fn set_rate_window(&self, limit: u64, resets_in: Duration) {
        self.with(|s| {
            s.rate_limit = limit;
            s.rate_reset = s.unix_now() + resets_in.as_secs();
        });
    }

    /// Requests counted against each installation's budget so far.
    pub fn budget_used(&self, installation: u64) -> u64 {
        self.with(|s| {
            s.budget_used
                .get(&installation)
                .copied()
                .unwrap_or_default()
        })
    }

    /// GETs answered 304 so far.
    pub fn not_modified(&self) -> u64 {
        self.with(|s| s.not_modified)
    }
}

type Shared = Arc<Mutex<State>>;

async fn handle(
    AxumState(shared): AxumState<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(page) = oauth::respond(&shared, &method, &uri, &body) {
        return page;
    }
    if let Some(answer) = oidc::respond(&shared, &method, &uri) {
        return answer;
    }
    if let Some(log) = actions::download(&shared, &method, &uri, &headers) {
        return log;
    }
    let (response, budget) = respond(&shared, &method, &uri, &headers, &body);
    let response = conditional(&method, &headers, response).await;
    let Some(payer) = budget else {
        return response;
    };
    let mut response = response;
    if response.headers().contains_key("x-ratelimit-remaining") {
        return response;
    }
    // Like GitHub, every answer states the caller's budget, and a 304
    // does not spend from it.
    let (limit, used, reset) = {
        let mut state = shared.lock().unwrap();
        if state.unix_now() >= state.rate_reset {
            state.budget_used.clear();
            state.rate_reset = state.unix_now() + 3600;
        }
        if response.status() != StatusCode::NOT_MODIFIED {
            *state.budget_used.entry(payer).or_default() += 1;
        } else {
            state.not_modified += 1;
        }
        let used = state.budget_used.get(&payer).copied().unwrap_or_default();
        (state.rate_limit, used, state.rate_reset)
    };
    let headers = response.headers_mut();
    headers.insert("x-ratelimit-limit", limit.into());
    headers.insert("x-ratelimit-remaining", limit.saturating_sub(used).into());
    headers.insert("x-ratelimit-used", used.into());
    headers.insert("x-ratelimit-reset", reset.into());
    response
}

fn unix_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The answer, and whose GitHub budget it is counted against (an
/// installation, or 0 for the App itself); None on Forgejo.
fn respond(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> (Response, Option<u64>) {
    let mut state = shared.lock().unwrap();
    let path = uri.path().to_owned();
    let json_body: Option<Value> = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => Some(v),
            Err(e) => {
                record(
                    &mut state,
                    method,
                    uri,
                    headers,
                    Some(json!({ "unparsable": e.to_string() })),
                );
                let refusal = answer(
                    400,
                    json!({ "message": format!("Problems parsing JSON: {e}") }),
                );
                return (refusal, None);
            }
        }
    };
    record(&mut state, method, uri, headers, json_body.clone());
    if let Some(failure) = take_failure(&mut state, method.as_str(), &path) {
        return (failure, None);
    }
    let query = parse_query(uri.query());
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let request = Request {
        method: method.as_str(),
        query: &query,
        headers,
        body: json_body.as_ref(),
    };
    let response = match segments.as_slice() {
        ["api", "v1", rest @ ..] => (
            forgejo(&mut state, &request, rest).unwrap_or_else(|r| r),
            None,
        ),
        rest => {
            let payer = app::installation_of_token(&state, &request).unwrap_or(0);
            let response = github(&mut state, &request, rest).unwrap_or_else(|r| r);
            (response, Some(payer))
        }
    };
    let outbox = std::mem::take(&mut state.outbox);
    drop(state);
    for outgoing in outbox {
        tokio::spawn(app::send_webhook(shared.clone(), outgoing));
    }
    response
}

/// A request to one repository: the request, who makes it on which forge
/// (on GitHub the App's installation, which writes as `wavegate[bot]`; on
/// Forgejo the token's user) and the repository's name.
struct Call<'a> {
    req: &'a Request<'a>,
    forge: ForgeKind,
    login: &'a str,
    full_name: &'a str,
}

/// A repository's routes, the same on both forges: the first resource
/// that knows the path answers.
type Routes = fn(&mut State, &Call, &[&str]) -> Option<Answer>;
const REPOSITORY_ROUTES: [Routes; 7] = [
    pulls::route,
    issues::route,
    reviews::route,
    comments::route,
    checks::route,
    actions::route,
    people::route,
];

fn repository(state: &mut State, call: &Call, path: &[&str]) -> Answer {
    if let ("GET", []) = (call.req.method, path) {
        let repo = state.repo_at(call.forge, call.full_name);
        return Ok(answer(
            200,
            json!({
                "id": repo.handle.id,
                "full_name": repo.handle.full_name,
                "clone_url": repo.handle.clone_url,
                "default_branch": repo.default_branch,
            }),
        ));
    }
    for route in REPOSITORY_ROUTES {
        if let Some(answer) = route(state, call, path) {
            return answer;
        }
    }
    Err(not_found())
}

/// GitHub: the App's routes, team memberships, and a repository the
/// installation token's installation is on.
fn github(state: &mut State, req: &Request, path: &[&str]) -> Answer {
    if let Some(answer) = app::route(state, req, path) {
        return answer;
    }
    match (req.method, path) {
        ("GET", ["user"]) => match req.authorization() {
            Some(("Bearer" | "bearer" | "token", token)) => {
                let login = state
                    .oauth
                    .owner(ForgeKind::GitHub, token)
                    .map(str::to_owned)
                    .ok_or_else(|| unauthorized("Bad credentials"))?;
                Ok(answer(
                    200,
                    people::user_json(state, ForgeKind::GitHub, &login),
                ))
            }
            _ => Err(unauthorized("Requires authentication")),
        },
        ("GET", ["orgs", org, "teams", team, "memberships", user]) => {
            app::installation_of_token(state, req)?;
            people::team_membership(state, org, team, user)
        }
        (_, ["repos", owner, name, rest @ ..]) => {
            let full_name = format!("{owner}/{name}");
            let installation = app::installation_of_token(state, req)?;
            state
                .repo_mut(ForgeKind::GitHub, &full_name)
                .filter(|r| r.handle.installation == Some(installation))
                .ok_or_else(not_found)?;
            let call = Call {
                req,
                forge: ForgeKind::GitHub,
                login: GITHUB_BOT_LOGIN,
                full_name: &full_name,
            };
            repository(state, &call, rest)
        }
        _ => Err(not_found()),
    }
}

/// Forgejo, under `/api/v1`: the token's user, and any repository.
fn forgejo(state: &mut State, req: &Request, path: &[&str]) -> Answer {
    let login = people::forgejo_login(state, req)?;
    let user = people::user_json(state, ForgeKind::Forgejo, &login);
    match (req.method, path) {
        ("GET", ["user"]) => Ok(answer(200, user)),
        (_, ["repos", owner, name, rest @ ..]) => {
            let full_name = format!("{owner}/{name}");
            state
                .repo_mut(ForgeKind::Forgejo, &full_name)
                .ok_or_else(not_found)?;
            let call = Call {
                req,
                forge: ForgeKind::Forgejo,
                login: &login,
                full_name: &full_name,
            };
            repository(state, &call, rest)
        }
        _ => Err(not_found()),
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a time (UTC; days-to-civil after H. Hinnant).
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_709_251_199)),
            "2024-02-29T23:59:59Z"
        );
    }
}
