//! The API a dispatched job's run calls (`wavegate job run`): claim the
//! job, proving the run is the one the bot dispatched, stream its output
//! while it runs and hand it back, each with the session the claim gave.
//! A claim and a hand-back are taken once, each batch of output once;
//! anything else (an unknown job, another job's token, a token without the
//! proof only the repository's runs can make, a replay, a second hand-back)
//! is refused, changes nothing, and is logged.

use super::AppState;
use crate::dispatch::oidc::{ExpectedRun, OidcError};
use crate::dispatch::output::{OutputBatch, POST_LIMIT, STREAMED_LIMIT};
use crate::dispatch::run_key::{PROOF_HEADER, SECRET_NAME};
use crate::dispatch::{
    random_hex, token_hash, Claimed, DispatchedJob, HandedBack, HAND_BACK_LIMIT,
};
use crate::store::{ClaimOutcome, DispatchAuth, DispatchState, HandBack, OutputAppend};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/jobs/{id}/claim", post(claim))
        .route(
            "/api/jobs/{id}/output",
            post(output).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/api/jobs/{id}/finished",
            post(finished).layer(DefaultBodyLimit::disable()),
        )
}

fn refused(status: StatusCode, id: &str, why: String) -> Response {
    tracing::warn!(target: "wavegate::dispatch", "job {id}: refused ({status}): {why}");
    (status, Json(json!({ "error": why }))).into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

async fn claim(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(proof) = bearer(&headers) else {
        return refused(
            StatusCode::UNAUTHORIZED,
            &id,
            "a claim carries the run's proof as `Authorization: Bearer …`".into(),
        );
    };
    let record = match state.store.dispatched_job(&id).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            return refused(
                StatusCode::NOT_FOUND,
                &id,
                format!("no job {id} was dispatched"),
            )
        }
        Err(e) => return unavailable(&id, &e),
    };
    if record.state != DispatchState::Dispatched {
        return refused(
            StatusCode::CONFLICT,
            &id,
            format!(
                "the job was {} already; a job is claimed once",
                state_word(record.state)
            ),
        );
    }
    let dispatched: DispatchedJob = match serde_json::from_str(&record.job) {
        Ok(job) => job,
        Err(e) => {
            tracing::error!(target: "wavegate::dispatch", "job {id}: its record cannot be read: {e}");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error": "the job's record cannot be read"})),
            )
                .into_response();
        }
    };
    let claim_hash = match record.auth {
        DispatchAuth::Token => {
            let run_proof = headers
                .get(PROOF_HEADER)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            if !state
                .run_keys
                .of(&record.repo)
                .verifies(&id, proof, run_proof)
            {
                return refused(
                    StatusCode::FORBIDDEN,
                    &id,
                    format!("the claim does not prove it is a run of the repository: it carries no `{PROOF_HEADER}` made with the repository's Actions secret {SECRET_NAME}, as `wavegate job run` sends when the workflow passes it (`wavegate init actions --forge forgejo` prints the workflow)"),
                );
            }
            Some(token_hash(proof))
        }
        DispatchAuth::Oidc => {
            if let Err((status, why)) = verify_run_token(&state, &record, &dispatched, proof).await
            {
                return refused(status, &id, why);
            }
            None
        }
    };
    let session = random_hex(32);
    match state
        .store
        .claim_dispatched_job(&id, claim_hash.as_deref(), &token_hash(&session))
        .await
    {
        Ok(ClaimOutcome::Claimed) => {
            tracing::info!(target: "wavegate::dispatch", "job {id}: claimed by its run");
            // The apply's attempt deadline, less its grace.
            let ends_within = record.ends_by.since(state.store.now());
            Json(Claimed {
                job: dispatched,
                session,
                ends_within_ms: u64::try_from(ends_within.as_millis()).unwrap_or(u64::MAX),
            })
            .into_response()
        }
        Ok(ClaimOutcome::WrongToken) => refused(
            StatusCode::FORBIDDEN,
            &id,
            "the token is not this job's".into(),
        ),
        Ok(ClaimOutcome::TooLate) => refused(
            StatusCode::GONE,
            &id,
            "the job waited for a run longer than its profile's `queue_timeout` and was given up on; nothing of it runs".into(),
        ),
        Ok(ClaimOutcome::NotClaimable(state)) => refused(
            StatusCode::CONFLICT,
            &id,
            format!(
                "the job was {} already; a job is claimed once",
                state_word(state)
            ),
        ),
        Ok(ClaimOutcome::Unknown) => refused(
            StatusCode::NOT_FOUND,
            &id,
            format!("no job {id} was dispatched"),
        ),
        Err(e) => unavailable(&id, &e),
    }
}

async fn finished(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let session = match live_session(&state, &id, &headers, "a hand-back").await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let body = match axum::body::to_bytes(request.into_body(), HAND_BACK_LIMIT).await {
        Ok(body) => body,
        Err(e) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &id,
                format!("what was handed back could not be read whole ({e}); a job carries at most 256 MiB of files"),
            )
        }
    };
    let handed_back: HandedBack = match serde_json::from_slice(&body) {
        Ok(handed_back) => handed_back,
        Err(e) => return refused(StatusCode::BAD_REQUEST, &id, format!("what was handed back is not a finished job this version reads ({e}); run the same version on the runner as on the bot")),
    };
    let text = serde_json::to_string(&handed_back).expect("a finished job serialises");
    match state
        .store
        .finish_dispatched_job(&id, &token_hash(&session), &text)
        .await
    {
        Ok(HandBack::Recorded) => {
            tracing::info!(target: "wavegate::dispatch", "job {id}: handed back");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(HandBack::WrongSession) => refused(
            StatusCode::FORBIDDEN,
            &id,
            "the session is not this job's".into(),
        ),
        Ok(HandBack::NotTaken(state)) => refused(
            StatusCode::CONFLICT,
            &id,
            format!("the job was {}; nothing more is taken", state_word(state)),
        ),
        Ok(HandBack::Unknown) => refused(
            StatusCode::NOT_FOUND,
            &id,
            format!("no job {id} was dispatched"),
        ),
        Err(e) => unavailable(&id, &e),
    }
}

