//! The sandbox tried for real: bubblewrap must be installed (scripts/test.sh
//! installs it), as in production.

use super::*;
use std::collections::HashMap;

fn settings(vars: &[(&str, &str)]) -> Result<SandboxSettings> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |name: &str| map.get(name).cloned();
    let declared = crate::config::vars::ServerVars::from_lookup(get);
    SandboxSettings::from_vars(&declared.sandbox, &get)
}

#[test]
fn bubblewrap_with_no_network_is_the_default() {
    assert_eq!(settings(&[]).unwrap(), SandboxSettings::default());
    let s = settings(&[
        ("WAVEGATE_SANDBOX", " NONE "),
        ("WAVEGATE_SANDBOX_NETWORK", "egress"),
        ("WAVEGATE_SANDBOX_READ", "/usr/share:/etc/ssl:"),
        ("WAVEGATE_SANDBOX_APPLY_WRITE", "/tmp"),
    ])
    .unwrap();
    assert_eq!(s.mode, Mode::None);
    let default = s.profiles.default_profile();
    assert_eq!(default.network, Network::Egress);
    assert_eq!(
        default.read,
        [PathBuf::from("/usr/share"), PathBuf::from("/etc/ssl")]
    );
    assert_eq!(default.state, [PathBuf::from("/tmp")]);
}

#[test]
fn the_profiles_file_is_the_operators_and_a_broken_one_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("profiles.toml");
    std::fs::write(
        &file,
        "[profile.prod]\nenv = { TF_TOKEN = { from_env = \"PROD_TOKEN\" } }\nnetwork = \"egress\"",
    )
    .unwrap();
    let path = file.display().to_string();
    let s = settings(&[
        ("WAVEGATE_PROFILES", &path),
        ("PROD_TOKEN", "t0k3n-of-prod"),
    ])
    .unwrap();
    assert_eq!(s.profiles.names(), "`default`, `prod`");
    assert_eq!(s.profiles.get("prod").unwrap().env[0].1, "t0k3n-of-prod");
    let e = settings(&[("WAVEGATE_PROFILES", &path)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("PROD_TOKEN is not set in the server's environment"),
        "{e}"
    );
    let e = settings(&[("WAVEGATE_PROFILES", "profiles.toml")])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("WAVEGATE_PROFILES: `profiles.toml` is not an absolute path"),
        "{e}"
    );
    let e = settings(&[("WAVEGATE_PROFILES", "/no/such/profiles.toml")]).unwrap_err();
    assert!(
        format!("{e:#}").contains("cannot read `/no/such/profiles.toml`"),
        "{e:#}"
    );
}

#[test]
fn a_bad_setting_names_the_variable_and_the_fix() {
    let e = |vars: &[(&str, &str)]| settings(vars).unwrap_err().to_string();
    assert!(e(&[("WAVEGATE_SANDBOX", "docker")])
        .starts_with("WAVEGATE_SANDBOX=`docker` is not a sandbox; use `bwrap`"));
    assert!(e(&[("WAVEGATE_SANDBOX_NETWORK", "open")])
        .starts_with("WAVEGATE_SANDBOX_NETWORK=`open` is not a network; use `none`"));
    assert_eq!(
        e(&[("WAVEGATE_SANDBOX_READ", "opt/tools")]),
        "WAVEGATE_SANDBOX_READ: `opt/tools` is not an absolute path; list absolute host paths separated by `:`"
    );
    assert_eq!(
        e(&[("WAVEGATE_SANDBOX_APPLY_WRITE", "/no/such/state")]),
        "WAVEGATE_SANDBOX_APPLY_WRITE: `/no/such/state` does not exist on this host; create it or take it off the list"
    );
}

