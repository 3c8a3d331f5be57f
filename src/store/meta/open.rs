//! [`MetaStore::open`]: create a store, or verify the key and every metadata file of an
//! existing one before anything is written; then the startup clean-up.
//!
//! Opening an existing store, in order (nothing is created, renamed, truncated or deleted
//! until step 6):
//!
//! 1. Lock `LOCK` if it exists (exclusive, or shared when read-only). Never created here.
//! 2. Read and check `STORE` (size, checksum, magic, version, active slot).
//! 3. Get the master key from the [`KeySource`] (argon2id with the active slot's parameters,
//!    which must meet the floor, or a key file), derive the KEK, compare `kek_id` and verify
//!    the slot MAC. Mismatch: [`MetaError::WrongKey`], "store key does not match".
//! 4. Open the keyring generation the slot names (every wrapped key must unwrap).
//! 5. Open the catalog generation the keyring names (header seal, every record, the chain,
//!    the watermark) and check every live stream and account has keys.
//! 6. Read-write only: create `LOCK` if it was missing, empty `tmp/`, cut a torn catalog
//!    tail, erase keys of streams the catalog does not list, shred stale generations, remove
//!    directories and state files of deleted streams and consumers.
//!
//! A new store is created only when `STORE` is absent and `store_dir` is absent, empty, or
//! holds nothing but the skeleton of an interrupted creation. With [`KeySource::Auto`] the key
//! file `<store_dir>.key` is generated then (mode 0600, outside `store_dir`) and its path is
//! logged; for an existing store a missing key file is an error, never a new key.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::crypto::{KdfParams, Kek, MasterKey};

use super::catalog::{self, CatalogId, CatalogLog, CatalogState, CATALOG_DIR};
use super::error::io_err;
use super::header::{self, KdfKind, Slot, SlotCheck, SlotId, StoreHeader, HEADER_LEN, STORE_FILE};
use super::ids::random_unreserved_id;
use super::keyring::{self, Keyring, CATALOG_OWNER, KEYRING_DIR, MAX_KEYRING_FILE};
use super::lock::{StoreLock, LOCK_FILE};
use super::tmp::{self, TMP_DIR};
use super::{KdfPolicy, KeySource, MetaError, MetaOptions, OpenReport, Step, StepHook};

/// Directory of stream directories under `store_dir`.
pub(crate) const STREAMS_DIR: &str = "s";
/// The node's Raft log, when the server is part of a JetStream cluster (written by
/// `consensus::sealed_log`, sealed with keys from [`MetaStore::raft_secrets`]).
pub const RAFT_DIR: &str = "raft";

/// The store's metadata, open. Owned by one task; every mutation takes `&mut self`.
pub struct MetaStore {
    pub(super) root: PathBuf,
    pub(super) read_only: bool,
    pub(super) kdf: KdfPolicy,
    _lock: Option<StoreLock>,
    pub(super) header: StoreHeader,
    pub(super) kek: Kek,
    pub(super) keyring: Keyring,
    pub(super) catalog: CatalogLog,
    pub(super) state: CatalogState,
    pub(super) poisoned: bool,
    pub(super) hook: Option<StepHook>,
    report: OpenReport,
}

impl fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaStore")
            .field("root", &self.root)
            .field(
                "store_uuid",
                &data_encoding::HEXLOWER.encode(&self.header.store_uuid),
            )
            .field("read_only", &self.read_only)
            .field("keyring_gen", &self.keyring.gen)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

/// The automatic key file of a store: `<store_dir>.key`, next to (outside) `store_dir`.
///
/// # Errors
/// [`MetaError::KeyConfig`] when `store_dir` has no final name component to append to.
pub fn auto_key_path(store_dir: &Path) -> Result<PathBuf, MetaError> {
    let dir = match store_dir.file_name() {
        Some(_) => store_dir.to_path_buf(),
        None => fs::canonicalize(store_dir).map_err(io_err("resolve", store_dir))?,
    };
    let name = dir.file_name().ok_or_else(|| {
        MetaError::KeyConfig(format!(
            "cannot place a key file next to store_dir {}; configure key_file",
            store_dir.display()
        ))
    })?;
    let mut file = name.to_os_string();
    file.push(".key");
    Ok(dir.with_file_name(file))
}

fn absolute(p: &Path) -> PathBuf {
    match fs::canonicalize(p) {
        Ok(c) => c,
        Err(_) => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
    }
}

