//! Pull requests that attack the bot (docs/operations.md). Each one only edits the
//! script its components' plan command already calls: `ci/plan.py` hands
//! over to `ci/attack.py` (tests/it/support/attack.py), which tries what
//! `ci/attack.json` names (the server's pid, ports and paths baked in, as an
//! attacker who looked would have them), prints whatever it took, smuggles
//! it hex-encoded into the plan's summary and then writes a valid plan, so
//! the rest of the flow goes on.
//!
//! Nothing here believes the script. Every attack is judged from outside
//! the sandbox: what the bot posted to the forge and wrote to its log, the
//! ledger, the check, the processes on the host, the files the attack aimed
//! at, listeners the test holds. The one test with the sandbox off is the
//! test of the opt-out itself: a server set to `WAVEGATE_SANDBOX=none` says
//! so in its log and every report, and the same attacks get through there,
//! so the attacks are real and these checks can fail.

use crate::support::pr::*;
use crate::support::redact::redact;
use crate::support::{self, bot::*};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::fake_forge::FORGEJO_BOT_TOKEN;
use support::RepoHandle;
use wavegate::gate::ledger::{FactKind, Source};

const ATTACK_SCRIPT: &str = include_str!("../support/attack.py");

/// Planted in the server's HOME: what a careless host keeps there.
const GIT_CREDENTIALS: &str = "https://x-access-token:home-credential-0f1e2d@github.com\n";
const AWS_CREDENTIALS: &str = "[default]\naws_secret_access_key = home-aws-secret-3c4b5a\n";
/// Planted in the data dir: another repository's mirror, and this one's.
const OTHER_MIRROR_SECRET: &str = "another-repositorys-mirror-holds-9e8d7c";
const MIRROR_SECRET: &str = "this-repositorys-mirror-holds-6f5e4d";
/// In the holding pull request's tree only.
const HOLDER_SECRET: &str = "the-holding-jobs-tree-holds-1a2b3c";
/// In a file the server inherited a descriptor of (`INHERITED_FD`).
const INHERITED_SECRET: &str = "a-descriptor-the-server-inherited-5e4f3a";
const INHERITED_FD: i32 = 900;
/// In the server's environment; the head's `env` asks for it.
const SERVER_AWS_SECRET: &str = "sekrit-only-the-server-has-7d6c5b";

/// An unlinked file holding `INHERITED_SECRET`, for the server to inherit
/// as descriptor `INHERITED_FD` (`Bot::start_inheriting`), as a server
/// inherits whatever its supervisor left open. Only this test's server gets
/// it: the other scenarios in this binary start theirs without.
fn a_descriptor_to_leave_open() -> std::fs::File {
    let path =
        std::env::temp_dir().join(format!("wavegate-attacks-inherited-{}", std::process::id()));
    std::fs::write(&path, INHERITED_SECRET).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    file
}

/// A global kernel setting whose change harms nothing (printk's rate limit).
const PRINTK_RATELIMIT: &str = "/proc/sys/kernel/printk_ratelimit";

/// The host's TLS private keys, where distributions keep them (those this
/// test may read).
fn host_private_keys() -> Vec<(PathBuf, Vec<u8>)> {
    [
        "/etc/ssl/private",
        "/etc/pki/tls/private",
        "/etc/pki/CA/private",
    ]
    .iter()
    .filter_map(|dir| std::fs::read_dir(dir).ok())
    .flat_map(|entries| entries.flatten())
    .filter_map(|e| Some((e.path(), std::fs::read(e.path()).ok()?)))
    .collect()
}

/// Where things are on the host, as an attacker would learn them.
struct Host {
    server_pid: u32,
    forge_port: u16,
    key: PathBuf,
    home: PathBuf,
    data: PathBuf,
    database: PathBuf,
    mirror: PathBuf,
    other_mirror: PathBuf,
    /// What a planted hook would write, should it ever run.
    hook_marker: PathBuf,
    /// In the command line of every daemon the attack starts.
    daemon_marker: String,
    estate: PathBuf,
}

impl Host {
    fn of(bot: &Bot) -> Self {
        let home = bot.dir.path().to_owned();
        let data = home.join("data");
        let forge_port = bot
            .forge
            .url()
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .expect("the fake forge listens on a port");
        Self {
            server_pid: bot.pid_of(0).expect("the server runs"),
            forge_port,
            key: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/test-app-key.pem"),
            database: home.join("wavegate.db"),
            mirror: data.join("mirrors/github/acme/infra.git"),
            other_mirror: data.join("mirrors/github/acme/private.git"),
            hook_marker: home.join("a-planted-hook-ran"),
            daemon_marker: format!("wavegate-attack-daemon-{}", bot.port),
            estate: bot.example.estate.clone(),
            data,
            home,
        }
    }

    /// Credentials in the server's HOME and another repository's mirror in its data dir.
    fn plant_secrets(&self) {
        std::fs::write(self.home.join(".git-credentials"), GIT_CREDENTIALS).unwrap();
        std::fs::create_dir_all(self.home.join(".aws")).unwrap();
        std::fs::write(self.home.join(".aws/credentials"), AWS_CREDENTIALS).unwrap();
        std::fs::create_dir_all(&self.other_mirror).unwrap();
        std::fs::write(self.other_mirror.join("secret"), OTHER_MIRROR_SECRET).unwrap();
    }

    /// A secret in this repository's mirror (there once the first job fetched).
    fn plant_mirror_secret(&self) {
        std::fs::write(self.mirror.join("description"), MIRROR_SECRET).unwrap();
    }

    fn key_text(&self) -> Vec<u8> {
        std::fs::read(&self.key).unwrap()
    }