#[test]
fn operator_paths_that_would_show_a_secret_or_another_job_are_refused() {
    let host = tempfile::tempdir().unwrap();
    let data = host.path().join("data");
    let tools = host.path().join("tools");
    let jobs = host.path().join("tmp");
    for dir in [&data, &tools, &jobs] {
        std::fs::create_dir(dir).unwrap();
    }
    let with_read = |read: &Path| {
        testing::settings_with(Profile::from_sandbox_settings(
            vec![read.to_owned()],
            vec![],
            Network::None,
        ))
    };
    let secrets = [("the data dir", data.as_path())];
    with_read(&tools).check_exposure(&secrets, &jobs).unwrap();
    let above = with_read(host.path())
        .check_exposure(&secrets, &jobs)
        .unwrap_err();
    assert!(
        above
            .to_string()
            .contains("would let every command see the data dir"),
        "{above}"
    );
    let inside = with_read(&data.join("mirrors"))
        .check_exposure(&secrets, &jobs)
        .unwrap_err();
    assert!(inside.to_string().contains("the data dir"), "{inside}");
    let jobs_too = testing::settings_with(Profile::from_sandbox_settings(
        vec![],
        vec![host.path().to_owned()],
        Network::None,
    ))
    .check_exposure(&[], &jobs)
    .unwrap_err();
    assert!(
        jobs_too
            .to_string()
            .starts_with("WAVEGATE_SANDBOX_APPLY_WRITE:")
            && jobs_too.to_string().contains("holds every job's checkout"),
        "{jobs_too}"
    );
    let job = jobs.join("wavegate-job-1-abc");
    std::fs::create_dir_all(job.join("tree")).unwrap();
    let in_a_job = with_read(&job.join("tree"))
        .check_exposure(&[], &jobs)
        .unwrap_err();
    assert!(
        in_a_job.to_string().contains("is inside a job's directory"),
        "{in_a_job}"
    );
    let cache = jobs.join("wavegate-trees");
    std::fs::create_dir_all(cache.join("0a1b")).unwrap();
    let cached = [("every repository's cached trees", cache.as_path())];
    let in_the_cache = with_read(&cache.join("0a1b"))
        .check_exposure(&cached, &jobs)
        .unwrap_err();
    assert!(
        in_the_cache.to_string().contains("cached trees"),
        "{in_the_cache}"
    );
}

/// Runs `script` with /bin/sh in a sandbox for `job`, as `kind`; answers
/// (exit code, output).
async fn run_in(
    sandbox: &Sandbox,
    job: &testing::Job,
    kind: CommandKind,
    script: &str,
) -> (i32, String) {
    let profile = sandbox.settings.profiles.default_profile().clone();
    run_as(sandbox, job, kind, &profile, script).await
}

/// [`run_in`] with `profile`.
async fn run_as(
    sandbox: &Sandbox,
    job: &testing::Job,
    kind: CommandKind,
    profile: &Profile,
    script: &str,
) -> (i32, String) {
    let (code, out, _) = run_limited(sandbox, job, kind, profile, script).await;
    (code, out)
}

/// [`run_as`], and the limit that stopped the command, as the runner
/// tells it: the cgroup's count, else how it ended.
async fn run_limited(
    sandbox: &Sandbox,
    job: &testing::Job,
    kind: CommandKind,
    profile: &Profile,
    script: &str,
) -> (i32, String, Option<profile::LimitHit>) {
    let confinement = Confinement {
        kind,
        ..job.confinement.clone()
    };
    let argv = ["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let env = [
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("HOME".to_owned(), confinement.home.display().to_string()),
    ];
    let mut launched = sandbox
        .launch(&Launch {
            argv: &argv,
            cwd: &confinement.tree,
            env: &env,
            timeout: Duration::from_secs(60),
            confinement: &confinement,
            profile,
        })
        .await
        .unwrap();
    let mut output = Vec::new();
    let mut stdout = launched.child.stdout.take().unwrap();
    let mut stderr = launched.child.stderr.take().unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let _ = tokio::join!(
        tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out),
        tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut err),
    );
    let status = launched.child.wait().await.unwrap();
    let counted = launched.limit_hit(&profile.limits);
    launched.finish().await;
    output.extend(out);
    output.extend(err);
    let code = status.code().unwrap_or(-1);
    let output = String::from_utf8_lossy(&output).into_owned();
    let rlimited = sandbox.limits_by_rlimit(&profile.limits);
    let hit = counted.or_else(|| profile::limit_hit(&rlimited, code, &output));
    (code, output, hit)
}

