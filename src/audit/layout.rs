//! Step 1 of the audit: every path under the store must match the layout grammar
//! (`docs/storage-format.md`), and be a plain file or directory with one link.
//!
//! ```text
//! STORE | LOCK | store.key?        (no: key files live outside the store)
//! keyring/kr-<gen:8 digits>.bin
//! catalog/cat-<gen:8 digits>.log
//! s/<stream_id:32 lowercase hex>/seg-<segment_id:16 hex>.log | .idx
//! s/<stream_id>/seg-<segment_id:16 hex>.log.reseal   (a segment being re-sealed)
//! s/<stream_id>/c/<consumer_id:32 hex>.st
//! tmp/<anything>                   (a finding only on a cleanly stopped store)
//! raft/<segment:16 hex>.rlog | raft/groups   (a clustered node's Raft log, sealed)
//! raft/extent                               (segment lengths at the last flush, under a MAC)
//! raft/damaged/<segment:16 hex>.rlog | raft/damaged/extent
//! raft/snapshots/<pseudonym:16 hex>.snap       (a Raft group's newest snapshot, sealed)
//! raft/damaged/snapshots/<pseudonym:16 hex>.snap
//!                                           (a log that failed authentication, set aside)
//! ```

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a path is, by the grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileKind {
    /// The fixed-size store header.
    StoreHeader,
    /// The advisory lock file.
    Lock,
    /// A keyring generation.
    Keyring(u64),
    /// A catalog generation.
    Catalog(u64),
    /// A message segment of a stream.
    Segment {
        /// Stream id (hex).
        stream: String,
        /// Segment id.
        segment: u64,
    },
    /// A rebuildable segment index.
    SegmentIndex {
        /// Stream id (hex).
        stream: String,
        /// Segment id.
        segment: u64,
    },
    /// A consumer state file.
    ConsumerState {
        /// Stream id (hex).
        stream: String,
        /// Consumer id (hex).
        consumer: String,
    },
    /// A leftover temporary file.
    Temp,
    /// A segment of the node's Raft log.
    RaftSegment(u64),
    /// A segment of a Raft log that failed authentication and was set aside (still sealed).
    RaftDamaged(u64),
    /// The sealed list of the Raft groups the node keeps.
    RaftDirectory,
    /// The Raft log's acknowledged extent (segment ids and lengths under a MAC; no names).
    RaftExtent,
    /// A Raft group's snapshot, sealed with the group's key, named by its log pseudonym.
    RaftSnapshot,
    /// A directory of the layout.
    Dir,
}

/// A path the grammar does not allow, or a file of the wrong type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutFinding {
    /// The path, relative to the store root.
    pub path: PathBuf,
    /// Why it is a finding.
    pub reason: String,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn gen_of(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    let n: u64 = digits.parse().ok()?;
    // Zero-padded to at least 8 digits, and nothing else (`kr-12.bin`, `kr-0000001a.bin` fail).
    (digits.bytes().all(|b| b.is_ascii_digit()) && format!("{n:08}") == digits).then_some(n)
}

/// The segment id of a Raft log file name (`<16 hex>.rlog`).
fn raft_segment(name: &str) -> Option<u64> {
    name.strip_suffix(".rlog")
        .filter(|h| is_hex(h, 16))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
}

/// Classifies a path relative to the store root (components joined by `/`).
pub fn classify(rel: &str, is_dir: bool) -> Option<FileKind> {
    let parts: Vec<&str> = rel.split('/').collect();
    match (parts.as_slice(), is_dir) {
        (["STORE"], false) => Some(FileKind::StoreHeader),
        (["LOCK"], false) => Some(FileKind::Lock),
        (["keyring" | "catalog" | "s" | "tmp" | "raft"], true) => Some(FileKind::Dir),
        (["raft", "groups"], false) => Some(FileKind::RaftDirectory),
        (["raft", "extent"] | ["raft", "damaged", "extent"], false) => Some(FileKind::RaftExtent),
        (["raft", "damaged"], true) => Some(FileKind::Dir),
        (["raft", "snapshots"] | ["raft", "damaged", "snapshots"], true) => Some(FileKind::Dir),
        (["raft", "snapshots", f] | ["raft", "damaged", "snapshots", f], false) => {
            match f.rsplit_once('.') {
                Some((h, "snap")) if is_hex(h, 16) => Some(FileKind::RaftSnapshot),
                // A snapshot being written: `<pseudonym>.<writer>.tmp` (an earlier build's
                // `<pseudonym>.tmp`).
                Some((h, "tmp"))
                    if is_hex(h, 16)
                        || h.split_once('.')
                            .is_some_and(|(p, w)| is_hex(p, 16) && is_hex(w, 8)) =>
                {
                    Some(FileKind::Temp)
                }
                _ => None,
            }
        }
        (["raft", "damaged", f], false) => raft_segment(f).map(FileKind::RaftDamaged),
        (["raft", f], false) => raft_segment(f).map(FileKind::RaftSegment),
        (["keyring", f], false) => gen_of(f, "kr-", ".bin").map(FileKind::Keyring),
        (["catalog", f], false) => gen_of(f, "cat-", ".log").map(FileKind::Catalog),
        (["s", id], true) if is_hex(id, 32) => Some(FileKind::Dir),
        (["s", id, "c"], true) if is_hex(id, 32) => Some(FileKind::Dir),
        (["s", id, f], false) if is_hex(id, 32) => {
            let seg = |suffix: &str| {
                f.strip_prefix("seg-")
                    .and_then(|r| r.strip_suffix(suffix))
                    .filter(|h| is_hex(h, 16))
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
            };
            if seg(".log.reseal").is_some() {
                // A segment being re-sealed under a new data key (`file_store/reseal.rs`).
                Some(FileKind::Temp)
            } else if let Some(segment) = seg(".log") {
                Some(FileKind::Segment {
                    stream: (*id).to_owned(),
                    segment,
                })
            } else {
                seg(".idx").map(|segment| FileKind::SegmentIndex {
                    stream: (*id).to_owned(),
                    segment,
                })
            }
        }
        (["s", id, "c", f], false) if is_hex(id, 32) => f
            .strip_suffix(".st")
            .filter(|c| is_hex(c, 32))
            .map(|c| FileKind::ConsumerState {
                stream: (*id).to_owned(),
                consumer: c.to_owned(),
            }),
        (["tmp", _], false) => Some(FileKind::Temp),
        _ => None,
    }
}

