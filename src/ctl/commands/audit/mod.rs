//! `sealctl audit <store_dir>`: an offline, read-only proof that a store is sealed and intact
//! (security spec §5.3).
//!
//! 1. **Layout** ([`layout`]): every path matches the layout grammar; no symlinks, devices,
//!    extra hard links or leftover `tmp/` files.
//! 2. **Structure, no key**: `STORE` and segment magics, block framing (sync marker, length,
//!    contiguous blocks), and ciphertext entropy above 7.5 bits/byte for blocks over 256 bytes.
//! 3. **Authentication, with key**: the store opens read-only (header MAC, keyring, catalog);
//!    every block of every stream authenticates at its position, chains and seals hold, every
//!    consumer state file opens.
//! 4. **Leak scan, with key**: every decrypted subject (and token of 4+ bytes), stream, account
//!    and consumer name and payload prefix (8+ bytes), plus `--canary` strings, is searched for
//!    in every raw file and path.
//! 5. **Report**: a human summary (progress on stderr) or `--json`, and the exit code: 0 clean,
//!    1 integrity failure, 2 leak, 3 key or header error, 4 layout violation (the most serious
//!    class found wins, in that order: 3, 1, 2, 4).
//!
//! Nothing is written: the store is opened with a shared lock and read-only options.

pub mod attest;
pub mod layout;
pub mod scan;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::store::block::{FRAME_HEADER_LEN, MAX_BLOCK_LEN, SYNC_MARKER};
use crate::store::file_store::{FileStore, FileStoreConfig};
use crate::store::io::OsIo;
use crate::store::meta::{KeySource, MetaOptions, MetaStore, StreamCheckpoint};
use crate::store::segment::{StreamKeys, SEGMENT_HEADER_LEN};
use crate::store::StreamStore;

use layout::FileKind;
use scan::{entropy_bits_per_byte, Needles};

/// Finding classes, with their exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A block, header or state file that does not authenticate or frame correctly (exit 1).
    Integrity,
    /// Plaintext found in a raw file or path (exit 2).
    Leak,
    /// The key does not open the store, or a header is damaged (exit 3).
    Key,
    /// A path outside the layout grammar (exit 4).
    Layout,
}

impl Class {
    fn exit_code(self) -> u8 {
        match self {
            Class::Integrity => 1,
            Class::Leak => 2,
            Class::Key => 3,
            Class::Layout => 4,
        }
    }

    fn rank(self) -> u8 {
        match self {
            Class::Key => 0,
            Class::Integrity => 1,
            Class::Leak => 2,
            Class::Layout => 3,
        }
    }
}

/// One problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// Its class.
    pub class: Class,
    /// The file (relative to the store root).
    pub path: String,
    /// Byte offset, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// What is wrong.
    pub detail: String,
}

/// One segment file's hash-chain head: its last block's tag, which every earlier block's
/// tag feeds (each block carries its predecessor's), so it stands for the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentHead {
    /// The file (relative to the store root).
    pub path: String,
    /// Blocks framed in it.
    pub blocks: u64,
    /// Its last block's tag (hex); empty for a file without blocks.
    pub head: String,
}

/// Per-stream figures (with a key).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamReport {
    /// Stream id (hex).
    pub id: String,
    /// Segments scanned.
    pub segments: u64,
    /// Blocks authenticated.
    pub blocks: u64,
    /// Messages readable.
    pub messages: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Bytes a torn tail would cut.
    pub torn_tail_bytes: u64,
    /// Consumers whose state opened.
    pub consumers: u64,
    /// The data key versions (generations) the keyring holds for it — ids, never keys.
    #[serde(default)]
    pub dek_versions: Vec<u32>,
    /// The catalog's durable mark: segment, block, last sequence.
    #[serde(default)]
    pub durable_mark: Option<[u64; 3]>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The store root audited.
    pub store: String,
    /// The store's id (hex of its header's uuid; with a key).
    #[serde(default)]
    pub store_id: Option<String>,
    /// How the master key is obtained (`argon2id passphrase` or `key file`; with a key).
    #[serde(default)]
    pub kdf: Option<String>,
    /// The AEAD every block, key and record is sealed with.
    #[serde(default)]
    pub cipher: String,
    /// Every segment file's chain head.
    #[serde(default)]
    pub segments: Vec<SegmentHead>,
    /// Files examined.
    pub files: u64,
    /// Bytes examined.
    pub bytes: u64,
    /// Segment blocks whose framing was checked without the key.
    pub blocks_framed: u64,
    /// Whether a key was used.
    pub keyed: bool,
    /// Distinct plaintext fragments searched for.
    pub needles: usize,
    /// Fragments left out of the search: so short that this much ciphertext would hold
    /// them by chance (see `scan::Needles::significant`).
    pub needles_too_short: usize,
    /// Streams (with a key).
    pub streams: Vec<StreamReport>,
    /// Everything found.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The exit code for this report.
    pub fn exit_code(&self) -> u8 {
        self.findings
            .iter()
            .map(|f| f.class)
            .min_by_key(|c| c.rank())
            .map_or(0, Class::exit_code)
    }
}

