//! Webhook payloads → [`Event`]: GitHub's and Forgejo/Gitea's JSON, read with
//! our own minimal serde structs, converted at the boundary.
//!
//! A probe (the action, whether a comment is on a pull request, and for a
//! comment on an issue whether it has an `/apply` line) decides whether
//! wavegate acts on a delivery at all, so a delivery we ignore never
//! fails on a shape we do not care about; the full struct's errors name the
//! JSON path of the field at fault. The full struct carries the probe's
//! fields: when the body opens with an action wavegate acts on (both forges
//! write `action` first), it is read as the full struct at once and decided
//! on as the probe would decide, one pass instead of two. Otherwise the probe
//! goes first, as it costs less than the full struct (measured: about two
//! thirds) and most such deliveries are ignored. Every pass deserializes
//! straight from the body slice (up to 25 MiB), never through a
//! `serde_json::Value`.

use super::types::unix_ms;
use super::{Event, PrAction, PullRequest, RepoRef, ReviewState};
use crate::model::{CommitSha, ForgeKind, PrNumber, RepoId, User};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use std::ops::ControlFlow;

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
pub fn parse_github(event_type: &str, body: &[u8]) -> Result<Parsed, ParseError> {
    let reader = Reader { event: event_type };
    match event_type {
        "pull_request" => github::pull_request(&reader, body),
        "issue_comment" => github::issue_comment(&reader, body),
        "pull_request_review" => github::review(&reader, body),
        "installation" => github::installation(&reader, body),
        "check_run" => github::check_run(&reader, body),
        "ping" => Ok(event(Event::Ping)),
        other => Ok(not_used(other)),
    }
}

/// Reads a Forgejo/Gitea delivery; `event_type` is `X-Forgejo-Event-Type` (or `X-Gitea-Event-Type`).
pub fn parse_forgejo(event_type: &str, body: &[u8]) -> Result<Parsed, ParseError> {
    let reader = Reader { event: event_type };
    match event_type {
        "pull_request" | "pull_request_sync" => forgejo::pull_request(&reader, body),
        "pull_request_comment" => forgejo::pull_request_comment(&reader, body),
        "pull_request_review_approved" => forgejo::review(&reader, body, ReviewState::Approved),
        "pull_request_review_rejected" => {
            forgejo::review(&reader, body, ReviewState::ChangesRequested)
        }
        "pull_request_review_comment" => forgejo::review(&reader, body, ReviewState::Commented),
        "issue_comment" => forgejo::issue_comment(&reader, body),
        other => Ok(not_used(other)),
    }
}

const COMMENT_ON_ISSUE: &str = "comment on an issue, not a pull request";
const EDIT_WITHOUT_BASE_CHANGE: &str = "an edit that does not change the base branch needs no plan";

/// The commands read on an issue that is not a pull request: a drift
/// issue's `/apply <digest>`, and its run's `/approve`, `/revoke`, `/retry`
/// and `/help`; whether the issue is one is the worker's to find.
const ISSUE_COMMANDS: [&str; 5] = ["/apply", "/approve", "/revoke", "/retry", "/help"];

/// Whether a line of `text` opens with one of [`ISSUE_COMMANDS`], leading
/// whitespace aside.
fn has_apply_line(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        ISSUE_COMMANDS
            .iter()
            .any(|command| line.starts_with(command))
    })
}

/// A comment's text as a probe reads it: whether it [`has_apply_line`],
/// decided on the text in place, none of it copied.
struct ApplyLine(bool);

impl<'de> Deserialize<'de> for ApplyLine {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = ApplyLine;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ApplyLine, E> {
                Ok(ApplyLine(has_apply_line(text)))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

/// The `comment` of a comment delivery, as its probe reads it.
#[derive(Deserialize)]
struct CommentTextProbe {
    body: Option<ApplyLine>,
}

impl CommentTextProbe {
    fn of(text: &str) -> Option<Self> {
        Some(Self {
            body: Some(ApplyLine(has_apply_line(text))),
        })
    }

