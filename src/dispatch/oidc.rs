//! A GitHub Actions run's identity: the OIDC token its job asks GitHub for
//! (`permissions: id-token: write`), checked against what the bot
//! dispatched.
//!
//! [`verify`] is the whole decision and reads nothing: the token, the
//! issuer's keys and the time are given. The token must be a JWT signed
//! RS256 — `none`, HMAC and every other algorithm are refused before a key
//! is looked at, so a token "signed" with the issuer's public key as an
//! HMAC secret gets nowhere — with the issuer's key its header's `kid`
//! names. Keys come from the issuer's key set only, never from the token
//! (its `jku`, `x5u` or `jwk` are not read). Then `iss` and `aud` exactly,
//! `exp`, `nbf` and `iat` within [`LEEWAY_SECS`], and every field of
//! [`ExpectedRun`] equal to the claim. A refusal names the claim, what was
//! expected and what came, for the bot's log; claims are read only once the
//! signature checked out.
//!
//! [`Jwks`] reads the issuer's keys (`{issuer}/.well-known/openid-configuration`,
//! then its `jwks_uri`) and keeps them. A token naming a key not held
//! reads them again, at most once a minute (a failed read counts: a minute
//! later it is tried again); keys held for an hour are read again when next
//! used, and kept if that read fails, so an outage of the issuer does not
//! stop runs whose key is known.

use crate::forge::retry::{send_with_retry, Failure, Reply, RetryPolicy};
use crate::model::UnixMs;
use anyhow::Context;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// GitHub Actions' issuer (github.com; GitHub Enterprise Server has its
/// own, `https://HOST/_services/token`).
pub const GITHUB_ISSUER: &str = "https://token.actions.githubusercontent.com";

/// How far apart the bot's clock and the issuer's may be: a token counts
/// as expired this long after its `exp`, and as issued this long before
/// its `iat` and `nbf`.
pub const LEEWAY_SECS: u64 = 60;

/// How soon after reading the keys a token naming an unknown key reads
/// them again.
const REREAD_UNKNOWN_AFTER: Duration = Duration::from_secs(60);

/// How long keys are used before they are read again.
const KEYS_KEPT_FOR: Duration = Duration::from_secs(3600);

/// What the bot dispatched: the run a token must be of. Names as GitHub
/// spells them (a webhook's `full_name`); every field is compared exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedRun {
    /// `iss`: the issuer the keys are read from, e.g. [`GITHUB_ISSUER`].
    pub issuer: String,
    /// `aud`: the audience the workflow asks its token for.
    pub audience: String,
    /// `repository`: `owner/name`.
    pub repository: String,
    /// `environment`: the forge environment the job runs in; None for a
    /// job without one (a token naming one is then refused too).
    pub environment: Option<String>,
    /// `run_id`: the run the dispatch started.
    pub run_id: u64,
    /// `job_workflow_ref`: the workflow file as the base branch has it,
    /// e.g. `octo/infra/.github/workflows/wavegate.yml@refs/heads/main`.
    pub job_workflow_ref: String,
    /// `sha`: the commit the run was dispatched for, when the bot knows it.
    pub sha: Option<String>,
}

/// What a verified token says of its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunClaims {
    /// `owner/name`.
    pub repository: String,
    pub environment: Option<String>,
    pub run_id: u64,
    /// 1, then one more per re-run of the same run.
    pub run_attempt: u32,
    pub sha: String,
    /// `ref`: the ref the run was started on, e.g. `refs/heads/main`.
    pub git_ref: String,
    pub job_workflow_ref: String,
    /// `workflow_dispatch` for a run the bot started.
    pub event_name: String,
    /// Whose action started the run (for a dispatch, the bot's App).
    pub actor: String,
    /// e.g. `repo:octo/infra:environment:prod`.
    pub sub: String,
    /// Issued at, unix seconds.
    pub iat: u64,
    /// Expires at, unix seconds.
    pub exp: u64,
}

/// Why a token is not the dispatched run's. Each names the claim, what the
/// bot expected and what the token holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcRefusal {
    #[error("not a run token: {0}")]
    Malformed(String),
    #[error("alg: the token is signed {found}; only RS256 is accepted")]
    WrongAlgorithm { found: String },
    #[error("kid: the token names key `{kid}`, which is not among the issuer's RS256 signing keys ({known})")]
    UnknownKey { kid: String, known: String },
    #[error("the token's signature does not check out with the issuer's key `{kid}`")]
    BadSignature { kid: String },
    #[error("iss: expected `{expected}`, the token is issued by `{found}`")]
    WrongIssuer { expected: String, found: String },
    #[error("aud: expected `{expected}`, the token is for {found}")]
    WrongAudience { expected: String, found: String },
    #[error(
        "exp: the token expired at {exp} (unix time); it is {now}, past the {LEEWAY_SECS} s leeway"
    )]
    Expired { exp: u64, now: u64 },
    #[error("{claim}: the token holds from {at} (unix time); it is {now}, before that by more than the {LEEWAY_SECS} s leeway")]
    NotYetValid {
        claim: &'static str,
        at: u64,
        now: u64,
    },
    #[error("repository: expected `{expected}`, the token is of `{found}`")]
    WrongRepository { expected: String, found: String },
    #[error("environment: expected {}, the token is of {}", shown(.expected), shown(.found))]
    WrongEnvironment {
        expected: Option<String>,
        found: Option<String>,
    },
    #[error("run_id: expected run {expected}, the token is of run {found}")]
    WrongRun { expected: u64, found: u64 },
    #[error("job_workflow_ref: expected `{expected}`, the token is of `{found}` (only the workflow as the base branch has it may hand a job back)")]
    WrongWorkflow { expected: String, found: String },
    #[error("sha: expected `{expected}`, the token is of `{found}`")]
    WrongSha { expected: String, found: String },
}

