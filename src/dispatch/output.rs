//! A dispatched job's output on its way back while the job runs, so its
//! run's lines reach the live console as a local command's do.
//! `wavegate job run` hears each line its command prints (redacted as it
//! is kept), gathers them in numbered batches ([`Batcher`]) and posts one
//! each [`BATCH_EVERY`], or sooner once [`BATCH_BYTES`] wait
//! ([`Streamer`]); the server appends each batch to the job's record once,
//! whatever is retried, up to [`STREAMED_LIMIT`] per job; the bot waiting
//! for the job reads the batches after the last it showed each time it
//! reads the job's state, and publishes their lines ([`Shown`]).
//!
//! Streaming is a view, never the result: a post that keeps failing stops
//! it (the run's log says so), and the job's whole output comes back with
//! the hand-back either way, which is what is kept in the end.

use crate::plan::executor::{Finished, Job};
use crate::plan::live::{Console, Ending, Live};
use crate::plan::runner::{is_cut_output, KeptOutput, LineTap, SpawnError};
use crate::store::{DispatchState, Store};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How often a run posts the lines its command printed since the last post.
pub(crate) const BATCH_EVERY: Duration = Duration::from_secs(1);
/// What a batch weighs at most as JSON, unless one line alone weighs more
/// (the runner splits lines at 16 KiB, which escaped stay under 100 KiB).
pub(crate) const BATCH_BYTES: usize = 64 * 1024;
/// The most the server reads of one post.
pub(crate) const POST_LIMIT: usize = 256 * 1024;
/// The most a job's streamed output keeps, in bytes of text: past it, the
/// rest comes back with the hand-back only.
pub(crate) const STREAMED_LIMIT: u64 = 8 * 1024 * 1024;
/// What a run holds while its posts fall behind, as JSON: past it, it
/// stops streaming rather than grow.
const PENDING_LIMIT: usize = 4 * 1024 * 1024;
/// Times a run posts a batch before it gives streaming up.
const POST_TRIES: u32 = 3;
/// How long one post may take.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// Batches the bot reads at a time.
const READ_BATCHES: u32 = 64;

/// One post: lines `text` (each ending in a newline), batch `seq` of the
/// job's, from 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct OutputBatch {
    pub(crate) seq: u64,
    pub(crate) text: String,
}

/// Lines waiting to be posted, taken in batches of whole lines.
#[derive(Debug, Default)]
pub(crate) struct Batcher {
    /// Each line, and what it weighs in a batch's JSON.
    lines: VecDeque<(String, usize)>,
    weight: usize,
    next_seq: u64,
    /// Streaming stopped: lines are no longer gathered.
    stopped: bool,
}

impl Batcher {
    /// Gathers `line`; true when a batch is full. Past [`PENDING_LIMIT`]
    /// streaming stops.
    pub(crate) fn push(&mut self, line: &str) -> bool {
        if self.stopped {
            return false;
        }
        let weight = json_weight(line) + json_weight("\n");
        if self.weight + weight > PENDING_LIMIT {
            self.stop();
            return false;
        }
        self.lines.push_back((line.to_owned(), weight));
        self.weight += weight;
        self.weight >= BATCH_BYTES
    }

    /// The next batch of what was gathered, numbered after the last.
    pub(crate) fn take(&mut self) -> Option<OutputBatch> {
        let mut text = String::new();
        let mut weight = 0;
        while let Some((_, next)) = self.lines.front() {
            if weight > 0 && weight + next > BATCH_BYTES {
                break;
            }
            let (line, next) = self.lines.pop_front().expect("a line");
            weight += next;
            text.push_str(&line);
            text.push('\n');
        }
        if weight == 0 {
            return None;
        }
        self.weight -= weight;
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(OutputBatch { seq, text })
    }

    /// Stops streaming: what waits is dropped, and nothing more gathered.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        self.lines.clear();
        self.weight = 0;
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }
}

/// What `text` weighs inside a JSON string.
fn json_weight(text: &str) -> usize {
    text.chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if c < ' ' => 6,
            c => c.len_utf8(),
        })
        .sum()
}

/// The run's side: posts the batches of one job's output to the bot.
pub(crate) struct Streamer {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    batcher: Mutex<Batcher>,
    wake: Notify,
    /// The command ended: post what is left, then stop.
    ending: AtomicBool,
}

