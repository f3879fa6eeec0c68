//! Webhook intake before any parsing: which forge sent a delivery (from its
//! headers), whether its HMAC-SHA256 signature matches a configured secret,
//! and the target a delivery id is deduplicated within. Pure functions; the
//! axum extractor that calls them lives with the server.

use super::{Event, ForgeKind};
use crate::config::settings::Secret;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

/// What a delivery's headers say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryHeaders {
    pub(crate) sender: ForgeKind,
    /// `X-GitHub-Event`, or Forgejo's `X-Forgejo-Event-Type` (finer than `X-Forgejo-Event`).
    pub event_type: String,
    pub(crate) delivery_id: String,
    /// The raw signature header (`sha256=<hex>` for GitHub, bare hex for
    /// Forgejo); `None` when absent or empty.
    pub(crate) signature: Option<String>,
}

/// Headers that do not describe a delivery wavegate can take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error(
        "a {sent_by} delivery was posted to the {endpoint} webhook endpoint: \
         point the {sent_by} webhook at wavegate's {sent_by} endpoint"
    )]
    WrongEndpoint {
        sent_by: ForgeKind,
        endpoint: ForgeKind,
    },
    #[error("the delivery has no `{header}` header: is this a {forge} webhook delivery?")]
    Missing {
        forge: ForgeKind,
        header: &'static str,
    },
    #[error("the `{header}` header is not visible ASCII")]
    NotText { header: &'static str },
}

/// A delivery whose signature cannot be trusted; each says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureError {
    #[error(
        "the delivery carries no signature: set the webhook secret on the forge to the value \
         of {}",
        secret_variable(*.0)
    )]
    Missing(ForgeKind),
    #[error(
        "the signature header is malformed ({problem}): the forge should send {}",
        expected_format(*.forge)
    )]
    Malformed { forge: ForgeKind, problem: String },
    #[error(
        "the signature matches none of the configured secrets: the webhook secret on the forge \
         differs from {}",
        secret_variable(*.0)
    )]
    Mismatch(ForgeKind),
    #[error(
        "no {0} webhook secret is configured, so {0} deliveries are refused: set {variable}",
        variable = secret_variable(*.0)
    )]
    NoSecretConfigured(ForgeKind),
}

fn secret_variable(kind: ForgeKind) -> &'static str {
    match kind {
        ForgeKind::GitHub => "WAVEGATE_GITHUB_WEBHOOK_SECRET",
        ForgeKind::Forgejo => "WAVEGATE_FORGEJO_WEBHOOK_SECRET",
    }
}

fn expected_format(kind: ForgeKind) -> &'static str {
    match kind {
        ForgeKind::GitHub => "`X-Hub-Signature-256: sha256=<64 hex digits>`",
        ForgeKind::Forgejo => "`X-Forgejo-Signature: <64 hex digits>`",
    }
}

/// Reads the delivery headers for the endpoint of `expected`. Forgejo and
/// Gitea also send GitHub's headers, so their own `X-Forgejo-*` /
/// `X-Gitea-*` headers are looked for first.
pub fn read_headers(
    expected: ForgeKind,
    headers: &HeaderMap,
) -> Result<DeliveryHeaders, HeaderError> {
    let sent_by = if headers.keys().any(|name| {
        let name = name.as_str();
        name.starts_with("x-forgejo-") || name.starts_with("x-gitea-")
    }) {
        Some(ForgeKind::Forgejo)
    } else if headers.contains_key("x-github-event") {
        Some(ForgeKind::GitHub)
    } else {
        None
    };
    if let Some(sent_by) = sent_by.filter(|&s| s != expected) {
        return Err(HeaderError::WrongEndpoint {
            sent_by,
            endpoint: expected,
        });
    }
    let required = |names: &[&'static str]| -> Result<String, HeaderError> {
        first_present(headers, names)?.ok_or(HeaderError::Missing {
            forge: expected,
            header: names[0],
        })
    };
    match expected {
        ForgeKind::GitHub => Ok(DeliveryHeaders {
            sender: ForgeKind::GitHub,
            event_type: required(&["X-GitHub-Event"])?,
            delivery_id: required(&["X-GitHub-Delivery"])?,
            signature: signature_header(ForgeKind::GitHub, headers),
        }),
        ForgeKind::Forgejo => Ok(DeliveryHeaders {
            sender: ForgeKind::Forgejo,
            event_type: required(&[
                "X-Forgejo-Event-Type",
                "X-Gitea-Event-Type",
                "X-Forgejo-Event",
                "X-Gitea-Event",
            ])?,
            delivery_id: required(&["X-Forgejo-Delivery", "X-Gitea-Delivery"])?,
            signature: signature_header(ForgeKind::Forgejo, headers),
        }),
    }
}

