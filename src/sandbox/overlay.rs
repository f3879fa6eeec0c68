//! A command's private view of a cached tree: bubblewrap (0.8, as Debian
//! ships it) has no overlay of its own, so the process that becomes
//! bubblewrap first enters a user and mount namespace of its own (its uid
//! and gid mapped to themselves), mounts a tmpfs for the writable layer (as
//! big as the profile's `disk`) and an overlay of the cached tree under it
//! at the job's tree path, then execs bubblewrap, which binds that path as
//! it bound a copy before. What the command writes lands in the tmpfs and
//! is gone with it; the cache is never written. Nothing is mounted in the
//! server's own namespace, and the namespaces end with the command.

use std::ffi::CString;
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
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
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
    // SAFETY: plain system calls on NUL-terminated strings owned by `spec`.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
            return Err(io::Error::last_os_error());
        }
        write_file(c"/proc/self/setgroups", c"deny")?;
        write_file(c"/proc/self/uid_map", &spec.uid_map)?;
        write_file(c"/proc/self/gid_map", &spec.gid_map)?;
        // Nothing mounted here reaches the server's namespace.
        check(libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            c"tmpfs".as_ptr(),
            spec.layer.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            spec.layer_options.as_ptr().cast(),
        ))?;
        for dir in [&spec.upper, &spec.work] {
            check(libc::mkdir(dir.as_ptr(), 0o755))?;
        }
        check(libc::mount(
            c"overlay".as_ptr(),
            spec.target.as_ptr(),
            c"overlay".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            spec.options.as_ptr().cast(),
        ))?;
    }
    Ok(())
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `content` to `path`, whole, in one call.
///
/// # Safety
/// Only async-signal-safe calls; `path` and `content` are NUL-terminated.
unsafe fn write_file(path: &std::ffi::CStr, content: &std::ffi::CStr) -> io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let bytes = content.to_bytes();
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    let error = io::Error::last_os_error();
    libc::close(fd);
    if written != bytes.len() as isize {
        return Err(error);
    }
    Ok(())
}
