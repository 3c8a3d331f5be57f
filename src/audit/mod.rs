//! The audit of a sealed store (security spec §5.3): a read-only proof that nothing under
//! `store_dir` is plaintext and that every block, key and state file is authentic. Run by
//! `sealctl audit` on a stopped store ([`audit`]) and by the running server on its live store
//! ([`audit_live`]; `$SYS.REQ.SERVER.<id>.AUDIT`, a tenant's `$JS.API.ACCOUNT.AUDIT`).
//!
//! 1. **Layout** ([`layout`]): every path matches the layout grammar; no symlinks, devices,
//!    extra hard links or (on a stopped store) leftover `tmp/` files.
//! 2. **Authentication, with key**: the store's keys (header MAC, keyring, catalog); every
//!    block of every stream authenticates at its position, chains and seals hold, the log
//!    reaches its durable mark, every consumer state file opens and is not older than the
//!    catalog records. This gathers the needles: every subject (and token of 4+ bytes), stream,
//!    account and consumer name, and a sample of payload prefixes.
//! 3. **One pass over every file**: `STORE` and segment magics, block framing (sync marker,
//!    length, contiguous blocks), ciphertext entropy above 7.5 bits/byte (each block's first
//!    4 KiB, for blocks over 256 bytes), and the leak scan — every needle, plus canary
//!    strings, searched for in the raw bytes and the path ([`scan`]); each file read once, on
//!    two threads offline.
//! 5. **Report** ([`Report`]) and its exit code: 0 clean, 1 integrity failure, 2 leak, 3 key
//!    or header error, 4 layout violation (the most serious class found wins, in that order:
//!    3, 1, 2, 4). [`attest`] signs reports.
//!
//! Why one module for both: the live audit is the same checks from a consistent point. The
//! catalog's checkpoints and consumer states are read under the store's lock, in one go; the
//! segment files are append-only past those checkpoints, so reading them afterwards sees at
//! least what was checkpointed. What a running server does meanwhile is not a finding: a block
//! being appended at a stream's newest segment's end, a segment retention deleted after it was
//! listed (the stream is read again from a fresh checkpoint), files in `tmp/`. A [`Progress`]
//! counts the bytes read and, for the live audit, paces them ([`Progress::paced`]) so serving
//! keeps its share of the disk and the CPU.
//!
//! [`Scope::Account`] audits one account's streams only: its files, its names and messages as
//! needles, nothing of the store that other tenants share (no store-wide files, no Raft log):
//! the report names nothing of other tenants.

pub mod attest;
pub mod layout;
pub mod scan;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::pace::Pace;
use crate::store::block::{FRAME_HEADER_LEN, MAX_BLOCK_LEN, SYNC_MARKER};
use crate::store::file_store::{FileStore, FileStoreConfig};
use crate::store::io::OsIo;
use crate::store::meta::{KeySource, MetaOptions, MetaStore, StreamCheckpoint, StreamId};
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

/// One group of a clustered node's Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftGroupReport {
    /// The group's id (hexadecimal; the meta group's is 0).
    pub group: String,
    /// `meta`, or the replicated stream it carries as `account/stream` (live audits); none:
    /// not known to the audit (an offline audit reads no assignments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// Its records authenticated.
    pub records: u64,
    /// The keys it holds on this node (two while a group-key rotation is under way).
    pub keys: usize,
    /// How many times its key was rotated on this node.
    pub key_generation: u32,
}

