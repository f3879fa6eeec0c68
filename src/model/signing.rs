//! The server's ledger signing key and its public half: every fact the
//! server appends is signed with it, and `wavegate ledger verify --key`
//! checks the signatures with the public half. Here, under the config that
//! loads the key and the ledger that uses it.

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use std::fmt;
use std::str::FromStr;

pub(crate) const KEY_PREFIX: &str = "ed25519:";
pub(crate) const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A key that is not one, or a signature that cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("`{0}` is not a ledger public key; give it as `wavegate ledger key` prints it: ed25519:<base64 of 32 bytes>")]
    NotAPublicKey(String),
    #[error("not an Ed25519 private key in PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`): {0}")]
    NotAPrivateKey(String),
}

/// The server's ledger signing key. Nothing but the server holds it; its
/// `Debug` shows the public half only.
pub struct LedgerKey(SigningKey);

impl LedgerKey {
    /// The key of a 32-byte secret seed (from the system's random source).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(seed))
    }

    /// Reads PKCS#8 PEM, as `openssl genpkey -algorithm ed25519` writes it.
    pub(crate) fn from_pkcs8_pem(text: &str) -> Result<Self, KeyError> {
        use pkcs8::DecodePrivateKey as _;
        SigningKey::from_pkcs8_pem(text.trim())
            .map(Self)
            .map_err(|e| KeyError::NotAPrivateKey(e.to_string()))
    }

    /// The key as PKCS#8 PEM (wiped from memory when dropped).
    pub(crate) fn to_pkcs8_pem(&self) -> pkcs8::der::zeroize::Zeroizing<String> {
        use pkcs8::EncodePrivateKey as _;
        self.0
            .to_pkcs8_pem(pkcs8::LineEnding::LF)
            .expect("an Ed25519 key encodes as PKCS#8")
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// A secret of 32 bytes for another use than signing facts, named by
    /// `purpose` (HMAC-SHA256 of it under the key's seed): servers sharing
    /// the ledger key share it, and it tells nothing of the key.
    pub(crate) fn derived_secret(&self, purpose: &str) -> [u8; 32] {
        use hmac::{Hmac, Mac as _};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(self.0.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// `ed25519:` + base64 of the signature of `hash` (its UTF-8 text, e.g.
    /// `sha256:…`).
    pub(crate) fn sign(&self, message: &str) -> String {
        let signature = self.0.sign(message.as_bytes());
        format!("{KEY_PREFIX}{}", BASE64.encode(signature.to_bytes()))
    }
}

impl fmt::Debug for LedgerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LedgerKey({})", self.public())
    }
}

/// The public half of a ledger key: what `wavegate ledger verify --key`
/// checks signatures with. Shown as `ed25519:<base64 of its 32 bytes>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Whether `sig` is this key's signature of `message` (a fact's hash).
    /// Strict: a malleated signature or a weak key does not verify.
    pub(crate) fn verifies(&self, message: &str, sig: &str) -> bool {
        let Some(bytes) = sig
            .strip_prefix(KEY_PREFIX)
            .and_then(|b64| BASE64.decode(b64).ok())
        else {
            return false;
        };
        let Ok(signature) = ed25519_dalek::Signature::from_slice(&bytes) else {
            return false;
        };
        self.0.verify_strict(message.as_bytes(), &signature).is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{KEY_PREFIX}{}", BASE64.encode(self.0.as_bytes()))
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let not_one = || KeyError::NotAPublicKey(text.to_owned());
        let bytes: [u8; 32] = text
            .strip_prefix(KEY_PREFIX)
            .and_then(|b64| BASE64.decode(b64).ok())
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(not_one)?;
        VerifyingKey::from_bytes(&bytes)
            .ok()
            .filter(|key| !key.is_weak())
            .map(Self)
            .ok_or_else(not_one)
    }
}