    /// Whether a comment on an issue is read on: only with an `/apply` line.
    fn applies(probe: Option<Self>) -> bool {
        probe.and_then(|p| p.body).is_some_and(|ApplyLine(yes)| yes)
    }
}

/// `closed`: a merge must name its merge commit (GitHub fills
/// `merge_commit_sha` with a test merge even when not merged: ignored then).
fn closed(
    reader: &Reader,
    merged: Option<bool>,
    merge_commit_sha: Option<&str>,
) -> Result<PrAction, ParseError> {
    let merged = merged.unwrap_or(false);
    let merge_sha = if merged {
        let path = "pull_request.merge_commit_sha";
        let sha = reader.require(merge_commit_sha.filter(|s| !s.is_empty()), path)?;
        Some(reader.sha(sha, path)?)
    } else {
        None
    };
    Ok(PrAction::Closed { merged, merge_sha })
}

/// Reads a body as `T`, from text when it is UTF-8: serde_json then skips
/// its check of every string it keeps (each key of every object it reads
/// into a struct), and one check of the whole body costs less (a 28 KB
/// `pull_request` delivery: 13.6 µs read as bytes, 11.6 µs as text). A body
/// that is not UTF-8 is read as bytes, as before, so it fails or reads
/// exactly as it did.
fn from_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, serde_json::Error> {
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

fn event(event: Event) -> Parsed {
    Parsed::Event(Box::new(event))
}

fn not_used(event_type: &str) -> Parsed {
    Parsed::Ignored(format!("`{event_type}` events are not used by wavegate"))
}

fn action_not_used(event_type: &str, action: &str) -> Parsed {
    Parsed::Ignored(format!(
        "`{event_type}` with action `{action}` is not used by wavegate"
    ))
}

fn comment_action_ignored(action: &str) -> Parsed {
    let why = match action {
        "edited" => "an edited comment is never a command".to_owned(),
        "deleted" => "a deleted comment is never a command".to_owned(),
        other => format!("a comment `{other}` is never a command"),
    };
    Parsed::Ignored(why)
}

/// Deserializes one delivery's body and words its errors for the event.
struct Reader<'e> {
    event: &'e str,
}

impl Reader<'_> {
    fn read<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, ParseError> {
        // The common case, a body that reads, goes without tracking paths;
        // only a failure is read again, as bytes, to name the field at fault
        // (serde_json reads text and bytes by one grammar, so it fails the
        // same way).
        if let Ok(value) = from_body(body) {
            return Ok(value);
        }
        let mut de = serde_json::Deserializer::from_slice(body);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            self.malformed(describe(&path, e.inner()))
        })?;
        de.end()
            .map_err(|e| self.malformed(format!("not valid JSON: {}", e)))?;
        Ok(value)
    }

    /// Reads a delivery that the probe `P` decides on: `decide` answers it
    /// without reading further (`Break`) or lets it be read as `T`. When
    /// the body opens with one of the actions in `read_first`, it is read as
    /// `T` straight away: `T` carries the probe's fields, typed alike, and
    /// `probe_of` takes them off it, so the decision is the probe's own. In
    /// every other case (and when the body does not read as `T`) the probe
    /// goes first, so an ignored delivery never fails on a shape wavegate
    /// does not read, and one it acts on is read again to name the field at
    /// fault. The opening only chooses the order, never the answer.
    fn read_decided<P: DeserializeOwned, T: DeserializeOwned>(
        &self,
        body: &[u8],
        read_first: &[&str],
        probe_of: impl FnOnce(&T) -> P,
        decide: impl Fn(P) -> Result<ControlFlow<Parsed>, ParseError>,
    ) -> Result<ControlFlow<Parsed, T>, ParseError> {
        let acted_on = leading_action(body).is_some_and(|action| read_first.contains(&action));
        if let Some(payload) = acted_on.then(|| from_body::<T>(body).ok()).flatten() {
            return Ok(match decide(probe_of(&payload))? {
                ControlFlow::Continue(()) => ControlFlow::Continue(payload),
                ControlFlow::Break(answer) => ControlFlow::Break(answer),
            });
        }
        if let ControlFlow::Break(answer) = decide(self.read(body)?)? {
            return Ok(ControlFlow::Break(answer));
        }
        self.read(body).map(ControlFlow::Continue)
    }

    /// [`Reader::read_decided`] of a delivery decided on its action alone:
    /// read on when it is one of `acted_on`, else ignored.
    fn read_acted_on<T: DeserializeOwned>(
        &self,
        body: &[u8],
        acted_on: &[&str],
        action_of: impl FnOnce(&T) -> &Option<String>,
    ) -> Result<ControlFlow<Parsed, T>, ParseError> {
        self.read_decided(
            body,
            acted_on,
            |payload| ActionProbe::of(action_of(payload)),
            |probe: ActionProbe| probe.decide(self, acted_on),
        )
    }

    fn malformed(&self, problem: String) -> ParseError {
        ParseError {
            event: self.event.to_owned(),
            problem,
        }
    }

    fn missing(&self, path: &str) -> ParseError {
        self.malformed(format!("{path} is missing"))
    }

    fn require<T>(&self, value: Option<T>, path: &str) -> Result<T, ParseError> {
        value.ok_or_else(|| self.missing(path))
    }

    fn sha(&self, text: &str, path: &str) -> Result<CommitSha, ParseError> {
        CommitSha::parse(text).map_err(|why| self.malformed(format!("{path}: {why}")))
    }

    fn action(&self, action: Option<String>) -> Result<String, ParseError> {
        self.require(action, "action")
    }
}

/// Turns serde's error into "`a.b.c` is missing" / "a.b: invalid type …".
fn describe(path: &str, error: &serde_json::Error) -> String {
    if error.is_syntax() || error.is_eof() {
        return format!("not valid JSON: {error}");
    }
    let full = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let message = full.strip_suffix(&position).unwrap_or(&full);
    let field = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'));
    match (field, path) {
        (Some(field), ".") => format!("{field} is missing"),
        (Some(field), parent) => format!("{parent}.{field} is missing"),
        (None, ".") => message.to_owned(),
        (None, at) => format!("{at}: {message}"),
    }
}

/// The largest id or number the store keeps (a 64-bit signed integer): a
/// payload naming a larger one is malformed (400), not a failure to store.
const LARGEST_STORABLE: u64 = i64::MAX as u64;

/// What wavegate reads of a comment's or review's text, in bytes: far above
/// either forge's own limit (GitHub 65,536 characters), so that a payload
/// cannot make a job of megabytes.
pub(crate) const COMMENT_TEXT_LIMIT: usize = 1024 * 1024;

fn storable<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let number = u64::deserialize(deserializer)?;
    if number > LARGEST_STORABLE {
        return Err(serde::de::Error::custom(format!(
            "{number} is larger than {LARGEST_STORABLE}, the largest id or number a forge issues"
        )));
    }
    Ok(number)
}

fn storable_or_none<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    struct Storable(#[serde(deserialize_with = "storable")] u64);
    Ok(Option::<Storable>::deserialize(deserializer)?.map(|Storable(n)| n))
}

/// A comment's text, refused before it is copied when it is longer than
/// [`COMMENT_TEXT_LIMIT`].
fn comment_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<String, E> {
            if text.len() > COMMENT_TEXT_LIMIT {
                return Err(E::custom(format!(
                    "{} bytes of text, more than the {} KiB wavegate reads of a comment",
                    text.len(),
                    COMMENT_TEXT_LIMIT / 1024
                )));
            }
            Ok(text.to_owned())
        }
    }
    deserializer.deserialize_str(Text)
}