/// What to audit and with which key.
pub struct AuditOptions {
    /// The store (`store_dir`, or `store_dir/jetstream`).
    pub store: PathBuf,
    /// A passphrase.
    pub key: Option<Zeroizing<String>>,
    /// A key file.
    pub key_file: Option<PathBuf>,
    /// Check structure and entropy only.
    pub no_key: bool,
    /// Extra strings that must not appear anywhere.
    pub canaries: Vec<String>,
    /// Draw progress bars on stderr (the caller decides: see [`crate::ctl::progress::enabled`]).
    pub progress: bool,
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// The AEAD of the store's blocks, keys and records (`crypto::seal`).
pub const CIPHER: &str = "XChaCha20-Poly1305";

/// Runs the audit.
pub fn audit(o: &AuditOptions) -> Report {
    let root =
        if o.store.join("STORE").exists() || !o.store.join("jetstream").join("STORE").exists() {
            o.store.clone()
        } else {
            o.store.join("jetstream")
        };
    let mut report = Report {
        store: root.display().to_string(),
        store_id: None,
        kdf: None,
        cipher: CIPHER.to_owned(),
        segments: vec![],
        files: 0,
        bytes: 0,
        blocks_framed: 0,
        keyed: !o.no_key,
        needles: 0,
        needles_too_short: 0,
        streams: vec![],
        findings: vec![],
    };
    let (files, layout_findings) = layout::walk(&root);
    for f in layout_findings {
        report.findings.push(Finding {
            class: Class::Layout,
            path: f.path.display().to_string(),
            offset: None,
            detail: f.reason,
        });
    }
    if !root.join("STORE").is_file() {
        report.findings.push(Finding {
            class: Class::Key,
            path: "STORE".into(),
            offset: None,
            detail: "no STORE header: not a sealstream store".into(),
        });
        return report;
    }
    let total_bytes: u64 = files.iter().map(|(_, _, len)| *len).sum();
    let pb = phase_bar(o, Some(total_bytes), "structure");
    for (path, kind, len) in &files {
        pb.inc(*len);
        report.files += 1;
        report.bytes += len;
        let full = root.join(path);
        let relp = path.display().to_string();
        match kind {
            FileKind::Temp => report.findings.push(Finding {
                class: Class::Layout,
                path: relp,
                offset: None,
                detail: "leftover tmp/ file on a stopped store".into(),
            }),
            FileKind::StoreHeader
                if std::fs::read(&full)
                    .map(|b| !b.starts_with(b"SEALSTOR"))
                    .unwrap_or(true) =>
            {
                report.findings.push(Finding {
                    class: Class::Key,
                    path: relp,
                    offset: Some(0),
                    detail: "bad STORE magic".into(),
                });
            }
            FileKind::Segment { .. } => check_segment_framing(&full, &relp, &mut report),
            _ => {}
        }
    }
    pb.finish_and_clear();
    let mut needles = Needles::default();
    for c in &o.canaries {
        needles.add(c.as_bytes());
    }
    if !o.no_key {
        keyed_checks(&root, o, &mut report, &mut needles);
    }
    // Needles short enough to turn up by chance in this much ciphertext are left out (and
    // counted): a finding must mean a leak.
    let (needles, too_short) = needles.significant(total_bytes);
    let path_needles = needles.for_paths();
    report.needles = needles.len();
    report.needles_too_short = too_short;
    if !needles.is_empty() {
        let pb = phase_bar(o, Some(total_bytes), "leak scan");
        // Two workers, each with the automaton, take files in turn (the search is CPU-bound:
        // it reads at disk speed only when both cores search).
        let next = std::sync::atomic::AtomicUsize::new(0);
        let scan = || {
            let mut found = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((path, _, len)) = files.get(i) else {
                    return found;
                };
                pb.inc(*len);
                let relp = path.display().to_string();
                for hit in path_needles.found_in(relp.as_bytes()) {
                    found.push(Finding {
                        class: Class::Leak,
                        path: relp.clone(),
                        offset: None,
                        detail: format!("path contains {hit:?}"),
                    });
                }
                if let Ok(bytes) = std::fs::read(root.join(path)) {
                    for hit in needles.found_in(&bytes) {
                        let offset = memchr::memmem::find(&bytes, hit.as_bytes()).map(|o| o as u64);
                        found.push(Finding {
                            class: Class::Leak,
                            path: relp.clone(),
                            offset,
                            detail: format!("plaintext {hit:?} in the raw bytes"),
                        });
                    }
                }
            }
        };
        let mut found = std::thread::scope(|s| {
            let other = s.spawn(scan);
            let mut mine = scan();
            mine.extend(other.join().unwrap_or_default());
            mine
        });
        found.sort_by(|a, b| (&a.path, a.offset).cmp(&(&b.path, b.offset)));
        report.findings.extend(found);
        pb.finish_and_clear();
    }
    report
}