impl RaftGroupReport {
    /// How a report writes a group's id: the one form the offline audit and a live server
    /// naming its stream groups (`ClusterJs::name_raft_groups`) must agree on.
    pub fn id_of(group: u64) -> String {
        format!("{group:016x}")
    }
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
    /// The account audited alone ([`Scope::Account`]); none: the whole store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Audited while the server ran ([`audit_live`]).
    #[serde(default)]
    pub live: bool,
    /// A clustered node's Raft log, every record of the groups the node keeps authenticated
    /// with their keys (offline audits of a whole store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft: Option<crate::consensus::sealed_log::LogAudit>,
    /// The Raft log's groups one by one: which stream each is (a live audit's server names
    /// them from its cluster's assignments; offline, the meta group alone is named), how
    /// many of its records were authenticated, under how many keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raft_groups: Vec<RaftGroupReport>,
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

/// A tenant's crypto-erase as the server that did it reports it (`$JS.API.ACCOUNT.PURGE`):
/// which keys were destroyed, by id and version (never key material), and the keyring
/// generation in force afterwards, checked to hold none of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erasure {
    /// The server (name).
    pub server: String,
    /// Its store's id (hex).
    pub store_id: String,
    /// The account erased.
    pub account: String,
    /// The account key: its random id (hex) and version.
    pub account_key: String,
    /// Each stream's data keys: `<stream id hex> v1,v2`.
    pub stream_keys: Vec<String>,
    /// Spare stream keys (made ahead of need, never used) destroyed with the account.
    pub spare_keys: usize,
    /// Streams whose files were removed.
    pub streams_deleted: usize,
    /// The keyring generation in force after the erase.
    pub keyring_generation: u64,
    /// Whether that generation was checked to hold none of the keys above.
    pub verified_absent: bool,
}

/// What to audit and with which key (a stopped store).
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
    /// Counts what was read (the caller may draw it).
    pub progress: Arc<Progress>,
}

/// Which streams an audit covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The whole store.
    Store,
    /// One account's streams, and nothing the store's tenants share.
    Account(String),
}

/// A live audit of the running server's store.
pub struct LiveOptions<'a> {
    /// The store's root (`MetaStore::root`).
    pub root: PathBuf,
    /// The server's open catalog and keyring.
    pub meta: &'a Mutex<MetaStore>,
    /// What to cover.
    pub scope: Scope,
    /// Extra strings that must not appear anywhere.
    pub canaries: Vec<String>,
    /// Counts and paces what is read.
    pub progress: Arc<Progress>,
}

/// The phases, as [`Progress::phase`] reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Not running.
    Idle = 0,
    /// Every stream opened: every block authenticated, the needles gathered.
    Decrypt = 1,
    /// One pass over every file: layout, framing, entropy and the leak scan.
    Files = 2,
    /// A clustered node's Raft log: every live record and kept snapshot authenticated.
    Raft = 3,
}

impl Phase {
    /// Its name (metrics label, progress bar).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Decrypt => "decrypt",
            Phase::Files => "files",
            Phase::Raft => "raft",
        }
    }
}

/// How far an audit is: its phase and the bytes read in it, out of how many. Shared by the
/// auditing thread and whoever shows it (a progress bar, `/metrics`). With a pace, reading
/// waits so that the bytes read since the start never run ahead of `bytes_per_sec`.
#[derive(Debug)]
pub struct Progress {
    phase: AtomicU8,
    done: AtomicU64,
    total: AtomicU64,
    read: AtomicU64,
    pace: Pace,
}

impl Progress {
    /// Unpaced (a stopped store: read as fast as the disk allows).
    pub fn new() -> Arc<Self> {
        Self::paced(0)
    }

