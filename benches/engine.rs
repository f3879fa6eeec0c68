//! Benchmarks of the plan engine, each beside a baseline measured in the same
//! run so the figures are ratios, not machine-dependent seconds:
//! - fan-out derivation, 10,000 components in a random DAG and 100,000
//!   changed paths, against sorting those paths (work any derivation must do);
//! - digesting a 10 MB plan, against SHA-256 of its raw bytes;
//! - writing numbers: digesting 100,000 doubles and 100,000 integers beyond
//!   2^53 as RFC 8785 writes them, against the same with change-set version
//!   1's number rule (the writer before RFC 8785 numbers);
//! - planning 200 members whose plan is a tiny script, against spawning the
//!   same 200 scripts directly with the same concurrency;
//! - discovering 1,400 units (a script in the sandbox walking a nested
//!   tree, its units validated and derived), against deriving the same
//!   1,400 components declared in the file, and against running the
//!   discover script directly;
//! - a one-member plan on a 30,000-file, 240 MB repository (its tree
//!   cached once, a private layer per command), against the same plan on
//!   a 10-file repository.
//!
//! `cargo bench --bench engine` prints the ratios at the end.

use criterion::{criterion_group, BatchSize, Criterion};
use sha2::Digest as _;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use wavegate::config::RepoConfig;
use wavegate::model::canonical::{digest_value_with, NumberForm};
use wavegate::model::MemberId;
use wavegate::plan::fanout::{derive, FanOutInput};
use wavegate::plan::planfile::MemberPlan;
use wavegate::sandbox::{Sandbox, SandboxSettings};

/// A small deterministic PRNG (xorshift64*), so every run measures the same input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const COMPONENTS: usize = 10_000;
const PATHS: usize = 100_000;

fn big_config(rng: &mut Rng) -> RepoConfig {
    let mut text = String::from("[defaults]\nplan = [\"./plan\", \"{plan_file}\"]\n[[stage]]\nname = \"dev\"\n[[stage]]\nname = \"prod\"\n");
    for i in 0..COMPONENTS {
        text.push_str(&format!(
            "[[component]]\nname = \"c{i:05}\"\ndir = \"infra/team{}/c{i:05}\"\n",
            i % 50
        ));
        // Edges only to lower numbers keep it a DAG; about two upstreams each.
        let deps: BTreeSet<usize> = (0..rng.below(4))
            .filter(|_| i > 0)
            .map(|_| rng.below(i as u64) as usize)
            .collect();
        if !deps.is_empty() {
            let list: Vec<String> = deps.iter().map(|d| format!("\"c{d:05}\"")).collect();
            text.push_str(&format!("depends_on = [{}]\n", list.join(", ")));
        }
    }
    RepoConfig::parse("wavegate.toml", &text).expect("the generated config is valid")
}

fn changed_paths(rng: &mut Rng) -> Vec<String> {
    (0..PATHS)
        .map(|n| {
            // Most paths fall in a few hot components, some anywhere, a few nowhere.
            match rng.below(100) {
                0..=79 => {
                    let c = rng.below(200) as usize * 37 % COMPONENTS;
                    format!(
                        "infra/team{}/c{c:05}/modules/m{}/f{n}.tf",
                        c % 50,
                        rng.below(10)
                    )
                }
                80..=97 => {
                    let c = rng.below(COMPONENTS as u64) as usize;
                    format!("infra/team{}/c{c:05}/f{n}.tf", c % 50)
                }
                _ => format!("docs/page{n}.md"),
            }
        })
        .collect()
}

fn bench_derivation(c: &mut Criterion) {
    let mut rng = Rng(0x5eed);
    let config = big_config(&mut rng);
    let paths = changed_paths(&mut rng);
    let none = BTreeSet::new();
    let mut group = c.benchmark_group("derivation");
    group.sample_size(10);
    group.bench_function("baseline: sort 100k paths", |b| {
        b.iter(|| {
            let mut sorted: Vec<&String> = paths.iter().collect();
            sorted.sort();
            sorted.dedup();
            sorted.len()
        })
    });
    group.bench_function("derive 10k components, 100k paths", |b| {
        b.iter(|| {
            derive(&FanOutInput {
                config: &config,
                changed_paths: &paths,
                config_changed: &none,
                stage: None,
            })
            .unwrap()
        })
    });
    group.finish();
}

