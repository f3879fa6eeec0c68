//! The live console: every command of a pull request or an apply run, line
//! by line while it runs, to whoever watches it, and kept afterwards.
//!
//! A running command publishes each line (already redacted by the runner)
//! into its [`Channel`], which a [`Hub`] lists by the command's id while it
//! runs. A watcher first gets the lines printed so far, then each new one.
//! Memory is bounded whatever the command prints or however many watch: a
//! channel keeps its last [`BACKLOG_LINES`] lines (at most
//! [`BACKLOG_BYTES`]), each watcher may fall [`WATCHER_LAG`] lines behind
//! and is then told how many it missed, never slowing the command; a
//! command that ended leaves the hub once its output is kept.
//!
//! Its output is kept through a [`Keeper`] (the store), in batches every
//! [`FLUSH_EVERY`] while it runs, so another replica and a restarted server
//! show it too; what is kept is what the runner keeps for the report (its
//! output cap, and past it the last lines), redacted the same way.

use crate::model::{PrNumber, RepoId};
use futures_util::future::BoxFuture;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, Notify};

/// Lines a channel keeps for watchers who join late.
pub(crate) const BACKLOG_LINES: usize = 2000;
/// Bytes those lines may take at most.
pub(crate) const BACKLOG_BYTES: usize = 512 * 1024;
/// Lines a watcher may be behind before it misses some.
pub(crate) const WATCHER_LAG: usize = 1024;
/// How often a running command's new output is written to the store.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// How often a quiet running command's row is touched, so a row left by a
/// server that stopped is told from one that is merely quiet.
pub(crate) const TOUCH_EVERY: Duration = Duration::from_secs(5);
/// A running row untouched this long lost its server.
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(60);

/// A kept command's id (the store's).
pub(crate) type CommandId = i64;

/// How a command ended, as kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    /// Stopped because its job was given up, or the server stopped.
    Cancelled,
    /// It could not start (the sandbox refused it).
    NotStarted,
}

impl Ending {
    /// As the store keeps it: `exited:0`, `signalled:9`, `timed-out`, …
    pub(crate) fn key(self) -> String {
        match self {
            Ending::Exited(code) => format!("exited:{code}"),
            Ending::Signalled(sig) => format!("signalled:{sig}"),
            Ending::TimedOut => "timed-out".into(),
            Ending::Cancelled => "cancelled".into(),
            Ending::NotStarted => "not-started".into(),
        }
    }

    pub(crate) fn from_key(key: &str) -> Option<Self> {
        let number = |n: &str| n.parse::<i32>().ok();
        match key.split_once(':') {
            Some(("exited", code)) => number(code).map(Ending::Exited),
            Some(("signalled", sig)) => number(sig).map(Ending::Signalled),
            _ => match key {
                "timed-out" => Some(Ending::TimedOut),
                "cancelled" => Some(Ending::Cancelled),
                "not-started" => Some(Ending::NotStarted),
                _ => None,
            },
        }
    }

    pub(crate) fn succeeded(self) -> bool {
        self == Ending::Exited(0)
    }

    /// In words, for a page and the end of a live stream.
    pub(crate) fn describe(self) -> String {
        match self {
            Ending::Exited(code) => format!("exited with status {code}"),
            Ending::Signalled(sig) => format!("killed by signal {sig}"),
            Ending::TimedOut => "killed at its timeout".into(),
            Ending::Cancelled => "stopped: its job was given up".into(),
            Ending::NotStarted => "could not start".into(),
        }
    }
}

/// Where a running command stands, from its kept row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Running,
    Ended(Ending),
    /// Its row was not touched for [`LOST_AFTER`]: the server running it
    /// stopped before it ended.
    Lost,
}

impl Standing {
    /// A row's standing at `now_ms`, from when it was last touched.
    pub(crate) fn of(ending: Option<Ending>, updated_ms: i64, now_ms: i64) -> Self {
        match ending {
            Some(ending) => Standing::Ended(ending),
            None if now_ms.saturating_sub(updated_ms) > LOST_AFTER.as_millis() as i64 => {
                Standing::Lost
            }
            None => Standing::Running,
        }
    }
}

/// Whose a command is: a pull request's, and its apply run's when it is
/// one of the run's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) repo: RepoId,
    pub(crate) pr: PrNumber,
    pub(crate) run: Option<i64>,
}

