//! A pull request's commands: their kept output as JSON, and a running
//! one's lines as server-sent events. A command running on this server is
//! watched through the hub (each line as it is printed); one running on
//! another replica, or one that ended, is read from the store, which a
//! running command writes every 250 ms, and followed there (read every
//! 150 ms) until it ends.

use super::access::Visitor;
use super::view::{CommandView, CommandsView};
use super::{readable_repo, ApiProblem, Problem, WebState};
use crate::model::PrNumber;
use crate::plan::live::{CommandId, Seen, Standing, Watch};
use crate::store::{Cursor, Store};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

/// Commands a pull request's page and list show, the newest.
pub(crate) const COMMANDS: u32 = 50;
/// How often a command another replica runs is read again: with its
/// writer's 250 ms batches, a line reaches a watcher here within 400 ms
/// and a database read.
const FOLLOW_EVERY: Duration = Duration::from_millis(150);
/// How often a quiet stream says it is still there.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The script that streams a running command into its `<pre>`.
pub(crate) const SCRIPT: &str = include_str!("live.js");

pub(super) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}

type CommandPath = (String, String, String, u64, i64);

/// The last commands of a pull request, without their output.
pub(super) async fn commands_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, number)): Path<(String, String, String, u64)>,
) -> Result<Json<CommandsView>, ApiProblem> {
    let repo = readable_repo(&state, &visitor, &(forge, owner, name)).await?;
    let pr = PrNumber(number);
    let now = state.store.now();
    let rows = state
        .store
        .commands_of(&repo, pr, COMMANDS, false)
        .await
        .map_err(Problem::from)?;
    let commands = rows
        .iter()
        .map(|(row, _)| CommandView::of(&repo, row, None, now))
        .collect();
    Ok(Json(CommandsView { commands }))
}

/// One command, with its whole kept output.
pub(super) async fn command_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, number, id)): Path<CommandPath>,
) -> Result<Json<CommandView>, ApiProblem> {
    let repo = readable_repo(&state, &visitor, &(forge, owner, name)).await?;
    let (row, output) = command_of(&state.store, &repo, PrNumber(number), id, true).await?;
    Ok(Json(CommandView::of(
        &repo,
        &row,
        output,
        state.store.now(),
    )))
}

async fn command_of(
    store: &Store,
    repo: &crate::model::RepoId,
    pr: PrNumber,
    id: CommandId,
    with_output: bool,
) -> Result<(crate::store::CommandRow, Option<String>), Problem> {
    store
        .command(repo, pr, id, with_output)
        .await?
        .ok_or_else(|| {
            Problem::NotFound(format!("{repo}{pr} ran no command {id} that wavegate kept"))
        })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LiveQuery {
    /// Lines the watcher has already (the page shows the kept ones).
    after: Option<u64>,
}

/// A command's output as server-sent events: `line` (a JSON string, with
/// the line's number + 1 as its id, so a reconnecting browser goes on where
/// it was), `skipped` (how many lines this watcher missed), and `end` once
/// it ended (`{"ending", "description", "succeeded"}`); the stream closes
/// after it.
pub(super) async fn live(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, number, id)): Path<CommandPath>,
    headers: HeaderMap,
    query: Result<Query<LiveQuery>, QueryRejection>,
) -> Result<impl IntoResponse, ApiProblem> {
    let query = super::read(query)?;
    let repo = readable_repo(&state, &visitor, &(forge, owner, name)).await?;
    command_of(&state.store, &repo, PrNumber(number), id, false).await?;
    let after = headers
        .get("last-event-id")
        .and_then(|id| id.to_str().ok()?.parse().ok())
        .or(query.after)
        .unwrap_or(0);
    // A command running here is watched from the hub, any other followed
    // in the store.
    let events: BoxStream<'static, Result<Event, Infallible>> = match state.console.get(id) {
        Some(channel) => watched(channel.watch(after)),
        None => followed(state.store.clone(), id, after),
    };
    Ok((
        // A proxy that buffers answers would hold the lines back.
        [(
            HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        )],
        Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)),
    ))
}

fn line_event(seq: u64, text: &str) -> Event {
    Event::default()
        .event("line")
        .id((seq + 1).to_string())
        .json_data(text)
        .expect("a string is JSON")
}

fn skipped_event(lines: u64) -> Event {
    Event::default().event("skipped").data(lines.to_string())
}

fn end_event(standing: Standing) -> Event {
    let (ending, description, succeeded) = match standing {
        Standing::Ended(ending) => (ending.key(), ending.describe(), ending.succeeded()),
        Standing::Lost => (
            "lost".to_owned(),
            "lost: the server running it stopped before it ended".to_owned(),
            false,
        ),
        Standing::Running => unreachable!("a running command has not ended"),
    };
    Event::default()
        .event("end")
        .json_data(serde_json::json!({
            "ending": ending,
            "description": description,
            "succeeded": succeeded,
        }))
        .expect("an object is JSON")
}

/// A command running here, from the hub.
fn watched(watch: Watch) -> BoxStream<'static, Result<Event, Infallible>> {
    stream::unfold(watch, |mut watch| async move {
        let event = match watch.next().await? {
            Seen::Line(seq, text) => line_event(seq, &text),
            Seen::Skipped(lines) => skipped_event(lines),
            Seen::End(ending) => end_event(Standing::Ended(ending)),
        };
        Some((Ok(event), watch))
    })
    .boxed()
}

/// Following a command in the store: its output past a cursor, polled.
struct Follow {
    store: Store,
    id: CommandId,
    cursor: Cursor,
    /// The next line's number.
    seq: u64,
    lines: VecDeque<String>,
    /// Lines still to skip from the start (the watcher has them).
    skip: u64,
    end: Option<Standing>,
    polled: bool,
    done: bool,
}

impl Follow {
    /// Takes the lines of `text`, newly read (whole lines: each batch
    /// written is).
    fn take(&mut self, text: &str) {
        for line in text.lines() {
            if self.skip > 0 {
                self.skip -= 1;
                self.seq += 1;
            } else {
                self.lines.push_back(line.to_owned());
            }
        }
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(line) = self.lines.pop_front() {
                let event = line_event(self.seq, &line);
                self.seq += 1;
                return Some(event);
            }
            if self.done {
                return None;
            }
            if let Some(end) = self.end {
                self.done = true;
                return Some(end_event(end));
            }
            if self.polled {
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
            self.polled = true;
            let read = match self.store.output_from(self.id, self.cursor).await {
                Ok(Some(read)) => read,
                Ok(None) => return None,
                Err(error) => {
                    tracing::warn!(error = ?error, "following command {}", self.id);
                    continue;
                }
            };
            self.cursor = read.cursor;
            self.take(&read.text);
            let standing = Standing::of(
                read.ending,
                read.updated_at.millis(),
                self.store.now().millis(),
            );
            if standing != Standing::Running {
                self.end = Some(standing);
            }
        }
    }
}

/// A command running on another replica, or one that ended: what the
/// store has of it, then what is added there until it ends.
fn followed(
    store: Store,
    id: CommandId,
    after: u64,
) -> BoxStream<'static, Result<Event, Infallible>> {
    let follow = Follow {
        store,
        id,
        cursor: Cursor::default(),
        seq: 0,
        lines: VecDeque::new(),
        skip: after,
        end: None,
        polled: false,
        done: false,
    };
    stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok(event), follow))
    })
    .boxed()
}
