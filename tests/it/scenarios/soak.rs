//! The soak: two replicas of the real binary on one PostgreSQL database under
//! a stream of pull requests (open, an outsider's `/approve`, push, approve,
//! merge, every gate the run asks for), each delivery sent to a random
//! replica and often redelivered to the other, while a second pull request is
//! pushed to alongside and its author comments on it every second. A third of the way in, the database goes away for
//! eight seconds (every connection dropped, new ones refused, as a server
//! stopped hard and started again looks to its clients); two thirds in, the
//! replica running a job is killed (SIGKILL) mid-apply and started again
//! three seconds later, deliveries meanwhile going to the other.
//!
//! At the end every delivery is recorded once, every approved merge applied
//! each of its members exactly once and landed in the estate, no job died,
//! no command outlived its replica, the ledger verifies, and the resident
//! memory of the replica that lived through it all is flat.
//!
//! `WAVEGATE_SOAK_SECS` sets how long the traffic runs: 60 s by default (CI);
//! the full run is `WAVEGATE_SOAK_SECS=1800 scripts/test.sh --test it
//! scenarios::soak -- --nocapture`, which prints the memory samples.

use crate::support::common::MergeMethod;
use crate::support::pr::PrHandle;
use crate::support::{self, bot::*};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::outage::DatabaseLink;
use support::RepoHandle;
use wavegate::model::JobKind;
use wavegate::store::JobStatus;

/// The PR the traffic keeps pushing to and never merges.
const BYSTANDER: u64 = 9000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_under_pr_traffic_through_a_database_restart_and_a_sigkill_lose_nothing() {
    let seconds = std::env::var("WAVEGATE_SOAK_SECS").ok().map_or(60, |s| {
        s.parse::<u64>().expect("WAVEGATE_SOAK_SECS is seconds")
    });
    let mut soak = Soak::start(Duration::from_secs(seconds)).await;

    soak.open_bystander().await;
    let outage = soak.schedule_database_restart();
    while soak.started.elapsed() < soak.duration {
        soak.one_pull_request_through_to_applied().await;
    }
    outage.await.unwrap();
    let closed = soak.bot.forge.close(&soak.repo, BYSTANDER);
    let closed = soak.pr(BYSTANDER).closed(&closed);
    soak.deliver(closed).await;
    soak.settle().await;
    soak.last_sample = None;
    soak.sample_memory();

    soak.assert_nothing_lost().await;
    soak.assert_memory_flat();
}

struct Soak {
    bot: Bot,
    link: Arc<DatabaseLink>,
    repo: RepoHandle,
    started: Instant,
    duration: Duration,
    /// Every delivery id sent, each recorded once by whichever replica took it.
    sent: BTreeSet<String>,
    merged: Vec<Merged>,
    next_pr: u64,
    bystander_pushes: u64,
    killed: bool,
    /// Sends a replica refused (503: the database was away) or never took
    /// (it was down), each then sent to the other replica.
    refused: u64,
    unreachable: u64,
    memory: Vec<Sample>,
    last_sample: Option<Instant>,
}

/// One approved, merged pull request and what its run applied.
struct Merged {
    pr: u64,
    component: &'static str,
    applied: Vec<String>,
}

/// A replica's resident memory at a moment of the run.
struct Sample {
    at: Duration,
    pid: u32,
    rss_kib: u64,
}

impl Soak {
    async fn start(duration: Duration) -> Self {
        let database = PostgresDatabase::create().await;
        let link = Arc::new(DatabaseLink::to(&database.url).await);
        let through_link = link.url_for(&database.url);
        // With the machine to itself, as in the binary it once had to
        // itself: no other scenario's server shares the cores with its
        // traffic and deadlines.
        let bot = Bot::start_replicated_alone_on(
            database,
            &[
                ("WAVEGATE_JOB_LEASE", "2s"),
                ("WAVEGATE_RECONCILE_EVERY", "20s"),
                ("WAVEGATE_DATABASE_URL", &through_link),
            ],
        )
        .await;
        let repo = bot.github_repo();
        for (who, permission) in [
            ("rev-bob", "write"),
            ("rev-carol", "write"),
            ("dev-alice", "write"),
            ("outsider-mallory", "read"),
        ] {
            bot.forge.set_permission(&repo, who, permission);
        }
        // main gets the code of every declared component (dns arrives with
        // `change`), so any PR's plan of a dependent can succeed.
        bot.example
            .merge("change", "dns's code, pushed before the soak");
        Self {
            bot,
            link,
            repo,
            started: Instant::now(),
            duration,
            sent: BTreeSet::new(),
            merged: Vec::new(),
            next_pr: 1,
            bystander_pushes: 0,
            killed: false,
            refused: 0,
            unreachable: 0,
            memory: Vec::new(),
            last_sample: None,
        }
    }

