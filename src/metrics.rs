//! Prometheus metrics: every metric wavegate exposes, declared in one place
//! (name, help, type, labels, buckets) on the `prometheus-client` crate, and
//! the text exposition format (0.0.4) `GET /metrics` serves.
//!
//! A metric is a family of series told apart by a typed label set (a few
//! labels, with values from small fixed sets: never a repository or a
//! user). The label structs list their fields in label-name order, which is
//! the order they are exposed in. Counters are registered without their
//! `_total` suffix: the encoder adds it, so the exposed names are the
//! `wavegate_…_total` ones. The crate ends every help text with a full stop,
//! so the texts below have none.
//!
//! Two registries: [`global`], which the process records into from start to
//! exit, and [`Scraped`], the store's figures built afresh for each scrape.
//! A labelled family is exposed once it has a series; a metric without
//! labels (the intake histogram) from the start, at 0.
//!
//! This module imports nothing from the rest of the crate, so the domain may
//! record into it (the plan runner times its commands) without depending on
//! the edges.

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;

/// The content type of the text exposition format (0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Webhook intake: from the first byte read to the answer (milliseconds to seconds).
const INTAKE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Jobs and commands: a second to an hour.
const RUN_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// A family of histograms over [`RUN_BUCKETS`].
pub type RunHistograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn run_histogram() -> Histogram {
    Histogram::new(RUN_BUCKETS.iter().copied())
}

/// `wavegate_deliveries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub event: String,
    pub forge: String,
    pub outcome: String,
}

/// `wavegate_notifications_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    pub outcome: String,
    pub target: String,
}

/// `wavegate_job_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub kind: String,
    pub outcome: String,
}

/// `wavegate_command_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub kind: String,
    pub result: String,
}

/// `wavegate_forge_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForgeRequestLabels {
    pub forge: String,
    pub status: String,
}

/// `wavegate_forge_rate_limit_remaining`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForgeLabels {
    pub forge: String,
}

/// `wavegate_sweep_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabels {
    pub answer: String,
}

/// `wavegate_sweep_last`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfLabels {
    pub of: String,
}

/// `wavegate_ledger_facts`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// `wavegate_apply_runs`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: String,
}

/// `wavegate_sandbox_limits`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MechanismLabels {
    pub mechanism: String,
}

/// What the process counts from start to exit.
pub struct Metrics {
    pub deliveries: Family<DeliveryLabels, Counter>,
    pub notifications: Family<NotificationLabels, Counter>,
    pub intake_duration: Histogram,
    pub job_duration: RunHistograms<JobLabels>,
    pub command_duration: RunHistograms<CommandLabels>,
    pub forge_requests: Family<ForgeRequestLabels, Counter>,
    pub forge_rate_limit_remaining: Family<ForgeLabels, Gauge>,
    pub sweep_requests: Family<AnswerLabels, Counter>,
    pub sweep_last: Family<OfLabels, Gauge>,
    pub sandbox_limits: Family<MechanismLabels, Gauge>,
    registry: Registry,
}

