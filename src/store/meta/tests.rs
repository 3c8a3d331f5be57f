//! Behaviour of [`MetaStore`] as a whole: round trips, wrong keys, automatic key files,
//! opacity of names, bit flips, crashes at every step of every multi-file change, and a
//! property test against a model.
#![expect(clippy::indexing_slicing, reason = "tests index known-length values")]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::keyring::{self, Keyring};
use super::*;
use crate::crypto::{Kek, MasterKey};

fn opts() -> MetaOptions {
    MetaOptions::default().insecure_fast_kdf_for_tests()
}

fn pw(s: &str) -> KeySource {
    KeySource::Passphrase(Zeroizing::new(s.to_string()))
}

fn kf(p: &Path) -> KeySource {
    KeySource::KeyFile(p.to_path_buf())
}

struct Fx {
    _dir: tempfile::TempDir,
    base: PathBuf,
    store: PathBuf,
    key: PathBuf,
    key2: PathBuf,
}

fn fx() -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let key = base.join("one.key");
    let key2 = base.join("two.key");
    MasterKey::generate_key_file(&key).unwrap();
    MasterKey::generate_key_file(&key2).unwrap();
    Fx {
        store: base.join("store"),
        base,
        key,
        key2,
        _dir: dir,
    }
}

fn open(f: &Fx) -> MetaStore {
    MetaStore::open(&f.store, kf(&f.key), opts()).unwrap()
}

/// Every path under `root` with its type, mode and content hash, sorted.
fn tree_hash(root: &Path) -> Vec<(String, u32, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in fs::read_dir(&p).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let content = if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else {
                data_encoding::HEXLOWER.encode(&Sha256::digest(fs::read(&path).unwrap()))
            };
            out.push((rel, meta.permissions().mode(), content));
        }
    }
    out.sort();
    out
}

fn all_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in fs::read_dir(&p).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

fn only_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

/// Flips one bit in place (no truncation, so no implicit flush); flipping again restores it.
fn flip(path: &Path, bit: usize) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, (bit / 8) as u64).unwrap();
    b[0] ^= 1 << (bit % 8);
    f.write_all_at(&b, (bit / 8) as u64).unwrap();
}

/// A hook that lets `n` steps through and stops at the next one, recording steps.
fn crash_after(n: usize, seen: Arc<Mutex<Vec<Step>>>) -> StepHook {
    Box::new(move |s| {
        let mut v = seen.lock().unwrap();
        v.push(s);
        v.len() <= n
    })
}

/// A store with two accounts, three streams, two consumers and consumer state; returns the
/// ids and a blob sealed with the first stream's segment key.
struct Populated {
    s1: StreamId,
    s2: StreamId,
    c1: ConsumerId,
    blob: Vec<u8>,
}

fn populate(m: &mut MetaStore) -> Populated {
    let h1 = m
        .create_stream("ACC-A", "orders", b"{\"subjects\":[\"orders.>\"]}")
        .unwrap();
    let h2 = m.create_stream("ACC-A", "events", b"{}").unwrap();
    m.create_stream("ACC-B", "orders", b"{\"b\":1}").unwrap();
    let c1 = m
        .create_consumer(h1.stream_id, "worker", b"{\"durable\":true}")
        .unwrap();
    m.create_consumer(h2.stream_id, "audit", b"{}").unwrap();
    m.persist_consumer_state(h1.stream_id, c1, 7, b"ack floor 41")
        .unwrap();
    let blob = h1
        .dek
        .segment_key(&h1.stream_id.0, 1)
        .seal(b"aad", b"message bytes");
    Populated {
        s1: h1.stream_id,
        s2: h2.stream_id,
        c1,
        blob,
    }
}

fn check_populated(m: &MetaStore, p: &Populated) {
    let a = m.list_streams("ACC-A");
    assert_eq!(
        a.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["events", "orders"]
    );
    assert_eq!(m.list_streams("ACC-B").len(), 1);
    assert_eq!(m.stream_by_name("ACC-A", "orders").unwrap().stream_id, p.s1);
    assert_eq!(
        m.stream_by_name("ACC-B", "orders").unwrap().config,
        b"{\"b\":1}"
    );
    assert!(m.open_stream(p.s1).is_ok());
    let seg = m.stream_key(p.s1, 1).unwrap().segment_key(&p.s1.0, 1);
    assert_eq!(seg.open(b"aad", &p.blob).unwrap(), b"message bytes");
    assert_eq!(
        m.consumer_by_name(p.s1, "worker").unwrap().consumer_id,
        p.c1
    );
    assert_eq!(m.list_consumers(p.s2).unwrap().len(), 1);
    let st = m.load_consumer_state(p.s1, p.c1).unwrap().unwrap();
    assert_eq!(
        (st.generation, st.bytes.as_slice()),
        (7, &b"ack floor 41"[..])
    );
}

#[test]
fn create_then_reopen_round_trips_streams_consumers_state_and_keys() {
    let f = fx();
    let mut m = open(&f);
    assert!(m.open_report().created);
    let p = populate(&mut m);
    check_populated(&m, &p);
    assert!(matches!(
        m.create_stream("ACC-A", "orders", b""),
        Err(MetaError::StreamExists)
    ));
    assert!(matches!(
        m.create_consumer(p.s1, "worker", b""),
        Err(MetaError::ConsumerExists)
    ));
    m.update_stream_config(p.s2, b"{\"v\":2}").unwrap();
    m.persist_stream_checkpoint(p.s2, b"cp").unwrap();
    let uuid = m.store_uuid();
    drop(m);
    let m = open(&f);
    assert!(!m.open_report().created);
    assert_eq!(m.store_uuid(), uuid);
    check_populated(&m, &p);
    assert_eq!(m.stream_meta(p.s2).unwrap().config, b"{\"v\":2}");
    assert_eq!(m.stream_checkpoint(p.s2), Some(&b"cp"[..]));
    assert_eq!(m.list_accounts(), ["ACC-A", "ACC-B"]);
}

