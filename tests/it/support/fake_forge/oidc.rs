//! GitHub Actions' OIDC issuer, as the fake plays it: the issuer is
//! `{url}/oidc` (a path, as GitHub Enterprise Server's is
//! `https://HOST/_services/token`), with its discovery document at
//! `/oidc/.well-known/openid-configuration` and its key set, the test App
//! key's public half, at `/oidc/.well-known/jwks`; and the run tokens it
//! signs for a job (`mint_run_token`), or that a forger signs with a key
//! that is not the issuer's under the issuer's key id
//! (`mint_forged_run_token`). Like the login pages, these are not part of
//! either REST API's description, so they are not recorded for the
//! conformance check; `fail_next` applies to them, and reads of the key
//! set are counted.
//!
//! `test-oidc-jwks.json` is `test-app-key.pub.pem` as a key set, made once
//! in `tests/it/support` with openssl and python3's standard library:
//!
//! ```sh
//! python3 - <<'EOF'
//! import base64, json, subprocess
//! hexmod = subprocess.check_output(["openssl", "rsa", "-pubin", "-in", "test-app-key.pub.pem",
//!                                   "-noout", "-modulus"]).decode().strip().split("=", 1)[1]
//! b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
//! key = {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "test-app-key",
//!        "n": b64(bytes.fromhex(hexmod)), "e": b64((65537).to_bytes(3, "big"))}
//! open("test-oidc-jwks.json", "w").write(json.dumps({"keys": [key]}, indent=2) + "\n")
//! EOF
//! ```

use super::*;
use jsonwebtoken::{encode, EncodingKey, Header};

/// The issuer's key set: the test App key's public half.
const JWKS: &str = include_str!("../test-oidc-jwks.json");
/// The key id the issuer signs under (the key set's only key).
pub const OIDC_KEY_ID: &str = "test-app-key";
const STRANGER_KEY: &str = include_str!("../stranger-key.pem");

/// What the issuer has served.
#[derive(Debug, Default)]
pub(super) struct OidcState {
    /// Reads of the key set (its discovery document not counted).
    key_reads: usize,
}

/// A job's token as GitHub issues it to a run: for whom (`audience`) and
/// of which run. [`RunToken::new`] makes it a `workflow_dispatch` run's
/// first attempt on the ref its workflow is from, in no environment,
/// issued now.
#[derive(Debug, Clone)]
pub struct RunToken {
    pub audience: String,
    /// `owner/name`.
    pub repository: String,
    pub environment: Option<String>,
    pub run_id: u64,
    pub run_attempt: u32,
    pub sha: String,
    /// `ref`.
    pub git_ref: String,
    /// e.g. `octo/infra/.github/workflows/wavegate.yml@refs/heads/main`.
    pub job_workflow_ref: String,
    pub event_name: String,
    pub actor: String,
    /// When it is issued: None for the forge's clock now.
    pub issued_at: Option<SystemTime>,
    /// From `iat` to `exp`: six hours, as GitHub's tokens lately hold.
    pub lifetime: Duration,
    /// Its `iss`: None for the fake issuer's own.
    pub issuer: Option<String>,
}

impl RunToken {
    pub fn new(
        audience: &str,
        repository: &str,
        run_id: u64,
        sha: &str,
        job_workflow_ref: &str,
    ) -> Self {
        let git_ref = job_workflow_ref
            .split_once('@')
            .map_or("refs/heads/main", |(_, r)| r);
        Self {
            audience: audience.to_owned(),
            repository: repository.to_owned(),
            environment: None,
            run_id,
            run_attempt: 1,
            sha: sha.to_owned(),
            git_ref: git_ref.to_owned(),
            job_workflow_ref: job_workflow_ref.to_owned(),
            event_name: "workflow_dispatch".to_owned(),
            actor: GITHUB_BOT_LOGIN.to_owned(),
            issued_at: None,
            lifetime: Duration::from_secs(6 * 3600),
            issuer: None,
        }
    }

    /// The same run's token in `environment`.
    pub fn in_environment(mut self, environment: &str) -> Self {
        self.environment = Some(environment.to_owned());
        self
    }
}

