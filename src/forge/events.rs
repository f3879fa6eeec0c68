//! Webhook payloads → [`Event`]: GitHub's and Forgejo/Gitea's JSON, read with
//! our own minimal serde structs, converted at the boundary.

use super::Event;

/// The outcome of reading a delivery's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Event(Box<Event>),
    /// A delivery wavegate does not act on, and why (202, nothing queued).
    Ignored(String),
}

/// A payload for an event we act on that does not have the documented shape.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{event} payload is malformed: {problem}")]
pub struct ParseError {
    pub event: String,
    pub problem: String,
}

/// Reads a GitHub delivery; `event_type` is the `X-GitHub-Event` header.
pub fn parse_github(event_type: &str, _body: &[u8]) -> Result<Parsed, ParseError> {
    Ok(Parsed::Ignored(format!(
        "`{event_type}` is not handled yet"
    )))
}

/// Reads a Forgejo/Gitea delivery; `event_type` is `X-Forgejo-Event-Type` (or `X-Gitea-Event-Type`).
pub fn parse_forgejo(event_type: &str, _body: &[u8]) -> Result<Parsed, ParseError> {
    Ok(Parsed::Ignored(format!(
        "`{event_type}` is not handled yet"
    )))
}