fn shown(environment: &Option<String>) -> String {
    match environment {
        Some(name) => format!("environment `{name}`"),
        None => "no environment".to_owned(),
    }
}

/// The issuer's keys could not be read: a token is then neither accepted
/// nor refused, and its caller tries again later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the OIDC keys of {issuer} could not be read from {url}: {why}")]
pub struct JwksError {
    pub issuer: String,
    pub url: String,
    pub why: String,
}

/// What [`Jwks::verify`] can answer besides the run's claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    /// Not the dispatched run's token: refused, and logged.
    #[error("run token refused: {0}")]
    Refused(#[from] OidcRefusal),
    /// The keys to judge it by could not be read.
    #[error(transparent)]
    Keys(#[from] JwksError),
}

#[derive(Deserialize)]
struct WireHeader {
    alg: Option<String>,
    kid: Option<String>,
}

/// The claims as they come; each required one is checked for in turn.
#[derive(Deserialize)]
struct WireClaims {
    iss: Option<String>,
    aud: Option<Audience>,
    exp: Option<u64>,
    nbf: Option<u64>,
    iat: Option<u64>,
    repository: Option<String>,
    environment: Option<String>,
    run_id: Option<Counted>,
    run_attempt: Option<Counted>,
    sha: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    job_workflow_ref: Option<String>,
    event_name: Option<String>,
    actor: Option<String>,
    sub: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// A number GitHub sends as a string (`"run_id": "5632"`), or as a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Counted {
    Text(String),
    Number(u64),
}

impl Counted {
    fn value<T: TryFrom<u64>>(self, claim: &str) -> Result<T, OidcRefusal> {
        let number = match self {
            Counted::Number(n) => Some(n),
            Counted::Text(text) => text.parse().ok(),
        };
        number
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| OidcRefusal::Malformed(format!("the `{claim}` claim is not a number")))
    }
}

fn required<T>(value: Option<T>, claim: &str) -> Result<T, OidcRefusal> {
    value.ok_or_else(|| OidcRefusal::Malformed(format!("the token has no `{claim}` claim")))
}

/// The key a token's header names, once it is signed RS256: what
/// [`Jwks::keys_for`] is asked for. Nothing else of the token is trusted
/// yet.
pub fn signing_key_id(token: &str) -> Result<String, OidcRefusal> {
    let malformed = |why: String| OidcRefusal::Malformed(why);
    let parts: Vec<&str> = token.split('.').collect();
    let [header, _, _] = parts.as_slice() else {
        return Err(malformed(
            "a JWT is three base64url parts joined by dots".into(),
        ));
    };
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|e| malformed(format!("its header is not base64url: {e}")))?;
    let header: WireHeader = serde_json::from_slice(&header)
        .map_err(|e| malformed(format!("its header is not a JWT header: {e}")))?;
    match header.alg.as_deref() {
        Some("RS256") => {}
        Some(other) => {
            return Err(OidcRefusal::WrongAlgorithm {
                found: other.to_owned(),
            })
        }
        None => return Err(malformed("its header names no algorithm (`alg`)".into())),
    }
    header
        .kid
        .filter(|kid| !kid.is_empty())
        .ok_or_else(|| malformed("its header names no key (`kid`)".into()))
}

/// The RS256 signing key `kid` of `keys`, if it holds one.
fn rs256_key(keys: &JwkSet, kid: &str) -> Result<DecodingKey, OidcRefusal> {
    let usable = |jwk: &Jwk| -> Option<DecodingKey> {
        let AlgorithmParameters::RSA(rsa) = &jwk.algorithm else {
            return None;
        };
        let for_rs256 = matches!(jwk.common.key_algorithm, None | Some(KeyAlgorithm::RS256));
        let for_signing = matches!(
            jwk.common.public_key_use,
            None | Some(PublicKeyUse::Signature)
        );
        (for_rs256 && for_signing)
            .then(|| DecodingKey::from_rsa_components(&rsa.n, &rsa.e).ok())
            .flatten()
    };
    keys.keys
        .iter()
        .filter(|jwk| jwk.common.key_id.as_deref() == Some(kid))
        .find_map(usable)
        .ok_or_else(|| {
            let known: Vec<&str> = keys
                .keys
                .iter()
                .filter(|jwk| usable(jwk).is_some())
                .filter_map(|jwk| jwk.common.key_id.as_deref())
                .collect();
            OidcRefusal::UnknownKey {
                kid: kid.to_owned(),
                known: if known.is_empty() {
                    "it has none".to_owned()
                } else {
                    known.join(", ")
                },
            }
        })
}