/// Refuses a key file inside `store_dir` (the key must not sit next to its ciphertext).
fn check_key_file_outside(root: &Path, key_file: &Path) -> Result<(), MetaError> {
    if absolute(key_file).starts_with(absolute(root)) {
        return Err(MetaError::KeyConfig(format!(
            "key file {} is inside store_dir {}; keep it outside",
            key_file.display(),
            root.display()
        )));
    }
    Ok(())
}

impl KdfPolicy {
    fn new_params(self) -> KdfParams {
        match self {
            KdfPolicy::Standard => KdfParams::new_random(),
            KdfPolicy::InsecureFast => KdfParams {
                m_kib: 64,
                t: 1,
                p: 1,
                salt: crate::crypto::random_id(),
            },
        }
    }

    fn stretch(self, passphrase: &str, params: &KdfParams) -> Result<MasterKey, MetaError> {
        Ok(match self {
            KdfPolicy::Standard => MasterKey::from_passphrase(passphrase.as_bytes(), params)?,
            KdfPolicy::InsecureFast => {
                MasterKey::from_passphrase_unchecked(passphrase.as_bytes(), params)?
            }
        })
    }
}

/// Master key material for a new slot (a new store or a rotation).
pub(super) struct NewKey {
    pub(super) mk: MasterKey,
    pub(super) kind: KdfKind,
    pub(super) params: KdfParams,
    pub(super) generated: Option<PathBuf>,
}

/// Makes the master key for a new slot. `Auto` may generate the key file (callers decide
/// whether that is allowed).
pub(super) fn new_key(
    root: &Path,
    source: &KeySource,
    policy: KdfPolicy,
) -> Result<NewKey, MetaError> {
    match source {
        KeySource::Passphrase(p) => {
            let params = policy.new_params();
            let mk = policy.stretch(p, &params)?;
            Ok(NewKey {
                mk,
                kind: KdfKind::Passphrase,
                params,
                generated: None,
            })
        }
        KeySource::KeyFile(path) => {
            check_key_file_outside(root, path)?;
            let mk = MasterKey::load_key_file(path)?;
            Ok(NewKey {
                mk,
                kind: KdfKind::KeyFile,
                params: header::NO_KDF_PARAMS,
                generated: None,
            })
        }
        KeySource::Auto => {
            let path = auto_key_path(root)?;
            if path.exists() {
                tracing::info!(key_file = %path.display(), "using the existing store key file");
                let mk = MasterKey::load_key_file(&path)?;
                Ok(NewKey {
                    mk,
                    kind: KdfKind::KeyFile,
                    params: header::NO_KDF_PARAMS,
                    generated: None,
                })
            } else {
                let mk = MasterKey::generate_key_file(&path)?;
                tracing::info!(
                    key_file = %path.display(),
                    "generated a new store key file (mode 0600); back it up: without it the store cannot be opened"
                );
                Ok(NewKey {
                    mk,
                    kind: KdfKind::KeyFile,
                    params: header::NO_KDF_PARAMS,
                    generated: Some(path),
                })
            }
        }
    }
}

/// Derives the KEK a slot expects from `source`, without writing anything.
fn derive_for_slot(
    root: &Path,
    source: &KeySource,
    slot: &Slot,
    store_uuid: &[u8; 16],
    policy: KdfPolicy,
) -> Result<Kek, MetaError> {
    let mk = match (source, slot.kdf) {
        (KeySource::Passphrase(p), KdfKind::Passphrase) => policy.stretch(p, &slot.params)?,
        (KeySource::Passphrase(_), KdfKind::KeyFile) => {
            return Err(MetaError::WrongKey {
                detail: "the store is keyed by a key file, a passphrase was given",
            })
        }
        (KeySource::KeyFile(path), KdfKind::KeyFile) => {
            check_key_file_outside(root, path)?;
            MasterKey::load_key_file(path)?
        }
        (KeySource::Auto, KdfKind::KeyFile) => {
            let path = auto_key_path(root)?;
            if !path.exists() {
                return Err(MetaError::KeyFileMissing {
                    store: root.to_owned(),
                    key_file: path,
                });
            }
            MasterKey::load_key_file(&path)?
        }
        (KeySource::KeyFile(_), KdfKind::Passphrase) => {
            return Err(MetaError::WrongKey {
                detail: "the store is keyed by a passphrase, a key file was given",
            })
        }
        (KeySource::Auto, KdfKind::Passphrase) => {
            return Err(MetaError::WrongKey {
                detail: "the store is keyed by a passphrase and none is configured",
            })
        }
    };
    Ok(Kek::derive(&mk, store_uuid))
}