#[tokio::test]
async fn a_command_sees_its_job_the_system_and_nothing_of_the_server() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    std::fs::write(job.confinement.tree.join("main.tf"), "resource").unwrap();
    let me = std::process::id();
    let script = format!(
        "echo uid=$(id -u); echo tree=$(cat main.tf); echo home=$(ls -A \"$HOME\" | wc -l); \
         echo env=$(env | cut -d= -f1 | sort | tr '\\n' ,); echo root=$(ls / | tr '\\n' ,); \
         test -e /proc/{me}/environ && echo server=visible || echo server=hidden; \
         echo private=$(ls /etc/ssl/private 2>&1 | head -1); \
         echo written > out; echo host=$(hostname); echo run=$(find /run | tr '\\n' ,)"
    );
    let (code, out) = run_in(&sandbox, &job, CommandKind::Plan, &script).await;
    assert_eq!(code, 0, "{out}");
    let said = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in {out}"))
            .to_owned()
    };
    assert_eq!(said("uid"), "1000", "an unprivileged uid inside");
    assert_eq!(said("tree"), "resource", "the tree is there");
    assert_eq!(said("home"), "0", "HOME is private and empty");
    let env = said("env");
    for name in env.split(',').filter(|n| !n.is_empty()) {
        assert!(
            ["HOME", "PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name),
            "only the environment it was given: {env}"
        );
    }
    let root = said("root");
    for absent in ["root", "home", "work", "srv", "opt", "mnt", "sys", "boot"] {
        assert!(
            !root.split(',').any(|entry| entry == absent),
            "/{absent} is not in the sandbox: {root}"
        );
    }
    assert_eq!(
        said("server"),
        "hidden",
        "the server's process is not in its /proc"
    );
    assert_eq!(said("host"), "wavegate-sandbox");
    assert_eq!(
        said("run"),
        "/run,/run/wavegate,/run/wavegate/bin,/run/wavegate/bin/wavegate,",
        "of /run, wavegate itself alone"
    );
    assert_eq!(
        std::fs::read_to_string(job.confinement.tree.join("out")).unwrap(),
        "written\n",
        "the tree is writable"
    );
}

#[tokio::test]
async fn the_apply_only_path_is_read_only_to_plans_and_writable_to_applies() {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("app.json"), "{}").unwrap();
    let settings = testing::settings_with(Profile::from_sandbox_settings(
        vec![],
        vec![state.path().to_owned()],
        Network::None,
    ));
    let sandbox = testing::bwrap_with(settings).await;
    let job = testing::Job::new();
    let write = format!(
        "cat {0}/app.json && echo changed > {0}/app.json",
        state.path().display()
    );
    for kind in [CommandKind::Plan, CommandKind::Outputs] {
        let (code, out) = run_in(&sandbox, &job, kind, &write).await;
        assert_ne!(code, 0, "{kind:?} cannot write the state: {out}");
        assert!(out.contains("Read-only file system"), "{out}");
        assert_eq!(
            std::fs::read_to_string(state.path().join("app.json")).unwrap(),
            "{}"
        );
    }
    let (code, out) = run_in(&sandbox, &job, CommandKind::Apply, &write).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(state.path().join("app.json")).unwrap(),
        "changed\n"
    );
}

#[tokio::test]
async fn a_daemon_a_command_leaves_behind_ends_with_it() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    let marker = job.confinement.tree.join("daemon");
    // setsid and a double fork: out of the command's process group and session.
    let script = format!(
        "setsid sh -c '(sleep 2; echo survived > {}) &' < /dev/null > /dev/null 2>&1; echo left",
        marker.display()
    );
    let (code, out) = run_in(&sandbox, &job, CommandKind::Plan, &script).await;
    assert_eq!((code, out.trim()), (0, "left"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!marker.exists(), "the daemon ended with the command");
}