/// `/oidc/.well-known/…`, or None for another path.
pub(super) fn respond(shared: &Shared, method: &Method, uri: &Uri) -> Option<Response> {
    let rest = uri.path().strip_prefix("/oidc/")?;
    let mut state = shared.lock().unwrap();
    if let Some(failure) = take_failure(&mut state, method.as_str(), uri.path()) {
        return Some(failure);
    }
    let issuer = format!("{}/oidc", state.base_url);
    Some(match (method.as_str(), rest) {
        ("GET", ".well-known/openid-configuration") => answer(
            200,
            json!({
                "issuer": issuer,
                "jwks_uri": format!("{issuer}/.well-known/jwks"),
                "subject_types_supported": ["public", "pairwise"],
                "response_types_supported": ["id_token"],
                "claims_supported": [
                    "sub", "aud", "exp", "iat", "iss", "jti", "nbf", "ref", "sha",
                    "repository", "repository_id", "repository_owner", "run_id",
                    "run_attempt", "actor", "event_name", "environment",
                    "job_workflow_ref",
                ],
                "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid"],
            }),
        ),
        ("GET", ".well-known/jwks") => {
            state.oidc.key_reads += 1;
            answer(200, serde_json::from_str(JWKS).expect("the test key set"))
        }
        // A run's ACTIONS_ID_TOKEN_REQUEST_URL (the fake runner's): the
        // run's token for the audience asked for.
        ("GET", rest) if rest.starts_with("token-request/") => {
            let run_id: u64 = rest["token-request/".len()..].parse().unwrap_or_default();
            let audience = uri
                .query()
                .unwrap_or_default()
                .split('&')
                .find_map(|pair| pair.strip_prefix("audience="))
                .map(|a| a.replace("%3A", ":").replace("%2F", "/"))
                .unwrap_or_default();
            let run = state
                .repos
                .iter()
                .flat_map(|repo| repo.runs.iter())
                .find(|run| run.id == run_id)
                .cloned();
            match run {
                Some(run) => {
                    let mut token = RunToken::new(
                        &audience,
                        &run.repo.full_name,
                        run.id,
                        &run.head_sha,
                        &format!(
                            "{}/{}@refs/heads/{}",
                            run.repo.full_name, run.workflow_path, run.git_ref
                        ),
                    );
                    token.environment = run
                        .inputs
                        .get("environment")
                        .filter(|e| !e.is_empty())
                        .cloned();
                    let claims = claims(&mut state, &issuer, &token);
                    answer(200, json!({ "value": sign(&claims, APP_PRIVATE_KEY) }))
                }
                None => not_found(),
            }
        }
        _ => not_found(),
    })
}

/// The claims GitHub puts in a run's token (the shape of its documented
/// example), issued by `issuer` at the forge's clock.
fn claims(state: &mut State, issuer: &str, run: &RunToken) -> Value {
    let issued = run.issued_at.unwrap_or_else(|| state.now());
    let iat = unix_secs(issued);
    let jti = state.id();
    let repository_id = state
        .repo_mut(ForgeKind::GitHub, &run.repository)
        .map_or(0, |repo| repo.handle.id);
    let owner = run.repository.split('/').next().unwrap_or_default();
    let owner_id = state.users.get(owner).copied().unwrap_or_default();
    let sub = match &run.environment {
        Some(environment) => format!("repo:{}:environment:{environment}", run.repository),
        None => format!("repo:{}:ref:{}", run.repository, run.git_ref),
    };
    json!({
        "jti": format!("00000000-0000-4000-8000-{jti:012x}"),
        "sub": sub,
        "environment": run.environment,
        "aud": run.audience,
        "ref": run.git_ref,
        "sha": run.sha,
        "repository": run.repository,
        "repository_owner": owner,
        "repository_id": repository_id.to_string(),
        "repository_owner_id": owner_id.to_string(),
        "repository_visibility": "private",
        "actor": run.actor,
        "actor_id": APP_ID.to_string(),
        "run_id": run.run_id.to_string(),
        "run_number": run.run_id.to_string(),
        "run_attempt": run.run_attempt.to_string(),
        "runner_environment": "self-hosted",
        "workflow": "wavegate",
        "head_ref": "",
        "base_ref": "",
        "event_name": run.event_name,
        "ref_type": "branch",
        "job_workflow_ref": run.job_workflow_ref,
        "iss": run.issuer.as_deref().unwrap_or(issuer),
        "nbf": iat.saturating_sub(300),
        "iat": iat,
        "exp": iat + run.lifetime.as_secs(),
    })
}

fn sign(claims: &Value, private_key_pem: &str) -> String {
    let mut header = Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(OIDC_KEY_ID.to_owned());
    let key = EncodingKey::from_rsa_pem(private_key_pem.as_bytes()).expect("a test RSA key");
    encode(&header, claims, &key).expect("a signed token")
}

impl FakeForge {
    /// The fake Actions OIDC issuer: what its tokens' `iss` says and its
    /// keys are read from.
    pub fn oidc_issuer(&self) -> String {
        format!("{}/oidc", self.url)
    }

    /// A token of `run` signed by the fake issuer, as a job of that run
    /// gets it from GitHub.
    pub fn mint_run_token(&self, run: &RunToken) -> String {
        let issuer = self.oidc_issuer();
        let claims = self.with(|s| claims(s, &issuer, run));
        sign(&claims, APP_PRIVATE_KEY)
    }

    /// The same token signed with a key that is not the issuer's
    /// (stranger-key.pem), under the issuer's key id: what a forger makes.
    pub fn mint_forged_run_token(&self, run: &RunToken) -> String {
        let issuer = self.oidc_issuer();
        let claims = self.with(|s| claims(s, &issuer, run));
        sign(&claims, STRANGER_KEY)
    }

    /// Where a run's job asks for its OIDC tokens
    /// (`ACTIONS_ID_TOKEN_REQUEST_URL`).
    pub fn oidc_token_request_url(&self, run_id: u64) -> String {
        format!("{}/oidc/token-request/{run_id}?api-version=2.0", self.url)
    }

    /// How many times the issuer's key set was read.
    pub fn oidc_key_reads(&self) -> usize {
        self.with(|s| s.oidc.key_reads)
    }
}