/// A progress bar for one audit phase (`total` bytes, or a spinner), hidden unless
/// [`AuditOptions::progress`].
fn phase_bar(o: &AuditOptions, total: Option<u64>, what: &str) -> indicatif::ProgressBar {
    if !o.progress {
        return indicatif::ProgressBar::hidden();
    }
    let pb = crate::ctl::progress::bar(total, what, false);
    if total.is_some() {
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:>12} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
    }
    pb
}

/// Walks a segment's blocks by their framing (no key needed) and checks ciphertext entropy.
fn check_segment_framing(full: &Path, relp: &str, report: &mut Report) {
    let Ok(bytes) = std::fs::read(full) else {
        report.findings.push(Finding {
            class: Class::Integrity,
            path: relp.into(),
            offset: None,
            detail: "unreadable".into(),
        });
        return;
    };
    if !bytes.starts_with(b"SEALSEG1") {
        report.findings.push(Finding {
            class: Class::Integrity,
            path: relp.into(),
            offset: Some(0),
            detail: "bad segment magic".into(),
        });
        return;
    }
    let mut off = SEGMENT_HEADER_LEN;
    let mut head = SegmentHead {
        path: relp.to_owned(),
        blocks: 0,
        head: String::new(),
    };
    let record = |report: &mut Report, head: SegmentHead| report.segments.push(head);
    while off < bytes.len() {
        // Zeros the writer filled ahead of its appends (docs/storage-format.md §1): unused
        // space, as recovery reads it. Not plaintext either.
        if bytes
            .get(off..)
            .is_some_and(|rest| rest.iter().all(|b| *b == 0))
        {
            break;
        }
        let word = |at: usize| {
            bytes
                .get(at..at + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_le_bytes)
        };
        let (Some(sync), Some(len)) = (word(off), word(off + 4)) else {
            report.findings.push(Finding {
                class: Class::Integrity,
                path: relp.into(),
                offset: Some(off as u64),
                detail: "truncated block frame".into(),
            });
            return;
        };
        if sync != SYNC_MARKER || len > MAX_BLOCK_LEN || (len as usize) < FRAME_HEADER_LEN {
            report.findings.push(Finding {
                class: Class::Integrity,
                path: relp.into(),
                offset: Some(off as u64),
                detail: "no block frame here (sync marker or length)".into(),
            });
            return;
        }
        let end = off + len as usize;
        let Some(block) = bytes.get(off..end) else {
            report.findings.push(Finding {
                class: Class::Integrity,
                path: relp.into(),
                offset: Some(off as u64),
                detail: "block runs past the end of the file".into(),
            });
            return;
        };
        let ct = block.get(FRAME_HEADER_LEN..).unwrap_or(&[]);
        if ct.len() > 256 && entropy_bits_per_byte(ct) <= 7.5 {
            report.findings.push(Finding {
                class: Class::Leak,
                path: relp.into(),
                offset: Some(off as u64),
                detail: "block body does not look like ciphertext (entropy)".into(),
            });
        }
        report.blocks_framed += 1;
        head.blocks += 1;
        head.head = data_encoding::HEXLOWER
            .encode(block.get(block.len().saturating_sub(16)..).unwrap_or(&[]));
        off = end;
    }
    record(report, head);
}