/// Either forge's account shape: GitHub has `type`, Forgejo `username`.
#[derive(Deserialize)]
struct RawUser {
    id: i64,
    login: Option<String>,
    username: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

impl RawUser {
    /// Forgejo's system accounts (ghost -1, actions -2) have negative ids:
    /// they become id 0 and count as bots, so they can never approve.
    fn into_user(self, reader: &Reader, path: &str) -> Result<User, ParseError> {
        let login = self
            .login
            .filter(|l| !l.is_empty())
            .or(self.username)
            .ok_or_else(|| reader.missing(&format!("{path}.login")))?;
        let system_account = self.id < 0;
        let is_bot =
            system_account || self.kind.as_deref() == Some("Bot") || login.ends_with("[bot]");
        Ok(User {
            id: u64::try_from(self.id).unwrap_or(0),
            login,
            is_bot,
        })
    }
}

#[derive(Deserialize)]
struct RawRepository {
    #[serde(deserialize_with = "storable")]
    id: u64,
    full_name: String,
    clone_url: String,
}

impl RawRepository {
    fn into_ref(self, forge: ForgeKind, installation: Option<u64>) -> RepoRef {
        RepoRef {
            id: RepoId::new(forge, self.full_name),
            forge_id: self.id,
            clone_url: self.clone_url,
            installation,
        }
    }
}

/// The action a body names first, when it opens `{"action":"…"` as both
/// forges write their payloads; a guess at what [`Reader::read_decided`]
/// will find, so a body that lies here is only read in the slower order.
fn leading_action(body: &[u8]) -> Option<&str> {
    let rest = body
        .trim_ascii_start()
        .strip_prefix(b"{")?
        .trim_ascii_start()
        .strip_prefix(b"\"action\"")?
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start()
        .strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    let plain = rest[end] == b'"';
    plain
        .then(|| std::str::from_utf8(&rest[..end]).ok())
        .flatten()
}

#[derive(Deserialize)]
struct ActionProbe {
    action: Option<String>,
}

impl ActionProbe {
    fn of(action: &Option<String>) -> Self {
        Self {
            action: action.clone(),
        }
    }

    /// Reads on when the action is one of `acted_on`, else ignores the delivery.
    fn decide(self, reader: &Reader, acted_on: &[&str]) -> Result<ControlFlow<Parsed>, ParseError> {
        let action = reader.action(self.action)?;
        Ok(if acted_on.contains(&action.as_str()) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(action_not_used(reader.event, &action))
        })
    }
}

/// The payload read on, or the answer given without reading it.
macro_rules! read_on {
    ($read:expr) => {
        match $read? {
            ControlFlow::Continue(payload) => payload,
            ControlFlow::Break(answer) => return Ok(answer),
        }
    };
}

#[derive(Deserialize)]
struct IdOnly {
    #[serde(deserialize_with = "storable")]
    id: u64,
}

mod github {
    use super::*;

    #[derive(Deserialize)]
    struct PullRequestEvent {
        action: Option<String>,
        pull_request: RawPullRequest,
        repository: RawRepository,
        installation: Option<IdOnly>,
        changes: Option<PrChanges>,
        sender: Option<RawUser>,
    }

    #[derive(Deserialize)]
    struct PrChanges {
        base: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    struct RawPullRequest {
        #[serde(deserialize_with = "storable")]
        number: u64,
        title: String,
        user: RawUser,
        head: Branch,
        base: Branch,
        merged: Option<bool>,
        merge_commit_sha: Option<String>,
    }

    #[derive(Deserialize)]
    struct Branch {
        #[serde(rename = "ref")]
        name: String,
        sha: CommitSha,
        repo: Option<BranchRepo>,
    }

    #[derive(Deserialize)]
    struct BranchRepo {
        full_name: String,
        clone_url: Option<String>,
    }

    pub(super) fn pull_request(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        let mut payload: PullRequestEvent = read_on!(reader.read_acted_on(
            body,
            &["opened", "reopened", "synchronize", "edited", "closed"],
            |p: &PullRequestEvent| &p.action
        ));
        let action = reader.action(payload.action.take())?;
        let pr = payload.pull_request;
        let action = match action.as_str() {
            "opened" => PrAction::Opened,
            "reopened" => PrAction::Reopened,
            "synchronize" => PrAction::Pushed,
            "edited" if payload.changes.is_some_and(|c| c.base.is_some()) => PrAction::BaseChanged,
            "edited" => return Ok(Parsed::Ignored(EDIT_WITHOUT_BASE_CHANGE.to_owned())),
            _ => closed(reader, pr.merged, pr.merge_commit_sha.as_deref())?,
        };
        let base_name = &payload.repository.full_name;
        let head_repo = pr.head.repo;
        let from_fork = head_repo
            .as_ref()
            .is_none_or(|head| &head.full_name != base_name);
        let head_clone_url = if from_fork {
            head_repo.and_then(|head| head.clone_url)
        } else {
            None
        };
        let pr = PullRequest {
            number: PrNumber(pr.number),
            title: pr.title,
            author: pr.user.into_user(reader, "pull_request.user")?,
            head_sha: pr.head.sha,
            head_ref: pr.head.name,
            base_ref: pr.base.name,
            base_sha: pr.base.sha,
            from_fork,
            head_clone_url,
        };
        let installation = payload.installation.map(|i| i.id);
        // Only who pushed a head is read from it; a sender without a login
        // leaves that unknown rather than refusing the delivery.
        let sender = payload
            .sender
            .and_then(|u| u.into_user(reader, "sender").ok());
        Ok(event(Event::PullRequest {
            repo: payload.repository.into_ref(ForgeKind::GitHub, installation),
            pr,
            action,
            sender,
        }))
    }

    #[derive(Deserialize)]
    struct CommentProbe {
        action: Option<String>,
        issue: Option<IssueProbe>,
        comment: Option<CommentTextProbe>,
    }

