//! One tree per commit: the files of a commit are written once per server
//! (and once per disk, whatever the replicas) into a content-addressed
//! cache, and every command of every job of that commit sees them through
//! a private writable layer of its own (`launch`'s overlay), so what a
//! command costs does not grow with the repository.
//!
//! Safe across replicas on one disk and across a server killed mid-write:
//! a tree is written under a temporary name and renamed into place whole
//! (the rename is atomic; a replica that loses the race drops its copy);
//! a job holds a shared lock on its tree for as long as it uses it, and the
//! least recently used trees beyond the size cap are removed only under an
//! exclusive lock, so never under a job; what a killed server left half
//! written (its lock free) is swept at start. Locks are `flock`s: the
//! cache belongs on a local filesystem.

use anyhow::{bail, Context as _, Result};
use rustix::fs::FlockOperation;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Where the server keeps the cache: in the temp dir, beside the jobs,
/// shared by the replicas on one disk.
pub(crate) fn cache_dir() -> PathBuf {
    std::env::temp_dir().join("wavegate-trees")
}

/// Prefix of a tree being written: `.tmp-<commit>-<pid>-<nanos>`.
const WRITING: &str = ".tmp-";
/// Prefix of a tree being removed.
const REMOVING: &str = ".trash-";

/// The cache of commits' trees.
#[derive(Debug)]
pub(crate) struct TreeCache {
    dir: PathBuf,
    /// Bytes of file content the cache keeps at most (the trees in use are
    /// kept whatever their size).
    cap: u64,
}

/// A commit's tree, locked against removal while this lives.
#[derive(Debug)]
pub(crate) struct CachedTree {
    pub(crate) path: PathBuf,
    _lock: File,
}

impl TreeCache {
    /// The cache in `dir` (made, owner-only, when missing), with what a
    /// killed server left half written or half removed swept away.
    pub(crate) fn open(dir: &Path, cap: u64) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .with_context(|| format!("cannot restrict {}", dir.display()))?;
        let cache = Self {
            dir: dir.to_owned(),
            cap,
        };
        cache.sweep();
        Ok(cache)
    }

    /// The tree of `commit`, written by `write` (into an empty directory
    /// that does not exist yet) when the cache does not hold it.
    pub(crate) fn tree(
        &self,
        commit: &str,
        write: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<CachedTree> {
        if commit.len() < 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("`{commit}` is not a commit id the tree cache can name a tree by");
        }
        let lock = self.lock_file(commit)?;
        flock(&lock, FlockOperation::LockShared).context("locking a cached tree")?;
        let path = self.dir.join(commit);
        if !path.is_dir() {
            let writing = self.dir.join(format!(
                "{WRITING}{commit}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos()
            ));
            if let Err(e) = write(&writing) {
                let _ = std::fs::remove_dir_all(&writing);
                return Err(e);
            }
            // Its size first: a tree whose size is known is one eviction sees.
            let size = tree_size(&writing);
            std::fs::write(self.dir.join(format!("{commit}.size")), size.to_string())
                .context("recording a cached tree's size")?;
            match std::fs::rename(&writing, &path) {
                Ok(()) => {}
                // Another replica wrote it first: theirs is the same.
                Err(_) if path.is_dir() => {
                    let _ = std::fs::remove_dir_all(&writing);
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&writing);
                    return Err(e).context("putting a tree into the cache");
                }
            }
            self.evict(commit);
        }
        // The lock file's time is when the tree was last used.
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        };
        let _ = rustix::fs::futimens(
            &lock,
            &rustix::fs::Timestamps {
                last_access: now,
                last_modification: now,
            },
        );
        Ok(CachedTree { path, _lock: lock })
    }

    fn lock_file(&self, commit: &str) -> Result<File> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.dir.join(format!("{commit}.lock")))
            .context("opening a cached tree's lock")
    }

    /// Removes the least recently used trees, never `keep` nor one a job
    /// holds, until the rest fit in the cap.
    fn evict(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut trees: Vec<(std::time::SystemTime, String, u64)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.strip_suffix(".size")?.to_owned();
                let size = std::fs::read_to_string(e.path())
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
                let used = std::fs::metadata(self.dir.join(format!("{name}.lock")))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                Some((used, name, size))
            })
            .collect();
        let mut total: u64 = trees.iter().map(|(_, _, size)| size).sum();
        trees.sort();
        for (_, commit, size) in trees {
            if total <= self.cap {
                break;
            }
            if commit == keep {
                continue;
            }
            let Ok(lock) = self.lock_file(&commit) else {
                continue;
            };
            if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
                continue;
            }
            let removing = self
                .dir
                .join(format!("{REMOVING}{commit}-{}", std::process::id()));
            if std::fs::rename(self.dir.join(&commit), &removing).is_ok() {
                let _ = std::fs::remove_dir_all(&removing);
                let _ = std::fs::remove_file(self.dir.join(format!("{commit}.size")));
                total = total.saturating_sub(size);
            }
        }
    }

    /// Removes trees a process no longer running left half written, and
    /// any half removed.
    fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            // A writer holds its commit's lock shared until it is done (pids
            // say nothing across the pid namespaces of replicas on one disk):
            // a half-written tree whose lock is free is a dead writer's.
            let stale = if let Some(rest) = name.strip_prefix(WRITING) {
                let commit = rest.split('-').next().unwrap_or_default();
                self.lock_file(commit).is_ok_and(|lock| {
                    flock(&lock, FlockOperation::NonBlockingLockExclusive).is_ok()
                })
            } else {
                name.starts_with(REMOVING)
            };
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Bytes of the regular files under `dir`.
fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(entry.path()),
                Ok(t) if t.is_file() => total += entry.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