    /// The files the attack reads, by the names it reports them under.
    fn readable(&self) -> Value {
        json!({
            "app-key": self.key,
            "git-credentials": self.home.join(".git-credentials"),
            "aws-credentials": self.home.join(".aws/credentials"),
            "database": self.database,
            "mirror": self.mirror.join("description"),
            "other-mirror": self.other_mirror.join("secret"),
        })
    }

    /// Running processes whose command line carries the daemon marker.
    fn daemons(&self) -> Vec<String> {
        processes_carrying(&self.daemon_marker)
    }

    /// Hooks git would run in the mirror (`git init` leaves only `*.sample`).
    fn active_hooks(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.mirror.join("hooks")) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| !name.ends_with(".sample"))
            .collect()
    }

    fn mirror_config(&self) -> String {
        std::fs::read_to_string(self.mirror.join("config")).unwrap_or_default()
    }
}

/// The files of an attacking commit on `from`: its `ci/plan.py` handing over
/// to `ci/attack.py`, told what to try by `config` as `ci/attack.json`.
fn attack_files(bot: &Bot, from: &str, config: &Value) -> Vec<(String, String)> {
    let plan = bot.example.read(from, "ci/plan.py");
    let tail = "if __name__ == \"__main__\":\n    main(sys.argv)\n";
    assert!(plan.ends_with(tail), "ci/plan.py ends by calling main");
    let plan = plan.replace(
        tail,
        "if __name__ == \"__main__\":\n    import attack\n    attack.plan(main, sys.argv)\n",
    );
    vec![
        ("ci/plan.py".into(), plan),
        ("ci/attack.py".into(), ATTACK_SCRIPT.into()),
        (
            "ci/attack.json".into(),
            serde_json::to_string_pretty(config).unwrap(),
        ),
    ]
}

/// Commits `files` and symbolic links `links` (path → target) on a new
/// branch `name` made from `from`.
fn commit(bot: &Bot, name: &str, from: &str, files: &[(String, String)], links: &[(&str, &str)]) {
    let git = |args: &[&str]| {
        let out = bot.example.git(args);
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["checkout", "-q", "-B", name, from]);
    let repo = &bot.example.repo;
    for (path, content) in files {
        let full = repo.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    for (path, target) in links {
        std::os::unix::fs::symlink(target, repo.join(path)).unwrap();
    }
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", name]);
    git(&["checkout", "-q", "--detach", "main"]);
}

/// Opens PR `number` from `branch` and delivers it, without waiting for the
/// bot to settle (another pull request's plan may be holding on).
async fn open_unsettled<'b>(
    bot: &'b Bot,
    repo: &RepoHandle,
    number: u64,
    branch: &str,
) -> PrHandle<'b> {
    let pr = bot.open_pr(repo, number, branch);
    let (status, body) = bot
        .deliver_github(support::github_pull_request("opened", repo, &pr))
        .await;
    assert_eq!(status, 202, "{body}");
    bot.pr(repo, number)
}

/// Everything the bot said: every request it made to the forge (comments,
/// check runs, their bodies) and its own log, which carries each command's
/// output.
fn everything_said(bot: &Bot) -> String {
    let mut said = bot.log();
    for request in bot.forge.requests() {
        said.push_str(&format!(
            "\n{} {} {} {}",
            request.method,
            request.path,
            request.query.unwrap_or_default(),
            request.body.map(|b| b.to_string()).unwrap_or_default()
        ));
    }
    said
}

/// How the attack smuggles what it took (and so what must not be in it).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Every check that failed, so one run shows every attack that got through.
#[derive(Default)]
struct Verdict {
    failed: Vec<String>,
}

impl Verdict {
    /// `attack` was blocked when `held`; `evidence` says what got through otherwise.
    fn blocked(&mut self, attack: &str, held: bool, evidence: impl FnOnce() -> String) {
        if !held {
            self.failed.push(format!("{attack}: {}", evidence()));
        }
    }

    /// `secret` is in nothing the bot said: not as text, not hex-encoded.
    fn not_leaked(&mut self, attack: &str, said: &str, secret: &[u8]) {
        let text = String::from_utf8_lossy(secret);
        let leaked = said.contains(&hex(secret)) || said.contains(text.as_ref());
        self.blocked(attack, !leaked, || {
            format!("`{text}` reached the forge or the log")
        });
    }

    /// `name` is in nothing the attack smuggled (hex-encoded): for names
    /// the bot itself may well say in plain text, such as a path.
    fn not_smuggled(&mut self, attack: &str, said: &str, name: &[u8]) {
        self.blocked(attack, !said.contains(&hex(name)), || {
            format!("`{}` was smuggled out", String::from_utf8_lossy(name))
        });
    }

    /// A file's sha256 (what the attack reports for each file it read) is in nothing the bot said.
    fn file_not_leaked(&mut self, attack: &str, said: &str, content: &[u8]) {
        let digest = sha256_hex(content);
        self.blocked(attack, !said.contains(&digest), || {
            format!("the file's sha256 {digest} reached the forge or the log")
        });
    }

    fn assert_all_blocked(self) {
        assert!(
            self.failed.is_empty(),
            "{} attack(s) got through:\n  {}",
            self.failed.len(),
            self.failed.join("\n  ")
        );
    }
}

/// A listener the test holds; it counts every connection made to it.
struct Tripwire {
    hits: Arc<AtomicUsize>,
}

impl Tripwire {
    /// A TCP listener on `addr` (port 0: any), and the address it got;
    /// `None` where the host cannot listen there.
    async fn tcp(addr: SocketAddr) -> Option<(Self, SocketAddr)> {
        let listener = tokio::net::TcpListener::bind(addr).await.ok()?;
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Some((Self { hits }, addr))
    }

