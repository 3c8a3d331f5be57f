//! The fault-injecting in-memory file system (see the parent module's docs): compiled into
//! test builds and, for the fuzz targets, with the `fault-io` feature; never into the release
//! binary.

use std::collections::{BTreeMap, HashMap};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{SegmentFile, SegmentIo};

/// Which error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`.
    Eio,
    /// `ENOSPC`.
    Enospc,
}

impl FaultKind {
    fn error(self) -> io::Error {
        match self {
            FaultKind::Eio => io::Error::from_raw_os_error(nix::libc::EIO),
            FaultKind::Enospc => io::Error::from_raw_os_error(nix::libc::ENOSPC),
        }
    }
}

/// How a crash image treats unsynced writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashOptions {
    /// Keep a torn prefix of one unsynced write (all earlier unsynced operations on the same
    /// file are kept whole).
    pub torn: Option<TornWrite>,
}

/// Which unsynced write is torn and how much of it survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornWrite {
    /// Selects the unsynced write (modulo the number of unsynced writes).
    pub pick: u64,
    /// Sector size: 512 or 4096.
    pub granularity: u64,
    /// How many sectors (counted from the write's start, modulo the write's sectors + 1)
    /// survive.
    pub sectors: u64,
}

#[derive(Debug, Clone)]
enum PendingOp {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct SimFile {
    data: Vec<u8>,
    durable: Vec<u8>,
    unsynced: Vec<PendingOp>,
    reserved: u64,
}

fn apply(buf: &mut Vec<u8>, op: &PendingOp) {
    match op {
        PendingOp::Write { off, data } => write_into(buf, *off, data),
        PendingOp::SetLen(len) => buf.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
    }
}

fn write_into(buf: &mut Vec<u8>, off: u64, data: &[u8]) {
    let Ok(off) = usize::try_from(off) else {
        return;
    };
    let end = off.saturating_add(data.len());
    if buf.len() < end {
        buf.resize(end, 0);
    }
    if let Some(dst) = buf.get_mut(off..end) {
        dst.copy_from_slice(data);
    }
}

#[derive(Debug, Clone, Default)]
struct SimDir {
    entries: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
}

/// The in-memory file system behind [`FaultIo`]; also what a crash image is.
#[derive(Debug, Clone, Default)]
pub struct SimFs {
    dirs: BTreeMap<PathBuf, SimDir>,
    inodes: HashMap<u64, SimFile>,
    next_inode: u64,
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok((dir.to_owned(), name.to_owned()))
}

impl SimFs {
    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut SimDir> {
        self.dirs
            .get_mut(dir)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (dir, name) = split(path)?;
        self.dirs
            .get(&dir)
            .and_then(|d| d.entries.get(&name).copied())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn usage(&self) -> u64 {
        let live: std::collections::HashSet<u64> = self
            .dirs
            .values()
            .flat_map(|d| d.entries.values().copied())
            .collect();
        live.iter()
            .filter_map(|i| self.inodes.get(i))
            .map(|f| (f.data.len() as u64).max(f.reserved))
            .sum()
    }

    /// The crash image: durable entries with their durable content, plus the torn write.
    fn crash_image(&self, opts: &CrashOptions) -> SimFs {
        let mut image = SimFs {
            next_inode: self.next_inode,
            ..SimFs::default()
        };
        for (path, d) in &self.dirs {
            image.dirs.insert(
                path.clone(),
                SimDir {
                    entries: d.durable.clone(),
                    durable: d.durable.clone(),
                },
            );
            for ino in d.durable.values() {
                if let Some(f) = self.inodes.get(ino) {
                    image.inodes.insert(
                        *ino,
                        SimFile {
                            data: f.durable.clone(),
                            durable: f.durable.clone(),
                            ..Default::default()
                        },
                    );
                }
            }
        }
        if let Some(t) = opts.torn {
            // Every unsynced write of a file reachable in the image, in a stable order.
            let mut cands: Vec<(u64, usize)> = Vec::new();
            let mut inos: Vec<u64> = image.inodes.keys().copied().collect();
            inos.sort_unstable();
            for ino in inos {
                if let Some(f) = self.inodes.get(&ino) {
                    for (i, op) in f.unsynced.iter().enumerate() {
                        if matches!(op, PendingOp::Write { .. }) {
                            cands.push((ino, i));
                        }
                    }
                }
            }
            if !cands.is_empty() {
                let idx = usize::try_from(t.pick % cands.len() as u64).unwrap_or(0);
                if let (Some(&(ino, k)), Some(src)) = (
                    cands.get(idx),
                    cands.get(idx).and_then(|(ino, _)| self.inodes.get(ino)),
                ) {
                    if let Some(dst) = image.inodes.get_mut(&ino) {
                        for op in src.unsynced.iter().take(k) {
                            apply(&mut dst.data, op);
                        }
                        if let Some(PendingOp::Write { off, data }) = src.unsynced.get(k) {
                            let g = t.granularity.max(1);
                            let end = off + data.len() as u64;
                            let first_boundary = (off / g + 1) * g;
                            let n_sectors = end.saturating_sub(first_boundary).div_ceil(g) + 1;
                            let keep_sectors = t.sectors % (n_sectors + 1);
                            if keep_sectors > 0 {
                                let cut = (first_boundary + (keep_sectors - 1) * g).min(end);
                                let keep = usize::try_from(cut - off).unwrap_or(0);
                                write_into(&mut dst.data, *off, data.get(..keep).unwrap_or(&[]));
                            }
                        }
                        dst.durable = dst.data.clone();
                    }
                }
            }
        }
        image
    }

    /// The content of a file as the running system sees it (tests use this to damage files).
    pub fn file_data(&self, path: &Path) -> Option<Vec<u8>> {
        let ino = self.lookup(path).ok()?;
        self.inodes.get(&ino).map(|f| f.data.clone())
    }

    /// Replaces a file's content, durably (tests use this to damage files).
    pub fn set_file_data(&mut self, path: &Path, data: Vec<u8>) -> bool {
        let Ok(ino) = self.lookup(path) else {
            return false;
        };
        match self.inodes.get_mut(&ino) {
            Some(f) => {
                f.durable = data.clone();
                f.data = data;
                f.unsynced.clear();
                true
            }
            None => false,
        }
    }

    /// Removes a file durably (tests).
    pub fn remove_durably(&mut self, path: &Path) -> bool {
        let Ok((dir, name)) = split(path) else {
            return false;
        };
        match self.dirs.get_mut(&dir) {
            Some(d) => d.entries.remove(&name).is_some() && d.durable.remove(&name).is_some(),
            None => false,
        }
    }

    /// Creates or replaces a file durably (tests).
    pub fn put_durably(&mut self, path: &Path, data: Vec<u8>) {
        let Ok((dir, name)) = split(path) else { return };
        let ino = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(
            ino,
            SimFile {
                durable: data.clone(),
                data,
                ..Default::default()
            },
        );
        let d = self.dirs.entry(dir).or_default();
        d.entries.insert(name.clone(), ino);
        d.durable.insert(name, ino);
    }

    /// The names in a directory (as the running system sees them).
    pub fn names(&self, dir: &Path) -> Vec<String> {
        self.dirs
            .get(dir)
            .map(|d| d.entries.keys().cloned().collect())
            .unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct FaultState {
    fs: SimFs,
    writes: u64,
    syncs: u64,
    events: u64,
    fail_write: Option<(u64, FaultKind)>,
    fail_sync: Option<(u64, FaultKind)>,
    capacity: Option<u64>,
    capture: Option<Capture>,
}

#[derive(Debug)]
struct Capture {
    images: Vec<(u64, SimFs)>,
    seed: u64,
    torn_every: u64,
}

/// [`SegmentIo`] over an in-memory [`SimFs`] with fault injection and crash images.
/// Clones share the same file system.
#[derive(Debug, Clone, Default)]
pub struct FaultIo {
    state: Arc<Mutex<FaultState>>,
}

#[derive(Debug)]
struct FaultFile {
    state: Arc<Mutex<FaultState>>,
    ino: u64,
    write: bool,
}

fn lock(m: &Mutex<FaultState>) -> MutexGuard<'_, FaultState> {
    // A panicking test thread must not hide the file system from the next assertion.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultState {
    /// Counts a mutating event and captures a crash image after it when asked to.
    fn event(&mut self) {
        self.events += 1;
        let events = self.events;
        if let Some(c) = self.capture.as_mut() {
            // A cheap deterministic mix, so the torn variant differs per event.
            let mut x = c.seed ^ events.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x ^= x >> 31;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 29;
            let torn = (c.torn_every > 0 && x % c.torn_every == 0).then_some(TornWrite {
                pick: x >> 8,
                granularity: if x & 0x10 == 0 { 512 } else { 4096 },
                sectors: x >> 20,
            });
            let image = self.fs.crash_image(&CrashOptions { torn });
            if let Some(c) = self.capture.as_mut() {
                c.images.push((events, image));
            }
        }
    }

    fn check_write(&mut self) -> Result<(), FaultKind> {
        self.writes += 1;
        match self.fail_write {
            Some((n, k)) if n == self.writes => Err(k),
            _ => Ok(()),
        }
    }

    fn check_sync(&mut self) -> Result<(), FaultKind> {
        self.syncs += 1;
        match self.fail_sync {
            Some((n, k)) if n == self.syncs => Err(k),
            _ => Ok(()),
        }
    }

    fn file(&mut self, ino: u64) -> io::Result<&mut SimFile> {
        self.fs
            .inodes
            .get_mut(&ino)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

impl FaultIo {
    /// An empty file system.
    pub fn new() -> Self {
        FaultIo::default()
    }

    /// A file system starting from `fs` (a crash image).
    pub fn from_image(fs: SimFs) -> Self {
        FaultIo {
            state: Arc::new(Mutex::new(FaultState {
                fs,
                ..FaultState::default()
            })),
        }
    }

    /// Fails the `n`th write from now on (1-based, counting `write_all_at` calls).
    pub fn fail_nth_write(&self, n: u64, kind: FaultKind) {
        let mut s = lock(&self.state);
        s.fail_write = Some((s.writes + n, kind));
    }

    /// Fails the `n`th sync from now on (1-based, counting file and directory syncs).
    pub fn fail_nth_sync(&self, n: u64, kind: FaultKind) {
        let mut s = lock(&self.state);
        s.fail_sync = Some((s.syncs + n, kind));
    }

    /// Clears injected faults.
    pub fn clear_faults(&self) {
        let mut s = lock(&self.state);
        s.fail_write = None;
        s.fail_sync = None;
    }

    /// Limits the bytes all files may use (`ENOSPC` past it); `None` for no limit.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        lock(&self.state).capacity = bytes;
    }

    /// Bytes in use (file lengths or reservations, whichever is larger).
    pub fn usage(&self) -> u64 {
        lock(&self.state).fs.usage()
    }

    /// Mutating events so far (writes, syncs, truncations, creations, renames, removals).
    pub fn events(&self) -> u64 {
        lock(&self.state).events
    }

    /// Writes and syncs so far.
    pub fn counts(&self) -> (u64, u64) {
        let s = lock(&self.state);
        (s.writes, s.syncs)
    }

    /// From now on, captures a crash image after every mutating event; every `torn_every`-th
    /// image (pseudo-randomly, from `seed`) also keeps a torn prefix of one unsynced write.
    pub fn capture_crash_images(&self, seed: u64, torn_every: u64) {
        lock(&self.state).capture = Some(Capture {
            images: Vec::new(),
            seed,
            torn_every,
        });
    }

    /// Takes the captured `(event number, image)` pairs.
    pub fn take_crash_images(&self) -> Vec<(u64, SimFs)> {
        lock(&self.state)
            .capture
            .as_mut()
            .map(|c| std::mem::take(&mut c.images))
            .unwrap_or_default()
    }

    /// The crash image right now.
    pub fn crash_image(&self, opts: &CrashOptions) -> SimFs {
        lock(&self.state).fs.crash_image(opts)
    }

    /// Runs `f` on the live file system (tests: inspect or damage files).
    pub fn with_fs<R>(&self, f: impl FnOnce(&mut SimFs) -> R) -> R {
        f(&mut lock(&self.state).fs)
    }
}

impl SegmentFile for FaultFile {
    fn len(&self) -> io::Result<u64> {
        let mut s = lock(&self.state);
        Ok(s.file(self.ino)?.data.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = lock(&self.state);
        let f = s.file(self.ino)?;
        let start =
            usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| f.data.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.write {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        let mut s = lock(&self.state);
        let injected = s.check_write();
        let usage = s.fs.usage();
        let capacity = s.capacity;
        let f = s.file(self.ino)?;
        let cur = (f.data.len() as u64).max(f.reserved);
        let growth = (offset + buf.len() as u64).saturating_sub(cur);
        if let Err(kind) = injected {
            // A failed write may leave part of its bytes in the page cache.
            let half = buf.get(..buf.len() / 2).unwrap_or(&[]).to_vec();
            if kind == FaultKind::Eio && !half.is_empty() {
                let op = PendingOp::Write {
                    off: offset,
                    data: half,
                };
                apply(&mut f.data, &op);
                f.unsynced.push(op);
            }
            s.event();
            return Err(kind.error());
        }
        if capacity.is_some_and(|c| usage + growth > c) {
            return Err(FaultKind::Enospc.error());
        }
        let op = PendingOp::Write {
            off: offset,
            data: buf.to_vec(),
        };
        apply(&mut f.data, &op);
        f.unsynced.push(op);
        s.event();
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = lock(&self.state);
        let injected = s.check_sync();
        let f = s.file(self.ino)?;
        match injected {
            Err(kind) => {
                // The kernel marks the dirty pages clean: they are lost on a crash, and a
                // retried sync will not bring them back.
                f.unsynced.clear();
                s.event();
                Err(kind.error())
            }
            Ok(()) => {
                // Only the dirty data reaches the disk: bytes dropped by an earlier failed sync
                // stay lost although reads still see them.
                for op in std::mem::take(&mut f.unsynced) {
                    apply(&mut f.durable, &op);
                }
                s.event();
                Ok(())
            }
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.write {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        let mut s = lock(&self.state);
        let f = s.file(self.ino)?;
        let op = PendingOp::SetLen(len);
        apply(&mut f.data, &op);
        f.unsynced.push(op);
        s.event();
        Ok(())
    }

    fn reserve(&self, offset: u64, len: u64) -> io::Result<bool> {
        let mut s = lock(&self.state);
        let usage = s.fs.usage();
        let capacity = s.capacity;
        let f = s.file(self.ino)?;
        let want = offset.saturating_add(len);
        let cur = (f.data.len() as u64).max(f.reserved);
        if capacity.is_some_and(|c| usage + want.saturating_sub(cur) > c) {
            return Err(FaultKind::Enospc.error());
        }
        f.reserved = f.reserved.max(want);
        Ok(true)
    }
}

impl SegmentIo for FaultIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        lock(&self.state).fs.dirs.entry(dir.to_owned()).or_default();
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = lock(&self.state);
        let d =
            s.fs.dirs
                .get(dir)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(d.entries.keys().cloned().collect())
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let (dir, name) = split(path)?;
        let mut s = lock(&self.state);
        let ino = s.fs.next_inode;
        let d = s.fs.dir_mut(&dir)?;
        if d.entries.contains_key(&name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        d.entries.insert(name, ino);
        s.fs.next_inode += 1;
        s.fs.inodes.insert(ino, SimFile::default());
        s.event();
        Ok(Box::new(FaultFile {
            state: Arc::clone(&self.state),
            ino,
            write: true,
        }))
    }

    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn SegmentFile>> {
        let ino = lock(&self.state).fs.lookup(path)?;
        Ok(Box::new(FaultFile {
            state: Arc::clone(&self.state),
            ino,
            write,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (fdir, fname) = split(from)?;
        let (tdir, tname) = split(to)?;
        let mut s = lock(&self.state);
        let ino =
            s.fs.dir_mut(&fdir)?
                .entries
                .remove(&fname)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.fs.dir_mut(&tdir)?.entries.insert(tname, ino);
        s.event();
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let (dir, name) = split(path)?;
        let mut s = lock(&self.state);
        s.fs.dir_mut(&dir)?
            .entries
            .remove(&name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.event();
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        let injected = s.check_sync();
        if let Err(kind) = injected {
            s.event();
            return Err(kind.error());
        }
        let d = s.fs.dir_mut(dir)?;
        d.durable = d.entries.clone();
        s.event();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::OsIo;
    use super::*;

    #[test]
    fn unsynced_writes_and_entries_vanish_in_a_crash_image() {
        let io = FaultIo::new();
        let dir = Path::new("/d");
        io.create_dir_all(dir).unwrap();
        let f = io.create_new(&dir.join("a")).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        f.sync_data().unwrap();
        // File synced but directory not: the file is gone after a crash.
        assert!(io
            .crash_image(&CrashOptions::default())
            .names(dir)
            .is_empty());
        io.sync_dir(dir).unwrap();
        f.write_all_at(b" world", 5).unwrap();
        let img = io.crash_image(&CrashOptions::default());
        assert_eq!(img.file_data(&dir.join("a")).unwrap(), b"hello");
        f.sync_data().unwrap();
        let img = io.crash_image(&CrashOptions::default());
        assert_eq!(img.file_data(&dir.join("a")).unwrap(), b"hello world");
    }

    #[test]
    fn torn_writes_keep_whole_sectors_of_the_prefix() {
        let io = FaultIo::new();
        let dir = Path::new("/d");
        io.create_dir_all(dir).unwrap();
        let f = io.create_new(&dir.join("a")).unwrap();
        io.sync_dir(dir).unwrap();
        f.write_all_at(&[1u8; 100], 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(&[2u8; 2000], 100).unwrap();
        for sectors in 0..6u64 {
            let t = TornWrite {
                pick: 0,
                granularity: 512,
                sectors,
            };
            let img = io.crash_image(&CrashOptions { torn: Some(t) });
            let data = img.file_data(&dir.join("a")).unwrap();
            let expect = match sectors {
                0 => 100,
                n => (512 * n as usize).min(2100),
            };
            assert_eq!(data.len(), expect, "sectors {sectors}");
        }
    }

    #[test]
    fn a_failed_sync_loses_the_dirty_data_even_if_retried() {
        let io = FaultIo::new();
        let dir = Path::new("/d");
        io.create_dir_all(dir).unwrap();
        let f = io.create_new(&dir.join("a")).unwrap();
        io.sync_dir(dir).unwrap();
        f.write_all_at(b"abc", 0).unwrap();
        io.fail_nth_sync(1, FaultKind::Eio);
        assert!(f.sync_data().is_err());
        f.sync_data().unwrap();
        let img = io.crash_image(&CrashOptions::default());
        assert_eq!(img.file_data(&dir.join("a")).unwrap(), b"");
    }

    #[test]
    fn capacity_gives_enospc_and_reservations_count() {
        let io = FaultIo::new();
        let dir = Path::new("/d");
        io.create_dir_all(dir).unwrap();
        io.set_capacity(Some(1000));
        let f = io.create_new(&dir.join("a")).unwrap();
        assert!(f.reserve(0, 800).unwrap());
        assert!(f.reserve(0, 2000).is_err());
        f.write_all_at(&[0u8; 800], 0).unwrap();
        let e = f.write_all_at(&[0u8; 300], 800).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::libc::ENOSPC));
        io.set_capacity(None);
        f.write_all_at(&[0u8; 300], 800).unwrap();
    }

    #[test]
    fn os_io_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let io = OsIo;
        let d = tmp.path().join("s");
        io.create_dir_all(&d).unwrap();
        let f = io.create_new(&d.join("x")).unwrap();
        let _ = f.reserve(0, 1 << 20).unwrap();
        f.write_all_at(b"abcdef", 0).unwrap();
        f.sync_data().unwrap();
        io.sync_dir(&d).unwrap();
        assert_eq!(f.len().unwrap(), 6);
        let mut b = [0u8; 3];
        f.read_exact_at(&mut b, 2).unwrap();
        assert_eq!(&b, b"cde");
        f.set_len(2).unwrap();
        assert_eq!(io.list_dir(&d).unwrap(), vec!["x".to_string()]);
        io.rename(&d.join("x"), &d.join("y")).unwrap();
        io.remove_file(&d.join("y")).unwrap();
        assert!(io.list_dir(&d).unwrap().is_empty());
    }
}
