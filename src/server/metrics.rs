//! `GET /metrics`: what the process counted since it started, and the
//! store's figures read at scrape time (so every replica reports the same
//! queue and ledger, and a restart loses none of them).

use super::AppState;
use crate::metrics::{self, DeliveryLabels, Scraped};
use crate::model::ForgeKind;
use crate::store::StoreFigures;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::time::Instant;

/// Ledger fact kinds and apply run statuses are always listed, 0 when none.
const FACT_KINDS: &[&str] = &["pending", "approved", "refused", "revoked", "spent"];
const RUN_STATUSES: &[&str] = &["running", "waiting", "failed", "applied"];

/// Counts a delivery by how it was answered and times its intake. `event`
/// is the forge's event header once the signature checked out, else
/// `unknown` (an unsigned request chooses no label values).
pub(super) fn delivery(forge: ForgeKind, event: &str, outcome: &'static str, started: Instant) {
    let global = metrics::global();
    global
        .deliveries
        .get_or_create(&DeliveryLabels {
            event: event.to_owned(),
            forge: forge.as_str().to_owned(),
            outcome: outcome.to_owned(),
        })
        .inc();
    global
        .intake_duration
        .observe(started.elapsed().as_secs_f64());
}

pub(super) async fn handler(State(state): State<AppState>) -> Response {
    let scraped = match state.store.figures().await {
        Ok(figures) => {
            let scraped = Scraped::new(true);
            record_figures(&scraped, &figures);
            scraped
        }
        Err(error) => {
            tracing::warn!("/metrics could not read the store: {error:#}");
            Scraped::new(false)
        }
    };
    let mut text = metrics::global().render();
    text.push_str(&scraped.render());
    ([(CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

fn record_figures(into: &Scraped, figures: &StoreFigures) {
    let jobs = |status: &str| {
        figures
            .jobs
            .iter()
            .filter(|(s, _)| s == status)
            .map(|(_, n)| *n)
            .sum::<i64>()
    };
    into.queue_depth.set(jobs("queued") + jobs("running"));
    into.jobs_dead.set(jobs("dead"));
    into.queue_oldest_age
        .set(figures.oldest_queued_ms as f64 / 1000.0);
    by_label(
        &into.ledger_facts,
        |kind| metrics::KindLabels { kind },
        FACT_KINDS,
        &figures.facts,
    );
    by_label(
        &into.apply_runs,
        |status| metrics::StatusLabels { status },
        RUN_STATUSES,
        &figures.apply_runs,
    );
    for (stage, oldest_ms) in &figures.drift {
        let labels = metrics::StageLabels {
            repository: stage.repo.to_string(),
            stage: stage.stage.clone(),
        };
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        into.drifted_members
            .get_or_create(&labels)
            .set(count(stage.drifted));
        into.drift_oldest_age
            .get_or_create(&labels)
            .set(*oldest_ms as f64 / 1000.0);
        into.drift_checks
            .get_or_create(&labels)
            .set(count(stage.runs));
        into.drift_check_failures
            .get_or_create(&labels)
            .set(count(stage.failures));
    }
}

/// One series per known value (0 when absent) and per value the store holds.
fn by_label<L>(
    gauges: &Family<L, Gauge>,
    labels: impl Fn(String) -> L,
    known: &[&str],
    counts: &[(String, i64)],
) where
    L: Clone + std::hash::Hash + Eq,
{
    for value in known {
        if !counts.iter().any(|(v, _)| v == value) {
            gauges.get_or_create(&labels((*value).to_owned())).set(0);
        }
    }
    for (value, n) in counts {
        gauges.get_or_create(&labels(value.clone())).set(*n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_figures_become_gauges_with_known_values_at_zero() {
        let scraped = Scraped::new(true);
        record_figures(
            &scraped,
            &StoreFigures {
                jobs: vec![
                    ("queued".into(), 2),
                    ("running".into(), 1),
                    ("dead".into(), 4),
                ],
                oldest_queued_ms: 2500,
                facts: vec![("approved".into(), 3)],
                apply_runs: vec![],
                drift: vec![],
            },
        );
        let text = scraped.render();
        for line in [
            "wavegate_queue_depth 3\n",
            "wavegate_jobs_dead 4\n",
            "wavegate_queue_oldest_job_age_seconds 2.5\n",
            "wavegate_ledger_facts{kind=\"approved\"} 3\n",
            "wavegate_ledger_facts{kind=\"spent\"} 0\n",
            "wavegate_apply_runs{status=\"applied\"} 0\n",
            "# TYPE wavegate_apply_runs gauge\n",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
    }
}