#[test]
fn wrong_passphrase_is_refused_before_any_file_is_touched() {
    let f = fx();
    let mut m = MetaStore::open(&f.store, pw("right horse"), opts()).unwrap();
    let s = m.create_stream("A", "S", b"{}").unwrap().stream_id;
    drop(m);
    // Leave work for the startup sweep, so a sweep before the key check would show.
    fs::write(f.store.join("tmp").join("leftover"), b"x").unwrap();
    fs::create_dir(f.store.join("s").join(StreamId::random().to_hex())).unwrap();
    let cat = only_file(&f.store.join("catalog"));
    let mut c = fs::OpenOptions::new().append(true).open(&cat).unwrap();
    std::io::Write::write_all(&mut c, &[1, 2, 3]).unwrap();
    fs::remove_file(f.store.join("LOCK")).unwrap();
    let before = tree_hash(&f.store);
    let err = MetaStore::open(&f.store, pw("wrong horse"), opts()).unwrap_err();
    assert!(matches!(err, MetaError::WrongKey { .. }), "{err}");
    assert!(
        err.to_string().starts_with("store key does not match"),
        "{err}"
    );
    let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
    assert!(matches!(err, MetaError::WrongKey { .. }), "{err}");
    let err = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap_err();
    assert!(matches!(err, MetaError::WrongKey { .. }), "{err}");
    assert_eq!(tree_hash(&f.store), before);
    let m = MetaStore::open(&f.store, pw("right horse"), opts()).unwrap();
    let r = m.open_report();
    assert_eq!(
        (
            r.tmp_entries_removed,
            r.catalog_torn_bytes,
            r.orphan_paths_removed
        ),
        (1, 3, 1)
    );
    assert!(m.open_stream(s).is_ok());
    assert!(f.store.join("LOCK").exists());
}

#[test]
fn wrong_key_file_is_refused_before_any_file_is_touched() {
    let f = fx();
    let mut m = open(&f);
    m.create_stream("A", "S", b"{}").unwrap();
    drop(m);
    fs::write(f.store.join("tmp").join("leftover"), b"x").unwrap();
    let before = tree_hash(&f.store);
    let err = MetaStore::open(&f.store, kf(&f.key2), opts()).unwrap_err();
    assert!(
        matches!(
            err,
            MetaError::WrongKey {
                detail: "kek_id differs from the active STORE slot"
            }
        ),
        "{err}"
    );
    let err = MetaStore::open(&f.store, pw("a passphrase"), opts()).unwrap_err();
    assert!(matches!(err, MetaError::WrongKey { .. }), "{err}");
    assert_eq!(tree_hash(&f.store), before);
}

#[test]
fn auto_key_file_is_generated_0600_next_to_store_dir_and_never_regenerated() {
    let f = fx();
    let m = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap();
    let key = f.base.join("store.key");
    assert_eq!(
        m.open_report().generated_key_file.as_deref(),
        Some(key.as_path())
    );
    assert_eq!(auto_key_path(&f.store).unwrap(), key);
    assert_eq!(
        fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!all_files(&f.store)
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "key")));
    let key_bytes = fs::read(&key).unwrap();
    drop(m);
    let m = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap();
    assert_eq!(m.open_report().generated_key_file, None);
    assert_eq!(fs::read(&key).unwrap(), key_bytes);
    drop(m);
    fs::remove_file(&key).unwrap();
    let before = tree_hash(&f.store);
    let err = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap_err();
    assert!(matches!(err, MetaError::KeyFileMissing { .. }), "{err}");
    assert!(!key.exists(), "a store with data never gets a new key");
    assert_eq!(tree_hash(&f.store), before);
}

#[test]
fn auto_key_refuses_a_non_empty_directory_without_a_store_header() {
    let f = fx();
    fs::create_dir(&f.store).unwrap();
    fs::write(f.store.join("somebody-elses-file"), b"data").unwrap();
    let err = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap_err();
    assert!(matches!(err, MetaError::NotAStore { .. }), "{err}");
    assert!(!f.base.join("store.key").exists());
    assert_eq!(fs::read_dir(&f.store).unwrap().count(), 1);
}

#[test]
fn an_interrupted_creation_is_completed_with_the_existing_auto_key() {
    let f = fx();
    let m = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap();
    drop(m);
    // Simulate a crash before STORE was renamed into place.
    fs::remove_file(f.store.join("STORE")).unwrap();
    let key = fs::read(f.base.join("store.key")).unwrap();
    let mut m = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap();
    assert!(m.open_report().created);
    assert_eq!(
        fs::read(f.base.join("store.key")).unwrap(),
        key,
        "the key file is reused"
    );
    m.create_stream("A", "S", b"").unwrap();
    drop(m);
    // Once a stream exists, a missing STORE is not "interrupted creation" any more.
    fs::remove_file(f.store.join("STORE")).unwrap();
    let err = MetaStore::open(&f.store, KeySource::Auto, opts()).unwrap_err();
    assert!(matches!(err, MetaError::NotAStore { .. }), "{err}");
}

#[test]
fn a_key_file_inside_store_dir_is_refused() {
    let f = fx();
    fs::create_dir(&f.store).unwrap();
    let inside = f.store.join("k.key");
    fs::copy(&f.key, &inside).unwrap();
    let err = MetaStore::open(&f.store, kf(&inside), opts()).unwrap_err();
    assert!(matches!(err, MetaError::KeyConfig(_)), "{err}");
}

#[test]
fn a_missing_explicit_key_file_creates_nothing() {
    let f = fx();
    let err = MetaStore::open(&f.store, kf(&f.base.join("absent.key")), opts()).unwrap_err();
    assert!(matches!(err, MetaError::Key(_)), "{err}");
    assert!(!f.store.exists());
}

#[test]
fn account_keys_exist_per_tenant_and_go_with_the_tenant() {
    let f = fx();
    let mut m = open(&f);
    populate(&mut m);
    let (a, ka) = m.account_key("ACC-A").unwrap();
    let (b, _) = m.account_key("ACC-B").unwrap();
    assert_ne!(a, b);
    let sealed = ka.purpose_key(&a.0, b"x").seal(b"", b"tenant data");
    drop(m);
    let mut m = open(&f);
    let (_, again) = m.account_key("ACC-A").unwrap();
    assert_eq!(
        again.purpose_key(&a.0, b"x").open(b"", &sealed).unwrap(),
        b"tenant data"
    );
    m.delete_account("ACC-A").unwrap();
    assert!(matches!(
        m.account_key("ACC-A"),
        Err(MetaError::AccountNotFound)
    ));
}

