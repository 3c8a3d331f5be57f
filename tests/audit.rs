//! `sealctl audit` on a real store built through the store API: clean when intact, and each
//! planted leak, flipped byte, wrong key and stray file is found with its exit code.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use sealstream::crypto::MasterKey;
use sealstream::store::file_store::{FileStore, FileStoreConfig};
use sealstream::store::io::OsIo;
use sealstream::store::meta::{KeySource, MetaOptions, MetaStore};
use sealstream::store::segment::StreamKeys;
use sealstream::store::{NewMsg, StreamStore};

const SUBJECT: &str = "orders.europe.created";
const PAYLOAD: &str = "customer-secret-payload-123";
const CANARY: &str = "CANARY-7f3a9c";

struct Built {
    _dir: tempfile::TempDir,
    root: PathBuf,
    key: PathBuf,
}

fn build_store() -> Built {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("jetstream");
    let key = dir.path().join("store.key");
    MasterKey::generate_key_file(&key).unwrap();
    let mut meta = MetaStore::open(
        &root,
        KeySource::KeyFile(key.clone()),
        MetaOptions::default(),
    )
    .unwrap();
    let config = format!("{{\"name\":\"ORDERS\",\"description\":\"{CANARY}\"}}");
    let h = meta
        .create_stream("ACME", "ORDERS", config.as_bytes())
        .unwrap();
    let keys = StreamKeys::new(h.store_uuid, *h.stream_id.as_bytes(), h.dek_version, h.dek);
    let mut store =
        FileStore::open(Arc::new(OsIo), keys, FileStoreConfig::new(h.dir.clone())).unwrap();
    for i in 0..50 {
        let batch: Vec<NewMsg> = (0..4)
            .map(|j| NewMsg::new(SUBJECT, format!("{PAYLOAD}-{i}-{j}")))
            .collect();
        store.append_batch(&batch).unwrap();
    }
    store.close().unwrap();
    let c = meta
        .create_consumer(h.stream_id, "WORKER", b"{\"durable_name\":\"WORKER\"}")
        .unwrap();
    meta.persist_consumer_state(h.stream_id, c, 1, b"ack-floor-state")
        .unwrap();
    drop(meta);
    Built {
        _dir: dir,
        root,
        key,
    }
}

fn audit(root: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .arg("audit")
        .arg(root)
        .args(args)
        .arg("--json")
        .env_remove("SEALSTREAM_STORE_KEY")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

fn first_segment(root: &Path) -> PathBuf {
    let s = root.join("s");
    let stream = std::fs::read_dir(&s)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_dir(&stream)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .unwrap()
}

#[test]
fn an_intact_store_is_clean_with_and_without_the_key() {
    let b = build_store();
    let key = b.key.to_str().unwrap();
    let (code, v) = audit(&b.root, &["--key-file", key, "--canary", CANARY]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["streams"][0]["messages"], 200);
    assert_eq!(v["streams"][0]["consumers"], 1);
    assert!(v["needles"].as_u64().unwrap() > 5);
    let (code, v) = audit(&b.root, &["--no-key"]);
    assert_eq!(code, 0, "{v:#}");
    assert!(v["blocks_framed"].as_u64().unwrap() >= 50);
}

#[test]
fn a_planted_leak_is_found() {
    let b = build_store();
    std::fs::write(b.root.join("LOCK"), format!("debug dump: {SUBJECT}")).unwrap();
    let (code, v) = audit(&b.root, &["--key-file", b.key.to_str().unwrap()]);
    assert_eq!(code, 2, "{v:#}");
    let f = &v["findings"][0];
    assert_eq!(f["class"], "leak");
    assert_eq!(f["path"], "LOCK");
    // A message's payload written out in the clear, at an odd offset, is found too (the
    // sampled payload prefixes, searched through their aligned windows).
    let payload = format!("{PAYLOAD}-37-2");
    std::fs::write(b.root.join("LOCK"), format!("xyz{payload}...")).unwrap();
    let (code, v) = audit(&b.root, &["--key-file", b.key.to_str().unwrap()]);
    assert_eq!(code, 2, "{v:#}");
    let detail = v["findings"][0]["detail"].as_str().unwrap();
    assert!(detail.contains(&payload), "{v:#}");
}

#[test]
fn a_flipped_byte_is_an_integrity_failure_with_file_and_offset() {
    let b = build_store();
    let seg = first_segment(&b.root);
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = 128 + 200;
    bytes[at] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    let (code, v) = audit(&b.root, &["--key-file", b.key.to_str().unwrap()]);
    assert_eq!(code, 1, "{v:#}");
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["class"] == "integrity")
        .unwrap();
    assert!(f["path"].as_str().unwrap().contains("seg-"), "{f}");
    assert!(f["offset"].as_u64().is_some());
}

