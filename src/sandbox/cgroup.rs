//! Control groups for commands: a profile's memory and process limits held
//! by the kernel for a command and everything it starts, whatever user the
//! server runs as (a process limit set as an rlimit does not bind a server
//! running as root), with the kernel's own count of what hit a limit.
//!
//! cgroup v2 when the server's cgroup may be managed (systemd
//! `Delegate=yes`, a container's own cgroup): the server moves itself into
//! a leaf of its cgroup so the controllers can be enabled below it, and
//! each command gets a cgroup under `wavegate-jobs/`. cgroup v1 where the
//! `memory` and `pids` hierarchies are mounted writable: a cgroup per
//! command under the server's own in each. Otherwise nothing here, and the
//! sandbox sets resource limits instead (`bwrap.rs`).

use super::profile::{LimitHit, Limits};
use rustix::fs::{self, Mode, OFlags};
use rustix::process::{Pid, Signal};
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How commands' cgroups are made here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cgroups {
    /// The unified hierarchy: commands' cgroups go under `jobs`.
    V2 { jobs: PathBuf },
    /// The legacy hierarchies: the server's own cgroup in each that is usable.
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
    },
}

/// Names each command's cgroup apart from the others of this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Prefix of every command cgroup's name: `wavegate-<server pid>-<n>`.
const PREFIX: &str = "wavegate-";

/// One mount from `/proc/self/mountinfo`: where, what type, its super options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The directory of the filesystem mounted (`/docker/<id>` where a
    /// container sees only its own part of a hierarchy).
    pub(crate) root: String,
    pub(crate) point: PathBuf,
    pub(crate) fstype: String,
    pub(crate) options: Vec<String>,
}

/// The mounts in `mountinfo`'s text (mount points unescaped: `\040` is a space).
pub(crate) fn mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut fields = left.split(' ');
            let root = fields.nth(3)?.replace("\\040", " ");
            let point = fields.next()?;
            let mut right = right.split(' ');
            let fstype = right.next()?.to_owned();
            let _source = right.next();
            let options = right
                .next()
                .unwrap_or("")
                .split(',')
                .map(str::to_owned)
                .collect();
            Some(Mount {
                root,
                point: PathBuf::from(point.replace("\\040", " ")),
                fstype,
                options,
            })
        })
        .collect()
}

/// The process's cgroup per hierarchy from `/proc/self/cgroup`'s text:
/// (controllers, path); v2's line has no controllers.
pub(crate) fn memberships(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            Some((controllers, path.to_owned()))
        })
        .collect()
}

/// Where the process's own cgroup of `controller` is (v1), or of the
/// unified hierarchy (`None`).
pub(crate) fn own_cgroup(
    mounts: &[Mount],
    memberships: &[(Vec<String>, String)],
    controller: Option<&str>,
) -> Option<PathBuf> {
    let (mount, path) = match controller {
        None => (
            mounts.iter().find(|m| m.fstype == "cgroup2")?,
            &memberships.iter().find(|(c, _)| c.is_empty())?.1,
        ),
        Some(name) => (
            mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == name))?,
            &memberships
                .iter()
                .find(|(c, _)| c.iter().any(|c| c == name))?
                .1,
        ),
    };
    // The membership is named from the hierarchy's root, the mount shows
    // it from its own: `/docker/<id>/x` under a mount of `/docker/<id>`.
    let within = match path.strip_prefix(mount.root.trim_end_matches('/')) {
        Some(rest) if mount.root != "/" && (rest.is_empty() || rest.starts_with('/')) => rest,
        _ => path.as_str(),
    };
    Some(mount.point.join(within.trim_start_matches('/')))
}

impl Cgroups {
    /// The cgroups this server may make for its commands, or why none:
    /// found once per process (delegating a cgroup v2 moves the process).
    pub(crate) fn detect() -> Result<Self, String> {
        static FOUND: std::sync::OnceLock<Result<Cgroups, String>> = std::sync::OnceLock::new();
        FOUND.get_or_init(Self::find).clone()
    }