fn keyed_checks(root: &Path, o: &AuditOptions, report: &mut Report, needles: &mut Needles) {
    let source = match (&o.key, &o.key_file) {
        (Some(k), _) => KeySource::Passphrase(k.clone()),
        (None, Some(f)) => KeySource::KeyFile(f.clone()),
        (None, None) => KeySource::Auto,
    };
    let meta = match MetaStore::open(root, source, MetaOptions::read_only()) {
        Ok(m) => m,
        Err(e) => {
            report.findings.push(Finding {
                class: Class::Key,
                path: "STORE".into(),
                offset: None,
                detail: e.to_string(),
            });
            return;
        }
    };
    report.store_id = Some(data_encoding::HEXLOWER.encode(&meta.store_uuid()));
    report.kdf = Some(
        match meta.kdf_kind() {
            crate::store::meta::KdfKind::Passphrase => "argon2id passphrase",
            crate::store::meta::KdfKind::KeyFile => "key file",
        }
        .to_owned(),
    );
    raft_extent(root, &meta, report);
    let io: Arc<dyn crate::store::io::SegmentIo> = Arc::new(OsIo);
    let pb = phase_bar(o, None, "decrypt");
    for account in meta.list_accounts() {
        needles.add(account.as_bytes());
        for sm in meta.list_streams(&account) {
            needles.add(sm.name.as_bytes());
            let handle = match meta.open_stream(sm.stream_id) {
                Ok(h) => h,
                Err(e) => {
                    report.findings.push(Finding {
                        class: Class::Integrity,
                        path: format!("s/{}", sm.stream_id.to_hex()),
                        offset: None,
                        detail: e.to_string(),
                    });
                    continue;
                }
            };
            let mut keys = StreamKeys::new(
                handle.store_uuid,
                *handle.stream_id.as_bytes(),
                handle.dek_version,
                handle.dek,
            );
            for v in 1..handle.dek_version {
                if let Ok(old) = meta.stream_key(sm.stream_id, v) {
                    keys = keys.with_previous(v, old);
                }
            }
            // The catalog's rollback checkpoint: the log must reach its durable mark and no
            // consumer state may be older than it records.
            let checkpoint = meta
                .stream_checkpoint(sm.stream_id)
                .and_then(StreamCheckpoint::decode)
                .unwrap_or_default();
            let mut fcfg = FileStoreConfig::new(handle.dir.clone());
            fcfg.min_durable = checkpoint.mark;
            let store = match FileStore::open_inspect(Arc::clone(&io), keys, fcfg) {
                Ok(s) => s,
                Err(e) => {
                    report.findings.push(Finding {
                        class: Class::Integrity,
                        path: rel(root, &handle.dir),
                        offset: None,
                        detail: e.to_string(),
                    });
                    continue;
                }
            };
            let rep = store.report().clone();
            for c in &rep.corruption {
                report.findings.push(Finding {
                    class: Class::Integrity,
                    path: rel(root, &c.file),
                    offset: Some(c.offset),
                    detail: c.reason.clone(),
                });
            }
            let st = store.state();
            let mut messages = 0;
            let mut seq = st.first_seq;
            while seq != 0 && seq <= st.last_seq {
                if let Ok(Some(m)) = store.get(seq) {
                    messages += 1;
                    pb.inc(1);
                    needles.add_subject(&m.subject);
                    if m.payload.len() >= 8 {
                        needles
                            .add_payload(m.payload.get(..m.payload.len().min(32)).unwrap_or(&[]));
                    }
                }
                seq += 1;
            }
            let mut consumers = 0;
            if let Ok(list) = meta.list_consumers(sm.stream_id) {
                for c in list {
                    needles.add(c.name.as_bytes());
                    let loaded = meta.load_consumer_state(sm.stream_id, c.consumer_id);
                    let found = match &loaded {
                        Ok(Some(st)) => Some(st.generation),
                        _ => None,
                    };
                    let problem = match (&loaded, checkpoint.check_consumer(c.consumer_id, found)) {
                        (Err(e), _) => Some(e.to_string()),
                        (Ok(_), Err(why)) => Some(why),
                        (Ok(_), Ok(())) => None,
                    };
                    match problem {
                        None => consumers += 1,
                        Some(detail) => report.findings.push(Finding {
                            class: Class::Integrity,
                            path: format!(
                                "s/{}/c/{}.st",
                                sm.stream_id.to_hex(),
                                c.consumer_id.to_hex()
                            ),
                            offset: None,
                            detail,
                        }),
                    }
                }
            }
            report.streams.push(StreamReport {
                id: sm.stream_id.to_hex(),
                segments: rep.segments_scanned,
                blocks: rep.blocks_verified,
                messages,
                bytes: store.disk_bytes(),
                torn_tail_bytes: rep.torn_tail.as_ref().map_or(0, |t| t.bytes),
                consumers,
                dek_versions: meta
                    .stream_meta(sm.stream_id)
                    .map(|m| m.dek_versions)
                    .unwrap_or_default(),
                durable_mark: checkpoint
                    .mark
                    .map(|m| [m.segment_id, m.block_index, m.last_seq]),
            });
        }
    }
    pb.finish_and_clear();
}

