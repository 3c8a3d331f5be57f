//! Atomic small-file writes through `tmp/`, directory fsyncs, shredding, and the startup sweep
//! of `tmp/`.
//!
//! Every metadata file (`STORE`, keyring and catalog generations, consumer state) is written
//! as: create `tmp/<random 32 hex>` (mode 0600, never overwriting), write, `fsync`, `rename`
//! onto the destination, `fsync` the destination directory. A crash leaves either the old file
//! or the new one, plus at most a leftover in `tmp/`, which [`clear_tmp`] removes at startup —
//! only after the key was verified, so a wrong key never deletes anything.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::io_err;
use super::ids::random_unreserved_id;
use super::MetaError;

/// Name of the in-flight directory under `store_dir`.
pub(crate) const TMP_DIR: &str = "tmp";

/// `fsync`s a directory so entries created, renamed or removed in it are durable.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), MetaError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir))
}

/// A fresh, unused path in `tmp/` (32 random hex characters, no name information).
pub(crate) fn tmp_path(root: &Path) -> PathBuf {
    root.join(TMP_DIR)
        .join(data_encoding::HEXLOWER.encode(&random_unreserved_id()))
}

/// Writes `bytes` to `dest` atomically: tmp file, fsync, rename, fsync of `dest`'s directory.
///
/// # Errors
/// [`MetaError::Io`] naming the step and file.
pub(crate) fn write_atomic(root: &Path, dest: &Path, bytes: &[u8]) -> Result<(), MetaError> {
    let tmp = tmp_path(root);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err("create", &tmp))?;
    f.write_all(bytes).map_err(io_err("write", &tmp))?;
    f.sync_all().map_err(io_err("fsync", &tmp))?;
    drop(f);
    fs::rename(&tmp, dest).map_err(io_err("rename into place", dest))?;
    fsync_dir(parent_of(dest))
}

/// Creates a directory (mode 0700) if it does not exist and fsyncs its parent.
pub(crate) fn create_dir_durable(dir: &Path) -> Result<(), MetaError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => fsync_dir(parent_of(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("create directory", dir)(e)),
    }
}

/// Overwrites a file with random bytes, fdatasyncs, and removes it.
///
/// The removal is not made durable (no directory fsync): what a crash could bring back is the
/// name of a file whose bytes are already noise on disk, a generation not in force, which the
/// next open shreds again. Two fsyncs fewer on every stream delete.
///
/// Best effort against recovery from the same device: copy-on-write file systems, SSD
/// remapping and backups may keep old blocks, which is why the key hierarchy never relies on
/// shredding alone (see `docs/key-hierarchy.md`, "Erasure").
pub(crate) fn shred_and_remove(path: &Path) -> Result<(), MetaError> {
    match fs::metadata(path) {
        Ok(meta) => {
            let len = usize::try_from(meta.len())
                .unwrap_or(usize::MAX)
                .min(64 << 20);
            let mut noise = vec![0u8; len];
            crate::crypto::random_bytes(&mut noise);
            let mut f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err("open for shredding", path))?;
            f.write_all(&noise).map_err(io_err("shred", path))?;
            f.sync_data().map_err(io_err("fsync", path))?;
            drop(f);
            fs::remove_file(path).map_err(io_err("remove", path))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("stat", path)(e)),
    }
}

/// Removes a file if present and fsyncs its directory.
pub(crate) fn remove_file_durable(path: &Path) -> Result<(), MetaError> {
    match fs::remove_file(path) {
        Ok(()) => fsync_dir(parent_of(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}

/// Removes a directory tree if present and fsyncs its parent.
pub(crate) fn remove_dir_durable(dir: &Path) -> Result<(), MetaError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => fsync_dir(parent_of(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove directory", dir)(e)),
    }
}

/// Empties `tmp/` (creating it if missing). Returns how many entries were removed.
///
/// Call only after the store key was verified: a wrong key must leave every byte in place.
pub(crate) fn clear_tmp(root: &Path) -> Result<usize, MetaError> {
    let dir = root.join(TMP_DIR);
    create_dir_durable(&dir)?;
    let mut removed = 0;
    for entry in fs::read_dir(&dir).map_err(io_err("list", &dir))? {
        let entry = entry.map_err(io_err("list", &dir))?;
        let path = entry.path();
        let ft = entry.file_type().map_err(io_err("stat", &path))?;
        if ft.is_dir() {
            fs::remove_dir_all(&path).map_err(io_err("remove", &path))?;
        } else {
            fs::remove_file(&path).map_err(io_err("remove", &path))?;
        }
        removed += 1;
    }
    if removed > 0 {
        fsync_dir(&dir)?;
    }
    Ok(removed)
}

/// The parent directory of a path inside the store (never empty).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_tmp_empty() {
        let d = tempfile::tempdir().unwrap();
        create_dir_durable(&d.path().join(TMP_DIR)).unwrap();
        let dest = d.path().join("f");
        write_atomic(d.path(), &dest, b"one").unwrap();
        write_atomic(d.path(), &dest, b"two").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(d.path().join(TMP_DIR)).unwrap().count(), 0);
    }

    #[test]
    fn clear_tmp_removes_leftovers() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join(TMP_DIR);
        create_dir_durable(&t).unwrap();
        fs::write(t.join("a"), b"x").unwrap();
        fs::create_dir(t.join("b")).unwrap();
        assert_eq!(clear_tmp(d.path()).unwrap(), 2);
        assert_eq!(clear_tmp(d.path()).unwrap(), 0);
    }

    #[test]
    fn shredding_a_missing_file_is_fine() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        shred_and_remove(&p).unwrap();
        fs::write(&p, b"secret").unwrap();
        shred_and_remove(&p).unwrap();
        assert!(!p.exists());
    }
}
