//! The compliance audit of the encrypted store, end to end: create a sealed store, write a
//! stream of messages through the store API, then prove offline that nothing under the store
//! directory is plaintext and every block authenticates — and see the audit catch a planted
//! leak.
//!
//! ```sh
//! cargo run --example store_audit
//! ```

use std::sync::Arc;

use sealstream::audit::{audit, AuditOptions, Progress};
use sealstream::ctl::commands::audit::print_summary;
use sealstream::store::file_store::{FileStore, FileStoreConfig};
use sealstream::store::io::OsIo;
use sealstream::store::meta::{KeySource, MetaOptions, MetaStore};
use sealstream::store::segment::StreamKeys;
use sealstream::store::{NewMsg, StreamStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("jetstream");
    let key = dir.path().join("jetstream.key");
    sealstream::crypto::MasterKey::generate_key_file(&key)?;

    // A tenant stream with some messages, sealed as the server seals them.
    let mut meta = MetaStore::open(
        &root,
        KeySource::KeyFile(key.clone()),
        MetaOptions::default(),
    )?;
    let h = meta.create_stream(
        "ACME",
        "ORDERS",
        br#"{"name":"ORDERS","subjects":["orders.>"]}"#,
    )?;
    let keys = StreamKeys::new(h.store_uuid, *h.stream_id.as_bytes(), h.dek_version, h.dek);
    let mut stream = FileStore::open(Arc::new(OsIo), keys, FileStoreConfig::new(h.dir.clone()))?;
    for i in 0..100 {
        stream.append_batch(&[NewMsg::new(
            "orders.eu.created",
            format!("order #{i} for customer-42"),
        )])?;
    }
    stream.close()?;
    drop(meta);

    let opts = |canaries: Vec<String>| AuditOptions {
        store: root.clone(),
        key: None,
        key_file: Some(key.clone()),
        no_key: false,
        canaries,
        progress: Progress::new(),
    };
    println!("== audit of the sealed store ==");
    let report = audit(&opts(vec![]));
    print_summary(&report);
    println!("exit code: {}\n", report.exit_code());

    // A careless debug dump next to the data is exactly what the leak scan is for.
    std::fs::write(root.join("LOCK"), "debug: last subject orders.eu.created")?;
    println!("== after planting a plaintext subject in LOCK ==");
    let report = audit(&opts(vec![]));
    print_summary(&report);
    println!("exit code: {}", report.exit_code());
    Ok(())
}
