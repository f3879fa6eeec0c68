//! Redelivering lost GitHub webhooks: GitHub records every delivery it made
//! to the App's webhook and never retries a failed one by itself, so at each
//! reconciliation sweep the App lists its recent deliveries and asks GitHub
//! to deliver again, once, each event that failed (no 2xx answer) and that
//! the store never recorded. Which to ask for is decided purely
//! ([`redeliveries_due`]); asking is claimed in the store first
//! ([`Store::claim_redelivery`]), so of several replicas sweeping at once
//! only one asks. The redelivery comes back as a webhook with the event's
//! own delivery id and is deduplicated like any other.
//!
//! How far back: since this server last listed (kept in memory) less a
//! margin, and at start the three days GitHub keeps; never more than
//! [`MOST_PAGES`] pages a sweep. Forgejo has no such API: its comments are
//! swept instead ([`super::reconcile`]).

use crate::forge::client::ForgeClient;
use crate::forge::github::HookDelivery;
use crate::forge::registry::Forges;
use crate::model::{ForgeKind, UnixMs};
use crate::store::Store;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How long GitHub keeps an App's deliveries: the furthest back a listing reaches.
pub(crate) const DELIVERIES_KEPT: Duration = Duration::from_secs(3 * 24 * 3600);
/// Listed again before the last listing: deliveries GitHub dated a little
/// before our clock read it, or logged after it answered.
pub(crate) const LISTING_MARGIN: Duration = Duration::from_secs(5 * 60);
/// Most pages of 100 read in one sweep.
pub(crate) const MOST_PAGES: usize = 10;

/// A failed delivery to ask GitHub for again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) guid: String,
    /// The newest failed attempt's id.
    pub(crate) delivery_id: u64,
    pub(crate) event: String,
}

/// The pure decision: of the listed attempts, grouped by event (guid), those
/// to ask for again, oldest first. An event counts as delivered when any of
/// its attempts was answered 2xx or the store `recorded` it; one whose
/// redelivery was `asked` before is not asked again.
pub(crate) fn redeliveries_due(
    listed: &[HookDelivery],
    recorded: &HashSet<String>,
    asked: &HashSet<String>,
) -> Vec<Due> {
    let mut by_guid: BTreeMap<&str, Vec<&HookDelivery>> = BTreeMap::new();
    for attempt in listed {
        by_guid.entry(&attempt.guid).or_default().push(attempt);
    }
    let mut due: Vec<(UnixMs, Due)> = by_guid
        .into_iter()
        .filter(|(guid, attempts)| {
            !recorded.contains(*guid)
                && !asked.contains(*guid)
                && !attempts.iter().any(|a| a.succeeded())
        })
        .filter_map(|(guid, attempts)| {
            let newest = attempts
                .into_iter()
                .max_by_key(|a| (a.delivered_at, a.id))?;
            Some((
                newest.delivered_at,
                Due {
                    guid: guid.to_owned(),
                    delivery_id: newest.id,
                    event: newest.event.clone(),
                },
            ))
        })
        .collect();
    due.sort_by_key(|(at, d)| (*at, d.delivery_id));
    due.into_iter().map(|(_, d)| d).collect()
}

/// From when (unix ms) to list: the last listing's start less the margin,
/// or as far back as GitHub keeps deliveries.
pub(crate) fn listing_since(last_listed: Option<UnixMs>, now: UnixMs) -> UnixMs {
    let kept = now - DELIVERIES_KEPT;
    last_listed.map_or(kept, |last| (last - LISTING_MARGIN).max(kept))
}

/// This server's memory of when it last listed the App's deliveries; one
/// listing at a time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redeliverer {
    last_listed: Arc<tokio::sync::Mutex<Option<UnixMs>>>,
}

