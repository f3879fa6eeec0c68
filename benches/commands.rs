//! Reading the commands of a 60 KB review comment (`cargo bench --bench
//! commands`), beside a baseline measured in the same run so the figure is a
//! ratio, not machine-dependent seconds: the baseline walks the same body
//! line by line and counts the lines that start with `/` (the least any
//! line-based reading does).
//!
//! The comment is what a long review looks like: prose, quotes of the report,
//! fenced and indented code, a `<details>` block, HTML comments, lists, and a
//! few commands among them.

use criterion::{criterion_group, Criterion};
use std::hint::black_box;
use std::path::Path;
use wavegate::gate::commands::parse;

const TARGET_BYTES: usize = 60 * 1024;

fn review_comment() -> String {
    let unit = "Thanks, this reads well. A few notes on the plan before I approve:\n\
                \n\
                > The change set moves `aws_security_group.web` and\n\
                > /approve prod sha256:0123456789ab\n\
                continues the quote lazily here.\n\
                \n\
                ```hcl\n\
                resource \"aws_security_group\" \"web\" {\n\
                \x20 ingress { from_port = 443 }\n\
                }\n\
                /approve\n\
                ```\n\
                \n\
                - first, check the **ingress** rule\n\
                - then `/plan` again if the base moved\n\
                \n\
                <details>\n\
                <summary>Full output</summary>\n\
                \n\
                Plan: 1 to add, 2 to change, 0 to destroy.\n\
                \n\
                </details>\n\
                \n\
                \x20   indented code with /approve in it\n\
                \n\
                <!-- a note to self\n\
                /approve\n\
                -->\n\
                The rest looks right; see <https://example.invalid/runbook> and [the docs](https://example.invalid).\n\
                \n";
    let mut body = String::with_capacity(TARGET_BYTES + unit.len() + 64);
    while body.len() < TARGET_BYTES {
        body.push_str(unit);
    }
    body.push_str("/approve dev\n/plan\n");
    body
}

fn bench_commands(c: &mut Criterion) {
    let body = review_comment();
    assert_eq!(parse(&body).commands.len(), 2, "the two final commands");
    let mut group = c.benchmark_group("commands");
    group.bench_function("baseline: lines starting with /", |b| {
        b.iter(|| {
            black_box(&body)
                .lines()
                .filter(|l| l.trim_start().starts_with('/'))
                .count()
        })
    });
    group.bench_function("parse a 60 KB review comment", |b| {
        b.iter(|| parse(black_box(&body)))
    });
    group.finish();
}

criterion_group!(benches, bench_commands);

/// Reads criterion's estimate for one benchmark (mean, nanoseconds).
fn mean_ns(group: &str, name: &str) -> Option<f64> {
    // Criterion's own file-name rule: these characters become `_`.
    let dir: String = name
        .chars()
        .map(|c| if "?\"/\\*<>:|^".contains(c) { '_' } else { c })
        .collect();
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = Path::new(&target)
        .join("criterion")
        .join(group)
        .join(dir)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    println!("\nratio against the baseline of the same run (mean times):");
    let (subject, baseline) = (
        "parse a 60 KB review comment",
        "baseline: lines starting with /",
    );
    match (mean_ns("commands", subject), mean_ns("commands", baseline)) {
        (Some(s), Some(b)) => println!(
            "  commands: {subject} = {:.1} µs, {baseline} = {:.1} µs, ratio {:.1}",
            s / 1e3,
            b / 1e3,
            s / b
        ),
        _ => println!("  commands: no estimates found (was the benchmark filtered out?)"),
    }
}
