//! Keeping write-once and read-once bytes out of the page cache.
//!
//! Why: the Raft log and its snapshots are written once and read again only by a follower far
//! behind or a restart, and a live audit reads a whole store once. Left in the page cache,
//! they make it grow, and a write into pages the cache does not hold yet costs far more than
//! one into pages it just gave back: on this project's VMs, 1 GiB written in 1 MiB calls took
//! 0.73–1.88 s of `write` while the cache grew and 0.27 s when every 64 MiB synced were
//! dropped (docs/PERFORMANCE.md, stop 43).

use std::fs::File;
use std::os::fd::AsRawFd as _;

/// `posix_fadvise(DONTNEED)` on `len` bytes of `file` from `offset` (`len` 0: to the end).
/// Linux starts writing the range's dirty pages and returns at once, and drops its clean
/// pages. Advice only: where the system does not take it, a later sync still writes the
/// pages, and reads still find them.
pub fn dont_need(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    let _ = nix::fcntl::posix_fadvise(
        file.as_raw_fd(),
        offset,
        len,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    );
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Seek as _, SeekFrom, Write as _};

    /// Advice changes where bytes are kept, never what a read gives: written, dropped while
    /// dirty, synced, dropped again (a range, then to the end), the file reads back whole.
    #[test]
    fn dropped_pages_read_back_the_same() {
        let mut file = tempfile::tempfile().expect("tempfile");
        let data: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).expect("write");
        super::dont_need(&file, 0, 0);
        file.sync_data().expect("sync");
        super::dont_need(&file, 4096, 4096);
        super::dont_need(&file, 0, 0);
        let mut back = Vec::new();
        file.seek(SeekFrom::Start(0)).expect("seek");
        file.read_to_end(&mut back).expect("read");
        assert!(back == data, "the file changed");
    }
}