#[test]
fn weak_kdf_parameters_are_refused_by_a_normal_open() {
    let f = fx();
    drop(MetaStore::open(&f.store, pw("pw"), opts()).unwrap());
    let err = MetaStore::open(&f.store, pw("pw"), MetaOptions::default()).unwrap_err();
    assert!(
        matches!(err, MetaError::Key(crate::crypto::KeyError::WeakParams(_))),
        "{err}"
    );
}

#[test]
fn names_and_config_canaries_never_appear_in_any_file_byte_or_path() {
    let f = fx();
    let canaries = [
        "tenant-CANARY-ACCOUNT",
        "stream-CANARY-NAME",
        "gone-CANARY-STREAM",
        "durable-CANARY-CONSUMER",
        "CANARY-IN-CONFIG",
        "CANARY-IN-STATE",
        "CANARY-CHECKPOINT",
    ];
    let mut m = MetaStore::open(&f.store, pw("pw"), opts()).unwrap();
    let cfg = br#"{"subjects":["CANARY-IN-CONFIG.>"]}"#;
    let s = m
        .create_stream("tenant-CANARY-ACCOUNT", "stream-CANARY-NAME", cfg)
        .unwrap()
        .stream_id;
    let gone = m
        .create_stream("tenant-CANARY-ACCOUNT", "gone-CANARY-STREAM", cfg)
        .unwrap()
        .stream_id;
    let c = m
        .create_consumer(s, "durable-CANARY-CONSUMER", cfg)
        .unwrap();
    m.persist_consumer_state(s, c, 1, b"CANARY-IN-STATE")
        .unwrap();
    m.persist_stream_checkpoint(s, b"CANARY-CHECKPOINT")
        .unwrap();
    m.rotate_dek(s).unwrap();
    m.delete_stream(gone).unwrap();
    m.compact_catalog().unwrap();
    m.rotate_master(kf(&f.key)).unwrap();
    drop(m);
    drop(MetaStore::open(&f.store, kf(&f.key), opts()).unwrap());
    let files = all_files(&f.store);
    assert!(files.len() >= 8);
    for p in &files {
        let path = p
            .strip_prefix(&f.store)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bytes = if p.is_file() {
            fs::read(p).unwrap()
        } else {
            Vec::new()
        };
        for c in canaries {
            assert!(!path.contains(c), "{c} in path {path}");
            for needle in [c.as_bytes().to_vec(), c.to_lowercase().into_bytes()] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{c} in {path}"
                );
            }
        }
        // Every path follows the layout grammar.
        let ok = ["STORE", "LOCK", "tmp", "keyring", "catalog", "s"].contains(&path.as_str())
            || keyring::parse_keyring_name(path.trim_start_matches("keyring/")).is_some()
            || super::catalog::parse_catalog_name(path.trim_start_matches("catalog/")).is_some()
            || path.strip_prefix("s/").is_some_and(|r| {
                let mut parts = r.split('/');
                StreamId::from_hex(parts.next().unwrap_or("")).is_some()
                    && match (parts.next(), parts.next(), parts.next()) {
                        (None, _, _) => true,
                        (Some("c"), None, _) => true,
                        (Some("c"), Some(st), None) => {
                            super::consumer_state::parse_state_file_name(st).is_some()
                        }
                        _ => false,
                    }
            });
        assert!(ok, "unexpected path {path}");
    }
}

#[test]
fn every_bit_flip_in_store_header_is_refused_as_header_corruption() {
    let f = fx();
    let mut m = open(&f);
    populate(&mut m);
    drop(m);
    let path = f.store.join("STORE");
    let len = fs::read(&path).unwrap().len();
    for bit in 0..len * 8 {
        flip(&path, bit);
        let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
        assert!(
            matches!(err, MetaError::HeaderCorrupt { .. }),
            "bit {bit}: {err}"
        );
        flip(&path, bit);
    }
    open(&f);
}

#[test]
fn every_bit_flip_in_the_keyring_is_refused_as_keyring_corruption() {
    let f = fx();
    let mut m = open(&f);
    populate(&mut m);
    drop(m);
    let path = only_file(&f.store.join("keyring"));
    let len = fs::read(&path).unwrap().len();
    for bit in 0..len * 8 {
        flip(&path, bit);
        let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
        assert!(
            matches!(err, MetaError::KeyringCorrupt { .. }),
            "bit {bit}: {err}"
        );
        flip(&path, bit);
    }
    open(&f);
}

#[test]
fn every_bit_flip_in_the_catalog_is_refused_as_catalog_corruption() {
    let f = fx();
    let mut m = open(&f);
    populate(&mut m);
    drop(m);
    let path = only_file(&f.store.join("catalog"));
    let len = fs::read(&path).unwrap().len();
    for bit in 0..len * 8 {
        flip(&path, bit);
        let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
        assert!(
            matches!(err, MetaError::CatalogCorrupt { .. }),
            "bit {bit}: {err}"
        );
        flip(&path, bit);
    }
    open(&f);
}

#[test]
fn every_bit_flip_in_consumer_state_takes_only_that_consumer_offline() {
    let f = fx();
    let mut m = open(&f);
    let p = populate(&mut m);
    let other = m.create_consumer(p.s1, "other", b"").unwrap();
    m.persist_consumer_state(p.s1, other, 1, b"fine").unwrap();
    let path = m
        .open_stream(p.s1)
        .unwrap()
        .dir
        .join("c")
        .join(format!("{}.st", p.c1.to_hex()));
    let len = fs::read(&path).unwrap().len();
    for bit in 0..len * 8 {
        flip(&path, bit);
        let err = m.load_consumer_state(p.s1, p.c1).unwrap_err();
        assert!(
            matches!(err, MetaError::ConsumerStateCorrupt { .. }),
            "bit {bit}: {err}"
        );
        assert!(!err.is_fatal());
        flip(&path, bit);
    }
    assert_eq!(
        m.load_consumer_state(p.s1, other).unwrap().unwrap().bytes,
        b"fine"
    );
    // A state file moved to another consumer does not open either.
    fs::copy(&path, path.with_file_name(format!("{}.st", other.to_hex()))).unwrap();
    assert!(m.load_consumer_state(p.s1, other).is_err());
}

