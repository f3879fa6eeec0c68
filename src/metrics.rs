//! Prometheus metrics: a small registry every module records into, and the
//! text exposition format (0.0.4) `GET /metrics` serves.
//!
//! Every metric wavegate exposes is declared below, name and help in one
//! place. A metric is a family of series told apart by labels (a few, with
//! values from small fixed sets: never a repository or a user). Counters and
//! gauges hold one number; histograms count observations into fixed buckets.
//! Recording takes a read lock and updates atomics; a series is created (under
//! the write lock) the first time its labels are seen.
//!
//! This module imports nothing from the rest of the crate, so the domain may
//! record into it (the plan runner times its commands) without depending on
//! the edges.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

/// Webhook intake: from the first byte read to the answer (milliseconds to seconds).
const INTAKE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Jobs and commands: a second to an hour.
const RUN_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

pub static DELIVERIES: Counter = Counter::new(
    "wavegate_deliveries_total",
    "Webhook deliveries by forge, event and how the intake answered (queued, recorded, duplicate, ignored, malformed, unauthorized, too_large, error).",
);
pub static INTAKE_DURATION: Histogram = Histogram::new(
    "wavegate_intake_duration_seconds",
    "Time from reading a delivery to answering it: verify, record, answer.",
    INTAKE_BUCKETS,
);
pub static JOB_DURATION: Histogram = Histogram::new(
    "wavegate_job_duration_seconds",
    "Job attempts by kind and outcome (done, skipped, failed: retried later, dead: gave up, abandoned: lease lost).",
    RUN_BUCKETS,
);
pub static COMMAND_DURATION: Histogram = Histogram::new(
    "wavegate_command_duration_seconds",
    "Plan, apply and outputs commands by kind and result (ok, failed, timeout).",
    RUN_BUCKETS,
);
pub static FORGE_REQUESTS: Counter = Counter::new(
    "wavegate_forge_requests_total",
    "HTTP requests to the forge APIs by forge and answer status (`error`: no answer), retries counted one by one.",
);
pub static FORGE_RATE_LIMIT_REMAINING: Gauge = Gauge::new(
    "wavegate_forge_rate_limit_remaining",
    "Requests left in the forge's rate-limit window, from the last answer's x-ratelimit-remaining.",
);
pub static SWEEP_REQUESTS: Counter = Counter::new(
    "wavegate_sweep_requests_total",
    "Forge requests made by reconciliation sweeps, by answer: `counted` (answered in full, against the budget) or `not_modified` (304, free on GitHub).",
);
pub static SWEEP_LAST: Gauge = Gauge::new(
    "wavegate_sweep_last",
    "The last reconciliation sweep: its counted requests (`of=requests`), its 304s (`of=not_modified`) and the repositories it left for the next sweep to keep the budget's reserve (`of=deferred`).",
);
pub static QUEUE_DEPTH: Gauge = Gauge::new(
    "wavegate_queue_depth",
    "Jobs queued or running, read from the store at scrape time.",
);
pub static QUEUE_OLDEST_AGE: Gauge = Gauge::new(
    "wavegate_queue_oldest_job_age_seconds",
    "Age of the oldest queued job (0 when none), read from the store at scrape time.",
);
pub static JOBS_DEAD: Gauge = Gauge::new(
    "wavegate_jobs_dead",
    "Jobs that gave up after their last attempt, read from the store at scrape time.",
);
pub static LEDGER_FACTS: Gauge = Gauge::new(
    "wavegate_ledger_facts",
    "Gate ledger facts by kind, read from the store at scrape time.",
);
pub static APPLY_RUNS: Gauge = Gauge::new(
    "wavegate_apply_runs",
    "Apply runs by status, read from the store at scrape time.",
);
pub static STORE_READABLE: Gauge = Gauge::new(
    "wavegate_store_readable",
    "1 when the scrape could read the store's figures, 0 when it could not (they are left out).",
);

/// The registry the whole process records into.
pub fn global() -> &'static Registry {
    static GLOBAL: LazyLock<Registry> = LazyLock::new(Registry::new);
    &GLOBAL
}

/// Label pairs as given at a call site; their order does not matter.
pub type Labels<'a> = &'a [(&'static str, &'a str)];

/// A monotonically increasing count.
pub struct Counter {
    name: &'static str,
    help: &'static str,
}

impl Counter {
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self { name, help }
    }

    pub fn inc(&self, labels: Labels<'_>) {
        self.add_in(global(), labels, 1.0);
    }

    pub fn inc_by(&self, labels: Labels<'_>, count: usize) {
        #[allow(clippy::cast_precision_loss)]
        self.add_in(global(), labels, count as f64);
    }

    pub fn add_in(&self, registry: &Registry, labels: Labels<'_>, value: f64) {
        debug_assert!(value >= 0.0, "{} only goes up", self.name);
        registry
            .series(self.name, self.help, Kind::Counter, &[], labels)
            .value
            .add(value);
    }
}

/// A number that goes up and down.
pub struct Gauge {
    name: &'static str,
    help: &'static str,
}