/// A command that starts, as it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewCommand {
    pub(crate) owner: Owner,
    /// `[apply] app@prod`.
    pub(crate) label: String,
    /// `plan`, `apply`, `outputs`, `hook` or `cost`.
    pub(crate) kind: &'static str,
}

/// Where commands' output is kept (the store).
pub(crate) trait Keeper: Send + Sync {
    /// Records that `command` started; answers its id.
    fn open<'a>(&'a self, command: &'a NewCommand) -> BoxFuture<'a, anyhow::Result<CommandId>>;
    /// Adds `text` to its output (nothing: it still runs); `cut`: its
    /// output went past the cap (later lines are kept only at the end).
    fn append<'a>(
        &'a self,
        id: CommandId,
        text: &'a str,
        cut: bool,
    ) -> BoxFuture<'a, anyhow::Result<()>>;
    /// It ended: its whole kept output, when the runner has it, replaces
    /// what was appended; `cut`: some of it is not kept.
    fn finish<'a>(
        &'a self,
        id: CommandId,
        output: Option<&'a str>,
        cut: bool,
        ending: Ending,
    ) -> BoxFuture<'a, anyhow::Result<()>>;
}

/// What a watcher sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Line `seq` (from 0) of the command's output.
    Line(u64, Arc<str>),
    /// This many lines were not sent (the watcher fell behind, or joined
    /// after they left the backlog).
    Skipped(u64),
    End(Ending),
}

#[derive(Debug, Clone)]
enum Event {
    Line(u64, Arc<str>),
    End(Ending),
}

/// One running command's lines.
#[derive(Debug)]
pub(crate) struct Channel {
    state: Mutex<Backlog>,
    sender: broadcast::Sender<Event>,
}

#[derive(Debug, Default)]
struct Backlog {
    lines: VecDeque<(u64, Arc<str>)>,
    bytes: usize,
    next: u64,
    ended: Option<Ending>,
}

impl Channel {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            sender: broadcast::channel(WATCHER_LAG).0,
        })
    }

    fn backlog(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the next line; never waits for a watcher.
    pub(crate) fn publish(&self, text: &str) {
        let text: Arc<str> = Arc::from(text);
        let mut backlog = self.backlog();
        let seq = backlog.next;
        backlog.next += 1;
        backlog.bytes += text.len();
        backlog.lines.push_back((seq, Arc::clone(&text)));
        while backlog.lines.len() > BACKLOG_LINES
            || (backlog.bytes > BACKLOG_BYTES && backlog.lines.len() > 1)
        {
            let (_, gone) = backlog.lines.pop_front().expect("a line");
            backlog.bytes -= gone.len();
        }
        // Sent under the lock, so a watcher joining gets each line once:
        // in its backlog or from the channel.
        let _ = self.sender.send(Event::Line(seq, text));
    }

    /// The command ended; its watchers are told once they have its lines.
    pub(crate) fn end(&self, ending: Ending) {
        let mut backlog = self.backlog();
        if backlog.ended.is_none() {
            backlog.ended = Some(ending);
            let _ = self.sender.send(Event::End(ending));
        }
    }

    /// Watches from line `after` (what the watcher has already: lines
    /// `0..after`).
    pub(crate) fn watch(&self, after: u64) -> Watch {
        let backlog = self.backlog();
        let first = backlog.lines.front().map_or(backlog.next, |(seq, _)| *seq);
        let missed = first
            .saturating_sub(after)
            .min(backlog.next.saturating_sub(after));
        let lines = backlog
            .lines
            .iter()
            .filter(|(seq, _)| *seq >= after)
            .cloned()
            .collect();
        Watch {
            missed,
            lines,
            ended: backlog.ended,
            receiver: (backlog.ended.is_none()).then(|| self.sender.subscribe()),
            done: false,
        }
    }
}

/// One watcher of a channel.
#[derive(Debug)]
pub(crate) struct Watch {
    missed: u64,
    lines: VecDeque<(u64, Arc<str>)>,
    ended: Option<Ending>,
    receiver: Option<broadcast::Receiver<Event>>,
    done: bool,
}