/// The signature a forge puts on its deliveries to `endpoint`, if any (an
/// empty or unreadable header counts as none). Read on its own so the
/// signature can be checked before any other header is looked at.
pub(crate) fn signature_header(endpoint: ForgeKind, headers: &HeaderMap) -> Option<String> {
    let names: &[&'static str] = match endpoint {
        ForgeKind::GitHub => &["X-Hub-Signature-256"],
        ForgeKind::Forgejo => &["X-Forgejo-Signature", "X-Gitea-Signature"],
    };
    names.iter().find_map(|name| {
        let text = headers.get(*name)?.to_str().ok()?.trim();
        (!text.is_empty()).then(|| text.to_owned())
    })
}

/// The first of `names` with a non-empty value; an empty header counts as absent.
fn first_present(
    headers: &HeaderMap,
    names: &[&'static str],
) -> Result<Option<String>, HeaderError> {
    for &name in names {
        let Some(value) = headers.get(name) else {
            continue;
        };
        let text = value
            .to_str()
            .map_err(|_| HeaderError::NotText { header: name })?
            .trim();
        if !text.is_empty() {
            return Ok(Some(text.to_owned()));
        }
    }
    Ok(None)
}

/// Checks the HMAC-SHA256 of the raw body against every configured secret
/// (old and new side by side while one is rotated), in constant time.
pub(crate) fn verify_signature(
    kind: ForgeKind,
    signature: Option<&str>,
    body: &[u8],
    secrets: &[Secret],
) -> Result<(), SignatureError> {
    let secrets: Vec<&Secret> = secrets.iter().filter(|s| !s.expose().is_empty()).collect();
    if secrets.is_empty() {
        return Err(SignatureError::NoSecretConfigured(kind));
    }
    let signature = signature
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or(SignatureError::Missing(kind))?;
    let hex_digest = match kind {
        ForgeKind::GitHub => {
            signature
                .strip_prefix("sha256=")
                .ok_or_else(|| SignatureError::Malformed {
                    forge: kind,
                    problem: "it does not start with `sha256=`".to_owned(),
                })?
        }
        ForgeKind::Forgejo => signature,
    };
    let digest = hex::decode(hex_digest).map_err(|e| SignatureError::Malformed {
        forge: kind,
        problem: format!("not hex: {e}"),
    })?;
    if digest.len() != 32 {
        return Err(SignatureError::Malformed {
            forge: kind,
            problem: format!("{} bytes where HMAC-SHA256 has 32", digest.len()),
        });
    }
    let matches = |secret: &&Secret| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
            .expect("HMAC accepts keys of any length");
        mac.update(body);
        mac.verify_slice(&digest).is_ok()
    };
    if secrets.iter().any(matches) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch(kind))
    }
}

#[derive(Deserialize)]
struct DedupeProbe {
    installation: Option<IdProbe>,
    repository: Option<IdProbe>,
    hook_id: Option<u64>,
}

#[derive(Deserialize)]
struct IdProbe {
    id: Option<u64>,
}

/// What a delivery id is unique within: `X-GitHub-Delivery` is shared by
/// every hook that receives the same event (and kept on redelivery), so the
/// store deduplicates on (target, delivery id). The target is
/// `installation:<id>` for a GitHub App delivery, else `repo:<id>`, else
/// `hook:<id>`, else `forge`.
pub fn dedupe_target(kind: ForgeKind, body: &[u8]) -> String {
    let Ok(probe) = serde_json::from_slice::<DedupeProbe>(body) else {
        return "forge".to_owned();
    };
    let installation = match kind {
        ForgeKind::GitHub => probe.installation.and_then(|i| i.id),
        ForgeKind::Forgejo => None,
    };
    scope(
        installation,
        probe.repository.and_then(|r| r.id),
        probe.hook_id,
    )
}