#[test]
fn a_torn_catalog_tail_is_cut_and_a_truncated_catalog_is_refused() {
    let f = fx();
    let mut m = open(&f);
    let p = populate(&mut m);
    drop(m);
    let cat = only_file(&f.store.join("catalog"));
    let good = fs::read(&cat).unwrap();
    let mut torn = good.clone();
    let n: u32 = 200;
    torn.extend_from_slice(&n.to_le_bytes());
    torn.extend_from_slice(&(!n).to_le_bytes());
    torn.extend_from_slice(&[9u8; 50]);
    fs::write(&cat, &torn).unwrap();
    let m = open(&f);
    assert_eq!(m.open_report().catalog_torn_bytes, 58);
    assert_eq!(fs::read(&cat).unwrap(), good);
    check_populated(&m, &p);
    drop(m);
    // Cutting whole records below the keyring's watermark is a rollback, not a torn tail.
    fs::write(&cat, &good[..300]).unwrap();
    let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
    assert!(matches!(err, MetaError::CatalogCorrupt { .. }), "{err}");
}

#[test]
fn a_second_opener_is_locked_out_and_read_only_openers_share_the_lock() {
    let f = fx();
    let m = open(&f);
    let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
    assert!(matches!(err, MetaError::Locked(_)), "{err}");
    assert!(matches!(
        MetaStore::open(&f.store, kf(&f.key), MetaOptions::read_only()),
        Err(MetaError::Locked(_))
    ));
    drop(m);
    fs::write(f.store.join("tmp").join("leftover"), b"x").unwrap();
    let before = tree_hash(&f.store);
    let mut a = MetaStore::open(&f.store, kf(&f.key), MetaOptions::read_only()).unwrap();
    let b = MetaStore::open(&f.store, kf(&f.key), MetaOptions::read_only()).unwrap();
    assert!(matches!(
        a.create_stream("A", "S", b""),
        Err(MetaError::ReadOnly)
    ));
    assert!(matches!(
        MetaStore::open(&f.store, kf(&f.key), opts()),
        Err(MetaError::Locked(_))
    ));
    drop((a, b));
    assert_eq!(tree_hash(&f.store), before);
}

#[test]
fn a_missing_stream_directory_is_an_error_not_an_empty_stream() {
    let f = fx();
    let mut m = open(&f);
    let h = m.create_stream("A", "S", b"").unwrap();
    fs::remove_dir_all(&h.dir).unwrap();
    assert!(matches!(
        m.open_stream(h.stream_id),
        Err(MetaError::StreamDirMissing(_))
    ));
}

fn current_keyring(f: &Fx, uuid: &[u8; 16], key: &Path) -> Keyring {
    let path = only_file(&f.store.join("keyring"));
    let gen = keyring::parse_keyring_name(&path.file_name().unwrap().to_string_lossy()).unwrap();
    let kek = Kek::derive(&MasterKey::load_key_file(key).unwrap(), uuid);
    Keyring::open(&fs::read(&path).unwrap(), &kek, uuid, gen).unwrap()
}