impl Watch {
    /// The next thing to show; `None` after the end.
    pub(crate) async fn next(&mut self) -> Option<Seen> {
        if self.done {
            return None;
        }
        if self.missed > 0 {
            return Some(Seen::Skipped(std::mem::take(&mut self.missed)));
        }
        if let Some((seq, text)) = self.lines.pop_front() {
            return Some(Seen::Line(seq, text));
        }
        if let Some(ending) = self.ended {
            self.done = true;
            return Some(Seen::End(ending));
        }
        let receiver = self.receiver.as_mut()?;
        match receiver.recv().await {
            Ok(Event::Line(seq, text)) => Some(Seen::Line(seq, text)),
            Ok(Event::End(ending)) => {
                self.done = true;
                Some(Seen::End(ending))
            }
            Err(broadcast::error::RecvError::Lagged(n)) => Some(Seen::Skipped(n)),
            Err(broadcast::error::RecvError::Closed) => {
                self.done = true;
                None
            }
        }
    }
}

/// The running commands of this server, by id.
#[derive(Debug, Clone, Default)]
pub struct Hub(Arc<Mutex<HashMap<CommandId, Arc<Channel>>>>);

impl Hub {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<CommandId, Arc<Channel>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn register(&self, id: CommandId, channel: Arc<Channel>) {
        self.map().insert(id, channel);
    }

    pub(crate) fn remove(&self, id: CommandId) {
        self.map().remove(&id);
    }

    /// The channel of command `id` while it runs here.
    pub(crate) fn get(&self, id: CommandId) -> Option<Arc<Channel>> {
        self.map().get(&id).cloned()
    }

    /// Commands running here.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

/// Where a job's commands are shown and kept: the hub, the keeper, and
/// whose they are.
#[derive(Clone)]
pub(crate) struct Console {
    hub: Hub,
    keeper: Arc<dyn Keeper>,
    owner: Owner,
    /// The server's runtime: a plan's commands run on a runtime of their
    /// own, and their output is written from this one.
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console for `owner`'s commands; made on the server's runtime.
    pub(crate) fn new(hub: Hub, keeper: Arc<dyn Keeper>, owner: Owner) -> Self {
        Self {
            hub,
            keeper,
            owner,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// A command starts: its lines go to a channel at once, and to the
    /// keeper in batches from a task of its own.
    pub(crate) fn start(&self, label: &str, kind: &'static str) -> Live {
        let channel = Channel::new();
        let batch = Arc::new(Batch::default());
        let command = NewCommand {
            owner: self.owner.clone(),
            label: label.to_owned(),
            kind,
        };
        self.runtime.spawn(keep(
            self.hub.clone(),
            Arc::clone(&self.keeper),
            command,
            Arc::clone(&channel),
            Arc::clone(&batch),
        ));
        Live {
            channel,
            batch,
            ended: false,
        }
    }
}

/// What waits to be written.
#[derive(Debug, Default)]
struct Batch {
    pending: Mutex<Pending>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    text: String,
    cut: bool,
    /// The command ended: how, and its whole kept output if known.
    end: Option<(Ending, Option<String>)>,
}

impl Batch {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running command's side of the console.
#[derive(Debug)]
pub(crate) struct Live {
    channel: Arc<Channel>,
    batch: Arc<Batch>,
    ended: bool,
}

impl Live {
    /// A line of output; `kept`: the runner kept it in the output's text
    /// (under the cap), so it is written now, not only at the end.
    pub(crate) fn line(&mut self, text: &str, kept: bool) {
        self.channel.publish(text);
        let mut pending = self.batch.pending();
        if kept {
            // PostgreSQL's text holds no NUL.
            pending.text.extend(text.chars().filter(|c| *c != '\0'));
            pending.text.push('\n');
        } else {
            pending.cut = true;
        }
    }

    /// The command ended, with this kept output (capped, redacted).
    pub(crate) fn end(mut self, ending: Ending, output: &str, cut: bool) {
        self.finish(ending, Some(output.replace('\0', "")), cut);
    }

    fn finish(&mut self, ending: Ending, output: Option<String>, cut: bool) {
        self.ended = true;
        self.channel.end(ending);
        let mut pending = self.batch.pending();
        // The runner's word on what was cut is final; without it, whatever
        // did not reach the store is lost.
        if output.is_some() {
            pending.cut = cut;
        }
        pending.end = Some((ending, output));
        drop(pending);
        self.batch.wake.notify_one();
    }
}

impl Drop for Live {
    /// A run dropped half-way (its job was aborted) still ends its command.
    fn drop(&mut self) {
        if !self.ended {
            self.finish(Ending::Cancelled, None, false);
        }
    }
}

/// Writes one command's output while it runs, then how it ended, and takes
/// it off the hub once that is kept.
async fn keep(
    hub: Hub,
    keeper: Arc<dyn Keeper>,
    command: NewCommand,
    channel: Arc<Channel>,
    batch: Arc<Batch>,
) {
    let id = match keeper.open(&command).await {
        Ok(id) => id,
        Err(error) => {
            tracing::warn!(error = ?error, "{}: its output is not kept or shown live", command.label);
            return;
        }
    };
    hub.register(id, channel);
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut touched = tokio::time::Instant::now();
    let mut failed = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = batch.wake.notified() => {}
        }
        let (text, cut, end) = {
            let mut pending = batch.pending();
            (
                std::mem::take(&mut pending.text),
                pending.cut,
                pending.end.take(),
            )
        };
        if let Some((ending, output)) = end {
            let output = match output {
                Some(output) => Some(output),
                None if failed => None,
                None => {
                    if let Err(error) = keeper.append(id, &text, cut).await {
                        tracing::warn!(error = ?error, "{}: writing its output", command.label);
                    }
                    None
                }
            };
            if let Err(error) = keeper.finish(id, output.as_deref(), cut, ending).await {
                tracing::warn!(error = ?error, "{}: writing how it ended", command.label);
            }
            break;
        }
        if text.is_empty() && touched.elapsed() < TOUCH_EVERY {
            continue;
        }
        touched = tokio::time::Instant::now();
        if let Err(error) = keeper.append(id, &text, cut).await {
            if !failed {
                tracing::warn!(error = ?error, "{}: writing its output (it is written whole when it ends)", command.label);
            }
            failed = true;
        }
    }
    hub.remove(id);
}

/// A keeper for tests: it remembers what it was told.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Answers id 7; remembers each call as a line.
    #[derive(Default)]
    pub(crate) struct Remembers(Mutex<Vec<String>>);

