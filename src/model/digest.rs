//! A digest as wavegate shows and stores it: `sha256:` and 64 lowercase hex
//! digits. Plan digests, change-set and stage-set digests, derivation
//! digests and the ledger's fact hashes are all of this one type, built by
//! [`super::canonical`] (or read back and checked), so a string that is not
//! a digest never stands where one is expected.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Which members a change set's (or a stage's, or a round's) digest binds,
/// as `[policy] digest_over` on the base says: every member, or only the
/// members whose plan changes something, so a member that changes nothing
/// moving does not move the digest an approval names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DigestOver {
    #[default]
    All,
    Changing,
}

impl DigestOver {
    pub(crate) fn is_all(&self) -> bool {
        *self == DigestOver::All
    }
}

/// The prefix of every digest.
pub const DIGEST_PREFIX: &str = "sha256:";

/// How many hex digits follow [`DIGEST_PREFIX`].
pub(crate) const DIGEST_HEX_DIGITS: usize = 64;

/// `sha256:<64 lowercase hex digits>`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

/// Why a text is not a [`Digest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a digest: a digest is `sha256:` and 64 lowercase hex digits")]
pub struct NotADigest(pub(crate) String);

impl Digest {
    /// The digest of these SHA-256 output bytes.
    pub(crate) fn from_sha256(bytes: &[u8; 32]) -> Self {
        Self(format!("{DIGEST_PREFIX}{}", hex::encode(bytes)))
    }

    /// The digest whose 64 hex digits are all `digit` (a placeholder such as
    /// the ledger's genesis, and test data).
    pub(crate) fn repeated(digit: char) -> Self {
        assert!(digit.is_ascii_hexdigit() && !digit.is_ascii_uppercase());
        Self(format!(
            "{DIGEST_PREFIX}{}",
            digit.to_string().repeat(DIGEST_HEX_DIGITS)
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits, without `sha256:`.
    pub(crate) fn hex(&self) -> &str {
        &self.0[DIGEST_PREFIX.len()..]
    }

    /// The first 12 hex digits, for tables where the full digest is also shown.
    pub(crate) fn short(&self) -> &str {
        &self.hex()[..12]
    }

    /// Whether `text` is a well-formed digest.
    pub(crate) fn is_digest(text: &str) -> bool {
        text.strip_prefix(DIGEST_PREFIX).is_some_and(|hex| {
            hex.len() == DIGEST_HEX_DIGITS
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    }
}

impl FromStr for Digest {
    type Err = NotADigest;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if Self::is_digest(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(NotADigest(text.to_owned()))
        }
    }
}

impl TryFrom<String> for Digest {
    type Error = NotADigest;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        if Self::is_digest(&text) {
            Ok(Self(text))
        } else {
            Err(NotADigest(text))
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for Digest {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Digest {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::try_from(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sha256_and_64_lowercase_hex_digits_are_a_digest() {
        let digest = Digest::repeated('a');
        assert_eq!(digest.as_str().parse::<Digest>().unwrap(), digest);
        assert_eq!(digest.short(), "aaaaaaaaaaaa");
        assert_eq!(digest.hex().len(), 64);
        for bad in [
            "",
            "sha256:abc",
            &digest.as_str().to_uppercase(),
            &digest.as_str().replace("sha256:", "sha512:"),
            &format!("{digest} "),
        ] {
            let error = bad.parse::<Digest>().unwrap_err().to_string();
            assert!(error.contains("is not a digest"), "{error}");
        }
    }

    #[test]
    fn a_record_with_a_malformed_digest_is_refused_when_read() {
        let json = serde_json::to_string(&Digest::repeated('0')).unwrap();
        assert_eq!(
            serde_json::from_str::<Digest>(&json).unwrap(),
            Digest::repeated('0')
        );
        let error = serde_json::from_str::<Digest>("\"sha256:00\"").unwrap_err();
        assert!(error.to_string().contains("is not a digest"), "{error}");
    }
}