#[test]
fn delete_stream_erases_its_data_key_before_its_files_go() {
    let f = fx();
    let mut m = open(&f);
    let p = populate(&mut m);
    let uuid = m.store_uuid();
    let dir = m.open_stream(p.s1).unwrap().dir;
    let old_kr = only_file(&f.store.join("keyring"));
    assert!(current_keyring(&f, &uuid, &f.key).holds(&p.s1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    let dir2 = dir.clone();
    let old2 = old_kr.clone();
    m.set_step_hook(Some(Box::new(move |s| {
        hook_seen.lock().unwrap().push(s);
        if s == Step::StreamFilesRemoved {
            assert!(!dir2.exists());
        } else {
            assert!(
                dir2.exists(),
                "files must outlive the key until the end ({s:?})"
            );
        }
        if s == Step::OldKeyringShredded {
            assert!(!old2.exists(), "the generation holding the key is shredded");
        }
        true
    })));
    // Check at the commit point from outside, through the files alone.
    m.delete_stream(p.s1).unwrap();
    let steps = seen.lock().unwrap().clone();
    let commit = steps
        .iter()
        .position(|s| *s == Step::StorePointerWritten)
        .unwrap();
    let removed = steps
        .iter()
        .position(|s| *s == Step::StreamFilesRemoved)
        .unwrap();
    assert!(commit < removed, "{steps:?}");
    let kr = current_keyring(&f, &uuid, &f.key);
    assert!(!kr.holds(&p.s1));
    assert!(kr.holds(&p.s2));
    assert!(matches!(
        m.open_stream(p.s1),
        Err(MetaError::StreamNotFound(_))
    ));
    assert!(matches!(
        m.stream_key(p.s1, 1),
        Err(MetaError::StreamNotFound(_))
    ));
    assert!(m.stream_by_name("ACC-A", "orders").is_none());
    drop(m);
    let m = open(&f);
    assert!(m.stream_by_name("ACC-A", "orders").is_none());
    assert!(m.stream_by_name("ACC-B", "orders").is_some());
}

#[test]
fn delete_crash_at_every_step_leaves_the_stream_whole_or_erased() {
    for n in 0.. {
        let f = fx();
        let mut m = open(&f);
        let p = populate(&mut m);
        let uuid = m.store_uuid();
        let dir = m.open_stream(p.s1).unwrap().dir;
        let seen = Arc::new(Mutex::new(Vec::new()));
        m.set_step_hook(Some(crash_after(n, seen.clone())));
        let done = m.delete_stream(p.s1).is_ok();
        if !done {
            assert!(matches!(
                m.create_stream("X", "Y", b""),
                Err(MetaError::Poisoned)
            ));
        }
        drop(m);
        let files_went = !dir.exists();
        if files_went {
            assert!(
                seen.lock().unwrap().contains(&Step::StorePointerWritten),
                "files before keys"
            );
        }
        let m = open(&f);
        let key_present = current_keyring(&f, &uuid, &f.key).holds(&p.s1);
        match m.stream_meta(p.s1) {
            Some(_) => {
                assert!(key_present && !files_went);
                check_populated(&m, &p);
            }
            None => {
                assert!(!key_present);
                assert!(!dir.exists(), "startup finished the deletion");
            }
        }
        assert!(m.stream_by_name("ACC-B", "orders").is_some());
        assert_eq!(fs::read_dir(f.store.join("keyring")).unwrap().count(), 1);
        assert_eq!(fs::read_dir(f.store.join("catalog")).unwrap().count(), 1);
        if done {
            assert!(n > 5);
            break;
        }
    }
}

#[test]
fn create_crash_at_every_step_leaves_no_orphan_key_or_directory() {
    // "B": a new account (a keyring generation first); "A": a spare key of an existing one
    // (the catalog record is the only step before the directory).
    for (account, commit_step) in [("B", 4), ("A", 1)] {
        for n in 0.. {
            let f = fx();
            let mut m = open(&f);
            m.create_stream("A", "first", b"").unwrap();
            m.set_step_hook(Some(crash_after(n, Arc::new(Mutex::new(Vec::new())))));
            let done = m.create_stream(account, "second", b"").is_ok();
            drop(m);
            let m = open(&f);
            let live = m.stream_by_name(account, "second").is_some();
            assert_eq!(live, done || n >= commit_step, "{account}: n = {n}");
            // On disk a new stream's key may still be filed as a spare: the catalog claims it.
            let kr = &m.keyring;
            let keyed: usize = kr.accounts.values().map(|a| a.streams.len()).sum();
            assert_eq!(keyed, 1 + usize::from(live));
            let accounts = if account == "A" {
                1
            } else {
                1 + usize::from(live)
            };
            assert_eq!(kr.accounts.len(), accounts);
            assert_eq!(
                fs::read_dir(f.store.join("s")).unwrap().count(),
                1 + usize::from(live)
            );
            if done {
                break;
            }
        }
    }
}

#[test]
fn creates_claim_spare_keys_and_write_a_keyring_only_when_they_run_out() {
    let f = fx();
    let mut m = open(&f);
    let first = m.create_stream("A", "s0", b"").unwrap();
    let blob = first
        .dek
        .segment_key(&first.stream_id.0, 1)
        .seal(b"aad", b"sealed before the restart");
    let gen = m.keyring.gen;
    let ids: Vec<_> = (1..keyring::SPARE_KEYS)
        .map(|i| {
            m.create_stream("A", &format!("s{i}"), b"")
                .unwrap()
                .stream_id
        })
        .collect();
    assert_eq!(
        m.keyring.gen, gen,
        "spares are claimed by catalog records alone"
    );
    m.create_stream("A", "refill", b"").unwrap();
    assert_eq!(
        m.keyring.gen,
        gen + 1,
        "no spare left: one generation refills them"
    );
    drop(m);
    // On disk the first streams' keys are still filed as spares; the catalog claims them.
    let mut m = open(&f);
    assert_eq!(m.open_report().orphan_keys_erased, 0);
    let again = m.open_stream(first.stream_id).unwrap();
    let seg = again.dek.segment_key(&first.stream_id.0, 1);
    assert_eq!(
        seg.open(b"aad", &blob).unwrap(),
        b"sealed before the restart"
    );
    for id in &ids {
        m.open_stream(*id).unwrap();
    }
    // Deleting a stream whose key was a spare erases it from the keyring for good.
    let uuid = m.store_uuid();
    m.delete_stream(first.stream_id).unwrap();
    assert!(!current_keyring(&f, &uuid, &f.key).holds(&first.stream_id));
    drop(m);
    let m = open(&f);
    assert!(m.stream_meta(first.stream_id).is_none());
    assert_eq!(m.list_streams("A").len(), keyring::SPARE_KEYS);
}

#[test]
fn delete_account_erases_every_stream_of_the_tenant_in_one_generation() {
    let f = fx();
    let mut m = open(&f);
    let p = populate(&mut m);
    let uuid = m.store_uuid();
    let dirs: Vec<PathBuf> = [p.s1, p.s2]
        .iter()
        .map(|s| m.open_stream(*s).unwrap().dir)
        .collect();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    m.set_step_hook(Some(Box::new(move |s| {
        hook_seen.lock().unwrap().push(s);
        true
    })));
    assert_eq!(m.delete_account("ACC-A").unwrap(), 2);
    let steps = seen.lock().unwrap().clone();
    assert_eq!(
        steps
            .iter()
            .filter(|s| **s == Step::StorePointerWritten)
            .count(),
        1,
        "{steps:?}"
    );
    assert!(dirs.iter().all(|d| !d.exists()));
    let kr = current_keyring(&f, &uuid, &f.key);
    assert!(!kr.holds(&p.s1) && !kr.holds(&p.s2));
    assert_eq!(kr.accounts.len(), 1);
    assert!(m.list_streams("ACC-A").is_empty());
    assert!(matches!(
        m.delete_account("ACC-A"),
        Err(MetaError::AccountNotFound)
    ));
    drop(m);
    let m = open(&f);
    assert_eq!(m.list_accounts(), ["ACC-B"]);
    assert_eq!(m.list_streams("ACC-B").len(), 1);
}

/// Runs one master rotation that stops after `n` steps; returns whether it completed.
fn rotation_with_crash(n: usize, from_pw: bool, to: &dyn Fn(&Fx) -> KeySource) -> bool {
    let f = fx();
    let old = || {
        if from_pw {
            pw("old passphrase")
        } else {
            kf(&f.key)
        }
    };
    let mut m = MetaStore::open(&f.store, old(), opts()).unwrap();
    let p = populate(&mut m);
    let seen = Arc::new(Mutex::new(Vec::new()));
    m.set_step_hook(Some(crash_after(n, seen.clone())));
    let done = m.rotate_master(to(&f)).is_ok();
    drop(m);
    let flipped = seen.lock().unwrap().contains(&Step::ActiveSlotFlipped);
    let mut opened = 0;
    for (key, is_new) in [(old(), false), (to(&f), true)] {
        match MetaStore::open(&f.store, key, opts()) {
            Ok(m) => {
                assert_eq!(
                    is_new, flipped,
                    "n = {n}: only the key of the active slot opens"
                );
                check_populated(&m, &p);
                assert_eq!(
                    fs::read_dir(f.store.join("keyring")).unwrap().count(),
                    1,
                    "startup shreds the other generation"
                );
                opened += 1;
            }
            Err(e) => assert!(matches!(e, MetaError::WrongKey { .. }), "n = {n}: {e}"),
        }
    }
    assert_eq!(
        opened, 1,
        "n = {n}: exactly one of the old and new keys opens"
    );
    // The store stays usable: finishing (or repeating) the rotation works from either state.
    let mut m = MetaStore::open(&f.store, if flipped { to(&f) } else { old() }, opts()).unwrap();
    if !flipped {
        m.rotate_master(to(&f)).unwrap();
    }
    drop(m);
    check_populated(&MetaStore::open(&f.store, to(&f), opts()).unwrap(), &p);
    done
}

#[test]
fn master_rotation_crash_at_every_step_opens_with_the_old_or_the_new_key() {
    let to_file = |f: &Fx| kf(&f.key2);
    let to_pw = |_: &Fx| pw("new passphrase");
    for (from_pw, to) in [
        (false, &to_file as &dyn Fn(&Fx) -> KeySource),
        (true, &to_file),
        (false, &to_pw),
    ] {
        let mut steps = 0;
        while !rotation_with_crash(steps, from_pw, to) {
            steps += 1;
        }
        assert_eq!(steps, 4, "rotation has four durable steps");
    }
}

#[test]
fn a_key_of_the_inactive_slot_is_named_in_the_wrong_key_error() {
    let f = fx();
    let mut m = open(&f);
    m.rotate_master(kf(&f.key2)).unwrap();
    drop(m);
    let err = MetaStore::open(&f.store, kf(&f.key), opts()).unwrap_err();
    assert!(err.to_string().contains("inactive slot"), "{err}");
    assert!(matches!(
        m_open_new(&f).rotate_master(kf(&f.key2)),
        Err(MetaError::KeyConfig(_))
    ));
}

fn m_open_new(f: &Fx) -> MetaStore {
    MetaStore::open(&f.store, kf(&f.key2), opts()).unwrap()
}

#[test]
fn dek_rotation_keeps_old_versions_until_dropped_and_survives_a_crash_at_every_step() {
    for n in 0.. {
        let f = fx();
        let mut m = open(&f);
        let p = populate(&mut m);
        m.set_step_hook(Some(crash_after(n, Arc::new(Mutex::new(Vec::new())))));
        let done = m.rotate_dek(p.s1).is_ok();
        drop(m);
        let mut m = open(&f);
        check_populated(&m, &p);
        let meta = m.stream_meta(p.s1).unwrap();
        assert!(
            meta.dek_versions == [1] || meta.dek_versions == [1, 2],
            "{:?}",
            meta.dek_versions
        );
        if done {
            assert_eq!(meta.dek_version, 2);
            let h = m.open_stream(p.s1).unwrap();
            assert_eq!(h.dek_version, 2);
            let old = m.stream_key(p.s1, 1).unwrap().segment_key(&p.s1.0, 1);
            assert_eq!(old.open(b"aad", &p.blob).unwrap(), b"message bytes");
            let err = m.drop_dek_version(p.s1, 2).unwrap_err();
            assert!(
                matches!(
                    err,
                    MetaError::DekVersion {
                        reason: "is the current version",
                        ..
                    }
                ),
                "{err}"
            );
            let err = m.drop_dek_version(p.s1, 1).unwrap_err();
            assert!(
                matches!(
                    err,
                    MetaError::DekVersion {
                        reason: "still seals a consumer state file",
                        ..
                    }
                ),
                "{err}"
            );
            m.persist_consumer_state(p.s1, p.c1, 8, b"resealed")
                .unwrap();
            m.drop_dek_version(p.s1, 1).unwrap();
            assert!(matches!(
                m.stream_key(p.s1, 1),
                Err(MetaError::DekVersion { .. })
            ));
            assert_eq!(
                m.load_consumer_state(p.s1, p.c1).unwrap().unwrap().bytes,
                b"resealed"
            );
            drop(m);
            assert_eq!(open(&f).stream_meta(p.s1).unwrap().dek_versions, [2]);
            break;
        }
    }
}

#[test]
fn compaction_keeps_the_state_and_replaces_the_catalog_key() {
    let f = fx();
    let mut m = open(&f);
    let p = populate(&mut m);
    let uuid = m.store_uuid();
    let before = current_keyring(&f, &uuid, &f.key).catalog_keys;
    let c = m.create_consumer(p.s2, "temp", b"").unwrap();
    m.delete_consumer(p.s2, c).unwrap();
    let old_cat = only_file(&f.store.join("catalog"));
    for _ in 0..4 {
        m.update_stream_config(p.s2, b"{}").unwrap();
    }
    m.compact_catalog().unwrap();
    assert!(!old_cat.exists());
    let after = current_keyring(&f, &uuid, &f.key).catalog_keys;
    assert_eq!(after.len(), 1);
    assert!(after.keys().all(|v| !before.contains_key(v)));
    check_populated(&m, &p);
    drop(m);
    check_populated(&open(&f), &p);
}

#[test]
fn catalog_compaction_crash_at_every_step_keeps_the_state() {
    for n in 0.. {
        let f = fx();
        let mut m = open(&f);
        let p = populate(&mut m);
        m.set_step_hook(Some(crash_after(n, Arc::new(Mutex::new(Vec::new())))));
        let done = m.compact_catalog().is_ok();
        drop(m);
        let m = open(&f);
        check_populated(&m, &p);
        assert_eq!(fs::read_dir(f.store.join("catalog")).unwrap().count(), 1);
        if done {
            break;
        }
    }
}

#[test]
fn invalid_names_and_configs_are_refused_without_poisoning() {
    let f = fx();
    let mut m = open(&f);
    assert!(matches!(
        m.create_stream("", "S", b""),
        Err(MetaError::Invalid { .. })
    ));
    assert!(matches!(
        m.create_stream("A", &"x".repeat(MAX_NAME_LEN + 1), b""),
        Err(MetaError::Invalid { .. })
    ));
    assert!(matches!(
        m.create_stream("A", "S", &vec![0; MAX_CONFIG_LEN + 1]),
        Err(MetaError::Invalid { .. })
    ));
    assert!(matches!(
        m.open_stream(StreamId::random()),
        Err(MetaError::StreamNotFound(_))
    ));
    m.create_stream("A", "S", b"").unwrap();
}

// ---- property test against a model ----

#[derive(Clone, Debug)]
enum Op {
    Create { acct: u8, name: u8, cfg: u8 },
    Delete { acct: u8, name: u8 },
    Config { acct: u8, name: u8, cfg: u8 },
    AddConsumer { acct: u8, name: u8, cons: u8 },
    DropConsumer { acct: u8, name: u8, cons: u8 },
    DeleteAccount { acct: u8 },
    RotateDek { acct: u8, name: u8 },
    Compact,
    Reopen,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let a = 0u8..3;
    let n = 0u8..3;
    prop_oneof![
        4 => (a.clone(), n.clone(), any::<u8>()).prop_map(|(acct, name, cfg)| Op::Create { acct, name, cfg }),
        2 => (a.clone(), n.clone()).prop_map(|(acct, name)| Op::Delete { acct, name }),
        2 => (a.clone(), n.clone(), any::<u8>()).prop_map(|(acct, name, cfg)| Op::Config { acct, name, cfg }),
        2 => (a.clone(), n.clone(), 0u8..2).prop_map(|(acct, name, cons)| Op::AddConsumer { acct, name, cons }),
        1 => (a.clone(), n.clone(), 0u8..2).prop_map(|(acct, name, cons)| Op::DropConsumer { acct, name, cons }),
        1 => a.clone().prop_map(|acct| Op::DeleteAccount { acct }),
        1 => (a, n).prop_map(|(acct, name)| Op::RotateDek { acct, name }),
        1 => Just(Op::Compact),
        2 => Just(Op::Reopen),
    ]
}

type ModelStream = (Vec<u8>, BTreeSet<u8>, u32);

#[derive(Default)]
struct Model {
    accounts: BTreeSet<u8>,
    /// (account, name) -> (config, consumer names, data key version).
    streams: BTreeMap<(u8, u8), ModelStream>,
}

fn names(acct: u8, name: u8) -> (String, String) {
    (format!("acct-{acct}"), format!("stream-{name}"))
}

fn check_model(m: &MetaStore, model: &Model) {
    let mut accounts: Vec<String> = model.accounts.iter().map(|a| format!("acct-{a}")).collect();
    accounts.sort();
    assert_eq!(m.list_accounts(), accounts);
    for acct in 0u8..3 {
        let got: Vec<(String, Vec<u8>, u32)> = m
            .list_streams(&format!("acct-{acct}"))
            .into_iter()
            .map(|s| (s.name, s.config, s.dek_version))
            .collect();
        let want: Vec<(String, Vec<u8>, u32)> = model
            .streams
            .iter()
            .filter(|((a, _), _)| *a == acct)
            .map(|((_, n), (cfg, _, v))| (format!("stream-{n}"), cfg.clone(), *v))
            .collect();
        assert_eq!(got, want);
        for ((a, n), (_, cons, _)) in model.streams.iter().filter(|((a, _), _)| *a == acct) {
            let (an, sn) = names(*a, *n);
            let sid = m.stream_by_name(&an, &sn).unwrap().stream_id;
            let got: Vec<String> = m
                .list_consumers(sid)
                .unwrap()
                .into_iter()
                .map(|c| c.name)
                .collect();
            let want: Vec<String> = cons.iter().map(|c| format!("c-{c}")).collect();
            assert_eq!(got, want);
            assert!(m.open_stream(sid).is_ok());
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
    #[test]
    fn random_operation_sequences_match_a_model(ops in proptest::collection::vec(op(), 1..32)) {
        let f = fx();
        let mut m = open(&f);
        let mut model = Model::default();
        for o in ops {
            match o {
                Op::Create { acct, name, cfg } => {
                    let (a, n) = names(acct, name);
                    let r = m.create_stream(&a, &n, &[cfg]);
                    if model.streams.contains_key(&(acct, name)) {
                        assert!(matches!(r, Err(MetaError::StreamExists)));
                    } else {
                        r.unwrap();
                        model.accounts.insert(acct);
                        model.streams.insert((acct, name), (vec![cfg], BTreeSet::new(), 1));
                    }
                }
                Op::Delete { acct, name } => {
                    let (a, n) = names(acct, name);
                    if let Some(s) = m.stream_by_name(&a, &n) {
                        m.delete_stream(s.stream_id).unwrap();
                        model.streams.remove(&(acct, name)).unwrap();
                    }
                }
                Op::Config { acct, name, cfg } => {
                    let (a, n) = names(acct, name);
                    if let Some(s) = m.stream_by_name(&a, &n) {
                        m.update_stream_config(s.stream_id, &[cfg, cfg]).unwrap();
                        model.streams.get_mut(&(acct, name)).unwrap().0 = vec![cfg, cfg];
                    }
                }
                Op::AddConsumer { acct, name, cons } => {
                    let (a, n) = names(acct, name);
                    if let Some(s) = m.stream_by_name(&a, &n) {
                        let r = m.create_consumer(s.stream_id, &format!("c-{cons}"), b"");
                        let set = &mut model.streams.get_mut(&(acct, name)).unwrap().1;
                        if set.insert(cons) {
                            let c = r.unwrap();
                            m.persist_consumer_state(s.stream_id, c, 1, &[cons]).unwrap();
                        } else {
                            assert!(matches!(r, Err(MetaError::ConsumerExists)));
                        }
                    }
                }
                Op::DropConsumer { acct, name, cons } => {
                    let (a, n) = names(acct, name);
                    if let Some(s) = m.stream_by_name(&a, &n) {
                        if let Some(c) = m.consumer_by_name(s.stream_id, &format!("c-{cons}")) {
                            m.delete_consumer(s.stream_id, c.consumer_id).unwrap();
                            model.streams.get_mut(&(acct, name)).unwrap().1.remove(&cons);
                        }
                    }
                }
                Op::DeleteAccount { acct } => {
                    let r = m.delete_account(&format!("acct-{acct}"));
                    if model.accounts.remove(&acct) {
                        let before = model.streams.len();
                        model.streams.retain(|(a, _), _| *a != acct);
                        assert_eq!(r.unwrap(), before - model.streams.len());
                    } else {
                        assert!(matches!(r, Err(MetaError::AccountNotFound)));
                    }
                }
                Op::RotateDek { acct, name } => {
                    let (a, n) = names(acct, name);
                    if let Some(s) = m.stream_by_name(&a, &n) {
                        let h = m.rotate_dek(s.stream_id).unwrap();
                        let v = &mut model.streams.get_mut(&(acct, name)).unwrap().2;
                        *v += 1;
                        assert_eq!(h.dek_version, *v);
                    }
                }
                Op::Compact => m.compact_catalog().unwrap(),
                Op::Reopen => {
                    drop(m);
                    m = open(&f);
                    let r = m.open_report();
                    assert_eq!((r.orphan_keys_erased, r.orphan_paths_removed, r.tmp_entries_removed), (0, 0, 0));
                }
            }
            check_model(&m, &model);
        }
        drop(m);
        let m = open(&f);
        check_model(&m, &model);
        for ((acct, name), (_, cons, _)) in &model.streams {
            let (a, n) = names(*acct, *name);
            let sid = m.stream_by_name(&a, &n).unwrap().stream_id;
            for c in cons {
                let cid = m.consumer_by_name(sid, &format!("c-{c}")).unwrap().consumer_id;
                assert_eq!(m.load_consumer_state(sid, cid).unwrap().unwrap().bytes, [*c]);
            }
        }
        assert_eq!(fs::read_dir(f.store.join("s")).unwrap().count(), model.streams.len());
    }
}

#[test]
fn the_store_can_move_to_its_own_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<MetaStore>();
    assert_send::<StreamHandle>();
}

#[test]
fn an_erased_stream_is_unreadable_at_once_and_its_files_go_by_its_owner_or_the_next_open() {
    let f = fx();
    let mut m = open(&f);
    let p = populate(&mut m);
    let uuid = m.store_uuid();
    let dir = m.open_stream(p.s1).unwrap().dir;
    assert_eq!(
        m.erased_stream_files(p.s1),
        None,
        "a live stream's files stay"
    );
    m.erase_stream(p.s1).unwrap();
    // The commit point is passed: no key, no name; the files are still there.
    assert!(!current_keyring(&f, &uuid, &f.key).holds(&p.s1));
    assert!(m.stream_by_name("ACC-A", "orders").is_none());
    assert!(dir.exists());
    assert_eq!(m.erased_stream_files(p.s1).as_deref(), Some(dir.as_path()));
    assert!(matches!(
        m.erase_stream(p.s1),
        Err(MetaError::StreamNotFound(_))
    ));
    // The process stops before the files went: the next open sweeps them.
    drop(m);
    let m = open(&f);
    assert!(!dir.exists(), "the sweep removed the erased stream's files");
    assert!(m.stream_by_name("ACC-B", "orders").is_some());
    let a = m.list_streams("ACC-A");
    assert_eq!(
        a.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["events"]
    );
    assert_eq!(m.list_consumers(p.s2).unwrap().len(), 1);
    // And the owner's own removal is a no-op once they are gone.
    super::remove_erased_stream_files(&dir).unwrap();
}

/// A clustered node's Raft log is sealed with secrets the keyring keeps: a master-key rotation
/// rewraps them and leaves them the same (before they were kept, they were derived from the
/// master key, and a rotation orphaned the node's log). A keyring written before they were
/// kept gets them, unchanged, at the first writable open.
#[test]
fn the_raft_log_secrets_survive_a_master_key_rotation() {
    let f = fx();
    let expose = |(a, b): (crate::crypto::Key32, crate::crypto::Key32)| (*a.expose(), *b.expose());
    let mut m = open(&f);
    let before = expose(m.raft_secrets());
    m.rotate_master(kf(&f.key2)).unwrap();
    assert_eq!(expose(m.raft_secrets()), before, "rotation keeps them");
    drop(m);
    let m = MetaStore::open(&f.store, kf(&f.key2), opts()).unwrap();
    assert_eq!(expose(m.raft_secrets()), before, "and so does a reopen");
    drop(m);
    let ro = MetaStore::open(&f.store, kf(&f.key2), MetaOptions::read_only()).unwrap();
    assert_eq!(expose(ro.raft_secrets()), before, "read-only too");

    // A store whose keyring predates them: derived from its key until a writable open keeps
    // them, the same values.
    let g = fx();
    let mut m = open(&g);
    let derived = expose(m.raft_secrets());
    m.mutate(|s| {
        let mut kr = s.next_keyring();
        kr.raft = None;
        s.commit_keyring(kr)
    })
    .unwrap();
    let uuid = m.store_uuid();
    drop(m);
    assert!(current_keyring(&g, &uuid, &g.key).raft.is_none());
    let mut m = open(&g);
    assert!(m.keyring.raft.is_some(), "kept at the writable open");
    assert_eq!(expose(m.raft_secrets()), derived);
    m.rotate_master(kf(&g.key2)).unwrap();
    assert_eq!(expose(m.raft_secrets()), derived);
}
