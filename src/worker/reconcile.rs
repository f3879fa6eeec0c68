//! Reconciliation: webhooks get lost (GitHub does not redeliver on its own),
//! so at start and then periodically every repository with an open pull
//! request the store knows (or an unfinished apply run) is listed on the
//! forge, and every unfinished apply run is compared with the queue. A head
//! or base that moved without a webhook is planned, a merge whose webhook
//! was lost starts its apply run, a pull request closed without merging is
//! marked closed, and a run that nothing drives any more (running with no
//! job, or waiting for a lock nobody holds) is resumed.
//!
//! A sweep costs requests per repository, not per pull request: its open
//! pull requests a page at a time, and its comments since the last sweep in
//! one listing. Each page is asked for with the `ETag` it had last time, so
//! an unchanged one is a 304 (free on GitHub), and a sweep spends no more
//! than its share of an installation's budget: past it, the repositories
//! wait for the next sweep
//! ([`crate::forge::listing::RateBudget::sweep_may_spend`]).
//!
//! The commands of comments no webhook brought are run: a comment is taken
//! up once, by whichever path records it first ([`Store::enqueue_once`]),
//! and binds as its webhook would have, by the comment's own time. An
//! edited comment is never run by the sweep: what it said when it was
//! written is gone.
//!
//! Reviews no webhook brought (an approval under `review_approvals`, a
//! dismissal) are found by listing a pull request's reviews, which costs a
//! request per pull request: so only those of open pull requests whose
//! listed `updated_at` moved since this server's last sweep (a review moves
//! it on both forges), or, on the first sweep after a start, moved at or
//! after their mark, are listed; and those of merged pull requests whose
//! apply run is unfinished, every sweep. Each page is asked for with its
//! `ETag`. A review is taken up once per state, like a comment
//! ([`review_taken`]).
//!
//! The sweep only enqueues jobs; workers run them. Several replicas may
//! sweep at once: each enqueue is made only if the pull request's queue is
//! idle and what the sweep saw still holds, checked in the transaction that
//! inserts the job ([`Store::enqueue_reconciled`]), so a second replica finds
//! the first one's job (or its outcome) and enqueues nothing.

use super::redeliver::Redeliverer;
use crate::apply::{RunStatus, Wait};
use crate::forge::client::ForgeClient;
use crate::forge::listing::{ListedComment, ListedPull, ListedReview, Page};
use crate::forge::registry::Forges;
use crate::forge::types::Comment;
use crate::forge::{PrState, PullRequest, RepoRef, ReviewState};
use crate::jobs::{queue_key, Task};
use crate::metrics;
use crate::model::{CommitSha, ForgeKind, PrNumber, RepoId, UnixMs};
use crate::store::{ApplyRunRecord, OnceSource, PrRecord, Still, Store};
use anyhow::{Context, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// What reconciling one open pull request calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Its head or base moved since the report: plan it as the forge has it.
    Plan,
    /// Merged, and no apply run exists: start one on the merge commit.
    StartApply { merge_sha: CommitSha },
    /// Closed (or merged with its run started): the store learns it.
    MarkClosed,
}

/// The pure decision for a pull request the store knows as open, given the
/// forge's answer and whether it has an apply run. None: nothing to do.
pub(crate) fn reconcile_decision(
    known: &PrRecord,
    forge: &PullRequest,
    state: &PrState,
    has_run: bool,
) -> Option<Action> {
    match state {
        PrState::Open => {
            let reported = known.report_head.as_ref() == Some(&forge.head_sha);
            let same_base = known.base_ref == forge.base_ref;
            (!reported || !same_base).then_some(Action::Plan)
        }
        PrState::Merged { merge_sha } if !has_run => Some(Action::StartApply {
            merge_sha: merge_sha.clone(),
        }),
        PrState::Merged { .. } | PrState::Closed => Some(Action::MarkClosed),
    }
}

/// What the sweep makes of a comment it listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// New: its commands run (as its webhook would have run them).
    Run,
    /// Taken up already, by its webhook or an earlier sweep.
    Seen,
    /// A bot's (this one's reports and replies included): never a command.
    Bot,
    /// Edited after it was written: what it said then is gone, and an edit
    /// is not a command (its webhook would not have been one either).
    Edited,
    /// Written before the sweep's mark: the webhooks' to run (a comment
    /// listed again because it was edited, or from before the upgrade).
    Before,
    /// The forge did not say when it was written.
    Undated,
}

/// The pure decision for one listed comment, given how far the sweep had
/// read the pull request's comments (`since`, unix ms) and the sources
/// taken up so far (`seen`).
pub(crate) fn comment_heard(
    since: Option<UnixMs>,
    seen: &HashSet<OnceSource>,
    comment: &Comment,
) -> Heard {
    let Some(written) = comment.created_at else {
        return Heard::Undated;
    };
    if comment.ours || comment.author.is_bot {
        Heard::Bot
    } else if seen.contains(&OnceSource::Comment(comment.id)) {
        Heard::Seen
    } else if since.is_some_and(|since| written < since) {
        Heard::Before
    } else if comment.updated_at.is_some_and(|edited| edited > written) {
        Heard::Edited
    } else {
        Heard::Run
    }
}

/// The comments to run, oldest first, and where the mark moves: to the
/// newest `updated_at` listed (the forge's clock, not ours; `since` is
/// inclusive, so a comment from that second is listed again and found seen).
pub(crate) fn comments_to_run<'a>(
    since: Option<UnixMs>,
    seen: &HashSet<OnceSource>,
    listed: &'a [Comment],
) -> (Vec<&'a Comment>, Option<UnixMs>) {
    let mut run: Vec<&Comment> = listed
        .iter()
        .filter(|c| comment_heard(since, seen, c) == Heard::Run)
        .collect();
    run.sort_by_key(|c| (c.created_at, c.id));
    let newest = listed
        .iter()
        .filter_map(|c| c.updated_at.or(c.created_at))
        .max();
    let mark = match (since, newest) {
        (Some(since), Some(newest)) => Some(since.max(newest)),
        (since, newest) => since.or(newest),
    };
    (run, mark)
}

/// What the sweep makes of a review it listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reviewed {
    /// New: its job runs (as its webhook's would have).
    Take,
    /// Taken up in this state already, by its webhook or an earlier sweep.
    Seen,
    /// Neither approves nor dismisses: no job (its webhook made none either).
    NoCommand,
    /// A bot's (or this bot's own): never an approval.
    Bot,
    /// Submitted before the pull request's mark: the webhooks' to take up.
    Before,
    /// The forge did not say when it was submitted.
    Undated,
}

