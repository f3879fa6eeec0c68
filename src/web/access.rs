//! Who is asking, and what they may see and do. A visitor is someone logged
//! in with a forge (a signed session cookie), anyone (when the operator
//! opened the pages with `WAVEGATE_PUBLIC_PAGES`), or no one. Reading a
//! repository's pages needs read access to it on the forge; an operator
//! action needs admin on it or membership of an operator team the server
//! names (`WAVEGATE_OPERATOR_TEAMS`), and the form's CSRF token. What the
//! forge answers is asked with the bot's credentials and kept for a minute,
//! so a page costs the forge nothing while a visitor browses.
//!
//! An integration sends `Authorization: Bearer <token>` with a read-only
//! API token (`wavegate api-token create`), which reads the repositories it
//! names (or every one) and acts on none.
//!
//! Handlers ask here and get a typed answer: `may_read` admits or refuses,
//! `may_operate` returns the [`Operator`] an action is recorded as.

use super::recent::Recent;
use super::session::{self, SessionCookie, SESSION_COOKIE};
use super::{Problem, WebState};
use crate::forge::types::Permission;
use crate::model::{ForgeKind, RepoId};
use crate::store::ApiToken;
use anyhow::Context as _;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::time::Duration;

/// How long what the forge said of a visitor's access is believed.
pub(crate) const STANDING_TTL: Duration = Duration::from_secs(60);
/// Standings kept at most; past it, expired ones are dropped first.
const CACHE_LIMIT: usize = 10_000;

/// Who is asking.
#[derive(Debug, Clone)]
pub(crate) enum Visitor {
    /// No one logged in, and the pages are closed to such visitors; `next`
    /// is where they were going (to come back after logging in).
    Nobody { next: String },
    /// No one logged in, and the pages are open to anyone.
    Anyone { next: String },
    /// Someone logged in with a forge.
    User(SessionCookie),
    /// An integration with a read-only API token.
    Token(ApiToken),
    /// A request with a token that is not (or no longer) one.
    UnknownToken,
}

/// Someone allowed to act on a repository's locks and jobs: an action is
/// recorded in the ledger as theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operator {
    pub(crate) forge: ForgeKind,
    pub(crate) login: String,
}

/// What a visitor may do in a repository, as its forge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Outsider,
    Reader,
    Operator,
}

/// Whose standing in which repository: the forge, the login (lowercase:
/// forges read logins without case) and the repository.
type Whose = (ForgeKind, String, RepoId);

/// What the forges said of whom, lately.
pub(crate) type StandingCache = Recent<Whose, Standing>;

impl Default for StandingCache {
    fn default() -> Self {
        Recent::new(STANDING_TTL, CACHE_LIMIT)
    }
}

impl FromRequestParts<WebState> for Visitor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &WebState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(token) = bearer(&parts.headers) {
            return Ok(match state.store.api_token(&token_hash(token)).await {
                Ok(Some(token)) => Visitor::Token(token),
                Ok(None) => Visitor::UnknownToken,
                Err(error) => {
                    tracing::error!(error = ?error, "an API token could not be looked up");
                    Visitor::UnknownToken
                }
            });
        }
        let session = session::cookie(&parts.headers, SESSION_COOKIE)
            .and_then(|sealed| {
                state
                    .cookies
                    .open::<SessionCookie>(sealed, state.store.now())
            })
            .filter(|session| state.login.client(session.forge).is_some());
        let next = parts
            .uri
            .path_and_query()
            .map(|path| path.as_str().to_owned())
            .unwrap_or_else(|| "/repos".into());
        Ok(match session {
            Some(session) => Visitor::User(session),
            None if state.open => Visitor::Anyone { next },
            None => Visitor::Nobody { next },
        })
    }
}