    /// An abstract unix socket: reachable from any process in the host's
    /// network namespace, whatever its mounts.
    fn unix(name: &str) -> Self {
        use std::os::linux::net::SocketAddrExt as _;
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
        let listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::UnixListener::from_std(listener).unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The host's own addresses other than loopback, IPv6 link-local ones
/// included, each with how a program names it (`fe80::1%eth0`).
fn host_addresses() -> Vec<(SocketAddr, String)> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, walked read-only and freed once.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            let name = std::ffi::CStr::from_ptr((*at).ifa_name).to_string_lossy();
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(addr as *const libc::sockaddr_in);
                        let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
                        found.push((SocketAddr::new(ip.into(), 0), ip.to_string()));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(addr as *const libc::sockaddr_in6);
                        let ip = std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr);
                        let scope = v6.sin6_scope_id;
                        let named = if scope != 0 {
                            format!("{ip}%{name}")
                        } else {
                            ip.to_string()
                        };
                        found.push((std::net::SocketAddrV6::new(ip, 0, 0, scope).into(), named));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found.retain(|(addr, _)| !addr.ip().is_loopback());
    found
}

/// The listeners a network attack aims at, and the targets it is given.
struct Listeners {
    /// Each with the address the attack is given: 127.0.0.1, ::1 and every
    /// address of the host's own.
    tcp: Vec<(Tripwire, SocketAddr, String)>,
    unix: Tripwire,
    unix_name: String,
}

impl Listeners {
    async fn start(bot: &Bot) -> Self {
        let unix_name = format!("wavegate-attack-tripwire-{}", bot.port);
        let mut addresses = vec![
            (
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                "127.0.0.1".to_owned(),
            ),
            (
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0)),
                "::1".to_owned(),
            ),
        ];
        addresses.extend(host_addresses());
        let mut tcp = Vec::new();
        for (addr, named) in addresses {
            if let Some((tripwire, bound)) = Tripwire::tcp(addr).await {
                tcp.push((tripwire, bound, named));
            }
        }
        Self {
            tcp,
            unix: Tripwire::unix(&unix_name),
            unix_name,
        }
    }

    /// The one on 127.0.0.1.
    fn loopback(&self) -> &Tripwire {
        &self.tcp[0].0
    }

    /// What the attack connects to: the bot, the forge and the tripwires.
    fn targets(&self, bot: &Bot, host: &Host) -> Value {
        let mut targets = vec![
            json!({"name": "bot", "host": "127.0.0.1", "port": bot.port,
                   "send": "POST /webhooks/github HTTP/1.1\r\nhost: 127.0.0.1\r\nx-github-event: pull_request\r\nx-github-delivery: attack\r\nx-hub-signature-256: sha256=00\r\ncontent-length: 2\r\n\r\n{}"}),
            json!({"name": "forge", "host": "127.0.0.1", "port": host.forge_port,
                   "send": "GET /attack-probe HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"}),
            json!({"name": "tripwire-by-name", "host": "localhost", "port": self.tcp[0].1.port()}),
            json!({"name": "tripwire-unix", "unix": self.unix_name}),
        ];
        for (_, addr, named) in &self.tcp {
            targets.push(json!({"name": format!("tripwire {named}"), "host": named,
                                "port": addr.port()}));
        }
        Value::Array(targets)
    }

    /// Every connection any of them saw, by address.
    fn hits(&self) -> Vec<String> {
        let mut hits: Vec<String> = self
            .tcp
            .iter()
            .filter(|(t, _, _)| t.hits() > 0)
            .map(|(t, _, named)| format!("{named}: {}", t.hits()))
            .collect();
        if self.unix.hits() > 0 {
            hits.push(format!("@{}: {}", self.unix_name, self.unix.hits()));
        }
        hits
    }
}

/// Deliveries the server refused for their signature (the attack's forged
/// one among them, had it reached the server).
async fn unsigned_deliveries(bot: &Bot) -> f64 {
    let metrics = bot
        .http
        .get(bot.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .filter(|l| l.starts_with("wavegate_deliveries_total{") && l.contains("unauthorized"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Requests the forge got that the bot would never make.
fn probes_at_the_forge(bot: &Bot) -> Vec<String> {
    bot.forge
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("attack"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// Every file under `dir` with its content and mode.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
                files.insert(entry.path(), (std::fs::read(entry.path()).unwrap(), mode));
            }
        }
    }
    files
}

fn changed_files(
    before: &BTreeMap<PathBuf, (Vec<u8>, u32)>,
    after: &BTreeMap<PathBuf, (Vec<u8>, u32)>,
) -> Vec<String> {
    let paths: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter(|path| before.get(*path) != after.get(*path))
        .map(|path| path.display().to_string())
        .collect()
}

/// Host processes whose command line contains `marker`.
fn processes_carrying(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(marker)
                .then(|| format!("{pid}: {cmdline}"))
        })
        .collect()
}

/// The job directories (`wavegate-job-*`) in the host's temp dir.
fn job_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("wavegate-job-"))
        })
        .collect()
}

