//! A stateful fake of the GitHub and Forgejo REST subsets wavegate calls,
//! served over real HTTP on 127.0.0.1: GitHub at `/`, Forgejo at `/api/v1`.
//! It checks auth the way the forges do (App JWTs, expiring installation
//! tokens, Forgejo tokens), keeps what the bot wrote, logs every request for
//! assertions and the conformance check, and fails on demand. Like GitHub,
//! it can deliver webhooks to the bot's App webhook, logs each attempt, and
//! lists and redelivers them through `/app/hook/deliveries`.

// Handlers return a refusal as the `Err` response so `?` answers early; its size is no concern here.
#![allow(clippy::result_large_err)]

mod checks;
mod comments;
mod pulls;
mod reviews;
mod state;

use checks::{apply_check_fields, check_run_json};
use pulls::{open_prs, pull_json};
use reviews::{review_json, reviews_of};
pub use state::*;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use octocrab::jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
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
        }));
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(32 * 1024 * 1024))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake forge");
        let url = format!("http://{}", listener.local_addr().unwrap());
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

    #[allow(clippy::too_many_arguments)]
    pub fn open_pr(
        &self,
        repo: &RepoHandle,
        number: u64,
        head_sha: &str,
        base_sha: &str,
        head_ref: &str,
        base_ref: &str,
        author: &str,
    ) -> FakePr {
        self.with(|s| {
            let author_id = s.user_id(author);
            let id = s.id();
            let pr = FakePr {
                number,
                id,
                title: format!("Change #{number}"),
                head_sha: head_sha.to_owned(),
                previous_head_sha: None,
                base_sha: base_sha.to_owned(),
                head_ref: head_ref.to_owned(),
                base_ref: base_ref.to_owned(),
                author: author.to_owned(),
                author_id,
                open: true,
                merged: false,
                merge_sha: None,
                updated_at: s.now(),
            };
            s.repo_of(repo).prs.push(pr.clone());
            pr
        })
    }

    /// New commits on the PR's head branch.
    pub fn push(&self, repo: &RepoHandle, pr: u64, new_head: &str) -> FakePr {
        self.update_pr(repo, pr, |p, now| {
            p.previous_head_sha = Some(std::mem::replace(&mut p.head_sha, new_head.to_owned()));
            p.updated_at = now;
        })
    }

    pub fn merge(&self, repo: &RepoHandle, pr: u64, merge_sha: &str) -> FakePr {
        self.update_pr(repo, pr, |p, now| {
            p.open = false;
            p.merged = true;
            p.merge_sha = Some(merge_sha.to_owned());
            p.updated_at = now;
        })
    }

    pub fn close(&self, repo: &RepoHandle, pr: u64) -> FakePr {
        self.update_pr(repo, pr, |p, now| {
            p.open = false;
            p.updated_at = now;
        })
    }

    /// Changes PR `pr` (given the forge's clock now).
    fn update_pr(
        &self,
        repo: &RepoHandle,
        pr: u64,
        change: impl FnOnce(&mut FakePr, SystemTime),
    ) -> FakePr {
        self.with(|s| {
            let now = s.now();
            let found = s
                .repo_of(repo)
                .prs
                .iter_mut()
                .find(|p| p.number == pr)
                .unwrap_or_else(|| panic!("no PR #{pr} in {}", repo.full_name));
            change(found, now);
            found.clone()
        })
    }

    pub fn pr(&self, repo: &RepoHandle, pr: u64) -> FakePr {
        self.update_pr(repo, pr, |_, _| {})
    }

    /// `permission`: `admin`, `write`, `read` (Forgejo also `owner`).
    pub fn set_permission(&self, repo: &RepoHandle, login: &str, permission: &str) {
        self.with(|s| {
            s.user_id(login);
            s.repo_of(repo)
                .permissions
                .insert(login.to_owned(), permission.to_owned());
        })
    }

    /// `login` joins the team `slug` of the organisation `org`.
    pub fn add_team_member(&self, org: &str, slug: &str, login: &str) {
        self.with(|s| {
            s.user_id(login);
            s.teams
                .entry((org.to_owned(), slug.to_owned()))
                .or_default()
                .push(login.to_owned());
        })
    }

    /// `login` leaves the team `slug` of the organisation `org`.
    pub fn remove_team_member(&self, org: &str, slug: &str, login: &str) {
        self.with(|s| {
            if let Some(members) = s.teams.get_mut(&(org.to_owned(), slug.to_owned())) {
                members.retain(|m| m != login);
            }
        })
    }

    pub fn set_forgejo_bot_admin(&self, admin: bool) {
        self.with(|s| s.forgejo_bot_admin = admin)
    }

    /// A comment written by someone (not through the API); returns its id.
    pub fn add_comment(&self, repo: &RepoHandle, pr: u64, author: &str, body: &str) -> u64 {
        self.with(|s| {
            s.user_id(author);
            let id = s.id();
            let now = s.now();
            s.repo_of(repo).comments.push(FakeComment {
                id,
                pr,
                body: body.to_owned(),
                author: author.to_owned(),
                author_is_bot: author.ends_with("[bot]"),
                created_at: now,
                updated_at: now,
            });
            id
        })
    }

    /// A comment by `author` that said `first` and was edited (a second
    /// later) to say `body`; returns its id.
    pub fn add_edited_comment(
        &self,
        repo: &RepoHandle,
        pr: u64,
        author: &str,
        first: &str,
        body: &str,
    ) -> u64 {
        let id = self.add_comment(repo, pr, author, first);
        self.edit_comment(repo, id, body);
        id
    }

    /// Its author edits comment `id` to say `body` (a second or more after
    /// it was written, as the forges date to the second).
    pub fn edit_comment(&self, repo: &RepoHandle, id: u64, body: &str) {
        self.with(|s| {
            let now = s.now();
            let comment = s
                .repo_of(repo)
                .comments
                .iter_mut()
                .find(|c| c.id == id)
                .expect("a comment to edit");
            comment.body = body.to_owned();
            comment.updated_at = now.max(comment.created_at + Duration::from_secs(1));
        })
    }

    /// `author` submits a review in `state` (GitHub's word: `APPROVED`,
    /// `CHANGES_REQUESTED`, `COMMENTED`) on the PR's current head, not
    /// through the API and with no webhook; as on both forges, the pull
    /// request's `updated_at` moves. Returns the review's id.
    pub fn add_review(&self, repo: &RepoHandle, pr: u64, author: &str, state: &str) -> u64 {
        assert!(
            ["APPROVED", "CHANGES_REQUESTED", "COMMENTED"].contains(&state),
            "a review is submitted as APPROVED, CHANGES_REQUESTED or COMMENTED, not {state}"
        );
        let commit = self.pr(repo, pr).head_sha;
        self.update_pr(repo, pr, |p, now| p.updated_at = now);
        self.with(|s| {
            s.user_id(author);
            let id = s.id();
            let now = s.now();
            s.repo_of(repo).reviews.push(FakeReview {
                id,
                pr,
                author: author.to_owned(),
                state: state.to_owned(),
                commit,
                submitted_at: now,
                dismissed: false,
            });
            id
        })
    }

    /// A maintainer dismisses review `id` (no webhook); the pull request's
    /// `updated_at` moves.
    pub fn dismiss_review(&self, repo: &RepoHandle, id: u64) {
        let pr = self.with(|s| {
            let review = s
                .repo_of(repo)
                .reviews
                .iter_mut()
                .find(|r| r.id == id)
                .expect("a review to dismiss");
            review.dismissed = true;
            review.pr
        });
        self.update_pr(repo, pr, |p, now| p.updated_at = now);
    }

    pub fn delete_comment(&self, repo: &RepoHandle, id: u64) {
        self.with(|s| s.repo_of(repo).comments.retain(|c| c.id != id))
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

    /// How long installation tokens issued from now on live.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        self.with(|s| s.token_lifetime = lifetime)
    }

    /// Every installation token issued so far stops working (GitHub answers 401).
    pub fn revoke_tokens(&self) {
        self.with(|s| s.tokens.iter_mut().for_each(|t| t.revoked = true))
    }

    /// A one-time manifest-flow code `POST /app-manifests/{code}/conversions` accepts.
    pub fn manifest_code(&self) -> String {
        self.with(|s| {
            let code = format!("manifest-code-{}", s.id());
            s.manifest_codes.insert(code.clone());
            code
        })
    }

    /// Where the App's webhook deliveries go (`url`, signed with `secret`).
    pub fn set_app_webhook(&self, url: &str, secret: &str) {
        self.with(|s| {
            s.app_webhook = Some(AppWebhook {
                url: url.to_owned(),
                secret: secret.to_owned(),
            })
        })
    }

    /// Delivers `payload` as an `event` webhook to the App's webhook, as
    /// GitHub does, and logs the attempt; the bot's status and JSON answer,
    /// and the delivery's guid (`X-GitHub-Delivery`).
    pub async fn deliver_webhook(&self, event: &str, payload: Vec<u8>) -> (u16, Value, String) {
        let guid = self.with(|s| {
            let n = s.id();
            format!("{n:08x}-0000-4000-8000-{n:012x}")
        });
        let outgoing = Outgoing {
            guid: guid.clone(),
            event: event.to_owned(),
            payload,
            redelivery: false,
        };
        let (status, body) = send_webhook(self.state.clone(), outgoing).await;
        (status, body, guid)
    }

    /// Logs an attempt of `guid` answered `status_code` without sending it
    /// (an answer the bot gave that GitHub did not wait for, say).
    pub fn log_webhook_attempt(&self, guid: &str, event: &str, payload: Vec<u8>, status_code: u16) {
        self.with(|s| {
            let outgoing = Outgoing {
                guid: guid.to_owned(),
                event: event.to_owned(),
                payload,
                redelivery: false,
            };
            log_attempt(s, outgoing, 10.0, status_code);
        })
    }

    /// Every delivery attempt logged, oldest first.
    pub fn hook_deliveries(&self) -> Vec<FakeHookDelivery> {
        self.with(|s| s.hook_deliveries.clone())
    }

    /// The redeliveries the App asked for (`POST /app/hook/deliveries/{id}/attempts`).
    pub fn redelivery_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r.method == "POST"
                    && r.path.starts_with("/app/hook/deliveries/")
                    && r.path.ends_with("/attempts")
            })
            .collect()
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

    pub fn token_requests(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/access_tokens"))
            .count()
    }

    pub fn comments(&self, repo: &RepoHandle, pr: u64) -> Vec<FakeComment> {
        self.with(|s| {
            s.repo_of(repo)
                .comments
                .iter()
                .filter(|c| c.pr == pr)
                .cloned()
                .collect()
        })
    }

    pub fn check_runs(&self, repo: &RepoHandle, sha: &str) -> Vec<FakeCheckRun> {
        self.with(|s| {
            s.repo_of(repo)
                .check_runs
                .iter()
                .filter(|c| c.head_sha == sha)
                .cloned()
                .collect()
        })
    }

    pub fn statuses(&self, repo: &RepoHandle, sha: &str) -> Vec<FakeStatus> {
        self.with(|s| {
            s.repo_of(repo)
                .statuses
                .iter()
                .filter(|c| c.sha == sha)
                .cloned()
                .collect()
        })
    }

    pub fn reactions(&self, repo: &RepoHandle, comment_id: u64) -> Vec<FakeReaction> {
        self.with(|s| {
            s.repo_of(repo)
                .reactions
                .iter()
                .filter(|r| r.comment_id == comment_id)
                .cloned()
                .collect()
        })
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

/// A GET answered 200 carries an `ETag` of its body; asked again with it in
/// `If-None-Match`, it is answered 304 with no body, as both forges do.
async fn conditional(method: &Method, headers: &HeaderMap, response: Response) -> Response {
    if method != Method::GET || response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("the fake's own answer is in memory");
    let etag = format!("\"{}\"", sha256_hex(&bytes));
    let asked = headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag));
    parts.headers.insert("etag", etag.parse().unwrap());
    if asked {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove("content-type");
        return Response::from_parts(parts, axum::body::Body::empty());
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

fn unix_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
            let payer = installation_of_token(&state, &request).unwrap_or(0);
            let response = github(&mut state, &request, rest).unwrap_or_else(|r| r);
            (response, Some(payer))
        }
    };
    let outbox = std::mem::take(&mut state.outbox);
    drop(state);
    for outgoing in outbox {
        tokio::spawn(send_webhook(shared.clone(), outgoing));
    }
    response
}