/// The claims of `token` if it is a token of the run `expected` describes,
/// signed with one of `keys`, valid at `now` (see the module doc).
pub fn verify(
    token: &str,
    keys: &JwkSet,
    expected: &ExpectedRun,
    now: UnixMs,
) -> Result<RunClaims, OidcRefusal> {
    let kid = signing_key_id(token)?;
    let key = rs256_key(keys, &kid)?;
    // The signature only: the claims are checked below, against `now`.
    let mut validation = Validation::new(Algorithm::RS256);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    let claims = match jsonwebtoken::decode::<WireClaims>(token, &key, &validation) {
        Ok(data) => data.claims,
        Err(e) if *e.kind() == ErrorKind::InvalidSignature => {
            return Err(OidcRefusal::BadSignature { kid })
        }
        Err(e) => return Err(OidcRefusal::Malformed(e.to_string())),
    };
    let now = u64::try_from(now.millis().div_euclid(1000)).unwrap_or(0);

    let iss = required(claims.iss, "iss")?;
    if iss != expected.issuer {
        return Err(OidcRefusal::WrongIssuer {
            expected: expected.issuer.clone(),
            found: iss,
        });
    }
    match required(claims.aud, "aud")? {
        Audience::One(aud) if aud == expected.audience => {}
        Audience::Many(aud) if aud == [expected.audience.as_str()] => {}
        Audience::One(aud) => {
            return Err(OidcRefusal::WrongAudience {
                expected: expected.audience.clone(),
                found: format!("`{aud}`"),
            })
        }
        Audience::Many(aud) => {
            return Err(OidcRefusal::WrongAudience {
                expected: expected.audience.clone(),
                found: format!("{aud:?}"),
            })
        }
    }
    let exp = required(claims.exp, "exp")?;
    if now >= exp.saturating_add(LEEWAY_SECS) {
        return Err(OidcRefusal::Expired { exp, now });
    }
    let iat = required(claims.iat, "iat")?;
    for (claim, at) in [("nbf", claims.nbf), ("iat", Some(iat))] {
        if let Some(at) = at.filter(|at| *at > now.saturating_add(LEEWAY_SECS)) {
            return Err(OidcRefusal::NotYetValid { claim, at, now });
        }
    }

    let repository = required(claims.repository, "repository")?;
    if repository != expected.repository {
        return Err(OidcRefusal::WrongRepository {
            expected: expected.repository.clone(),
            found: repository,
        });
    }
    let job_workflow_ref = required(claims.job_workflow_ref, "job_workflow_ref")?;
    if job_workflow_ref != expected.job_workflow_ref {
        return Err(OidcRefusal::WrongWorkflow {
            expected: expected.job_workflow_ref.clone(),
            found: job_workflow_ref,
        });
    }
    if claims.environment != expected.environment {
        return Err(OidcRefusal::WrongEnvironment {
            expected: expected.environment.clone(),
            found: claims.environment,
        });
    }
    let run_id: u64 = required(claims.run_id, "run_id")?.value("run_id")?;
    if run_id != expected.run_id {
        return Err(OidcRefusal::WrongRun {
            expected: expected.run_id,
            found: run_id,
        });
    }
    let sha = required(claims.sha, "sha")?;
    if let Some(expected) = expected.sha.as_ref().filter(|e| **e != sha) {
        return Err(OidcRefusal::WrongSha {
            expected: expected.clone(),
            found: sha,
        });
    }
    Ok(RunClaims {
        repository,
        environment: claims.environment,
        run_id,
        run_attempt: required(claims.run_attempt, "run_attempt")?.value("run_attempt")?,
        sha,
        git_ref: required(claims.git_ref, "ref")?,
        job_workflow_ref,
        event_name: required(claims.event_name, "event_name")?,
        actor: required(claims.actor, "actor")?,
        sub: required(claims.sub, "sub")?,
        iat,
        exp,
    })
}

/// An issuer's signing keys, read over HTTP and kept (see the module doc).
#[derive(Debug)]
pub struct Jwks {
    issuer: String,
    http: reqwest::Client,
    policy: RetryPolicy,
    held: tokio::sync::Mutex<Held>,
}

/// The keys last read, and when the keys were last read and tried.
#[derive(Debug, Default)]
struct Held {
    keys: Option<Arc<JwkSet>>,
    read_at: Option<Instant>,
    tried_at: Option<Instant>,
    /// The last try's failure, until a try succeeds.
    failure: Option<JwksError>,
}

impl Held {
    /// Whether a token naming `kid` at `now` reads the keys (again).
    fn read_due(&self, kid: &str, now: Instant) -> bool {
        let Some(tried_at) = self.tried_at else {
            return true;
        };
        if now.saturating_duration_since(tried_at) < REREAD_UNKNOWN_AFTER {
            return false;
        }
        match (&self.keys, self.read_at) {
            (Some(keys), Some(read_at)) => {
                keys.find(kid).is_none() || now.saturating_duration_since(read_at) >= KEYS_KEPT_FOR
            }
            _ => true,
        }
    }