fn read_header(root: &Path) -> Result<StoreHeader, MetaError> {
    let path = root.join(STORE_FILE);
    let corrupt = |reason: String| MetaError::HeaderCorrupt {
        path: path.clone(),
        reason,
    };
    let meta = fs::metadata(&path).map_err(io_err("stat", &path))?;
    if meta.len() != HEADER_LEN as u64 {
        return Err(corrupt(format!(
            "length {} (expected {HEADER_LEN})",
            meta.len()
        )));
    }
    let bytes = fs::read(&path).map_err(io_err("read", &path))?;
    StoreHeader::decode(&bytes).map_err(corrupt)
}

fn load_keyring(
    root: &Path,
    kek: &Kek,
    store_uuid: &[u8; 16],
    gen: u64,
) -> Result<Keyring, MetaError> {
    let path = keyring::keyring_path(root, gen);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MetaError::KeyringMissing(path))
        }
        Err(e) => return Err(io_err("stat", &path)(e)),
    };
    if meta.len() > MAX_KEYRING_FILE {
        return Err(MetaError::KeyringCorrupt {
            path,
            reason: "file exceeds the size limit".into(),
        });
    }
    let bytes = fs::read(&path).map_err(io_err("read", &path))?;
    Keyring::open(&bytes, kek, store_uuid, gen)
        .map_err(|reason| MetaError::KeyringCorrupt { path, reason })
}

/// The catalog of a keyring: its id, path and sealing key.
fn catalog_key_of(
    root: &Path,
    kek: &Kek,
    kr: &Keyring,
    store_uuid: &[u8; 16],
) -> Result<(CatalogId, PathBuf, crate::crypto::SealKey), MetaError> {
    let kr_path = keyring::keyring_path(root, kr.gen);
    let bad = |reason: &str| MetaError::KeyringCorrupt {
        path: kr_path.clone(),
        reason: reason.into(),
    };
    let version = kr.catalog_version().ok_or_else(|| bad("no catalog key"))?;
    let wrapped = kr
        .catalog_keys
        .get(&version)
        .ok_or_else(|| bad("no catalog key"))?;
    let dek = kek
        .unwrap(wrapped, &CATALOG_OWNER, version)
        .map_err(|_| bad("catalog key does not unwrap"))?;
    let id = CatalogId {
        store_uuid: *store_uuid,
        gen: kr.catalog_gen,
        key_version: version,
    };
    Ok((
        id,
        catalog::catalog_path(root, kr.catalog_gen),
        keyring::catalog_seal_key(&dek),
    ))
}

/// What `store_dir` holds when there is no `STORE`.
enum NewRoot {
    /// Absent or empty.
    Fresh,
    /// Only the skeleton an interrupted creation leaves (no stream data).
    Interrupted,
}

fn inspect_new_root(root: &Path) -> Result<NewRoot, MetaError> {
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(NewRoot::Fresh),
        Err(e) => return Err(io_err("list", root)(e)),
    };
    let not_a_store = |reason: String| MetaError::NotAStore {
        path: root.to_owned(),
        reason,
    };
    let mut any = false;
    for entry in entries {
        let entry = entry.map_err(io_err("list", root))?;
        any = true;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        let ok = match name.as_ref() {
            LOCK_FILE => entry.file_type().map(|t| t.is_file()).unwrap_or(false),
            TMP_DIR => true,
            STREAMS_DIR => dir_names(&path)?.is_empty(),
            KEYRING_DIR => dir_names(&path)?
                .iter()
                .all(|n| keyring::parse_keyring_name(n).is_some()),
            CATALOG_DIR => dir_names(&path)?
                .iter()
                .all(|n| catalog::parse_catalog_name(n).is_some()),
            _ => false,
        };
        if !ok {
            return Err(not_a_store(format!(
                "it is not empty and has no {STORE_FILE} header (found {name}); refusing to \
                 initialise over unknown data"
            )));
        }
    }
    Ok(if any {
        NewRoot::Interrupted
    } else {
        NewRoot::Fresh
    })
}