/// Sends one webhook to the App's webhook (none set: nothing answers) and
/// logs the attempt as GitHub would.
async fn send_webhook(shared: Shared, outgoing: Outgoing) -> (u16, Value) {
    let target = shared.lock().unwrap().app_webhook.clone();
    let started = std::time::Instant::now();
    let answered = match &target {
        Some(target) => {
            let signature = super::payloads::sign_github(&target.secret, &outgoing.payload);
            let sent = reqwest::Client::new()
                .post(&target.url)
                .timeout(Duration::from_secs(10))
                .header("content-type", "application/json")
                .header("user-agent", "GitHub-Hookshot/fake")
                .header("x-github-event", &outgoing.event)
                .header("x-github-delivery", &outgoing.guid)
                .header("x-hub-signature-256", signature)
                .body(outgoing.payload.clone())
                .send()
                .await;
            match sent {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response.json::<Value>().await.unwrap_or(Value::Null);
                    Some((status, body))
                }
                Err(_) => None,
            }
        }
        None => None,
    };
    let duration = started.elapsed().as_secs_f64();
    let (status, body) = answered.unwrap_or((0, Value::Null));
    log_attempt(&mut shared.lock().unwrap(), outgoing, duration, status);
    (status, body)
}

fn log_attempt(state: &mut State, outgoing: Outgoing, duration: f64, status_code: u16) {
    let payload: Value = serde_json::from_slice(&outgoing.payload).unwrap_or(Value::Null);
    let status = match status_code {
        0 => "failed to connect".to_owned(),
        200..=299 => "OK".to_owned(),
        code => format!("Invalid HTTP Response: {code}"),
    };
    let id = state.id();
    state.hook_deliveries.push(FakeHookDelivery {
        id,
        guid: outgoing.guid,
        delivered_at: state.now(),
        redelivery: outgoing.redelivery,
        duration,
        status,
        status_code,
        event: outgoing.event,
        action: payload["action"].as_str().map(str::to_owned),
        installation_id: payload["installation"]["id"].as_u64(),
        repository_id: payload["repository"]["id"].as_u64(),
        payload: outgoing.payload,
    });
}