impl Gauge {
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self { name, help }
    }

    pub fn set(&self, labels: Labels<'_>, value: f64) {
        self.set_in(global(), labels, value);
    }

    pub fn set_in(&self, registry: &Registry, labels: Labels<'_>, value: f64) {
        registry
            .series(self.name, self.help, Kind::Gauge, &[], labels)
            .value
            .set(value);
    }
}

/// Observations counted into fixed buckets, with their sum and count.
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    /// Upper bounds, strictly increasing; `+Inf` is implied.
    buckets: &'static [f64],
}

impl Histogram {
    pub const fn new(name: &'static str, help: &'static str, buckets: &'static [f64]) -> Self {
        Self {
            name,
            help,
            buckets,
        }
    }

    pub fn observe(&self, labels: Labels<'_>, value: f64) {
        self.observe_in(global(), labels, value);
    }

    pub fn observe_in(&self, registry: &Registry, labels: Labels<'_>, value: f64) {
        let series = registry.series(self.name, self.help, Kind::Histogram, self.buckets, labels);
        // Per-bucket counts; rendering makes them cumulative.
        let slot = self
            .buckets
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.buckets.len());
        series.buckets[slot].fetch_add(1, Ordering::Relaxed);
        series.value.add(value);
        series.count.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Label pairs sorted by name.
type LabelSet = Vec<(&'static str, String)>;

struct Family {
    help: &'static str,
    kind: Kind,
    buckets: &'static [f64],
    series: RwLock<BTreeMap<LabelSet, Arc<Series>>>,
}

struct Series {
    /// A counter's or gauge's value; a histogram's sum.
    value: AtomicF64,
    /// A histogram's per-bucket counts, the last one for `+Inf`.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
}

/// Metric families by name.
#[derive(Default)]
pub struct Registry {
    families: RwLock<BTreeMap<&'static str, Arc<Family>>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    fn series(
        &self,
        name: &'static str,
        help: &'static str,
        kind: Kind,
        buckets: &'static [f64],
        labels: Labels<'_>,
    ) -> Arc<Series> {
        debug_assert!(valid_name(name, true), "metric name `{name}`");
        debug_assert!(
            buckets.windows(2).all(|w| w[0] < w[1]),
            "{name}: buckets increase"
        );
        let family = {
            let families = self.families.read().unwrap_or_else(PoisonError::into_inner);
            families.get(name).cloned()
        };
        let family = family.unwrap_or_else(|| {
            let mut families = self
                .families
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            families
                .entry(name)
                .or_insert_with(|| {
                    Arc::new(Family {
                        help,
                        kind,
                        buckets,
                        series: RwLock::default(),
                    })
                })
                .clone()
        });
        debug_assert_eq!(family.kind, kind, "{name} is one kind of metric");
        let mut key: LabelSet = labels
            .iter()
            .map(|(label, value)| {
                debug_assert!(
                    valid_name(label, false) && !(kind == Kind::Histogram && *label == "le"),
                    "{name}: label name `{label}`"
                );
                (*label, (*value).to_owned())
            })
            .collect();
        key.sort_by(|a, b| a.0.cmp(b.0));
        let found = {
            let series = family.series.read().unwrap_or_else(PoisonError::into_inner);
            series.get(&key).cloned()
        };
        found.unwrap_or_else(|| {
            let mut series = family
                .series
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            series
                .entry(key)
                .or_insert_with(|| {
                    let slots = if family.kind == Kind::Histogram {
                        family.buckets.len() + 1
                    } else {
                        0
                    };
                    Arc::new(Series {
                        value: AtomicF64::default(),
                        buckets: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                        count: AtomicU64::new(0),
                    })
                })
                .clone()
        })
    }

    /// Every family in the text exposition format 0.0.4, sorted by name,
    /// each series sorted by its labels.
    pub fn render(&self) -> String {
        let families = self.families.read().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for (name, family) in families.iter() {
            let series = family.series.read().unwrap_or_else(PoisonError::into_inner);
            if series.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {}", escape_help(family.help));
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for (labels, series) in series.iter() {
                if family.kind != Kind::Histogram {
                    sample(&mut out, name, "", labels, None, series.value.get());
                    continue;
                }
                let mut cumulative = 0u64;
                for (i, count) in series.buckets.iter().enumerate() {
                    cumulative += count.load(Ordering::Relaxed);
                    let le = family
                        .buckets
                        .get(i)
                        .map_or_else(|| "+Inf".to_owned(), |b| number(*b));
                    sample(
                        &mut out,
                        name,
                        "_bucket",
                        labels,
                        Some(&le),
                        cumulative as f64,
                    );
                }
                sample(&mut out, name, "_sum", labels, None, series.value.get());
                // The count is the +Inf bucket's, read once above, so the
                // two agree even while observations arrive.
                sample(&mut out, name, "_count", labels, None, cumulative as f64);
            }
        }
        out
    }
}

/// One line: `name{a="x",le="0.5"} value`.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &LabelSet,
    le: Option<&str>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    let le = le.map(|le| ("le", le));
    let mut pairs = labels
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(le)
        .peekable();
    if pairs.peek().is_some() {
        out.push('{');
        for (i, (label, value)) in pairs.enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escape_label(value));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&number(value));
    out.push('\n');
}