    fn find() -> Result<Self, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts = mounts(&mountinfo);
        let memberships = memberships(&own);
        let v2 = own_cgroup(&mounts, &memberships, None).map(|dir| Self::delegate_v2(&dir));
        let v2_problem = match v2 {
            Some(Ok(cgroups)) => return Ok(cgroups),
            Some(Err(problem)) => problem,
            None => "no cgroup v2 hierarchy is mounted".to_owned(),
        };
        let usable = |controller: &str| {
            own_cgroup(&mounts, &memberships, Some(controller)).filter(|dir| try_child(dir).is_ok())
        };
        let (memory, pids) = (usable("memory"), usable("pids"));
        if memory.is_none() && pids.is_none() {
            return Err(format!(
                "{v2_problem}, and no cgroup v1 memory or pids hierarchy is writable"
            ));
        }
        Ok(Self::V1 { memory, pids })
    }

    /// Makes `own` (the server's cgroup v2) hold commands' cgroups: the
    /// server moves into a leaf of it (a cgroup with processes cannot
    /// enable controllers below it), `memory` and `pids` are enabled, and
    /// `wavegate-jobs/` holds the commands'.
    fn delegate_v2(own: &Path) -> Result<Self, String> {
        let read = |file: &str| std::fs::read_to_string(own.join(file)).unwrap_or_default();
        let available = read("cgroup.controllers");
        let has = |c: &str| available.split_whitespace().any(|a| a == c);
        if !(has("memory") && has("pids")) {
            return Err(format!(
                "the server's cgroup v2 ({}) has no memory and pids controllers to give its commands (delegate them: systemd `Delegate=yes`)",
                own.display()
            ));
        }
        let failed = |what: &str, e: io::Error| {
            format!(
                "cannot {what} in the server's cgroup v2 ({}): {e} (delegate it: systemd `Delegate=yes`, or a container's own cgroup)",
                own.display()
            )
        };
        let enabled = read("cgroup.subtree_control");
        let on = |c: &str| enabled.split_whitespace().any(|e| e == c);
        if !(on("memory") && on("pids")) {
            let leaf = own.join("wavegate-server");
            make_dir(&leaf).map_err(|e| failed("make a cgroup", e))?;
            std::fs::write(leaf.join("cgroup.procs"), "0")
                .map_err(|e| failed("move the server into a cgroup", e))?;
            // A cgroup with processes of its own cannot enable controllers
            // below it: whatever else shares the server's (an init, a
            // healthcheck caught running) moves along; the kernel may also
            // answer busy a moment after a move.
            let mut enabled = Err(io::Error::from(io::ErrorKind::ResourceBusy));
            for _ in 0..5 {
                for pid in read("cgroup.procs").split_whitespace() {
                    let _ = std::fs::write(leaf.join("cgroup.procs"), pid);
                }
                enabled = std::fs::write(own.join("cgroup.subtree_control"), "+memory +pids");
                if enabled.is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            enabled.map_err(|e| {
                let sharing = read("cgroup.procs");
                if sharing.trim().is_empty() {
                    failed("enable the memory and pids controllers", e)
                } else {
                    format!(
                        "cannot enable the memory and pids controllers in the server's cgroup v2 ({}): processes that are not the server's share it and cannot be moved ({}): {e}; run wavegate in a cgroup of its own",
                        own.display(),
                        sharing.split_whitespace().collect::<Vec<_>>().join(", ")
                    )
                }
            })?;
        }
        let jobs = own.join("wavegate-jobs");
        make_dir(&jobs).map_err(|e| failed("make a cgroup", e))?;
        std::fs::write(jobs.join("cgroup.subtree_control"), "+memory +pids")
            .map_err(|e| failed("enable the memory and pids controllers", e))?;
        try_child(&jobs).map_err(|e| failed("make a cgroup", e))?;
        Ok(Self::V2 { jobs })
    }

    /// What holds which limits, for the log, `/readyz` and `/metrics`.
    pub(crate) fn mechanism(&self) -> &'static str {
        match self {
            Self::V2 { .. } => "cgroup-v2",
            Self::V1 { .. } => "cgroup-v1",
        }
    }

    pub(crate) fn holds_memory(&self) -> bool {
        matches!(
            self,
            Self::V2 { .. }
                | Self::V1 {
                    memory: Some(_),
                    ..
                }
        )
    }

    pub(crate) fn holds_processes(&self) -> bool {
        matches!(self, Self::V2 { .. } | Self::V1 { pids: Some(_), .. })
    }

    /// A cgroup for one command with `limits`' memory and process limits;
    /// `None` when the profile sets neither.
    pub(crate) fn create(&self, limits: &Limits) -> io::Result<Option<CommandCgroup>> {
        if limits.memory.is_none() && limits.processes.is_none() {
            return Ok(None);
        }
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut group = CommandCgroup { dirs: Vec::new() };
        match self {
            Self::V2 { jobs } => {
                let dir = jobs.join(&name);
                make_dir(&dir)?;
                group.dirs.push(dir.clone());
                if let Some(bytes) = limits.memory {
                    std::fs::write(dir.join("memory.max"), bytes.to_string())?;
                    // Swap would let it hold more than the limit says.
                    let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                }
                if let Some(n) = limits.processes {
                    std::fs::write(dir.join("pids.max"), n.to_string())?;
                }
            }
            Self::V1 { memory, pids } => {
                if let (Some(base), Some(bytes)) = (memory, limits.memory) {
                    let dir = base.join(&name);
                    make_dir(&dir)?;
                    group.dirs.push(dir.clone());
                    std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())?;
                    let _ =
                        std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
                }
                if let (Some(base), Some(n)) = (pids, limits.processes) {
                    let dir = base.join(&name);
                    make_dir(&dir)?;
                    group.dirs.push(dir.clone());
                    std::fs::write(dir.join("pids.max"), n.to_string())?;
                }
            }
        }
        Ok(Some(group))
    }

    /// Removes the cgroups that processes no longer running left behind (a
    /// server killed mid-command cannot); answers how many.
    pub(crate) fn sweep(&self) -> usize {
        let bases: Vec<&Path> = match self {
            Self::V2 { jobs } => vec![jobs],
            Self::V1 { memory, pids } => memory.iter().chain(pids).map(PathBuf::as_path).collect(),
        };
        let mut removed = 0;
        for base in bases {
            let Ok(entries) = std::fs::read_dir(base) else {
                continue;
            };
            for entry in entries.flatten() {
                if super::process::left_by_a_dead_process(&entry.file_name(), PREFIX)
                    && std::fs::remove_dir(entry.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }
}

/// The cgroups of one command (one per v1 hierarchy, or one v2 cgroup).
#[derive(Debug)]
pub(crate) struct CommandCgroup {
    dirs: Vec<PathBuf>,
}

impl CommandCgroup {
    /// The `cgroup.procs` files the command joins before it starts.
    pub(crate) fn procs_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|dir| {
                CString::new(
                    dir.join("cgroup.procs")
                        .into_os_string()
                        .into_encoded_bytes(),
                )
                .ok()
            })
            .collect()
    }

    /// The limit the kernel enforced on the command, by its own count: an
    /// OOM kill at the memory limit, a fork refused at the process limit.
    pub(crate) fn hit(&self, limits: &Limits) -> Option<LimitHit> {
        let count = |file: &str, key: &str| -> u64 {
            self.dirs
                .iter()
                .filter_map(|dir| std::fs::read_to_string(dir.join(file)).ok())
                .flat_map(|text| {
                    text.lines()
                        .filter_map(|line| line.strip_prefix(key)?.trim().parse::<u64>().ok())
                        .collect::<Vec<_>>()
                })
                .sum()
        };
        if let Some(bytes) = limits.memory {
            // v2 `memory.events`, v1 `memory.oom_control`.
            if count("memory.events", "oom_kill ") + count("memory.oom_control", "oom_kill ") > 0 {
                return Some(LimitHit::Memory(bytes));
            }
        }
        if let Some(n) = limits.processes {
            if count("pids.events", "max ") > 0 {
                return Some(LimitHit::Processes(n));
            }
        }
        None
    }

    /// Removes the cgroups once the command and everything it started are
    /// gone (the sandbox's pid namespace ends them; an exiting process may
    /// still hold its cgroup a moment).
    pub(crate) async fn remove(mut self) {
        for dir in std::mem::take(&mut self.dirs).iter() {
            for _ in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) => {
                        kill_all(dir);
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            }
        }
    }
}