struct Request<'a> {
    method: &'a str,
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
    body: Option<&'a Value>,
}

impl Request<'_> {
    fn body_str(&self, field: &str) -> Option<&str> {
        self.body?.get(field)?.as_str()
    }

    fn authorization(&self) -> Option<(&str, &str)> {
        let value = self.headers.get("authorization")?.to_str().ok()?;
        let (scheme, credential) = value.split_once(' ')?;
        Some((scheme, credential.trim()))
    }
}

type Answer = Result<Response, Response>;

fn record(state: &mut State, method: &Method, uri: &Uri, headers: &HeaderMap, body: Option<Value>) {
    let interesting = ["authorization", "accept", "content-type", "user-agent"];
    state.requests.push(RecordedRequest {
        method: method.as_str().to_owned(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: interesting
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?.to_str().ok()?;
                Some(((*name).to_owned(), value.to_owned()))
            })
            .collect(),
        body,
    });
}

fn take_failure(state: &mut State, method: &str, path: &str) -> Option<Response> {
    let index = state
        .fail_rules
        .iter()
        .position(|r| r.method == method && path.starts_with(&r.path_prefix))?;
    let rule = state.fail_rules.remove(index);
    let mut response = answer(rule.status, json!({ "message": "injected failure" }));
    for (name, value) in rule.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    Some(response)
}

fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn answer(status: u16, body: Value) -> Response {
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

fn not_found() -> Response {
    answer(404, json!({ "message": "Not Found" }))
}

fn unauthorized(why: &str) -> Response {
    answer(401, json!({ "message": why }))
}

fn unprocessable(why: String) -> Response {
    answer(
        422,
        json!({ "message": "Validation Failed", "errors": [why] }),
    )
}

fn number(segment: &str) -> Result<u64, Response> {
    segment.parse().map_err(|_| not_found())
}

// ---------------------------------------------------------------- GitHub

/// `page` (from 1) and the page size named `size` (GitHub `per_page`,
/// Forgejo `limit`; at most 100).
fn page_of(req: &Request, size: &str, default: usize) -> Result<(usize, usize), Response> {
    let read = |name: &str, default: usize| match req.query.get(name) {
        None => Ok(default),
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| unprocessable(format!("{name} `{text}` is not a number"))),
    };
    Ok((read("page", 1)?.max(1), read(size, default)?.clamp(1, 100)))
}

fn paged<T: Clone>(items: &[T], page: usize, size: usize) -> Vec<T> {
    items
        .iter()
        .skip((page - 1) * size)
        .take(size)
        .cloned()
        .collect()
}

/// A `Link: <…page=N+1…>; rel="next"` header when more items follow, as both forges send.
fn with_next_link(
    mut response: Response,
    req: &Request,
    page: usize,
    size: usize,
    total: usize,
) -> Response {
    if page * size < total {
        let mut query: Vec<String> = req
            .query
            .iter()
            .filter(|(k, _)| k.as_str() != "page")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        query.sort();
        query.push(format!("page={}", page + 1));
        let link = format!("<http://fake.invalid/?{}>; rel=\"next\"", query.join("&"));
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

fn github(state: &mut State, req: &Request, path: &[&str]) -> Answer {
    match (req.method, path) {
        ("POST", ["app", "installations", id, "access_tokens"]) => {
            verify_app_jwt(req)?;
            let installation = number(id)?;
            if !state.installations.contains_key(&installation) {
                return Err(not_found());
            }
            let token = format!("ghs_fake{}", state.id());
            let expires_at = state.now() + state.token_lifetime;
            state.tokens.push(IssuedToken {
                token: token.clone(),
                installation,
                expires_at,
                revoked: false,
            });
            Ok(answer(
                201,
                json!({
                    "token": token,
                    "expires_at": rfc3339(expires_at),
                    "permissions": { "checks": "write", "issues": "write", "pull_requests": "write", "contents": "read" },
                    "repository_selection": "all",
                }),
            ))
        }
        ("GET", ["orgs", org, "teams", team, "memberships", user]) => {
            installation_of_token(state, req)?;
            let members = state
                .teams
                .get(&((*org).to_owned(), (*team).to_owned()))
                .ok_or_else(not_found)?;
            if !members.iter().any(|m| m == user) {
                return Err(not_found());
            }
            Ok(answer(
                200,
                json!({ "state": "active", "role": "member", "url": format!("https://api.github.com/orgs/{org}/teams/{team}/memberships/{user}") }),
            ))
        }
        ("GET", ["app"]) => {
            verify_app_jwt(req)?;
            Ok(answer(
                200,
                json!({
                    "id": APP_ID,
                    "slug": APP_SLUG,
                    "name": APP_SLUG,
                    "owner": github_user("acme", 1, false),
                    "html_url": format!("https://github.com/apps/{APP_SLUG}"),
                    "permissions": {},
                    "events": [],
                }),
            ))
        }
        ("GET", ["app", "hook", "deliveries"]) => {
            verify_app_jwt(req)?;
            list_hook_deliveries(state, req)
        }
        ("POST", ["app", "hook", "deliveries", id, "attempts"]) => {
            verify_app_jwt(req)?;
            let id = number(id)?;
            let attempt = state
                .hook_deliveries
                .iter()
                .find(|d| d.id == id)
                .cloned()
                .ok_or_else(not_found)?;
            state.outbox.push(Outgoing {
                guid: attempt.guid,
                event: attempt.event,
                payload: attempt.payload,
                redelivery: true,
            });
            Ok(answer(202, json!({})))
        }
        ("GET", ["repos", owner, name, "installation"]) => {
            verify_app_jwt(req)?;
            let full_name = format!("{owner}/{name}");
            let repo = state
                .repo_mut(ForgeKind::GitHub, &full_name)
                .ok_or_else(not_found)?;
            let id = repo.handle.installation.ok_or_else(not_found)?;
            let account = state.installations.get(&id).cloned().unwrap_or_default();
            let account_id = state.user_id(&account);
            Ok(answer(
                200,
                json!({
                    "id": id,
                    "app_id": APP_ID,
                    "app_slug": APP_SLUG,
                    "target_type": "Organization",
                    "account": github_user(&account, account_id, false),
                    "permissions": {},
                    "events": ["pull_request", "issue_comment"],
                }),
            ))
        }
        ("POST", ["app-manifests", code, "conversions"]) => {
            if !state.manifest_codes.remove(*code) {
                return Err(not_found());
            }
            Ok(answer(
                201,
                json!({
                    "id": APP_ID,
                    "slug": APP_SLUG,
                    "node_id": "A_fake",
                    "name": "wavegate",
                    "owner": github_user("octo-org", 1, false),
                    "html_url": format!("https://github.com/apps/{APP_SLUG}"),
                    "pem": APP_PRIVATE_KEY,
                    "webhook_secret": MANIFEST_WEBHOOK_SECRET,
                    "client_id": "Iv1.fakeclientid",
                    "client_secret": "fake-client-secret",
                    "permissions": {},
                    "events": [],
                    "created_at": rfc3339(state.now()),
                    "updated_at": rfc3339(state.now()),
                }),
            ))
        }
        (_, ["repos", owner, name, rest @ ..]) => {
            let full_name = format!("{owner}/{name}");
            let installation = installation_of_token(state, req)?;
            state
                .repo_mut(ForgeKind::GitHub, &full_name)
                .filter(|r| r.handle.installation == Some(installation))
                .ok_or_else(not_found)?;
            github_repo(state, req, &full_name, rest)
        }
        _ => Err(not_found()),
    }
}

/// `GET /app/hook/deliveries`: newest first, `per_page` (default 30, at
/// most 100) from `cursor` on, `status` (`success`: 200-399, `failure`:
/// 400-599) filtering, and the next page's cursor in the `Link` header.
fn list_hook_deliveries(state: &State, req: &Request) -> Answer {
    let per_page: usize = match req.query.get("per_page") {
        Some(n) => n
            .parse()
            .map_err(|_| unprocessable(format!("per_page `{n}` is not a number")))?,
        None => 30,
    };
    let per_page = per_page.clamp(1, 100);
    let from = match req.query.get("cursor") {
        Some(cursor) => Some(
            cursor
                .strip_prefix("v1_")
                .and_then(|id| id.parse::<u64>().ok())
                .ok_or_else(|| answer(400, json!({ "message": "Invalid cursor" })))?,
        ),
        None => None,
    };
    let wanted = |code: u16| match req.query.get("status").map(String::as_str) {
        Some("success") => (200..400).contains(&code),
        Some("failure") => (400..600).contains(&code),
        _ => true,
    };
    let mut matching: Vec<&FakeHookDelivery> = state
        .hook_deliveries
        .iter()
        .filter(|d| from.is_none_or(|from| d.id <= from) && wanted(d.status_code))
        .collect();
    matching.sort_by_key(|d| std::cmp::Reverse(d.id));
    let page: Vec<Value> = matching
        .iter()
        .take(per_page)
        .map(|d| {
            json!({
                "id": d.id,
                "guid": d.guid,
                "delivered_at": rfc3339(d.delivered_at),
                "redelivery": d.redelivery,
                "duration": d.duration,
                "status": d.status,
                "status_code": d.status_code,
                "event": d.event,
                "action": d.action,
                "installation_id": d.installation_id,
                "repository_id": d.repository_id,
                "throttled_at": null,
            })
        })
        .collect();
    let mut response = answer(200, Value::Array(page));
    if let Some(next) = matching.get(per_page) {
        let host = req
            .headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1");
        let link = format!(
            "<http://{host}/app/hook/deliveries?per_page={per_page}&cursor=v1_{}>; rel=\"next\"",
            next.id
        );
        response
            .headers_mut()
            .insert("link", link.parse().expect("a header value"));
    }
    Ok(response)
}

#[derive(Deserialize)]
struct AppClaims {
    iss: Value,
    iat: u64,
    exp: u64,
}

fn verify_app_jwt(req: &Request) -> Result<(), Response> {
    let Some(("Bearer", jwt)) = req.authorization() else {
        return Err(unauthorized("A JSON web token could not be decoded"));
    };
    let key = DecodingKey::from_rsa_pem(APP_PUBLIC_KEY.as_bytes()).expect("test public key");
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_required_spec_claims(&["exp"]);
    validation.leeway = 0;
    let claims = decode::<AppClaims>(jwt, &key, &validation)
        .map_err(|e| unauthorized(&format!("A JSON web token could not be decoded: {e}")))?
        .claims;
    let issuer_ok = claims.iss == json!(APP_ID) || claims.iss == json!(APP_ID.to_string());
    if !issuer_ok {
        return Err(unauthorized("'Issuer' claim ('iss') must be the App's id"));
    }
    if claims.exp.saturating_sub(claims.iat) > 600 {
        return Err(unauthorized(
            "'Expiration time' claim ('exp') is too far in the future",
        ));
    }
    Ok(())
}

fn installation_of_token(state: &State, req: &Request) -> Result<u64, Response> {
    let Some((scheme, token)) = req.authorization() else {
        return Err(unauthorized("Requires authentication"));
    };
    if scheme != "token" && scheme != "Bearer" {
        return Err(unauthorized("Bad credentials"));
    }
    let issued = state
        .tokens
        .iter()
        .find(|t| t.token == token)
        .ok_or_else(|| unauthorized("Bad credentials"))?;
    if issued.revoked || issued.expires_at <= state.now() {
        return Err(unauthorized("Bad credentials"));
    }
    Ok(issued.installation)
}

fn github_user(login: &str, id: u64, bot: bool) -> Value {
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_{id}"),
        "type": if bot { "Bot" } else { "User" },
        "site_admin": false,
        "html_url": format!("https://github.com/{login}"),
    })
}

