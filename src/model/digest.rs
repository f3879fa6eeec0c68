//! A digest as wavegate shows and records it: `sha256:` and 64 lowercase hex
//! digits of canonical JSON ([`super::canonical`]).

use super::canonical::{is_digest, short_digest};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A well-formed `sha256:<64 hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, for tables where the full digest is also shown.
    pub fn short(&self) -> &str {
        short_digest(&self.0)
    }
}

impl FromStr for Digest {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if is_digest(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!(
                "`{text}` is not a digest (`sha256:` and 64 lowercase hex digits)"
            ))
        }
    }
}

impl TryFrom<String> for Digest {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> Self {
        digest.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_parses_only_in_full_and_lowercase() {
        let hex = "0123456789abcdef".repeat(4);
        let digest: Digest = format!("sha256:{hex}").parse().unwrap();
        assert_eq!(digest.short(), "0123456789ab");
        assert_eq!(digest.to_string(), format!("sha256:{hex}"));
        for bad in [
            hex.clone(),
            format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha512:{hex}"),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&digest).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), digest);
        assert!(serde_json::from_str::<Digest>("\"sha256:00\"").is_err());
    }
}