#[tokio::test]
async fn without_network_only_the_sandboxes_own_loopback_answers() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();
    let script = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)\" 2>&1 | tail -1"
    );
    let (_, out) = run_in(&sandbox, &job, CommandKind::Plan, &script).await;
    assert!(out.contains("Connection refused"), "{out}");
    assert!(
        host.accept().is_err(),
        "nothing reached the host's listener"
    );
}

/// A network the test builds: a namespace standing for the internet behind
/// a veth pair, with a listener in it. Needs CAP_NET_ADMIN (CI runs as root).
struct FakeInternet {
    name: String,
    listener: std::process::Child,
}

const INTERNET_HOST: &str = "10.213.7.2";
const INTERNET_GATEWAY: &str = "10.213.7.1";

impl FakeInternet {
    fn start() -> Option<Self> {
        let name = format!("wgnet{}", std::process::id() % 100_000);
        let ip = |args: &str| {
            std::process::Command::new("ip")
                .args(args.split_whitespace())
                .status()
                .is_ok_and(|s| s.success())
        };
        let built = ip(&format!("netns add {name}"))
            && ip(&format!("link add {name}a type veth peer name {name}b"))
            && ip(&format!("link set {name}b netns {name}"))
            && ip(&format!("addr add {INTERNET_GATEWAY}/30 dev {name}a"))
            && ip(&format!("link set {name}a up"))
            && ip(&format!(
                "-n {name} addr add {INTERNET_HOST}/30 dev {name}b"
            ))
            && ip(&format!("-n {name} link set {name}b up"))
            && ip(&format!("-n {name} link set lo up"));
        if !built {
            let _ = ip(&format!("netns del {name}"));
            let _ = ip(&format!("link del {name}a"));
            return None;
        }
        let listener = std::process::Command::new("ip")
            .args(["netns", "exec", &name, "python3", "-c"])
            .arg(format!(
                "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('{INTERNET_HOST}', 8443)); s.listen()\nwhile True:\n  c,_=s.accept(); c.sendall(b'hello from the internet\\n'); c.close()"
            ))
            .spawn()
            .ok()?;
        std::thread::sleep(Duration::from_millis(300));
        Some(Self { name, listener })
    }
}

impl Drop for FakeInternet {
    fn drop(&mut self) {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        for args in [
            vec!["netns", "del", self.name.as_str()],
            vec!["link", "del", &format!("{}a", self.name)],
        ] {
            let _ = std::process::Command::new("ip").args(args).status();
        }
    }
}

#[tokio::test]
async fn egress_reaches_out_but_never_the_host_or_metadata_addresses() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: building a test network needs root (CI runs as root)");
        return;
    }
    let internet =
        FakeInternet::start().expect("a test network (ip netns, veth) can be built as root");
    // A service the host offers on an address of its own (not loopback).
    let host_service = std::net::TcpListener::bind(format!("{INTERNET_GATEWAY}:0")).unwrap();
    let host_port = host_service.local_addr().unwrap().port();
    host_service.set_nonblocking(true).unwrap();
    let loopback = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let loopback_port = loopback.local_addr().unwrap().port();
    loopback.set_nonblocking(true).unwrap();

    let sandbox = testing::bwrap_with(testing::settings_with(Profile::from_sandbox_settings(
        vec![],
        vec![],
        Network::Egress,
    )))
    .await;
    let job = testing::Job::new();
    let script = format!(
        r#"python3 - <<'PY'
import socket
for name, address in [("internet", ("{INTERNET_HOST}", 8443)),
                      ("host loopback", ("127.0.0.1", {loopback_port})),
                      ("host address", ("{INTERNET_GATEWAY}", {host_port})),
                      ("metadata", ("169.254.169.254", 80))]:
    try:
        c = socket.create_connection(address, timeout=3)
        print(name, "reached:", c.recv(100).decode().strip() or "connected")
    except OSError as e:
        print(name, "blocked:", e)
PY"#
    );
    let (code, out) = run_in(&sandbox, &job, CommandKind::Plan, &script).await;
    // The same through a private view of a cached tree: the overlay's
    // namespaces leave the network to the sandbox as before.
    let cached = tempfile::tempdir().unwrap();
    let view = testing::Job {
        _dir: tempfile::tempdir().unwrap(),
        confinement: Confinement {
            lower: Some(cached.path().to_owned()),
            ..job.confinement.clone()
        },
    };
    let (viewed_code, viewed) = run_in(&sandbox, &view, CommandKind::Plan, &script).await;
    drop(internet);
    assert_eq!(
        (viewed_code, &viewed),
        (code, &out),
        "the same through a view"
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("internet reached: hello from the internet"),
        "{out}"
    );
    assert!(out.contains("host loopback blocked"), "{out}");
    assert!(out.contains("host address blocked"), "{out}");
    assert!(out.contains("metadata blocked"), "{out}");
    assert!(
        loopback.accept().is_err() && host_service.accept().is_err(),
        "no host service was reached"
    );

    // Without egress the internet is out of reach too.
    let none = testing::bwrap().await;
    let (_, out) = run_in(&none, &job, CommandKind::Plan, &script).await;
    assert!(out.contains("internet blocked"), "{out}");
}

