//! The apply commands of one wave that run at once. The apply machine says
//! which to start (`Effect::Apply`); this runs them side by side on the
//! job's `Workbench` and hands back, one at a time, what they did: each
//! command's start (its process, for the attempt record) and its end.
//!
//! A command is only driven while it is polled, so whatever else the
//! interpreter awaits in the meantime (saving the record, publishing the
//! report) is awaited through [`InFlight::meanwhile`], which keeps every
//! command's output read and its timeout timed, and keeps the ends that
//! come for later.

use crate::model::MemberId;
use crate::plan::engine::{ApplyRun, Workbench};
use crate::sandbox::process::ProcessId;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::mpsc;

/// What one of the wave's commands did.
#[derive(Debug)]
pub(super) enum ApplyEvent {
    Started {
        member: MemberId,
        process: ProcessId,
    },
    Ended {
        member: MemberId,
        run: ApplyRun,
    },
}

/// One apply command: a member's own, or a group's call, which ends for
/// each of its members.
type Running<'b> = Pin<Box<dyn Future<Output = Vec<(MemberId, ApplyRun)>> + Send + 'b>>;

/// The wave's running apply commands, borrowing the workbench they run on.
pub(super) struct InFlight<'b> {
    bench: &'b Workbench,
    running: FuturesUnordered<Running<'b>>,
    /// Ends that came while something else was awaited (or with another's,
    /// from one group call).
    ended: VecDeque<(MemberId, ApplyRun)>,
    tell_started: mpsc::UnboundedSender<(MemberId, ProcessId)>,
    started: mpsc::UnboundedReceiver<(MemberId, ProcessId)>,
}

impl<'b> InFlight<'b> {
    pub(super) fn new(bench: &'b Workbench) -> Self {
        let (tell_started, started) = mpsc::unbounded_channel();
        InFlight {
            bench,
            running: FuturesUnordered::new(),
            ended: VecDeque::new(),
            tell_started,
            started,
        }
    }

    /// Starts `member`'s apply command beside the others.
    pub(super) fn start(&mut self, member: MemberId) {
        let bench = self.bench;
        let tell = self.tell_started.clone();
        self.running.push(Box::pin(async move {
            let (started, mut started_process) = mpsc::unbounded_channel();
            let name = member.clone();
            let command = bench.apply(&name, Some(started));
            tokio::pin!(command);
            let run = loop {
                tokio::select! {
                    // The start is passed on before the end can be seen.
                    biased;
                    Some(process) = started_process.recv() => {
                        let _ = tell.send((member.clone(), process));
                    }
                    run = &mut command => break run,
                }
            };
            vec![(member, run)]
        }));
    }

    /// Starts the apply call of a group's `members` beside the others; its
    /// start is told for each of them, and so is its end.
    pub(super) fn start_group(&mut self, members: Vec<MemberId>) {
        let bench = self.bench;
        let tell = self.tell_started.clone();
        self.running.push(Box::pin(async move {
            let (started, mut started_process) = mpsc::unbounded_channel();
            let command = bench.apply_group(&members, Some(started));
            tokio::pin!(command);
            loop {
                tokio::select! {
                    biased;
                    Some(process) = started_process.recv() => {
                        for member in &members {
                            let _ = tell.send((member.clone(), process.clone()));
                        }
                    }
                    runs = &mut command => break runs,
                }
            }
        }));
    }

    /// Whether no command runs and no end is left to hand back.
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.ended.is_empty()
    }

    /// The next thing a command did: any start told, then the ends kept,
    /// then whatever happens first. `None` when nothing runs.
    pub(super) async fn next(&mut self) -> Option<ApplyEvent> {
        if let Ok((member, process)) = self.started.try_recv() {
            return Some(ApplyEvent::Started { member, process });
        }
        if let Some((member, run)) = self.ended.pop_front() {
            return Some(ApplyEvent::Ended { member, run });
        }
        if self.running.is_empty() {
            return None;
        }
        tokio::select! {
            biased;
            Some((member, process)) = self.started.recv() => {
                Some(ApplyEvent::Started { member, process })
            }
            Some(runs) = self.running.next() => {
                self.ended.extend(runs);
                let (member, run) = self.ended.pop_front()?;
                Some(ApplyEvent::Ended { member, run })
            }
        }
    }

    /// Awaits `work` while the commands go on; their ends are kept for
    /// [`InFlight::next`].
    pub(super) async fn meanwhile<T>(&mut self, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                done = &mut work => return done,
                Some(ends) = self.running.next(), if !self.running.is_empty() => {
                    self.ended.extend(ends);
                }
            }
        }
    }
}
