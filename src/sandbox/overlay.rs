//! A command's private view of a cached tree: bubblewrap (0.8, as Debian
//! ships it) has no overlay of its own, so the process that becomes
//! bubblewrap first enters a user and mount namespace of its own (its uid
//! and gid mapped to themselves), mounts a tmpfs for the writable layer (as
//! big as the profile's `disk`) and an overlay of the cached tree under it
//! at the job's tree path, then execs bubblewrap, which binds that path as
//! it bound a copy before. What the command writes lands in the tmpfs and
//! is gone with it; the cache is never written. Nothing is mounted in the
//! server's own namespace, and the namespaces end with the command.

use rustix::fs::{self, Mode, OFlags};
use rustix::mount::{self, MountFlags, MountPropagationFlags};
use rustix::thread::UnshareFlags;
use std::ffi::{CStr, CString};
use std::io;
use std::path::Path;

/// What the child mounts, prepared (allocated) before the fork.
#[derive(Debug)]
pub(crate) struct OverlaySpec {
    uid_map: CString,
    gid_map: CString,
    /// An empty directory of the job's for the tmpfs.
    layer: CString,
    layer_options: CString,
    upper: CString,
    work: CString,
    /// Where the view is mounted: the job's tree path.
    target: CString,
    options: CString,
}

fn c(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

impl OverlaySpec {
    /// `lower` seen at `target` with a writable layer in a tmpfs at
    /// `layer` of `size` bytes at most (`None`: tmpfs's default, half the
    /// memory).
    pub(crate) fn new(
        lower: &Path,
        target: &Path,
        layer: &Path,
        size: Option<u64>,
    ) -> io::Result<Self> {
        for path in [lower, target, layer] {
            let text = path.to_string_lossy();
            if text.contains([',', ':', '\\']) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{text} cannot be named in an overlay's options"),
                ));
            }
        }
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let upper = layer.join("upper");
        let work = layer.join("work");
        let size = size.map(|s| format!(",size={s}")).unwrap_or_default();
        Ok(Self {
            uid_map: CString::new(format!("{uid} {uid} 1")).expect("no NUL"),
            gid_map: CString::new(format!("{gid} {gid} 1")).expect("no NUL"),
            layer: c(layer)?,
            layer_options: CString::new(format!("mode=0700{size}")).expect("no NUL"),
            upper: c(&upper)?,
            work: c(&work)?,
            target: c(target)?,
            options: CString::new(format!(
                "lowerdir={},upperdir={},workdir={},userxattr",
                lower.display(),
                upper.display(),
                work.display()
            ))
            .expect("no NUL"),
        })
    }
}

/// Enters a user and mount namespace of the calling process's own and
/// mounts `spec`'s view there. Called in a forked child before exec: only
/// async-signal-safe calls (unshare, open, write, close, mount, mkdir).
pub(crate) fn mount_in_child(spec: &OverlaySpec) -> io::Result<()> {
    // SAFETY: what makes unshare unsafe is FILES (threads that no longer
    // share descriptors), not asked for here; and this child has one thread.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)? };
    write_file(c"/proc/self/setgroups", c"deny")?;
    write_file(c"/proc/self/uid_map", &spec.uid_map)?;
    write_file(c"/proc/self/gid_map", &spec.gid_map)?;
    // Nothing mounted here reaches the server's namespace.
    mount::mount_change(
        c"/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )?;
    mount::mount(
        c"tmpfs",
        spec.layer.as_c_str(),
        c"tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        spec.layer_options.as_c_str(),
    )?;
    for dir in [&spec.upper, &spec.work] {
        fs::mkdir(dir.as_c_str(), Mode::from_raw_mode(0o755))?;
    }
    mount::mount(
        c"overlay",
        spec.target.as_c_str(),
        c"overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        spec.options.as_c_str(),
    )?;
    Ok(())
}

/// Writes `content` to `path`, whole, in one call; only async-signal-safe
/// calls.
fn write_file(path: &CStr, content: &CStr) -> io::Result<()> {
    let fd = fs::openat(
        fs::CWD,
        path,
        OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let bytes = content.to_bytes();
    if rustix::io::write(&fd, bytes)? != bytes.len() {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