/// A profile with `limits`, nothing else.
fn limited(limits: profile::Limits) -> Profile {
    let mut profile = Profile::from_sandbox_settings(vec![], vec![], Network::None);
    profile.name = "limited".into();
    profile.limits = limits;
    profile
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_at_the_profiles_memory_limit() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    let profile = limited(profile::Limits {
        memory: Some(256 << 20),
        ..Default::default()
    });
    let bomb = "python3 -c 'x = bytearray(1 << 30); print(\"held\", len(x))'";
    let (code, out, hit) = run_limited(&sandbox, &job, CommandKind::Plan, &profile, bomb).await;
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("held"), "{out}");
    assert_eq!(
        hit,
        Some(profile::LimitHit::Memory(256 << 20)),
        "{code}: {out}"
    );
    // Without the limit the same command holds its gigabyte.
    let (code, out) = run_in(&sandbox, &job, CommandKind::Plan, bomb).await;
    assert_eq!((code, out.trim()), (0, "held 1073741824"));

    // Where no cgroup may be made, the address-space limit holds it.
    let rlimits = testing::bwrap_with(SandboxSettings {
        cgroups: false,
        ..SandboxSettings::default()
    })
    .await;
    assert_eq!(rlimits.limits_mechanism(), "rlimits");
    let (code, out, hit) = run_limited(&rlimits, &job, CommandKind::Plan, &profile, bomb).await;
    assert!(out.contains("MemoryError"), "{code}: {out}");
    assert_eq!(
        hit,
        Some(profile::LimitHit::Memory(256 << 20)),
        "{code}: {out}"
    );
}

#[tokio::test]
async fn a_fork_bomb_is_stopped_at_the_process_limit_and_nothing_outlives_it() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    let profile = limited(profile::Limits {
        processes: Some(32),
        ..Default::default()
    });
    // 200 sleepers where 32 are allowed: the rest cannot start.
    let bomb = "i=0; while [ $i -lt 200 ]; do sleep 30.417 & i=$((i+1)); done; echo started all";
    let (code, out, hit) = run_limited(&sandbox, &job, CommandKind::Plan, &profile, bomb).await;
    assert!(!out.contains("started all") || code != 0, "{code}: {out}");
    assert_eq!(hit, Some(profile::LimitHit::Processes(32)), "{code}: {out}");
    // The sleepers went with the sandbox's pid namespace.
    let sleepers = std::process::Command::new("pgrep")
        .args(["-f", "^sleep 30.417$"])
        .output()
        .unwrap();
    assert!(sleepers.stdout.is_empty(), "nothing outlives the command");
}