impl Shared {
    fn batcher(&self) -> std::sync::MutexGuard<'_, Batcher> {
        self.batcher.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Streamer {
    /// Posts to `url` (the job's `/output`) with the claim's `session`.
    pub(crate) fn start(http: reqwest::Client, url: String, session: String) -> Self {
        let shared = Arc::new(Shared {
            batcher: Mutex::default(),
            wake: Notify::new(),
            ending: AtomicBool::new(false),
        });
        let task = tokio::spawn(post_batches(Arc::clone(&shared), http, url, session));
        Self { shared, task }
    }

    /// What the command's lines go to; it never waits for a post.
    pub(crate) fn tap(&self) -> LineTap {
        let shared = Arc::clone(&self.shared);
        LineTap::new(move |line| {
            if shared.batcher().push(line) {
                shared.wake.notify_one();
            }
        })
    }

    /// The command ended: posts what is left (or gives up as any post
    /// does), so it is in before the hand-back.
    pub(crate) async fn finish(self) {
        self.shared.ending.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
        let _ = self.task.await;
    }
}

async fn post_batches(shared: Arc<Shared>, http: reqwest::Client, url: String, session: String) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(BATCH_EVERY) => {}
            () = shared.wake.notified() => {}
        }
        let ending = shared.ending.load(Ordering::SeqCst);
        loop {
            let (batch, stopped) = {
                let mut batcher = shared.batcher();
                (batcher.take(), batcher.is_stopped())
            };
            if stopped {
                eprintln!("wavegate job run: the command prints faster than its output can be streamed to wavegate's live console; the rest comes back whole with the job");
                return;
            }
            let Some(batch) = batch else { break };
            if let Err(why) = post(&http, &url, &session, &batch).await {
                shared.batcher().stop();
                eprintln!("wavegate job run: {why}; the output is no longer streamed to wavegate's live console, and comes back whole with the job");
                return;
            }
        }
        if ending {
            return;
        }
    }
}

/// Posts `batch`, trying again a little when the bot did not answer.
async fn post(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    batch: &OutputBatch,
) -> Result<(), String> {
    let body = serde_json::to_vec(batch).expect("a batch serialises");
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = http
            .post(url)
            .bearer_auth(session)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .timeout(POST_TIMEOUT)
            .send()
            .await;
        let why = match sent {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) if response.status() == reqwest::StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(format!(
                    "wavegate keeps at most {} of a job's streamed output",
                    crate::sandbox::profile::bytes_text(STREAMED_LIMIT)
                ))
            }
            Ok(response) if response.status().is_server_error() => {
                format!("wavegate answered {}", response.status())
            }
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                return Err(format!(
                    "wavegate refused the output ({status}): {}",
                    text.trim()
                ));
            }
            Err(e) => format!("cannot reach wavegate at {url}: {e}"),
        };
        if tries >= POST_TRIES {
            return Err(why);
        }
        tokio::time::sleep(BATCH_EVERY).await;
    }
}

/// The bot's side: a dispatched job shown in the live console as a
/// command, from its dispatch until it ends.
pub(crate) struct Shown {
    live: Live,
    /// What of the lines shown a local command would have kept.
    kept: KeptOutput,
    /// The first line, naming the run.
    first: String,
    /// The last batch shown.
    after: Option<u64>,
    /// Its run claimed it: it started.
    claimed: bool,
}

impl Shown {
    /// Shows `job`, dispatched to the run at `url`, in `console`.
    pub(crate) fn start(console: &Console, job: &Job, url: &str) -> Self {
        let mut live = console.start(&job.label, job.kind.as_str());
        let first = format!("[wavegate: runs on the forge's CI, in {url}]");
        live.line(&first, true);
        Self {
            live,
            kept: KeptOutput::new(job.output_cap),
            first,
            after: None,
            claimed: false,
        }
    }

    /// Shows what job `id`'s run streamed since the last call, when the
    /// job stands at `state`: one read of the store, none before a claim.
    pub(crate) async fn follow(&mut self, store: &Store, id: &str, state: DispatchState) {
        if state == DispatchState::Dispatched {
            return;
        }
        self.claimed = true;
        if let Err(e) = self.read(store, id).await {
            tracing::warn!(target: "wavegate::dispatch", "job {id}: cannot read its streamed output: {e:#}");
        }
    }