    #[derive(Deserialize)]
    struct IssueProbe {
        pull_request: Option<IgnoredAny>,
    }

    impl CommentProbe {
        fn decide(self, reader: &Reader) -> Result<ControlFlow<Parsed>, ParseError> {
            let action = reader.action(self.action)?;
            if action != "created" {
                return Ok(ControlFlow::Break(comment_action_ignored(&action)));
            }
            let on_issue = self.issue.is_some_and(|issue| issue.pull_request.is_none());
            if on_issue && !CommentTextProbe::applies(self.comment) {
                return Ok(ControlFlow::Break(Parsed::Ignored(
                    COMMENT_ON_ISSUE.to_owned(),
                )));
            }
            Ok(ControlFlow::Continue(()))
        }
    }

    #[derive(Deserialize)]
    struct IssueCommentEvent {
        action: Option<String>,
        issue: Issue,
        comment: Comment,
        repository: RawRepository,
        installation: Option<IdOnly>,
    }

    #[derive(Deserialize)]
    struct Issue {
        #[serde(deserialize_with = "storable")]
        number: u64,
        pull_request: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    struct Comment {
        #[serde(deserialize_with = "storable")]
        id: u64,
        #[serde(deserialize_with = "comment_text")]
        body: String,
        user: RawUser,
        created_at: Option<String>,
    }

    pub(super) fn issue_comment(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        // A comment on an issue is as common as one on a pull request, and
        // only the probe tells them apart without reading the comment.
        let payload: IssueCommentEvent = read_on!(reader.read_decided(
            body,
            &[],
            |p: &IssueCommentEvent| CommentProbe {
                action: p.action.clone(),
                issue: Some(IssueProbe {
                    pull_request: p.issue.pull_request,
                }),
                comment: CommentTextProbe::of(&p.comment.body),
            },
            |probe: CommentProbe| probe.decide(reader)
        ));
        let installation = payload.installation.map(|i| i.id);
        Ok(event(Event::Comment {
            repo: payload.repository.into_ref(ForgeKind::GitHub, installation),
            pr: PrNumber(payload.issue.number),
            comment_id: payload.comment.id,
            author: payload.comment.user.into_user(reader, "comment.user")?,
            body: payload.comment.body,
            written_at: payload.comment.created_at.as_deref().and_then(unix_ms),
        }))
    }

    #[derive(Deserialize)]
    struct ReviewEvent {
        action: Option<String>,
        review: Review,
        pull_request: PrNumberOnly,
        repository: RawRepository,
        installation: Option<IdOnly>,
    }

    #[derive(Deserialize)]
    struct Review {
        #[serde(deserialize_with = "storable")]
        id: u64,
        state: String,
        commit_id: Option<CommitSha>,
        user: RawUser,
        #[serde(default)]
        submitted_at: Option<String>,
    }

    #[derive(Deserialize)]
    struct PrNumberOnly {
        #[serde(deserialize_with = "storable")]
        number: u64,
    }

    pub(super) fn review(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        let mut payload: ReviewEvent = read_on!(reader.read_acted_on(
            body,
            &["submitted", "dismissed"],
            |p: &ReviewEvent| &p.action
        ));
        let action = reader.action(payload.action.take())?;
        // A dismissed review keeps the state it had; the action is what counts.
        let state = if action == "dismissed" {
            "dismissed".to_owned()
        } else {
            payload.review.state.to_ascii_lowercase()
        };
        let state = match state.as_str() {
            "approved" => ReviewState::Approved,
            "changes_requested" => ReviewState::ChangesRequested,
            "commented" => ReviewState::Commented,
            "dismissed" => ReviewState::Dismissed,
            other => {
                return Err(reader.malformed(format!(
                    "review.state `{other}` is not one of approved, changes_requested, commented, dismissed"
                )))
            }
        };
        let installation = payload.installation.map(|i| i.id);
        Ok(event(Event::Review {
            repo: payload.repository.into_ref(ForgeKind::GitHub, installation),
            pr: PrNumber(payload.pull_request.number),
            review_id: payload.review.id,
            author: payload.review.user.into_user(reader, "review.user")?,
            state,
            commit: payload.review.commit_id,
            submitted_at: payload.review.submitted_at.as_deref().and_then(unix_ms),
        }))
    }

    #[derive(Deserialize)]
    struct InstallationEvent {
        action: Option<String>,
        installation: Installation,
    }

    #[derive(Deserialize)]
    struct Installation {
        #[serde(deserialize_with = "storable")]
        id: u64,
        account: Account,
    }

    #[derive(Deserialize)]
    struct Account {
        login: String,
    }

    pub(super) fn installation(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        let mut payload: InstallationEvent = read_on!(reader.read_acted_on(
            body,
            &["created", "deleted"],
            |p: &InstallationEvent| &p.action
        ));
        let created = reader.action(payload.action.take())? == "created";
        Ok(event(Event::Installation {
            installation: payload.installation.id,
            account: payload.installation.account.login,
            created,
        }))
    }

    #[derive(Deserialize)]
    struct CheckRunEvent {
        action: Option<String>,
        check_run: CheckRun,
        repository: RawRepository,
        installation: Option<IdOnly>,
    }

    #[derive(Deserialize)]
    struct CheckRun {
        head_sha: CommitSha,
        #[serde(default)]
        pull_requests: Vec<PrNumberOnly>,
    }

    pub(super) fn check_run(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        let payload: CheckRunEvent =
            read_on!(reader.read_acted_on(body, &["rerequested"], |p: &CheckRunEvent| &p.action));
        let installation = payload.installation.map(|i| i.id);
        Ok(event(Event::CheckRunRerequested {
            repo: payload.repository.into_ref(ForgeKind::GitHub, installation),
            head_sha: payload.check_run.head_sha,
            prs: payload
                .check_run
                .pull_requests
                .into_iter()
                .map(|pr| PrNumber(pr.number))
                .collect(),
        }))
    }
}

mod forgejo {
    use super::*;

