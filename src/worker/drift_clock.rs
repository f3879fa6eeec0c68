//! The drift schedule's clock (docs/drift.md): every few seconds it claims
//! the repositories whose default branch is due a reading of its drift
//! schedule and the stages whose check is due, each with its job enqueued
//! in the transaction that claims it, so replicas share the work and a
//! crash loses no check. The jobs do the rest.

use crate::jobs::Task;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How often a repository's default branch is read again for its schedule
/// (a merged change to `[drift]` takes effect within it), at most.
const RESCAN: Duration = Duration::from_secs(600);

pub struct DriftClock {
    store: Store,
    wake: Arc<Notify>,
    /// `WAVEGATE_DRIFT_MIN_INTERVAL`.
    floor: Duration,
}

impl DriftClock {
    pub fn new(store: Store, wake: Arc<Notify>, floor: Duration) -> Self {
        Self { store, wake, floor }
    }

    /// How long it sleeps between looks: a fraction of the shortest
    /// interval, from a second to half a minute.
    fn tick(&self) -> Duration {
        (self.floor / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
    }

    pub(crate) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let rescan = self.floor.min(RESCAN);
        tracing::info!(
            floor = %crate::model::time::humanize(self.floor),
            "drift checks are on: each repository's [drift] schedule is read from its default branch"
        );
        loop {
            if *shutdown.borrow() {
                break;
            }
            match self.claim(rescan).await {
                Ok(claimed) => {
                    for _ in 0..claimed {
                        self.wake.notify_one();
                    }
                }
                Err(error) => tracing::warn!("claiming due drift checks failed: {error:#}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.tick()) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    async fn claim(&self, rescan: Duration) -> anyhow::Result<usize> {
        let scans = self
            .store
            .claim_drift_scans(rescan, |repo| {
                Task::DriftScan { repo: repo.clone() }.into_job()
            })
            .await?;
        let checks = self
            .store
            .claim_due_drift_checks(|repo, stage| {
                Task::Drift {
                    repo: repo.clone(),
                    stage: stage.clone(),
                }
                .into_job()
            })
            .await?;
        Ok(scans + checks)
    }
}