/// A clustered node's Raft log against its acknowledged extent (`consensus/extent.rs`): every
/// segment it names must be there and at least as long as it was when its last write was
/// acknowledged (a log cut on a record boundary looks clean to the log itself).
fn raft_extent(root: &Path, meta: &MetaStore, report: &mut Report) {
    use crate::consensus::{extent, sealed_log};
    let dir = root.join(crate::store::meta::RAFT_DIR);
    if !dir.is_dir() {
        return;
    }
    let (names, _) = meta.raft_secrets();
    let mut finding = |path: String, detail: String| {
        report.findings.push(Finding {
            class: Class::Integrity,
            path,
            offset: None,
            detail,
        });
    };
    let acknowledged = match extent::read(&dir, &names) {
        Ok(Ok(Some(x))) => x.extent,
        Ok(Ok(None)) => return,
        Ok(Err(extent::Unreadable(why))) => {
            return finding(format!("raft/{}", extent::EXTENT_FILE), why.to_owned());
        }
        Err(e) => return finding(format!("raft/{}", extent::EXTENT_FILE), e.to_string()),
    };
    for (segment, len) in acknowledged {
        let name = sealed_log::segment_file(segment);
        match std::fs::metadata(dir.join(&name)) {
            Ok(m) if m.len() >= len => {}
            Ok(m) => finding(
                format!("raft/{name}"),
                format!(
                    "{} bytes, shorter than the {len} bytes acknowledged as written",
                    m.len()
                ),
            ),
            Err(_) => finding(
                format!("raft/{name}"),
                "a segment holding acknowledged writes is missing".into(),
            ),
        }
    }
}

/// Prints the human summary.
pub fn print_summary(r: &Report) {
    println!("store:   {}", r.store);
    println!(
        "files:   {} ({} bytes), {} blocks framed",
        r.files, r.bytes, r.blocks_framed
    );
    if r.keyed {
        let msgs: u64 = r.streams.iter().map(|s| s.messages).sum();
        println!(
            "streams: {} ({} messages authenticated), {} plaintext fragments searched",
            r.streams.len(),
            msgs,
            r.needles
        );
        if r.needles_too_short > 0 {
            println!(
                "         ({} fragments too short to tell a leak from chance in this much ciphertext were not searched)",
                r.needles_too_short
            );
        }
    } else {
        println!("no key: structure and entropy checked only");
    }
    if r.findings.is_empty() {
        println!("result:  clean");
        return;
    }
    println!("findings:");
    for f in &r.findings {
        let at = f.offset.map(|o| format!(" @ {o}")).unwrap_or_default();
        println!("  [{:?}] {}{at}: {}", f.class, f.path, f.detail);
    }
}

/// `sealctl store rotate-master`: opens the store with the current key and rewraps every data
/// key under the new one (see `docs/key-hierarchy.md` §4).
///
/// # Errors
/// Wrong current key, no new key given, or a store error.
pub fn rotate_master(
    store: &Path,
    key: Option<String>,
    key_file: Option<PathBuf>,
    new_key: Option<String>,
    new_key_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    let root = if store.join("STORE").exists() {
        store.to_path_buf()
    } else {
        store.join("jetstream")
    };
    let current = match (key, key_file) {
        (Some(k), _) => KeySource::Passphrase(Zeroizing::new(k)),
        (None, Some(f)) => KeySource::KeyFile(f),
        (None, None) => KeySource::Auto,
    };
    let new = match (new_key, new_key_file) {
        (Some(k), _) => KeySource::Passphrase(Zeroizing::new(k)),
        (None, Some(f)) => {
            if !f.exists() {
                crate::crypto::MasterKey::generate_key_file(&f)?;
            }
            KeySource::KeyFile(f)
        }
        (None, None) => {
            anyhow::bail!("give --new-key (or SEALSTREAM_NEW_STORE_KEY) or --new-key-file")
        }
    };
    let described = new.describe();
    let mut meta = MetaStore::open(&root, current, MetaOptions::default())?;
    meta.rotate_master(new)?;
    println!("master key rotated; the store now opens with {described}");
    Ok(())
}