/// What `script` prints, run by `sh` as `nobody` (uid 65534), an unprivileged
/// user of the host; `None` where this test is not root and cannot be
/// someone else.
fn as_another_user(script: &str) -> Option<String> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let output = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    Some(format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// `wavegate/plan`'s conclusion on the pull request's head, once it has one.
fn plan_check(pr: &PrHandle) -> Option<String> {
    pr.bot
        .check_runs_named(&pr.repo, &pr.head(), "wavegate/plan")
        .pop()
        .and_then(|c| c.conclusion)
}

/// The attack went through every one of `attacks` and its plan was posted
/// (its last line is in the summary the bot posted): what follows is never
/// judged on an attack that did not run.
fn assert_attack_ran(report: &str, attacks: &[&str]) {
    assert!(
        report.contains(&format!("attacks done: {}", attacks.join(", "))),
        "the attack ran to its end and its plan was posted: {report}"
    );
}

/// The id the forged approval names: nobody's, which is the point (the
/// ledger counts an approval per actor id; it does not ask the forge).
const FORGED_APPROVER: u64 = 990_002;

/// Pushes onto the pull request (planned from `change`, its report showing
/// `digest`) a commit that only turns `ci/plan.py` into the attack
/// `attacks`, aimed at what `host` and `listeners` hold, and settles.
/// Pushes a harmless edit of `ci/plan.py` onto `change`: like any change to
/// the script every member's commands run, it plans every member. The
/// attack's push after it (another edit of that script, whose plans are
/// the same) binds the digest this returns.
async fn touch_plan_script(pr: &mut PrHandle<'_>) -> String {
    let (bot, number) = (pr.bot, pr.number);
    let plan = bot.example.read("change", "ci/plan.py");
    let touched = plan.replacen('\n', "\n# touched: every member plans again\n", 1);
    let branch = format!("touched-{number}");
    commit(
        bot,
        &branch,
        "change",
        &[("ci/plan.py".into(), touched)],
        &[],
    );
    pr.push(&branch).await;
    pr.digest()
}

async fn push_attack(
    pr: &mut PrHandle<'_>,
    attacks: &[&str],
    host: &Host,
    listeners: &Listeners,
    digest: &str,
) {
    let (bot, number) = (pr.bot, pr.number);
    let touched = format!("touched-{number}");
    let config = json!({
        "members": {"app@dev": {}},
        "attacks": attacks,
        "server_pid": host.server_pid,
        "read": host.readable(),
        "list": {"home": host.home, "data": host.data},
        "database": host.database,
        "forge_approval": {
            "repo": "github:acme/infra", "number": number, "digest": digest,
            "actor": {"id": FORGED_APPROVER, "login": "rev-bob"},
        },
        "connect": listeners.targets(bot, host),
        "daemon_marker": host.daemon_marker,
        "mirror": host.mirror,
        "hook_marker": host.hook_marker,
        "estate": host.estate,
    });
    let branch = format!("attack-{number}");
    commit(
        bot,
        &branch,
        &touched,
        &attack_files(bot, &touched, &config),
        &[],
    );
    pr.push(&branch).await;
}

/// A PR whose plan goes after everything the server holds: its
/// environment, memory and every command line, a descriptor it inherited,
/// what only root may touch (a global kernel setting, through the plan's
/// /proc and through one of its own in a nested namespace; the host's TLS
/// private keys) (1); the App key, the server's HOME, the data dir and its
/// mirrors (2); the SQLite store, read, and an approval appended chained
/// like the bot's (3); loopback and host services (5); daemons (6); hooks in
/// the mirror (7); the estate, written and remounted writable (10). It is
/// pushed onto a PR already planned and only `ci/` changes, so its plan
/// binds the same digest: a forged approval of that digest would turn the
/// check green. Afterwards nothing the bot posted or logged holds anything
/// it took, the kernel setting is as it was, the ledger verifies and holds
/// only the bot's own facts, the check waits for an approval, no process of
/// the plan is left, no hook appears or runs on later fetches, the estate
/// is as it was, and no listener saw a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_goes_after_the_servers_secrets_gets_none_of_them() {
    let bot = Bot::start_inheriting(a_descriptor_to_leave_open(), INHERITED_FD).await;
    let host = Host::of(&bot);
    host.plant_secrets();
    let listeners = Listeners::start(&bot).await;
    let mut pr = planned_pr(&bot, 31).await;
    let digest = touch_plan_script(&mut pr).await;
    host.plant_mirror_secret();
    let ratelimit = std::fs::read_to_string(PRINTK_RATELIMIT).unwrap();
    let estate_before = snapshot(&host.estate);
    let attacks = [
        "processes",
        "server_environ",
        "server_memory",
        "descriptors",
        "host_keys",
        "kernel",
        "files",
        "listings",
        "ledger",
        "connections",
        "daemons",
        "hooks",
        "estate",
    ];
    push_attack(&mut pr, &attacks, &host, &listeners, &digest).await;
    // The kernel setting, put back at once should the attack have changed it.
    let ratelimit_now = std::fs::read_to_string(PRINTK_RATELIMIT).unwrap();
    if ratelimit_now != ratelimit {
        std::fs::write(PRINTK_RATELIMIT, &ratelimit).unwrap();
    }

    let report = pr.report();
    assert_attack_ran(&report, &attacks);
    assert_eq!(
        digest_in(&report),
        digest,
        "only ci/ changed: the attack's plan binds the digest a forged approval names"
    );
    let said = everything_said(&bot);
    let mut verdict = Verdict::default();

    // 1. The server's environment and memory, and every command line.
    for (what, secret) in [
        ("webhook secret", GITHUB_SECRET),
        ("Forgejo webhook secret", FORGEJO_SECRET),
        ("Forgejo token", FORGEJO_BOT_TOKEN),
    ] {
        verdict.not_leaked(
            &format!("1 /proc/<server>/environ and /mem: the server's {what}"),
            &said,
            secret.as_bytes(),
        );
    }
    verdict.not_leaked(
        "1 /proc/*/cmdline: the server's command line",
        &said,
        b"wavegate\0serve",
    );

    // 1. What only root may touch: a global kernel setting, the host's
    // private keys.
    verdict.blocked(
        "1 /proc/sys: a global kernel setting written",
        ratelimit_now == ratelimit,
        || format!("{PRINTK_RATELIMIT} went from {ratelimit:?} to {ratelimit_now:?}"),
    );
    for (path, content) in host_private_keys() {
        verdict.file_not_leaked(
            &format!("1 the host's private key {}", path.display()),
            &said,
            &content,
        );
    }

    // 2. The App key, the server's HOME, the data dir.
    let key = host.key_text();
    verdict.not_leaked("2 the App key's text", &said, &key[32..96]);
    verdict.file_not_leaked("2 the App key", &said, &key);
    verdict.not_leaked(
        "2 HOME/.git-credentials",
        &said,
        GIT_CREDENTIALS.trim().as_bytes(),
    );
    verdict.not_leaked("2 HOME/.aws/credentials", &said, b"home-aws-secret-3c4b5a");
    verdict.not_smuggled("2 HOME listed", &said, b".git-credentials");
    verdict.not_leaked(
        "2 data dir: this repository's mirror",
        &said,
        MIRROR_SECRET.as_bytes(),
    );
    verdict.not_leaked(
        "2 data dir: another repository's mirror",
        &said,
        OTHER_MIRROR_SECRET.as_bytes(),
    );
    verdict.not_smuggled("2 data dir listed", &said, b"private.git");
    verdict.not_leaked(
        "1/2 a descriptor the server inherited",
        &said,
        INHERITED_SECRET.as_bytes(),
    );

    // 3. The store: nothing read, nothing appended, the check not green.
    verdict.not_leaked("3 the SQLite file read", &said, b"SQLite format 3");
    bot.assert_ledger_verifies();
    let facts = bot
        .store()
        .await
        .repo_facts("github:acme/infra")
        .await
        .unwrap();
    let foreign: Vec<String> = facts
        .iter()
        .filter(|f| f.fact.kind == FactKind::Approved || f.fact.source != Source::Wavegate)
        .map(|f| format!("{} {} by {}", f.seq, f.fact.kind, f.fact.actor.login))
        .collect();
    verdict.blocked(
        "3 the ledger holds only the bot's own facts (nobody approved)",
        foreign.is_empty(),
        || format!("{foreign:?}"),
    );
    let check = plan_check(&pr);
    verdict.blocked(
        "3 wavegate/plan still waits for an approval",
        check.as_deref() == Some("action_required"),
        || format!("the check concluded {check:?}"),
    );

    // 5. Loopback and the host: the bot, the forge, the test's listeners.
    let hits = listeners.hits();
    verdict.blocked(
        "5 the test's listeners (127.0.0.1, ::1, the host's addresses, an abstract unix socket)",
        hits.is_empty(),
        || format!("connections: {hits:?}"),
    );
    let probes = probes_at_the_forge(&bot);
    verdict.blocked("5 the fake forge's port", probes.is_empty(), || {
        format!("it was asked {probes:?}")
    });
    let unsigned = unsigned_deliveries(&bot).await;
    verdict.blocked("5 the bot's own port", unsigned == 0.0, || {
        format!("it refused {unsigned} unsigned deliveries")
    });

    // 6. Nothing the plan started outlived it.
    let survivors = bot.survivors();
    verdict.blocked(
        "6 daemons: no command of the plan survives",
        survivors.is_empty(),
        || format!("{survivors:?}"),
    );
    let daemons = host.daemons();
    verdict.blocked(
        "6 daemons: none runs, even without the estate in its environment",
        daemons.is_empty(),
        || format!("{daemons:?}"),
    );

    // 10. The estate is as it was before the plan.
    let changed = changed_files(&estate_before, &snapshot(&host.estate));
    verdict.blocked("10 the estate", changed.is_empty(), || {
        format!("a plan changed {changed:?}")
    });

    // 7. No hook in the mirror, and none runs when the server's git fetches again.
    let hooks = host.active_hooks();
    verdict.blocked("7 hooks planted in the mirror", hooks.is_empty(), || {
        format!("{hooks:?}")
    });
    let config = host.mirror_config();
    verdict.blocked(
        "7 the mirror's config",
        !config.contains("hooksPath"),
        || config.clone(),
    );
    bot.branch_bigger_app("attack-2");
    pr.push("attack-2").await;
    verdict.blocked(
        "7 a planted hook ran on a later fetch",
        !host.hook_marker.exists(),
        || std::fs::read_to_string(&host.hook_marker).unwrap_or_default(),
    );
    verdict.assert_all_blocked();
}