impl Drop for CommandCgroup {
    /// A command that never started, or whose run was dropped half-way:
    /// its cgroups go now (what is left, at the next start's sweep).
    fn drop(&mut self) {
        for dir in &self.dirs {
            kill_all(dir);
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Kills whatever is still in the cgroup at `dir`.
fn kill_all(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in text
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .filter(|pid| *pid > 0)
        .filter_map(Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Makes and removes a child of `dir`: this process may manage it.
fn try_child(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!("{PREFIX}probe-{}", std::process::id()));
    make_dir(&probe)?;
    std::fs::remove_dir(&probe)
}

/// Joins the calling process to the cgroups whose `cgroup.procs` files are
/// `files`. Called in a forked child before exec: only async-signal-safe
/// calls (open, write, close).
pub(crate) fn join_in_child(files: &[CString]) -> io::Result<()> {
    for file in files {
        let fd = fs::openat(
            fs::CWD,
            file.as_c_str(),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        if rustix::io::write(&fd, b"0")? != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTINFO: &str = "\
35 25 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
38 35 0:33 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
39 35 0:34 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,pids
40 35 0:35 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,cpu,cpuacct
";

    const HYBRID_CGROUP: &str = "\
8:pids:/
4:memory:/process_api/0a1b
2:cpu,cpuacct:/
0::/
";

    #[test]
    fn the_servers_own_cgroup_is_found_in_each_hierarchy() {
        let mounts = mounts(HYBRID_MOUNTINFO);
        let memberships = memberships(HYBRID_CGROUP);
        assert_eq!(
            own_cgroup(&mounts, &memberships, Some("memory")),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/0a1b"))
        );
        assert_eq!(
            own_cgroup(&mounts, &memberships, Some("pids")),
            Some(PathBuf::from("/sys/fs/cgroup/pids/"))
        );
        assert_eq!(
            own_cgroup(&mounts, &memberships, None),
            Some(PathBuf::from("/sys/fs/cgroup/unified/"))
        );
        assert_eq!(own_cgroup(&mounts, &memberships, Some("blkio")), None);
    }

    #[test]
    fn a_containers_mount_of_its_own_part_of_a_hierarchy_is_read_from_its_root() {
        let mounts = mounts(
            "1045 1040 0:33 /docker/0a1b /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
        );
        let memberships = memberships("4:memory:/docker/0a1b/jobs\n");
        assert_eq!(
            own_cgroup(&mounts, &memberships, Some("memory")),
            Some(PathBuf::from("/sys/fs/cgroup/memory/jobs"))
        );
    }

    #[test]
    fn a_pure_v2_host_is_read_from_the_unified_line() {
        let mounts = mounts(
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
        );
        let memberships = memberships("0::/system.slice/wavegate.service\n");
        assert_eq!(
            own_cgroup(&mounts, &memberships, None),
            Some(PathBuf::from(
                "/sys/fs/cgroup/system.slice/wavegate.service"
            ))
        );
        assert_eq!(own_cgroup(&mounts, &memberships, Some("pids")), None);
    }
}