/// [`dedupe_target`] of a delivery that read as `event`, without reading
/// the body again when the event names its installation or repository: it
/// read them from the same fields of the same body, typed alike, so for
/// every payload a forge sends the answer is the same (a test holds it to
/// the fixtures). Only a body the probe cannot read as a whole although the
/// event read, say with a `hook_id` that is not a number, gets its
/// repository's target where the probe said `forge`. Other events are probed.
pub fn dedupe_target_of(kind: ForgeKind, event: &Event, body: &[u8]) -> String {
    let repo = match event {
        Event::PullRequest { repo, .. }
        | Event::Comment { repo, .. }
        | Event::Review { repo, .. }
        | Event::CheckRunRerequested { repo, .. } => repo,
        Event::Installation { installation, .. } if kind == ForgeKind::GitHub => {
            return scope(Some(*installation), None, None);
        }
        Event::Installation { .. } | Event::Ping => return dedupe_target(kind, body),
    };
    let installation = repo.installation.filter(|_| kind == ForgeKind::GitHub);
    scope(installation, Some(repo.forge_id), None)
}

fn scope(installation: Option<u64>, repository: Option<u64>, hook: Option<u64>) -> String {
    if let Some(id) = installation {
        format!("installation:{id}")
    } else if let Some(id) = repository {
        format!("repo:{id}")
    } else if let Some(id) = hook {
        format!("hook:{id}")
    } else {
        "forge".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    const GITHUB_VECTOR_SECRET: &str = "It's a Secret to Everybody";
    const GITHUB_VECTOR_BODY: &[u8] = b"Hello, World!";
    const GITHUB_VECTOR_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn secrets(values: &[&str]) -> Vec<Secret> {
        values.iter().map(|v| Secret::new(*v)).collect()
    }

    #[test]
    fn githubs_documented_vector_verifies() {
        let result = verify_signature(
            ForgeKind::GitHub,
            Some(GITHUB_VECTOR_SIGNATURE),
            GITHUB_VECTOR_BODY,
            &secrets(&[GITHUB_VECTOR_SECRET]),
        );
        assert_eq!(result, Ok(()));
    }

    #[test]
    fn a_changed_body_no_longer_verifies() {
        let result = verify_signature(
            ForgeKind::GitHub,
            Some(GITHUB_VECTOR_SIGNATURE),
            b"Hello, World?",
            &secrets(&[GITHUB_VECTOR_SECRET]),
        );
        assert_eq!(result, Err(SignatureError::Mismatch(ForgeKind::GitHub)));
    }

    #[test]
    fn during_rotation_the_second_secret_matches() {
        let result = verify_signature(
            ForgeKind::GitHub,
            Some(GITHUB_VECTOR_SIGNATURE),
            GITHUB_VECTOR_BODY,
            &secrets(&["the old one", GITHUB_VECTOR_SECRET]),
        );
        assert_eq!(result, Ok(()));
    }

    #[test]
    fn forgejo_signs_with_bare_hex() {
        let bare = GITHUB_VECTOR_SIGNATURE.trim_start_matches("sha256=");
        let ok = verify_signature(
            ForgeKind::Forgejo,
            Some(bare),
            GITHUB_VECTOR_BODY,
            &secrets(&[GITHUB_VECTOR_SECRET]),
        );
        assert_eq!(ok, Ok(()));
        let prefixed = verify_signature(
            ForgeKind::Forgejo,
            Some(GITHUB_VECTOR_SIGNATURE),
            GITHUB_VECTOR_BODY,
            &secrets(&[GITHUB_VECTOR_SECRET]),
        );
        assert!(matches!(prefixed, Err(SignatureError::Malformed { .. })));
    }

    #[test]
    fn an_empty_signature_header_is_refused_as_missing() {
        let map = headers(&[
            ("X-GitHub-Event", "ping"),
            ("X-GitHub-Delivery", "d-1"),
            ("X-Hub-Signature-256", ""),
        ]);
        let delivery = read_headers(ForgeKind::GitHub, &map).unwrap();
        assert_eq!(delivery.signature, None);
        let err = verify_signature(
            ForgeKind::GitHub,
            delivery.signature.as_deref(),
            b"{}",
            &secrets(&["s"]),
        )
        .unwrap_err();
        assert_eq!(err, SignatureError::Missing(ForgeKind::GitHub));
        assert!(err.to_string().contains("WAVEGATE_GITHUB_WEBHOOK_SECRET"));
    }

    #[test]
    fn without_a_configured_secret_every_delivery_is_refused() {
        for configured in [secrets(&[]), secrets(&[""])] {
            let err =
                verify_signature(ForgeKind::Forgejo, Some("00"), b"{}", &configured).unwrap_err();
            assert_eq!(err, SignatureError::NoSecretConfigured(ForgeKind::Forgejo));
            assert!(err.to_string().contains("WAVEGATE_FORGEJO_WEBHOOK_SECRET"));
        }
    }

    #[test]
    fn a_signature_without_its_prefix_or_not_hex_is_malformed() {
        for bad in [
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=zz",
            "sha256=7571",
        ] {
            let err = verify_signature(
                ForgeKind::GitHub,
                Some(bad),
                GITHUB_VECTOR_BODY,
                &secrets(&[GITHUB_VECTOR_SECRET]),
            )
            .unwrap_err();
            assert!(
                matches!(err, SignatureError::Malformed { .. }),
                "{bad}: {err}"
            );
        }
    }

    fn forgejo_delivery_headers() -> Vec<(&'static str, &'static str)> {
        vec![
            ("X-GitHub-Event", "pull_request"),
            ("X-GitHub-Delivery", "github-style-id"),
            ("X-Hub-Signature-256", "sha256=aa"),
            ("X-Gitea-Event", "pull_request"),
            ("X-Gitea-Event-Type", "pull_request_sync"),
            ("X-Gitea-Delivery", "gitea-id"),
            ("X-Gitea-Signature", "bb"),
            ("X-Forgejo-Event", "pull_request"),
            ("X-Forgejo-Event-Type", "pull_request_sync"),
            ("X-Forgejo-Delivery", "forgejo-id"),
            ("X-Forgejo-Signature", "cc"),
        ]
    }

    #[test]
    fn forgejo_headers_win_over_the_github_ones_it_also_sends() {
        let delivery =
            read_headers(ForgeKind::Forgejo, &headers(&forgejo_delivery_headers())).unwrap();
        assert_eq!(
            delivery,
            DeliveryHeaders {
                sender: ForgeKind::Forgejo,
                event_type: "pull_request_sync".into(),
                delivery_id: "forgejo-id".into(),
                signature: Some("cc".into()),
            }
        );
    }

    #[test]
    fn gitea_headers_alone_are_enough() {
        let gitea_only: Vec<_> = forgejo_delivery_headers()
            .into_iter()
            .filter(|(name, _)| !name.starts_with("X-Forgejo"))
            .collect();
        let delivery = read_headers(ForgeKind::Forgejo, &headers(&gitea_only)).unwrap();
        assert_eq!(delivery.event_type, "pull_request_sync");
        assert_eq!(delivery.delivery_id, "gitea-id");
        assert_eq!(delivery.signature.as_deref(), Some("bb"));
    }

    #[test]
    fn a_forgejo_delivery_at_the_github_endpoint_says_where_to_go() {
        let err =
            read_headers(ForgeKind::GitHub, &headers(&forgejo_delivery_headers())).unwrap_err();
        assert_eq!(
            err,
            HeaderError::WrongEndpoint {
                sent_by: ForgeKind::Forgejo,
                endpoint: ForgeKind::GitHub
            }
        );
        assert!(err.to_string().contains("forgejo endpoint"), "{err}");
    }

    #[test]
    fn a_github_delivery_at_the_forgejo_endpoint_is_refused() {
        let map = headers(&[("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", "d")]);
        let err = read_headers(ForgeKind::Forgejo, &map).unwrap_err();
        assert!(matches!(
            err,
            HeaderError::WrongEndpoint {
                sent_by: ForgeKind::GitHub,
                ..
            }
        ));
    }

    #[test]
    fn a_missing_delivery_id_names_the_header() {
        let map = headers(&[("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", " ")]);
        let err = read_headers(ForgeKind::GitHub, &map).unwrap_err();
        assert_eq!(
            err,
            HeaderError::Missing {
                forge: ForgeKind::GitHub,
                header: "X-GitHub-Delivery"
            }
        );
    }

    #[test]
    fn no_event_header_at_all_names_the_expected_one() {
        let err = read_headers(ForgeKind::Forgejo, &HeaderMap::new()).unwrap_err();
        assert!(err.to_string().contains("X-Forgejo-Event-Type"), "{err}");
    }

    #[test]
    fn redeliveries_share_a_target_that_prefers_the_installation() {
        let app = br#"{"installation":{"id":12},"repository":{"id":34}}"#;
        assert_eq!(dedupe_target(ForgeKind::GitHub, app), "installation:12");
        assert_eq!(dedupe_target(ForgeKind::Forgejo, app), "repo:34");
        let hook = br#"{"hook_id":56,"repository":null}"#;
        assert_eq!(dedupe_target(ForgeKind::GitHub, hook), "hook:56");
        assert_eq!(dedupe_target(ForgeKind::GitHub, b"{}"), "forge");
        assert_eq!(dedupe_target(ForgeKind::GitHub, b"not json"), "forge");
    }
}
