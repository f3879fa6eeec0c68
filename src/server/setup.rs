//! One-click GitHub App creation (GitHub's manifest flow): `/setup` serves a
//! page whose button posts `app-manifest.json`, with this server's URLs filled
//! in, to GitHub; GitHub sends the browser back to `/setup/callback?code=…`,
//! where the code is exchanged for the App's credentials. They are stored in
//! the data dir (mode 0600) and used at once, without a restart.
//!
//! Only the operator can start the flow: `/setup` wants the one-time token
//! the server prints in its log at start. Once an App is configured both
//! pages refuse, so nobody can hand the server another App later.

use super::AppState;
use crate::forge::client::convert_manifest;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::Mutex;

/// The manifest as committed; URLs are replaced with this server's.
pub(crate) const MANIFEST: &str = include_str!("../../app-manifest.json");

/// The operator's token and the `state` values handed out by `/setup` and
/// not yet used.
pub(crate) struct SetupState {
    token: String,
    pending: Mutex<HashSet<String>>,
}

/// Flows started and not finished that are remembered at once.
const MAX_PENDING: usize = 16;

impl SetupState {
    pub(crate) fn new() -> Self {
        Self {
            token: super::random_hex(16),
            pending: Mutex::default(),
        }
    }

    /// The one-time token `/setup` wants; printed in the log at start.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }
}

impl Default for SetupState {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize)]
pub(crate) struct SetupQuery {
    token: Option<String>,
}

/// The manifest with this server's URLs.
pub(crate) fn manifest_for(base_url: &str) -> serde_json::Value {
    let mut manifest: serde_json::Value =
        serde_json::from_str(MANIFEST).expect("app-manifest.json is valid JSON");
    let base = base_url.trim_end_matches('/');
    manifest["url"] = base.into();
    manifest["hook_attributes"]["url"] = format!("{base}/webhooks/github").into();
    manifest["redirect_url"] = format!("{base}/setup/callback").into();
    manifest["callback_urls"] = serde_json::json!([format!("{base}/login/github/callback")]);
    manifest
}

use crate::forge::github::web_url;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body style=\"font-family: sans-serif; max-width: 40em; margin: 3em auto\"><h1>{title}</h1>{body}</body></html>"
    )
}

fn already_configured() -> Response {
    (
        StatusCode::CONFLICT,
        Html(page(
            "wavegate already has a GitHub App",
            "<p>This server already uses a GitHub App. To replace it, stop wavegate, remove \
             <code>github-app.json</code> from the data dir (or unset WAVEGATE_GITHUB_APP_ID), and start again.</p>",
        )),
    )
        .into_response()
}

/// `GET /setup`: the page with the button.
pub(crate) async fn page_handler(
    State(state): State<AppState>,
    Query(query): Query<SetupQuery>,
    headers: HeaderMap,
) -> Response {
    if state.forges.github_configured() {
        return already_configured();
    }
    if query.token.as_deref() != Some(state.setup.token()) {
        return (
            StatusCode::FORBIDDEN,
            Html(page(
                "Open the set-up link from wavegate's log",
                "<p>Only the operator starts the set-up: wavegate printed a link with a one-time token in its log when it started (\"open …/setup?token=…\"). Open that link.</p>",
            )),
        )
            .into_response();
    }
    let base_url = match &state.public_url {
        Some(url) => url.clone(),
        None => match headers.get("host").and_then(|h| h.to_str().ok()) {
            Some(host) => format!("http://{host}"),
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    "set WAVEGATE_PUBLIC_URL to the address GitHub reaches this server at",
                )
                    .into_response()
            }
        },
    };
    let manifest = manifest_for(&base_url).to_string();
    let nonce = super::random_hex(16);
    {
        let mut pending = state.setup.pending.lock().expect("setup lock");
        if pending.len() >= MAX_PENDING {
            pending.clear();
        }
        pending.insert(nonce.clone());
    }
    let action = format!(
        "{}/settings/apps/new?state={nonce}",
        web_url(state.forges.github_api_url())
    );
    let body = format!(
        "<p>Create the GitHub App this server runs as. GitHub asks you to confirm its name and then \
         sends you back here; the App's key and webhook secret are stored in the data dir.</p>\
         <form action=\"{}\" method=\"post\">\
         <input type=\"hidden\" name=\"manifest\" value=\"{}\">\
         <button type=\"submit\">Create the GitHub App</button></form>\
         <p>Webhooks will be sent to <code>{}/webhooks/github</code>.</p>",
        escape(&action),
        escape(&manifest),
        escape(base_url.trim_end_matches('/')),
    );
    Html(page("Set up wavegate", &body)).into_response()
}