fn github_comment(state: &mut State, full_name: &str, c: &FakeComment) -> Value {
    let user_id = state.user_id(&c.author);
    json!({
        "id": c.id,
        "node_id": format!("IC_{}", c.id),
        "url": format!("https://api.github.com/repos/{full_name}/issues/comments/{}", c.id),
        "html_url": format!("https://github.com/{full_name}/pull/{}#issuecomment-{}", c.pr, c.id),
        "issue_url": format!("https://api.github.com/repos/{full_name}/issues/{}", c.pr),
        "body": c.body,
        "user": github_user(&c.author, user_id, c.author_is_bot),
        "author_association": if c.author_is_bot { "NONE" } else { "MEMBER" },
        "created_at": rfc3339(c.created_at),
        "updated_at": rfc3339(c.updated_at),
    })
}

/// The `since` query parameter (ISO 8601 `YYYY-MM-DDTHH:MM:SSZ`), read as
/// both forges document it: comments updated at or after that time.
fn since_filter(req: &Request) -> Result<Option<String>, Response> {
    let Some(since) = req.query.get("since") else {
        return Ok(None);
    };
    let since = since.replace("%3A", ":").replace("%3a", ":");
    let b = since.as_bytes();
    let shaped = b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    if !shaped {
        return Err(unprocessable(format!(
            "since `{since}` is not an ISO 8601 time"
        )));
    }
    Ok(Some(since))
}