/// The claim's session a request of job `id`'s run (`what`) carries, once
/// it is the job's live one: nothing of a request is read into memory
/// before.
async fn live_session(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    what: &str,
) -> Result<String, Response> {
    let Some(session) = bearer(headers) else {
        return Err(refused(
            StatusCode::UNAUTHORIZED,
            id,
            format!("{what} carries the claim's session as `Authorization: Bearer …`"),
        ));
    };
    match state
        .store
        .dispatched_session_is(id, &token_hash(session))
        .await
    {
        Ok(true) => Ok(session.to_owned()),
        Ok(false) => Err(match state.store.progress_of(id).await {
            Ok(Some(progress)) if progress.state == DispatchState::Claimed => refused(
                StatusCode::FORBIDDEN,
                id,
                "the session is not this job's".into(),
            ),
            Ok(Some(progress)) => refused(
                StatusCode::CONFLICT,
                id,
                format!(
                    "the job was {}; nothing more is taken",
                    state_word(progress.state)
                ),
            ),
            Ok(None) => refused(
                StatusCode::NOT_FOUND,
                id,
                format!("no job {id} was dispatched"),
            ),
            Err(e) => unavailable(id, &e),
        }),
        Err(e) => Err(unavailable(id, &e)),
    }
}

/// A batch of a running job's output: appended once (a retried post is
/// taken as done), within the bound a job keeps.
async fn output(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let session = match live_session(&state, &id, &headers, "streamed output").await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let body = match axum::body::to_bytes(request.into_body(), POST_LIMIT).await {
        Ok(body) => body,
        Err(e) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &id,
                format!(
                "a batch of output could not be read whole ({e}); a post carries at most 256 KiB"
            ),
            )
        }
    };
    let batch: OutputBatch = match serde_json::from_slice(&body) {
        Ok(batch) => batch,
        Err(e) => return refused(StatusCode::BAD_REQUEST, &id, format!("the output posted is not a batch this version reads ({e}); run the same version on the runner as on the bot")),
    };
    let text = batch.text.replace('\0', "");
    match state
        .store
        .append_dispatched_output(&id, &token_hash(&session), batch.seq, &text, STREAMED_LIMIT)
        .await
    {
        Ok(OutputAppend::Appended | OutputAppend::Repeated) => StatusCode::NO_CONTENT.into_response(),
        Ok(OutputAppend::Full) => refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            &id,
            format!(
                "the job streamed {} of output already, all that is kept of it while it runs; the rest comes with the hand-back",
                crate::sandbox::profile::bytes_text(STREAMED_LIMIT)
            ),
        ),
        Ok(OutputAppend::NotTaken) => refused(
            StatusCode::CONFLICT,
            &id,
            "the job is no longer running; nothing more is taken".into(),
        ),
        Err(e) => unavailable(&id, &e),
    }
}

fn unavailable(id: &str, e: &anyhow::Error) -> Response {
    tracing::error!(target: "wavegate::dispatch", "job {id}: {e:#}");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": "the bot's database did not answer; try again"})),
    )
        .into_response()
}

fn state_word(state: DispatchState) -> &'static str {
    match state {
        DispatchState::Dispatched => "not claimed",
        DispatchState::Claimed => "claimed",
        DispatchState::Finished => "handed back",
        DispatchState::Abandoned => "given up on",
    }
}

/// Whether `token` is the OIDC token of the run the bot dispatched for
/// `record`: the issuer's, for this bot, of the repository, environment,
/// run, commit and default-branch workflow the dispatch named.
async fn verify_run_token(
    state: &AppState,
    record: &crate::store::DispatchedRecord,
    dispatched: &DispatchedJob,
    token: &str,
) -> Result<(), (StatusCode, String)> {
    let Some(audience) = &state.public_url else {
        return Err((
            StatusCode::FORBIDDEN,
            "this server has no WAVEGATE_PUBLIC_URL, the audience of run tokens".into(),
        ));
    };
    // The run may ask before its dispatch's answer, or the commit the
    // forge started it at, is recorded.
    let (Some(run_id), Some(sha)) = (record.run_id, record.run_sha.clone()) else {
        return Err((
            StatusCode::TOO_EARLY,
            "the job's run is not recorded yet; ask again in a moment".into(),
        ));
    };
    let expected = ExpectedRun {
        issuer: state.run_tokens.issuer().to_owned(),
        audience: audience.clone(),
        repository: dispatched.repository.clone(),
        environment: dispatched.environment.clone(),
        run_id,
        job_workflow_ref: format!(
            "{}/{}@{}",
            dispatched.repository, dispatched.workflow, dispatched.workflow_ref
        ),
        sha: Some(sha),
    };
    state
        .run_tokens
        .verify(token, &expected, state.store.now())
        .await
        .map(|_| ())
        .map_err(|e| match e {
            OidcError::Refused(why) => (StatusCode::FORBIDDEN, why.to_string()),
            OidcError::Keys(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
        })
}
