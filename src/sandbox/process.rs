//! Which process a command is, in terms that survive a restart: the host
//! (boot and pid namespace), its pid and when it started. A server that
//! resumes an apply another server left `applying` uses it to tell whether
//! that command can still be running before anything is planned again.

use serde::{Deserialize, Serialize};

/// A process, told apart from a later one that reuses its pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessId {
    pub(crate) pid: u32,
    /// Its start time, in clock ticks after boot (`/proc/PID/stat` field 22).
    pub(crate) start: u64,
}

/// This host as a process sees it: its boot and its pid namespace. Two
/// servers with the same answer see each other's processes.
pub(crate) fn host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_owned())
        .unwrap_or_else(|_| "unknown-boot".into());
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "unknown-pid-namespace".into());
    format!("{boot}/{namespace}")
}

/// The process running as `pid` now, if any.
pub(crate) fn identify(pid: u32) -> Option<ProcessId> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is parenthesised and may hold spaces: count after its end.
    let after_name = stat.rsplit_once(')')?.1;
    // Field 22 of the line is the 20th after the name.
    let start = after_name.split_whitespace().nth(19)?.parse().ok()?;
    Some(ProcessId { pid, start })
}

/// Whether `name` is `<prefix><pid>-…` and process `pid` no longer runs: a
/// leftover of a server killed before it could clean up after itself.
pub(crate) fn left_by_a_dead_process(name: &std::ffi::OsStr, prefix: &str) -> bool {
    name.to_str()
        .and_then(|n| n.strip_prefix(prefix))
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
        .is_some_and(|pid| identify(pid).is_none())
}

/// Whether `process` (not merely its pid) is still there; a zombie is gone.
pub(crate) fn is_alive(process: &ProcessId) -> bool {
    let Some(now) = identify(process.pid) else {
        return false;
    };
    let zombie = std::fs::read_to_string(format!("/proc/{}/stat", process.pid))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false);
    now == *process && !zombie
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_pid_and_start_and_not_after_it_ended() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let id = identify(child.id()).unwrap();
        assert!(is_alive(&id));
        assert!(
            !is_alive(&ProcessId {
                start: id.start + 1,
                ..id.clone()
            }),
            "a pid reused by a later process is not the same process"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_alive(&id));
        assert_eq!(host_id(), host_id());
        assert!(host_id().contains("pid:["), "{}", host_id());
    }
}
