//! A run on GitHub Actions hands a job back with its OIDC token: the bot
//! reads the issuer's published keys through its real fetcher and accepts
//! the dispatched run's token, and nothing a forger signs or a run of
//! something else holds.

use crate::support::fake_forge::{FakeForge, RunToken, OIDC_KEY_ID};
use std::sync::Arc;
use std::time::SystemTime;
use wavegate::dispatch::oidc::{ExpectedRun, Jwks, OidcError, OidcRefusal};
use wavegate::forge::retry::RetryPolicy;
use wavegate::model::UnixMs;

const AUDIENCE: &str = "https://wavegate.example.com";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const WORKFLOW: &str = "octo-org/infra/.github/workflows/wavegate.yml@refs/heads/main";
const RUN: u64 = 9_001;

fn now() -> UnixMs {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    UnixMs::from_millis(i64::try_from(since.as_millis()).unwrap())
}

fn dispatched(forge: &FakeForge) -> ExpectedRun {
    ExpectedRun {
        issuer: forge.oidc_issuer(),
        audience: AUDIENCE.to_owned(),
        repository: "octo-org/infra".to_owned(),
        environment: Some("prod".to_owned()),
        run_id: RUN,
        job_workflow_ref: WORKFLOW.to_owned(),
        sha: Some(SHA.to_owned()),
    }
}

fn its_token() -> RunToken {
    RunToken::new(AUDIENCE, "octo-org/infra", RUN, SHA, WORKFLOW).in_environment("prod")
}

/// The issuer's keys, each read tried once (no retry to wait through).
fn keys_of(forge: &FakeForge) -> Jwks {
    let once = RetryPolicy {
        max_attempts: 1,
        sleep: Arc::new(|_| Box::pin(async {})),
        ..RetryPolicy::default()
    };
    Jwks::with_policy(&forge.oidc_issuer(), once).unwrap()
}

#[tokio::test]
async fn the_dispatched_runs_token_checks_out_against_the_issuers_published_keys() {
    let forge = FakeForge::start().await;
    forge.add_github_repo("octo-org/infra", "file:///x", 77);
    let jwks = keys_of(&forge);

    let token = forge.mint_run_token(&its_token());
    let claims = jwks
        .verify(&token, &dispatched(&forge), now())
        .await
        .unwrap();

    assert_eq!(claims.repository, "octo-org/infra");
    assert_eq!(claims.environment.as_deref(), Some("prod"));
    assert_eq!(claims.run_id, RUN);
    assert_eq!(claims.run_attempt, 1);
    assert_eq!(claims.sha, SHA);
    assert_eq!(claims.git_ref, "refs/heads/main");
    assert_eq!(claims.job_workflow_ref, WORKFLOW);
    assert_eq!(claims.event_name, "workflow_dispatch");
    assert_eq!(claims.sub, "repo:octo-org/infra:environment:prod");

    // Kept: a second token is judged without reading the keys again.
    let again = forge.mint_run_token(&its_token());
    jwks.verify(&again, &dispatched(&forge), now())
        .await
        .unwrap();
    assert_eq!(forge.oidc_key_reads(), 1);
}

#[tokio::test]
async fn a_token_signed_with_a_key_that_is_not_the_issuers_is_refused() {
    let forge = FakeForge::start().await;
    let jwks = keys_of(&forge);

    let forged = forge.mint_forged_run_token(&its_token());
    let refused = jwks.verify(&forged, &dispatched(&forge), now()).await;

    assert_eq!(
        refused,
        Err(OidcError::Refused(OidcRefusal::BadSignature {
            kid: OIDC_KEY_ID.to_owned()
        }))
    );
}

#[tokio::test]
async fn a_genuine_token_of_another_run_repository_environment_or_workflow_is_refused() {
    let forge = FakeForge::start().await;
    let jwks = keys_of(&forge);
    let refusal = |token: String| {
        let jwks = &jwks;
        let expected = dispatched(&forge);
        async move {
            match jwks.verify(&token, &expected, now()).await {
                Err(OidcError::Refused(refusal)) => refusal,
                other => panic!("not refused: {other:?}"),
            }
        }
    };

    let mut other_run = its_token();
    other_run.run_id = RUN + 1;
    assert!(matches!(
        refusal(forge.mint_run_token(&other_run)).await,
        OidcRefusal::WrongRun { .. }
    ));
    let mut other_repository = its_token();
    other_repository.repository = "mallory/infra".to_owned();
    assert!(matches!(
        refusal(forge.mint_run_token(&other_repository)).await,
        OidcRefusal::WrongRepository { .. }
    ));
    let dev = RunToken::new(AUDIENCE, "octo-org/infra", RUN, SHA, WORKFLOW).in_environment("dev");
    assert!(matches!(
        refusal(forge.mint_run_token(&dev)).await,
        OidcRefusal::WrongEnvironment { .. }
    ));
    let from_the_branch = RunToken::new(
        AUDIENCE,
        "octo-org/infra",
        RUN,
        SHA,
        "octo-org/infra/.github/workflows/wavegate.yml@refs/heads/feature",
    )
    .in_environment("prod");
    assert!(matches!(
        refusal(forge.mint_run_token(&from_the_branch)).await,
        OidcRefusal::WrongWorkflow { .. }
    ));
    let mut expired = its_token();
    expired.issued_at = Some(SystemTime::now() - 2 * expired.lifetime);
    assert!(matches!(
        refusal(forge.mint_run_token(&expired)).await,
        OidcRefusal::Expired { .. }
    ));
}

#[tokio::test]
async fn an_issuer_whose_keys_cannot_be_read_leaves_the_token_unjudged_naming_the_url() {
    let forge = FakeForge::start().await;
    let jwks = keys_of(&forge);
    forge.fail_next("GET", "/oidc/.well-known/jwks", 503, &[]);

    let token = forge.mint_run_token(&its_token());
    let unjudged = jwks.verify(&token, &dispatched(&forge), now()).await;

    let Err(OidcError::Keys(failure)) = unjudged else {
        panic!("{unjudged:?}");
    };
    assert_eq!(
        failure.url,
        format!("{}/.well-known/jwks", forge.oidc_issuer())
    );
    assert_eq!(failure.why, "it answered 503");
    assert_eq!(forge.oidc_key_reads(), 0);
}
