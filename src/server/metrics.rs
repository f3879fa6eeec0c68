//! `GET /metrics`: what the process counted since it started, and the
//! store's figures read at scrape time (so every replica reports the same
//! queue and ledger, and a restart loses none of them).

use super::AppState;
use crate::metrics::{self, Registry};
use crate::model::ForgeKind;
use crate::store::StoreFigures;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use std::time::Instant;

/// The content type of the text exposition format.
pub(crate) const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Ledger fact kinds and apply run statuses are always listed, 0 when none.
const FACT_KINDS: &[&str] = &["pending", "approved", "refused", "revoked", "spent"];
const RUN_STATUSES: &[&str] = &["running", "waiting", "failed", "applied"];

/// Counts a delivery by how it was answered and times its intake. `event`
/// is the forge's event header once the signature checked out, else
/// `unknown` (an unsigned request chooses no label values).
pub(super) fn delivery(forge: ForgeKind, event: &str, outcome: &'static str, started: Instant) {
    metrics::DELIVERIES.inc(&[
        ("forge", forge.as_str()),
        ("event", event),
        ("outcome", outcome),
    ]);
    metrics::INTAKE_DURATION.observe(&[], started.elapsed().as_secs_f64());
}

pub(super) async fn handler(State(state): State<AppState>) -> Response {
    let scraped = Registry::new();
    match state.store.figures().await {
        Ok(figures) => {
            record_figures(&scraped, &figures);
            metrics::STORE_READABLE.set_in(&scraped, &[], 1.0);
        }
        Err(error) => {
            tracing::warn!("/metrics could not read the store: {error:#}");
            metrics::STORE_READABLE.set_in(&scraped, &[], 0.0);
        }
    }
    let mut text = metrics::global().render();
    text.push_str(&scraped.render());
    ([(CONTENT_TYPE, CONTENT_TYPE_TEXT)], text).into_response()
}

fn record_figures(into: &Registry, figures: &StoreFigures) {
    let jobs = |status: &str| {
        figures
            .jobs
            .iter()
            .filter(|(s, _)| s == status)
            .map(|(_, n)| *n)
            .sum::<i64>()
    };
    metrics::QUEUE_DEPTH.set_in(into, &[], (jobs("queued") + jobs("running")) as f64);
    metrics::JOBS_DEAD.set_in(into, &[], jobs("dead") as f64);
    metrics::QUEUE_OLDEST_AGE.set_in(into, &[], figures.oldest_queued_ms as f64 / 1000.0);
    by_label(
        into,
        &metrics::LEDGER_FACTS,
        "kind",
        FACT_KINDS,
        &figures.facts,
    );
    by_label(
        into,
        &metrics::APPLY_RUNS,
        "status",
        RUN_STATUSES,
        &figures.apply_runs,
    );
}

/// One series per known value (0 when absent) and per value the store holds.
fn by_label(
    into: &Registry,
    gauge: &metrics::Gauge,
    label: &'static str,
    known: &[&str],
    counts: &[(String, i64)],
) {
    for value in known {
        if !counts.iter().any(|(v, _)| v == value) {
            gauge.set_in(into, &[(label, value)], 0.0);
        }
    }
    for (value, n) in counts {
        gauge.set_in(into, &[(label, value)], *n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_figures_become_gauges_with_known_values_at_zero() {
        let registry = Registry::new();
        record_figures(
            &registry,
            &StoreFigures {
                jobs: vec![
                    ("queued".into(), 2),
                    ("running".into(), 1),
                    ("dead".into(), 4),
                ],
                oldest_queued_ms: 2500,
                facts: vec![("approved".into(), 3)],
                apply_runs: vec![],
            },
        );
        let text = registry.render();
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