    impl Remembers {
        pub(crate) fn told(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Keeper for Remembers {
        fn open<'a>(&'a self, command: &'a NewCommand) -> BoxFuture<'a, anyhow::Result<CommandId>> {
            self.0
                .lock()
                .unwrap()
                .push(format!("open {}", command.label));
            Box::pin(async { Ok(7) })
        }
        fn append<'a>(
            &'a self,
            id: CommandId,
            text: &'a str,
            cut: bool,
        ) -> BoxFuture<'a, anyhow::Result<()>> {
            if !text.is_empty() {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("append {id} {text:?} cut={cut}"));
            }
            Box::pin(async { Ok(()) })
        }
        fn finish<'a>(
            &'a self,
            id: CommandId,
            output: Option<&'a str>,
            cut: bool,
            ending: Ending,
        ) -> BoxFuture<'a, anyhow::Result<()>> {
            self.0
                .lock()
                .unwrap()
                .push(format!("finish {id} {output:?} cut={cut} {}", ending.key()));
            Box::pin(async { Ok(()) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(watch: &mut Watch, n: usize) -> Vec<Seen> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut seen = Vec::new();
            for _ in 0..n {
                seen.push(watch.next().await.unwrap());
            }
            seen
        })
    }

    fn line(seq: u64, text: &str) -> Seen {
        Seen::Line(seq, Arc::from(text))
    }

    #[test]
    fn a_watcher_first_gets_what_was_printed_then_each_new_line_then_the_end() {
        let channel = Channel::new();
        channel.publish("estate: planning app@dev");
        let mut watch = channel.watch(0);
        channel.publish("estate: 1 to add");
        channel.end(Ending::Exited(0));

        assert_eq!(
            lines(&mut watch, 3),
            [
                line(0, "estate: planning app@dev"),
                line(1, "estate: 1 to add"),
                Seen::End(Ending::Exited(0)),
            ]
        );
    }

    #[test]
    fn a_watcher_that_has_some_lines_gets_the_rest() {
        let channel = Channel::new();
        for n in 0..5 {
            channel.publish(&format!("line {n}"));
        }
        channel.end(Ending::Exited(1));
        let mut watch = channel.watch(3);
        assert_eq!(
            lines(&mut watch, 3),
            [
                line(3, "line 3"),
                line(4, "line 4"),
                Seen::End(Ending::Exited(1))
            ]
        );
    }

    #[test]
    fn the_backlog_keeps_the_last_lines_and_a_late_watcher_is_told_what_it_missed() {
        let channel = Channel::new();
        let printed = BACKLOG_LINES as u64 + 10;
        for n in 0..printed {
            channel.publish(&format!("line {n}"));
        }
        let mut watch = channel.watch(0);
        assert_eq!(
            lines(&mut watch, 2),
            [Seen::Skipped(10), line(10, "line 10")]
        );
        assert_eq!(channel.backlog().lines.len(), BACKLOG_LINES);
    }

    #[test]
    fn the_backlog_is_bounded_in_bytes_too() {
        let channel = Channel::new();
        let long = "x".repeat(16 * 1024);
        for _ in 0..100 {
            channel.publish(&long);
        }
        let backlog = channel.backlog();
        assert!(backlog.bytes <= BACKLOG_BYTES, "{}", backlog.bytes);
        assert_eq!(backlog.lines.len(), BACKLOG_BYTES / long.len());
    }

    #[test]
    fn a_watcher_that_falls_behind_is_told_how_much_it_missed_and_never_holds_the_command_up() {
        let channel = Channel::new();
        let mut slow = channel.watch(0);
        let printed = (WATCHER_LAG + 100) as u64;
        for n in 0..printed {
            channel.publish(&format!("line {n}"));
        }
        channel.end(Ending::Exited(0));

        let seen = lines(&mut slow, 1);
        assert_eq!(seen, [Seen::Skipped(101)]);
        let rest = lines(&mut slow, WATCHER_LAG);
        assert_eq!(rest[0], line(101, "line 101"));
        assert_eq!(rest[WATCHER_LAG - 1], Seen::End(Ending::Exited(0)));
    }

    #[test]
    fn a_watcher_joining_after_the_end_gets_the_backlog_and_the_end() {
        let channel = Channel::new();
        channel.publish("done");
        channel.end(Ending::TimedOut);
        let mut watch = channel.watch(0);
        assert_eq!(
            lines(&mut watch, 2),
            [line(0, "done"), Seen::End(Ending::TimedOut)]
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(runtime.block_on(watch.next()), None);
    }

    #[test]
    fn endings_are_kept_by_key_and_read_back() {
        for ending in [
            Ending::Exited(0),
            Ending::Exited(-1),
            Ending::Signalled(9),
            Ending::TimedOut,
            Ending::Cancelled,
            Ending::NotStarted,
        ] {
            assert_eq!(Ending::from_key(&ending.key()), Some(ending));
        }
        assert_eq!(Ending::from_key("exited:x"), None);
        assert_eq!(Ending::from_key("vanished"), None);
    }

    #[test]
    fn a_running_row_untouched_for_a_minute_lost_its_server() {
        let minute = LOST_AFTER.as_millis() as i64;
        assert_eq!(Standing::of(None, 1_000, 1_000 + minute), Standing::Running);
        assert_eq!(Standing::of(None, 1_000, 1_001 + minute), Standing::Lost);
        assert_eq!(
            Standing::of(Some(Ending::Exited(2)), 0, i64::MAX),
            Standing::Ended(Ending::Exited(2))
        );
    }

    #[tokio::test]
    async fn output_is_kept_in_batches_and_the_command_leaves_the_hub_once_it_ended() {
        let hub = Hub::default();
        let keeper = Arc::new(testing::Remembers::default());
        let owner = Owner {
            repo: RepoId::new(crate::model::ForgeKind::GitHub, "acme/infra"),
            pr: PrNumber(1),
            run: None,
        };
        let console = Console::new(hub.clone(), keeper.clone(), owner);
        let mut live = console.start("[plan] app@dev", "plan");
        live.line("one", true);
        live.line("two", true);
        tokio::time::sleep(FLUSH_EVERY * 2).await;
        assert!(hub.get(7).is_some(), "listed while it runs");
        live.line("three", false);
        live.end(Ending::Exited(0), "one\ntwo\n[cut]\nthree\n", true);
        tokio::time::sleep(FLUSH_EVERY).await;

        assert_eq!(
            keeper.told(),
            [
                "open [plan] app@dev",
                "append 7 \"one\\ntwo\\n\" cut=false",
                "finish 7 Some(\"one\\ntwo\\n[cut]\\nthree\\n\") cut=true exited:0",
            ]
        );
        assert_eq!(hub.len(), 0);
    }
}