/// The pure decision for one listed review, given the pull request's mark
/// (`mark`, unix ms, the forge's clock) and the sources taken up so far
/// (`seen`). An approval is taken when it was submitted
/// at or after the mark; a dismissal also when its approval was taken up
/// (it was submitted before the mark, but dismissed since).
pub(crate) fn review_taken(
    mark: Option<UnixMs>,
    seen: &HashSet<OnceSource>,
    review: &ListedReview,
) -> Reviewed {
    if !matches!(review.state, ReviewState::Approved | ReviewState::Dismissed) {
        return Reviewed::NoCommand;
    }
    if review.ours || review.author.is_bot {
        return Reviewed::Bot;
    }
    if seen.contains(&OnceSource::Review(review.id, review.state)) {
        return Reviewed::Seen;
    }
    let approval_taken = review.state == ReviewState::Dismissed
        && seen.contains(&OnceSource::Review(review.id, ReviewState::Approved));
    match review.submitted_at {
        _ if approval_taken => Reviewed::Take,
        None => Reviewed::Undated,
        Some(at) if mark.is_some_and(|mark| at < mark) => Reviewed::Before,
        Some(_) => Reviewed::Take,
    }
}

/// What a server's sweeps remember of an open pull request's reviews: the
/// `updated_at` they were last read at, and whether they were read again
/// with it unchanged (a review from the same second as the change read
/// first would not move `updated_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReviewsRead {
    pub(crate) updated_at: Option<UnixMs>,
    pub(crate) confirmed: bool,
}

/// The pure choice of whether a sweep lists an open pull request's reviews
/// (`updated_at`: as the listing of open pull requests shows it; `read`:
/// what this server's sweeps remember, None on its first; `mark`: the pull
/// request's), and what to remember once they are read (or at once, when
/// they are not to be).
pub(crate) fn reviews_due(
    read: Option<ReviewsRead>,
    updated_at: Option<UnixMs>,
    mark: Option<UnixMs>,
) -> (bool, ReviewsRead) {
    let due = match read {
        Some(read) => read.updated_at != updated_at || !read.confirmed,
        None => match (updated_at, mark) {
            (Some(updated), Some(mark)) => updated >= mark,
            _ => true,
        },
    };
    let remember = ReviewsRead {
        updated_at,
        confirmed: !due || read.is_some_and(|read| read.updated_at == updated_at),
    };
    (due, remember)
}

/// Whether an unfinished run needs a job to drive it on (its queue being
/// idle): a running one always; one waiting for a lock when the lock is not
/// held by another run any more (`lock_holder`: the run holding the member
/// it waits for); one waiting for an earlier apply to end once the time to
/// look again (`until`) has come (`now`, ms); one waiting at a stage gate
/// once that wait expired. Runs waiting for a person are otherwise left to
/// that person.
pub(crate) fn run_needs_resume(
    run: &ApplyRunRecord,
    lock_holder: Option<i64>,
    now: UnixMs,
) -> bool {
    match (run.status, &run.record.wait) {
        (RunStatus::Running, _) => true,
        (RunStatus::Waiting, Some(Wait::Lock { .. })) => {
            lock_holder.is_none_or(|holder| holder == run.id)
        }
        (
            RunStatus::Waiting | RunStatus::Failed,
            Some(Wait::EarlierAttempt { until, .. } | Wait::Holder { until, .. }),
        ) => now >= *until,
        // A stage wait whose `timeout` passed: the run fails that stage.
        // (Not a delayed job: that would hold the pull request's queue,
        // and every `/approve` in it, until then.) Also where another part
        // of the run failed: the wait is the run's all the same.
        (RunStatus::Waiting | RunStatus::Failed, Some(Wait::Stage { gate, .. })) => run
            .record
            .stage_gate(gate)
            .and_then(|gate| gate.expires_at)
            .is_some_and(|at| now >= at),
        _ => false,
    }
}

/// What one sweep did, for its log line (one field each).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// Open pull requests compared with the forge.
    pub(crate) checked: usize,
    pub(crate) planned: usize,
    pub(crate) applies_started: usize,
    pub(crate) closed: usize,
    pub(crate) runs_resumed: usize,
    /// Comments whose webhook never came, taken up by the sweep.
    pub(crate) comments: usize,
    /// Approving and dismissed reviews whose webhook never came, taken up.
    pub(crate) reviews: usize,
    /// Failed GitHub deliveries GitHub was asked to deliver again.
    pub(crate) redelivered: usize,
    /// Left alone: a job of theirs is queued or running.
    pub(crate) busy: usize,
    /// Open pull requests of repositories the bot has no way to reach yet
    /// (no job of theirs ran since the upgrade that records them).
    pub(crate) unreachable: usize,
    /// Requests the forges answered in full (they count against the budget).
    pub(crate) requests: usize,
    /// Requests answered 304, nothing changed (GitHub does not count them).
    pub(crate) not_modified: usize,
    /// Repositories left for the next sweep: their budget was at the floor
    /// kept for jobs.
    pub(crate) deferred: usize,
    pub errors: usize,
}

/// What the sweep remembers of one repository between sweeps: the `ETag`
/// of each page it listed, so an unchanged page costs a 304.
#[derive(Debug, Default)]
struct Listings {
    /// Per page of open pull requests (index 0 is page 1).
    pulls: Vec<PullsPage>,
    /// How far the repository's comments were read (unix ms, the forge's
    /// clock; None: not yet this run of the server).
    comments_since: Option<UnixMs>,
    /// The `since` the comment pages' `ETag`s were given for, and those.
    comment_etags: Option<(Option<UnixMs>, Vec<Option<String>>)>,
    /// Per open pull request: when its reviews were read.
    reviews_read: HashMap<PrNumber, ReviewsRead>,
    /// Per pull request: the `ETag` of each page of its reviews.
    review_etags: HashMap<PrNumber, Vec<Option<String>>>,
    /// Per pull request: its mark when its reviews were last read. A
    /// review not listed then was submitted after it, even if the comment
    /// listing has moved the mark past it since.
    review_marks: HashMap<PrNumber, Option<UnixMs>>,
}

#[derive(Debug, Clone, Default)]
struct PullsPage {
    etag: Option<String>,
    items: Vec<ListedPull>,
    more: bool,
}

/// The pure choice of the repositories a sweep reads, in order: those the
/// last sweep left for lack of budget first, then the rest by name.
pub(crate) fn sweep_order(mut repos: Vec<RepoId>, deferred: &HashSet<RepoId>) -> Vec<RepoId> {
    repos.sort_by(|a, b| {
        (!deferred.contains(a), a.forge.as_str(), &a.full_name).cmp(&(
            !deferred.contains(b),
            b.forge.as_str(),
            &b.full_name,
        ))
    });
    repos.dedup();
    repos
}

/// Where a repository's comment listing starts when the server has not
/// read it yet: the earliest mark of the pull requests it sweeps for (a
/// pull request without one: from the start).
pub(crate) fn first_comments_since(marks: &[Option<UnixMs>]) -> Option<UnixMs> {
    marks
        .iter()
        .try_fold(None::<UnixMs>, |earliest, mark| {
            mark.map(|m| Some(earliest.map_or(m, |e| e.min(m))))
        })
        .flatten()
}

