//! The `LOCK` file: an advisory `flock` held for as long as the store is open.
//!
//! The server takes it exclusive; read-only openers (`sealctl audit`) take it shared, so an
//! audit never runs against a live store and two servers never share one. Both are
//! non-blocking: a held lock is reported at once as [`MetaError::Locked`]. The lock is released
//! when [`StoreLock`] drops (the file descriptor closes). The file itself is empty.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::error::io_err;
use super::MetaError;

/// Name of the lock file under `store_dir`.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// A held advisory lock on `LOCK`.
pub(crate) struct StoreLock {
    _lock: Flock<File>,
}

impl StoreLock {
    /// Locks an existing `LOCK` file (never creates it: opening must not write).
    ///
    /// Returns `Ok(None)` when the file does not exist.
    pub(crate) fn acquire_existing(
        root: &Path,
        exclusive: bool,
    ) -> Result<Option<Self>, MetaError> {
        let path = root.join(LOCK_FILE);
        match File::open(&path) {
            Ok(f) => Self::lock(root, f, exclusive).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("open", &path)(e)),
        }
    }

    /// Creates `LOCK` if needed (mode 0600) and locks it exclusively.
    pub(crate) fn create_and_acquire(root: &Path) -> Result<Self, MetaError> {
        let path = root.join(LOCK_FILE);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("create", &path))?;
        let lock = Self::lock(root, f, true)?;
        super::tmp::fsync_dir(root)?;
        Ok(lock)
    }

    fn lock(root: &Path, f: File, exclusive: bool) -> Result<Self, MetaError> {
        let arg = if exclusive {
            FlockArg::LockExclusiveNonblock
        } else {
            FlockArg::LockSharedNonblock
        };
        match Flock::lock(f, arg) {
            Ok(lock) => Ok(StoreLock { _lock: lock }),
            Err((_, Errno::EWOULDBLOCK)) => Err(MetaError::Locked(root.to_owned())),
            Err((_, errno)) => Err(io_err("lock", &root.join(LOCK_FILE))(std::io::Error::from(
                errno,
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_lock_excludes_every_other_opener() {
        let d = tempfile::tempdir().unwrap();
        assert!(StoreLock::acquire_existing(d.path(), true)
            .unwrap()
            .is_none());
        let held = StoreLock::create_and_acquire(d.path()).unwrap();
        assert!(matches!(
            StoreLock::acquire_existing(d.path(), true),
            Err(MetaError::Locked(_))
        ));
        assert!(matches!(
            StoreLock::acquire_existing(d.path(), false),
            Err(MetaError::Locked(_))
        ));
        drop(held);
        let a = StoreLock::acquire_existing(d.path(), false)
            .unwrap()
            .unwrap();
        let b = StoreLock::acquire_existing(d.path(), false)
            .unwrap()
            .unwrap();
        assert!(matches!(
            StoreLock::acquire_existing(d.path(), true),
            Err(MetaError::Locked(_))
        ));
        drop((a, b));
    }
}