fn dir_names(dir: &Path) -> Result<Vec<String>, MetaError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let e = e.map_err(io_err("list", dir))?;
        out.push(e.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

impl MetaStore {
    /// Opens the store at `store_dir`, creating it when it is brand new (not read-only).
    ///
    /// # Errors
    /// - [`MetaError::WrongKey`] ("store key does not match"): nothing under `store_dir` was
    ///   created, renamed or deleted.
    /// - [`MetaError::KeyFileMissing`], [`MetaError::Key`], [`MetaError::KeyConfig`]: no usable
    ///   key; nothing was written.
    /// - [`MetaError::HeaderCorrupt`], [`MetaError::KeyringMissing`],
    ///   [`MetaError::KeyringCorrupt`], [`MetaError::CatalogMissing`],
    ///   [`MetaError::CatalogCorrupt`]: damaged metadata, named precisely; nothing was written.
    /// - [`MetaError::NotAStore`]: `store_dir` holds unknown data and no `STORE`.
    /// - [`MetaError::Locked`]: another process has the store open.
    /// - [`MetaError::Io`].
    pub fn open(
        store_dir: &Path,
        key: KeySource,
        options: MetaOptions,
    ) -> Result<MetaStore, MetaError> {
        let root = store_dir.to_path_buf();
        let store_file = root.join(STORE_FILE);
        match fs::symlink_metadata(&store_file) {
            Ok(_) => Self::open_existing(root, &key, &options),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if options.read_only {
                    return Err(MetaError::NotAStore {
                        path: root,
                        reason: format!("no {STORE_FILE} header"),
                    });
                }
                Self::create(root, &key, &options)
            }
            Err(e) => Err(io_err("stat", &store_file)(e)),
        }
    }

    fn open_existing(
        root: PathBuf,
        key: &KeySource,
        options: &MetaOptions,
    ) -> Result<MetaStore, MetaError> {
        let lock = StoreLock::acquire_existing(&root, !options.read_only)?;
        let header = read_header(&root)?;
        let uuid = header.store_uuid;
        let corrupt = |reason: String| MetaError::HeaderCorrupt {
            path: root.join(STORE_FILE),
            reason,
        };
        let slot = header
            .active_slot()
            .ok_or_else(|| corrupt("active slot is empty".into()))?
            .clone();
        let kek = derive_for_slot(&root, key, &slot, &uuid, options.kdf)?;
        match slot.check(&kek, &uuid, header.active) {
            SlotCheck::Ok => {}
            SlotCheck::Corrupt(r) => return Err(corrupt(format!("active slot: {r}"))),
            SlotCheck::WrongKey => {
                let other = header.active.other();
                let matches_other = header.slot(other).is_some_and(|s| {
                    derive_for_slot(&root, key, s, &uuid, options.kdf)
                        .is_ok_and(|k| s.check(&k, &uuid, other) == SlotCheck::Ok)
                });
                return Err(MetaError::WrongKey {
                    detail: if matches_other {
                        "it is the key of the inactive slot: the previous key after a completed \
                         rotation, or the new key of an interrupted one"
                    } else {
                        "kek_id differs from the active STORE slot"
                    },
                });
            }
        }
        let mut keyring = load_keyring(&root, &kek, &uuid, slot.keyring_gen)?;
        let (cat_id, cat_path, cat_key) = catalog_key_of(&root, &kek, &keyring, &uuid)?;
        let loaded = catalog::load(&cat_path, &cat_id, &cat_key)?;
        if loaded.cursor.records < keyring.catalog_watermark {
            return Err(MetaError::CatalogCorrupt {
                path: cat_path,
                offset: loaded.cursor.end,
                reason: format!(
                    "holds {} records but the keyring was written after record {} (truncated or \
                     rolled back)",
                    loaded.cursor.records, keyring.catalog_watermark
                ),
            });
        }
        let kr_path = keyring::keyring_path(&root, keyring.gen);
        keyring.claim_spares(
            loaded
                .state
                .streams
                .iter()
                .map(|(sid, s)| (&s.account, sid)),
        );
        for (sid, s) in &loaded.state.streams {
            match keyring.stream(sid) {
                Some((aid, _)) if *aid == s.account => {}
                Some(_) => {
                    return Err(MetaError::KeyringCorrupt {
                        path: kr_path,
                        reason: format!("stream {sid} is filed under another account"),
                    })
                }
                None => {
                    return Err(MetaError::KeyringCorrupt {
                        path: kr_path,
                        reason: format!("stream {sid} in the catalog has no data key"),
                    })
                }
            }
        }
        if loaded
            .state
            .accounts
            .keys()
            .any(|a| !keyring.accounts.contains_key(a))
        {
            return Err(MetaError::KeyringCorrupt {
                path: kr_path,
                reason: "an account in the catalog has no key group".into(),
            });
        }
        // Everything verified: from here on, writing is allowed.
        let lock = match (lock, options.read_only) {
            (Some(l), _) => Some(l),
            (None, true) => {
                tracing::warn!(store = %root.display(), "no LOCK file; read-only open proceeds unlocked");
                None
            }
            (None, false) => Some(StoreLock::create_and_acquire(&root)?),
        };
        let catalog =
            CatalogLog::new(cat_path, cat_id, cat_key, loaded.cursor, !options.read_only)?;
        let mut store = MetaStore {
            root,
            read_only: options.read_only,
            kdf: options.kdf,
            _lock: lock,
            header,
            kek,
            keyring,
            catalog,
            state: loaded.state,
            poisoned: false,
            hook: None,
            report: OpenReport {
                catalog_torn_bytes: loaded.torn_bytes,
                ..OpenReport::default()
            },
        };
        if !store.read_only {
            store.sweep()?;
            if store.keyring.raft.is_none() {
                // Kept from now on, so that a master-key rotation no longer changes them.
                let wrapped = raft_secrets_wrapped(&store.kek);
                store.mutate(|s| {
                    let mut kr = s.next_keyring();
                    kr.raft = Some(wrapped);
                    s.commit_keyring(kr)
                })?;
            }
        }
        Ok(store)
    }

    fn create(
        root: PathBuf,
        key: &KeySource,
        options: &MetaOptions,
    ) -> Result<MetaStore, MetaError> {
        if let KeySource::KeyFile(path) = key {
            check_key_file_outside(&root, path)?;
        }
        inspect_new_root(&root)?;
        // Key material first: a bad key file or passphrase setting creates nothing. `Auto`
        // generates the key file only here, for a directory that holds no data.
        let nk = new_key(&root, key, options.kdf)?;
        tmp::create_dir_durable(&root)?;
        let lock = StoreLock::create_and_acquire(&root)?;
        if root.join(STORE_FILE).exists() {
            return Err(MetaError::NotAStore {
                path: root,
                reason: "another process created a store here concurrently".into(),
            });
        }
        if let NewRoot::Interrupted = inspect_new_root(&root)? {
            tracing::info!(store = %root.display(), "clearing an interrupted store creation");
            for d in [KEYRING_DIR, CATALOG_DIR] {
                let dir = root.join(d);
                if dir.exists() {
                    for n in dir_names(&dir)? {
                        tmp::remove_file_durable(&dir.join(n))?;
                    }
                }
            }
        }
        for d in [TMP_DIR, KEYRING_DIR, CATALOG_DIR, STREAMS_DIR] {
            tmp::create_dir_durable(&root.join(d))?;
        }
        tmp::clear_tmp(&root)?;
        let uuid = random_unreserved_id();
        let kek = Kek::derive(&nk.mk, &uuid);
        drop(nk.mk);
        let (cat_dek, cat_wrapped) = keyring::new_wrapped(&kek, &CATALOG_OWNER, 1);
        let cat_key = keyring::catalog_seal_key(&cat_dek);
        let cat_id = CatalogId {
            store_uuid: uuid,
            gen: 1,
            key_version: 1,
        };
        let (bytes, cursor) = catalog::build_generation(&cat_id, &cat_key, &[]);
        let cat_path = catalog::catalog_path(&root, 1);
        tmp::write_atomic(&root, &cat_path, &bytes)?;
        let mut catalog_keys = std::collections::BTreeMap::new();
        catalog_keys.insert(1, cat_wrapped);
        let kr = Keyring {
            gen: 1,
            catalog_gen: 1,
            catalog_watermark: 0,
            catalog_keys,
            accounts: std::collections::BTreeMap::new(),
            raft: Some(raft_secrets_wrapped(&kek)),
        };
        tmp::write_atomic(
            &root,
            &keyring::keyring_path(&root, 1),
            &kr.seal(&kek, &uuid),
        )?;
        let slot = Slot::new(&kek, &uuid, SlotId::A, nk.kind, nk.params, 1);
        let header = StoreHeader::new(uuid, SlotId::A, slot);
        tmp::write_atomic(&root, &root.join(STORE_FILE), &header.encode())?;
        tracing::info!(store = %root.display(), "created a new sealed store");
        let catalog = CatalogLog::new(cat_path, cat_id, cat_key, cursor, true)?;
        Ok(MetaStore {
            root,
            read_only: false,
            kdf: options.kdf,
            _lock: Some(lock),
            header,
            kek,
            keyring: kr,
            catalog,
            state: CatalogState::default(),
            poisoned: false,
            hook: None,
            report: OpenReport {
                created: true,
                generated_key_file: nk.generated,
                ..OpenReport::default()
            },
        })
    }

    /// Startup clean-up after full verification (read-write opens only).
    fn sweep(&mut self) -> Result<(), MetaError> {
        self.report.tmp_entries_removed = tmp::clear_tmp(&self.root)?;
        if self.report.catalog_torn_bytes > 0 {
            tracing::warn!(
                bytes = self.report.catalog_torn_bytes,
                "cutting a torn final catalog record"
            );
            self.catalog.truncate_torn_tail()?;
        }
        let mut kr = self.next_keyring();
        let mut erased = 0usize;
        let state = &self.state;
        kr.accounts.retain(|aid, g| {
            if state.accounts.contains_key(aid) {
                g.streams.retain(|sid, _| {
                    let live = state.streams.contains_key(sid);
                    erased += usize::from(!live);
                    live
                });
                true
            } else {
                erased += 1 + g.streams.len();
                false
            }
        });
        if erased > 0 {
            tracing::info!(
                keys = erased,
                "erasing data keys of interrupted creates or deletes"
            );
            self.commit_keyring(kr)?;
            self.report.orphan_keys_erased = erased;
        }
        let mut unexpected = Vec::new();
        let mut stale = 0;
        for n in dir_names(&self.root.join(KEYRING_DIR))? {
            match keyring::parse_keyring_name(&n) {
                Some(g) if g == self.keyring.gen => {}
                Some(_) => {
                    tmp::shred_and_remove(&self.root.join(KEYRING_DIR).join(&n))?;
                    stale += 1;
                }
                None => unexpected.push(self.root.join(KEYRING_DIR).join(&n)),
            }
        }
        for n in dir_names(&self.root.join(CATALOG_DIR))? {
            match catalog::parse_catalog_name(&n) {
                Some(g) if g == self.keyring.catalog_gen => {}
                Some(_) => {
                    tmp::shred_and_remove(&self.root.join(CATALOG_DIR).join(&n))?;
                    stale += 1;
                }
                None => unexpected.push(self.root.join(CATALOG_DIR).join(&n)),
            }
        }
        self.report.stale_generations_removed = stale;
        let sdir = self.root.join(STREAMS_DIR);
        tmp::create_dir_durable(&sdir)?;
        let mut removed = 0;
        for n in dir_names(&sdir)? {
            let path = sdir.join(&n);
            let is_dir = fs::symlink_metadata(&path)
                .map(|m| m.is_dir())
                .unwrap_or(false);
            match super::StreamId::from_hex(&n) {
                Some(sid) if is_dir && self.state.streams.contains_key(&sid) => {
                    removed += self.sweep_consumer_states(&sid, &path, &mut unexpected)?;
                }
                Some(_) if is_dir => {
                    tmp::remove_dir_durable(&path)?;
                    removed += 1;
                }
                _ => unexpected.push(path),
            }
        }
        self.report.orphan_paths_removed = removed;
        for n in dir_names(&self.root)? {
            if ![
                STORE_FILE,
                LOCK_FILE,
                KEYRING_DIR,
                CATALOG_DIR,
                STREAMS_DIR,
                TMP_DIR,
                RAFT_DIR,
            ]
            .contains(&n.as_str())
            {
                unexpected.push(self.root.join(n));
            }
        }
        for p in &unexpected {
            tracing::warn!(path = %p.display(), "unexpected path in the store (left in place)");
        }
        self.report.unexpected_paths = unexpected;
        Ok(())
    }

    fn sweep_consumer_states(
        &self,
        sid: &super::StreamId,
        dir: &Path,
        unexpected: &mut Vec<PathBuf>,
    ) -> Result<usize, MetaError> {
        let cdir = dir.join(super::consumer_state::CONSUMER_DIR);
        if !cdir.is_dir() {
            return Ok(0);
        }
        let mut removed = 0;
        for n in dir_names(&cdir)? {
            match super::consumer_state::parse_state_file_name(&n) {
                Some(cid)
                    if self
                        .state
                        .consumers
                        .get(&cid)
                        .is_some_and(|c| c.stream == *sid) => {}
                Some(_) => {
                    tmp::remove_file_durable(&cdir.join(&n))?;
                    removed += 1;
                }
                None => unexpected.push(cdir.join(n)),
            }
        }
        Ok(removed)
    }

    /// Whether an earlier failed update poisoned this handle (it refuses writes).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Closes this handle (releasing the lock) and opens the store again: the same recovery a
    /// restart runs, so the leftovers of a failed update are cleaned up. The server uses it
    /// after an update failed on a full disk, instead of staying poisoned until it restarts.
    ///
    /// # Errors
    /// As [`MetaStore::open`]; on error this handle stays poisoned and no longer holds the
    /// lock.
    pub fn reopen(&mut self, key: KeySource) -> Result<(), MetaError> {
        let options = MetaOptions {
            read_only: self.read_only,
            kdf: self.kdf,
        };
        let root = self.root.clone();
        self.poisoned = true;
        self._lock = None;
        let fresh = MetaStore::open(&root, key, options)?;
        *self = fresh;
        Ok(())
    }

    /// Closes this handle at shutdown: the lock is released (another server, or this one
    /// started again in the same process, may open the store), and the handle refuses any
    /// further write as a poisoned one does.
    pub fn close(&mut self) {
        self.poisoned = true;
        self._lock = None;
    }

    /// The secrets the node's Raft log is sealed with: `(names, groups)` — the key of the
    /// records' pseudonyms and the root each group's key is derived from. Both come from the
    /// store's key-encryption key, so nothing else is stored for them.
    ///
    /// Known limit (issue 15's note): rotating the master key changes them, which makes an
    /// existing Raft log unreadable; `store rotate-master` is not for clustered nodes yet.
    pub fn raft_secrets(&self) -> (crate::crypto::Key32, crate::crypto::Key32) {
        let kept = self.keyring.raft.as_ref().and_then(|[names, groups]| {
            let owner = &keyring::RAFT_OWNER;
            Some((
                self.kek.unwrap(names, owner, 1).ok()?.into_secret(),
                self.kek.unwrap(groups, owner, 2).ok()?.into_secret(),
            ))
        });
        // A keyring written before the secrets were kept in it: they are still the ones the
        // current master key derives (the first writable open keeps them, see `open`).
        kept.unwrap_or_else(|| raft_secrets_derived(&self.kek))
    }

    /// The store's id.
    pub fn store_uuid(&self) -> [u8; 16] {
        self.header.store_uuid
    }

    /// `store_dir`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What opening found and cleaned up.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// How the active master key is obtained.
    pub fn kdf_kind(&self) -> KdfKind {
        self.header
            .active_slot()
            .map_or(KdfKind::KeyFile, |s| s.kdf)
    }

    /// Installs (or removes) the crash-simulation hook. Tests only.
    #[doc(hidden)]
    pub fn set_step_hook(&mut self, hook: Option<StepHook>) {
        self.hook = hook;
    }

    /// Refuses writes on a read-only or poisoned store.
    pub(super) fn writable(&self) -> Result<(), MetaError> {
        if self.read_only {
            Err(MetaError::ReadOnly)
        } else if self.poisoned {
            Err(MetaError::Poisoned)
        } else {
            Ok(())
        }
    }

    /// Runs a mutation; a fatal error poisons the store (memory may differ from disk).
    pub(super) fn mutate<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.writable()?;
        let out = f(self);
        if let Err(e) = &out {
            if e.is_fatal() {
                tracing::error!(error = %e, "metadata update failed; store poisoned until reopened");
                self.poisoned = true;
            }
        }
        out
    }

    /// Reports a durable step to the hook; `false` from the hook simulates a crash here.
    pub(super) fn step(&mut self, step: Step) -> Result<(), MetaError> {
        let go_on = self.hook.as_mut().is_none_or(|h| h(step));
        if go_on {
            Ok(())
        } else {
            Err(MetaError::InjectedCrash(step))
        }
    }

    /// Replaces `STORE` atomically, then adopts `h` in memory.
    pub(super) fn write_header(&mut self, h: StoreHeader) -> Result<(), MetaError> {
        tmp::write_atomic(&self.root, &self.root.join(STORE_FILE), &h.encode())?;
        self.header = h;
        Ok(())
    }

    /// The current keyring as the base of the next generation.
    pub(super) fn next_keyring(&self) -> Keyring {
        let mut kr = self.keyring.clone();
        kr.gen = self.keyring.gen.saturating_add(1);
        kr.catalog_watermark = self.catalog.records();
        kr
    }

    /// Puts a keyring generation in force: write it, point `STORE` at it (the commit point),
    /// shred the previous generation.
    pub(super) fn commit_keyring(&mut self, next: Keyring) -> Result<(), MetaError> {
        let uuid = self.header.store_uuid;
        let old_gen = self.keyring.gen;
        let bytes = keyring::seal_within_limit(&next, &self.kek, &uuid)?;
        tmp::write_atomic(
            &self.root,
            &keyring::keyring_path(&self.root, next.gen),
            &bytes,
        )?;
        self.step(Step::KeyringWritten)?;
        let active = self.header.active;
        let slot = self
            .header
            .active_slot()
            .ok_or_else(|| MetaError::HeaderCorrupt {
                path: self.root.join(STORE_FILE),
                reason: "active slot is empty".into(),
            })?
            .with_keyring_gen(&self.kek, &uuid, active, next.gen);
        let mut h = self.header.clone();
        h.set_slot(active, slot);
        self.write_header(h)?;
        // Shredding costs a write and an fsync of the whole keyring: only worth it when the
        // old generation holds a key the new one dropped (erase, rotation), not when keys were
        // only added (every stream create).
        let destroys = !self.keyring.kept_by(&next);
        self.keyring = next;
        self.step(Step::StorePointerWritten)?;
        let old = keyring::keyring_path(&self.root, old_gen);
        if destroys {
            tmp::shred_and_remove(&old)?;
        } else {
            tmp::remove_file_durable(&old)?;
        }
        self.step(Step::OldKeyringShredded)
    }

    /// Replaces the catalog with a new generation holding `state` under a new catalog key,
    /// and commits it together with `edit` applied to the keyring: one commit point for both.
    /// The old catalog key leaves the keyring, so names in the old generation are erased.
    pub(super) fn commit_catalog_and_keyring(
        &mut self,
        state: CatalogState,
        edit: impl FnOnce(&mut Keyring),
    ) -> Result<(), MetaError> {
        let uuid = self.header.store_uuid;
        let old_cat_gen = self.keyring.catalog_gen;
        let version = self
            .keyring
            .catalog_version()
            .and_then(|v| v.checked_add(1))
            .ok_or(MetaError::KeyringCorrupt {
                path: keyring::keyring_path(&self.root, self.keyring.gen),
                reason: "catalog key version exhausted".into(),
            })?;
        let gen = old_cat_gen.saturating_add(1);
        let (dek, wrapped) = keyring::new_wrapped(&self.kek, &CATALOG_OWNER, version);
        let key = keyring::catalog_seal_key(&dek);
        let id = CatalogId {
            store_uuid: uuid,
            gen,
            key_version: version,
        };
        let (bytes, cursor) = catalog::build_generation(&id, &key, &state.snapshot());
        let path = catalog::catalog_path(&self.root, gen);
        tmp::write_atomic(&self.root, &path, &bytes)?;
        self.step(Step::CatalogGenerationWritten)?;
        let mut kr = self.next_keyring();
        edit(&mut kr);
        kr.catalog_gen = gen;
        kr.catalog_watermark = cursor.records;
        kr.catalog_keys.clear();
        kr.catalog_keys.insert(version, wrapped);
        let new_log = CatalogLog::new(path, id, key, cursor, true)?;
        self.commit_keyring(kr)?;
        self.catalog = new_log;
        self.state = state;
        tmp::shred_and_remove(&catalog::catalog_path(&self.root, old_cat_gen))?;
        self.step(Step::OldCatalogShredded)
    }
}

/// The Raft log's secrets as stores before they were kept in the keyring derived them from
/// the key-encryption key: the values every existing store's log was written with.
fn raft_secrets_derived(kek: &crate::crypto::Kek) -> (crate::crypto::Key32, crate::crypto::Key32) {
    (
        crate::crypto::Secret::new(kek.mac(b"sealstream raft pseudonyms v1")),
        crate::crypto::Secret::new(kek.mac(b"sealstream raft group keys v1")),
    )
}

/// The Raft log's secrets, wrapped for the keyring (the derived values: a new store's are
/// chosen the same way, so that every store keeps what its log may already use).
fn raft_secrets_wrapped(kek: &crate::crypto::Kek) -> [crate::crypto::WrappedKey; 2] {
    let (names, groups) = raft_secrets_derived(kek);
    let owner = &keyring::RAFT_OWNER;
    [
        kek.wrap(&crate::crypto::DataKey::from_secret(names), owner, 1),
        kek.wrap(&crate::crypto::DataKey::from_secret(groups), owner, 2),
    ]
}
