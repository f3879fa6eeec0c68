//! A notification receiver over HTTP, as an operator would run one: it
//! checks each delivery's `X-Wavegate-Signature-256` against its key with
//! its own HMAC (the GitHub scheme `support::sign_github` computes), keeps
//! what it accepted, and can answer the next attempts with a 503.

use super::sign_github;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// One delivery as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub event: String,
    pub body: Value,
    /// The signature was present and right for the key.
    pub verified: bool,
}

#[derive(Default)]
struct Inbox {
    received: Vec<Received>,
    /// Attempts refused with a 503, answered before any is kept.
    refuse: usize,
    refused: usize,
}

pub struct Receiver {
    pub url: String,
    inbox: Arc<Mutex<Inbox>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// A receiver checking signatures against `key`.
    pub async fn start(key: &'static str) -> Self {
        let inbox: Arc<Mutex<Inbox>> = Arc::default();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state((inbox.clone(), key));
        let listener = crate::support::bot::listen_on_a_free_port().await;
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            inbox,
            _server: server,
        }
    }

    /// Everything kept so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.inbox.lock().unwrap().received.clone()
    }

    /// The events kept so far, in arrival order.
    pub fn events(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.event).collect()
    }

    /// The next `n` attempts are answered 503 and not kept.
    pub fn refuse_next(&self, n: usize) {
        self.inbox.lock().unwrap().refuse = n;
    }

    /// How many attempts were answered 503.
    pub fn refused(&self) -> usize {
        self.inbox.lock().unwrap().refused
    }
}

async fn receive(
    State((inbox, key)): State<(Arc<Mutex<Inbox>>, &'static str)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let mut inbox = inbox.lock().unwrap();
    if inbox.refuse > 0 {
        inbox.refuse -= 1;
        inbox.refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let verified = header("x-wavegate-signature-256") == sign_github(key, &body);
    inbox.received.push(Received {
        event: header("x-wavegate-event"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        verified,
    });
    StatusCode::OK
}
