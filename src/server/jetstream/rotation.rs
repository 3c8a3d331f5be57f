//! Master-key rotation while the server runs (issue 17): `$SYS.REQ.SERVER.<id>.ROTATE_MASTER`
//! (this server) and `$SYS.REQ.SERVER.PING.ROTATE_MASTER` (every server, each its own store),
//! body `{"new_key_file": "<path on the server's host>"}`.
//!
//! It is the offline rotation (`MetaStore::rotate_master`: every data key rewrapped into a new
//! keyring generation, then the `STORE` header's inactive slot written and flipped — the store
//! opens with the old or the new key at every step of a crash), run under the catalog's lock,
//! so stream workers wait for the few fsyncs it takes and nothing else. Data is not rewritten:
//! segments are sealed with data keys, which do not change. The Raft log's secrets live in the
//! keyring and are rewrapped too.
//!
//! Why a key file and never a passphrase over the wire: the new secret then never travels
//! through the broker. A missing file is generated (0600). The running server keeps using the
//! store (its keys are in memory); at its next start it must be given the new key file
//! (`jetstream { key_file }` or `SEALSTREAM_STORE_KEY_FILE`) — the answer says so.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use crate::store::meta::KeySource;

use super::JetStream;

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateRequest {
    /// The new master key file, on the server's host (generated if missing).
    pub(crate) new_key_file: PathBuf,
}

/// Rotates the store's master key to `body`'s key file. Returns what the answer's `data`
/// holds.
pub(crate) fn rotate_master(js: &Arc<JetStream>, body: &[u8]) -> Result<serde_json::Value, String> {
    let request: RotateRequest =
        serde_json::from_slice(body).map_err(|e| format!("invalid rotation request: {e}"))?;
    let path = request.new_key_file;
    if !path.is_absolute() {
        return Err("new_key_file must be an absolute path on the server's host".into());
    }
    if !path.exists() {
        crate::crypto::MasterKey::generate_key_file(&path)
            .map_err(|e| format!("could not create {}: {e}", path.display()))?;
    }
    let new = KeySource::KeyFile(path.clone());
    let described = new.describe();
    let mut meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
    let mut r = meta.rotate_master(new.duplicate());
    if matches!(&r, Err(e) if e.is_fatal()) && js.heal(&mut meta) {
        r = meta.rotate_master(new.duplicate());
    }
    r.map_err(|e| e.to_string())?;
    // A later reopen of the catalog (after a failed update) needs the new key.
    js.set_key(new);
    drop(meta);
    tracing::warn!(key = %described, "master key rotated online; start this server with the new key file from now on");
    Ok(serde_json::json!({
        "rotated": true,
        "key": described,
        "restart_with": format!("jetstream {{ key_file: \"{}\" }} (or SEALSTREAM_STORE_KEY_FILE)", path.display()),
    }))
}