#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
}

/// `GET /setup/callback?code=…&state=…`: exchange the code, store, use.
pub(crate) async fn callback(
    State(state): State<AppState>,
    Query(query): Query<Callback>,
) -> Response {
    if state.forges.github_configured() {
        return already_configured();
    }
    let refuse = |text: &str| {
        (
            StatusCode::BAD_REQUEST,
            Html(page(
                "GitHub App set-up did not finish",
                &format!("<p>{}</p>", escape(text)),
            )),
        )
            .into_response()
    };
    let Some(code) = query.code.filter(|c| {
        !c.is_empty()
            && c.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    }) else {
        return refuse("GitHub did not send a code. Start again at /setup.");
    };
    let known = query
        .state
        .is_some_and(|s| state.setup.pending.lock().expect("setup lock").remove(&s));
    if !known {
        return refuse("This link was not started from this server's /setup page (or was used already). Start again at /setup.");
    }
    let app = match convert_manifest(state.forges.github_api_url(), &code).await {
        Ok(app) => app,
        Err(error) => {
            tracing::error!("manifest conversion failed: {error:?}");
            return refuse(&format!(
                "GitHub did not hand over the App's credentials ({error:#}). Codes expire after an hour; start again at /setup."
            ));
        }
    };
    if let Err(error) = state.forges.install_github_app(&app) {
        tracing::error!("storing the GitHub App failed: {error:?}");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Html(page(
                "The GitHub App was created but could not be stored",
                &format!("<p>{}</p><p>Check that the data dir is writable, then delete the App on GitHub and start again at /setup.</p>", escape(&format!("{error:#}"))),
            )),
        )
            .into_response();
    }
    tracing::info!(app = %app.slug, "GitHub App created through the manifest flow");
    let install = format!("{}/installations/new", app.html_url.trim_end_matches('/'));
    Html(page(
        "wavegate is ready",
        &format!(
            "<p>The GitHub App <strong>{}</strong> was created and is in use. Now install it on the repositories wavegate should plan:</p>\
             <p><a href=\"{}\">Install {}</a></p>",
            escape(&app.slug),
            escape(&install),
            escape(&app.slug)
        ),
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_carries_this_servers_urls_and_the_permissions_wavegate_needs() {
        let manifest = manifest_for("https://wavegate.acme.example/");
        assert_eq!(manifest["url"], "https://wavegate.acme.example");
        assert_eq!(
            manifest["hook_attributes"]["url"],
            "https://wavegate.acme.example/webhooks/github"
        );
        assert_eq!(
            manifest["redirect_url"],
            "https://wavegate.acme.example/setup/callback"
        );
        assert_eq!(
            manifest["callback_urls"],
            serde_json::json!(["https://wavegate.acme.example/login/github/callback"])
        );
        let permissions = &manifest["default_permissions"];
        for (name, access) in [
            // Jobs on the forge's CI: dispatch, follow and cancel runs.
            ("actions", "write"),
            ("checks", "write"),
            ("contents", "read"),
            ("issues", "write"),
            ("pull_requests", "write"),
            ("metadata", "read"),
            // The organisation's members: `team:` approvers are read through it.
            ("members", "read"),
        ] {
            assert_eq!(permissions[name], access, "{name}");
        }
        // `installation` reaches every App without a subscription.
        let events: Vec<&str> = manifest["default_events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(
            events,
            [
                "pull_request",
                "issue_comment",
                "pull_request_review",
                "check_run"
            ]
        );
    }

    #[test]
    fn apps_are_created_on_the_forges_web_host() {
        assert_eq!(web_url("https://api.github.com"), "https://github.com");
        assert_eq!(
            web_url("https://ghe.acme.example/api/v3/"),
            "https://ghe.acme.example"
        );
        assert_eq!(web_url("http://127.0.0.1:9999"), "http://127.0.0.1:9999");
    }

    #[test]
    fn text_in_pages_is_escaped() {
        assert_eq!(
            escape(r#"<a href="x">&"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