    /// The keys to judge a token naming `kid` by: those held, unless the
    /// last read failed and they do not hold `kid` (the key may be new).
    fn for_key(&self, kid: &str, issuer: &str) -> Result<Arc<JwkSet>, JwksError> {
        match (&self.keys, &self.failure) {
            (Some(keys), None) => Ok(keys.clone()),
            (Some(keys), Some(_)) if keys.find(kid).is_some() => Ok(keys.clone()),
            (_, Some(failure)) => Err(failure.clone()),
            (None, None) => Err(JwksError {
                issuer: issuer.to_owned(),
                url: discovery_url(issuer),
                why: "not read yet".to_owned(),
            }),
        }
    }
}

fn discovery_url(issuer: &str) -> String {
    format!("{issuer}/.well-known/openid-configuration")
}

/// `/.well-known/openid-configuration`, the part read.
#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

/// A key set as it comes: each key is kept if it is one `jsonwebtoken`
/// reads (a key of a type it does not know is left out, not the set).
#[derive(Deserialize)]
struct WireKeySet {
    keys: Vec<serde_json::Value>,
}

impl Jwks {
    /// The keys of `issuer` (e.g. [`GITHUB_ISSUER`]; a trailing `/` is
    /// dropped), read with one retry, ten seconds an attempt.
    pub fn new(issuer: &str) -> anyhow::Result<Self> {
        let policy = RetryPolicy {
            max_attempts: 2,
            attempt_timeout: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        Self::with_policy(issuer, policy)
    }

    /// [`Self::new`], its reads retried and timed by `policy`.
    pub fn with_policy(issuer: &str, policy: RetryPolicy) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .user_agent("wavegate")
            .build()
            .context("an HTTP client for the OIDC issuer's keys")?;
        Ok(Self {
            issuer: issuer.trim_end_matches('/').to_owned(),
            http,
            policy,
            held: tokio::sync::Mutex::default(),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The keys to judge a token naming `kid` by, read first if they are
    /// due (none held, `kid` not held, or held for an hour; at most one
    /// read a minute). Concurrent callers wait for one read.
    pub async fn keys_for(&self, kid: &str) -> Result<Arc<JwkSet>, JwksError> {
        let mut held = self.held.lock().await;
        let now = Instant::now();
        if held.read_due(kid, now) {
            held.tried_at = Some(now);
            match self.read().await {
                Ok(keys) => {
                    held.keys = Some(Arc::new(keys));
                    held.read_at = Some(now);
                    held.failure = None;
                }
                Err(failure) => {
                    tracing::warn!(issuer = %self.issuer, error = %failure, "reading the OIDC issuer's keys failed");
                    held.failure = Some(failure);
                }
            }
        }
        held.for_key(kid, &self.issuer)
    }

    /// [`verify`] with the issuer's keys, read as [`Self::keys_for`] does.
    /// A token that is not RS256 or names no key never causes a read.
    pub async fn verify(
        &self,
        token: &str,
        expected: &ExpectedRun,
        now: UnixMs,
    ) -> Result<RunClaims, OidcError> {
        let kid = signing_key_id(token)?;
        let keys = self.keys_for(&kid).await?;
        Ok(verify(token, &keys, expected, now)?)
    }

    /// The discovery document, then the key set it points to.
    async fn read(&self) -> Result<JwkSet, JwksError> {
        let url = discovery_url(&self.issuer);
        let discovery: Discovery = self.get_json(&url).await?;
        if discovery.issuer.trim_end_matches('/') != self.issuer {
            return Err(self.failed(
                &url,
                format!(
                    "it describes issuer `{}`, not `{}`",
                    discovery.issuer, self.issuer
                ),
            ));
        }
        let set: WireKeySet = self.get_json(&discovery.jwks_uri).await?;
        let keys = set
            .keys
            .into_iter()
            .filter_map(|key| serde_json::from_value::<Jwk>(key).ok())
            .collect();
        Ok(JwkSet { keys })
    }

    fn failed(&self, url: &str, why: String) -> JwksError {
        JwksError {
            issuer: self.issuer.clone(),
            url: url.to_owned(),
            why,
        }
    }

    async fn get_json<T: DeserializeOwned>(&self, url: &str) -> Result<T, JwksError> {
        let call = format!("GET {url}");
        let reply = send_with_retry(&self.policy, &call, || async {
            let response = self
                .http
                .get(url)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(Failure::transient)?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.text().await.map_err(Failure::transient)?;
            Ok(Reply {
                status,
                headers,
                body,
            })
        })
        .await
        .map_err(|e| self.failed(url, format!("{e:#}")))?;
        if reply.status != 200 {
            return Err(self.failed(url, format!("it answered {}", reply.status)));
        }
        serde_json::from_str(&reply.body)
            .map_err(|e| self.failed(url, format!("its answer is not the JSON expected: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const PRIVATE_KEY: &str = include_str!("../../tests/it/support/test-app-key.pem");
    const PUBLIC_KEY: &str = include_str!("../../tests/it/support/test-app-key.pub.pem");
    const STRANGER_KEY: &str = include_str!("../../tests/it/support/stranger-key.pem");
    /// The public half of test-app-key.pem as a key set, key id `test-app-key`
    /// (how it was made: tests/it/support/fake_forge/oidc.rs).
    const JWKS: &str = include_str!("../../tests/it/support/test-oidc-jwks.json");
    const KID: &str = "test-app-key";
    const NOW: u64 = 1_750_000_000;
    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
    const WORKFLOW: &str = "octo/infra/.github/workflows/wavegate.yml@refs/heads/main";

    fn keys() -> JwkSet {
        serde_json::from_str(JWKS).unwrap()
    }

    fn at(secs: u64) -> UnixMs {
        UnixMs::from_millis(i64::try_from(secs).unwrap() * 1000)
    }

    fn expected() -> ExpectedRun {
        ExpectedRun {
            issuer: GITHUB_ISSUER.to_owned(),
            audience: "https://wavegate.example.com".to_owned(),
            repository: "octo/infra".to_owned(),
            environment: Some("prod".to_owned()),
            run_id: 5632,
            job_workflow_ref: WORKFLOW.to_owned(),
            sha: Some(SHA.to_owned()),
        }
    }

    /// What GitHub puts in a dispatched run's token (its documented example's
    /// shape), issued a minute before `NOW`.
    fn claims() -> Value {
        json!({
            "jti": "0e6a3f3b-7a7e-4bd5-9b6f-6f0f3e3c2a11",
            "sub": "repo:octo/infra:environment:prod",
            "environment": "prod",
            "aud": "https://wavegate.example.com",
            "ref": "refs/heads/main",
            "sha": SHA,
            "repository": "octo/infra",
            "repository_owner": "octo",
            "repository_id": "74",
            "repository_owner_id": "65",
            "repository_visibility": "private",
            "actor": "wavegate[bot]",
            "actor_id": "4242",
            "run_id": "5632",
            "run_number": "10",
            "run_attempt": "1",
            "runner_environment": "github-hosted",
            "workflow": "wavegate",
            "head_ref": "",
            "base_ref": "",
            "event_name": "workflow_dispatch",
            "ref_type": "branch",
            "job_workflow_ref": WORKFLOW,
            "iss": GITHUB_ISSUER,
            "nbf": NOW - 60,
            "iat": NOW - 60,
            "exp": NOW + 240,
        })
    }

    fn with(field: &str, value: Value) -> Value {
        let mut claims = claims();
        claims[field] = value;
        claims
    }

    fn without(field: &str) -> Value {
        let mut claims = claims();
        claims.as_object_mut().unwrap().remove(field);
        claims
    }

    fn signed(claims: &Value, algorithm: Algorithm, key: &EncodingKey, kid: &str) -> String {
        let mut header = Header::new(algorithm);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    fn sign(claims: &Value) -> String {
        let key = EncodingKey::from_rsa_pem(PRIVATE_KEY.as_bytes()).unwrap();
        signed(claims, Algorithm::RS256, &key, KID)
    }

    fn check(token: &str) -> Result<RunClaims, OidcRefusal> {
        verify(token, &keys(), &expected(), at(NOW))
    }

    fn refusal(claims: &Value) -> OidcRefusal {
        check(&sign(claims)).unwrap_err()
    }

    fn base64url(json: &Value) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
    }

    #[test]
    fn a_token_of_the_dispatched_run_is_accepted_with_its_claims() {
        let claims = check(&sign(&claims())).unwrap();

        assert_eq!(
            claims,
            RunClaims {
                repository: "octo/infra".to_owned(),
                environment: Some("prod".to_owned()),
                run_id: 5632,
                run_attempt: 1,
                sha: SHA.to_owned(),
                git_ref: "refs/heads/main".to_owned(),
                job_workflow_ref: WORKFLOW.to_owned(),
                event_name: "workflow_dispatch".to_owned(),
                actor: "wavegate[bot]".to_owned(),
                sub: "repo:octo/infra:environment:prod".to_owned(),
                iat: NOW - 60,
                exp: NOW + 240,
            }
        );
    }

    #[test]
    fn a_run_without_an_environment_or_a_known_commit_is_accepted_as_dispatched() {
        let mut expected = expected();
        expected.environment = None;
        expected.sha = None;
        let token = sign(&with("sha", json!("f".repeat(40))));
        let token_without = sign(&without("environment"));

        assert_eq!(
            verify(&token_without, &keys(), &expected, at(NOW))
                .unwrap()
                .environment,
            None
        );
        let refused = verify(&token, &keys(), &expected, at(NOW)).unwrap_err();
        assert_eq!(
            refused,
            OidcRefusal::WrongEnvironment {
                expected: None,
                found: Some("prod".to_owned())
            }
        );
        expected.environment = Some("prod".to_owned());
        assert_eq!(
            verify(&token, &keys(), &expected, at(NOW)).unwrap().sha,
            "f".repeat(40)
        );
    }

    #[test]
    fn another_repositorys_run_is_refused_naming_both() {
        let refused = refusal(&with("repository", json!("mallory/infra")));

        assert_eq!(
            refused,
            OidcRefusal::WrongRepository {
                expected: "octo/infra".to_owned(),
                found: "mallory/infra".to_owned()
            }
        );
        assert_eq!(
            refused.to_string(),
            "repository: expected `octo/infra`, the token is of `mallory/infra`"
        );
    }

    #[test]
    fn a_run_in_another_environment_or_in_none_is_refused() {
        assert_eq!(
            refusal(&with("environment", json!("dev"))),
            OidcRefusal::WrongEnvironment {
                expected: Some("prod".to_owned()),
                found: Some("dev".to_owned())
            }
        );
        let refused = refusal(&without("environment"));
        assert_eq!(
            refused.to_string(),
            "environment: expected environment `prod`, the token is of no environment"
        );
    }

    #[test]
    fn another_run_of_the_same_workflow_is_refused() {
        assert_eq!(
            refusal(&with("run_id", json!("5633"))),
            OidcRefusal::WrongRun {
                expected: 5632,
                found: 5633
            }
        );
    }

    #[test]
    fn the_workflow_as_the_pull_requests_branch_has_it_is_refused() {
        let theirs = "octo/infra/.github/workflows/wavegate.yml@refs/heads/feature";
        let refused = refusal(&with("job_workflow_ref", json!(theirs)));

        assert_eq!(
            refused,
            OidcRefusal::WrongWorkflow {
                expected: WORKFLOW.to_owned(),
                found: theirs.to_owned()
            }
        );
        assert!(refused.to_string().contains("base branch"), "{refused}");
        let merge_ref = "octo/infra/.github/workflows/wavegate.yml@refs/pull/12/merge";
        assert!(matches!(
            refusal(&with("job_workflow_ref", json!(merge_ref))),
            OidcRefusal::WrongWorkflow { .. }
        ));
    }

    #[test]
    fn a_run_of_another_commit_is_refused() {
        let other = "fedcba9876543210fedcba9876543210fedcba98";
        assert_eq!(
            refusal(&with("sha", json!(other))),
            OidcRefusal::WrongSha {
                expected: SHA.to_owned(),
                found: other.to_owned()
            }
        );
    }

    #[test]
    fn an_expired_token_is_refused_past_the_leeway_only() {
        let expired_at = NOW - LEEWAY_SECS;
        assert_eq!(
            refusal(&with("exp", json!(expired_at))),
            OidcRefusal::Expired {
                exp: expired_at,
                now: NOW
            }
        );
        assert!(check(&sign(&with("exp", json!(expired_at + 1)))).is_ok());
    }

    #[test]
    fn a_token_issued_or_valid_only_later_is_refused_past_the_leeway_only() {
        let later = NOW + LEEWAY_SECS + 1;
        assert_eq!(
            refusal(&with("iat", json!(later))),
            OidcRefusal::NotYetValid {
                claim: "iat",
                at: later,
                now: NOW
            }
        );
        assert_eq!(
            refusal(&with("nbf", json!(later))),
            OidcRefusal::NotYetValid {
                claim: "nbf",
                at: later,
                now: NOW
            }
        );
        assert!(check(&sign(&with("iat", json!(NOW + LEEWAY_SECS)))).is_ok());
    }

    #[test]
    fn a_token_for_another_audience_is_refused() {
        assert_eq!(
            refusal(&with("aud", json!("sts.amazonaws.com"))),
            OidcRefusal::WrongAudience {
                expected: "https://wavegate.example.com".to_owned(),
                found: "`sts.amazonaws.com`".to_owned()
            }
        );
        let shared = json!(["https://wavegate.example.com", "sts.amazonaws.com"]);
        assert!(matches!(
            refusal(&with("aud", shared)),
            OidcRefusal::WrongAudience { .. }
        ));
        assert!(check(&sign(&with("aud", json!(["https://wavegate.example.com"])))).is_ok());
    }

    #[test]
    fn a_token_of_another_issuer_is_refused() {
        assert_eq!(
            refusal(&with("iss", json!("https://issuer.example.com"))),
            OidcRefusal::WrongIssuer {
                expected: GITHUB_ISSUER.to_owned(),
                found: "https://issuer.example.com".to_owned()
            }
        );
    }

    #[test]
    fn a_token_signed_with_another_key_or_changed_after_signing_is_refused() {
        let stranger = EncodingKey::from_rsa_pem(STRANGER_KEY.as_bytes()).unwrap();
        let forged = signed(&claims(), Algorithm::RS256, &stranger, KID);
        let bad = OidcRefusal::BadSignature {
            kid: KID.to_owned(),
        };
        assert_eq!(check(&forged).unwrap_err(), bad);

        let genuine = sign(&with("repository", json!("octo/other")));
        let [header, _, signature] = genuine.split('.').collect::<Vec<_>>()[..] else {
            panic!("{genuine}");
        };
        let changed = format!("{header}.{}.{signature}", base64url(&claims()));
        assert_eq!(check(&changed).unwrap_err(), bad);
        let cut = format!("{header}.{}.", base64url(&claims()));
        assert_eq!(check(&cut).unwrap_err(), bad);
    }

    #[test]
    fn a_token_naming_a_key_the_issuer_does_not_sign_with_is_refused() {
        let key = EncodingKey::from_rsa_pem(PRIVATE_KEY.as_bytes()).unwrap();
        let token = signed(&claims(), Algorithm::RS256, &key, "rotated-key");
        let refused = check(&token).unwrap_err();
        assert_eq!(
            refused,
            OidcRefusal::UnknownKey {
                kid: "rotated-key".to_owned(),
                known: KID.to_owned()
            }
        );

        // The key set's key is for encryption: not a signing key.
        let mut encryption: Value = serde_json::from_str(JWKS).unwrap();
        encryption["keys"][0]["use"] = json!("enc");
        let keys: JwkSet = serde_json::from_value(encryption).unwrap();
        assert_eq!(
            verify(&sign(&claims()), &keys, &expected(), at(NOW)).unwrap_err(),
            OidcRefusal::UnknownKey {
                kid: KID.to_owned(),
                known: "it has none".to_owned()
            }
        );
    }

    #[test]
    fn what_is_not_a_run_token_is_refused_as_malformed() {
        for token in ["", "not a token", "a.b", "a.b.c.d", "!!.e30.e30"] {
            assert!(
                matches!(check(token), Err(OidcRefusal::Malformed(_))),
                "{token}"
            );
        }
        let no_kid = {
            let key = EncodingKey::from_rsa_pem(PRIVATE_KEY.as_bytes()).unwrap();
            jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims(), &key).unwrap()
        };
        assert_eq!(
            check(&no_kid).unwrap_err(),
            OidcRefusal::Malformed("its header names no key (`kid`)".to_owned())
        );
        assert_eq!(
            refusal(&without("job_workflow_ref")),
            OidcRefusal::Malformed("the token has no `job_workflow_ref` claim".to_owned())
        );
        assert_eq!(
            refusal(&with("run_id", json!("run-5632"))),
            OidcRefusal::Malformed("the `run_id` claim is not a number".to_owned())
        );
        assert!(matches!(
            refusal(&with("exp", json!("tomorrow"))),
            OidcRefusal::Malformed(_)
        ));
    }

    #[test]
    fn an_hmac_token_keyed_with_the_issuers_public_key_is_refused() {
        // The classic confusion: a verifier that takes the algorithm from
        // the token would check an HMAC over the public key, which anyone has.
        for (algorithm, name) in [(Algorithm::HS256, "HS256"), (Algorithm::HS512, "HS512")] {
            let key = EncodingKey::from_secret(PUBLIC_KEY.as_bytes());
            let token = signed(&claims(), algorithm, &key, KID);
            assert_eq!(
                check(&token).unwrap_err(),
                OidcRefusal::WrongAlgorithm {
                    found: name.to_owned()
                }
            );
        }
    }

    #[test]
    fn an_unsigned_token_is_refused() {
        let header = json!({ "alg": "none", "typ": "JWT", "kid": KID });
        let token = format!("{}.{}.", base64url(&header), base64url(&claims()));
        assert_eq!(
            check(&token).unwrap_err(),
            OidcRefusal::WrongAlgorithm {
                found: "none".to_owned()
            }
        );
        let header = json!({ "typ": "JWT", "kid": KID });
        let token = format!("{}.{}.", base64url(&header), base64url(&claims()));
        assert!(matches!(
            check(&token).unwrap_err(),
            OidcRefusal::Malformed(_)
        ));
    }

    #[test]
    fn the_issuers_own_key_with_another_algorithm_is_refused() {
        let key = EncodingKey::from_rsa_pem(PRIVATE_KEY.as_bytes()).unwrap();
        for (algorithm, name) in [(Algorithm::RS512, "RS512"), (Algorithm::PS256, "PS256")] {
            assert_eq!(
                check(&signed(&claims(), algorithm, &key, KID)).unwrap_err(),
                OidcRefusal::WrongAlgorithm {
                    found: name.to_owned()
                }
            );
        }
    }

    #[test]
    fn keys_are_read_when_none_are_held_then_for_an_unknown_key_once_a_minute_and_hourly() {
        let start = Instant::now();
        let minute = REREAD_UNKNOWN_AFTER;
        let mut held = Held::default();
        assert!(held.read_due(KID, start));

        held.tried_at = Some(start);
        assert!(
            !held.read_due(KID, start + minute / 2),
            "a failed read waits"
        );
        assert!(held.read_due(KID, start + minute), "and is tried again");

        held.keys = Some(Arc::new(keys()));
        held.read_at = Some(start);
        assert!(!held.read_due(KID, start + minute));
        assert!(!held.read_due("rotated-key", start + minute / 2));
        assert!(held.read_due("rotated-key", start + minute));
        assert!(!held.read_due(KID, start + KEYS_KEPT_FOR / 2));
        assert!(held.read_due(KID, start + KEYS_KEPT_FOR));
    }

    #[test]
    fn held_keys_whose_reread_failed_still_judge_the_keys_they_hold() {
        let failure = JwksError {
            issuer: GITHUB_ISSUER.to_owned(),
            url: discovery_url(GITHUB_ISSUER),
            why: "it answered 503".to_owned(),
        };
        let held = Held {
            keys: Some(Arc::new(keys())),
            failure: Some(failure.clone()),
            ..Held::default()
        };
        assert!(held.for_key(KID, GITHUB_ISSUER).is_ok());
        assert_eq!(held.for_key("rotated-key", GITHUB_ISSUER), Err(failure));
    }

    /// An issuer on 127.0.0.1: its discovery document (as `describe` writes
    /// it for the issuer's URL) and the test key set at `/jwks`, and how
    /// many times the key set was read.
    async fn issuer_serving(describe: fn(&str) -> Value) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let reads = Arc::new(AtomicUsize::new(0));
        let discovery = describe(&url);
        let counted = reads.clone();
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(move || {
                    let discovery = discovery.clone();
                    async move { axum::Json(discovery) }
                }),
            )
            .route(
                "/jwks",
                get(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { axum::Json(serde_json::from_str::<Value>(JWKS).unwrap()) }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, reads)
    }

    fn well_known(url: &str) -> Value {
        json!({ "issuer": url, "jwks_uri": format!("{url}/jwks") })
    }

    fn once() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    fn expected_of(issuer: &str) -> ExpectedRun {
        ExpectedRun {
            issuer: issuer.to_owned(),
            ..expected()
        }
    }

    #[tokio::test]
    async fn the_issuers_keys_are_read_once_and_judge_its_tokens() {
        let (url, reads) = issuer_serving(well_known).await;
        let jwks = Jwks::with_policy(&format!("{url}/"), once()).unwrap();
        let token = sign(&with("iss", json!(url)));

        for _ in 0..2 {
            let claims = jwks.verify(&token, &expected_of(&url), at(NOW)).await;
            assert_eq!(claims.unwrap().run_id, 5632);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(jwks.issuer(), url);
    }

    #[tokio::test]
    async fn a_token_naming_an_unknown_key_reads_the_keys_again_at_most_once_a_minute() {
        let (url, reads) = issuer_serving(well_known).await;
        let jwks = Jwks::with_policy(&url, once()).unwrap();
        let key = EncodingKey::from_rsa_pem(PRIVATE_KEY.as_bytes()).unwrap();
        let rotated = signed(
            &with("iss", json!(url)),
            Algorithm::RS256,
            &key,
            "rotated-key",
        );
        let unknown = |e| matches!(e, Err(OidcError::Refused(OidcRefusal::UnknownKey { .. })));

        assert!(unknown(
            jwks.verify(&rotated, &expected_of(&url), at(NOW)).await
        ));
        assert!(unknown(
            jwks.verify(&rotated, &expected_of(&url), at(NOW)).await
        ));
        assert_eq!(reads.load(Ordering::SeqCst), 1);

        let a_minute_ago = Instant::now().checked_sub(REREAD_UNKNOWN_AFTER).unwrap();
        jwks.held.lock().await.tried_at = Some(a_minute_ago);
        assert!(unknown(
            jwks.verify(&rotated, &expected_of(&url), at(NOW)).await
        ));
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_token_that_is_not_rs256_never_reads_the_keys() {
        let (url, reads) = issuer_serving(well_known).await;
        let jwks = Jwks::with_policy(&url, once()).unwrap();
        let key = EncodingKey::from_secret(PUBLIC_KEY.as_bytes());
        let token = signed(&claims(), Algorithm::HS256, &key, KID);

        let refused = jwks.verify(&token, &expected_of(&url), at(NOW)).await;

        assert!(matches!(
            refused,
            Err(OidcError::Refused(OidcRefusal::WrongAlgorithm { .. }))
        ));
        assert_eq!(reads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_read_that_fails_names_the_url_and_is_not_tried_again_within_a_minute() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let jwks = Jwks::with_policy(&url, once()).unwrap();

        let failure = jwks.keys_for(KID).await.unwrap_err();

        assert_eq!(
            failure.url,
            format!("{url}/.well-known/openid-configuration")
        );
        let text = failure.to_string();
        assert!(
            text.contains(&format!("{url}/.well-known/openid-configuration")),
            "{text}"
        );
        let tried_at = jwks.held.lock().await.tried_at;
        assert_eq!(jwks.keys_for(KID).await.unwrap_err(), failure);
        assert_eq!(jwks.held.lock().await.tried_at, tried_at);
    }

    #[tokio::test]
    async fn a_key_set_that_is_not_there_or_a_discovery_of_another_issuer_is_named() {
        let (url, _) =
            issuer_serving(|url| json!({ "issuer": url, "jwks_uri": format!("{url}/gone") })).await;
        let failure = Jwks::with_policy(&url, once())
            .unwrap()
            .keys_for(KID)
            .await
            .unwrap_err();
        assert_eq!(failure.url, format!("{url}/gone"));
        assert_eq!(failure.why, "it answered 404");

        let (url, _) = issuer_serving(|url| {
            json!({ "issuer": "https://token.actions.githubusercontent.com", "jwks_uri": format!("{url}/jwks") })
        })
        .await;
        let failure = Jwks::with_policy(&url, once())
            .unwrap()
            .keys_for(KID)
            .await
            .unwrap_err();
        assert_eq!(
            failure.url,
            format!("{url}/.well-known/openid-configuration")
        );
        assert!(failure.why.contains(GITHUB_ISSUER), "{failure}");
    }
}
