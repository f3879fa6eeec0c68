//! The HTTP server: webhook intake, health, and the GitHub App set-up pages.
//!
//! A delivery is verified in an extractor before any parsing, converted to
//! our own event, and recorded with the job it causes in one transaction;
//! the answer is 202 before anything slow happens. A delivery the store could
//! not record is answered 500 so the forge keeps it for redelivery.
//! `/metrics` serves Prometheus metrics (`metrics.rs`).

mod docs;
mod extract;
mod job_api;
mod metrics;
pub(crate) mod setup;

use crate::forge::events::{self, Parsed};
use crate::forge::registry::Forges;
use crate::forge::webhook;
use crate::jobs;
use crate::model::ForgeKind;
use crate::sandbox::Sandbox;
use crate::store::{Intake, NewDelivery, Store};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use extract::{ForgejoDelivery, GitHubDelivery, VerifiedDelivery};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::Notify;

/// GitHub sends deliveries of up to 25 MiB.
pub(crate) const BODY_LIMIT: usize = 25 * 1024 * 1024;

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) store: Store,
    pub(crate) forges: Arc<Forges>,
    /// Wakes a worker when a job was enqueued.
    pub(crate) wake: Arc<Notify>,
    /// Where this server is reached from outside (the manifest's URLs).
    pub(crate) public_url: Option<String>,
    pub(crate) setup: Arc<setup::SetupState>,
    /// Where commands run; `/readyz` fails while it cannot.
    pub(crate) sandbox: Arc<Sandbox>,
    /// Told when a delivery could not be recorded: once the database
    /// answers again, GitHub is asked to redeliver what failed.
    pub(crate) refused: Arc<Notify>,
    /// The keys GitHub Actions runs' OIDC tokens are signed with, for the
    /// claims of dispatched jobs.
    pub(crate) run_tokens: Arc<crate::dispatch::oidc::Jwks>,
    /// The repositories' run keys, which Forgejo runs' claims are proved
    /// with.
    pub(crate) run_keys: Arc<crate::dispatch::run_key::RunKeys>,
}

/// `bytes` random bytes as hex, from the kernel.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the kernel gives random bytes");
    hex::encode(buffer)
}

pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::handler))
        .route("/webhooks/github", post(github_webhook))
        .route("/webhooks/forgejo", post(forgejo_webhook))
        .route("/docs/{page}", get(docs::page))
        .route("/docs/images/{image}", get(docs::image))
        .route("/setup", get(setup::page_handler))
        .route("/setup/callback", get(setup::callback))
        .merge(job_api::routes())
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// How long the request path waits for the store before answering 503. A
/// forge must see the failure: GitHub marks a delivery failed after 10 s and
/// never redelivers it by itself, and a load balancer probing `/readyz`
/// should not hang on a pool that waits for a database that is gone.
const STORE_ANSWER: std::time::Duration = std::time::Duration::from_secs(1);

/// A database that answered this recently is busy, not gone: a delivery
/// waits [`STORE_PATIENCE`] more for it (still inside GitHub's 10 s) rather
/// than being refused, which GitHub would not retry by itself.
const STORE_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);
const STORE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(6);

async fn readyz(State(state): State<AppState>) -> Response {
    if let Some(problem) = state.sandbox.problem() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the sandbox is unavailable, so no plan or apply command can run: {problem}"),
        )
            .into_response();
    }
    match tokio::time::timeout(STORE_ANSWER, state.store.ping())
        .await
        .unwrap_or_else(|_| {
            // Slow, but it answered a moment ago: busy, not gone.
            if state.store.answered_within(STORE_ALIVE) {
                return Ok(());
            }
            Err(anyhow::anyhow!(
                "it did not answer within {}s",
                STORE_ANSWER.as_secs()
            ))
        }) {
        Ok(()) => (
            StatusCode::OK,
            format!(
                "ready; execution profiles' limits held by {}",
                state.sandbox.limits_mechanism()
            ),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!("not ready: {error:#}");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the database is not reachable: {error:#}"),
            )
                .into_response()
        }
    }
}

