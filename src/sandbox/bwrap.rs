//! The bubblewrap command line for one command: what the sandbox is made of,
//! as a pure function of the settings, the host's layout and the command's
//! confinement, so every rule is checked by a unit test.

use super::{CommandKind, Confinement, Network, Profile};
use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Seconds of CPU past its limit a command that ignores SIGXCPU may still use.
const CPU_KILL_AFTER: u64 = 5;

/// The uid and gid a command runs as inside its user namespace.
pub(crate) const SANDBOX_UID: u32 = 1000;

/// System files every command may read: certificates, name resolution, the
/// dynamic linker's cache, time zones. Nothing here is a secret: of `ssl` and
/// `pki` only the public parts (`/etc/ssl/private` holds the host's keys).
const ETC_FILES: &[&str] = &[
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "pki/ca-trust",
    "pki/tls/certs",
    "pki/tls/openssl.cnf",
    "protocols",
    "resolv.conf",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
];

/// Top-level system directories that may be links into `/usr` (a merged
/// `/usr`) or directories of their own.
const ROOT_DIRS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootEntry {
    Link(PathBuf),
    Dir,
}

/// What of the host's system a sandbox is built from, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostLayout {
    pub(crate) root: Vec<(&'static str, RootEntry)>,
    /// `/etc` entries that exist.
    pub(crate) etc: Vec<&'static str>,
}

impl HostLayout {
    pub(crate) fn read() -> Self {
        let root = ROOT_DIRS
            .iter()
            .filter_map(|name| {
                let path = Path::new("/").join(name);
                let meta = std::fs::symlink_metadata(&path).ok()?;
                if meta.file_type().is_symlink() {
                    Some((*name, RootEntry::Link(std::fs::read_link(&path).ok()?)))
                } else if meta.is_dir() {
                    Some((*name, RootEntry::Dir))
                } else {
                    None
                }
            })
            .collect();
        let etc = ETC_FILES
            .iter()
            .copied()
            .filter(|name| Path::new("/etc").join(name).exists())
            .collect();
        Self { root, etc }
    }
}

/// Descriptors bwrap reads from (their numbers are the same in bwrap).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataFds {
    pub(crate) passwd: RawFd,
    pub(crate) group: RawFd,
    /// A resolv.conf of the sandbox's own (egress with a loopback resolver).
    pub(crate) resolv: Option<RawFd>,
    /// `--info-fd` and `--block-fd`: the network is attached before the
    /// command starts.
    pub(crate) sync: Option<(RawFd, RawFd)>,
}

