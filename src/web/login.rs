//! Logging in with the forge: GitHub's user authorisation of the App and
//! Forgejo's OAuth2 applications, the same authorisation-code flow. `/login`
//! offers the forges configured; `/login/{forge}` sends the visitor to the
//! forge with a fresh `state` kept in a signed cookie; the forge sends them
//! back to `/login/{forge}/callback`, where the code is exchanged for a
//! token, the token says who they are, and a signed session cookie is set.
//! The token itself is dropped: what a visitor may read is asked of the
//! forge with the bot's own credentials (`access.rs`).

use super::session::{
    self, LoginCookie, SessionCookie, LOGIN_COOKIE, LOGIN_LIFETIME, SESSION_COOKIE,
    SESSION_LIFETIME,
};
use super::{access::Visitor, html, PageProblem, Problem, WebState};
use crate::config::settings::OAuthClient;
use crate::model::ForgeKind;
use anyhow::Context as _;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

/// The forge's login addresses for this server's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoints {
    pub(crate) authorize: String,
    pub(crate) token: String,
    pub(crate) user: String,
}

impl Endpoints {
    /// GitHub: the web host's `/login/oauth/…` (github.com for
    /// api.github.com, the host of GitHub Enterprise), the API's `/user`.
    /// Forgejo: the instance's `/login/oauth/…` and `/api/v1/user`.
    pub(crate) fn of(forge: ForgeKind, github_api: &str, forgejo_root: Option<&str>) -> Self {
        let (web, user) = match forge {
            ForgeKind::GitHub => (
                crate::forge::github::web_url(github_api),
                format!("{}/user", github_api.trim_end_matches('/')),
            ),
            ForgeKind::Forgejo => {
                let root = forgejo_root.unwrap_or_default().trim_end_matches('/');
                (root.to_owned(), format!("{root}/api/v1/user"))
            }
        };
        Self {
            authorize: format!("{web}/login/oauth/authorize"),
            token: format!("{web}/login/oauth/access_token"),
            user,
        }
    }
}

/// Where to go after logging in: a path of this server, nothing else (an
/// open redirect would send a visitor anywhere in this server's name).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(next)
            if next.starts_with('/')
                && next.is_ascii()
                && !next.starts_with("//")
                && !next.contains('\\')
                && !next.chars().any(char::is_control) =>
        {
            next.to_owned()
        }
        _ => "/repos".to_owned(),
    }
}

/// This server's address as the visitor reached it: `WAVEGATE_PUBLIC_URL`,
/// else the request's host.
fn base_url(state: &WebState, headers: &HeaderMap) -> String {
    match &state.public_url {
        Some(url) => url.clone(),
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|host| host.to_str().ok())
                .unwrap_or("localhost");
            format!("http://{host}")
        }
    }
}

fn secure(state: &WebState) -> bool {
    state
        .public_url
        .as_deref()
        .is_some_and(|url| url.starts_with("https://"))
}

