//! The files a command shares with the bot: its plan, outputs and inputs
//! files, in a directory the command may change as it likes. The bot never
//! follows a symbolic link there (a plan file linked to a host file would be
//! read into the report; an inputs file linked to one would be overwritten),
//! reads only regular files, and reads no more than a cap.

use rustix::fs::{self, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::CString;
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Why a file a command wrote cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("it was not written")]
    Missing,
    #[error("it is {0}, not a regular file; write the file itself (wavegate never follows a link there)")]
    NotRegular(&'static str),
    #[error("it is larger than {cap} bytes, as much as wavegate reads")]
    TooLarge { cap: u64 },
    #[error("{0}")]
    Io(#[from] io::Error),
}

fn c_name(name: &str) -> io::Result<CString> {
    if name.contains('/') || name == ".." || name == "." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{name}` is not a file name"),
        ));
    }
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a name"))
}

/// Opens `dir` itself without following a link to it.
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?;
    Ok(fs::openat(
        fs::CWD,
        path.as_c_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

fn kind_of(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a named pipe",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        _ => "not a regular file",
    }
}

/// The text [`FileError::NotRegular`] holds for a kind named `text` (as a
/// command's files come back from where it ran).
pub(crate) fn kind_named(text: &str) -> &'static str {
    let formats = [
        libc::S_IFDIR,
        libc::S_IFLNK,
        libc::S_IFIFO,
        libc::S_IFSOCK,
        libc::S_IFCHR,
    ];
    formats
        .map(kind_of)
        .into_iter()
        .find(|kind| *kind == text)
        .unwrap_or(kind_of(0))
}

/// Reads `dir/name`, a file a command wrote: a regular file, not a link, of
/// at most `cap` bytes.
pub(crate) fn read_file(dir: &Path, name: &str, cap: u64) -> Result<Vec<u8>, FileError> {
    let dir = match open_dir(dir) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(FileError::Missing),
        Err(e)
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            return Err(FileError::NotRegular(
                "in a directory that was replaced by a link",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    let name = c_name(name)?;
    let fd = fs::openat(
        &dir,
        name.as_c_str(),
        // Non-blocking: a named pipe put there must not hang the bot.
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::NOENT => FileError::Missing,
        Errno::LOOP => FileError::NotRegular("a symbolic link"),
        e => io::Error::from(e).into(),
    })?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    let mode = std::os::unix::fs::MetadataExt::mode(&meta) as libc::mode_t;
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Err(FileError::NotRegular(kind_of(mode)));
    }
    if meta.len() > cap {
        return Err(FileError::TooLarge { cap });
    }
    // It may still grow while being read: read one byte past the cap to tell.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(FileError::TooLarge { cap });
    }
    Ok(bytes)
}

/// Writes `dir/name` afresh: whatever the command left at that name (a file,
/// a link) is removed first, and the new file is created, never opened
/// through a link.
pub(crate) fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let dir = open_dir(dir)?;
    let name = c_name(name)?;
    match fs::unlinkat(&dir, name.as_c_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = fs::openat(
        &dir,
        name.as_c_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    std::fs::File::from(fd).write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_under_the_cap_is_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plan.json"), "{}").unwrap();
        assert_eq!(read_file(dir.path(), "plan.json", 10).unwrap(), b"{}");
        assert!(matches!(
            read_file(dir.path(), "absent.json", 10),
            Err(FileError::Missing)
        ));
    }

    #[test]
    fn a_link_a_pipe_a_directory_or_an_oversized_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "host secret").unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::os::unix::fs::symlink(&secret, files.join("plan.json")).unwrap();
        let e = read_file(&files, "plan.json", 1000).unwrap_err();
        assert!(matches!(e, FileError::NotRegular("a symbolic link")), "{e}");

        let fifo = files.join("pipe.json");
        fs::mknodat(
            fs::CWD,
            &fifo,
            fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read_file(&files, "pipe.json", 1000).unwrap_err();
        assert!(matches!(e, FileError::NotRegular("a named pipe")), "{e}");

        std::fs::create_dir(files.join("dir.json")).unwrap();
        let e = read_file(&files, "dir.json", 1000).unwrap_err();
        assert!(matches!(e, FileError::NotRegular("a directory")), "{e}");

        std::fs::write(files.join("big.json"), vec![b' '; 11]).unwrap();
        let e = read_file(&files, "big.json", 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is larger than 10 bytes, as much as wavegate reads"
        );

        // The directory itself swapped for a link to elsewhere.
        let swapped = dir.path().join("swapped");
        std::os::unix::fs::symlink(dir.path(), &swapped).unwrap();
        assert!(matches!(
            read_file(&swapped, "secret", 1000),
            Err(FileError::NotRegular(_))
        ));
    }

    #[test]
    fn writing_replaces_a_planted_link_instead_of_writing_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::os::unix::fs::symlink(&victim, files.join("inputs.json")).unwrap();
        write_file(&files, "inputs.json", b"{\"known\": {}}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(
            std::fs::read_to_string(files.join("inputs.json")).unwrap(),
            "{\"known\": {}}"
        );
        assert!(!std::fs::symlink_metadata(files.join("inputs.json"))
            .unwrap()
            .file_type()
            .is_symlink());

        assert!(write_file(&files, "../escape", b"x").is_err());
    }
}
