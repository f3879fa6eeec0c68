//! The reconciliation sweep at scale (`cargo bench --bench sweep`): 10,000
//! open pull requests in 1,000 repositories of one GitHub installation on
//! the tests' fake forge (real HTTP, `ETag`s, 304s and GitHub's budget
//! headers), a SQLite store that knows them all as reported at their heads.
//!
//! The baseline, in the same run: what a sweep cost before it listed by
//! repository, one `GET …/pulls/{n}` and one `GET …/issues/{n}/comments?since=`
//! per pull request. Then the sweep as it is: a first sweep after a start
//! (no `ETag`s yet), a quiet one (nothing changed), and one after 1% of the
//! pull requests were pushed to and 1% got a comment. For each: forge
//! requests, how many of them the installation's budget paid for, and time.
//!
//! Knobs: `SWEEP_REPOS` (1,000), `SWEEP_PRS_PER_REPO` (10).

// The integration tests' support (the fake forge); this bench uses a part
// of it, the tests the rest.
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fake_forge::{FakeForge, RepoHandle};
use wavegate::config::settings::Settings;
use wavegate::forge::registry::Forges;
use wavegate::forge::RepoRef;
use wavegate::model::{CommitSha, ForgeKind, PrNumber};
use wavegate::store::{PrHead, PrReport, Store};
use wavegate::worker::reconcile::{Reconciler, Sweep};

const INSTALLATION: u64 = 77;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sha(seed: usize) -> String {
    format!("{seed:040x}")
}

struct Figures {
    what: &'static str,
    requests: u64,
    paid: u64,
    elapsed: Duration,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let repos = knob("SWEEP_REPOS", 1_000);
    let per_repo = knob("SWEEP_PRS_PER_REPO", 10);
    let dir = tempfile::tempdir().unwrap();
    let forge = FakeForge::start().await;
    // An hour of budget large enough that the baseline does not end the
    // window; the share a sweep may spend is figured against 5,000 below.
    forge.set_rate_window(1_000_000, Duration::from_secs(3600));
    let database = format!("sqlite://{}", dir.path().join("sweep.db").display());
    let store = Store::open(&database).await.unwrap();

    let started = Instant::now();
    let mut handles: Vec<RepoHandle> = Vec::new();
    for r in 0..repos {
        let name = format!("acme/infra-{r:04}");
        let handle = forge.add_github_repo(&name, "file:///nowhere", INSTALLATION);
        let repo = handle.repo_ref();
        store.upsert_repository(&repo).await.unwrap();
        for n in 1..=per_repo {
            let head = sha(r * 1000 + n);
            forge.open_pr(
                &handle,
                n as u64,
                &head,
                &sha(1),
                &format!("change-{n}"),
                "main",
                "dev",
            );
            record_reported(&store, &repo, n as u64, &head).await;
        }
        handles.push(handle);
    }
    println!(
        "set up {} repositories with {} open pull requests each in {:.1} s",
        repos,
        per_repo,
        started.elapsed().as_secs_f64()
    );

    let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/test-app-key.pem");
    let settings = Settings::from_lookup(|name| match name {
        "WAVEGATE_GITHUB_APP_ID" => Some(support::fake_forge::APP_ID.to_string()),
        "WAVEGATE_GITHUB_PRIVATE_KEY" => Some(key.display().to_string()),
        "WAVEGATE_GITHUB_API_URL" => Some(forge.url().to_owned()),
        "WAVEGATE_GITHUB_WEBHOOK_SECRET" => Some("bench".into()),
        "WAVEGATE_DATA_DIR" => Some(dir.path().join("data").display().to_string()),
        "WAVEGATE_DATABASE_URL" => Some(database.clone()),
        _ => None,
    })
    .unwrap();
    let forges = Arc::new(Forges::from_settings(&settings).unwrap());
    let client = forges.client(ForgeKind::GitHub).unwrap();
    let mut figures = Vec::new();

    // The baseline: a request for each pull request and one for its comments.
    let (requests, paid) = (forge.requests().len(), forge.budget_used(INSTALLATION));
    let started = Instant::now();
    for handle in &handles {
        let repo = handle.repo_ref();
        for n in 1..=per_repo {
            let number = PrNumber(n as u64);
            let since = store.comments_since(&repo.id, number).await.unwrap();
            client.pull_request_state(&repo, number).await.unwrap();
            client.comments_since(&repo, number, since).await.unwrap();
        }
    }
    figures.push(Figures {
        what: "baseline: per pull request (before)",
        requests: (forge.requests().len() - requests) as u64,
        paid: forge.budget_used(INSTALLATION) - paid,
        elapsed: started.elapsed(),
    });

    let reconciler = Reconciler::new(store.clone(), forges.clone(), Default::default(), 0.5);
    let sweep = |what: &'static str| {
        let reconciler = reconciler.clone();
        let forge = &forge;
        async move {
            let (requests, paid) = (forge.requests().len(), forge.budget_used(INSTALLATION));
            let started = Instant::now();
            let swept: Sweep = reconciler.sweep().await.unwrap();
            let elapsed = started.elapsed();
            assert_eq!(swept.errors, 0, "{swept:?}");
            println!("{what}: {swept:?}");
            Figures {
                what,
                requests: (forge.requests().len() - requests) as u64,
                paid: forge.budget_used(INSTALLATION) - paid,
                elapsed,
            }
        }
    };
    figures.push(sweep("sweep after a start (no ETags yet)").await);
    figures.push(sweep("quiet sweep (nothing changed)").await);

    // 1% of the pull requests pushed to, 1% commented on.
    let changed = (repos * per_repo / 100).max(1);
    for i in 0..changed {
        let handle = &handles[(i * 7919) % repos];
        let n = (i % per_repo) as u64 + 1;
        forge.push(handle, n, &sha(9_000_000 + i));
        forge.add_comment(handle, n, "rev-bob", "Looks right to me.");
    }
    figures.push(sweep("sweep after 1% pushed and 1% commented").await);
    figures.push(sweep("quiet sweep again").await);

    let baseline = &figures[0];
    println!();
    println!(
        "| {} repositories, {} open pull requests | requests | paid from the budget | share of 5,000/h | time | time ratio |",
        repos,
        repos * per_repo
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for f in &figures {
        println!(
            "| {} | {} | {} | {:.1}% | {:.2} s | {:.3} |",
            f.what,
            f.requests,
            f.paid,
            f.paid as f64 / 50.0,
            f.elapsed.as_secs_f64(),
            f.elapsed.as_secs_f64() / baseline.elapsed.as_secs_f64()
        );
    }
}

async fn record_reported(store: &Store, repo: &RepoRef, number: u64, head: &str) {
    let head = CommitSha::parse(head).unwrap();
    store
        .upsert_pr_head(PrHead {
            repo: repo.id.clone(),
            pr: PrNumber(number),
            head_sha: head.clone(),
            base_ref: "main".into(),
            open: true,
            pusher: None,
        })
        .await
        .unwrap();
    store
        .set_pr_report(
            &repo.id,
            PrNumber(number),
            PrReport {
                head_sha: head,
                digest: None,
                comment_id: Some(1),
                check_id: None,
                status: Some(wavegate::store::ReportStatus::AwaitingApproval),
            },
        )
        .await
        .unwrap();
}