impl Metrics {
    /// A registry of its own (the process uses [`global`]; tests make theirs).
    pub fn new() -> Self {
        let metrics = Self {
            deliveries: Family::default(),
            notifications: Family::default(),
            intake_duration: Histogram::new(INTAKE_BUCKETS.iter().copied()),
            job_duration: Family::new_with_constructor(run_histogram),
            command_duration: Family::new_with_constructor(run_histogram),
            forge_requests: Family::default(),
            forge_rate_limit_remaining: Family::default(),
            sweep_requests: Family::default(),
            sweep_last: Family::default(),
            sandbox_limits: Family::default(),
            registry: Registry::default(),
        };
        let mut registry = Registry::default();
        registry.register(
            "wavegate_deliveries",
            "Webhook deliveries by forge, event and how the intake answered (queued, recorded, duplicate, ignored, malformed, unauthorized, too_large, error)",
            metrics.deliveries.clone(),
        );
        registry.register(
            "wavegate_notifications",
            "Notification deliveries by `[notify]` target and outcome (delivered; failed: an attempt that got no 2xx, tried again later; undefined: the target is not defined on this server)",
            metrics.notifications.clone(),
        );
        registry.register(
            "wavegate_intake_duration_seconds",
            "Time from reading a delivery to answering it: verify, record, answer",
            metrics.intake_duration.clone(),
        );
        registry.register(
            "wavegate_job_duration_seconds",
            "Job attempts by kind and outcome (done, skipped, failed: retried later, dead: gave up, abandoned: lease lost)",
            metrics.job_duration.clone(),
        );
        registry.register(
            "wavegate_command_duration_seconds",
            "Plan, apply and outputs commands by kind and result (ok, failed, timeout)",
            metrics.command_duration.clone(),
        );
        registry.register(
            "wavegate_forge_requests",
            "HTTP requests to the forge APIs by forge and answer status (`error`: no answer), retries counted one by one",
            metrics.forge_requests.clone(),
        );
        registry.register(
            "wavegate_forge_rate_limit_remaining",
            "Requests left in the forge's rate-limit window, from the last answer's x-ratelimit-remaining",
            metrics.forge_rate_limit_remaining.clone(),
        );
        registry.register(
            "wavegate_sweep_requests",
            "Forge requests made by reconciliation sweeps, by answer: `counted` (answered in full, against the budget) or `not_modified` (304, free on GitHub)",
            metrics.sweep_requests.clone(),
        );
        registry.register(
            "wavegate_sweep_last",
            "The last reconciliation sweep: its counted requests (`of=requests`), its 304s (`of=not_modified`) and the repositories it left for the next sweep to keep the budget's reserve (`of=deferred`)",
            metrics.sweep_last.clone(),
        );
        registry.register(
            "wavegate_sandbox_limits",
            "What holds the execution profiles' limits on this server: 1 for `cgroup-v2` or `cgroup-v1` (memory and processes; rlimits for disk and CPU time), `rlimits`, or `none`",
            metrics.sandbox_limits.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// Every metric with a series, in the text exposition format 0.0.4.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The registry the whole process records into.
pub fn global() -> &'static Metrics {
    static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &GLOBAL
}

/// The store's figures for one scrape, read fresh each time so that every
/// replica reports the same queue and ledger.
pub struct Scraped {
    pub store_readable: Gauge,
    pub queue_depth: Gauge,
    pub queue_oldest_age: Gauge<f64, AtomicU64>,
    pub jobs_dead: Gauge,
    pub ledger_facts: Family<KindLabels, Gauge>,
    pub apply_runs: Family<StatusLabels, Gauge>,
    pub drifted_members: Family<StageLabels, Gauge>,
    pub drift_oldest_age: Family<StageLabels, Gauge<f64, AtomicU64>>,
    pub drift_checks: Family<StageLabels, Gauge>,
    pub drift_check_failures: Family<StageLabels, Gauge>,
    registry: Registry,
}

/// A repository's stage, for the drift figures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub repository: String,
    pub stage: String,
}

impl Scraped {
    /// `wavegate_store_readable`, and the figures only when the store could
    /// be read (when it could not, they are left out rather than shown as 0).
    pub fn new(readable: bool) -> Self {
        let scraped = Self {
            store_readable: Gauge::default(),
            queue_depth: Gauge::default(),
            queue_oldest_age: Gauge::default(),
            jobs_dead: Gauge::default(),
            ledger_facts: Family::default(),
            apply_runs: Family::default(),
            drifted_members: Family::default(),
            drift_oldest_age: Family::default(),
            drift_checks: Family::default(),
            drift_check_failures: Family::default(),
            registry: Registry::default(),
        };
        scraped.store_readable.set(readable.into());
        let mut registry = Registry::default();
        if readable {
            registry.register(
                "wavegate_queue_depth",
                "Jobs queued or running, read from the store at scrape time",
                scraped.queue_depth.clone(),
            );
            registry.register(
                "wavegate_queue_oldest_job_age_seconds",
                "Age of the oldest queued job (0 when none), read from the store at scrape time",
                scraped.queue_oldest_age.clone(),
            );
            registry.register(
                "wavegate_jobs_dead",
                "Jobs that gave up after their last attempt, read from the store at scrape time",
                scraped.jobs_dead.clone(),
            );
            registry.register(
                "wavegate_ledger_facts",
                "Gate ledger facts by kind, read from the store at scrape time",
                scraped.ledger_facts.clone(),
            );
            registry.register(
                "wavegate_apply_runs",
                "Apply runs by status, read from the store at scrape time",
                scraped.apply_runs.clone(),
            );
            registry.register(
                "wavegate_drifted_members",
                "Members whose drift is open, by repository and stage, read from the store at scrape time",
                scraped.drifted_members.clone(),
            );
            registry.register(
                "wavegate_drift_oldest_age_seconds",
                "Age of the oldest open drift (0 when none), by repository and stage",
                scraped.drift_oldest_age.clone(),
            );
            registry.register(
                "wavegate_drift_checks",
                "Drift checks run, by repository and stage, read from the store at scrape time",
                scraped.drift_checks.clone(),
            );
            registry.register(
                "wavegate_drift_check_failures",
                "Drift checks that could not plan a member (or at all), by repository and stage",
                scraped.drift_check_failures.clone(),
            );
        }
        registry.register(
            "wavegate_store_readable",
            "1 when the scrape could read the store's figures, 0 when it could not (they are left out)",
            scraped.store_readable.clone(),
        );
        Self {
            registry,
            ..scraped
        }
    }