/// One command to confine.
pub(crate) struct Invocation<'a> {
    pub(crate) argv: &'a [String],
    pub(crate) cwd: &'a Path,
    pub(crate) confinement: &'a Confinement,
    /// The operator's paths, network and limits.
    pub(crate) profile: &'a Profile,
    /// `timeout` inside the sandbox, as a backstop: the command is killed at
    /// this deadline even if the server that started it cannot kill it.
    pub(crate) backstop: Option<(&'a Path, Duration)>,
    /// `prlimit` and the limits it sets inside the sandbox (in the
    /// command's own user namespace, so its process count is the sandbox's
    /// alone): those of the profile's no cgroup holds.
    pub(crate) limiter: Option<(&'a Path, super::profile::Limits)>,
    /// wavegate's own executable, shown read-only in `OWN_BINARY_DIR`.
    pub(crate) own_binary: Option<&'a Path>,
}

/// bwrap's arguments for `invocation`.
pub(crate) fn arguments(
    layout: &HostLayout,
    fds: &DataFds,
    invocation: &Invocation<'_>,
) -> Vec<OsString> {
    let mut args = Args::default();
    args.flags(&[
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    let profile = invocation.profile;
    if profile.network != Network::Host {
        args.flag("--unshare-net");
    }
    args.flags(&["--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
    let id = SANDBOX_UID.to_string();
    args.flags(&["--uid", &id, "--gid", &id, "--hostname", "wavegate-sandbox"]);

    args.bind("--ro-bind", Path::new("/usr"), Path::new("/usr"));
    for (name, entry) in &layout.root {
        let path = Path::new("/").join(name);
        match entry {
            RootEntry::Link(target) => {
                args.flag("--symlink");
                args.path(target);
                args.path(&path);
            }
            RootEntry::Dir => args.bind("--ro-bind", &path, &path),
        }
    }
    for name in &layout.etc {
        if *name == "resolv.conf" && fds.resolv.is_some() {
            continue;
        }
        let path = Path::new("/etc").join(name);
        args.bind("--ro-bind", &path, &path);
    }
    args.data("/etc/passwd", fds.passwd);
    args.data("/etc/group", fds.group);
    if let Some(fd) = fds.resolv {
        args.data("/etc/resolv.conf", fd);
    }
    args.flags(&["--proc", "/proc", "--dev", "/dev"]);
    // The kernel's settings, read-only: bubblewrap leaves the new /proc's
    // sys writable to whoever owns it, and a server running as root runs
    // its commands as root outside their user namespace (core_pattern!).
    args.bind("--ro-bind", Path::new("/proc/sys"), Path::new("/proc/sys"));
    for tmp in ["/tmp", "/var/tmp"] {
        // RAM on the host: as big as the profile's disk at most.
        if let Some(disk) = profile.limits.disk {
            args.flags(&["--size", &disk.to_string()]);
        }
        args.flags(&["--tmpfs", tmp]);
    }

    if let Some(own) = invocation.own_binary {
        args.bind(
            "--ro-bind",
            own,
            &Path::new(super::OWN_BINARY_DIR).join("wavegate"),
        );
    }

    // The operator's paths, before the job's own: a job's tree is never
    // hidden under one of them.
    let applies = invocation.confinement.kind == CommandKind::Apply;
    for path in &profile.read {
        args.bind("--ro-bind", path, path);
    }
    for path in &profile.state {
        args.bind(if applies { "--bind" } else { "--ro-bind" }, path, path);
    }
    if applies {
        for path in &profile.write {
            args.bind("--bind", path, path);
        }
    }
    let confinement = invocation.confinement;
    for path in [&confinement.tree, &confinement.files, &confinement.home] {
        args.bind("--bind", path, path);
    }
    if let Some(setup) = &confinement.setup {
        args.bind("--ro-bind", setup, setup);
    }
    args.flag("--chdir");
    args.path(invocation.cwd);
    if let Some((info, block)) = fds.sync {
        args.flags(&[
            "--info-fd",
            &info.to_string(),
            "--block-fd",
            &block.to_string(),
        ]);
    }
    args.flag("--");
    if let Some((timeout, after)) = invocation.backstop {
        args.path(timeout);
        args.flags(&["--signal=KILL", &format!("{}s", after.as_secs().max(1))]);
    }
    if let Some((prlimit, limits)) = invocation.limiter {
        args.path(prlimit);
        if let Some(memory) = limits.memory {
            args.flag(&format!("--as={memory}"));
        }
        if let Some(processes) = limits.processes {
            args.flag(&format!("--nproc={processes}"));
        }
        if let Some(disk) = limits.disk {
            args.flag(&format!("--fsize={disk}"));
        }
        if let Some(cpu) = limits.cpu_time {
            // SIGXCPU at the limit, SIGKILL a little after for one that ignores it.
            args.flag(&format!("--cpu={cpu}:{}", cpu + CPU_KILL_AFTER));
        }
        args.flag("--");
    }
    for arg in invocation.argv {
        args.flag(arg);
    }
    args.0
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, flag: &str) {
        self.0.push(flag.into());
    }

    fn flags(&mut self, flags: &[&str]) {
        self.0.extend(flags.iter().map(OsString::from));
    }

    fn path(&mut self, path: &Path) {
        self.0.push(path.as_os_str().to_owned());
    }

    fn bind(&mut self, how: &str, source: &Path, target: &Path) {
        self.flag(how);
        self.path(source);
        self.path(target);
    }

    fn data(&mut self, target: &str, fd: RawFd) {
        self.flags(&["--ro-bind-data", &fd.to_string(), target]);
    }
}

/// The passwd and group files of the sandbox: its one user and `nobody`.
pub(crate) fn passwd() -> String {
    format!(
        "root:x:0:0:root:/root:/bin/sh\nwavegate:x:{SANDBOX_UID}:{SANDBOX_UID}:wavegate sandbox:/nonexistent:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
}

pub(crate) fn group() -> String {
    format!("root:x:0:\nwavegate:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> HostLayout {
        HostLayout {
            root: vec![
                ("bin", RootEntry::Link("usr/bin".into())),
                ("lib", RootEntry::Link("usr/lib".into())),
                ("lib64", RootEntry::Dir),
            ],
            etc: vec!["resolv.conf", "ssl/certs"],
        }
    }

    fn confinement(kind: CommandKind) -> Confinement {
        Confinement {
            kind,
            tree: "/tmp/wavegate-job-1/tree".into(),
            files: "/tmp/wavegate-job-1/members/app@dev".into(),
            home: "/tmp/wavegate-job-1/home/app@dev".into(),
            setup: Some("/tmp/wavegate-job-1/setup/dev.default".into()),
            lower: None,
        }
    }

    fn profile(network: Network) -> Profile {
        let mut profile = Profile::from_sandbox_settings(
            vec!["/opt/tools".into()],
            vec!["/srv/state".into()],
            network,
        );
        profile.write = vec!["/srv/deploy-keys".into()];
        profile
    }

    fn fds() -> DataFds {
        DataFds {
            passwd: 5,
            group: 6,
            resolv: None,
            sync: None,
        }
    }

    fn args_of(kind: CommandKind, network: Network) -> Vec<String> {
        let confinement = confinement(kind);
        let argv = vec!["python3".to_owned(), "plan.py".to_owned()];
        let cwd = confinement.tree.join("infra/app");
        arguments(
            &layout(),
            &fds(),
            &Invocation {
                argv: &argv,
                cwd: &cwd,
                confinement: &confinement,
                profile: &profile(network),
                backstop: Some((Path::new("/usr/bin/timeout"), Duration::from_secs(130))),
                limiter: None,
                own_binary: Some(Path::new("/usr/local/bin/wavegate")),
            },
        )
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect()
    }

    /// The arguments as one line, for matching runs of them.
    fn line(args: &[String]) -> String {
        args.join(" ")
    }

    /// bwrap's arguments for `invocation` with `fds`, as one line.
    fn line_for(fds: &DataFds, invocation: &Invocation<'_>) -> String {
        let args: Vec<String> = arguments(&layout(), fds, invocation)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        line(&args)
    }

    #[test]
    fn every_namespace_is_new_and_every_capability_dropped() {
        let args = line(&args_of(CommandKind::Plan, Network::None));
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
            "--die-with-parent",
            "--new-session",
            "--cap-drop ALL",
            "--uid 1000 --gid 1000",
            "--proc /proc --dev /dev --ro-bind /proc/sys /proc/sys",
            "--tmpfs /tmp",
        ] {
            assert!(args.contains(flag), "{flag} in {args}");
        }
    }

    #[test]
    fn private_keys_and_the_kernels_settings_are_out_of_reach() {
        let args = line(&args_of(CommandKind::Apply, Network::None));
        assert!(
            args.contains("--ro-bind /etc/ssl/certs /etc/ssl/certs")
                && !args.contains("--ro-bind /etc/ssl /etc/ssl"),
            "the certificates, never /etc/ssl whole with its private/: {args}"
        );
        assert!(
            args.find("--proc /proc") < args.find("--ro-bind /proc/sys /proc/sys"),
            "/proc/sys read-only over the new /proc: {args}"
        );
    }

    #[test]
    fn the_system_is_read_only_and_the_job_writable() {
        let args = line(&args_of(CommandKind::Plan, Network::None));
        assert!(args.contains("--ro-bind /usr /usr"), "{args}");
        assert!(
            args.contains("--ro-bind /usr/local/bin/wavegate /run/wavegate/bin/wavegate"),
            "wavegate itself, for the scripts' `wavegate adapt`: {args}"
        );
        assert!(args.contains("--symlink usr/bin /bin"), "{args}");
        assert!(args.contains("--ro-bind /lib64 /lib64"), "{args}");
        assert!(
            args.contains("--ro-bind /etc/ssl/certs /etc/ssl/certs"),
            "{args}"
        );
        assert!(args.contains("--ro-bind-data 5 /etc/passwd --ro-bind-data 6 /etc/group"));
        assert!(!args.contains("--bind / "), "never the whole host: {args}");
        assert!(
            args.contains("--ro-bind /tmp/wavegate-job-1/setup/dev.default /tmp/wavegate-job-1/setup/dev.default"),
            "what the setup left is read-only: {args}"
        );
        for own in ["tree", "members/app@dev", "home/app@dev"] {
            let path = format!("/tmp/wavegate-job-1/{own}");
            assert!(
                args.contains(&format!("--bind {path} {path}")),
                "{own}: {args}"
            );
        }
        assert!(
            args.find("--tmpfs /tmp").unwrap()
                < args.find("--bind /tmp/wavegate-job-1/tree").unwrap(),
            "the private /tmp comes first, the job's tree is bound onto it"
        );
        assert!(args.ends_with(
            "--chdir /tmp/wavegate-job-1/tree/infra/app -- /usr/bin/timeout --signal=KILL 130s python3 plan.py"
        ), "{args}");
    }

    #[test]
    fn the_apply_only_paths_are_writable_in_apply_commands_alone() {
        let plan = line(&args_of(CommandKind::Plan, Network::None));
        let outputs = line(&args_of(CommandKind::Outputs, Network::None));
        let apply = line(&args_of(CommandKind::Apply, Network::None));
        assert!(plan.contains("--ro-bind /srv/state /srv/state"), "{plan}");
        assert!(
            outputs.contains("--ro-bind /srv/state /srv/state"),
            "{outputs}"
        );
        assert!(apply.contains(" --bind /srv/state /srv/state"), "{apply}");
        for args in [&plan, &outputs, &apply] {
            assert!(args.contains("--ro-bind /opt/tools /opt/tools"), "{args}");
        }
        assert!(
            apply.contains(" --bind /srv/deploy-keys /srv/deploy-keys"),
            "{apply}"
        );
        for args in [&plan, &outputs] {
            assert!(
                !args.contains("/srv/deploy-keys"),
                "a write path is an apply's alone: {args}"
            );
        }
    }

    #[test]
    fn a_profiles_limits_bound_tmp_and_are_set_inside_the_sandbox_around_the_command() {
        let confinement = confinement(CommandKind::Plan);
        let mut profile = profile(Network::None);
        profile.limits = crate::sandbox::profile::Limits {
            memory: Some(2 << 30),
            processes: Some(64),
            disk: Some(1 << 30),
            cpu_time: Some(60),
        };
        let args = line_for(
            &fds(),
            &Invocation {
                argv: &["python3".into(), "plan.py".into()],
                cwd: &confinement.tree,
                confinement: &confinement,
                profile: &profile,
                backstop: Some((Path::new("/usr/bin/timeout"), Duration::from_secs(30))),
                limiter: Some((Path::new("/usr/bin/prlimit"), profile.limits)),
                own_binary: None,
            },
        );
        assert!(
            args.contains("--size 1073741824 --tmpfs /tmp --size 1073741824 --tmpfs /var/tmp"),
            "{args}"
        );
        assert!(args.ends_with(
            "-- /usr/bin/timeout --signal=KILL 30s /usr/bin/prlimit --as=2147483648 --nproc=64 --fsize=1073741824 --cpu=60:65 -- python3 plan.py"
        ), "{args}");
    }

    #[test]
    fn only_host_networking_shares_the_hosts_network() {
        assert!(line(&args_of(CommandKind::Plan, Network::Egress)).contains("--unshare-net"));
        assert!(!line(&args_of(CommandKind::Plan, Network::Host)).contains("--unshare-net"));
    }

    #[test]
    fn an_own_resolver_file_replaces_the_hosts() {
        let confinement = confinement(CommandKind::Plan);
        let mut fds = fds();
        fds.resolv = Some(7);
        fds.sync = Some((8, 9));
        let args = line_for(
            &fds,
            &Invocation {
                argv: &["true".into()],
                cwd: &confinement.tree,
                confinement: &confinement,
                profile: &profile(Network::Egress),
                backstop: None,
                limiter: None,
                own_binary: None,
            },
        );
        assert!(args.contains("--ro-bind-data 7 /etc/resolv.conf"), "{args}");
        assert!(!args.contains("--ro-bind /etc/resolv.conf"), "{args}");
        assert!(args.contains("--info-fd 8 --block-fd 9 -- true"), "{args}");
    }
}