fn github_repo(state: &mut State, req: &Request, full_name: &str, path: &[&str]) -> Answer {
    match (req.method, path) {
        ("GET", ["pulls"]) => {
            let (page, per_page) = page_of(req, "per_page", 30)?;
            let repo = state.repo_mut(ForgeKind::GitHub, full_name).unwrap();
            let handle = repo.handle.clone();
            let open = open_prs(repo, req.query.get("state").map(String::as_str))?;
            let items = paged(&open, page, per_page)
                .iter()
                .map(|pr| pull_json(&handle, pr, true))
                .collect();
            Ok(with_next_link(
                answer(200, Value::Array(items)),
                req,
                page,
                per_page,
                open.len(),
            ))
        }
        ("GET", ["issues", "comments"]) => {
            let (page, per_page) = page_of(req, "per_page", 30)?;
            let since = since_filter(req)?;
            let listed = comments::list_in_repo(
                state,
                ForgeKind::GitHub,
                full_name,
                since.as_ref(),
                req.query.get("sort").map(String::as_str) == Some("updated"),
                req.query.get("direction").map(String::as_str) == Some("desc"),
            );
            let items = paged(&listed, page, per_page)
                .iter()
                .map(|c| github_comment(state, full_name, c))
                .collect();
            Ok(with_next_link(
                answer(200, Value::Array(items)),
                req,
                page,
                per_page,
                listed.len(),
            ))
        }
        ("GET", ["issues", pr, "comments"]) => {
            let pr = number(pr)?;
            let page: usize = req
                .query
                .get("page")
                .and_then(|p| p.parse().ok())
                .unwrap_or(1)
                .max(1);
            let per_page: usize = req
                .query
                .get("per_page")
                .and_then(|p| p.parse().ok())
                .unwrap_or(30)
                .clamp(1, 100);
            let since = since_filter(req)?;
            let listed = comments::list_on_pr(
                state,
                ForgeKind::GitHub,
                full_name,
                pr,
                since.as_ref(),
                true,
            )?;
            let items: Vec<Value> = listed
                .iter()
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(|c| github_comment(state, full_name, c))
                .collect();
            Ok(answer(200, Value::Array(items)))
        }
        ("POST", ["issues", pr, "comments"]) => {
            let pr = number(pr)?;
            let body = req
                .body_str("body")
                .ok_or_else(|| unprocessable("body is required".into()))?
                .to_owned();
            if body.chars().count() > 65_536 {
                return Err(unprocessable(
                    "body is too long (maximum is 65536 characters)".into(),
                ));
            }
            let author = (GITHUB_BOT_LOGIN, true);
            let comment = comments::create(state, ForgeKind::GitHub, full_name, pr, author, body)?;
            Ok(answer(201, github_comment(state, full_name, &comment)))
        }
        ("PATCH", ["issues", "comments", id]) => {
            let id = number(id)?;
            let body = req
                .body_str("body")
                .ok_or_else(|| unprocessable("body is required".into()))?
                .to_owned();
            let edited = comments::edit(
                state,
                ForgeKind::GitHub,
                full_name,
                id,
                GITHUB_BOT_LOGIN,
                body,
            );
            match edited {
                Ok(comment) => Ok(answer(200, github_comment(state, full_name, &comment))),
                Err(comments::EditRefused::NotFound) => Err(not_found()),
                Err(comments::EditRefused::NotTheAuthor) => Err(answer(
                    403,
                    json!({ "message": "Resource not accessible by integration" }),
                )),
            }
        }
        ("POST", ["issues", "comments", id, "reactions"]) => {
            let id = number(id)?;
            let content = req
                .body_str("content")
                .ok_or_else(|| unprocessable("content is required".into()))?
                .to_owned();
            if ![
                "+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes",
            ]
            .contains(&content.as_str())
            {
                return Err(unprocessable(format!(
                    "content `{content}` is not a reaction"
                )));
            }
            let reaction_id = state.id();
            let bot_id = state.user_id(GITHUB_BOT_LOGIN);
            let new = comments::react(
                state,
                ForgeKind::GitHub,
                full_name,
                id,
                GITHUB_BOT_LOGIN,
                &content,
            )?;
            Ok(answer(
                if new { 201 } else { 200 },
                json!({ "id": reaction_id, "node_id": format!("R_{reaction_id}"), "content": content, "user": github_user(GITHUB_BOT_LOGIN, bot_id, true), "created_at": rfc3339(state.now()) }),
            ))
        }
        ("POST", ["check-runs"]) => {
            let body = req
                .body
                .ok_or_else(|| unprocessable("a body is required".into()))?;
            let (Some(name), Some(head_sha)) = (req.body_str("name"), req.body_str("head_sha"))
            else {
                return Err(unprocessable("name and head_sha are required".into()));
            };
            let mut run = FakeCheckRun {
                id: state.id(),
                head_sha: head_sha.to_owned(),
                name: name.to_owned(),
                status: "queued".into(),
                conclusion: None,
                output: json!({ "title": null, "summary": null, "text": null }),
                details_url: None,
            };
            apply_check_fields(&mut run, body)?;
            let repo = state.repo_mut(ForgeKind::GitHub, full_name).unwrap();
            repo.check_runs.push(run.clone());
            Ok(answer(201, check_run_json(full_name, &run)))
        }
        ("PATCH", ["check-runs", id]) => {
            let id = number(id)?;
            let body = req
                .body
                .ok_or_else(|| unprocessable("a body is required".into()))?;
            let repo = state.repo_mut(ForgeKind::GitHub, full_name).unwrap();
            let run = repo
                .check_runs
                .iter_mut()
                .find(|r| r.id == id)
                .ok_or_else(not_found)?;
            let mut updated = run.clone();
            apply_check_fields(&mut updated, body)?;
            *run = updated.clone();
            Ok(answer(200, check_run_json(full_name, &updated)))
        }
        ("GET", ["pulls", pr]) => {
            let pr = number(pr)?;
            let repo = state.repo_mut(ForgeKind::GitHub, full_name).unwrap();
            let handle = repo.handle.clone();
            let pr = repo
                .prs
                .iter()
                .find(|p| p.number == pr)
                .cloned()
                .ok_or_else(not_found)?;
            Ok(answer(200, pull_json(&handle, &pr, true)))
        }
        ("GET", ["pulls", pr, "reviews"]) => {
            let pr = number(pr)?;
            let (page, per_page) = page_of(req, "per_page", 30)?;
            let listed = reviews_of(state, ForgeKind::GitHub, full_name, pr)?;
            let items = paged(&listed, page, per_page)
                .iter()
                .map(|r| review_json(state, full_name, r, true))
                .collect();
            Ok(with_next_link(
                answer(200, Value::Array(items)),
                req,
                page,
                per_page,
                listed.len(),
            ))
        }
        ("GET", ["collaborators", user, "permission"]) => {
            let user_id = state.user_id(user);
            let repo = state.repo_mut(ForgeKind::GitHub, full_name).unwrap();
            let role = repo
                .permissions
                .get(*user)
                .cloned()
                .unwrap_or_else(|| "none".into());
            let permission = match role.as_str() {
                "maintain" => "write",
                "triage" => "read",
                other => other,
            }
            .to_owned();
            Ok(answer(
                200,
                json!({ "permission": permission, "role_name": role, "user": github_user(user, user_id, user.ends_with("[bot]")) }),
            ))
        }
        _ => Err(not_found()),
    }
}