    /// The figures in the text exposition format 0.0.4.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_text::encode(&mut text, registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(event: &str, outcome: &str) -> DeliveryLabels {
        DeliveryLabels {
            event: event.into(),
            forge: "github".into(),
            outcome: outcome.into(),
        }
    }

    #[test]
    fn counters_render_with_help_type_the_total_suffix_and_labels_in_name_order() {
        let metrics = Metrics::new();
        let text = metrics.render();
        assert!(
            !text.contains("deliveries"),
            "a family with no series is left out:\n{text}"
        );
        let queued = delivery("pull_request", "queued");
        metrics.deliveries.get_or_create(&queued).inc();
        metrics.deliveries.get_or_create(&queued).inc_by(2);
        let text = metrics.render();
        assert!(
            text.starts_with("# HELP wavegate_deliveries_total Webhook deliveries by forge, event and how the intake answered (queued, recorded, duplicate, ignored, malformed, unauthorized, too_large, error).\n\
             # TYPE wavegate_deliveries_total counter\n\
             wavegate_deliveries_total{event=\"pull_request\",forge=\"github\",outcome=\"queued\"} 3\n\
             # HELP wavegate_intake_duration_seconds "
            ),
            "{text}"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf_sum_and_count() {
        let metrics = Metrics::new();
        let labels = CommandLabels {
            kind: "plan".into(),
            result: "ok".into(),
        };
        for value in [0.0625, 0.1, 0.75, 4.0, 5000.0] {
            metrics
                .command_duration
                .get_or_create(&labels)
                .observe(value);
        }
        let text = metrics.render();
        let series = "wavegate_command_duration_seconds";
        let labels = "kind=\"plan\",result=\"ok\"";
        for line in [
            format!("# TYPE {series} histogram\n"),
            format!("{series}_bucket{{{labels},le=\"0.1\"}} 2\n"),
            format!("{series}_bucket{{{labels},le=\"0.25\"}} 2\n"),
            format!("{series}_bucket{{{labels},le=\"1\"}} 3\n"),
            format!("{series}_bucket{{{labels},le=\"5\"}} 4\n"),
            format!("{series}_bucket{{{labels},le=\"3600\"}} 4\n"),
            format!("{series}_bucket{{{labels},le=\"+Inf\"}} 5\n"),
            format!("{series}_sum{{{labels}}} 5004.9125\n"),
            format!("{series}_count{{{labels}}} 5\n"),
        ] {
            assert!(text.contains(&line), "{line:?} in\n{text}");
        }
        assert_eq!(
            text.matches(&format!("{series}_bucket{{")).count(),
            RUN_BUCKETS.len() + 1
        );
    }

    #[test]
    fn a_histogram_without_labels_has_only_le() {
        let metrics = Metrics::new();
        metrics.intake_duration.observe(0.0025);
        let text = metrics.render();
        for line in [
            "wavegate_intake_duration_seconds_bucket{le=\"0.0005\"} 0\n",
            "wavegate_intake_duration_seconds_bucket{le=\"0.0025\"} 1\n",
            "wavegate_intake_duration_seconds_bucket{le=\"+Inf\"} 1\n",
            "wavegate_intake_duration_seconds_sum 0.0025\n",
            "wavegate_intake_duration_seconds_count 1\n",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::new();
        metrics
            .deliveries
            .get_or_create(&delivery("a\"b\\c\nd", "error"))
            .inc();
        let text = metrics.render();
        assert!(text.contains("{event=\"a\\\"b\\\\c\\nd\",forge="), "{text}");
    }

    #[test]
    fn store_figures_are_left_out_when_the_store_was_unreadable() {
        let text = Scraped::new(false).render();
        assert_eq!(
            text,
            "# HELP wavegate_store_readable 1 when the scrape could read the store's figures, 0 when it could not (they are left out).\n\
             # TYPE wavegate_store_readable gauge\n\
             wavegate_store_readable 0\n"
        );
        let text = Scraped::new(true).render();
        assert!(text.contains("wavegate_store_readable 1\n"), "{text}");
        assert!(text.contains("wavegate_queue_depth 0\n"), "{text}");
    }

    #[test]
    fn concurrent_recording_loses_nothing() {
        let metrics = Metrics::new();
        let github = ForgeRequestLabels {
            forge: "github".into(),
            status: "200".into(),
        };
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        metrics.forge_requests.get_or_create(&github).inc();
                        metrics.intake_duration.observe(0.25);
                    }
                });
            }
        });
        let text = metrics.render();
        assert!(
            text.contains("wavegate_forge_requests_total{forge=\"github\",status=\"200\"} 4000\n"),
            "{text}"
        );
        assert!(
            text.contains("wavegate_intake_duration_seconds_count 4000\n"),
            "{text}"
        );
        assert!(
            text.contains("wavegate_intake_duration_seconds_sum 1000.0\n"),
            "{text}"
        );
    }
}