/// Walks the store, classifying every entry. Returns the files found (with kinds and sizes)
/// and the findings.
pub fn walk(root: &Path) -> (Vec<(PathBuf, FileKind, u64)>, Vec<LayoutFinding>) {
    let mut files = Vec::new();
    let mut findings = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                findings.push(LayoutFinding {
                    path: rel(root, &dir),
                    reason: format!("unreadable: {e}"),
                });
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let relp = rel(root, &path);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                findings.push(LayoutFinding {
                    path: relp,
                    reason: "cannot stat".into(),
                });
                continue;
            };
            let ft = meta.file_type();
            if ft.is_symlink() {
                findings.push(LayoutFinding {
                    path: relp,
                    reason: "symbolic link".into(),
                });
                continue;
            }
            if !ft.is_dir() && !ft.is_file() {
                findings.push(LayoutFinding {
                    path: relp,
                    reason: "not a regular file or directory".into(),
                });
                continue;
            }
            if ft.is_file() && meta.nlink() > 1 {
                findings.push(LayoutFinding {
                    path: relp.clone(),
                    reason: format!("{} hard links", meta.nlink()),
                });
            }
            let text = relp.to_string_lossy().replace('\\', "/");
            match classify(&text, ft.is_dir()) {
                Some(FileKind::Dir) => stack.push(path),
                Some(kind) => files.push((relp, kind, meta.len())),
                None => findings.push(LayoutFinding {
                    path: relp,
                    reason: "name outside the layout grammar".into(),
                }),
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    (files, findings)
}

fn rel(root: &Path, p: &Path) -> PathBuf {
    p.strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn layout_names_are_recognised() {
        assert_eq!(classify("STORE", false), Some(FileKind::StoreHeader));
        assert_eq!(
            classify("raft/snapshots/00112233445566ff.snap", false),
            Some(FileKind::RaftSnapshot)
        );
        assert_eq!(classify("raft/snapshots/orders.snap", false), None);
        assert_eq!(
            classify("raft/snapshots/00112233445566ff.0a1b2c3d.tmp", false),
            Some(FileKind::Temp)
        );
        assert_eq!(
            classify("raft/snapshots/00112233445566ff.orders.tmp", false),
            None
        );
        assert_eq!(
            classify("keyring/kr-00000003.bin", false),
            Some(FileKind::Keyring(3))
        );
        assert_eq!(
            classify("catalog/cat-00000001.log", false),
            Some(FileKind::Catalog(1))
        );
        assert!(matches!(
            classify(&format!("s/{SID}/seg-000000000000000a.log"), false),
            Some(FileKind::Segment { segment: 10, .. })
        ));
        assert_eq!(
            classify(&format!("s/{SID}/seg-000000000000000a.log.reseal"), false),
            Some(FileKind::Temp)
        );
        assert_eq!(
            classify(&format!("s/{SID}/seg-orders.log.reseal"), false),
            None
        );
        assert!(matches!(
            classify(&format!("s/{SID}/c/{SID}.st"), false),
            Some(FileKind::ConsumerState { .. })
        ));
    }

    #[test]
    fn names_with_text_are_findings() {
        assert_eq!(classify("s/ORDERS/seg-0000000000000001.log", false), None);
        assert_eq!(classify("keyring/kr-3.bin", false), None);
        assert_eq!(
            classify(&format!("s/{}/seg-1.log", SID.to_uppercase()), false),
            None
        );
        assert_eq!(classify("meta.inf", false), None);
    }
}