/// Reads a listing page by page (from 1), each asked for with the `ETag`
/// it had last time (`old_etags`, by page), and returns the items of the
/// pages that changed and every page's `ETag` now. An unchanged page (304)
/// was taken up when it was read; the requests are counted in `sweep`.
async fn changed_pages<T, Fut>(
    old_etags: &[Option<String>],
    sweep: &mut Sweep,
    mut fetch: impl FnMut(u32, Option<String>) -> Fut,
) -> Result<(Vec<T>, Vec<Option<String>>)>
where
    Fut: std::future::Future<Output = Result<Page<T>>>,
{
    let mut etags = Vec::new();
    let mut changed = Vec::new();
    for page in 1u32.. {
        let index = usize::try_from(page - 1)?;
        let etag = old_etags.get(index).cloned().flatten();
        match fetch(page, etag.clone()).await? {
            Page::NotModified => {
                sweep.not_modified += 1;
                etags.push(etag);
                if index + 1 >= old_etags.len() {
                    break;
                }
            }
            Page::Fresh { items, etag, more } => {
                sweep.requests += 1;
                etags.push(etag);
                changed.extend(items);
                if !more {
                    break;
                }
            }
        }
    }
    Ok((changed, etags))
}

/// How often the store is asked whether it answers again after an outage.
const OUTAGE_PROBE: Duration = Duration::from_secs(1);
/// Answers in a row that count as the database being back.
const STEADY_ANSWERS: u32 = 3;
/// The least time between two redelivery passes brought forward by refusals.
const PASS_GAP: Duration = Duration::from_secs(30);
/// A sweep interval too long to add to a clock: as good as never.
const FAR_AWAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Sweeps the store against the forges; one per server.
#[derive(Clone)]
pub struct Reconciler {
    pub(crate) store: Store,
    pub(crate) forges: Arc<Forges>,
    /// Notified when a job was enqueued.
    pub(crate) wake: Arc<Notify>,
    /// The share (0–1] of a forge's request budget a sweep may spend.
    pub(crate) budget_share: f64,
    /// Failed GitHub deliveries, and when this server last listed them.
    pub(crate) redeliverer: Redeliverer,
    memory: Arc<tokio::sync::Mutex<Memory>>,
    /// When refusals last brought a redelivery pass forward.
    last_outage_pass: Arc<tokio::sync::Mutex<Option<Instant>>>,
}

/// What sweeps remember between them (lost with the server: the first
/// sweep after a start asks in full).
#[derive(Debug, Default)]
struct Memory {
    listings: HashMap<RepoId, Listings>,
    deferred: HashSet<RepoId>,
}

impl Reconciler {
    pub fn new(store: Store, forges: Arc<Forges>, wake: Arc<Notify>, budget_share: f64) -> Self {
        Self {
            store,
            forges,
            wake,
            budget_share,
            redeliverer: Redeliverer::default(),
            memory: Arc::default(),
            last_outage_pass: Arc::default(),
        }
    }

    /// Sweeps now and then every `every` until `shutdown` turns true (a
    /// sweep in progress is dropped: it only reads and enqueues). Between
    /// sweeps, a delivery the server could not record (`refused`) brings the
    /// redelivery pass forward to the moment the database answers again.
    pub(crate) async fn run(
        self,
        every: Duration,
        refused: Arc<Notify>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        tracing::info!(every = ?every, "reconciliation started");
        'sweeps: loop {
            tokio::select! {
                () = self.sweep_and_log() => {}
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
            let now = tokio::time::Instant::now();
            let next_sweep = now.checked_add(every).unwrap_or(now + FAR_AWAY);
            loop {
                let refusal = tokio::select! {
                    () = tokio::time::sleep_until(next_sweep) => false,
                    () = refused.notified() => true,
                    _ = shutdown.wait_for(|stop| *stop) => break 'sweeps,
                };
                if !refusal {
                    break;
                }
                tokio::select! {
                    () = self.redeliver_after_outage() => {}
                    _ = shutdown.wait_for(|stop| *stop) => break 'sweeps,
                }
            }
        }
        tracing::info!("reconciliation stopped");
    }

    /// Waits until the store has answered [`STEADY_ANSWERS`] probes in a row
    /// (a database still flapping would lose the one redelivery each event
    /// gets), lets GitHub log the failed attempts, then asks it to redeliver
    /// what failed meanwhile (the deliveries this server refused among them)
    /// without waiting for the next sweep; never twice within [`PASS_GAP`].
    async fn redeliver_after_outage(&self) {
        tracing::info!("a delivery could not be recorded: GitHub's failed deliveries are asked for again once the database answers");
        let mut answered = 0;
        while answered < STEADY_ANSWERS {
            tokio::time::sleep(OUTAGE_PROBE).await;
            match tokio::time::timeout(OUTAGE_PROBE, self.store.ping()).await {
                Ok(Ok(())) => answered += 1,
                _ => answered = 0,
            }
        }
        let since_last = self.last_outage_pass.lock().await.map(|at| at.elapsed());
        if let Some(wait) = since_last.and_then(|elapsed| PASS_GAP.checked_sub(elapsed)) {
            tokio::time::sleep(wait).await;
        }
        *self.last_outage_pass.lock().await = Some(Instant::now());
        match self.redeliverer.sweep(&self.store, &self.forges).await {
            Ok(redelivered) => {
                tracing::info!(
                    redelivered,
                    "the database answers again: asked GitHub to redeliver what failed"
                );
            }
            Err(error) => {
                tracing::warn!(
                    "redelivering failed GitHub webhooks after an outage failed: {error:#}"
                );
            }
        }
    }

    async fn sweep_and_log(&self) {
        let started = Instant::now();
        match self.sweep().await {
            Ok(sweep) => tracing::info!(
                checked = sweep.checked,
                planned = sweep.planned,
                applies_started = sweep.applies_started,
                closed = sweep.closed,
                runs_resumed = sweep.runs_resumed,
                comments = sweep.comments,
                reviews = sweep.reviews,
                redelivered = sweep.redelivered,
                busy = sweep.busy,
                unreachable = sweep.unreachable,
                requests = sweep.requests,
                not_modified = sweep.not_modified,
                deferred = sweep.deferred,
                errors = sweep.errors,
                elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "reconciliation sweep finished"
            ),
            Err(error) => tracing::error!("reconciliation sweep failed: {error:#}"),
        }
    }