// ---------------------------------------------------------------- Forgejo

fn forgejo_user(login: &str, id: u64) -> Value {
    json!({ "id": id, "login": login, "login_name": "", "full_name": "", "email": format!("{login}@noreply.forge.example"), "username": login, "is_admin": false })
}

fn forgejo_comment(state: &mut State, full_name: &str, c: &FakeComment) -> Value {
    let user_id = state.user_id(&c.author);
    json!({
        "id": c.id,
        "body": c.body,
        "user": forgejo_user(&c.author, user_id),
        "html_url": format!("https://forge.example/{full_name}/pulls/{}#issuecomment-{}", c.pr, c.id),
        "pull_request_url": format!("https://forge.example/{full_name}/pulls/{}", c.pr),
        "issue_url": "",
        "original_author": "",
        "original_author_id": 0,
        "assets": [],
        "created_at": rfc3339(c.created_at),
        "updated_at": rfc3339(c.updated_at),
    })
}

fn forgejo(state: &mut State, req: &Request, path: &[&str]) -> Answer {
    let login = match req.authorization() {
        Some(("token", token)) => state
            .forgejo_tokens
            .get(token)
            .cloned()
            .ok_or_else(|| unauthorized("user does not exist"))?,
        _ => return Err(unauthorized("token is required")),
    };
    let user_id = state.user_id(&login);
    match (req.method, path) {
        ("GET", ["user"]) => Ok(answer(200, forgejo_user(&login, user_id))),
        (_, ["repos", owner, name, rest @ ..]) => {
            let full_name = format!("{owner}/{name}");
            state
                .repo_mut(ForgeKind::Forgejo, &full_name)
                .ok_or_else(not_found)?;
            forgejo_repo(state, req, &full_name, &login, rest)
        }
        _ => Err(not_found()),
    }
}