#[test]
fn a_wrong_key_is_exit_three_and_a_stray_file_exit_four() {
    let b = build_store();
    let other = b.root.parent().unwrap().join("other.key");
    MasterKey::generate_key_file(&other).unwrap();
    let (code, _) = audit(&b.root, &["--key-file", other.to_str().unwrap()]);
    assert_eq!(code, 3);
    std::fs::write(b.root.join("s").join("ORDERS-export.txt"), b"x").unwrap();
    let (code, v) = audit(&b.root, &["--no-key"]);
    assert_eq!(code, 4, "{v:#}");
    assert_eq!(v["findings"][0]["class"], "layout");
}

#[test]
fn master_rotation_switches_the_key_without_rewriting_data() {
    let b = build_store();
    let seg = first_segment(&b.root);
    let before = std::fs::read(&seg).unwrap();
    let new_key = b.root.parent().unwrap().join("new.key");
    let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .args(["store", "rotate-master"])
        .arg(&b.root)
        .arg("--key-file")
        .arg(&b.key)
        .arg("--new-key-file")
        .arg(&new_key)
        .env_remove("SEALSTREAM_STORE_KEY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        before,
        "segments are not rewritten"
    );
    assert_eq!(
        audit(&b.root, &["--key-file", b.key.to_str().unwrap()]).0,
        3,
        "the old key no longer opens it"
    );
    let (code, v) = audit(&b.root, &["--key-file", new_key.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["streams"][0]["messages"], 200);
}

fn sealctl(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .args(args)
        .env_remove("SEALSTREAM_STORE_KEY")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_signed_attestation_verifies_offline_and_tells_when_the_store_changed() {
    let b = build_store();
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("audit.nk");
    let report = dir.path().join("attestation.json");
    let (seed_s, report_s) = (seed.to_str().unwrap(), report.to_str().unwrap());
    let key = b.key.to_str().unwrap();
    let root = b.root.to_str().unwrap();
    // The auditor's key: a server-type nkey, its seed written 0600, never replaced.
    let (code, public) = sealctl(&["audit-key", "init", "--out", seed_s]);
    assert_eq!(code, 0);
    let public = public.trim().to_owned();
    assert!(public.starts_with('N'), "{public}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&seed).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_ne!(sealctl(&["audit-key", "init", "--out", seed_s]).0, 0);

    let (code, out) = sealctl(&[
        "audit",
        root,
        "--key-file",
        key,
        "--attest",
        report_s,
        "--sign-with",
        seed_s,
    ]);
    assert_eq!(code, 0, "{out}");
    let text = std::fs::read_to_string(&report).unwrap();
    // What it holds: ids, counts, chain heads — no key material, no plaintext.
    let seed_text = std::fs::read_to_string(&seed).unwrap();
    let key_bytes = std::fs::read(&b.key).unwrap();
    assert!(!text.contains(seed_text.trim()));
    assert!(!text.contains(&data_encoding::HEXLOWER.encode(&key_bytes)));
    assert!(!text.contains(PAYLOAD) && !text.contains(SUBJECT));
    let signed: serde_json::Value = serde_json::from_str(&text).unwrap();
    let inner: serde_json::Value =
        serde_json::from_str(signed["attestation"].as_str().unwrap()).unwrap();
    let store = &inner["stores"][0];
    assert_eq!(store["streams"][0]["messages"], 200);
    assert_eq!(store["cipher"], "XChaCha20-Poly1305");
    assert!(store["store_id"].as_str().unwrap().len() == 32);
    assert!(!store["segments"][0]["head"].as_str().unwrap().is_empty());

    // The auditor, offline: the signature, and the store against it.
    let (code, out) = sealctl(&["audit", "verify", report_s, "--signer", &public]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("signature: valid"), "{out}");
    let (code, out) = sealctl(&[
        "audit",
        "verify",
        report_s,
        "--store",
        root,
        "--key-file",
        key,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("matches the attestation"), "{out}");
    // Another signer expected, or a figure changed after signing: invalid (exit 5).
    let other = dir.path().join("other.nk");
    let (_, other_public) = sealctl(&["audit-key", "init", "--out", other.to_str().unwrap()]);
    assert_eq!(
        sealctl(&["audit", "verify", report_s, "--signer", other_public.trim()]).0,
        5
    );
    let forged = text.replace("\\\"messages\\\": 200", "\\\"messages\\\": 201");
    assert_ne!(forged, text);
    let forged_path = dir.path().join("forged.json");
    std::fs::write(&forged_path, forged).unwrap();
    let (code, out) = sealctl(&["audit", "verify", forged_path.to_str().unwrap()]);
    assert_eq!(code, 5, "{out}");
    // The store changed since (a byte of a sealed block flipped, as a rollback or an edit
    // would change it): the segment's chain head differs (exit 6).
    let seg = first_segment(&b.root);
    let mut bytes = std::fs::read(&seg).unwrap();
    let last = bytes.iter().rposition(|x| *x != 0).unwrap();
    bytes[last] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    let (code, out) = sealctl(&[
        "audit",
        "verify",
        report_s,
        "--store",
        root,
        "--key-file",
        key,
    ]);
    assert_eq!(code, 6, "{out}");
    assert!(out.contains("DIFFERS") && out.contains("head"), "{out}");
}