fn ten_megabyte_plan() -> Vec<u8> {
    let mut rng = Rng(7);
    let entries: Vec<serde_json::Value> = (0..20_000)
        .map(|i| {
            serde_json::json!({
                "address": format!("module.m{}.aws_instance.r{i}", i % 97),
                "action": if i % 5 == 0 { "update" } else { "create" },
                "after": {
                    "ami": format!("ami-{:016x}", rng.next()),
                    "tags": {"Name": format!("r{i}"), "team": "infra", "cost": rng.below(1000)},
                    "user_data": "x".repeat(300 + rng.below(100) as usize),
                    "ports": [22, 80, 443, rng.below(65535)],
                    "id": null
                },
                "unknown": ["id"]
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({"summary": "big", "entries": entries})).unwrap()
}

fn bench_digest(c: &mut Criterion) {
    let bytes = ten_megabyte_plan();
    let mut group = c.benchmark_group("digest");
    group.sample_size(10);
    group.bench_function("baseline: sha256 of the raw bytes", |b| {
        b.iter(|| sha2::Sha256::digest(&bytes))
    });
    group.bench_function(
        format!(
            "parse, validate and digest a {} MB plan",
            bytes.len() / 1_000_000
        ),
        |b| {
            // As the planner does with the plan file it reads: the parse keeps
            // the bytes it was read into (their copy is set-up, outside the time).
            let member: MemberId = "app@prod".parse().unwrap();
            b.iter_batched(
                || bytes.clone(),
                |bytes| MemberPlan::parse_owned(&member, bytes).unwrap().plan_digest,
                BatchSize::LargeInput,
            )
        },
    );
    group.finish();
}

fn numbers_document() -> serde_json::Value {
    let mut rng = Rng(0x6e75);
    let doubles: Vec<f64> = (0..100_000)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 1e6)
        .collect();
    let big: Vec<u64> = (0..100_000).map(|_| rng.next() | (1 << 60)).collect();
    serde_json::json!({"doubles": doubles, "big": big})
}

fn bench_numbers(c: &mut Criterion) {
    let document = numbers_document();
    let mut group = c.benchmark_group("numbers");
    group.sample_size(20);
    group.bench_function("baseline: version 1's number rule", |b| {
        b.iter(|| digest_value_with(&document, NumberForm::Version1))
    });
    group.bench_function("RFC 8785 numbers", |b| {
        b.iter(|| digest_value_with(&document, NumberForm::Ecmascript))
    });
    group.finish();
}

const MEMBERS: usize = 200;

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.invalid")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.invalid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const PLAN_SCRIPT: &str =
    "printf '{\"entries\": [{\"address\": \"r.x\", \"action\": \"create\"}]}' > \"$1\"\n";

fn bench_planner(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let mut config = String::from("[defaults]\nplan = [\"/bin/sh\", \"{root}/plan.sh\", \"{plan_file}\"]\n[[stage]]\nname = \"dev\"\n");
    for i in 0..MEMBERS {
        config.push_str(&format!("[[component]]\nname = \"c{i}\"\ndir = \"c{i}\"\n"));
        std::fs::create_dir(repo.join(format!("c{i}"))).unwrap();
        std::fs::write(repo.join(format!("c{i}/main.tf")), "a\n").unwrap();
    }
    std::fs::write(repo.join("wavegate.toml"), config).unwrap();
    std::fs::write(repo.join("plan.sh"), PLAN_SCRIPT).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    git(&repo, &["checkout", "-q", "-b", "change"]);
    for i in 0..MEMBERS {
        std::fs::write(repo.join(format!("c{i}/main.tf")), "b\n").unwrap();
    }
    git(&repo, &["commit", "-q", "-am", "change"]);

    let concurrency = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sandbox = runtime.block_on(Sandbox::probe(SandboxSettings::default()));
    if let Some(problem) = sandbox.problem() {
        panic!("the planner runs its commands in the sandbox, which needs bubblewrap: {problem}");
    }
    let mut sandboxed =
        wavegate::plan::engine::PlanOptions::new(&repo, "main", "change", Arc::new(sandbox));
    sandboxed.concurrency = concurrency;
    sandboxed.heartbeat = None;
    let script = repo.join("plan.sh");
    let out_dir = dir.path().join("direct");
    std::fs::create_dir(&out_dir).unwrap();

    let mut group = c.benchmark_group("planner");
    group.sample_size(10);
    group.bench_function(
        format!("baseline: spawn {MEMBERS} plan scripts directly"),
        |b| {
            b.iter(|| {
                std::thread::scope(|scope| {
                    for worker in 0..concurrency {
                        let (script, out_dir) = (&script, &out_dir);
                        scope.spawn(move || {
                            for i in (worker..MEMBERS).step_by(concurrency) {
                                let status = Command::new("/bin/sh")
                                    .arg(script)
                                    .arg(out_dir.join(format!("{i}.json")))
                                    .status()
                                    .unwrap();
                                assert!(status.success());
                            }
                        });
                    }
                })
            })
        },
    );
    group.bench_function(
        format!("wavegate plans {MEMBERS} members in the sandbox"),
        |b| {
            b.iter(|| {
                let change = runtime
                    .block_on(wavegate::plan::engine::plan_change(&sandboxed))
                    .unwrap();
                assert_eq!(change.members.len(), MEMBERS);
                assert!(!change.any_failed());
            })
        },
    );
    group.finish();
}

const UNITS: usize = 1_400;

/// Walks `live/<team>/<unit>/main.tf`; each unit depends on the one before
/// it in its team, ten to a chain.
const DISCOVER_SCRIPT: &str = r#"import json, pathlib, sys
units = []
for main in sorted(pathlib.Path("live").glob("*/*/main.tf")):
    unit = main.parent
    k = int(unit.name[1:])
    deps = [f"{unit.parent}/u{k - 1:03}"] if k % 10 else []
    units.append({"path": str(unit), "dependencies": deps})
json.dump(units, open(sys.argv[1], "w"))
"#;

fn unit_dir(i: usize) -> String {
    format!("live/t{:02}/u{:03}", i / 100, i % 100)
}

/// A repository of 1,400 unit directories whose head changes every tenth,
/// as a discovering component finds them (`discovering`) or with each
/// declared in the file.
fn units_repo(root: &Path, discovering: bool) -> std::path::PathBuf {
    let repo = root.join(if discovering {
        "discovered"
    } else {
        "declared"
    });
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let mut config = String::from("[defaults]\nplan = [\"/bin/sh\", \"{root}/plan.sh\", \"{plan_file}\"]\n[[stage]]\nname = \"dev\"\n");
    if discovering {
        config.push_str("[[component]]\nname = \"live\"\ndiscover = [\"python3\", \"discover.py\", \"{units_file}\"]\n");
    }
    for i in 0..UNITS {
        let dir = unit_dir(i);
        if !discovering {
            config.push_str(&format!(
                "[[component]]\nname = \"{}\"\ndir = \"{dir}\"\n",
                dir.replace('/', ".")
            ));
            if i % 10 != 0 {
                config.push_str(&format!(
                    "depends_on = [\"{}\"]\n",
                    unit_dir(i - 1).replace('/', ".")
                ));
            }
        }
        std::fs::create_dir_all(repo.join(&dir)).unwrap();
        std::fs::write(repo.join(&dir).join("main.tf"), "a\n").unwrap();
    }
    std::fs::write(repo.join("wavegate.toml"), config).unwrap();
    std::fs::write(repo.join("discover.py"), DISCOVER_SCRIPT).unwrap();
    std::fs::write(repo.join("plan.sh"), PLAN_SCRIPT).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    git(&repo, &["checkout", "-q", "-b", "change"]);
    for i in (0..UNITS).step_by(10) {
        std::fs::write(repo.join(unit_dir(i)).join("main.tf"), "b\n").unwrap();
    }
    git(&repo, &["commit", "-q", "-am", "change"]);
    repo
}

fn bench_discovery(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sandbox = sandbox(&runtime);
    let options = |repo: &Path| plan_options(repo, &sandbox);
    let (declared, discovered) = (units_repo(dir.path(), false), units_repo(dir.path(), true));
    let (declared, discovered) = (options(&declared), options(&discovered));
    let derive = |options: &wavegate::plan::engine::PlanOptions| {
        let derivation = runtime
            .block_on(wavegate::plan::engine::derive_change(options))
            .unwrap();
        // Every tenth unit changed, and each chain of ten runs downstream of it.
        assert_eq!(derivation.member_names().len(), UNITS);
    };
    let units_file = dir.path().join("units.json");
    let checkout = dir.path().join("discovered");
    let mut group = c.benchmark_group("discovery");
    group.sample_size(10);
    group.bench_function(
        format!("baseline: derive {UNITS} declared components"),
        |b| b.iter(|| derive(&declared)),
    );
    // The interpreter the sandbox runs: the system's (a version manager's
    // shim on the host's PATH is not in the sandbox, and costs more).
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("python3");
    group.bench_function("baseline: run the discover script directly", |b| {
        b.iter(|| {
            let status = Command::new(python)
                .arg("discover.py")
                .arg(&units_file)
                .current_dir(&checkout)
                .status()
                .unwrap();
            assert!(status.success());
        })
    });
    group.bench_function(
        format!("discover and derive {UNITS} units in the sandbox"),
        |b| b.iter(|| derive(&discovered)),
    );
    group.finish();
}

/// Commits what `repo` holds as `main`, then a `change` branch that edits
/// `app/main.tf`.
fn commit_base_and_change(repo: &Path) {
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "base"]);
    git(repo, &["checkout", "-q", "-b", "change"]);
    std::fs::write(repo.join("app/main.tf"), "b\n").unwrap();
    git(repo, &["commit", "-q", "-am", "change"]);
}