    /// Forgejo's `PullRequestPayload`: pull request events and reviews.
    #[derive(Deserialize)]
    struct PullRequestEvent {
        action: Option<String>,
        #[serde(default, deserialize_with = "storable_or_none")]
        number: Option<u64>,
        pull_request: RawPullRequest,
        repository: RawRepository,
        changes: Option<PrChanges>,
        sender: Option<RawUser>,
        commit_id: Option<String>,
    }

    #[derive(Deserialize)]
    struct PrChanges {
        #[serde(rename = "ref")]
        base: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    struct RawPullRequest {
        #[serde(default, deserialize_with = "storable_or_none")]
        number: Option<u64>,
        title: String,
        user: RawUser,
        head: Branch,
        base: Branch,
        merged: Option<bool>,
        merge_commit_sha: Option<String>,
    }

    #[derive(Deserialize)]
    struct Branch {
        #[serde(rename = "ref")]
        name: String,
        sha: CommitSha,
        repo_id: Option<i64>,
        repo: Option<BranchRepo>,
    }

    #[derive(Deserialize)]
    struct BranchRepo {
        full_name: String,
        clone_url: Option<String>,
    }

    impl PullRequestEvent {
        fn number(&self, reader: &Reader) -> Result<PrNumber, ParseError> {
            let number = self.number.filter(|n| *n > 0).or(self.pull_request.number);
            reader.require(number, "number").map(PrNumber)
        }

        /// A head repository we cannot identify counts as a fork: the
        /// stricter reading, as for GitHub's deleted forks.
        fn head_is_fork(&self) -> bool {
            let head = &self.pull_request.head;
            match (&head.repo, head.repo_id) {
                (Some(repo), _) => repo.full_name != self.repository.full_name,
                (None, Some(id)) if id > 0 => u64::try_from(id).ok() != Some(self.repository.id),
                (None, _) => true,
            }
        }
    }

    pub(super) fn pull_request(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        let mut payload: PullRequestEvent = read_on!(reader.read_acted_on(
            body,
            &["opened", "reopened", "synchronized", "edited", "closed"],
            |p: &PullRequestEvent| &p.action
        ));
        let action = reader.action(payload.action.take())?;
        let number = payload.number(reader)?;
        let from_fork = payload.head_is_fork();
        let sender = payload
            .sender
            .and_then(|u| u.into_user(reader, "sender").ok());
        let pr = payload.pull_request;
        let action = match action.as_str() {
            "opened" => PrAction::Opened,
            "reopened" => PrAction::Reopened,
            "synchronized" => PrAction::Pushed,
            "edited" if payload.changes.is_some_and(|c| c.base.is_some()) => PrAction::BaseChanged,
            "edited" => return Ok(Parsed::Ignored(EDIT_WITHOUT_BASE_CHANGE.to_owned())),
            _ => closed(reader, pr.merged, pr.merge_commit_sha.as_deref())?,
        };
        let head_clone_url = if from_fork {
            pr.head.repo.and_then(|head| head.clone_url)
        } else {
            None
        };
        let pr = PullRequest {
            number,
            title: pr.title,
            author: pr.user.into_user(reader, "pull_request.user")?,
            head_sha: pr.head.sha,
            head_ref: pr.head.name,
            base_ref: pr.base.name,
            base_sha: pr.base.sha,
            from_fork,
            head_clone_url,
        };
        Ok(event(Event::PullRequest {
            repo: payload.repository.into_ref(ForgeKind::Forgejo, None),
            pr,
            action,
            sender,
        }))
    }

    /// Forgejo's review: the reviewer is the sender; the payload carries no
    /// review id (→ 0), and the commit is `commit_id` when set, else the head.
    pub(super) fn review(
        reader: &Reader,
        body: &[u8],
        state: ReviewState,
    ) -> Result<Parsed, ParseError> {
        let payload: PullRequestEvent =
            read_on!(reader.read_acted_on(body, &["reviewed"], |p: &PullRequestEvent| &p.action));
        let pr = payload.number(reader)?;
        let commit = match payload.commit_id.as_deref().filter(|c| !c.is_empty()) {
            Some(commit) => reader.sha(commit, "commit_id")?,
            None => payload.pull_request.head.sha,
        };
        let author = reader
            .require(payload.sender, "sender")?
            .into_user(reader, "sender")?;
        Ok(event(Event::Review {
            repo: payload.repository.into_ref(ForgeKind::Forgejo, None),
            pr,
            review_id: 0,
            author,
            state,
            commit: Some(commit),
            submitted_at: None,
        }))
    }

    #[derive(Deserialize)]
    struct CommentProbe {
        action: Option<String>,
        is_pull: Option<bool>,
        comment: Option<CommentTextProbe>,
    }

    impl CommentProbe {
        /// `on_issue`: the event type says the comment is on an issue.
        fn decide(
            self,
            reader: &Reader,
            body: &[u8],
            on_issue: bool,
        ) -> Result<ControlFlow<Parsed>, ParseError> {
            let action = reader.action(self.action)?;
            if action == "reviewed" {
                return review(reader, body, ReviewState::Commented).map(ControlFlow::Break);
            }
            if action != "created" {
                return Ok(ControlFlow::Break(comment_action_ignored(&action)));
            }
            let on_issue = on_issue || self.is_pull == Some(false);
            if on_issue && !CommentTextProbe::applies(self.comment) {
                return Ok(ControlFlow::Break(Parsed::Ignored(
                    COMMENT_ON_ISSUE.to_owned(),
                )));
            }
            Ok(ControlFlow::Continue(()))
        }
    }