    /// Pull request `number`, to read what the bot said on it (deliveries
    /// go through `deliver`, to a random replica).
    fn pr(&self, number: u64) -> PrHandle<'_> {
        self.bot.pr(&self.repo, number)
    }

    /// A third of the way in, the database goes away for eight seconds.
    fn schedule_database_restart(&self) -> tokio::task::JoinHandle<()> {
        let link = self.link.clone();
        let at = self.duration / 3;
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            eprintln!("soak: the database goes away at {at:?} for 8 s");
            link.cut();
            tokio::time::sleep(Duration::from_secs(8)).await;
            link.restore();
        })
    }

    /// PR #9000, pushed to alongside every other PR's first plan.
    async fn open_bystander(&mut self) {
        self.bot.example.branch(
            "bystander-0",
            "main",
            &[("docs/bystander.md", Some("a change no component owns\n"))],
        );
        let pr = self.bot.open_pr(&self.repo, BYSTANDER, "bystander-0");
        self.deliver(support::github_pull_request("opened", &self.repo, &pr))
            .await;
    }

    async fn push_bystander(&mut self) {
        self.bystander_pushes += 1;
        let branch = format!("bystander-{}", self.bystander_pushes);
        let network = self.desired("main", "network", &branch);
        self.bot.example.branch(
            &branch,
            "main",
            &[("infra/network/resources.json", Some(&network))],
        );
        let pushed = self.pr(BYSTANDER).push_unheard(&branch);
        self.deliver(support::github_pull_request(
            "synchronize",
            &self.repo,
            &pushed,
        ))
        .await;
    }

    /// Open, an outsider's refused `/approve`, push (the digest moves),
    /// approve, merge, approve every gate the run asks for, applied.
    async fn one_pull_request_through_to_applied(&mut self) {
        let number = self.next_pr;
        self.next_pr += 1;
        let component = ["network", "database", "app"][usize::try_from(number % 3).unwrap()];
        let branch = format!("soak-{number}");
        let resources = format!("infra/{component}/resources.json");

        let first = self.desired("main", component, &format!("{branch}-a"));
        self.bot
            .example
            .branch(&branch, "main", &[(&resources, Some(&first))]);
        let pr = self.bot.open_pr(&self.repo, number, &branch);
        self.deliver(support::github_pull_request("opened", &self.repo, &pr))
            .await;
        self.push_bystander().await;
        self.settle().await;
        let opened_digest = self.pr(number).digest();

        self.comment(number, "outsider-mallory", "/approve").await;
        self.settle().await;
        assert_eq!(
            self.pr(number).plan_state(),
            "action_required",
            "PR #{number}: an outsider's /approve counts for nothing: {}",
            self.pr(number).report()
        );

        let second = self.desired(&branch, component, &format!("{branch}-b"));
        self.bot
            .example
            .branch(&branch, &branch, &[(&resources, Some(&second))]);
        let pushed = self.pr(number).push_unheard(&branch);
        self.deliver(support::github_pull_request(
            "synchronize",
            &self.repo,
            &pushed,
        ))
        .await;
        self.settle().await;
        let digest = self.pr(number).digest();
        assert_ne!(
            digest, opened_digest,
            "PR #{number}: the push moves the digest"
        );

        let planned = members_with_changes(&self.pr(number).report());
        self.comment(number, "rev-bob", &format!("/approve {digest}"))
            .await;
        self.settle().await;
        assert_eq!(
            self.pr(number).plan_state(),
            "success",
            "PR #{number} is approved"
        );

        let applied_before = self.bot.applies_run().len();
        let merged = self.pr(number).merge_unheard(MergeMethod::MergeCommit);
        let closed = self.pr(number).closed(&merged);
        self.deliver(closed).await;
        if !self.killed && self.started.elapsed() >= self.duration * 2 / 3 {
            self.kill_the_replica_running_a_job().await;
        }
        let merge_sha = merged.merge_sha.clone().unwrap();
        self.approve_every_gate_until_applied(number, &merge_sha)
            .await;

        let applied: Vec<String> = self.bot.applies_run()[applied_before..].to_vec();
        let once: BTreeSet<&String> = applied.iter().collect();
        assert_eq!(
            once.len(),
            applied.len(),
            "PR #{number}: a member applied twice: {applied:?}"
        );
        assert_eq!(
            once,
            planned.iter().collect(),
            "PR #{number}: what its run applied is what was planned and approved"
        );
        for stage in ["dev", "prod"] {
            let member = format!("{component}@{stage}");
            assert!(
                applied.contains(&member),
                "PR #{number}: {member} applied: {applied:?}"
            );
            let deployed =
                std::fs::read_to_string(self.bot.estate_file(stage, component, ".json")).unwrap();
            assert!(
                deployed.contains(&format!("{branch}-b")),
                "PR #{number}: {member} holds the approved change: {deployed}"
            );
        }
        self.merged.push(Merged {
            pr: number,
            component,
            applied,
        });
        self.sample_memory();
    }

    /// The component's resources at `rev` with a `soak` attribute set to
    /// `value` on its first resource (an in-place update).
    fn desired(&self, rev: &str, component: &str, value: &str) -> String {
        let path = format!("infra/{component}/resources.json");
        let mut resources: BTreeMap<String, Value> =
            serde_json::from_str(&self.bot.example.read(rev, &path)).unwrap();
        let first = resources.values_mut().next().unwrap();
        first
            .as_object_mut()
            .unwrap()
            .insert("soak".into(), Value::String(value.into()));
        serde_json::to_string_pretty(&resources).unwrap()
    }

    /// After the merge: waits for the run to finish, copying each line the
    /// bot asks to be approved (a stage's gate, a round) as `rev-carol`.
    async fn approve_every_gate_until_applied(&mut self, number: u64, merge_sha: &str) {
        let mut approved: BTreeSet<String> = BTreeSet::new();
        for _ in 0..10 {
            self.settle().await;
            let check = self
                .bot
                .check_runs_named(&self.repo, merge_sha, "wavegate/apply")
                .pop();
            match check.and_then(|c| c.conclusion).as_deref() {
                Some("success") => return,
                None | Some("action_required") => {}
                Some(other) => panic!(
                    "PR #{number}'s run ended {other}: {}",
                    self.pr(number).replies().join("\n---\n")
                ),
            }
            let asked = self
                .pr(number)
                .replies()
                .iter()
                .rev()
                .find_map(|reply| line_to_copy(reply))
                .filter(|line| !approved.contains(line));
            let Some(line) = asked else {
                continue;
            };
            approved.insert(line.clone());
            self.comment(number, "rev-carol", &line).await;
        }
        panic!(
            "PR #{number}'s run did not finish: {}",
            self.pr(number).replies().join("\n---\n")
        );
    }

    /// SIGKILL to the replica holding a running job (the merge's apply),
    /// started again three seconds on, the bystander's author commenting
    /// meanwhile.
    async fn kill_the_replica_running_a_job(&mut self) {
        self.killed = true;
        let deadline = Instant::now() + Duration::from_secs(30);
        let (victim, job) = loop {
            if let Some(running) = self.replica_running_a_job().await {
                break running;
            }
            assert!(
                Instant::now() < deadline,
                "the merge's job never ran to be killed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        eprintln!(
            "soak: SIGKILL to replica {victim}, running {job}, at {:?}",
            self.started.elapsed()
        );
        self.bot.kill_replica(victim);
        self.bot.until_no_command_survives().await;
        for _ in 0..6 {
            self.comment(BYSTANDER, "dev-alice", "Is the bot still there?")
                .await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.bot.restart_replica(victim).await;
    }

    /// The replica holding a running job, and the job's kind.
    async fn replica_running_a_job(&self) -> Option<(usize, String)> {
        let jobs = self.bot.jobs().await;
        let running = jobs.iter().find(|j| j.status == JobStatus::Running)?;
        let owner = running.lease_owner.as_deref()?;
        let replica = (0..2).find(|&r| {
            self.bot
                .pid_of(r)
                .is_some_and(|pid| owner.contains(&format!("-{pid}-")))
        })?;
        Some((replica, running.kind.to_string()))
    }

    async fn comment(&mut self, pr: u64, who: &str, body: &str) {
        let id = self.pr(pr).comment_unheard(who, body);
        self.deliver(support::github_comment(&self.repo, pr, id, who, body))
            .await;
    }

    /// Sends a delivery to a random replica, as a load balancer would, and
    /// to the other one if that one is down or refuses it (the database is
    /// away: 503), until one takes it; every other delivery is then sent
    /// again to the other replica, which must answer that it is a duplicate.
    async fn deliver(&mut self, delivery: (String, Vec<u8>)) {
        let id = format!("soak-{}", self.sent.len() + 1);
        self.sent.insert(id.clone());
        let mut replica = coin();
        let refused_before = self.refused;
        let (_, taken) = self.post_until_answered(&mut replica, &delivery, &id).await;
        // A 503's write may still land (the database was slow, not gone):
        // the retry then finds it recorded.
        if self.refused == refused_before {
            assert_ne!(taken["status"], "duplicate", "{id}: {taken}");
        }
        if self.sent.len() % 2 == 0 {
            let mut other = 1 - replica;
            let (_, again) = self.post_until_answered(&mut other, &delivery, &id).await;
            assert_eq!(again["status"], "duplicate", "{id} sent again: {again}");
        }
        self.sample_memory();
    }

    async fn post_until_answered(
        &mut self,
        replica: &mut usize,
        (event, body): &(String, Vec<u8>),
        id: &str,
    ) -> (u16, Value) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let signature = support::sign_github(GITHUB_SECRET, body);
            let sent = self
                .bot
                .http
                .post(format!(
                    "http://127.0.0.1:{}/webhooks/github",
                    self.bot.port_of(*replica)
                ))
                .header("content-type", "application/json")
                .header("x-github-event", event.as_str())
                .header("x-github-delivery", id)
                .header("x-hub-signature-256", signature)
                .timeout(Duration::from_secs(10))
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(response) => {
                    let (status, answer) = answer(response).await;
                    match status {
                        202 => return (status, answer),
                        503 => self.refused += 1,
                        _ => panic!("{id} answered {status}: {answer}"),
                    }
                }
                // A replica killed mid-request, or a pooled keep-alive
                // connection to one that died, fails the send: as GitHub
                // would, deliver it again (the other replica answers
                // `duplicate` if the write had landed).
                Err(error) if error.is_connect() || error.is_timeout() || error.is_request() => {
                    self.unreachable += 1
                }
                Err(error) => panic!("{id}: {error}"),
            }
            assert!(Instant::now() < deadline, "no replica took {id}");
            *replica = 1 - *replica;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until every job is finished, while the bystander's author
    /// chats on their PR once a second (deliveries that arrive whatever the
    /// replicas and the database are going through); the ledger verifies.
    async fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut next_chat = Instant::now() + Duration::from_secs(1);
        loop {
            let jobs = self.bot.jobs().await;
            let finished = |status: JobStatus| {
                matches!(
                    status,
                    JobStatus::Done | JobStatus::Skipped | JobStatus::Dead
                )
            };
            if jobs.iter().all(|j| finished(j.status)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "jobs still unfinished after 120 s: {jobs:#?}"
            );
            if Instant::now() >= next_chat {
                self.comment(BYSTANDER, "dev-alice", "Still looking into this.")
                    .await;
                next_chat = Instant::now() + Duration::from_secs(1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.bot.assert_ledger_verifies();
        self.sample_memory();
    }

    /// Every five seconds at most: each running replica's resident memory.
    fn sample_memory(&mut self) {
        if self
            .last_sample
            .is_some_and(|at| at.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        self.last_sample = Some(Instant::now());
        for replica in 0..2 {
            let Some(pid) = self.bot.pid_of(replica) else {
                continue;
            };
            if let Some(rss_kib) = resident_kib(pid) {
                self.memory.push(Sample {
                    at: self.started.elapsed(),
                    pid,
                    rss_kib,
                });
            }
        }
    }

    async fn assert_nothing_lost(&self) {
        let store = self.bot.store().await;
        assert_eq!(
            store.delivery_count().await.unwrap(),
            i64::try_from(self.sent.len()).unwrap(),
            "every delivery recorded once"
        );
        let jobs = self.bot.jobs().await;
        let dead: Vec<_> = jobs
            .iter()
            .filter(|j| !matches!(j.status, JobStatus::Done | JobStatus::Skipped))
            .collect();
        assert!(dead.is_empty(), "jobs that did not finish: {dead:#?}");
        let merges = jobs.iter().filter(|j| j.kind == JobKind::Merged).count();
        assert_eq!(merges, self.merged.len(), "one run per merge");
        assert!(
            self.merged.len() >= 2,
            "the soak merged {} pull requests",
            self.merged.len()
        );
        assert!(self.killed, "a replica was killed mid-run");
        assert!(self.refused > 0, "the database's absence was felt");
        let applied: usize = self.merged.iter().map(|m| m.applied.len()).sum();
        assert_eq!(
            self.bot.applies_run().len(),
            applied,
            "nothing applied outside the merges' runs, or late"
        );
        assert!(
            self.bot.survivors().is_empty(),
            "{:?}",
            self.bot.survivors()
        );
        self.bot.assert_ledger_verifies();
        eprintln!(
            "soak: {:?}, {} deliveries ({} sends refused with 503, {} to a replica that was down), {} pull requests merged and applied ({applied} member applies), {} bystander pushes",
            self.started.elapsed(),
            self.sent.len(),
            self.refused,
            self.unreachable,
            self.merged.len(),
            self.bystander_pushes
        );
        for merged in &self.merged {
            eprintln!(
                "soak: PR #{} ({}) applied {:?}",
                merged.pr, merged.component, merged.applied
            );
        }
    }

    /// The replica that lived through the whole run: its resident memory in
    /// the last third is within 1.5× (plus 32 MiB) of its peak in the first.
    fn assert_memory_flat(&self) {
        let mut by_pid: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
        for sample in &self.memory {
            by_pid.entry(sample.pid).or_default().push(sample);
        }
        for (pid, samples) in &by_pid {
            let line: Vec<String> = samples
                .iter()
                .map(|s| format!("{}s:{}MiB", s.at.as_secs(), s.rss_kib / 1024))
                .collect();
            eprintln!("soak: replica pid {pid} resident memory {}", line.join(" "));
        }
        let survivor = by_pid
            .values()
            .find(|samples| {
                samples.first().is_some_and(|s| s.at < self.duration / 10)
                    && samples.last().is_some_and(|s| s.at >= self.duration)
            })
            .expect("a replica sampled from start to end");
        let third = self.duration / 3;
        let early_peak = survivor
            .iter()
            .filter(|s| s.at < third)
            .map(|s| s.rss_kib)
            .max()
            .unwrap();
        let late_peak = survivor
            .iter()
            .filter(|s| s.at >= self.duration - third)
            .map(|s| s.rss_kib)
            .max()
            .unwrap();
        eprintln!(
            "soak: survivor's resident memory: first third peak {} MiB, last third peak {} MiB",
            early_peak / 1024,
            late_peak / 1024
        );
        assert!(
            late_peak <= early_peak * 3 / 2 + 32 * 1024,
            "resident memory grew from {early_peak} KiB to {late_peak} KiB"
        );
    }
}

/// The approval line in a reply's code block (`/approve prod sha256:…`).
fn line_to_copy(reply: &str) -> Option<String> {
    reply
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("/approve "))
        .map(str::to_owned)
}

fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The members a report's table lists as planned with changes
/// (`| `app@dev` | <why> | planned |`).
fn members_with_changes(report: &str) -> BTreeSet<String> {
    report
        .lines()
        .filter(|line| line.contains(" | planned |"))
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` | "))
        .map(|(member, _)| member.to_owned())
        .collect()
}