/// A sample value as Prometheus reads it.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{value}")
    }
}

/// Label values escape backslash, double quote and line feed.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text escapes backslash and line feed.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*` for metrics; labels take no `:` and no `__` prefix.
fn valid_name(name: &str, metric: bool) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':');
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(allowed)
        && (metric || !name.starts_with("__"))
}

/// An f64 in an `AtomicU64`, added to with compare-and-swap.
#[derive(Default)]
struct AtomicF64(AtomicU64);

impl AtomicF64 {
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }

    fn add(&self, value: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUCKETS: &[f64] = &[0.125, 0.5, 1.0];
    static REQUESTS: Counter = Counter::new("test_requests_total", "Requests.");
    static TEMPERATURE: Gauge = Gauge::new("test_temperature", "Degrees.");
    static LATENCY: Histogram = Histogram::new("test_latency_seconds", "Latency.", BUCKETS);

    #[test]
    fn counters_and_gauges_render_with_help_type_and_sorted_labels() {
        let registry = Registry::new();
        REQUESTS.add_in(&registry, &[("status", "200"), ("forge", "github")], 1.0);
        REQUESTS.add_in(&registry, &[("forge", "github"), ("status", "200")], 2.0);
        REQUESTS.add_in(&registry, &[("forge", "forgejo"), ("status", "404")], 1.0);
        TEMPERATURE.set_in(&registry, &[], 21.5);
        TEMPERATURE.set_in(&registry, &[], -3.0);
        assert_eq!(
            registry.render(),
            "# HELP test_requests_total Requests.\n\
             # TYPE test_requests_total counter\n\
             test_requests_total{forge=\"forgejo\",status=\"404\"} 1\n\
             test_requests_total{forge=\"github\",status=\"200\"} 3\n\
             # HELP test_temperature Degrees.\n\
             # TYPE test_temperature gauge\n\
             test_temperature -3\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf_sum_and_count() {
        let registry = Registry::new();
        for value in [0.0625, 0.125, 0.25, 0.75, 4.0] {
            LATENCY.observe_in(&registry, &[("kind", "plan")], value);
        }
        assert_eq!(
            registry.render(),
            "# HELP test_latency_seconds Latency.\n\
             # TYPE test_latency_seconds histogram\n\
             test_latency_seconds_bucket{kind=\"plan\",le=\"0.125\"} 2\n\
             test_latency_seconds_bucket{kind=\"plan\",le=\"0.5\"} 3\n\
             test_latency_seconds_bucket{kind=\"plan\",le=\"1\"} 4\n\
             test_latency_seconds_bucket{kind=\"plan\",le=\"+Inf\"} 5\n\
             test_latency_seconds_sum{kind=\"plan\"} 5.1875\n\
             test_latency_seconds_count{kind=\"plan\"} 5\n"
        );
    }

    #[test]
    fn a_histogram_without_labels_has_only_le() {
        let registry = Registry::new();
        LATENCY.observe_in(&registry, &[], 0.5);
        let text = registry.render();
        assert!(
            text.contains("test_latency_seconds_bucket{le=\"0.125\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("test_latency_seconds_bucket{le=\"0.5\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("test_latency_seconds_sum 0.5\n"), "{text}");
        assert!(text.contains("test_latency_seconds_count 1\n"), "{text}");
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let registry = Registry::new();
        static ODD: Counter = Counter::new("test_odd_total", "A \\ in help\nand a line.");
        ODD.add_in(&registry, &[("event", "a\"b\\c\nd")], 1.0);
        assert_eq!(
            registry.render(),
            "# HELP test_odd_total A \\\\ in help\\nand a line.\n\
             # TYPE test_odd_total counter\n\
             test_odd_total{event=\"a\\\"b\\\\c\\nd\"} 1\n"
        );
    }

    #[test]
    fn special_values_and_an_empty_registry() {
        assert_eq!(Registry::new().render(), "");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(0.0025), "0.0025");
        assert_eq!(number(5000.0), "5000");
    }

    #[test]
    fn names_follow_the_exposition_format() {
        assert!(valid_name("wavegate_queue_depth", true));
        assert!(valid_name("a:b", true));
        assert!(!valid_name("a:b", false));
        assert!(!valid_name("9lives", true));
        assert!(!valid_name("__reserved", false));
        assert!(!valid_name("with-dash", true));
    }

    #[test]
    fn concurrent_recording_loses_nothing() {
        let registry = Arc::new(Registry::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let registry = registry.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        REQUESTS.add_in(&registry, &[("forge", "github")], 1.0);
                        LATENCY.observe_in(&registry, &[], 0.25);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let text = registry.render();
        assert!(
            text.contains("test_requests_total{forge=\"github\"} 4000\n"),
            "{text}"
        );
        assert!(text.contains("test_latency_seconds_count 4000\n"), "{text}");
        assert!(text.contains("test_latency_seconds_sum 1000\n"), "{text}");
    }
}