/// A PR that goes after the server process itself: its head's
/// `wavegate.toml` asks for a variable only the server has (9), and its plan
/// signals the server (TERM and KILL, by its pid) and then everyone it may
/// (`kill -9 -1`) (11). The plan never gets the variable and the report
/// says the list is read from the base branch; the same server goes on
/// answering, never starts shutting down, and reports the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_widens_its_env_and_signals_the_server_gets_neither() {
    let mut bot = Bot::start_with(&[("AWS_SECRET_ACCESS_KEY", SERVER_AWS_SECRET)]).await;
    let host = Host::of(&bot);
    let repo = bot.github_repo();
    let config = json!({
        "members": {
            "app@prod": {"attacks": ["environment"]},
            "app@dev": {"attacks": ["signals"]},
        },
        "attacks": [],
        "server_pid": host.server_pid,
    });
    let mut files = attack_files(&bot, "change", &config);
    let toml = bot.example.read("change", "wavegate.toml");
    let base_env = "env = [\"ESTATE_DIR\"]";
    assert!(toml.contains(base_env));
    files.push((
        "wavegate.toml".into(),
        toml.replace(
            base_env,
            "env = [\"ESTATE_DIR\", \"AWS_SECRET_ACCESS_KEY\"]",
        ),
    ));
    commit(&bot, "greedy", "change", &files, &[]);
    let report = bot.opened(&repo, 32, "greedy").await.report();
    assert_attack_ran(&report, &["environment"]);
    assert!(
        report.contains("attack signals: kill -9 -1"),
        "the plan sent its signals: {report}"
    );
    let said = everything_said(&bot);
    let mut verdict = Verdict::default();

    // 9. The head's env list is not the one that counts.
    verdict.not_leaked(
        "9 a variable the head's env asks for",
        &said,
        SERVER_AWS_SECRET.as_bytes(),
    );
    verdict.blocked(
        "9 the report says the list is read from the base branch",
        report.contains("`AWS_SECRET_ACCESS_KEY`")
            && report.contains("the list is read from the base branch"),
        || report.clone(),
    );

    // 11. The server is the one that was started, and it still answers.
    let server = bot.server.as_mut().expect("the server was started");
    let exited = server.try_wait().unwrap();
    verdict.blocked(
        "11 the server was signalled to death",
        exited.is_none(),
        || format!("it exited: {exited:?}"),
    );
    let health = bot.http.get(bot.url("/healthz")).send().await;
    verdict.blocked(
        "11 the server answers /healthz",
        health.as_ref().is_ok_and(|r| r.status() == 200),
        || format!("{health:?}"),
    );
    verdict.blocked(
        "11 the server never began shutting down",
        !bot.log().contains("shutting down"),
        || "its log says it is shutting down".into(),
    );
    verdict.assert_all_blocked();
}

