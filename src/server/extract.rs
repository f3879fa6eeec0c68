//! The webhook extractors: read the raw body (within the size limit), read the
//! delivery headers, and check the signature against every configured
//! secret, all before any byte of the payload is parsed.

use super::AppState;
use crate::forge::webhook::{self, DeliveryHeaders};
use crate::model::ForgeKind;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::time::Instant;

/// A delivery whose signature checked out.
pub(crate) struct VerifiedDelivery {
    pub(crate) headers: DeliveryHeaders,
    pub(crate) body: Bytes,
    /// When its intake began (the intake duration is measured from here).
    pub(crate) started: Instant,
}

/// A delivery to `/webhooks/github`.
pub(crate) struct GitHubDelivery(pub VerifiedDelivery);

/// A delivery to `/webhooks/forgejo`.
pub(crate) struct ForgejoDelivery(pub VerifiedDelivery);

/// Why a delivery was refused before parsing.
pub(crate) struct Refusal(StatusCode, String);

impl Refusal {
    /// The outcome it is counted under in `wavegate_deliveries_total`.
    fn outcome(&self) -> &'static str {
        match self.0 {
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            _ => "malformed",
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"status": "refused", "error": self.1}))).into_response()
    }
}

/// Verifies a delivery; a refusal is counted here, an accepted delivery
/// once the intake answers it.
async fn verify(
    req: Request,
    state: &AppState,
    endpoint: ForgeKind,
) -> Result<VerifiedDelivery, Refusal> {
    let started = Instant::now();
    match check(req, state, endpoint).await {
        Ok((headers, body)) => Ok(VerifiedDelivery {
            headers,
            body,
            started,
        }),
        Err(refusal) => {
            super::metrics::delivery(endpoint, "unknown", refusal.outcome(), started);
            Err(refusal)
        }
    }
}

/// The signature is checked first: an unsigned request learns nothing but 401.
async fn check(
    req: Request,
    state: &AppState,
    endpoint: ForgeKind,
) -> Result<(DeliveryHeaders, Bytes), Refusal> {
    let too_large = || {
        Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the delivery is larger than {} MiB, the most a forge sends",
                super::BODY_LIMIT / (1024 * 1024)
            ),
        )
    };
    // A body announced as too large is refused before a byte of it is read.
    let announced = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|length| length > super::BODY_LIMIT as u64) {
        return Err(too_large());
    }
    let signature = webhook::signature_header(endpoint, req.headers());
    let headers = webhook::read_headers(endpoint, req.headers());
    let body = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            Refusal(rejection.status(), rejection.body_text())
        }
    })?;
    let secrets = state.forges.webhook_secrets(endpoint);
    webhook::verify_signature(endpoint, signature.as_deref(), &body, &secrets).map_err(|e| {
        tracing::warn!(endpoint = %endpoint, "refused a delivery: {e}");
        Refusal(StatusCode::UNAUTHORIZED, e.to_string())
    })?;
    let headers = headers.map_err(|e| Refusal(StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok((headers, body))
}

impl FromRequest<AppState> for GitHubDelivery {
    type Rejection = Refusal;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        verify(req, state, ForgeKind::GitHub).await.map(Self)
    }
}

impl FromRequest<AppState> for ForgejoDelivery {
    type Rejection = Refusal;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        verify(req, state, ForgeKind::Forgejo).await.map(Self)
    }
}