fn flock(file: &File, how: FlockOperation) -> std::io::Result<()> {
    Ok(rustix::fs::flock(file, how)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn commit(n: u8) -> String {
        format!("{n:02x}").repeat(20)
    }

    fn write_files(bytes: usize) -> impl Fn(&Path) -> Result<()> {
        move |dir: &Path| {
            std::fs::create_dir(dir)?;
            std::fs::write(dir.join("main.tf"), vec![b'x'; bytes])?;
            Ok(())
        }
    }

    #[test]
    fn a_commit_is_written_once_and_shared_by_every_job_even_racing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = std::sync::Arc::new(TreeCache::open(dir.path(), 1 << 20).unwrap());
        let writes = std::sync::Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..4)
            .map(|_| {
                let (cache, writes) = (cache.clone(), writes.clone());
                std::thread::spawn(move || {
                    let tree = cache
                        .tree(&commit(1), |dir| {
                            writes.fetch_add(1, Ordering::SeqCst);
                            write_files(10)(dir)
                        })
                        .unwrap();
                    std::fs::read(tree.path.join("main.tf")).unwrap().len()
                })
            })
            .collect();
        for job in jobs {
            assert_eq!(job.join().unwrap(), 10);
        }
        let again = cache.tree(&commit(1), |_| panic!("written again")).unwrap();
        assert!(again.path.ends_with(commit(1)));
        assert!(writes.load(Ordering::SeqCst) >= 1);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "a lost race leaves nothing behind");
    }

    #[test]
    fn the_least_recently_used_trees_go_beyond_the_cap_but_never_one_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TreeCache::open(dir.path(), 250).unwrap();
        let held = cache.tree(&commit(1), write_files(100)).unwrap();
        let second = cache.tree(&commit(2), write_files(100)).unwrap();
        drop(second);
        std::thread::sleep(std::time::Duration::from_millis(20));
        // A third makes 300 bytes: the least recently used one not in use goes.
        let _third = cache.tree(&commit(3), write_files(100)).unwrap();
        assert!(held.path.is_dir(), "a tree a job holds stays, however old");
        assert!(!dir.path().join(commit(2)).exists(), "the unused one went");
        assert!(dir.path().join(commit(3)).is_dir());
    }

    #[test]
    fn what_a_killed_server_left_half_written_is_swept_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir
            .path()
            .join(format!("{WRITING}{}-999999999-1", commit(1)));
        let removing = dir.path().join(format!("{REMOVING}{}-1", commit(2)));
        let alive = dir.path().join(format!("{WRITING}{}-1-1", commit(3)));
        for d in [&dead, &removing, &alive] {
            std::fs::create_dir(d).unwrap();
        }
        // A writer (of any replica) holds its commit's lock while it writes.
        let writer = std::fs::File::create(dir.path().join(format!("{}.lock", commit(3)))).unwrap();
        flock(&writer, FlockOperation::LockShared).unwrap();
        TreeCache::open(dir.path(), 1 << 20).unwrap();
        assert!(!dead.exists() && !removing.exists());
        assert!(alive.exists(), "a write in progress is left alone");
        let e = TreeCache::open(dir.path(), 1)
            .unwrap()
            .tree("main", write_files(1))
            .unwrap_err();
        assert!(e.to_string().contains("is not a commit id"), "{e}");
    }
}
