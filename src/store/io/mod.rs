//! Every file operation of the store goes through [`SegmentIo`] and [`SegmentFile`].
//!
//! - [`OsIo`]: real files (`pread`/`pwrite`, `fdatasync`, `fallocate(FALLOC_FL_KEEP_SIZE)`,
//!   directory `fsync`).
//! - `FaultIo` ([`fault`], test builds and the `fault-io` feature only — never in the release
//!   binary): an in-memory file system in the style of redb's crash tests. It records every
//!   write, sync, rename and directory sync; it can fail the Nth write or sync with `EIO` or
//!   `ENOSPC`, enforce a capacity, and produce a *crash image*: only what completed syncs made
//!   durable, optionally plus a torn prefix (whole 512 B or 4 KiB sectors) of one unsynced write.
//!   New files, removals and renames survive a crash only if their directory was synced.
//!
//! What it models and what it does not: a failed sync drops the file's dirty data (Linux
//! semantics: the pages are marked clean, so a retried sync "succeeds" without persisting
//! them); a failed write leaves half of its bytes in the page cache. Directories themselves are
//! durable once created (their parent's sync is the store-wide layer's business), and reordered
//! unsynced writes are not modelled beyond the torn prefix.

use std::fmt;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// One open file.
pub trait SegmentFile: Send + Sync + fmt::Debug {
    /// Current length in bytes.
    ///
    /// # Errors
    /// The OS error.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    ///
    /// # Errors
    /// The OS error.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads exactly `buf.len()` bytes at `offset`.
    ///
    /// # Errors
    /// The OS error, `UnexpectedEof` past the end.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset` (not durable until [`SegmentFile::sync_data`]).
    ///
    /// # Errors
    /// The OS error (`ENOSPC`, `EIO`, ...).
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`: the data written so far (and the file length) is durable on success.
    ///
    /// # Errors
    /// The OS error; the caller must then treat the unsynced data as lost.
    fn sync_data(&self) -> io::Result<()>;
    /// Truncates or extends the file to `len`.
    ///
    /// # Errors
    /// The OS error.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves disk space for `[offset, offset + len)` without changing the file length
    /// (`fallocate(FALLOC_FL_KEEP_SIZE)`). Returns `Ok(false)` when the file system cannot
    /// reserve space (the caller then meets `ENOSPC` at write time instead).
    ///
    /// # Errors
    /// `ENOSPC` when the space is not available, or another OS error.
    fn reserve(&self, offset: u64, len: u64) -> io::Result<bool>;
    /// Writes `len` zero bytes at `offset` (not durable until [`SegmentFile::sync_data`]),
    /// extending the file: the segment writer fills ahead of its appends this way, so they
    /// overwrite instead of growing the file.
    ///
    /// # Errors
    /// The OS error (`ENOSPC` included).
    fn zero_fill(&self, offset: u64, len: u64) -> io::Result<()> {
        const PIECE: u64 = 64 << 10;
        static ZEROS: [u8; PIECE as usize] = [0u8; PIECE as usize];
        let mut at = offset;
        let end = offset.saturating_add(len);
        while at < end {
            let n = (end - at).min(PIECE);
            self.write_all_at(ZEROS.get(..n as usize).unwrap_or(&[]), at)?;
            at += n;
        }
        Ok(())
    }
}

/// The file system as the store sees it.
pub trait SegmentIo: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents.
    ///
    /// # Errors
    /// The OS error.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the regular files in `dir`.
    ///
    /// # Errors
    /// The OS error.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a new file (fails if it exists), open for reading and writing.
    ///
    /// # Errors
    /// The OS error, `AlreadyExists`.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>>;
    /// Opens an existing file, for writing too when `write`.
    ///
    /// # Errors
    /// The OS error, `NotFound`.
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn SegmentFile>>;
    /// Renames a file (durable after the directory is synced).
    ///
    /// # Errors
    /// The OS error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file (durable after the directory is synced).
    ///
    /// # Errors
    /// The OS error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// `fsync` on a directory: its entries (creations, renames, removals) become durable.
    ///
    /// # Errors
    /// The OS error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// A hint that the whole file at `path` will be read soon: the OS may start reading it
    /// into its cache now, while the caller works on another one. Nothing if unsupported.
    fn will_read(&self, _path: &Path) {}
}

// ---------------------------------------------------------------------------------------------
// Real files.

/// [`SegmentIo`] over the operating system's files.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsIo;

#[derive(Debug)]
struct OsFile(std::fs::File);

impl SegmentFile for OsFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(&self.0, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let t = std::time::Instant::now();
        let r = self.0.sync_data();
        super::metrics::METRICS.fsync(t.elapsed(), r.is_ok());
        r
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn reserve(&self, offset: u64, len: u64) -> io::Result<bool> {
        use nix::fcntl::{fallocate, FallocateFlags};
        let off =
            i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let len = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        match fallocate(
            self.0.as_raw_fd(),
            FallocateFlags::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        ) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::EOPNOTSUPP) => Ok(false),
            Err(e) => Err(io::Error::from(e)),
        }
    }
}

impl SegmentIo for OsIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_type()?.is_file() {
                if let Some(name) = e.file_name().to_str() {
                    out.push(name.to_owned());
                }
            }
        }
        out.sort();
        Ok(out)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        Ok(Box::new(OsFile(f)))
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn SegmentFile>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)?;
        Ok(Box::new(OsFile(f)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
    fn will_read(&self, path: &Path) {
        // `posix_fadvise(WILLNEED)` starts the read-ahead of the whole file and returns.
        if let Ok(f) = std::fs::File::open(path) {
            use std::os::fd::AsRawFd as _;
            let _ = nix::fcntl::posix_fadvise(
                f.as_raw_fd(),
                0,
                0,
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_WILLNEED,
            );
        }
    }
}

#[cfg(any(test, feature = "fault-io"))]
pub mod fault;
#[cfg(any(test, feature = "fault-io"))]
pub use fault::{CrashOptions, FaultIo, FaultKind, SimFs, TornWrite};
