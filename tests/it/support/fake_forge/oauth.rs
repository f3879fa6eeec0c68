//! Logging in with the forge, as a browser sees it: both forges'
//! authorisation-code flow at `/login/oauth/…` (one host serves both; the
//! client id tells which forge a client is registered on). The authorisation
//! page asks who is signing in (a text field and a button, for the browser
//! tests to fill in), then sends the browser back with a code; the code is
//! exchanged once for a token, and the token answers GitHub's `GET /user`
//! and Forgejo's `GET /api/v1/user`. These pages are not part of either
//! REST API's description, so they are not recorded for the conformance
//! check.

use super::*;
use axum::http::header;

/// An OAuth client registered on a forge (a GitHub App's, or a Forgejo
/// OAuth2 application).
#[derive(Debug, Clone)]
pub(super) struct OAuthClient {
    pub(super) forge: ForgeKind,
    pub(super) secret: String,
}

/// A code handed to a browser, not yet exchanged.
#[derive(Debug, Clone)]
pub(super) struct Grant {
    client_id: String,
    redirect_uri: String,
    login: String,
}

#[derive(Debug, Default)]
pub(super) struct OAuthState {
    pub(super) clients: HashMap<String, OAuthClient>,
    grants: HashMap<String, Grant>,
    /// access token → (forge, login)
    tokens: HashMap<String, (ForgeKind, String)>,
    /// Logins that exchanged a code, in order.
    pub(super) logged_in: Vec<(ForgeKind, String)>,
}

impl OAuthState {
    /// Who an OAuth access token of `forge` belongs to.
    pub(super) fn owner(&self, forge: ForgeKind, token: &str) -> Option<&str> {
        self.tokens
            .get(token)
            .filter(|(of, _)| *of == forge)
            .map(|(_, login)| login.as_str())
    }
}

fn page(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        format!(
            "<!doctype html><html><head><title>Fake forge</title></head><body>{body}</body></html>"
        ),
    )
        .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `/login/oauth/{authorize,grant,access_token}`, or None for another path.
pub(super) fn respond(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    body: &Bytes,
) -> Option<Response> {
    let rest = uri.path().strip_prefix("/login/oauth/")?;
    let mut state = shared.lock().unwrap();
    let query = decoded(uri.query());
    Some(match (method.as_str(), rest) {
        ("GET", "authorize") => authorize(&state, &query),
        ("GET", "grant") => grant(&mut state, &query),
        ("POST", "access_token") => {
            let form = decoded(std::str::from_utf8(body).ok());
            access_token(&mut state, &form)
        }
        _ => not_found(),
    })
}

/// A query or form, its values percent-decoded (`+` is a space).
fn decoded(query: Option<&str>) -> HashMap<String, String> {
    parse_query(query)
        .into_iter()
        .map(|(key, value)| (key, decode(&value)))
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn client<'s>(
    state: &'s State,
    query: &HashMap<String, String>,
) -> Option<(&'s str, &'s OAuthClient)> {
    let id = query.get("client_id")?;
    state
        .oauth
        .clients
        .get_key_value(id)
        .map(|(id, client)| (id.as_str(), client))
}

/// The forge's authorisation page: who signs in, and a button.
fn authorize(state: &State, query: &HashMap<String, String>) -> Response {
    let Some((client_id, registered)) = client(state, query) else {
        return page(StatusCode::BAD_REQUEST, "<h1>Unknown client_id</h1>".into());
    };
    let (Some(redirect_uri), Some(oauth_state)) = (query.get("redirect_uri"), query.get("state"))
    else {
        return page(
            StatusCode::BAD_REQUEST,
            "<h1>redirect_uri and state are required</h1>".into(),
        );
    };
    let forge = match registered.forge {
        ForgeKind::GitHub => "GitHub",
        ForgeKind::Forgejo => "Forgejo",
    };
    page(
        StatusCode::OK,
        format!(
            r#"<h1>Authorize wavegate ({forge})</h1>
<form method="get" action="/login/oauth/grant">
<input type="hidden" name="client_id" value="{}">
<input type="hidden" name="redirect_uri" value="{}">
<input type="hidden" name="state" value="{}">
<label>Sign in as <input name="login" id="login"></label>
<button type="submit" id="authorize">Authorize</button>
</form>
<a id="deny" href="{}?error=access_denied&amp;state={}">Cancel</a>"#,
            escape(client_id),
            escape(redirect_uri),
            escape(oauth_state),
            escape(redirect_uri),
            escape(oauth_state),
        ),
    )
}

/// The button: a code for the login, and back to the client.
fn grant(state: &mut State, query: &HashMap<String, String>) -> Response {
    let Some((client_id, _)) = client(state, query) else {
        return page(StatusCode::BAD_REQUEST, "<h1>Unknown client_id</h1>".into());
    };
    let client_id = client_id.to_owned();
    let (Some(redirect_uri), Some(oauth_state), Some(login)) = (
        query.get("redirect_uri"),
        query.get("state"),
        query.get("login").filter(|login| !login.is_empty()),
    ) else {
        return page(StatusCode::BAD_REQUEST, "<h1>Who signs in?</h1>".into());
    };
    state.user_id(login);
    let code = format!("code-{}", state.id());
    state.oauth.grants.insert(
        code.clone(),
        Grant {
            client_id,
            redirect_uri: redirect_uri.clone(),
            login: login.clone(),
        },
    );
    let separator = if redirect_uri.contains('?') { '&' } else { '?' };
    let location = format!(
        "{redirect_uri}{separator}code={code}&state={}",
        encode(oauth_state)
    );
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A code for a token, once, for the client it was granted to with its
/// secret and the same redirect address.
fn access_token(state: &mut State, form: &HashMap<String, String>) -> Response {
    let refused = |why: &str| {
        answer(
            200,
            json!({ "error": "bad_verification_code", "error_description": why }),
        )
    };
    let Some((client_id, registered)) = client(state, form) else {
        return answer(200, json!({ "error": "incorrect_client_credentials" }));
    };
    if form.get("client_secret") != Some(&registered.secret) {
        return answer(200, json!({ "error": "incorrect_client_credentials" }));
    }
    let (client_id, forge) = (client_id.to_owned(), registered.forge);
    let Some(grant) = form
        .get("code")
        .and_then(|code| state.oauth.grants.remove(code))
    else {
        return refused("The code passed is incorrect or expired.");
    };
    if grant.client_id != client_id || form.get("redirect_uri") != Some(&grant.redirect_uri) {
        return refused("The redirect_uri or client does not match the code's.");
    }
    let token = format!("user-token-{}", state.id());
    state
        .oauth
        .tokens
        .insert(token.clone(), (forge, grant.login.clone()));
    state.oauth.logged_in.push((forge, grant.login));
    answer(
        200,
        json!({ "access_token": token, "token_type": "bearer", "scope": "" }),
    )
}

impl FakeForge {
    /// Registers an OAuth client on `forge`.
    pub fn add_oauth_client(&self, forge: ForgeKind, client_id: &str, secret: &str) {
        self.with(|s| {
            s.oauth.clients.insert(
                client_id.to_owned(),
                OAuthClient {
                    forge,
                    secret: secret.to_owned(),
                },
            );
        })
    }

    /// Who exchanged a code for a token, in order.
    pub fn logged_in(&self) -> Vec<(ForgeKind, String)> {
        self.with(|s| s.oauth.logged_in.clone())
    }
}