#[tokio::test]
async fn a_disk_bomb_is_stopped_at_the_disk_limit_in_tmp_and_in_the_tree() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    let profile = limited(profile::Limits {
        disk: Some(16 << 20),
        ..Default::default()
    });
    for target in ["/tmp/fill", "fill"] {
        let bomb = format!("head -c 64M /dev/zero > {target}");
        let (code, out, hit) =
            run_limited(&sandbox, &job, CommandKind::Plan, &profile, &bomb).await;
        assert_eq!(
            hit,
            Some(profile::LimitHit::Disk(16 << 20)),
            "{target}: {code}: {out}"
        );
    }
    let written = std::fs::metadata(job.confinement.tree.join("fill"))
        .unwrap()
        .len();
    assert!(
        written <= 16 << 20,
        "the tree's file stopped at the limit: {written}"
    );
}

#[tokio::test]
async fn a_cpu_bomb_is_stopped_at_its_cpu_time() {
    let sandbox = testing::bwrap().await;
    let job = testing::Job::new();
    let profile = limited(profile::Limits {
        cpu_time: Some(1),
        ..Default::default()
    });
    let (code, out, hit) = run_limited(
        &sandbox,
        &job,
        CommandKind::Plan,
        &profile,
        "while :; do :; done",
    )
    .await;
    assert_eq!(hit, Some(profile::LimitHit::CpuTime(1)), "{code}: {out}");
}

#[tokio::test]
async fn a_write_path_is_an_applys_alone_and_a_read_path_is_read_only() {
    let host = tempfile::tempdir().unwrap();
    let (read, write) = (host.path().join("creds"), host.path().join("keys"));
    for dir in [&read, &write] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("f"), "secret").unwrap();
    }
    let mut profile = Profile::from_sandbox_settings(vec![read.clone()], vec![], Network::None);
    profile.write = vec![write.clone()];
    let sandbox = testing::bwrap_with(testing::settings_with(profile.clone())).await;
    let job = testing::Job::new();
    let script = format!(
        "cat {r}/f; echo; touch {r}/new 2>&1 | tail -1; cat {w}/f 2>&1; echo; touch {w}/new && echo wrote",
        r = read.display(),
        w = write.display()
    );
    let (_, plan) = run_as(&sandbox, &job, CommandKind::Plan, &profile, &script).await;
    assert!(plan.contains("Read-only file system"), "{plan}");
    assert!(
        plan.contains("No such file or directory") && !plan.contains("wrote"),
        "the plan never sees the write path: {plan}"
    );
    let (_, apply) = run_as(&sandbox, &job, CommandKind::Apply, &profile, &script).await;
    assert!(apply.contains("wrote"), "{apply}");
}

#[tokio::test]
async fn a_command_sees_the_cached_tree_through_a_private_layer_and_never_writes_it() {
    let sandbox = testing::bwrap().await;
    assert!(sandbox.trees().is_some(), "{}", sandbox.describe());
    let job = testing::Job::new();
    let cached = tempfile::tempdir().unwrap();
    std::fs::create_dir(cached.path().join("infra")).unwrap();
    std::fs::write(cached.path().join("infra/main.tf"), "resource").unwrap();
    let confinement = Confinement {
        lower: Some(cached.path().to_owned()),
        ..job.confinement.clone()
    };
    let view = testing::Job {
        _dir: tempfile::tempdir().unwrap(),
        confinement,
    };
    let script =
        "cat infra/main.tf; echo; echo changed > infra/main.tf; mkdir -p infra/.terraform; \
                  echo lock > infra/.terraform/lock; cat infra/main.tf; ls -A infra | tr '\\n' ,";
    let (code, out) = run_in(&sandbox, &view, CommandKind::Plan, script).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out, "resource\nchanged\n.terraform,main.tf,",
        "the command writes its view"
    );
    assert_eq!(
        std::fs::read_to_string(cached.path().join("infra/main.tf")).unwrap(),
        "resource",
        "the cached tree is never written"
    );
    assert!(!cached.path().join("infra/.terraform").exists());
    assert_eq!(
        std::fs::read_dir(&view.confinement.tree).unwrap().count(),
        0,
        "nothing of the view is left on the host"
    );
    // A second command starts from the cached tree again.
    let (_, again) = run_in(&sandbox, &view, CommandKind::Plan, "cat infra/main.tf").await;
    assert_eq!(again, "resource");
}