/// A PR whose plans leave their plan file as a link to a host file (app@dev:
/// the App key; app@prod: the server's `~/.git-credentials`), and whose
/// config adds two components whose directories are committed as links out
/// of the tree (`infra/escape-etc -> /etc`, `infra/escape-up -> ../../..`)
/// (8). Each of those members fails saying why: the plan file is a symbolic
/// link; the component's directory leaves the repository. Nothing of the
/// linked files is in anything the bot said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_files_and_component_dirs_linked_out_of_the_tree_fail_and_show_nothing() {
    let bot = Bot::start().await;
    let host = Host::of(&bot);
    host.plant_secrets();
    let repo = bot.github_repo();
    let config = json!({
        "members": {
            "app@dev": {"plan_file_link": host.key},
            "app@prod": {"plan_file_link": host.home.join(".git-credentials")},
        },
        "attacks": ["plan_file_link"],
    });
    let mut files = attack_files(&bot, "change", &config);
    let toml = bot.example.read("change", "wavegate.toml");
    files.push((
        "wavegate.toml".into(),
        format!(
            "{toml}\n[[component]]\nname = \"escape-etc\"\ndir = \"infra/escape-etc\"\nstages = [\"dev\"]\n\n\
             [[component]]\nname = \"escape-up\"\ndir = \"infra/escape-up\"\nstages = [\"dev\"]\n"
        ),
    ));
    commit(
        &bot,
        "links",
        "change",
        &files,
        &[
            ("infra/escape-etc", "/etc"),
            ("infra/escape-up", "../../.."),
        ],
    );
    let pr = bot.opened(&repo, 33, "links").await;
    let report = pr.report();
    let said = everything_said(&bot);
    let member_error = |member: &str| -> String {
        let at = report
            .find(&format!("<code>{member}</code> — plan failed"))
            .unwrap_or_else(|| panic!("{member} failed to plan: {report}"));
        report[at..].split("</details>").next().unwrap().to_owned()
    };
    let mut verdict = Verdict::default();
    for member in ["app@dev", "app@prod"] {
        let error = member_error(member);
        verdict.blocked(
            &format!("8 {member}'s plan file, a link, is refused as one"),
            error.contains("symbolic link"),
            || error.clone(),
        );
    }
    let key = host.key_text();
    verdict.not_leaked(
        "8 the App key through a linked plan file",
        &said,
        &key[32..96],
    );
    verdict.file_not_leaked("8 the App key through a linked plan file", &said, &key);
    verdict.not_leaked(
        "8 ~/.git-credentials through a linked plan file",
        &said,
        GIT_CREDENTIALS.trim().as_bytes(),
    );
    for component in ["escape-etc", "escape-up"] {
        let error = member_error(&format!("{component}@dev"));
        verdict.blocked(
            &format!("8 {component}'s directory, a link out of the tree, is refused"),
            error.contains(&format!("of component {component} leaves the repository")),
            || error.clone(),
        );
    }
    verdict.blocked(
        "8 the check fails",
        plan_check(&pr).as_deref() == Some("failure"),
        || format!("{:?}", plan_check(&pr)),
    );
    verdict.assert_all_blocked();
}

