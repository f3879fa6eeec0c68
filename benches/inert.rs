//! What rendering a pull request's text inert costs (issue 36), beside the
//! plain interpolation it replaced, measured in the same run so the figures
//! are ratios:
//! - a command's output tail as the report shows it (30 lines, about 4,000
//!   characters of Terraform's plan output) in a fence: `untrusted::fenced`
//!   against `format!` with a fence of three backticks;
//! - 1,000 resource addresses as code spans: `untrusted::code` against
//!   `format!("`{address}`")`.
//!
//! `cargo bench --bench inert` prints the ratios at the end.

use criterion::{criterion_group, Criterion};
use std::hint::black_box;
use wavegate::model::untrusted;

fn output_tail() -> String {
    (0..30)
        .map(|i| {
            format!(
                "  # module.app.aws_instance.web[{i}] will be updated in-place\n  ~ resource \"aws_instance\" \"web\" {{ tags = {{ \"Name\" = \"web-{i}\" -> \"web-{i}-b\" }} }}"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
        .chars()
        .take(4_000)
        .collect()
}

fn addresses() -> Vec<String> {
    (0..1_000)
        .map(|i| format!("module.network[\"eu-west-1\"].aws_subnet.private[{i}]"))
        .collect()
}

fn bench_inert(c: &mut Criterion) {
    let tail = output_tail();
    let addresses = addresses();
    let mut group = c.benchmark_group("inert");
    group.bench_function("baseline: format an output tail in a fence", |b| {
        b.iter(|| format!("```text\n{}\n```", black_box(&tail)))
    });
    group.bench_function("fenced: an output tail, inert", |b| {
        b.iter(|| untrusted::fenced(black_box(&tail), "text"))
    });
    group.bench_function("baseline: format 1,000 addresses as code", |b| {
        b.iter(|| {
            black_box(&addresses)
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function("code: 1,000 addresses, inert", |b| {
        b.iter(|| {
            black_box(&addresses)
                .iter()
                .map(|a| untrusted::code(a))
                .collect::<Vec<_>>()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_inert);

/// Criterion's estimate for one benchmark (mean, nanoseconds).
fn mean_ns(name: &str) -> Option<f64> {
    let dir: String = name
        .chars()
        .map(|c| if "?\"/\\*<>:|^".contains(c) { '_' } else { c })
        .collect();
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = std::path::Path::new(&target)
        .join("criterion/inert")
        .join(dir)
        .join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    println!("\nratios against the baseline of the same run (mean times):");
    for (subject, baseline) in [
        (
            "fenced: an output tail, inert",
            "baseline: format an output tail in a fence",
        ),
        (
            "code: 1,000 addresses, inert",
            "baseline: format 1,000 addresses as code",
        ),
    ] {
        match (mean_ns(subject), mean_ns(baseline)) {
            (Some(s), Some(b)) => println!(
                "  {subject}: {:.1} µs against {:.1} µs, {:.2}×",
                s / 1e3,
                b / 1e3,
                s / b
            ),
            _ => println!("  {subject}: no estimate (run without a filter)"),
        }
    }
}
