//! Logging in to the pages as a browser would, without one: a visitor who
//! keeps the cookies the server sets, follows the forge's authorisation page
//! (the fake forge's, where they say who signs in) and comes back with a
//! session. The server's forms read their CSRF token from the session.

use super::bot::Bot;
use base64::Engine as _;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use std::collections::BTreeMap;
use wavegate::model::ForgeKind;

pub const GITHUB_CLIENT_ID: &str = "Iv1.wavegate-pages";
pub const GITHUB_CLIENT_SECRET: &str = "github-client-secret";
pub const FORGEJO_CLIENT_ID: &str = "0f6e-wavegate-pages";
pub const FORGEJO_CLIENT_SECRET: &str = "forgejo-client-secret";

/// The settings that let visitors log in with both forges.
pub const LOGIN_ENV: [(&str, &str); 4] = [
    ("WAVEGATE_GITHUB_CLIENT_ID", GITHUB_CLIENT_ID),
    ("WAVEGATE_GITHUB_CLIENT_SECRET", GITHUB_CLIENT_SECRET),
    ("WAVEGATE_FORGEJO_CLIENT_ID", FORGEJO_CLIENT_ID),
    ("WAVEGATE_FORGEJO_CLIENT_SECRET", FORGEJO_CLIENT_SECRET),
];

impl Bot {
    /// The fake forges know this server's OAuth clients (as `LOGIN_ENV`
    /// names them).
    pub fn register_login_clients(&self) {
        self.forge
            .add_oauth_client(ForgeKind::GitHub, GITHUB_CLIENT_ID, GITHUB_CLIENT_SECRET);
        self.forge
            .add_oauth_client(ForgeKind::Forgejo, FORGEJO_CLIENT_ID, FORGEJO_CLIENT_SECRET);
    }
}

/// An answer as a visitor sees it.
pub struct Seen {
    pub status: u16,
    pub location: Option<String>,
    pub body: String,
}

/// Someone with a browser's cookie jar (redirects are theirs to follow).
pub struct Visitor<'b> {
    bot: &'b Bot,
    http: reqwest::Client,
    cookies: BTreeMap<String, String>,
}

impl<'b> Visitor<'b> {
    pub fn new(bot: &'b Bot) -> Self {
        Self {
            bot,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: BTreeMap::new(),
        }
    }

    /// `login`, logged in with `forge` through its authorisation page.
    pub async fn logged_in(bot: &'b Bot, forge: ForgeKind, login: &str) -> Self {
        let mut visitor = Self::new(bot);
        visitor.log_in(forge, login).await;
        visitor
    }

    /// Logs in with `forge` as `login`; answers where the server sent them
    /// at the end.
    pub async fn log_in(&mut self, forge: ForgeKind, login: &str) -> String {
        let callback = self.authorise(forge, login).await;
        let back = self.get(&callback).await;
        assert_eq!(back.status, 303, "the callback answered: {}", back.body);
        assert!(
            self.cookies.contains_key("wavegate_session"),
            "no session was set"
        );
        back.location.unwrap()
    }

    /// Goes to the forge from `/login/{forge}` and signs in there as
    /// `login`; answers the address the forge sends the browser back to.
    pub async fn authorise(&mut self, forge: ForgeKind, login: &str) -> String {
        let forge = match forge {
            ForgeKind::GitHub => "github",
            ForgeKind::Forgejo => "forgejo",
        };
        let start = self.get(&format!("/login/{forge}?next=/repos")).await;
        assert_eq!(start.status, 303, "{}", start.body);
        let authorize = start.location.unwrap();
        let page = self.get(&authorize).await;
        assert_eq!(
            page.status, 200,
            "the forge's authorisation page: {}",
            page.body
        );
        let grant =
            authorize.replace("/login/oauth/authorize?", "/login/oauth/grant?") + "&login=" + login;
        let granted = self.get(&grant).await;
        assert_eq!(granted.status, 302, "{}", granted.body);
        granted.location.unwrap()
    }

    /// GET `path` (on the server) or a whole URL, with this visitor's cookies.
    pub async fn get(&mut self, path_or_url: &str) -> Seen {
        let url = self.resolve(path_or_url);
        let request = self.http.get(url);
        self.send(request).await
    }

    /// POST a form to `path` on the server.
    pub async fn post_form(&mut self, path: &str, form: &[(&str, &str)]) -> Seen {
        let request = self.http.post(self.resolve(path)).form(form);
        self.send(request).await
    }

    fn resolve(&self, path_or_url: &str) -> String {
        if path_or_url.starts_with("http") {
            path_or_url.to_owned()
        } else {
            self.bot.url(path_or_url)
        }
    }

    async fn send(&mut self, mut request: reqwest::RequestBuilder) -> Seen {
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect();
            request = request.header(COOKIE, jar.join("; "));
        }
        let answer = request.send().await.unwrap();
        for set in answer.headers().get_all(SET_COOKIE) {
            let set = set.to_str().unwrap();
            let (pair, attributes) = set.split_once(';').unwrap_or((set, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || attributes.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Seen {
            status: answer.status().as_u16(),
            location: answer
                .headers()
                .get(LOCATION)
                .map(|l| l.to_str().unwrap().to_owned()),
            body: answer.text().await.unwrap(),
        }
    }

    /// The CSRF token of this visitor's session (what its forms carry).
    pub fn csrf(&self) -> String {
        let cookie = &self.cookies["wavegate_session"];
        let payload = cookie.split('.').next().unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap();
        let session: serde_json::Value = serde_json::from_slice(&json).unwrap();
        session["csrf"].as_str().unwrap().to_owned()
    }

    /// Sets or replaces a cookie, as a hand-edited browser would.
    pub fn set_cookie(&mut self, name: &str, value: &str) {
        self.cookies.insert(name.to_owned(), value.to_owned());
    }

    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies.get(name).map(String::as_str)
    }
}