/// Two pull requests plan at once (4, 12). The holder's app@dev plan reads
/// the App key, starts daemons, plants hooks in the mirror, leaves a
/// set-user-id copy of `id` in its tree and then holds its tree until it is
/// killed at its timeout (10s); while it holds, the reader's plan, given the
/// holder's tree path (the test found it in the host's temp dir), tries to
/// read it, to write into it and to list /tmp. The reader learns nothing of
/// the holder's tree and leaves nothing in it; nor can another user of the
/// host read that tree or run the set-user-id program as root. Once the
/// holder was killed at its timeout, its daemons (seen running while it
/// held) are gone, and so is its job directory; no hook is in the mirror or
/// ever ran, and the key is nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_cannot_reach_another_jobs_tree_and_nothing_outlives_one_killed_at_its_timeout() {
    let bot = Bot::start().await;
    let host = Host::of(&bot);
    let repo = bot.github_repo();

    let holder_attacks = ["files", "daemons", "hooks", "setuid"];
    let config = json!({
        "members": {"app@dev": {}},
        "attacks": ["files", "daemons", "hooks", "setuid", "hold"],
        "read": {"app-key": host.key},
        "daemon_marker": host.daemon_marker,
        "mirror": host.mirror,
        "hook_marker": host.hook_marker,
    });
    let mut files = attack_files(&bot, "change", &config);
    files.push(("infra/app/holder-secret.txt".into(), HOLDER_SECRET.into()));
    let toml = bot.example.read("change", "wavegate.toml");
    let app = "name = \"app\"\ndir = \"infra/app\"\n";
    assert!(toml.contains(app));
    // A plan runs for as long as the base allows.
    let short = format!("{app}timeout = \"10s\"\n");
    bot.edit_base_config(app, &short);
    files.push(("wavegate.toml".into(), toml.replace(app, &short)));
    commit(&bot, "holder", "change", &files, &[]);
    let holder = open_unsettled(&bot, &repo, 41, "holder").await;

    // The holder's job, as anyone on the host can find it (its command's
    // writable layer is mounted where only it sees it), and the commit's
    // cached tree, where the secret is on the host.
    let cached = std::env::temp_dir()
        .join("wavegate-trees")
        .join(bot.rev("holder"));
    let job = bot
        .until("the holder's plan holds its tree", || async {
            let holding = bot.log().contains("holding the tree until killed");
            // This test's server's jobs alone: others run beside it.
            let server = format!("wavegate-job-{}-", bot.pid_of(0).expect("the server runs"));
            let job = job_dirs().into_iter().find(|dir| {
                dir.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&server))
                    && std::fs::read_dir(dir.join("layers")).is_ok_and(|mut l| l.next().is_some())
            });
            job.filter(|_| holding)
        })
        .await;
    assert_eq!(
        std::fs::read_to_string(cached.join("infra/app/holder-secret.txt")).unwrap(),
        HOLDER_SECRET,
        "the holder's tree is the commit's cached tree"
    );
    let running = bot
        .until("the holder's daemons run", || async {
            let daemons = host.daemons();
            (daemons.len() >= 2).then_some(daemons)
        })
        .await;

    let config = json!({
        "members": {"app@dev": {}},
        "attacks": ["other_tree"],
        "other_tree": cached,
    });
    commit(
        &bot,
        "reader",
        "change",
        &attack_files(&bot, "change", &config),
        &[],
    );
    let reader = open_unsettled(&bot, &repo, 42, "reader").await;
    bot.until("the reader's plan is reported", || async {
        plan_check(&reader).map(|_| ())
    })
    .await;
    assert_attack_ran(&reader.report(), &["other_tree"]);
    assert!(
        job.join("tree").exists() && cached.is_dir(),
        "the holder still held its tree while the reader's plan ran"
    );

    let said = everything_said(&bot);
    let mut verdict = Verdict::default();
    verdict.not_leaked("4 another job's tree read", &said, HOLDER_SECRET.as_bytes());
    verdict.file_not_leaked("4 another job's tree read", &said, HOLDER_SECRET.as_bytes());
    let planted = cached.join("planted-by-another-job");
    verdict.blocked("4 another job's tree written", !planted.exists(), || {
        format!("{} appeared", planted.display())
    });
    let job_name = job.file_name().unwrap().to_string_lossy().into_owned();
    verdict.not_smuggled("4 /tmp listed", &said, job_name.as_bytes());

    // Nor can another user of the host reach into the holder's job: read its
    // tree, or run the set-user-id program its plan left there.
    if let Some(seen) = as_another_user(&format!(
        "cat {tree}/infra/app/holder-secret.txt; {tree}/ci/escalate",
        tree = cached.display()
    )) {
        verdict.blocked(
            "4 another user of the host reads a job's tree",
            !seen.contains(HOLDER_SECRET),
            || seen.clone(),
        );
        verdict.blocked(
            "4 a set-user-id program a plan left makes another user root",
            !seen.contains("euid=0"),
            || seen.clone(),
        );
    }

    // The holder is killed at its timeout, with everything it started.
    bot.settle().await;
    let holder = holder.report();
    assert!(
        holder.contains("did not finish within its timeout"),
        "the holder's plan was killed at its timeout: {holder}"
    );
    assert_attack_ran(&holder, &holder_attacks);
    let said = everything_said(&bot);
    let survivors = bot.survivors();
    verdict.blocked(
        "12 no command of the killed plan survives",
        survivors.is_empty(),
        || format!("{survivors:?}"),
    );
    let daemons = host.daemons();
    verdict.blocked(
        "12 the daemons that ran while it held are gone",
        daemons.is_empty(),
        || format!("were {running:?}, still {daemons:?}"),
    );
    verdict.blocked(
        "12 the holder's job directory is gone",
        !job.exists(),
        || format!("{} is left", job.display()),
    );
    let hooks = host.active_hooks();
    verdict.blocked("12 hooks planted in the mirror", hooks.is_empty(), || {
        format!("{hooks:?}")
    });
    verdict.blocked(
        "12 a planted hook ran on a later fetch",
        !host.hook_marker.exists(),
        || std::fs::read_to_string(&host.hook_marker).unwrap_or_default(),
    );
    let key = host.key_text();
    verdict.not_leaked("12 the App key", &said, &key[32..96]);
    verdict.file_not_leaked("12 the App key", &said, &key);
    verdict.assert_all_blocked();
}

/// With `WAVEGATE_SANDBOX_NETWORK=egress` a plan may reach the internet, but
/// still no loopback service (the bot, the forge, the test's listeners on
/// 127.0.0.1 and ::1, an abstract unix socket) and none on the host's own
/// addresses, IPv6 link-local ones included (5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_with_egress_still_reaches_nothing_on_the_host() {
    let bot = Bot::start_with(&[("WAVEGATE_SANDBOX_NETWORK", "egress")]).await;
    let host = Host::of(&bot);
    let listeners = Listeners::start(&bot).await;
    let mut pr = planned_pr(&bot, 34).await;
    let digest = touch_plan_script(&mut pr).await;
    push_attack(&mut pr, &["connections"], &host, &listeners, &digest).await;
    assert_attack_ran(&pr.report(), &["connections"]);

    let mut verdict = Verdict::default();
    let hits = listeners.hits();
    verdict.blocked(
        "5 the test's listeners (127.0.0.1, ::1, the host's addresses, an abstract unix socket)",
        hits.is_empty(),
        || format!("connections: {hits:?}"),
    );
    let probes = probes_at_the_forge(&bot);
    verdict.blocked("5 the fake forge's port", probes.is_empty(), || {
        format!("it was asked {probes:?}")
    });
    let unsigned = unsigned_deliveries(&bot).await;
    verdict.blocked("5 the bot's own port", unsigned == 0.0, || {
        format!("it refused {unsigned} unsigned deliveries")
    });
    verdict.assert_all_blocked();
}