/// The token of an `Authorization: Bearer …` header.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// What the store keeps of an API token: its SHA-256, hex.
pub fn token_hash(token: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// A new API token: `wgt_` and 32 random bytes (base64url).
pub fn new_api_token() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the kernel gives random bytes");
    format!(
        "wgt_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

fn unknown_token() -> Problem {
    Problem::Unauthorized(
        "this API token is not one this server knows (it may have been revoked); make one with `wavegate api-token create`".into(),
    )
}

impl Visitor {
    fn log_in(state: &WebState, next: &str, why: String) -> Problem {
        if state.login.any() {
            Problem::LogIn {
                why,
                next: next.to_owned(),
            }
        } else {
            Problem::Closed
        }
    }
}

/// Whether `visitor` may see pages that belong to no repository (the list
/// of repositories, the server).
pub(crate) fn may_browse(state: &WebState, visitor: &Visitor) -> Result<(), Problem> {
    match visitor {
        Visitor::Nobody { next } => Err(Visitor::log_in(
            state,
            next,
            "log in with the forge to see this server's pages".into(),
        )),
        Visitor::UnknownToken => Err(unknown_token()),
        Visitor::Anyone { .. } | Visitor::User(_) | Visitor::Token(_) => Ok(()),
    }
}

/// Whether `visitor` may read `repo`'s pages.
pub(crate) async fn may_read(
    state: &WebState,
    visitor: &Visitor,
    repo: &RepoId,
) -> Result<(), Problem> {
    match visitor {
        Visitor::Nobody { next } => Err(Visitor::log_in(
            state,
            next,
            format!("log in with the forge to see {repo}'s pages"),
        )),
        // Open pages show a logged-in visitor what they show anyone.
        Visitor::Anyone { .. } => Ok(()),
        Visitor::User(_) if state.open => Ok(()),
        Visitor::UnknownToken => Err(unknown_token()),
        Visitor::Token(token) if token.may_read(repo) => Ok(()),
        Visitor::Token(token) => Err(Problem::Forbidden(format!(
            "the API token {} may not read {repo}; make one that names it with `wavegate api-token create --repo {repo}`",
            token.name
        ))),
        Visitor::User(session) => match standing(state, session, repo).await? {
            Standing::Reader | Standing::Operator => Ok(()),
            Standing::Outsider => Err(not_yours(session, repo)),
        },
    }
}

/// The operator `visitor` acts as on `repo`, if they may act there and
/// `csrf` is their session's token.
pub(crate) async fn may_operate(
    state: &WebState,
    visitor: &Visitor,
    repo: &RepoId,
    csrf: &str,
) -> Result<Operator, Problem> {
    let session = match visitor {
        Visitor::User(session) => session,
        Visitor::Token(token) => {
            return Err(Problem::Forbidden(format!(
                "the API token {} is read-only; an operator acts logged in with the forge",
                token.name
            )))
        }
        Visitor::UnknownToken => return Err(unknown_token()),
        Visitor::Nobody { next } => {
            return Err(Visitor::log_in(
                state,
                next,
                format!("log in with the forge to act on {repo}'s locks and jobs"),
            ))
        }
        Visitor::Anyone { next } if state.login.any() => {
            return Err(Visitor::log_in(
                state,
                next,
                format!("log in with the forge to act on {repo}'s locks and jobs"),
            ))
        }
        Visitor::Anyone { .. } => {
            return Err(Problem::Forbidden(format!(
                "log in with the forge to act on {repo}'s locks and jobs: this server offers no login yet; its operator sets up one with WAVEGATE_GITHUB_CLIENT_ID and WAVEGATE_GITHUB_CLIENT_SECRET (or WAVEGATE_FORGEJO_CLIENT_ID and WAVEGATE_FORGEJO_CLIENT_SECRET)"
            )))
        }
    };
    if !session::same_token(&session.csrf, csrf) {
        return Err(Problem::Forbidden(
            "this form is not from your session (its CSRF token does not match); reload the page and try again".into(),
        ));
    }
    let standing = match standing(state, session, repo).await? {
        Standing::Reader if in_an_operator_team(state, session, repo).await? => Standing::Operator,
        standing => standing,
    };
    match standing {
        Standing::Operator => Ok(Operator {
            forge: session.forge,
            login: session.login.clone(),
        }),
        Standing::Reader => Err(Problem::Forbidden(format!(
            "{} may read {repo} but not act on its locks and jobs: that takes admin on the repository{}",
            session.login,
            match state.login.operator_teams.as_slice() {
                [] => String::new(),
                teams => format!(" or membership of the team {}", teams.join(" or ")),
            }
        ))),
        Standing::Outsider => Err(not_yours(session, repo)),
    }
}

fn not_yours(session: &SessionCookie, repo: &RepoId) -> Problem {
    Problem::Forbidden(format!(
        "{} has no read access to {repo} on the forge (or wavegate has heard nothing of it), so its pages are not shown",
        session.login
    ))
}

/// Whether `session`'s login is on one of the operator teams of `repo`'s
/// owner (asked only when they act, which is rare).
async fn in_an_operator_team(
    state: &WebState,
    session: &SessionCookie,
    repo: &RepoId,
) -> Result<bool, Problem> {
    if state.login.operator_teams.is_empty() {
        return Ok(false);
    }
    let asked = async {
        let reference = state
            .store
            .repository(repo)
            .await?
            .with_context(|| format!("the store no longer knows {repo}"))?;
        let client = state.forges.client(repo.forge)?;
        for team in &state.login.operator_teams {
            if client.in_team(&reference, team, &session.login).await? {
                return anyhow::Ok(true);
            }
        }
        anyhow::Ok(false)
    };
    asked.await.map_err(|error| {
        tracing::warn!(error = ?error, login = %session.login, repo = %repo, "could not ask the forge for a visitor's teams");
        Problem::Unavailable(format!(
            "the forge could not be asked whether {} is on an operator team of {repo}; try again in a moment",
            session.login
        ))
    })
}

/// What the forge says `session`'s login may do in `repo`, by their
/// permission alone (one call, asked at most once a minute; a repository
/// wavegate never heard of is no one's).
async fn standing(
    state: &WebState,
    session: &SessionCookie,
    repo: &RepoId,
) -> Result<Standing, Problem> {
    if session.forge != repo.forge {
        return Ok(Standing::Outsider);
    }
    let key = (session.forge, session.login.to_lowercase(), repo.clone());
    if let Some(standing) = state.standings.get(&key) {
        return Ok(standing);
    }
    let standing = ask_forge(state, &session.login, repo).await.map_err(|error| {
        tracing::warn!(error = ?error, login = %session.login, repo = %repo, "could not ask the forge what a visitor may see");
        Problem::Unavailable(format!(
            "the forge could not be asked what {} may see in {repo}; try again in a moment",
            session.login
        ))
    })?;
    state.standings.put(key, standing);
    Ok(standing)
}

async fn ask_forge(state: &WebState, login: &str, repo: &RepoId) -> anyhow::Result<Standing> {
    let Some(reference) = state.store.repository(repo).await? else {
        return Ok(Standing::Outsider);
    };
    let client = state.forges.client(repo.forge)?;
    Ok(match client.permission(&reference, login).await? {
        Permission::Admin => Standing::Operator,
        Permission::None => Standing::Outsider,
        _ => Standing::Reader,
    })
}
