//! Starts child processes from one thread that lives as long as the process.
//!
//! Every child asks the kernel to kill it when its parent goes
//! (`PR_SET_PDEATHSIG`), so nothing wavegate starts outlives a server that
//! was killed. Linux ties that signal to the *thread* that forked, not the
//! process: a child forked on a pool thread would be killed the moment the
//! pool retired that thread. So every child is forked on this one thread.

use rustix::io::{Errno, FdFlags};
use rustix::process::Signal;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::mpsc;
use std::sync::OnceLock;
use tokio::process::{Child, Command};

struct Request {
    command: Command,
    runtime: tokio::runtime::Handle,
    answer: mpsc::SyncSender<io::Result<Child>>,
}

static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();

fn spawner() -> &'static mpsc::Sender<Request> {
    SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("wavegate-spawner".into())
            .spawn(move || {
                for mut request in incoming {
                    // The child is reaped by the runtime that waits for it.
                    let _entered = request.runtime.enter();
                    let _ = request.answer.send(request.command.spawn());
                }
            })
            .expect("the spawner thread starts");
        requests
    })
}

/// Starts `command` (in the calling runtime) so that it is killed when this
/// process dies. `inherit` are descriptors the child keeps, at the same
/// numbers (they must be open and close-on-exec in this process until the
/// call returns); every other descriptor wavegate opens is close-on-exec.
pub(crate) fn spawn(command: Command, inherit: &[RawFd]) -> io::Result<Child> {
    spawn_in(command, inherit, Vec::new(), None)
}

/// [`spawn`], the child joining the cgroups whose `cgroup.procs` files are
/// `cgroups` before it execs (so nothing it starts escapes their limits),
/// then mounting `overlay`'s view of a cached tree in namespaces of its own.
pub(crate) fn spawn_in(
    mut command: Command,
    inherit: &[RawFd],
    cgroups: Vec<std::ffi::CString>,
    overlay: Option<super::overlay::OverlaySpec>,
) -> io::Result<Child> {
    let parent = Some(rustix::process::getpid());
    let inherit = inherit.to_vec();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (close_range, getrlimit, fcntl, prctl,
    // getppid, open, write, close, unshare, mount, mkdir); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            super::cgroup::join_in_child(&cgroups)?;
            if let Some(overlay) = &overlay {
                super::overlay::mount_in_child(overlay)?;
            }
            // Not even what the server itself inherited open (its
            // supervisor's pipes, sockets, files) reaches the child.
            close_on_exec_from(3);
            for fd in &inherit {
                // SAFETY: open in the child, as the caller keeps `inherit`
                // open until the spawn returns.
                rustix::io::fcntl_setfd(BorrowedFd::borrow_raw(*fd), FdFlags::empty())?;
            }
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The server died between the fork and the prctl: go with it.
            if rustix::process::getppid() != parent {
                return Err(Errno::SRCH.into());
            }
            Ok(())
        });
    }
    let (answer, answered) = mpsc::sync_channel(1);
    let request = Request {
        command,
        runtime: tokio::runtime::Handle::current(),
        answer,
    };
    let stopped = || io::Error::other("wavegate's process spawner thread has stopped");
    spawner().send(request).map_err(|_| stopped())?;
    answered.recv().map_err(|_| stopped())?
}

/// Marks every descriptor from `first` up close-on-exec. Called in a
/// forked child between its stdio set-up and exec; what it must keep is
/// cleared again afterwards.
fn close_on_exec_from(first: libc::c_uint) {
    // SAFETY: close_range only changes descriptor flags (Linux 5.11); rustix
    // has no close_range.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if done {
        return;
    }
    // An older kernel: one by one, up to the descriptor limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills `limit`; fcntl on a closed descriptor fails
    // harmlessly. (libc: rustix's fcntl takes only descriptors known open,
    // and its getrlimit cannot report a failure.)
    unsafe {
        let last = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as libc::c_int
        } else {
            1 << 16
        };
        for fd in first as libc::c_int..last {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_outlives_the_thread_that_asked_for_it() {
        let runtime = tokio::runtime::Handle::current();
        // The asking thread ends right after the spawn; with a parent-death
        // signal tied to it, the child would be killed then.
        let child = std::thread::spawn(move || {
            let _entered = runtime.enter();
            let mut command = Command::new("sleep");
            command.arg("1");
            spawn(command, &[]).unwrap()
        })
        .join()
        .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let pid = child.id().expect("not reaped yet") as i32;
        let pid = rustix::process::Pid::from_raw(pid).expect("a child's pid");
        assert_eq!(
            rustix::process::test_kill_process(pid),
            Ok(()),
            "the child is alive"
        );
        let status = child.wait_with_output().await.unwrap().status;
        assert!(status.success(), "it ran to its end: {status:?}");
    }

    #[tokio::test]
    async fn descriptors_are_inherited_only_when_asked_for() {
        use std::os::fd::AsRawFd;
        let (read, write) = crate::sandbox::pipe().unwrap();
        let fd = write.as_raw_fd();
        let probe = |inherit: Vec<RawFd>| {
            let mut command = Command::new("sh");
            command
                .arg("-c")
                .arg(format!(
                    "[ -e /proc/self/fd/{fd} ] && echo open || echo closed"
                ))
                .stdout(std::process::Stdio::piped());
            async move {
                let child = spawn(command, &inherit).unwrap();
                String::from_utf8(child.wait_with_output().await.unwrap().stdout).unwrap()
            }
        };
        assert_eq!(probe(vec![]).await.trim(), "closed");
        assert_eq!(probe(vec![fd]).await.trim(), "open");

        // One open without close-on-exec, as the server may have inherited
        // it from whatever started it, is not passed on either.
        rustix::io::fcntl_setfd(&write, rustix::io::FdFlags::empty()).unwrap();
        assert_eq!(probe(vec![]).await.trim(), "closed");
        assert_eq!(probe(vec![fd]).await.trim(), "open");
        drop((read, write));
    }
}