    /// Forgejo's `IssueCommentPayload`; on a pull request `issue.number` is
    /// the pull request's number.
    #[derive(Deserialize)]
    struct IssueCommentEvent {
        action: Option<String>,
        is_pull: Option<bool>,
        issue: Issue,
        comment: Comment,
        repository: RawRepository,
    }

    #[derive(Deserialize)]
    struct Issue {
        #[serde(deserialize_with = "storable")]
        number: u64,
    }

    #[derive(Deserialize)]
    struct Comment {
        #[serde(deserialize_with = "storable")]
        id: u64,
        #[serde(deserialize_with = "comment_text")]
        body: String,
        user: RawUser,
        created_at: Option<String>,
    }

    /// `pull_request_comment` carries a comment on a pull request, or (older
    /// Gitea) a review of type comment with action `reviewed`.
    pub(super) fn pull_request_comment(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        comment(reader, body, false, &["created"])
    }

    /// `issue_comment` carries a comment on an issue: most are ignored, so
    /// the probe goes first.
    pub(super) fn issue_comment(reader: &Reader, body: &[u8]) -> Result<Parsed, ParseError> {
        comment(reader, body, true, &[])
    }

    fn comment(
        reader: &Reader,
        body: &[u8],
        on_issue: bool,
        read_first: &[&str],
    ) -> Result<Parsed, ParseError> {
        let payload: IssueCommentEvent = read_on!(reader.read_decided(
            body,
            read_first,
            |p: &IssueCommentEvent| CommentProbe {
                action: p.action.clone(),
                is_pull: p.is_pull,
                comment: CommentTextProbe::of(&p.comment.body),
            },
            |probe: CommentProbe| probe.decide(reader, body, on_issue)
        ));
        Ok(event(Event::Comment {
            repo: payload.repository.into_ref(ForgeKind::Forgejo, None),
            pr: PrNumber(payload.issue.number),
            comment_id: payload.comment.id,
            author: payload.comment.user.into_user(reader, "comment.user")?,
            body: payload.comment.body,
            written_at: payload.comment.created_at.as_deref().and_then(unix_ms),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c";
    const BASE: &str = "9353195a19e45482665306e466c832c46560532d";

    fn github_pr(action: &str, extra: &str, head_repo: &str) -> String {
        format!(
            r#"{{"action":"{action}",{extra}
            "pull_request":{{"number":7,"title":"t","body":null,
              "user":{{"id":1,"login":"dependabot[bot]","type":"Bot"}},
              "head":{{"ref":"f","sha":"{HEAD}","repo":{head_repo}}},
              "base":{{"ref":"main","sha":"{BASE}","repo":{{"full_name":"o/r"}}}},
              "merged":false,"merge_commit_sha":null}},
            "repository":{{"id":9,"full_name":"o/r","clone_url":"https://x/o/r.git"}}}}"#
        )
    }

    /// A body is read as text when it is UTF-8 and as bytes when not: a
    /// byte that is not UTF-8 in a field wavegate does not read is passed
    /// over as it always was, and one in a field it reads is refused.
    #[test]
    fn a_body_that_is_not_utf8_reads_as_it_did_as_bytes() {
        let clean = github_pr("opened", r#""zen":"x","#, r#"{"full_name":"o/r"}"#).into_bytes();
        let with_bad_byte_after = |marker: &str| -> Vec<u8> {
            let at = clean
                .windows(marker.len())
                .position(|w| w == marker.as_bytes())
                .expect("the marker is in the body")
                + marker.len();
            let mut body = clean.clone();
            body.insert(at, 0xff);
            body
        };
        let unread = with_bad_byte_after(r#""zen":""#);
        assert!(std::str::from_utf8(&unread).is_err());
        let (_, read, _) = parsed_pr(parse_github("pull_request", &unread).unwrap());
        let (_, expected, _) = parsed_pr(parse_github("pull_request", &clean).unwrap());
        assert_eq!(read, expected);

        let title = with_bad_byte_after(r#""title":""#);
        let error = parse_github("pull_request", &title).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pull_request payload is malformed: not valid JSON: invalid unicode code point at line 2 column 49"
        );
    }

    #[test]
    fn a_number_beyond_what_a_forge_issues_is_malformed_naming_its_field() {
        let body = github_pr("opened", "", r#"{"full_name":"o/r"}"#)
            .replace(r#""number":7"#, r#""number":9223372036854775808"#);
        let error = parse_github("pull_request", body.as_bytes()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pull_request payload is malformed: pull_request.number: 9223372036854775808 is larger than 9223372036854775807, the largest id or number a forge issues"
        );
        let largest = github_pr("opened", "", r#"{"full_name":"o/r"}"#)
            .replace(r#""number":7"#, r#""number":9223372036854775807"#);
        let (_, pr, _) = parsed_pr(parse_github("pull_request", largest.as_bytes()).unwrap());
        assert_eq!(pr.number, PrNumber(9_223_372_036_854_775_807));
        let installation = github_pr(
            "opened",
            r#""installation":{"id":18446744073709551615},"#,
            r#"{"full_name":"o/r"}"#,
        );
        let error = parse_github("pull_request", installation.as_bytes()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("installation.id: 18446744073709551615 is larger"),
            "{error}"
        );
    }

    #[test]
    fn a_comment_longer_than_wavegate_reads_is_refused_before_it_is_copied() {
        let comment = |text: &str| {
            format!(
                r#"{{"action":"created","issue":{{"number":4,"pull_request":{{}}}},
                "comment":{{"id":5,"body":"{text}","user":{{"id":1,"login":"erin"}}}},
                "repository":{{"id":9,"full_name":"o/r","clone_url":"https://x/o/r.git"}}}}"#
            )
        };
        let long = "a".repeat(COMMENT_TEXT_LIMIT + 1);
        let error = parse_github("issue_comment", comment(&long).as_bytes()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "issue_comment payload is malformed: comment.body: {} bytes of text, more than the 1024 KiB wavegate reads of a comment",
                COMMENT_TEXT_LIMIT + 1
            )
        );
        // Escapes are read as the text they stand for, and at the limit it is read.
        let at_limit = format!("\\\\{}", "a".repeat(COMMENT_TEXT_LIMIT - 1));
        if let Err(e) = parse_github("issue_comment", comment(&at_limit).as_bytes()) {
            panic!("{e}");
        }
    }

    fn parsed_pr(parsed: Parsed) -> (RepoRef, PullRequest, PrAction) {
        match parsed {
            Parsed::Event(e) => match *e {
                Event::PullRequest {
                    repo, pr, action, ..
                } => (repo, pr, action),
                other => panic!("expected a pull request event, got {other:?}"),
            },
            Parsed::Ignored(why) => panic!("expected an event, ignored: {why}"),
        }
    }

    #[test]
    fn a_base_change_is_an_edit_that_replans() {
        let body = github_pr(
            "edited",
            r#""changes":{"base":{"ref":{"from":"old"}}},"#,
            "null",
        );
        let (_, _, action) = parsed_pr(parse_github("pull_request", body.as_bytes()).unwrap());
        assert_eq!(action, PrAction::BaseChanged);
    }

    #[test]
    fn a_title_edit_is_ignored() {
        let body = github_pr("edited", r#""changes":{"title":{"from":"old"}},"#, "null");
        let parsed = parse_github("pull_request", body.as_bytes()).unwrap();
        assert!(matches!(parsed, Parsed::Ignored(_)), "{parsed:?}");
    }

    #[test]
    fn a_deleted_fork_counts_as_a_fork_without_a_clone_url() {
        let body = github_pr("opened", "", "null");
        let (repo, pr, _) = parsed_pr(parse_github("pull_request", body.as_bytes()).unwrap());
        assert!(pr.from_fork);
        assert_eq!(pr.head_clone_url, None);
        assert_eq!(repo.installation, None);
    }

    #[test]
    fn a_fork_head_is_fetched_from_the_fork() {
        let body = github_pr(
            "opened",
            "",
            r#"{"full_name":"someone/r","clone_url":"https://x/someone/r.git"}"#,
        );
        let (_, pr, _) = parsed_pr(parse_github("pull_request", body.as_bytes()).unwrap());
        assert!(pr.from_fork);
        assert_eq!(
            pr.head_clone_url.as_deref(),
            Some("https://x/someone/r.git")
        );
    }

    #[test]
    fn an_app_account_is_a_bot() {
        let body = github_pr("opened", "", "null");
        let (_, pr, _) = parsed_pr(parse_github("pull_request", body.as_bytes()).unwrap());
        assert!(pr.author.is_bot);
        assert_eq!(pr.author.login, "dependabot[bot]");
    }

    #[test]
    fn an_ignored_action_is_not_read_further() {
        let body = br#"{"action":"labeled","pull_request":"not an object"}"#;
        let parsed = parse_github("pull_request", body).unwrap();
        assert!(matches!(parsed, Parsed::Ignored(ref why) if why.contains("labeled")));
    }

    #[test]
    fn the_action_a_body_opens_with_is_read_off_its_first_bytes() {
        assert_eq!(
            leading_action(br#"{"action":"opened","number":2}"#),
            Some("opened")
        );
        assert_eq!(
            leading_action(b"\n { \"action\" :\t\"closed\"}"),
            Some("closed")
        );
        assert_eq!(leading_action(br#"{"number":2,"action":"opened"}"#), None);
        assert_eq!(leading_action(br#"{"action":"op\u0065ned"}"#), None);
        assert_eq!(leading_action(br#"{"action":"opened"#), None);
    }

    #[test]
    fn a_body_that_opens_with_an_action_it_does_not_have_is_decided_by_its_real_one() {
        // Read first as a full payload (it opens with `opened`), the body has
        // a second `action`: serde refuses the duplicate either way, and the
        // probe's reading names it.
        let body = br#"{"action":"opened","action":"labeled","pull_request":"not an object"}"#;
        let err = parse_github("pull_request", body).unwrap_err();
        assert!(err.problem.contains("duplicate field `action`"), "{err}");
        // A body that opens with an action it acts on but lost its shape
        // names the field, as the probe-first order does.
        let body = br#"{"action":"closed","pull_request":"not an object"}"#;
        let err = parse_github("pull_request", body).unwrap_err();
        assert!(
            err.problem.starts_with("pull_request: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_event_is_ignored_by_name() {
        let parsed = parse_github("push", b"{").unwrap();
        assert!(matches!(parsed, Parsed::Ignored(ref why) if why.contains("`push`")));
    }

    #[test]
    fn a_review_state_is_read_case_insensitively() {
        let body = format!(
            r#"{{"action":"submitted","review":{{"id":3,"state":"APPROVED","commit_id":"{HEAD}",
              "user":{{"id":2,"login":"alice","type":"User"}}}},
              "pull_request":{{"number":7}},
              "repository":{{"id":9,"full_name":"o/r","clone_url":"c"}}}}"#
        );
        let parsed = parse_github("pull_request_review", body.as_bytes()).unwrap();
        let Parsed::Event(e) = parsed else {
            panic!("ignored")
        };
        assert!(matches!(
            *e,
            Event::Review {
                state: ReviewState::Approved,
                ..
            }
        ));
    }

    #[test]
    fn a_forgejo_system_account_becomes_a_bot_with_id_zero() {
        let body = br#"{"action":"created","is_pull":true,"issue":{"number":4},
            "comment":{"id":5,"body":"/approve","user":{"id":-2,"login":"forgejo-actions"}},
            "repository":{"id":9,"full_name":"o/r","clone_url":"c"}}"#;
        let Parsed::Event(e) = parse_forgejo("pull_request_comment", body).unwrap() else {
            panic!("ignored")
        };
        let Event::Comment { author, .. } = *e else {
            panic!("not a comment")
        };
        assert_eq!(
            author,
            User {
                id: 0,
                login: "forgejo-actions".into(),
                is_bot: true
            }
        );
    }

    #[test]
    fn a_forgejo_review_comment_sent_as_pull_request_comment_is_a_review() {
        let body = format!(
            r#"{{"action":"reviewed","number":3,
              "pull_request":{{"title":"t","user":{{"id":1,"login":"a"}},
                "head":{{"ref":"f","sha":"{HEAD}"}},"base":{{"ref":"main","sha":"{BASE}"}}}},
              "repository":{{"id":9,"full_name":"o/r","clone_url":"c"}},
              "sender":{{"id":2,"login":"bob"}},"review":{{"type":"comment","content":"hm"}}}}"#
        );
        let Parsed::Event(e) = parse_forgejo("pull_request_comment", body.as_bytes()).unwrap()
        else {
            panic!("ignored")
        };
        assert!(matches!(
            *e,
            Event::Review {
                state: ReviewState::Commented,
                review_id: 0,
                ..
            }
        ));
    }

    #[test]
    fn a_forgejo_target_branch_change_is_a_base_change() {
        let body = format!(
            r#"{{"action":"edited","number":3,"changes":{{"ref":{{"from":"old"}}}},
              "pull_request":{{"title":"t","user":{{"id":1,"login":"a"}},
                "head":{{"ref":"f","sha":"{HEAD}","repo_id":9}},"base":{{"ref":"main","sha":"{BASE}","repo_id":9}}}},
              "repository":{{"id":9,"full_name":"o/r","clone_url":"c"}}}}"#
        );
        let (_, pr, action) = parsed_pr(parse_forgejo("pull_request", body.as_bytes()).unwrap());
        assert_eq!(action, PrAction::BaseChanged);
        assert!(!pr.from_fork);
    }

    #[test]
    fn an_apply_line_opens_with_apply_once_leading_whitespace_is_trimmed() {
        assert!(has_apply_line("/apply sha256:ab"));
        assert!(has_apply_line("Looks right.\r\n  \t/apply sha256:ab\n"));
        assert!(!has_apply_line("> /apply sha256:ab"));
        assert!(!has_apply_line("please /apply it"));
        assert!(has_apply_line("/retry"));
        assert!(!has_apply_line(""));
    }

    fn github_issue_comment(text: &str) -> String {
        format!(
            r#"{{"action":"created","issue":{{"number":1001}},
            "comment":{{"id":5,"body":{text},"user":{{"id":1,"login":"erin"}}}},
            "repository":{{"id":9,"full_name":"o/r","clone_url":"c"}}}}"#
        )
    }

    fn commented_on(parsed: Parsed) -> (PrNumber, String) {
        let Parsed::Event(e) = parsed else {
            panic!("ignored: {parsed:?}")
        };
        let Event::Comment { pr, body, .. } = *e else {
            panic!("not a comment: {e:?}")
        };
        (pr, body)
    }

    #[test]
    fn a_comment_on_an_issue_is_read_on_only_with_an_apply_line() {
        let escaped = github_issue_comment(r#""ok\n\/apply sha256:ab""#);
        assert_eq!(
            commented_on(parse_github("issue_comment", escaped.as_bytes()).unwrap()),
            (PrNumber(1001), "ok\n/apply sha256:ab".to_owned())
        );
        let plain = github_issue_comment(r#""> /apply sha256:ab""#);
        assert_eq!(
            parse_github("issue_comment", plain.as_bytes()).unwrap(),
            Parsed::Ignored(COMMENT_ON_ISSUE.to_owned())
        );
        let without_text = github_issue_comment("null");
        assert_eq!(
            parse_github("issue_comment", without_text.as_bytes()).unwrap(),
            Parsed::Ignored(COMMENT_ON_ISSUE.to_owned())
        );
    }

    #[test]
    fn a_forgejo_comment_on_an_issue_is_read_on_only_with_an_apply_line() {
        let comment = |is_pull: &str, text: &str| {
            format!(
                r#"{{"action":"created",{is_pull}"issue":{{"number":1001}},
                "comment":{{"id":5,"body":"{text}","user":{{"id":1,"login":"erin"}}}},
                "repository":{{"id":9,"full_name":"o/r","clone_url":"c"}}}}"#
            )
        };
        for (event_type, is_pull) in [
            ("issue_comment", r#""is_pull":false,"#),
            ("issue_comment", ""),
            ("pull_request_comment", r#""is_pull":false,"#),
        ] {
            let apply = comment(is_pull, "/apply sha256:ab");
            assert_eq!(
                commented_on(parse_forgejo(event_type, apply.as_bytes()).unwrap()).0,
                PrNumber(1001)
            );
            let plain = comment(is_pull, "thanks");
            assert_eq!(
                parse_forgejo(event_type, plain.as_bytes()).unwrap(),
                Parsed::Ignored(COMMENT_ON_ISSUE.to_owned()),
                "{event_type} {is_pull}"
            );
        }
    }

    #[test]
    fn a_missing_field_is_named_by_its_path() {
        let body = br#"{"action":"opened","pull_request":{"head":{}}}"#;
        let err = parse_github("pull_request", body).unwrap_err();
        assert!(err.problem.ends_with(" is missing"), "{err}");
        assert!(err.problem.starts_with("pull_request."), "{err}");
    }

    #[test]
    fn trailing_garbage_after_the_payload_is_refused() {
        let body = format!("{} x", github_pr("opened", "", "null"));
        let err = parse_github("pull_request", body.as_bytes()).unwrap_err();
        assert!(err.problem.contains("not valid JSON"), "{err}");
    }
}