impl Redeliverer {
    /// Lists the App's recent deliveries and asks for those due; answers how
    /// many were asked for. Nothing to do without a GitHub App. A refused
    /// or unanswered request is logged and not asked again.
    pub(crate) async fn sweep(&self, store: &Store, forges: &Forges) -> Result<usize> {
        if !forges.github_configured() {
            return Ok(0);
        }
        let ForgeClient::GitHub(github) = forges.client(ForgeKind::GitHub)? else {
            return Ok(0);
        };
        let mut last_listed = self.last_listed.lock().await;
        let started = crate::store::Clock::now(&crate::store::SystemClock);
        let since = listing_since(*last_listed, started);
        let listed = github
            .hook_deliveries(since, MOST_PAGES)
            .await
            .context("listing the App's webhook deliveries")?;
        if listed.capped {
            tracing::warn!(
                pages = MOST_PAGES,
                "listed the newest {MOST_PAGES} pages of the App's webhook deliveries without reaching back to the last listing; older ones were not looked at"
            );
        }
        let guids: Vec<String> = listed
            .deliveries
            .iter()
            .map(|d| d.guid.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let recorded = store.recorded_deliveries(ForgeKind::GitHub, &guids).await?;
        let asked = store.redeliveries_asked(&guids).await?;
        let mut redelivered = 0;
        for due in redeliveries_due(&listed.deliveries, &recorded, &asked) {
            if !store.claim_redelivery(&due.guid, due.delivery_id).await? {
                continue;
            }
            match github.redeliver(due.delivery_id).await {
                Ok(()) => {
                    tracing::info!(delivery = %due.guid, attempt = due.delivery_id, event = %due.event,
                        "webhook delivery {} ({}) failed and was never recorded: GitHub was asked to deliver it again",
                        due.guid, due.event);
                    redelivered += 1;
                }
                Err(error) => tracing::warn!(delivery = %due.guid, attempt = due.delivery_id,
                    "asking GitHub to deliver {} again failed; it is not asked again: {error:#}",
                    due.guid),
            }
        }
        *last_listed = Some(started);
        Ok(redelivered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::in_tests::{millis, unix};

    fn attempt(id: u64, guid: &str, delivered_at: UnixMs, status_code: u16) -> HookDelivery {
        HookDelivery {
            id,
            guid: guid.into(),
            delivered_at,
            status_code,
            redelivery: id > 100,
            event: "issue_comment".into(),
            installation_id: Some(77),
        }
    }

    fn set(guids: &[&str]) -> HashSet<String> {
        guids.iter().map(|g| (*g).to_owned()).collect()
    }

    fn ids(due: &[Due]) -> Vec<u64> {
        due.iter().map(|d| d.delivery_id).collect()
    }

    #[test]
    fn a_failed_delivery_never_recorded_is_asked_for_by_its_newest_failed_attempt() {
        let listed = [
            attempt(1, "a", unix(1_000), 503),
            attempt(101, "a", unix(5_000), 502),
            attempt(2, "b", unix(2_000), 0),
        ];
        let due = redeliveries_due(&listed, &set(&[]), &set(&[]));
        assert_eq!(ids(&due), [2, 101], "oldest event first, once each");
        assert_eq!(due[1].guid, "a");
    }

    #[test]
    fn an_event_answered_2xx_once_or_recorded_by_the_store_is_delivered() {
        let listed = [
            attempt(1, "retried-by-hand", unix(1_000), 503),
            attempt(102, "retried-by-hand", unix(2_000), 202),
            attempt(3, "answer-lost", unix(3_000), 504),
            attempt(4, "fine", unix(4_000), 200),
        ];
        let due = redeliveries_due(&listed, &set(&["answer-lost"]), &set(&[]));
        assert!(due.is_empty(), "{due:?}");
    }

    #[test]
    fn an_event_asked_for_before_is_not_asked_again_even_if_it_failed_again() {
        let listed = [
            attempt(1, "a", unix(1_000), 503),
            attempt(103, "a", unix(9_000), 503),
        ];
        assert!(redeliveries_due(&listed, &set(&[]), &set(&["a"])).is_empty());
    }

    #[test]
    fn listing_reaches_back_to_the_last_listing_less_a_margin_and_never_past_what_github_keeps() {
        let now = UnixMs::EPOCH + 10 * DELIVERIES_KEPT;
        assert_eq!(listing_since(None, now), now - DELIVERIES_KEPT);
        let last = now - millis(60_000);
        assert_eq!(listing_since(Some(last), now), last - LISTING_MARGIN);
        let long_ago = now - 2 * DELIVERIES_KEPT;
        assert_eq!(listing_since(Some(long_ago), now), now - DELIVERIES_KEPT);
    }
}