    /// Paced at `bytes_per_sec` (0: unpaced).
    pub fn paced(bytes_per_sec: u64) -> Arc<Self> {
        Arc::new(Progress {
            phase: AtomicU8::new(Phase::Idle as u8),
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            read: AtomicU64::new(0),
            pace: Pace::new(bytes_per_sec),
        })
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            1 => Phase::Decrypt,
            2 => Phase::Files,
            3 => Phase::Raft,
            _ => Phase::Idle,
        }
    }

    /// Bytes read in this phase, and of how many.
    pub fn position(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }

    /// Bytes read since the audit started, in every phase.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    fn begin(&self, phase: Phase, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    fn end(&self) {
        self.phase.store(Phase::Idle as u8, Ordering::Relaxed);
    }

    /// Counts `bytes` read; paced, waits until the pace allows them.
    fn advance(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
        let read = self.read.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.pace.wait_until_due(read);
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// The AEAD of the store's blocks, keys and records (`crypto::seal`).
pub const CIPHER: &str = "XChaCha20-Poly1305";

/// Where the keyed checks get the catalog and the keys: a store opened read-only for the
/// audit, or the running server's (locked briefly, for each gathering).
enum Catalog<'a> {
    Opened(Box<MetaStore>),
    Live(&'a Mutex<MetaStore>),
}

impl Catalog<'_> {
    fn with<R>(&self, f: impl FnOnce(&MetaStore) -> R) -> R {
        match self {
            Catalog::Opened(m) => f(m),
            Catalog::Live(m) => f(&m.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }
}

/// Everything about one stream the keyed checks need, read from the catalog in one go: the
/// consistent point its files are checked against.
struct StreamPlan {
    id: StreamId,
    dir: PathBuf,
    /// Taken by the one opening of its files.
    keys: Option<StreamKeys>,
    checkpoint: StreamCheckpoint,
    dek_versions: Vec<u32>,
    names: Vec<String>,
    consumers: u64,
    consumer_findings: Vec<Finding>,
}

/// What the catalog gave: the plans, and what it could not give.
#[derive(Default)]
struct Gathered {
    plans: Vec<StreamPlan>,
    findings: Vec<Finding>,
    names: Vec<String>,
}

/// Reads the catalog's view of the streams in `scope` (`only`: of one stream).
fn gather(meta: &MetaStore, scope: &Scope, only: Option<StreamId>) -> Gathered {
    let mut g = Gathered::default();
    let accounts = match scope {
        Scope::Store => meta.list_accounts(),
        Scope::Account(a) => vec![a.clone()],
    };
    for account in accounts {
        g.names.push(account.clone());
        for sm in meta.list_streams(&account) {
            if only.is_some_and(|id| id != sm.stream_id) {
                continue;
            }
            g.names.push(sm.name.clone());
            let handle = match meta.open_stream(sm.stream_id) {
                Ok(h) => h,
                Err(e) => {
                    g.findings.push(Finding {
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
            let mut plan = StreamPlan {
                id: sm.stream_id,
                dir: handle.dir.clone(),
                keys: Some(keys),
                dek_versions: meta
                    .stream_meta(sm.stream_id)
                    .map(|m| m.dek_versions)
                    .unwrap_or_default(),
                names: Vec::new(),
                consumers: 0,
                consumer_findings: Vec::new(),
                checkpoint,
            };
            if let Ok(list) = meta.list_consumers(sm.stream_id) {
                for c in list {
                    plan.names.push(c.name.clone());
                    let loaded = meta.load_consumer_state(sm.stream_id, c.consumer_id);
                    let found = match &loaded {
                        Ok(Some(st)) => Some(st.generation),
                        _ => None,
                    };
                    let problem = match (
                        &loaded,
                        plan.checkpoint.check_consumer(c.consumer_id, found),
                    ) {
                        (Err(e), _) => Some(e.to_string()),
                        (Ok(_), Err(why)) => Some(why),
                        (Ok(_), Ok(())) => None,
                    };
                    match problem {
                        None => plan.consumers += 1,
                        Some(detail) => plan.consumer_findings.push(Finding {
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
            g.plans.push(plan);
        }
    }
    g
}

/// Runs the audit of a stopped store.
pub fn audit(o: &AuditOptions) -> Report {
    let root =
        if o.store.join("STORE").exists() || !o.store.join("jetstream").join("STORE").exists() {
            o.store.clone()
        } else {
            o.store.join("jetstream")
        };
    let mut report = empty_report(&root, !o.no_key);
    if !root.join("STORE").is_file() {
        report.findings.push(Finding {
            class: Class::Key,
            path: "STORE".into(),
            offset: None,
            detail: "no STORE header: not a sealstream store".into(),
        });
        return report;
    }
    let catalog = if o.no_key {
        None
    } else {
        let source = match (&o.key, &o.key_file) {
            (Some(k), _) => KeySource::Passphrase(k.clone()),
            (None, Some(f)) => KeySource::KeyFile(f.clone()),
            (None, None) => KeySource::Auto,
        };
        match MetaStore::open(&root, source, MetaOptions::read_only()) {
            Ok(m) => Some(Catalog::Opened(Box::new(m))),
            Err(e) => {
                report.findings.push(Finding {
                    class: Class::Key,
                    path: "STORE".into(),
                    offset: None,
                    detail: e.to_string(),
                });
                None
            }
        }
    };
    let run = Run {
        root: &root,
        catalog: catalog.as_ref(),
        scope: Scope::Store,
        live: false,
        canaries: &o.canaries,
        progress: &o.progress,
        threads: 2,
    };
    run.run(report)
}

/// Audits the running server's store (or one account's part of it) while it serves.
pub fn audit_live(o: &LiveOptions<'_>) -> Report {
    let mut report = empty_report(&o.root, true);
    report.live = true;
    if let Scope::Account(a) = &o.scope {
        report.account = Some(a.clone());
        // Where the server keeps its store is not the tenant's business.
        report.store = format!("account {a}");
    }
    let catalog = Catalog::Live(o.meta);
    let run = Run {
        root: &o.root,
        catalog: Some(&catalog),
        scope: o.scope.clone(),
        live: true,
        canaries: &o.canaries,
        progress: &o.progress,
        // One thread: the server's work comes first.
        threads: 1,
    };
    run.run(report)
}

fn empty_report(root: &Path, keyed: bool) -> Report {
    Report {
        store: root.display().to_string(),
        store_id: None,
        kdf: None,
        cipher: CIPHER.to_owned(),
        segments: vec![],
        files: 0,
        bytes: 0,
        blocks_framed: 0,
        keyed,
        needles: 0,
        needles_too_short: 0,
        streams: vec![],
        account: None,
        live: false,
        raft: None,
        raft_groups: vec![],
        findings: vec![],
    }
}

/// One audit's settings.
struct Run<'a> {
    root: &'a Path,
    catalog: Option<&'a Catalog<'a>>,
    scope: Scope,
    live: bool,
    canaries: &'a [String],
    progress: &'a Progress,
    threads: usize,
}

impl Run<'_> {
    fn run(&self, mut report: Report) -> Report {
        let root = self.root;
        let mut needles = Needles::default();
        for c in self.canaries {
            needles.add(c.as_bytes());
        }
        // The consistent point: the catalog's checkpoints and consumer states, read first.
        let mut raft_keys = None;
        let gathered = self.catalog.map(|c| {
            c.with(|meta| {
                report.store_id = Some(data_encoding::HEXLOWER.encode(&meta.store_uuid()));
                report.kdf = Some(
                    match meta.kdf_kind() {
                        crate::store::meta::KdfKind::Passphrase => "argon2id passphrase",
                        crate::store::meta::KdfKind::KeyFile => "key file",
                    }
                    .to_owned(),
                );
                if self.scope == Scope::Store {
                    raft_keys = Some(meta.raft_secrets());
                    let mut scratch = empty_report(root, true);
                    raft_extent(root, meta, &mut scratch);
                    if self.live && !scratch.findings.is_empty() {
                        // Live, the log may have moved on between reading its extent and
                        // looking at its segments (a dead one deleted): once more.
                        scratch.findings.clear();
                        raft_extent(root, meta, &mut scratch);
                    }
                    report.findings.append(&mut scratch.findings);
                }
                gather(meta, &self.scope, None)
            })
        });
        // The Raft log's records and snapshots, read (and paced) outside the catalog's lock.
        if let Some((names, group_root)) = raft_keys {
            self.progress.begin(
                Phase::Raft,
                dir_bytes(&root.join(crate::store::meta::RAFT_DIR)),
            );
            let mut scratch = empty_report(root, true);
            (report.raft, report.raft_groups) =
                raft_records(root, &names, &group_root, self.progress, &mut scratch);
            if self.live && !scratch.findings.is_empty() {
                // Live, the log may have moved on while it was read (a segment rolled over
                // or deleted, a group gone): once more.
                scratch.findings.clear();
                (report.raft, report.raft_groups) =
                    raft_records(root, &names, &group_root, self.progress, &mut scratch);
            }
            report.findings.append(&mut scratch.findings);
            self.progress.end();
        }
        let (mut files, layout_findings) = layout::walk(root);
        let mut layout_findings: Vec<_> = layout_findings
            .into_iter()
            .map(|f| (f.path.display().to_string(), f.reason))
            .collect();
        if let (Scope::Account(_), Some(g)) = (&self.scope, &gathered) {
            // The account's streams' directories only.
            let mine: Vec<String> = g.plans.iter().map(|p| p.id.to_hex()).collect();
            let own = |p: &str| {
                mine.iter().any(|id| {
                    p.strip_prefix("s/")
                        .and_then(|r| r.strip_prefix(id.as_str()))
                        .is_some_and(|r| r.is_empty() || r.starts_with('/'))
                })
            };
            files.retain(|(p, _, _)| own(&p.display().to_string()));
            layout_findings.retain(|(p, _)| own(p));
        }
        for (path, reason) in layout_findings {
            report.findings.push(Finding {
                class: Class::Layout,
                path,
                offset: None,
                detail: reason,
            });
        }
        // A stream's newest segment, where a live server may be appending a block.
        let mut newest: std::collections::HashMap<String, u64> = Default::default();
        for (_, kind, _) in &files {
            if let FileKind::Segment { stream, segment } = kind {
                let n = newest.entry(stream.clone()).or_default();
                *n = (*n).max(*segment);
            }
        }
        let total_bytes: u64 = files.iter().map(|(_, _, len)| *len).sum();
        report.files = files.len() as u64;
        report.bytes = total_bytes;
        // The keys first: what they decrypt are the needles of the one pass over the files.
        if let (Some(catalog), Some(g)) = (self.catalog, gathered) {
            for n in &g.names {
                needles.add(n.as_bytes());
            }
            report.findings.extend(g.findings);
            self.keyed_checks(catalog, g.plans, &mut report, &mut needles);
        }
        // Needles short enough to turn up by chance in this much ciphertext are left out (and
        // counted): a finding must mean a leak.
        let (needles, too_short) = needles.significant(total_bytes);
        report.needles = needles.len();
        report.needles_too_short = too_short;
        self.progress.begin(Phase::Files, total_bytes);
        let mut outcome = self.file_pass(&files, &newest, &needles);
        outcome
            .findings
            .sort_by(|a, b| (&a.path, a.offset).cmp(&(&b.path, b.offset)));
        outcome.segments.sort_by(|a, b| a.path.cmp(&b.path));
        report.findings.extend(outcome.findings);
        report.segments = outcome.segments;
        report.blocks_framed = outcome.blocks_framed;
        self.progress.end();
        report
    }

    /// The one pass that reads every file: its layout kind's checks (a segment's framing and
    /// entropy, the `STORE` magic, a leftover temporary file) and the leak scan of its bytes
    /// and path, on `threads` threads taking files in turn.
    fn file_pass(
        &self,
        files: &[(PathBuf, FileKind, u64)],
        newest: &std::collections::HashMap<String, u64>,
        needles: &Needles,
    ) -> Scratch {
        let path_needles = needles.for_paths();
        let next = std::sync::atomic::AtomicUsize::new(0);
        // What the threads share (not the catalog: it stays with this one).
        let files_of = FileChecks {
            root: self.root,
            live: self.live,
            progress: self.progress,
        };
        let pass = || {
            let mut out = Scratch::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((path, kind, len)) = files.get(i) else {
                    return out;
                };
                files_of.progress.advance(*len);
                let relp = path.display().to_string();
                files_of.check(&relp, kind, newest, needles, &path_needles, &mut out);
            }
        };
        std::thread::scope(|s| {
            let others: Vec<_> = (1..self.threads.max(1)).map(|_| s.spawn(pass)).collect();
            let mut mine = pass();
            for o in others {
                let o = o.join().unwrap_or_default();
                mine.findings.extend(o.findings);
                mine.segments.extend(o.segments);
                mine.blocks_framed += o.blocks_framed;
            }
            mine
        })
    }

    fn keyed_checks(
        &self,
        catalog: &Catalog<'_>,
        plans: Vec<StreamPlan>,
        report: &mut Report,
        needles: &mut Needles,
    ) {
        let io: Arc<dyn crate::store::io::SegmentIo> = Arc::new(OsIo);
        let planned: u64 = plans.iter().map(|p| dir_bytes(&p.dir)).sum();
        self.progress.begin(Phase::Decrypt, planned);
        for plan in plans {
            let mut plan = plan;
            let mut opened = open_stream(&io, &mut plan);
            if self.live
                && !opened
                    .as_ref()
                    .is_ok_and(|s| s.report().corruption.is_empty())
            {
                // Live, the stream may have moved on since its checkpoint was read (a segment
                // deleted by retention, the stream deleted): read it again from a fresh one.
                match catalog.with(|meta| gather(meta, &self.scope, Some(plan.id))) {
                    g if g.plans.is_empty() && g.findings.is_empty() => continue,
                    mut g => match g.plans.pop() {
                        Some(fresh) => {
                            plan = fresh;
                            opened = open_stream(&io, &mut plan);
                        }
                        None => {
                            report.findings.extend(g.findings);
                            continue;
                        }
                    },
                }
            }
            for n in &plan.names {
                needles.add(n.as_bytes());
            }
            report.findings.append(&mut plan.consumer_findings);
            let store = match opened {
                Ok(s) => s,
                Err(e) => {
                    report.findings.push(Finding {
                        class: Class::Integrity,
                        path: rel(self.root, &plan.dir),
                        offset: None,
                        detail: e,
                    });
                    continue;
                }
            };
            self.progress.advance(store.disk_bytes());
            let rep = store.report().clone();
            for c in &rep.corruption {
                report.findings.push(Finding {
                    class: Class::Integrity,
                    path: rel(self.root, &c.file),
                    offset: Some(c.offset),
                    detail: c.reason.clone(),
                });
            }
            let st = store.state();
            // Opening authenticated every block: the index holds exactly the readable
            // messages, and every subject.
            let messages = st.msgs;
            for subject in store.subjects_state(">").keys() {
                needles.add_subject(subject);
            }
            for seq in payload_sample(st.first_seq, st.last_seq) {
                if let Ok(Some(m)) = store.get(seq) {
                    if m.payload.len() >= 8 {
                        needles
                            .add_payload(m.payload.get(..m.payload.len().min(32)).unwrap_or(&[]));
                    }
                }
            }
            report.streams.push(StreamReport {
                id: plan.id.to_hex(),
                segments: rep.segments_scanned,
                blocks: rep.blocks_verified,
                messages,
                bytes: store.disk_bytes(),
                torn_tail_bytes: rep.torn_tail.as_ref().map_or(0, |t| t.bytes),
                consumers: plan.consumers,
                dek_versions: plan.dek_versions,
                durable_mark: plan
                    .checkpoint
                    .mark
                    .map(|m| [m.segment_id, m.block_index, m.last_seq]),
            });
        }
    }
}

/// The file pass's settings, shared by its threads.
struct FileChecks<'a> {
    root: &'a Path,
    live: bool,
    progress: &'a Progress,
}

impl FileChecks<'_> {
    /// One file's checks: its path and bytes searched for every needle, and what its kind
    /// calls for (a segment's framing and entropy, the `STORE` magic, a leftover temporary
    /// file).
    fn check(
        &self,
        relp: &str,
        kind: &FileKind,
        newest: &std::collections::HashMap<String, u64>,
        needles: &Needles,
        path_needles: &Needles,
        out: &mut Scratch,
    ) {
        let finding = |class, offset, detail: String| Finding {
            class,
            path: relp.to_owned(),
            offset,
            detail,
        };
        for hit in path_needles.found_in(relp.as_bytes()) {
            out.findings
                .push(finding(Class::Leak, None, format!("path contains {hit:?}")));
        }
        if let FileKind::Temp = kind {
            // A running server writes by rename through `tmp/`.
            if !self.live {
                out.findings.push(finding(
                    Class::Layout,
                    None,
                    "leftover tmp/ file on a stopped store".into(),
                ));
            }
        }
        // Into the thread's one buffer: a fresh allocation per file cost the audit a page
        // fault per 4 KiB it read.
        // Read once: its pages leave the page cache after (`page_cache.rs`), but for a live
        // stream's newest segment, which its consumers are likely reading too.
        let hot = self.live
            && matches!(kind, FileKind::Segment { stream, segment } if newest.get(stream) == Some(segment));
        let read = std::fs::File::open(self.root.join(relp)).and_then(|mut f| {
            use std::io::Read as _;
            out.buf.clear();
            let n = f.read_to_end(&mut out.buf);
            if !hot {
                crate::page_cache::dont_need(&f, 0, 0);
            }
            n
        });
        let bytes = match read {
            Ok(_) => std::mem::take(&mut out.buf),
            // Live: gone since the listing (retention, a rename); nothing left to check.
            Err(e) if self.live && e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => {
                let class = match kind {
                    FileKind::StoreHeader => Class::Key,
                    _ => Class::Integrity,
                };
                out.findings.push(finding(class, None, "unreadable".into()));
                return;
            }
        };
        match kind {
            FileKind::StoreHeader if !bytes.starts_with(b"SEALSTOR") => {
                out.findings
                    .push(finding(Class::Key, Some(0), "bad STORE magic".into()));
            }
            FileKind::Segment { stream, segment } => {
                let appending = self.live && newest.get(stream) == Some(segment);
                check_segment_framing(&bytes, relp, appending, out);
            }
            _ => {}
        }
        if !needles.is_empty() {
            for hit in needles.found_in(&bytes) {
                let offset = memchr::memmem::find(&bytes, hit.as_bytes()).map(|o| o as u64);
                out.findings.push(finding(
                    Class::Leak,
                    offset,
                    format!("plaintext {hit:?} in the raw bytes"),
                ));
            }
        }
        out.buf = bytes;
    }
}

/// What the file pass found (merged into the report once every file was read).
#[derive(Default)]
struct Scratch {
    findings: Vec<Finding>,
    segments: Vec<SegmentHead>,
    blocks_framed: u64,
    /// The thread's read buffer, reused file after file.
    buf: Vec<u8>,
}

/// The sequences whose payload prefixes a stream offers to the leak scan's sample: all of
/// them up to [`scan::PAYLOAD_SAMPLES`], else that many in 64 runs of consecutive sequences
/// spread evenly over the stream (a run shares its blocks: the sample decrypts a few blocks
/// again, not the whole stream, which opening it has authenticated already).
fn payload_sample(first: u64, last: u64) -> Vec<u64> {
    const RUNS: u64 = 64;
    if first == 0 || last < first {
        return Vec::new();
    }
    let total = last - first + 1;
    let want = scan::PAYLOAD_SAMPLES as u64;
    if total <= want {
        return (first..=last).collect();
    }
    let run = want / RUNS;
    let stride = total / RUNS;
    (0..RUNS)
        .flat_map(|r| {
            let start = first + r * stride;
            start..(start + run).min(last + 1)
        })
        .collect()
}

/// Opens one stream's files for inspection against its plan's checkpoint.
fn open_stream(
    io: &Arc<dyn crate::store::io::SegmentIo>,
    plan: &mut StreamPlan,
) -> Result<FileStore, String> {
    let keys = plan
        .keys
        .take()
        .ok_or("the stream's keys were used already")?;
    let mut fcfg = FileStoreConfig::new(plan.dir.clone());
    fcfg.min_durable = plan.checkpoint.mark;
    FileStore::open_inspect(Arc::clone(io), keys, fcfg).map_err(|e| e.to_string())
}

/// The bytes of a directory's files (not recursive): what decrypting a stream reads.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Walks a segment's blocks by their framing (no key needed) and checks ciphertext entropy.
/// `appending`: a live stream's newest segment, whose last block may be being written — a
/// problem at its end is not a finding (the keyed pass reads it as a torn tail, the next audit
/// sees it whole).
fn check_segment_framing(bytes: &[u8], relp: &str, appending: bool, report: &mut Scratch) {
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
    let record = |report: &mut Scratch, head: SegmentHead| report.segments.push(head);
    // The last block's low-entropy finding waits for the next block while appending: a block
    // being written is zeros until its bytes land.
    let mut held: Option<Finding> = None;
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
        let frame = match (word(off), word(off + 4)) {
            (Some(sync), Some(len))
                if sync == SYNC_MARKER
                    && len <= MAX_BLOCK_LEN
                    && (len as usize) >= FRAME_HEADER_LEN =>
            {
                bytes
                    .get(off..off + len as usize)
                    .ok_or("block runs past the end of the file")
            }
            (Some(_), Some(_)) => Err("no block frame here (sync marker or length)"),
            _ => Err("truncated block frame"),
        };
        let block = match frame {
            Ok(b) => b,
            Err(detail) => {
                if !appending {
                    report.findings.push(Finding {
                        class: Class::Integrity,
                        path: relp.into(),
                        offset: Some(off as u64),
                        detail: detail.into(),
                    });
                }
                break;
            }
        };
        let end = off + block.len();
        let ct = block.get(FRAME_HEADER_LEN..).unwrap_or(&[]);
        report.findings.extend(held.take());
        // The body's first 4 KiB: a block that is not ciphertext shows it from its start
        // (records begin with their subjects and headers), and the whole body would cost the
        // audit a pass over every byte.
        let sample = ct.get(..ct.len().min(4096)).unwrap_or(ct);
        if sample.len() > 256 && entropy_bits_per_byte(sample) <= 7.5 {
            let f = Finding {
                class: Class::Leak,
                path: relp.into(),
                offset: Some(off as u64),
                detail: "block body does not look like ciphertext (entropy)".into(),
            };
            if appending {
                held = Some(f);
            } else {
                report.findings.push(f);
            }
        }
        report.blocks_framed += 1;
        head.blocks += 1;
        head.head = data_encoding::HEXLOWER
            .encode(block.get(block.len().saturating_sub(16)..).unwrap_or(&[]));
        off = end;
    }
    record(report, head);
}

/// A clustered node's Raft log opened as the node would open it, read only (paced as the
/// rest of a live audit): the sealed group
/// directory gives the groups and their keys (a key rotation under way: both; a finished one:
/// the new key and where its records start), and every record of those groups must
/// authenticate, every purged group's snapshot too (`SealedLog::verify`). After a group-key
/// rotation this is the proof that no live record depends on the older key: the directory no
/// longer holds it, and the log still opens.
fn raft_records(
    root: &Path,
    names: &crate::crypto::Key32,
    group_root: &crate::crypto::Key32,
    progress: &Progress,
    report: &mut Report,
) -> (
    Option<crate::consensus::sealed_log::LogAudit>,
    Vec<RaftGroupReport>,
) {
    use crate::consensus::{directory, sealed_log};
    let dir = root.join(crate::store::meta::RAFT_DIR);
    if !dir.is_dir() {
        return (None, Vec::new());
    }
    let mut finding = |path: String, offset: Option<u64>, detail: String| {
        report.findings.push(Finding {
            class: Class::Integrity,
            path,
            offset,
            detail,
        });
    };
    let directory = match directory::read_directory(&dir, group_root) {
        Ok(d) => d,
        Err(e) => {
            finding(format!("raft/{}", directory::DIRECTORY), None, e);
            return (None, Vec::new());
        }
    };
    let groups = directory.log_groups(group_root);
    match sealed_log::SealedLog::verify(&dir, names, groups, &mut |n| progress.advance(n)) {
        Ok(audit) => {
            let by_group = directory
                .groups
                .iter()
                .map(|&g| (g, directory.hosted(group_root, g)))
                .chain([(
                    directory::META,
                    directory.hosted(group_root, directory::META),
                )])
                .map(|(g, hosted)| RaftGroupReport {
                    group: RaftGroupReport::id_of(g),
                    stream: (g == directory::META).then(|| "meta".to_owned()),
                    records: audit
                        .records_by_slot
                        .get(&hosted.group)
                        .copied()
                        .unwrap_or(0),
                    keys: hosted.keys.len(),
                    key_generation: directory.rotated.get(&g).map_or(0, |r| r.generation),
                })
                .collect();
            (Some(audit), by_group)
        }
        Err(sealed_log::LogError::Corrupt { path, offset, why }) => {
            finding(rel(root, &path), Some(offset), why.to_owned());
            (None, Vec::new())
        }
        Err(e) => {
            finding("raft".into(), None, e.to_string());
            (None, Vec::new())
        }
    }
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
