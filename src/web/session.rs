//! Signed cookies. A session cookie says who logged in with which forge,
//! until when, and the CSRF token that session's forms carry back; a login
//! cookie carries the OAuth `state` and where to go next across the forge's
//! round trip. Each is base64url(JSON) `.` base64url(HMAC-SHA256 of it) under
//! a key derived from the ledger key, so replicas (which share that key)
//! accept each other's cookies. Nothing in them is secret; nothing in them
//! can be changed or made to outlive its expiry.

use crate::model::{ForgeKind, UnixMs};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::time::Duration;

/// The cookie a logged-in visitor's requests carry.
pub(crate) const SESSION_COOKIE: &str = "wavegate_session";
/// The cookie that lives from "log in" to the forge's answer.
pub(crate) const LOGIN_COOKIE: &str = "wavegate_login";
/// How long a session lasts before its visitor logs in again.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long a visitor has to answer the forge's authorisation page.
pub(crate) const LOGIN_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// What the purpose of the derived key is called (changing it logs everyone out).
pub(crate) const KEY_PURPOSE: &str = "wavegate session cookies v1";

/// The key cookies are signed with.
#[derive(Clone)]
pub(crate) struct CookieKey([u8; 32]);

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(…)")
    }
}

/// A logged-in visitor, as their session cookie says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionCookie {
    pub(crate) forge: ForgeKind,
    pub(crate) login: String,
    pub(crate) csrf: String,
    pub(crate) expires: UnixMs,
}

/// A login under way: the `state` sent to the forge, and where to go after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LoginCookie {
    pub(crate) forge: ForgeKind,
    pub(crate) state: String,
    pub(crate) next: String,
    pub(crate) expires: UnixMs,
}

/// What a cookie carries: it expires, and its name is signed with it (so
/// one kind of cookie never opens as another).
pub(crate) trait Expiring {
    const NAME: &'static str;
    fn expires(&self) -> UnixMs;
}

impl Expiring for SessionCookie {
    const NAME: &'static str = SESSION_COOKIE;
    fn expires(&self) -> UnixMs {
        self.expires
    }
}

impl Expiring for LoginCookie {
    const NAME: &'static str = LOGIN_COOKIE;
    fn expires(&self) -> UnixMs {
        self.expires
    }
}

impl CookieKey {
    pub(crate) fn new(secret: [u8; 32]) -> Self {
        Self(secret)
    }

    fn mac(&self, name: &str, payload: &str) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(name.as_bytes());
        mac.update(b"=");
        mac.update(payload.as_bytes());
        mac
    }

    /// `value` as a cookie's value.
    pub(crate) fn seal<T: Serialize + Expiring>(&self, value: &T) -> String {
        let json = serde_json::to_vec(value).expect("a cookie serialises to JSON");
        let payload = URL_SAFE_NO_PAD.encode(json);
        let tag = URL_SAFE_NO_PAD.encode(self.mac(T::NAME, &payload).finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// What `sealed` carries, if this key signed it and it has not expired
    /// at `now`.
    pub(crate) fn open<T: DeserializeOwned + Expiring>(
        &self,
        sealed: &str,
        now: UnixMs,
    ) -> Option<T> {
        let (payload, tag) = sealed.split_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        self.mac(T::NAME, payload).verify_slice(&tag).ok()?;
        let value: T = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        (value.expires() > now).then_some(value)
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Lax, for the whole server,
/// Secure when the server is reached over https.
pub(crate) fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// A `Set-Cookie` value that removes cookie `name`.
pub(crate) fn clear_cookie(name: &str) -> String {
    format!("{name}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0")
}

/// Random text for a CSRF token or an OAuth `state`.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the kernel gives random bytes");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether two tokens are equal, in time that does not depend on where they
/// differ.
pub(crate) fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::in_tests::unix;

    fn session(expires: UnixMs) -> SessionCookie {
        SessionCookie {
            forge: ForgeKind::GitHub,
            login: "erin".into(),
            csrf: "token".into(),
            expires,
        }
    }

    #[test]
    fn a_sealed_session_opens_with_its_key_until_it_expires() {
        let key = CookieKey::new([7; 32]);
        let sealed = key.seal(&session(unix(100)));
        assert_eq!(key.open(&sealed, unix(99)), Some(session(unix(100))));
        assert_eq!(key.open::<SessionCookie>(&sealed, unix(100)), None);
    }

    #[test]
    fn a_cookie_changed_or_signed_by_another_key_does_not_open() {
        let key = CookieKey::new([7; 32]);
        let sealed = key.seal(&session(unix(100)));
        assert_eq!(
            CookieKey::new([8; 32]).open::<SessionCookie>(&sealed, unix(1)),
            None
        );
        let (_, tag) = sealed.split_once('.').unwrap();
        let mut admin = session(unix(100));
        admin.login = "root".into();
        let forged = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&admin).unwrap())
        );
        assert_eq!(key.open::<SessionCookie>(&forged, unix(1)), None);
        for garbage in ["", ".", "x.y", "no-dot"] {
            assert_eq!(key.open::<SessionCookie>(garbage, unix(1)), None);
        }
    }

    #[test]
    fn a_login_cookie_does_not_open_as_a_session() {
        let key = CookieKey::new([7; 32]);
        let login = LoginCookie {
            forge: ForgeKind::Forgejo,
            state: "s".into(),
            next: "/repos".into(),
            expires: unix(100),
        };
        assert_eq!(key.open::<SessionCookie>(&key.seal(&login), unix(1)), None);
    }

    #[test]
    fn cookies_are_read_from_every_cookie_header() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("cookie", "a=1; wavegate_session=abc.def".parse().unwrap());
        headers.append("cookie", "b=2".parse().unwrap());
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc.def"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
    }
}