/// The sandbox as production runs it; the engine's benches need bubblewrap.
fn sandbox(runtime: &tokio::runtime::Runtime) -> Arc<Sandbox> {
    let sandbox = runtime.block_on(Sandbox::probe(SandboxSettings::default()));
    if let Some(problem) = sandbox.problem() {
        panic!("the planner runs its commands in the sandbox, which needs bubblewrap: {problem}");
    }
    Arc::new(sandbox)
}

/// Options to plan `repo`'s `change` branch against `main`, quietly.
fn plan_options(repo: &Path, sandbox: &Arc<Sandbox>) -> wavegate::plan::engine::PlanOptions {
    let mut options =
        wavegate::plan::engine::PlanOptions::new(repo, "main", "change", Arc::clone(sandbox));
    options.heartbeat = None;
    options
}

/// A repository of `files` files of `size` bytes beside one component,
/// `app`, whose one file the `change` branch edits.
fn sized_repo(root: &Path, files: usize, size: usize) -> std::path::PathBuf {
    let repo = root.join(format!("repo-{files}"));
    std::fs::create_dir_all(repo.join("app")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(
        repo.join("wavegate.toml"),
        "[defaults]\nplan = [\"/bin/sh\", \"{root}/plan.sh\", \"{plan_file}\"]\n[[stage]]\nname = \"dev\"\n[[component]]\nname = \"app\"\ndir = \"app\"\n",
    )
    .unwrap();
    std::fs::write(repo.join("plan.sh"), PLAN_SCRIPT).unwrap();
    std::fs::write(repo.join("app/main.tf"), "a\n").unwrap();
    let line: String = (0..size / 64)
        .map(|i| format!("# line {i:08} of a module nobody changed\n"))
        .collect();
    for i in 0..files.saturating_sub(3) {
        let dir = repo.join(format!("modules/m{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(
            dir.join(format!("f{i:05}.tf")),
            format!("# file {i}\n{line}"),
        )
        .unwrap();
    }
    commit_base_and_change(&repo);
    repo
}

fn bench_big_repository(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sandbox = sandbox(&runtime);
    println!("sandbox: {sandbox:?}");
    let options = |repo: &Path| plan_options(repo, &sandbox);
    let small = options(&sized_repo(dir.path(), 10, 1024));
    let big = options(&sized_repo(dir.path(), 30_000, 8 * 1024));
    let plan = |options: &wavegate::plan::engine::PlanOptions| {
        let change = runtime
            .block_on(wavegate::plan::engine::plan_change(options))
            .unwrap();
        assert_eq!(change.members.len(), 1);
        assert!(!change.any_failed());
    };
    // The first plan of a commit writes its tree into the cache, once.
    let started = std::time::Instant::now();
    plan(&big);
    println!(
        "big repository: the first plan of its commit (the tree written into the cache) took {:.2} s",
        started.elapsed().as_secs_f64()
    );
    // Before the tree cache: each job wrote the whole tree for itself.
    let mut declared = wavegate::config::vars::ServerVars::from_lookup(|_| None).sandbox;
    declared.tree_cache_size = "off".to_owned();
    let copying = SandboxSettings::from_vars(&declared, &|_| None).unwrap();
    let copying = Arc::new(runtime.block_on(Sandbox::probe(copying)));
    let big_copied = plan_options(&dir.path().join("repo-30000"), &copying);
    let mut group = c.benchmark_group("big repository");
    group.sample_size(10);
    group.bench_function("baseline: plan one member of a 10-file repository", |b| {
        b.iter(|| plan(&small))
    });
    group.bench_function("plan one member of a 30,000-file, 240 MB repository", |b| {
        b.iter(|| plan(&big))
    });
    group.bench_function("the same, each job copying its tree", |b| {
        b.iter(|| plan(&big_copied))
    });
    group.finish();
}

/// A one-member repository whose plan leaves a 32 MiB binary plan in
/// `$2`: `carried` puts it beside its plan file (every file there goes back
/// through the executor seam and is kept for the member's apply), anything
/// else in its HOME (on the same disk, left behind with the job).
fn binary_plan_repo(root: &Path, name: &str, kept: &str) -> std::path::PathBuf {
    let repo = root.join(name);
    std::fs::create_dir_all(repo.join("app")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(
        repo.join("wavegate.toml"),
        format!("[defaults]\nplan = [\"/bin/sh\", \"{{root}}/plan.sh\", \"{{plan_file}}\", \"{kept}\"]\n[[stage]]\nname = \"dev\"\n[[component]]\nname = \"app\"\ndir = \"app\"\n"),
    )
    .unwrap();
    let script = format!(
        "{PLAN_SCRIPT}if [ \"$2\" = carried ]; then out=$(dirname \"$1\"); else out=$HOME; fi\nhead -c 33554432 /dev/zero > \"$out/tfplan\"\n"
    );
    std::fs::write(repo.join("plan.sh"), script).unwrap();
    std::fs::write(repo.join("app/main.tf"), "a\n").unwrap();
    commit_base_and_change(&repo);
    repo
}

/// What the executor seam costs a member whose plan leaves a large binary
/// plan for its apply: the files handed back, and kept by the server.
fn bench_executor(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sandbox = sandbox(&runtime);
    let options = |repo: &Path| plan_options(repo, &sandbox);
    let left = options(&binary_plan_repo(dir.path(), "left", "home"));
    let carried = options(&binary_plan_repo(dir.path(), "carried", "carried"));
    let plan = |options: &wavegate::plan::engine::PlanOptions| {
        let change = runtime
            .block_on(wavegate::plan::engine::plan_change(options))
            .unwrap();
        assert!(!change.any_failed());
    };
    plan(&left);
    let mut group = c.benchmark_group("executor");
    group.sample_size(10);
    group.bench_function("baseline: a 32 MiB binary plan left in HOME", |b| {
        b.iter(|| plan(&left))
    });
    group.bench_function("the same beside the plan file, carried to the apply", |b| {
        b.iter(|| plan(&carried))
    });
    group.finish();
}

/// Judging a plan of 1,000 entries with the Terraform example's Rego
/// policy (`[[policy.rego]]`, issue 39), against reading the same plan
/// file, which every plan costs anyway.
fn bench_rego(c: &mut Criterion) {
    let entries: Vec<serde_json::Value> = (0..REGO_ENTRIES)
        .map(|i| {
            serde_json::json!({
                "address": format!("aws_s3_bucket.b{i}"),
                "action": if i % 10 == 0 { "delete" } else { "update" },
                "before": {"acl": "private", "tags": {"n": i}},
                "after": {"acl": "private", "tags": {"n": i + 1}},
            })
        })
        .collect();
    let bytes = serde_json::json!({ "entries": entries })
        .to_string()
        .into_bytes();
    let member: MemberId = "storage@prod".parse().unwrap();
    let policy = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/terraform-native/repo/policy/terraform.rego"),
    )
    .unwrap();
    let policies = wavegate::plan::rego::RegoPolicies::of_files(vec![(
        "policy/terraform.rego".into(),
        policy,
    )])
    .unwrap();
    let plan = MemberPlan::parse(&member, &bytes).unwrap();
    assert_eq!(policies.judge(&plan).unwrap().len(), REGO_ENTRIES / 10);
    let mut group = c.benchmark_group("rego");
    group.sample_size(20);
    group.bench_function(
        format!("baseline: read a plan file of {REGO_ENTRIES} entries"),
        |b| b.iter(|| MemberPlan::parse(&member, &bytes).unwrap()),
    );
    group.bench_function(
        format!("judge a plan of {REGO_ENTRIES} entries with the example's Rego policy"),
        |b| b.iter(|| policies.judge(&plan).unwrap()),
    );
    group.finish();
}

const REGO_ENTRIES: usize = 1_000;

criterion_group!(
    benches,
    bench_rego,
    bench_executor,
    bench_big_repository,
    bench_derivation,
    bench_digest,
    bench_numbers,
    bench_planner,
    bench_discovery
);

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
    println!("\nratios against the baseline of the same run (mean times):");
    let mb = ten_megabyte_plan().len() / 1_000_000;
    for (group, subject, baseline) in [
        (
            "derivation",
            "derive 10k components, 100k paths".to_owned(),
            "baseline: sort 100k paths".to_owned(),
        ),
        (
            "digest",
            format!("parse, validate and digest a {mb} MB plan"),
            "baseline: sha256 of the raw bytes".to_owned(),
        ),
        (
            "numbers",
            "RFC 8785 numbers".to_owned(),
            "baseline: version 1's number rule".to_owned(),
        ),
        (
            "planner",
            format!("wavegate plans {MEMBERS} members in the sandbox"),
            format!("baseline: spawn {MEMBERS} plan scripts directly"),
        ),
        (
            "executor",
            "the same beside the plan file, carried to the apply".to_owned(),
            "baseline: a 32 MiB binary plan left in HOME".to_owned(),
        ),
        (
            "discovery",
            format!("discover and derive {UNITS} units in the sandbox"),
            format!("baseline: derive {UNITS} declared components"),
        ),
        (
            "discovery",
            format!("discover and derive {UNITS} units in the sandbox"),
            "baseline: run the discover script directly".to_owned(),
        ),
        (
            "big repository",
            "plan one member of a 30,000-file, 240 MB repository".to_owned(),
            "baseline: plan one member of a 10-file repository".to_owned(),
        ),
        (
            "rego",
            format!("judge a plan of {REGO_ENTRIES} entries with the example's Rego policy"),
            format!("baseline: read a plan file of {REGO_ENTRIES} entries"),
        ),
        (
            "big repository",
            "the same, each job copying its tree".to_owned(),
            "baseline: plan one member of a 10-file repository".to_owned(),
        ),
    ] {
        match (mean_ns(group, &subject), mean_ns(group, &baseline)) {
            (Some(s), Some(b)) => println!(
                "  {group}: {subject} = {:.1} ms, {baseline} = {:.1} ms, ratio {:.2}",
                s / 1e6,
                b / 1e6,
                s / b
            ),
            _ => println!("  {group}: no estimates found (was the benchmark filtered out?)"),
        }
    }
}