    /// Shows everything job `id`'s run streamed that is not shown yet.
    pub(crate) async fn catch_up(&mut self, store: &Store, id: &str) {
        loop {
            match self.read(store, id).await {
                Ok(read) if read == READ_BATCHES as usize => {}
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(target: "wavegate::dispatch", "job {id}: cannot read its streamed output: {e:#}");
                    return;
                }
            }
        }
    }

    /// Reads and shows the batches after the last shown; answers how many.
    async fn read(&mut self, store: &Store, id: &str) -> anyhow::Result<usize> {
        let batches = store
            .dispatched_output_after(id, self.after, READ_BATCHES)
            .await?;
        for (seq, text) in &batches {
            for line in text.split_terminator('\n') {
                let whole = self.kept.push(line);
                self.live.line(line, whole);
            }
            self.after = Some(*seq);
        }
        Ok(batches.len())
    }

    /// The job ended with `result`: its output as handed back is what is
    /// kept, after the line naming the run, as a local command's would be.
    pub(crate) fn end(mut self, result: &Result<Finished, SpawnError>) {
        match result {
            Ok(finished) => {
                let output = &finished.outcome.output;
                self.live.end(
                    finished.outcome.termination.ending(),
                    &format!("{}\n{output}", self.first),
                    is_cut_output(output),
                );
            }
            Err(e) => {
                let why = format!("[wavegate: {e}]");
                self.live.line(&why, true);
                let cut = self.kept.is_cut();
                let output = format!("{}\n{}{why}\n", self.first, self.kept.finish());
                let ending = if self.claimed {
                    Ending::Cancelled
                } else {
                    Ending::NotStarted
                };
                self.live.end(ending, &output, cut);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(batcher: &mut Batcher) -> Vec<OutputBatch> {
        std::iter::from_fn(|| batcher.take()).collect()
    }

    #[test]
    fn lines_are_posted_in_numbered_batches_of_whole_lines() {
        let mut batcher = Batcher::default();
        assert_eq!(batcher.take(), None, "nothing printed, nothing posted");
        assert!(!batcher.push("estate: planning app@prod"));
        assert!(!batcher.push(""));
        assert_eq!(
            batches(&mut batcher),
            [OutputBatch {
                seq: 0,
                text: "estate: planning app@prod\n\n".into()
            }]
        );
        // A full batch says so; what is gathered after it waits for the next.
        let line = "x".repeat(1022);
        let full = (0..64).map(|_| batcher.push(&line)).position(|full| full);
        assert_eq!(full, Some(63), "64 lines of 1 KiB in JSON fill a batch");
        batcher.push("after");
        let taken = batches(&mut batcher);
        assert_eq!(
            taken.iter().map(|b| b.seq).collect::<Vec<_>>(),
            [1, 2],
            "numbered on"
        );
        assert_eq!(taken[0].text.lines().count(), 64);
        assert_eq!(taken[1].text, "after\n");
    }

    #[test]
    fn a_batch_stays_under_its_weight_as_json_and_what_waits_is_bounded() {
        let mut batcher = Batcher::default();
        // Escapes weigh six bytes each: fewer such lines fit a batch.
        let escapes = "\u{1b}".repeat(1023);
        for _ in 0..20 {
            batcher.push(&escapes);
        }
        for batch in batches(&mut batcher) {
            let posted = serde_json::to_vec(&batch).unwrap();
            assert!(posted.len() <= BATCH_BYTES + 32, "{}", posted.len());
        }
        // One line heavier than a batch goes alone.
        batcher.push(&"\u{1}".repeat(16 * 1024));
        let alone = batches(&mut batcher);
        assert_eq!(alone.len(), 1);
        assert!(serde_json::to_vec(&alone[0]).unwrap().len() < POST_LIMIT);

        // Posts that fall too far behind stop streaming for good.
        let line = "y".repeat(16 * 1024);
        for _ in 0..PENDING_LIMIT / line.len() - 1 {
            batcher.push(&line);
        }
        assert!(!batcher.is_stopped());
        batcher.push(&line);
        batcher.push(&line);
        assert!(batcher.is_stopped());
        assert_eq!(batcher.take(), None);
        assert!(!batcher.push("more"));
    }
}