/// The opt-out, and the control: a server set to `WAVEGATE_SANDBOX=none`
/// (the operator's explicit choice) says so in its log and in every
/// report, and the same attacks get through, seen by the same outside checks. The key's sha256 is in the report (2), a
/// forged approval chained into the ledger turns the check green (3) — and
/// `wavegate ledger verify` names it, since the plan could write the
/// database but not sign a fact: the sandbox is what stops the write, the
/// signature is what catches one made some other way — the test's listener
/// and the bot's own port are reached (5), a
/// daemon outlives the plan (6), a hook lands in the mirror (7) and the
/// estate is overwritten during a plan (10). So the attacks are real and
/// the checks above can fail. (Even here the server's own git runs with
/// hooks off: the planted hook never runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_set_to_run_without_a_sandbox_says_so_and_the_same_attacks_get_through() {
    let bot = Bot::start_with(&[("WAVEGATE_SANDBOX", "none")]).await;
    assert!(
        bot.log()
            .contains("WAVEGATE_SANDBOX=none: plan and apply commands run without a sandbox"),
        "{}",
        bot.log()
    );
    let host = Host::of(&bot);
    let listeners = Listeners::start(&bot).await;
    let mut pr = planned_pr(&bot, 35).await;
    insta::assert_snapshot!(redact(&pr.section("Approve")), @r#"
    ### Approve

    Change-set digest: it binds every member above, those with no changes and those that failed included: each one's status, its plan (entries, outputs, policy denials; the summary only of an opaque plan) and the input values it read. Not bound: summaries of other plans and what the commands printed (see `docs/plan-files.md`, "Digests").

    ```
    sha256:[digest]
    ```

    To approve exactly this plan, comment:

    ```
    /approve sha256:[digest]
    ```

    _⚠️ Commands ran without a sandbox: this server is set to `WAVEGATE_SANDBOX=none`, so the pull request's code ran as the bot's own user._

    <!-- wavegate:approvals -->
    "#);
    let digest = touch_plan_script(&mut pr).await;
    bot.assert_ledger_verifies();
    // From here on the plan writes to the ledger: `settle` no longer
    // asserts that it verifies; this test says what verify finds instead.
    bot.ledger_forged.store(true, Ordering::SeqCst);
    let estate_before = snapshot(&host.estate);
    let attacks = [
        "files",
        "ledger",
        "connections",
        "daemons",
        "hooks",
        "estate",
    ];
    push_attack(&mut pr, &attacks, &host, &listeners, &digest).await;
    let escaped = host.daemons();
    let survivors = bot.survivors();
    for process in escaped.iter().chain(&survivors) {
        let pid: i32 = process.split(':').next().unwrap().parse().unwrap();
        // SAFETY: kill(2) on a daemon this test's plan started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    let report = pr.report();
    assert_attack_ran(&report, &attacks);
    assert_eq!(
        digest_in(&report),
        digest,
        "the attack's plan binds the same digest"
    );
    assert!(
        report.contains(&sha256_hex(&host.key_text())),
        "2 the App key's sha256 is in the report: {report}"
    );
    let facts = bot
        .store()
        .await
        .repo_facts("github:acme/infra")
        .await
        .unwrap();
    let forged = facts
        .iter()
        .find(|f| f.fact.kind == FactKind::Approved && f.fact.actor.id == FORGED_APPROVER)
        .unwrap_or_else(|| panic!("3 the forged approval is in the ledger: {facts:#?}"));
    assert!(
        forged.sig.is_none(),
        "3 the plan could not sign it: {forged:#?}"
    );
    let verify = bot.ledger_verify();
    let verdict = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(
        verify.status.code(),
        Some(1),
        "3 ledger verify fails: {verdict}"
    );
    assert!(
        verdict.contains(&format!(
            "the ledger of github:acme/infra is broken at seq {}: fact is not signed",
            forged.seq
        )) && verdict.contains(&format!(
            "  seq {}: approved {digest} at gate pr-35 by rev-bob (id {FORGED_APPROVER})",
            forged.seq
        )),
        "3 ledger verify names the forged approval: {verdict}"
    );
    // Unsigned, it counts for nothing even here: the server evaluates only
    // facts it signed (an attacker who can also read the ledger key, as an
    // unsandboxed plan could, is what the sandbox stops).
    assert_eq!(
        plan_check(&pr).as_deref(),
        Some("action_required"),
        "3 the forged approval did not turn the check green"
    );
    assert!(
        bot.log()
            .contains("a ledger fact is not signed by this server's key, so it counts for nothing"),
        "3 the server says it ignored the forged fact"
    );
    assert!(
        listeners.loopback().hits() > 0,
        "5 the test's listener was reached"
    );
    assert!(
        unsigned_deliveries(&bot).await > 0.0,
        "5 the bot's own port was reached"
    );
    assert!(
        !survivors.is_empty() && escaped.len() >= 2,
        "6 daemons outlived the plan: {survivors:?} {escaped:?}"
    );
    assert!(
        !host.active_hooks().is_empty(),
        "7 hooks landed in the mirror"
    );
    assert!(
        !changed_files(&estate_before, &snapshot(&host.estate)).is_empty(),
        "10 a plan changed the estate"
    );
    bot.branch_bigger_app("change-2");
    pr.push("change-2").await;
    assert!(
        !host.hook_marker.exists(),
        "7 the server's git runs with hooks off, so even here no planted hook runs"
    );
}