    /// One sweep: each repository with an open pull request or an
    /// unfinished apply run is listed (its open pull requests and the
    /// comments since the last sweep, a page at a time, conditionally),
    /// then every unfinished run is looked at. An error about one
    /// repository, pull request or run is logged and counted, and the sweep
    /// goes on; only failing to read the store ends it.
    pub async fn sweep(&self) -> Result<Sweep> {
        let mut sweep = Sweep::default();
        match self.redeliverer.sweep(&self.store, &self.forges).await {
            Ok(redelivered) => sweep.redelivered = redelivered,
            Err(error) => {
                sweep.errors += 1;
                tracing::warn!("redelivering failed GitHub webhooks failed: {error:#}");
            }
        }
        let mut busy = self.store.busy_queue_keys().await?;
        let repos = self.store.repositories().await?;
        let open = self.store.open_prs().await?;
        let runs = self.store.unfinished_apply_runs().await?;
        let mut open_by_repo: HashMap<RepoId, Vec<PrRecord>> = HashMap::new();
        for known in open {
            if repos.contains_key(&known.repo) {
                open_by_repo
                    .entry(known.repo.clone())
                    .or_default()
                    .push(known);
            } else {
                sweep.unreachable += 1;
            }
        }
        let mut run_prs: HashMap<RepoId, HashSet<PrNumber>> = HashMap::new();
        for run in &runs {
            run_prs
                .entry(run.repo.id.clone())
                .or_default()
                .insert(run.pr);
        }
        // A repository with an open drift issue is swept for its `/apply`s.
        let drifting = self.store.repos_with_open_drift_issues().await?;
        let ids: Vec<RepoId> = open_by_repo
            .keys()
            .chain(run_prs.keys())
            .chain(drifting.iter())
            .filter(|id| repos.contains_key(*id))
            .cloned()
            .collect();
        let mut memory = self.memory.lock().await;
        let order = sweep_order(ids, &memory.deferred);
        let mut deferred = HashSet::new();
        let mut spent: HashSet<(ForgeKind, Option<u64>)> = HashSet::new();
        let now = chrono::Utc::now().timestamp();
        for id in order {
            let repo = &repos[&id];
            let client = self.forges.client(id.forge)?;
            let installation = repo.installation;
            let budget = client.rate_budget(repo).await.unwrap_or(None);
            if spent.contains(&(id.forge, installation))
                || budget.is_some_and(|b| !b.sweep_may_spend(self.budget_share, now))
            {
                spent.insert((id.forge, installation));
                deferred.insert(id.clone());
                sweep.deferred += 1;
                continue;
            }
            let known = open_by_repo.remove(&id).unwrap_or_default();
            let with_runs = run_prs.remove(&id).unwrap_or_default();
            let listings = memory.listings.entry(id.clone()).or_default();
            if let Err(error) = self
                .sweep_repo(
                    &client, repo, &known, &with_runs, listings, &mut sweep, &mut busy,
                )
                .await
            {
                sweep.errors += 1;
                tracing::warn!(repo = %id, "reconciling the repository {id} failed: {error:#}");
            }
        }
        memory.deferred = deferred;
        drop(memory);
        for run in runs {
            if busy.contains(&queue_key(&run.repo.id, run.pr)) {
                sweep.busy += 1;
                continue;
            }
            if let Err(error) = self.reconcile_run(&run, &mut sweep).await {
                sweep.errors += 1;
                tracing::warn!(
                    repo = %run.repo.id,
                    pr = run.pr.0,
                    "reconciling apply run {} of {}{} failed: {error:#}",
                    run.id,
                    run.repo.id,
                    run.pr
                );
            }
        }
        let global = metrics::global();
        for (answer, count) in [
            ("counted", sweep.requests),
            ("not_modified", sweep.not_modified),
        ] {
            global
                .sweep_requests
                .get_or_create(&metrics::AnswerLabels {
                    answer: answer.to_owned(),
                })
                .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
        }
        for (of, count) in [
            ("requests", sweep.requests),
            ("not_modified", sweep.not_modified),
            ("deferred", sweep.deferred),
        ] {
            global
                .sweep_last
                .get_or_create(&metrics::OfLabels { of: of.to_owned() })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        Ok(sweep)
    }

    /// One repository: its open pull requests the store knows, compared
    /// with the forge's listing, and the comments since the last sweep.
    #[allow(clippy::too_many_arguments)]
    async fn sweep_repo(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        known: &[PrRecord],
        with_runs: &HashSet<PrNumber>,
        listings: &mut Listings,
        sweep: &mut Sweep,
        busy: &mut HashSet<String>,
    ) -> Result<()> {
        let listed = if known.is_empty() {
            HashMap::new()
        } else {
            self.list_open_pulls(client, repo, listings, sweep)
                .await
                .context("listing its open pull requests")?
        };
        let mut swept: HashSet<PrNumber> = with_runs.clone();
        for pr in known {
            swept.insert(pr.pr);
            if busy.contains(&queue_key(&pr.repo, pr.pr)) {
                sweep.busy += 1;
                continue;
            }
            sweep.checked += 1;
            if let Err(error) = self
                .reconcile_pr(client, repo, pr, listed.get(&pr.pr), sweep, busy)
                .await
            {
                sweep.errors += 1;
                tracing::warn!(
                    repo = %pr.repo,
                    pr = pr.pr.0,
                    "reconciling pull request {}{} failed: {error:#}",
                    pr.repo,
                    pr.pr
                );
            }
        }
        self.sweep_reviews(
            client, repo, known, with_runs, &listed, listings, sweep, busy,
        )
        .await
        .context("reading its reviews")?;
        self.sweep_comments(client, repo, &swept, listings, sweep, busy)
            .await
            .context("reading its comments")
    }

    /// Lists the reviews of the pull requests [`reviews_due`] picks among
    /// the open ones and of those with an unfinished apply run, and
    /// enqueues, once, those no webhook brought. An error about one pull
    /// request is counted and the rest go on; it is read again next sweep.
    #[allow(clippy::too_many_arguments)]
    async fn sweep_reviews(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        known: &[PrRecord],
        with_runs: &HashSet<PrNumber>,
        listed: &HashMap<PrNumber, ListedPull>,
        listings: &mut Listings,
        sweep: &mut Sweep,
        busy: &mut HashSet<String>,
    ) -> Result<()> {
        let marks = self.store.comment_marks(&repo.id).await?;
        listings
            .reviews_read
            .retain(|number, _| listed.contains_key(number));
        let swept = |number: &PrNumber| listed.contains_key(number) || with_runs.contains(number);
        listings.review_etags.retain(|number, _| swept(number));
        listings.review_marks.retain(|number, _| swept(number));
        let mut due: Vec<(PrNumber, Option<ReviewsRead>)> = Vec::new();
        for pr in known {
            let Some(open) = listed.get(&pr.pr) else {
                continue;
            };
            let mark = marks.get(&pr.pr).copied().flatten();
            let read = listings.reviews_read.get(&pr.pr).copied();
            match reviews_due(read, open.updated_at, mark) {
                (true, remember) => due.push((pr.pr, Some(remember))),
                (false, remember) => {
                    listings.reviews_read.insert(pr.pr, remember);
                }
            }
        }
        for number in with_runs {
            if !due.iter().any(|(pr, _)| pr == number) {
                due.push((*number, None));
            }
        }
        due.sort_by_key(|(pr, _)| *pr);
        for (number, remember) in due {
            let now = marks.get(&number).copied().flatten();
            let mark = listings.review_marks.get(&number).copied().unwrap_or(now);
            match self
                .take_up_reviews(client, repo, number, mark, listings, sweep, busy)
                .await
            {
                Ok(()) => {
                    listings.review_marks.insert(number, now);
                    if let Some(remember) = remember {
                        listings.reviews_read.insert(number, remember);
                    }
                }
                Err(error) => {
                    sweep.errors += 1;
                    tracing::warn!(repo = %repo.id, pr = number.0,
                        "reading the reviews of {}{number} failed: {error:#}", repo.id);
                }
            }
        }
        Ok(())
    }

    /// Lists one pull request's reviews, each page asked for with the
    /// `ETag` it had last time (a 304: unchanged, and all of it taken up
    /// then), and enqueues, once, those [`review_taken`] takes.
    #[allow(clippy::too_many_arguments)]
    async fn take_up_reviews(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        number: PrNumber,
        mark: Option<UnixMs>,
        listings: &mut Listings,
        sweep: &mut Sweep,
        busy: &mut HashSet<String>,
    ) -> Result<()> {
        let old_etags = listings.review_etags.remove(&number).unwrap_or_default();
        let (reviews, etags): (Vec<ListedReview>, _) =
            changed_pages(&old_etags, sweep, |page, etag| async move {
                client
                    .pull_reviews_page(repo, number, page, etag.as_deref())
                    .await
            })
            .await?;
        if !reviews.is_empty() {
            let seen = self.store.commands_seen(&repo.id, number).await?;
            let mut taken: Vec<&ListedReview> = reviews
                .iter()
                .filter(|review| review_taken(mark, &seen, review) == Reviewed::Take)
                .collect();
            taken.sort_by_key(|review| (review.submitted_at, review.id));
            for review in taken {
                let task = Task::Review {
                    repo: repo.clone(),
                    pr: number,
                    review_id: review.id,
                    author: review.author.clone(),
                    state: review.state,
                    commit: review.commit.clone(),
                    submitted_at: review.submitted_at,
                };
                if let Some(job) = self.store.enqueue_once(task.into_job()).await? {
                    tracing::info!(repo = %repo.id, pr = number.0, review = review.id, %job,
                        "review {} ({:?}) on {}{number} came without a webhook: taking it up",
                        review.id, review.state, repo.id);
                    sweep.reviews += 1;
                    self.enqueued(busy, &repo.id, number);
                }
            }
        }
        listings.review_etags.insert(number, etags);
        Ok(())
    }

    /// Every open pull request of the repository by number, page by page,
    /// each page asked for with the `ETag` it had last time.
    async fn list_open_pulls(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        listings: &mut Listings,
        sweep: &mut Sweep,
    ) -> Result<HashMap<PrNumber, ListedPull>> {
        let mut pages = Vec::new();
        for page in 1u32.. {
            let index = usize::try_from(page - 1)?;
            let cached = listings.pulls.get(index);
            let etag = cached.and_then(|cached| cached.etag.as_deref());
            let fetched = match client.open_pulls_page(repo, page, etag).await? {
                Page::NotModified => {
                    sweep.not_modified += 1;
                    cached.cloned().unwrap_or_default()
                }
                Page::Fresh { items, etag, more } => {
                    sweep.requests += 1;
                    PullsPage { etag, items, more }
                }
            };
            let more = fetched.more;
            pages.push(fetched);
            if !more {
                break;
            }
        }
        listings.pulls = pages;
        Ok(listings
            .pulls
            .iter()
            .flat_map(|page| &page.items)
            .map(|listed| (listed.pr.number, listed.clone()))
            .collect())
    }

    async fn reconcile_pr(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        known: &PrRecord,
        listed: Option<&ListedPull>,
        sweep: &mut Sweep,
        busy: &mut HashSet<String>,
    ) -> Result<()> {
        let (pr, state) = match listed {
            Some(listed) => (listed.pr.clone(), listed.state.clone()),
            // Not among the open ones: asked alone, to learn how it ended.
            None => {
                sweep.requests += 1;
                client
                    .pull_request_state(repo, known.pr)
                    .await
                    .context("asking the forge")?
            }
        };
        let has_run = matches!(state, PrState::Merged { .. })
            && self.store.apply_run(&repo.id, known.pr).await?.is_some();
        let Some(action) = reconcile_decision(known, &pr, &state, has_run) else {
            return Ok(());
        };
        let (repo_id, number) = (&repo.id, known.pr);
        match action {
            Action::Plan => {
                let task = Task::Plan {
                    repo: repo.clone(),
                    pr: pr.clone(),
                };
                let still = Still::Unplanned {
                    repo: repo_id,
                    pr: number,
                    head: &pr.head_sha,
                    base_ref: &pr.base_ref,
                };
                if let Some(job) = self
                    .store
                    .enqueue_reconciled(task.into_job(), still)
                    .await?
                {
                    tracing::info!(repo = %repo_id, pr = number.0, %job,
                        "{repo_id}{number} is at {} on {}, not what was last planned: planning it",
                        pr.head_sha.short(), pr.base_ref);
                    sweep.planned += 1;
                    self.enqueued(busy, repo_id, number);
                }
            }
            Action::StartApply { merge_sha } => {
                let task = Task::Merged {
                    repo: repo.clone(),
                    pr: pr.clone(),
                    merge_sha: merge_sha.clone(),
                };
                let still = Still::OpenThenClose {
                    repo: repo_id,
                    pr: number,
                };
                if let Some(job) = self
                    .store
                    .enqueue_reconciled(task.into_job(), still)
                    .await?
                {
                    tracing::info!(repo = %repo_id, pr = number.0, %job,
                        "{repo_id}{number} was merged as {} without a webhook: starting its apply run",
                        merge_sha.short());
                    sweep.applies_started += 1;
                    self.enqueued(busy, repo_id, number);
                }
            }
            Action::MarkClosed => {
                if self.store.mark_pr_closed(repo_id, number).await? {
                    tracing::info!(repo = %repo_id, pr = number.0,
                        "{repo_id}{number} was closed without a webhook");
                    sweep.closed += 1;
                }
            }
        }
        Ok(())
    }

    /// Reads the repository's comments written since the last sweep (one
    /// listing for all its pull requests) and enqueues, once, the commands
    /// of those on `swept` pull requests that no webhook brought; the marks
    /// move only when all of them are enqueued (or found taken up).
    async fn sweep_comments(
        &self,
        client: &ForgeClient,
        repo: &RepoRef,
        swept: &HashSet<PrNumber>,
        listings: &mut Listings,
        sweep: &mut Sweep,
        busy: &mut HashSet<String>,
    ) -> Result<()> {
        let marks = self.store.comment_marks(&repo.id).await?;
        // An open drift issue's `/apply` no webhook brought is taken up
        // too, from a minute before the issue was opened (the forge's clock
        // is not ours, and dates comments to the second).
        let drift: HashMap<PrNumber, UnixMs> = self
            .store
            .open_drift_issues_of(&repo.id)
            .await?
            .into_iter()
            .map(|issue| {
                let before = UnixMs::from_millis(issue.since.millis().saturating_sub(60_000));
                (issue.number, before)
            })
            .collect();
        let since = match listings.comments_since {
            Some(since) => Some(since),
            None => first_comments_since(
                &swept
                    .iter()
                    .map(|pr| marks.get(pr).copied().flatten())
                    .chain(drift.values().map(|since| Some(*since)))
                    .collect::<Vec<_>>(),
            ),
        };
        if swept.is_empty() && drift.is_empty() {
            return Ok(());
        }
        let old_etags = match listings.comment_etags.take() {
            Some((asked, etags)) if asked == since => etags,
            _ => Vec::new(),
        };
        let (listed, etags): (Vec<ListedComment>, _) =
            changed_pages(&old_etags, sweep, |page, etag| async move {
                client
                    .repo_comments_page(repo, since, page, etag.as_deref())
                    .await
            })
            .await?;
        let mut by_pr: HashMap<PrNumber, Vec<Comment>> = HashMap::new();
        for item in &listed {
            let applies = || crate::gate::commands::drift_apply(&item.comment.body).is_some();
            if swept.contains(&item.pr) || (drift.contains_key(&item.pr) && applies()) {
                by_pr.entry(item.pr).or_default().push(item.comment.clone());
            }
        }
        for (number, comments) in by_pr {
            let pr_since = marks
                .get(&number)
                .copied()
                .flatten()
                .or_else(|| drift.get(&number).copied());
            self.take_up_comments(repo, number, pr_since, &comments, sweep, busy)
                .await?;
        }
        let newest = listed
            .iter()
            .filter_map(|item| item.comment.updated_at.or(item.comment.created_at))
            .max();
        let mark = match (since, newest) {
            (Some(since), Some(newest)) => Some(since.max(newest)),
            (since, newest) => since.or(newest),
        };
        if let Some(mark) = mark.filter(|mark| Some(*mark) != since) {
            self.store
                .advance_repo_comment_marks(&repo.id, mark)
                .await?;
        }
        listings.comments_since = mark;
        listings.comment_etags = Some((mark, if mark == since { etags } else { Vec::new() }));
        Ok(())
    }

    /// Enqueues, once, the commands of the listed comments on one pull
    /// request that no webhook brought (`since`: its own mark).
    async fn take_up_comments(
        &self,
        repo: &RepoRef,
        number: PrNumber,
        since: Option<UnixMs>,
        listed: &[Comment],
        sweep: &mut Sweep,
        busy: &mut HashSet<String>,
    ) -> Result<()> {
        let seen = self.store.commands_seen(&repo.id, number).await?;
        for comment in listed {
            if comment_heard(since, &seen, comment) == Heard::Edited {
                tracing::info!(repo = %repo.id, pr = number.0, comment = comment.id,
                    "comment {} on {}{number} was edited before any webhook of it came: not run",
                    comment.id, repo.id);
            }
        }
        let (run, _) = comments_to_run(since, &seen, listed);
        for comment in run {
            let task = Task::Comment {
                repo: repo.clone(),
                pr: number,
                comment_id: comment.id,
                author: comment.author.clone(),
                body: comment.body.clone(),
                written_at: comment.created_at,
            };
            if let Some(job) = self.store.enqueue_once(task.into_job()).await? {
                tracing::info!(repo = %repo.id, pr = number.0, comment = comment.id, %job,
                    "comment {} on {}{number} came without a webhook: taking it up",
                    comment.id, repo.id);
                sweep.comments += 1;
                self.enqueued(busy, &repo.id, number);
            }
        }
        Ok(())
    }

    async fn reconcile_run(&self, run: &ApplyRunRecord, sweep: &mut Sweep) -> Result<()> {
        let holder = match &run.record.wait {
            Some(Wait::Lock { member, .. }) if run.status == RunStatus::Waiting => {
                self.store
                    .member_lock_holder(&run.repo.id, member.as_str())
                    .await?
            }
            _ => None,
        };
        if !run_needs_resume(run, holder, self.store.now()) {
            return Ok(());
        }
        let task = Task::Apply {
            repo: run.repo.clone(),
            pr: run.pr,
        };
        if let Some(job) = self
            .store
            .enqueue_reconciled(task.into_job(), Still::Idle)
            .await?
        {
            tracing::info!(repo = %run.repo.id, pr = run.pr.0, %job,
                "apply run {} of {}{} is {} with nothing driving it: resuming it",
                run.id, run.repo.id, run.pr, run.status.as_str());
            sweep.runs_resumed += 1;
            self.wake.notify_one();
        }
        Ok(())
    }

    /// A job is queued for the pull request: the rest of the sweep leaves it be.
    fn enqueued(&self, busy: &mut HashSet<String>, repo: &RepoId, pr: PrNumber) {
        busy.insert(queue_key(repo, pr));
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::AttemptRecord;
    use crate::model::time::in_tests::unix;
    use crate::model::{ForgeKind, User};

    fn sha(c: char) -> CommitSha {
        CommitSha::parse(&c.to_string().repeat(40)).unwrap()
    }

    fn known(head: char, report: Option<char>) -> PrRecord {
        PrRecord {
            repo: RepoId::new(ForgeKind::GitHub, "acme/infra"),
            pr: PrNumber(3),
            head_sha: sha(head),
            base_ref: "main".into(),
            open: true,
            report_comment_id: report.map(|_| 11),
            check_id: None,
            report_head: report.map(sha),
            report_digest: None,
            report_status: report.map(|_| crate::store::ReportStatus::AwaitingApproval),
            pusher: None,
        }
    }

    fn forge(head: char, base: &str) -> PullRequest {
        PullRequest {
            number: PrNumber(3),
            title: "t".into(),
            author: User {
                id: 1,
                login: "dev".into(),
                is_bot: false,
            },
            head_sha: sha(head),
            head_ref: "feature".into(),
            base_ref: base.into(),
            base_sha: sha('b'),
            from_fork: false,
            head_clone_url: None,
        }
    }

    #[test]
    fn an_open_pr_reported_at_its_head_is_left_alone() {
        let decision = reconcile_decision(
            &known('a', Some('a')),
            &forge('a', "main"),
            &PrState::Open,
            false,
        );
        assert_eq!(decision, None);
    }

    #[test]
    fn a_head_that_moved_without_a_webhook_is_planned() {
        // The push's webhook was lost: the store still says `a`.
        let decision = reconcile_decision(
            &known('a', Some('a')),
            &forge('c', "main"),
            &PrState::Open,
            false,
        );
        assert_eq!(decision, Some(Action::Plan));
    }

    #[test]
    fn a_head_never_reported_is_planned_and_so_is_a_moved_base() {
        let never = reconcile_decision(
            &known('a', None),
            &forge('a', "main"),
            &PrState::Open,
            false,
        );
        assert_eq!(never, Some(Action::Plan));
        let rebased = reconcile_decision(
            &known('a', Some('a')),
            &forge('a', "release"),
            &PrState::Open,
            false,
        );
        assert_eq!(rebased, Some(Action::Plan));
    }

    #[test]
    fn a_merge_without_a_run_starts_one_and_with_a_run_only_closes() {
        let merged = PrState::Merged {
            merge_sha: sha('d'),
        };
        let known = known('a', Some('a'));
        assert_eq!(
            reconcile_decision(&known, &forge('a', "main"), &merged, false),
            Some(Action::StartApply {
                merge_sha: sha('d')
            })
        );
        assert_eq!(
            reconcile_decision(&known, &forge('a', "main"), &merged, true),
            Some(Action::MarkClosed)
        );
    }

    #[test]
    fn a_pr_closed_unmerged_is_marked_closed_whatever_its_head() {
        assert_eq!(
            reconcile_decision(
                &known('a', Some('a')),
                &forge('c', "main"),
                &PrState::Closed,
                false
            ),
            Some(Action::MarkClosed)
        );
    }

    fn run(status: RunStatus, wait: Option<Wait>) -> ApplyRunRecord {
        ApplyRunRecord {
            id: 5,
            repo: RepoRef {
                id: RepoId::new(ForgeKind::GitHub, "acme/infra"),
                forge_id: 1,
                clone_url: "file:///tmp/infra".into(),
                installation: Some(9),
            },
            pr: PrNumber(3),
            merge_sha: sha('d'),
            base_sha: sha('b'),
            plan_id: 1,
            digest: crate::model::Digest::repeated('1'),
            status,
            record: AttemptRecord {
                wait,
                ..AttemptRecord::default()
            },
            check_id: None,
        }
    }

    #[test]
    fn a_running_run_with_nothing_driving_it_resumes() {
        assert!(run_needs_resume(
            &run(RunStatus::Running, None),
            None,
            unix(0)
        ));
    }

    #[test]
    fn a_run_waiting_for_a_lock_resumes_once_nobody_else_holds_it() {
        let waiting = run(
            RunStatus::Waiting,
            Some(Wait::Lock {
                member: "app@dev".into(),
                pr: PrNumber(2),
            }),
        );
        assert!(
            !run_needs_resume(&waiting, Some(4), unix(0)),
            "run 4 holds it"
        );
        assert!(run_needs_resume(&waiting, None, unix(0)));
        assert!(
            run_needs_resume(&waiting, Some(5), unix(0)),
            "it holds it itself"
        );
    }

    #[test]
    fn runs_waiting_for_a_person_or_finished_are_left_alone() {
        let approval = Wait::PrApproval {
            gate: "pr-3".parse().unwrap(),
            digest: crate::model::Digest::repeated('1'),
        };
        assert!(!run_needs_resume(
            &run(RunStatus::Waiting, Some(approval)),
            None,
            unix(0)
        ));
        assert!(!run_needs_resume(
            &run(RunStatus::Applied, None),
            None,
            unix(0)
        ));
        assert!(!run_needs_resume(
            &run(RunStatus::Failed, None),
            None,
            unix(0)
        ));
    }

    #[test]
    fn a_run_waiting_for_an_earlier_apply_resumes_when_it_is_time_to_look_again() {
        let waiting = run(
            RunStatus::Waiting,
            Some(Wait::EarlierAttempt {
                member: "app@dev".into(),
                until: unix(5_000),
            }),
        );
        assert!(!run_needs_resume(&waiting, None, unix(4_999)));
        assert!(run_needs_resume(&waiting, None, unix(5_000)));
    }

    #[test]
    fn a_stage_wait_past_its_timeout_is_resumed_even_where_another_part_of_the_run_failed() {
        let gate = "pr-7-prod-wave-2".parse::<crate::model::GateId>().unwrap();
        for status in [RunStatus::Waiting, RunStatus::Failed] {
            let mut waiting = run(
                status,
                Some(Wait::Stage {
                    stage: "prod".into(),
                    gate: gate.clone(),
                    digest: crate::model::Digest::repeated('a'),
                }),
            );
            waiting.record.stages.insert(
                "prod wave 2".into(),
                crate::apply::StageGate {
                    expires_at: Some(unix(5_000)),
                    ..crate::apply::StageGate::open_for_test(
                        "pr-7-prod-wave-2",
                        crate::plan::outcome::change_set_of(&[], Default::default()).unwrap(),
                    )
                },
            );
            assert!(!run_needs_resume(&waiting, None, unix(4_999)), "{status:?}");
            assert!(run_needs_resume(&waiting, None, unix(5_000)), "{status:?}");
        }
    }

    fn listed(id: u64, author: &str, created: i64, updated: i64) -> Comment {
        Comment {
            id,
            body: "/approve".into(),
            author: User {
                id: 7,
                login: author.into(),
                is_bot: author.ends_with("[bot]"),
            },
            ours: author == "wavegate[bot]",
            created_at: Some(unix(created)),
            updated_at: Some(unix(updated)),
        }
    }

    fn ids(run: &[&Comment]) -> Vec<u64> {
        run.iter().map(|c| c.id).collect()
    }

    #[test]
    fn comments_no_webhook_brought_run_oldest_first_and_the_mark_moves_to_the_newest() {
        let seen: HashSet<OnceSource> = [OnceSource::Comment(2)].into();
        let comments = [
            listed(3, "rev-bob", 5_000, 5_000),
            listed(1, "rev-bob", 2_000, 2_000),
            listed(2, "rev-carol", 3_000, 3_000),
            listed(4, "wavegate[bot]", 4_000, 6_000),
        ];
        let (run, mark) = comments_to_run(Some(unix(1_000)), &seen, &comments);
        assert_eq!(ids(&run), [1, 3], "2 was seen, 4 is the bot's");
        assert_eq!(mark, Some(unix(6_000)));
        assert_eq!(
            comment_heard(Some(unix(1_000)), &seen, &comments[1]),
            Heard::Run
        );
        assert_eq!(
            comment_heard(Some(unix(1_000)), &seen, &comments[2]),
            Heard::Seen
        );
        assert_eq!(
            comment_heard(Some(unix(1_000)), &seen, &comments[3]),
            Heard::Bot
        );
    }

    #[test]
    fn a_second_sweep_runs_nothing_more_and_keeps_its_mark() {
        let comments = [listed(1, "rev-bob", 2_000, 2_000)];
        let (run, mark) = comments_to_run(None, &HashSet::new(), &comments);
        assert_eq!((ids(&run), mark), (vec![1], Some(unix(2_000))));
        // Listed again (since is inclusive): its row says it was taken up.
        let seen: HashSet<OnceSource> = [OnceSource::Comment(1)].into();
        let (run, mark) = comments_to_run(mark, &seen, &comments);
        assert_eq!((ids(&run), mark), (vec![], Some(unix(2_000))));
    }

    #[test]
    fn an_edited_comment_never_runs_by_the_sweep() {
        let edited = listed(5, "rev-bob", 2_000, 9_000);
        assert_eq!(comment_heard(None, &HashSet::new(), &edited), Heard::Edited);
        let (run, mark) = comments_to_run(None, &HashSet::new(), std::slice::from_ref(&edited));
        assert!(run.is_empty());
        assert_eq!(mark, Some(unix(9_000)), "read past it");
    }

    #[test]
    fn comments_before_the_mark_are_the_webhooks_and_undated_ones_never_run() {
        // Listed because it was edited after the mark; written before it.
        let old = listed(6, "rev-bob", 1_000, 8_000);
        assert_eq!(
            comment_heard(Some(unix(5_000)), &HashSet::new(), &old),
            Heard::Before
        );
        let mut undated = listed(7, "rev-bob", 0, 0);
        undated.created_at = None;
        undated.updated_at = None;
        assert_eq!(
            comment_heard(None, &HashSet::new(), &undated),
            Heard::Undated
        );
        // A comment from the mark's own second is new.
        let same = listed(8, "rev-bob", 5_000, 5_000);
        assert_eq!(
            comment_heard(Some(unix(5_000)), &HashSet::new(), &same),
            Heard::Run
        );
        let listed = [old, undated, same];
        let (run, mark) = comments_to_run(Some(unix(5_000)), &HashSet::new(), &listed);
        assert_eq!((ids(&run), mark), (vec![8], Some(unix(8_000))));
    }

    #[test]
    fn repositories_left_by_the_last_sweep_come_first_then_by_name() {
        let repo = |forge, name: &str| RepoId::new(forge, name);
        let deferred: HashSet<RepoId> = [repo(ForgeKind::GitHub, "acme/zeta")].into();
        let order = sweep_order(
            vec![
                repo(ForgeKind::GitHub, "acme/beta"),
                repo(ForgeKind::Forgejo, "acme/alpha"),
                repo(ForgeKind::GitHub, "acme/zeta"),
                repo(ForgeKind::GitHub, "acme/beta"),
                repo(ForgeKind::GitHub, "acme/alpha"),
            ],
            &deferred,
        );
        let names: Vec<String> = order.iter().map(ToString::to_string).collect();
        assert_eq!(
            order,
            vec![
                repo(ForgeKind::GitHub, "acme/zeta"),
                repo(ForgeKind::Forgejo, "acme/alpha"),
                repo(ForgeKind::GitHub, "acme/alpha"),
                repo(ForgeKind::GitHub, "acme/beta"),
            ],
            "{names:?}"
        );
    }

    #[test]
    fn a_repositorys_first_comment_listing_starts_at_its_earliest_mark() {
        assert_eq!(
            first_comments_since(&[Some(unix(30)), Some(unix(10)), Some(unix(20))]),
            Some(unix(10))
        );
        // A pull request without a mark reads from the start.
        assert_eq!(first_comments_since(&[Some(unix(30)), None]), None);
        assert_eq!(first_comments_since(&[]), None);
    }

    fn review(id: u64, author: &str, state: ReviewState, submitted: Option<i64>) -> ListedReview {
        ListedReview {
            id,
            author: User {
                id: 7,
                login: author.into(),
                is_bot: author.ends_with("[bot]"),
            },
            ours: false,
            state,
            commit: Some(sha('a')),
            submitted_at: submitted.map(unix),
        }
    }

    #[test]
    fn an_approval_or_dismissal_no_webhook_brought_is_taken_once() {
        let none = HashSet::new();
        let approved = review(9, "rev-bob", ReviewState::Approved, Some(5_000));
        assert_eq!(
            review_taken(Some(unix(5_000)), &none, &approved),
            Reviewed::Take
        );
        assert_eq!(review_taken(None, &none, &approved), Reviewed::Take);
        let seen: HashSet<OnceSource> = [OnceSource::Review(9, ReviewState::Approved)].into();
        assert_eq!(
            review_taken(Some(unix(1_000)), &seen, &approved),
            Reviewed::Seen
        );
        let dismissed = review(9, "rev-bob", ReviewState::Dismissed, Some(5_000));
        assert_eq!(
            review_taken(Some(unix(1_000)), &seen, &dismissed),
            Reviewed::Take
        );
        let both: HashSet<OnceSource> = [
            OnceSource::Review(9, ReviewState::Approved),
            OnceSource::Review(9, ReviewState::Dismissed),
        ]
        .into();
        assert_eq!(
            review_taken(Some(unix(1_000)), &both, &dismissed),
            Reviewed::Seen
        );
    }

    #[test]
    fn other_reviews_bots_and_reviews_before_the_mark_are_not_taken() {
        let none = HashSet::new();
        for state in [ReviewState::Commented, ReviewState::ChangesRequested] {
            let remark = review(1, "rev-bob", state, Some(5_000));
            assert_eq!(review_taken(None, &none, &remark), Reviewed::NoCommand);
        }
        let bot = review(2, "ci[bot]", ReviewState::Approved, Some(5_000));
        assert_eq!(review_taken(None, &none, &bot), Reviewed::Bot);
        let mut ours = review(3, "wavegate", ReviewState::Approved, Some(5_000));
        ours.ours = true;
        assert_eq!(review_taken(None, &none, &ours), Reviewed::Bot);
        let old = review(4, "rev-bob", ReviewState::Approved, Some(4_999));
        assert_eq!(
            review_taken(Some(unix(5_000)), &none, &old),
            Reviewed::Before
        );
        let undated = review(5, "rev-bob", ReviewState::Approved, None);
        assert_eq!(review_taken(None, &none, &undated), Reviewed::Undated);
    }

    #[test]
    fn a_dismissal_of_an_approval_taken_up_counts_though_submitted_before_the_mark() {
        let seen: HashSet<OnceSource> = [OnceSource::Review(4, ReviewState::Approved)].into();
        let dismissed = review(4, "rev-bob", ReviewState::Dismissed, Some(1_000));
        assert_eq!(
            review_taken(Some(unix(5_000)), &seen, &dismissed),
            Reviewed::Take
        );
        let never_taken = review(6, "rev-bob", ReviewState::Dismissed, Some(1_000));
        assert_eq!(
            review_taken(Some(unix(5_000)), &seen, &never_taken),
            Reviewed::Before
        );
    }

    #[test]
    fn a_quiet_pull_requests_reviews_are_read_twice_after_a_change_then_left() {
        let read = |updated_at, confirmed| ReviewsRead {
            updated_at: Some(updated_at),
            confirmed,
        };
        // First sweep after a start: changed at or after its mark, or unknown.
        assert_eq!(
            reviews_due(None, Some(unix(5_000)), Some(unix(5_000))),
            (true, read(unix(5_000), false))
        );
        assert_eq!(
            reviews_due(None, Some(unix(4_000)), Some(unix(5_000))),
            (false, read(unix(4_000), true))
        );
        assert!(reviews_due(None, Some(unix(4_000)), None).0);
        // Read once more with nothing changed (a review from the same
        // second), then left alone until it changes.
        assert_eq!(
            reviews_due(
                Some(read(unix(5_000), false)),
                Some(unix(5_000)),
                Some(unix(5_000))
            ),
            (true, read(unix(5_000), true))
        );
        assert_eq!(
            reviews_due(
                Some(read(unix(5_000), true)),
                Some(unix(5_000)),
                Some(unix(5_000))
            ),
            (false, read(unix(5_000), true))
        );
        assert_eq!(
            reviews_due(
                Some(read(unix(5_000), true)),
                Some(unix(7_000)),
                Some(unix(5_000))
            ),
            (true, read(unix(7_000), false))
        );
    }
}