fn forgejo_repo(
    state: &mut State,
    req: &Request,
    full_name: &str,
    login: &str,
    path: &[&str],
) -> Answer {
    let user_id = state.user_id(login);
    match (req.method, path) {
        ("GET", ["pulls"]) => {
            let (page, limit) = page_of(req, "limit", 30)?;
            let repo = state.repo_mut(ForgeKind::Forgejo, full_name).unwrap();
            let handle = repo.handle.clone();
            let open = open_prs(repo, req.query.get("state").map(String::as_str))?;
            let items = paged(&open, page, limit.min(50))
                .iter()
                .map(|pr| pull_json(&handle, pr, false))
                .collect();
            Ok(with_next_link(
                answer(200, Value::Array(items)),
                req,
                page,
                limit.min(50),
                open.len(),
            ))
        }
        ("GET", ["issues", "comments"]) => {
            let (page, limit) = page_of(req, "limit", 30)?;
            let since = since_filter(req)?;
            let listed = comments::list_in_repo(
                state,
                ForgeKind::Forgejo,
                full_name,
                since.as_ref(),
                false,
                false,
            );
            let items = paged(&listed, page, limit.min(50))
                .iter()
                .map(|c| forgejo_comment(state, full_name, c))
                .collect();
            Ok(with_next_link(
                answer(200, Value::Array(items)),
                req,
                page,
                limit.min(50),
                listed.len(),
            ))
        }
        ("GET", ["issues", pr, "comments"]) => {
            let pr = number(pr)?;
            let since = since_filter(req)?;
            let listed = comments::list_on_pr(
                state,
                ForgeKind::Forgejo,
                full_name,
                pr,
                since.as_ref(),
                false,
            )?;
            let items: Vec<Value> = listed
                .iter()
                .map(|c| forgejo_comment(state, full_name, c))
                .collect();
            Ok(answer(200, Value::Array(items)))
        }
        ("POST", ["issues", pr, "comments"]) => {
            let pr = number(pr)?;
            let body = req
                .body_str("body")
                .ok_or_else(|| unprocessable("body is required".into()))?
                .to_owned();
            let author = (login, false);
            let comment = comments::create(state, ForgeKind::Forgejo, full_name, pr, author, body)?;
            Ok(answer(201, forgejo_comment(state, full_name, &comment)))
        }
        ("PATCH", ["issues", "comments", id]) => {
            let id = number(id)?;
            let body = req
                .body_str("body")
                .ok_or_else(|| unprocessable("body is required".into()))?
                .to_owned();
            match comments::edit(state, ForgeKind::Forgejo, full_name, id, login, body) {
                Ok(comment) => Ok(answer(200, forgejo_comment(state, full_name, &comment))),
                Err(comments::EditRefused::NotFound) => Err(not_found()),
                Err(comments::EditRefused::NotTheAuthor) => Err(answer(
                    403,
                    json!({ "message": "user should be the comment poster" }),
                )),
            }
        }
        ("POST", ["issues", "comments", id, "reactions"]) => {
            let id = number(id)?;
            let content = req
                .body_str("content")
                .ok_or_else(|| unprocessable("content is required".into()))?
                .to_owned();
            let new = comments::react(state, ForgeKind::Forgejo, full_name, id, login, &content)?;
            Ok(answer(
                if new { 201 } else { 200 },
                json!({ "content": content, "user": forgejo_user(login, user_id), "created_at": rfc3339(state.now()) }),
            ))
        }
        ("POST", ["statuses", sha]) => {
            let state_word = req.body_str("state").unwrap_or_default().to_owned();
            if ![
                "pending", "success", "error", "failure", "warning", "skipped",
            ]
            .contains(&state_word.as_str())
            {
                return Err(unprocessable(format!(
                    "state `{state_word}` is not a commit status state"
                )));
            }
            let description = req.body_str("description").unwrap_or_default().to_owned();
            if description.chars().count() > 140 {
                return Err(unprocessable(format!(
                    "description is {} characters; the maximum is 140",
                    description.chars().count()
                )));
            }
            let status = FakeStatus {
                id: state.id(),
                sha: (*sha).to_owned(),
                state: state_word,
                context: req.body_str("context").unwrap_or_default().to_owned(),
                description,
                target_url: req.body_str("target_url").map(str::to_owned),
            };
            let repo = state.repo_mut(ForgeKind::Forgejo, full_name).unwrap();
            repo.statuses.push(status.clone());
            Ok(answer(
                201,
                json!({
                    "id": status.id,
                    "status": status.state,
                    "context": status.context,
                    "description": status.description,
                    "target_url": status.target_url.clone().unwrap_or_default(),
                    "url": "",
                    "creator": forgejo_user(login, user_id),
                    "created_at": rfc3339(state.now()),
                    "updated_at": rfc3339(state.now()),
                }),
            ))
        }
        ("GET", ["pulls", pr]) => {
            let pr = number(pr)?;
            let repo = state.repo_mut(ForgeKind::Forgejo, full_name).unwrap();
            let handle = repo.handle.clone();
            let pr = repo
                .prs
                .iter()
                .find(|p| p.number == pr)
                .cloned()
                .ok_or_else(not_found)?;
            Ok(answer(200, pull_json(&handle, &pr, false)))
        }
        ("GET", ["pulls", pr, "reviews"]) => {
            let pr = number(pr)?;
            let (page, limit) = page_of(req, "limit", 30)?;
            let listed = reviews_of(state, ForgeKind::Forgejo, full_name, pr)?;
            let items = paged(&listed, page, limit.min(50))
                .iter()
                .map(|r| review_json(state, full_name, r, false))
                .collect();
            Ok(with_next_link(
                answer(200, Value::Array(items)),
                req,
                page,
                limit.min(50),
                listed.len(),
            ))
        }
        ("GET", ["collaborators", user, "permission"]) => {
            if !state.forgejo_bot_admin {
                return Err(answer(
                    403,
                    json!({ "message": "user is not an admin of this repository" }),
                ));
            }
            let asked_id = state.user_id(user);
            let repo = state.repo_mut(ForgeKind::Forgejo, full_name).unwrap();
            let permission = repo
                .permissions
                .get(*user)
                .cloned()
                .unwrap_or_else(|| "none".into());
            Ok(answer(
                200,
                json!({ "permission": permission, "role_name": permission, "user": forgejo_user(user, asked_id) }),
            ))
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
