//! Changing one stream of this node: a config update and a delete, as the account's API thread
//! does them for a stream of its own and as the meta group's apply does them for this node's
//! replica of a replicated stream.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::{info, warn};

use crate::jetstream::api::{body, info_for_reply, ApiError};
use crate::jetstream::config::StreamConfig;

use super::cmd::Cmd;
use super::stream_worker;
use super::{AccountJs, JetStream};

/// Updates `name`'s config (validated against the request's subject already).
///
/// # Errors
/// Not found, an update rule broken, overlapping subjects, or the stream not answering.
pub(crate) fn update(
    acc: &Arc<AccountJs>,
    name: &str,
    cfg: StreamConfig,
) -> Result<Value, ApiError> {
    let cur = acc
        .streams
        .get(name)
        .ok_or_else(ApiError::stream_not_found)?;
    cur.cfg.check_update(&cfg)?;
    if acc.streams.subjects_taken(name, &cfg.subjects) {
        return Err(ApiError::subjects_overlap());
    }
    let (rtx, rrx) = std::sync::mpsc::sync_channel(1);
    let _ = cur.tx.send(Cmd::Update(Box::new(cfg.clone()), rtx));
    let info = rrx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| ApiError::new(500, 10049, "stream did not answer"))??;
    // Only this thread changes the table, so `cur` is still the registered stream.
    let subs = if cur.cfg.subjects == cfg.subjects {
        cur.subs.clone()
    } else {
        acc.unsubscribe_stream(&cur.subs);
        acc.subscribe_stream(name, &cur.tx, &cur.budget, &cfg.subjects)
    };
    acc.streams.insert(Arc::new(cur.updated(cfg, subs)));
    let mut info = info;
    info_for_reply(&mut info, false);
    Ok(body(&info))
}

/// Deletes a stream without waiting for its store thread, which may be in another stream's
/// fsync: the keys are erased here (the commit point, durable before the reply), the stream
/// leaves the table and its subjects, and its files go here if the stream is idle, else when
/// its thread finishes its round and finds it erased (`stream_worker::Worker::remove`). A
/// crash in between leaves files nobody can read, which the next start sweeps.
pub(crate) fn delete(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    name: &str,
) -> Result<Value, ApiError> {
    remove(js, acc, name, Pulls::End)
}

/// What a removed stream's waiting pull requests hear.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pulls {
    /// `409 Consumer Deleted`: the stream and its consumers are gone.
    End,
    /// Nothing: the stream lives on as its replicated successor, whose consumers the clients'
    /// next pull requests reach (an R1 stream that became replicated).
    Keep,
}

/// [`delete`], telling waiting pull requests what `pulls` says.
///
/// # Errors
/// As [`delete`].
pub(crate) fn remove(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    name: &str,
    pulls: Pulls,
) -> Result<Value, ApiError> {
    let s = acc
        .streams
        .get(name)
        .ok_or_else(ApiError::stream_not_found)?;
    match s.id {
        Some(id) => {
            let mut meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
            let mut r = meta.erase_stream(id);
            if r.is_err() && js.heal(&mut meta) {
                // A full disk: the reserve was released and the metadata reopened; once more.
                r = meta.erase_stream(id);
            }
            if let Err(e) = r {
                drop(meta);
                warn!(stream = %name, error = %e, "stream delete did not complete; the stream is still served");
                return Err(ApiError::new(
                    500,
                    10050,
                    format!("stream delete failed: {e}"),
                ));
            }
            // Under the metadata lock: the stream's thread writes no metadata after this.
            s.erased.store(true, Ordering::Release);
            drop(meta);
        }
        None => s.erased.store(true, Ordering::Release),
    }
    acc.streams.remove(name);
    acc.unsubscribe_stream(&s.subs);
    // Its storage stops counting toward the quotas now, not when its thread next runs.
    stream_worker::set_usage(&s.usage, s.cfg.storage, [&acc.used, &js.used], [0; 3]);
    // An idle stream's files go now (a caller that deleted it to free space finds the space
    // free); a busy one's when its thread finishes the round it is in.
    if let Ok(mut st) = s.stream.try_lock() {
        stream_worker::remove_files(js, &mut st, s.id);
    }
    // Rings the stream's thread, which ends its consumers' pulls (when they end) and
    // removes what is left.
    let ring = match pulls {
        Pulls::End => Cmd::EndPulls,
        Pulls::Keep => Cmd::SourceReady,
    };
    let _ = s.tx.send(ring);
    info!(account = %acc.name, stream = %name, "stream deleted (data key destroyed)");
    Ok(json!({"success": true}))
}