async fn github_webhook(
    State(state): State<AppState>,
    GitHubDelivery(delivery): GitHubDelivery,
) -> Response {
    intake(&state, delivery).await
}

async fn forgejo_webhook(
    State(state): State<AppState>,
    ForgejoDelivery(delivery): ForgejoDelivery,
) -> Response {
    intake(&state, delivery).await
}

/// A GitHub delivery could not be recorded: GitHub logs it failed and never
/// retries it by itself, so the reconciler asks for it once the database
/// answers again. (Forgejo retries nothing either and has no such log: its
/// lost comments are swept.)
fn refused(state: &AppState, sender: ForgeKind) {
    if sender == ForgeKind::GitHub {
        state.refused.notify_one();
    }
}

async fn intake(state: &AppState, delivery: VerifiedDelivery) -> Response {
    let headers = &delivery.headers;
    let answered = |outcome: &'static str| {
        metrics::delivery(
            headers.sender,
            &headers.event_type,
            outcome,
            delivery.started,
        )
    };
    let parsed = match headers.sender {
        ForgeKind::GitHub => events::parse_github(&headers.event_type, &delivery.body),
        ForgeKind::Forgejo => events::parse_forgejo(&headers.event_type, &delivery.body),
    };
    let event = match parsed {
        Ok(Parsed::Event(event)) => event,
        Ok(Parsed::Ignored(reason)) => {
            tracing::debug!(delivery = %headers.delivery_id, event = %headers.event_type, "ignored: {reason}");
            answered("ignored");
            return accepted(json!({"status": "ignored", "reason": reason}));
        }
        Err(error) => {
            tracing::warn!(delivery = %headers.delivery_id, "refused a malformed delivery: {error}");
            answered("malformed");
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"status": "malformed", "error": error.to_string()})),
            )
                .into_response();
        }
    };
    let consequence = jobs::consequence(&event);
    let record = NewDelivery {
        forge: headers.sender,
        target: webhook::dedupe_target_of(headers.sender, &event, &delivery.body),
        delivery_id: headers.delivery_id.clone(),
        event_type: headers.event_type.clone(),
    };
    let queued = consequence.task.map(jobs::Task::into_job);
    let write = state
        .store
        .record_delivery(record, queued, consequence.head);
    tokio::pin!(write);
    let recorded = match tokio::time::timeout(STORE_ANSWER, &mut write).await {
        Ok(recorded) => Ok(recorded),
        Err(_) if state.store.answered_within(STORE_ALIVE) => {
            tokio::time::timeout(STORE_PATIENCE, &mut write).await
        }
        Err(elapsed) => Err(elapsed),
    };
    let Ok(recorded) = recorded else {
        // The write may still land; a redelivery is then a duplicate.
        tracing::error!(delivery = %headers.delivery_id, "the database did not answer within {}s; answered 503 so the forge redelivers", STORE_ANSWER.as_secs());
        refused(state, headers.sender);
        answered("unavailable");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "error": "the database did not answer in time; the delivery may not be stored: redeliver it"})),
        )
            .into_response();
    };
    match recorded {
        Ok(Intake::Recorded { job: Some(job), .. }) => {
            state.wake.notify_one();
            tracing::info!(delivery = %headers.delivery_id, %job, "delivery recorded; job queued");
            answered("queued");
            accepted(json!({"status": "queued", "job": job.0}))
        }
        Ok(Intake::Recorded { job: None, .. }) => {
            tracing::info!(delivery = %headers.delivery_id, event = %headers.event_type, "delivery recorded; nothing to do");
            answered("recorded");
            accepted(json!({"status": "recorded"}))
        }
        Ok(Intake::Duplicate) => {
            tracing::info!(delivery = %headers.delivery_id, "duplicate delivery ignored");
            answered("duplicate");
            accepted(json!({"status": "duplicate"}))
        }
        Err(error) => {
            tracing::error!(delivery = %headers.delivery_id, "could not record a delivery: {error:?}");
            refused(state, headers.sender);
            answered("unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "error": "the delivery could not be stored; redeliver it"})),
            )
                .into_response()
        }
    }
}

fn accepted(body: serde_json::Value) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}