fn callback_url(base: &str, forge: ForgeKind) -> String {
    format!("{base}/login/{}/callback", forge.as_str())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

/// `/login`: the forges one may log in with.
pub(crate) async fn login_page(
    State(state): State<WebState>,
    visitor: Visitor,
    query: Result<Query<NextQuery>, QueryRejection>,
) -> Result<Html<String>, PageProblem> {
    let next = safe_next(super::read(query)?.next.as_deref());
    let forges: Vec<ForgeKind> = [ForgeKind::GitHub, ForgeKind::Forgejo]
        .into_iter()
        .filter(|forge| state.login.client(*forge).is_some())
        .collect();
    Ok(Html(
        html::login(&super::nav(&state, &visitor), &forges, &next).into_string(),
    ))
}

fn configured(state: &WebState, forge: &str) -> Result<(ForgeKind, OAuthClient), Problem> {
    let forge: ForgeKind = forge.parse().map_err(Problem::NotFound)?;
    let client = state.login.client(forge).cloned().ok_or_else(|| {
        Problem::NotFound(format!(
            "logging in with {} is not set up on this server: an operator sets WAVEGATE_{}_CLIENT_ID and WAVEGATE_{}_CLIENT_SECRET",
            forge.as_str(),
            forge.as_str().to_ascii_uppercase(),
            forge.as_str().to_ascii_uppercase(),
        ))
    })?;
    Ok((forge, client))
}

/// `/login/{forge}`: off to the forge, with a `state` only this visitor's
/// browser can bring back.
pub(crate) async fn start(
    State(state): State<WebState>,
    Path(forge): Path<String>,
    headers: HeaderMap,
    query: Result<Query<NextQuery>, QueryRejection>,
) -> Result<Response, PageProblem> {
    let next = safe_next(super::read(query)?.next.as_deref());
    let (forge, client) = configured(&state, &forge)?;
    let nonce = session::random_token();
    let cookie = LoginCookie {
        forge,
        state: nonce.clone(),
        next,
        expires: state.store.now() + LOGIN_LIFETIME,
    };
    let redirect_uri = callback_url(&base_url(&state, &headers), forge);
    let mut authorize = reqwest::Url::parse(&state.endpoints(forge).authorize)
        .context("the forge's authorisation address")
        .map_err(Problem::Internal)?;
    authorize
        .query_pairs_mut()
        .append_pair("client_id", &client.client_id)
        .append_pair("redirect_uri", &redirect_uri)
        .append_pair("response_type", "code")
        .append_pair("state", &nonce);
    let set = session::set_cookie(
        LOGIN_COOKIE,
        &state.cookies.seal(&cookie),
        LOGIN_LIFETIME,
        secure(&state),
    );
    Ok((
        [(header::SET_COOKIE, set)],
        Redirect::to(authorize.as_str()),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Deserialize)]
struct UserAnswer {
    login: String,
}

/// `/login/{forge}/callback`: the forge's answer, turned into a session.
pub(crate) async fn callback(
    State(state): State<WebState>,
    Path(forge): Path<String>,
    headers: HeaderMap,
    Query(answer): Query<CallbackQuery>,
) -> Result<Response, PageProblem> {
    let (forge, client) = configured(&state, &forge)?;
    let again = "log in again from /login";
    if let Some(error) = answer.error {
        // Only the standard code is shown: the rest of the address is
        // anyone's to write, and this page is the server's.
        tracing::info!(forge = forge.as_str(), error = %error, description = ?answer.error_description, "a login was refused by the forge");
        let code = if error.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            error.as_str()
        } else {
            "an error"
        };
        return Err(Problem::Forbidden(format!(
            "the forge did not let you log in ({code}); {again}"
        ))
        .into());
    }
    let now = state.store.now();
    let login: Option<LoginCookie> =
        session::cookie(&headers, LOGIN_COOKIE).and_then(|sealed| state.cookies.open(sealed, now));
    let (Some(login), Some(code), Some(returned)) = (login, answer.code, answer.state) else {
        return Err(Problem::BadQuery(format!(
            "this login is not the one this browser started, or it took longer than {}; {again}",
            humantime::format_duration(LOGIN_LIFETIME)
        ))
        .into());
    };
    if login.forge != forge || !session::same_token(&login.state, &returned) {
        return Err(Problem::BadQuery(format!(
            "this login is not the one this browser started; {again}"
        ))
        .into());
    }
    let redirect_uri = callback_url(&base_url(&state, &headers), forge);
    let who = who_is(&state, forge, &client, &code, &redirect_uri)
        .await
        .map_err(|error| {
            tracing::warn!(error = ?error, forge = forge.as_str(), "a login could not be completed");
            Problem::Unavailable(format!(
                "the forge did not confirm who you are ({error}); {again}"
            ))
        })?;
    tracing::info!(forge = forge.as_str(), login = %who, "logged in to the pages");
    let session = SessionCookie {
        forge,
        login: who,
        csrf: session::random_token(),
        expires: now + SESSION_LIFETIME,
    };
    let secure = secure(&state);
    let mut response = Redirect::to(&login.next).into_response();
    let headers = response.headers_mut();
    for cookie in [
        session::set_cookie(
            SESSION_COOKIE,
            &state.cookies.seal(&session),
            SESSION_LIFETIME,
            secure,
        ),
        session::clear_cookie(LOGIN_COOKIE),
    ] {
        headers.append(
            header::SET_COOKIE,
            cookie.parse().expect("a cookie is a header value"),
        );
    }
    Ok(response)
}

/// The login of whoever authorised `code`: the code exchanged for a token,
/// the token asked whose it is.
async fn who_is(
    state: &WebState,
    forge: ForgeKind,
    client: &OAuthClient,
    code: &str,
    redirect_uri: &str,
) -> anyhow::Result<String> {
    let endpoints = state.endpoints(forge);
    let answer = state
        .http
        .post(&endpoints.token)
        .header(header::ACCEPT, "application/json")
        .form(&[
            ("client_id", client.client_id.as_str()),
            ("client_secret", client.client_secret.expose()),
            ("code", code),
            ("grant_type", "authorization_code"),
            ("redirect_uri", redirect_uri),
        ])
        .send()
        .await
        .with_context(|| format!("POST {}", endpoints.token))?;
    let status = answer.status();
    let token: TokenAnswer = answer.json().await.with_context(|| {
        format!(
            "the answer of POST {} ({status}) is not its JSON",
            endpoints.token
        )
    })?;
    let access_token = match (token.access_token, token.error) {
        (Some(token), None) => token,
        (_, error) => anyhow::bail!(
            "the code was refused: {}{}",
            error.unwrap_or_else(|| status.to_string()),
            token
                .error_description
                .map(|why| format!(" ({why})"))
                .unwrap_or_default()
        ),
    };
    let answer = state
        .http
        .get(&endpoints.user)
        .header(header::ACCEPT, "application/json")
        .header(header::USER_AGENT, "wavegate")
        .bearer_auth(&access_token)
        .send()
        .await
        .with_context(|| format!("GET {}", endpoints.user))?;
    if !answer.status().is_success() {
        anyhow::bail!("GET {} answered {}", endpoints.user, answer.status());
    }
    let user: UserAnswer = answer
        .json()
        .await
        .with_context(|| format!("the answer of GET {} names no login", endpoints.user))?;
    Ok(user.login)
}

#[derive(Debug, Deserialize)]
pub(crate) struct LogoutForm {
    csrf: String,
}

/// `POST /logout`: the session cookie goes.
pub(crate) async fn logout(
    visitor: Visitor,
    Form(form): Form<LogoutForm>,
) -> Result<Response, PageProblem> {
    if let Visitor::User(session) = &visitor {
        if !session::same_token(&session.csrf, &form.csrf) {
            return Err(Problem::Forbidden(
                "this form is not from this session (its CSRF token does not match); reload the page and try again".into(),
            )
            .into());
        }
    }
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, session::clear_cookie(SESSION_COOKIE)),
            (header::LOCATION, "/login".to_owned()),
        ],
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_logging_in_a_visitor_goes_only_to_a_page_of_this_server() {
        assert_eq!(
            safe_next(Some("/repos/github/acme/infra")),
            "/repos/github/acme/infra"
        );
        for elsewhere in [
            "https://evil.example",
            "//evil.example/x",
            "/\\evil.example",
            "javascript:alert(1)",
            "/x\r\nSet-Cookie: a=b",
            "/é",
        ] {
            assert_eq!(safe_next(Some(elsewhere)), "/repos", "{elsewhere:?}");
        }
        assert_eq!(safe_next(None), "/repos");
    }

    #[test]
    fn each_forge_is_asked_at_its_own_addresses() {
        assert_eq!(
            Endpoints::of(ForgeKind::GitHub, "https://api.github.com", None),
            Endpoints {
                authorize: "https://github.com/login/oauth/authorize".into(),
                token: "https://github.com/login/oauth/access_token".into(),
                user: "https://api.github.com/user".into(),
            }
        );
        assert_eq!(
            Endpoints::of(ForgeKind::GitHub, "https://ghe.example/api/v3", None).authorize,
            "https://ghe.example/login/oauth/authorize"
        );
        assert_eq!(
            Endpoints::of(ForgeKind::Forgejo, "", Some("https://codeberg.org/")),
            Endpoints {
                authorize: "https://codeberg.org/login/oauth/authorize".into(),
                token: "https://codeberg.org/login/oauth/access_token".into(),
                user: "https://codeberg.org/api/v1/user".into(),
            }
        );
    }
}
