//! A value that must never be printed (a key, a token, a webhook secret),
//! as every setting and forge credential holds it.

use secrecy::{ExposeSecret, SecretString};
use std::fmt;

/// A value that must never be printed: `Debug` shows `Secret(…)`, and its
/// memory is zeroed when dropped (`secrecy`).
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}
