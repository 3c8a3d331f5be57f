//! Rotating a replicated stream's group key on this node (issue 17).
//!
//! A stream group's key seals the group's records in this node's Raft log and its snapshot
//! file — the stream's messages, as they were proposed. `rekey-live` on a replicated stream
//! re-seals the replica's own files under a new data key (`rekey.rs`) and then rotates this
//! key, on each node by itself, never proposed to the group (like the data keys, each node's
//! group keys are its own: nothing about them travels):
//!
//! 1. A new random key joins the directory beside the log, durably, as the group's newest;
//!    the older one is kept.
//! 2. The log seals the group's records with it from a checkpoint on (the group's vote and
//!    purge point, [`SealedLog::add_key`](crate::consensus::sealed_log::SealedLog::add_key));
//!    the group's snapshot file shares the log's keys, so the next snapshot is under it too.
//! 3. The group takes a snapshot and purges its log through it, until no live entry is older
//!    than the checkpoint and the stored snapshot is under the new key.
//! 4. The directory drops the older key and records the checkpoint's place, durably; then
//!    the log drops it. The group's records before that place are dead: skipped when the log
//!    is replayed, they stay on disk under a key nobody has until their segments go.
//!
//! Crash-safe: the directory opens the log at every step (steps 1–3: both keys; after step
//! 4: the new key and the place). A rotation a crash interrupted (two keys at start) is
//! finished in the background ([`ClusterJs::finish_group_rotations`]). The group keeps
//! taking writes throughout; its publishes never wait for these steps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tracing::{info, warn};

use super::ClusterJs;
use crate::consensus::directory::{group_key_bytes, seal_key, write_directory, Rotated};
use crate::consensus::sealed_log::LogPosition;
use crate::consensus::GroupId;

/// How long a rotation waits for the group's snapshot under the new key and its log purged
/// past the older one before it reports that it is still under way (it is finished at the
/// next start then).
const SETTLE_WAIT: Duration = Duration::from_secs(600);
/// How often the group is looked at meanwhile.
const POLL: Duration = Duration::from_millis(200);
/// How often a snapshot is asked for again while none under the new key covers the older
/// entries (openraft ignores a request while one is being built).
const SNAPSHOT_EVERY: Duration = Duration::from_secs(5);

impl ClusterJs {
    /// Rotates `group`'s key on this node (see the module's doc) and answers what a rekey
    /// request reports: `{"generation": n, "older_keys_destroyed": true}`. A rotation found
    /// under way is finished instead of starting another.
    ///
    /// # Errors
    /// The group is not kept here, is being rotated already, or a step failed (the older key
    /// is kept then, and the rotation is finished at the next start).
    pub(crate) async fn rotate_group_key(&self, group: GroupId) -> Result<Value, String> {
        if !self.rotating_groups().insert(group) {
            return Err("the stream's group key is being rotated already".into());
        }
        let r = self.rotate_locked(group).await;
        self.rotating_groups().remove(&group);
        r
    }

    fn rotating_groups(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<GroupId>> {
        self.rotating.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn rotate_locked(&self, group: GroupId) -> Result<Value, String> {
        // Step 1: the new key, durably, before anything is sealed with it.
        let (slot, new_key, resumed) = {
            let mut d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
            if !d.groups.contains(&group) {
                return Err("this node keeps no replica of the stream's group".into());
            }
            let before = d.clone();
            let resumed = d.rotated.get(&group).is_some_and(|r| r.keys.len() > 1);
            if !resumed {
                let mut rotated = match d.rotated.remove(&group) {
                    Some(r) => r,
                    None => {
                        let slot = d.slot(&self.group_root, group).0;
                        let key = d
                            .keys
                            .remove(&group)
                            .unwrap_or_else(|| group_key_bytes(&self.group_root, group));
                        Rotated {
                            slot,
                            keys: vec![key],
                            since: None,
                            generation: 0,
                        }
                    }
                };
                let mut key = [0u8; 32];
                crate::crypto::random_bytes(&mut key);
                rotated.keys.insert(0, key);
                rotated.generation += 1;
                d.rotated.insert(group, rotated);
                if let Err(e) = write_directory(&self.dir, &self.group_root, &d) {
                    *d = before;
                    return Err(format!(
                        "the Raft group directory could not be written: {e}"
                    ));
                }
            }
            let Some(r) = d.rotated.get(&group) else {
                unreachable!("the group's rotation was just recorded or found");
            };
            (r.slot, r.keys[0], resumed)
        };
        crash_point_for_tests("group-key-new-key");
        // Step 2: the log seals with it from a checkpoint on.
        let since = if resumed && self.log.key_count(slot) > 1 {
            // The log opened with both keys: it seals with the newest since then.
            self.log.mark_newest(slot).await
        } else {
            self.log.add_key(slot, seal_key(&new_key)).await
        }
        .map_err(|e| format!("the Raft log did not take the new group key: {e}"))?;
        crash_point_for_tests("group-key-checkpoint");
        // Step 3: a snapshot under the new key, the log purged past the older one.
        self.settle(group, slot, since).await?;
        crash_point_for_tests("group-key-settled");
        // Step 4: the older key destroyed, durably, then in memory.
        let generation = {
            let mut d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
            let Some(r) = d.rotated.get_mut(&group) else {
                return Err("the stream's group left this node during the rotation".into());
            };
            r.keys.truncate(1);
            r.since = Some(since);
            let generation = r.generation;
            write_directory(&self.dir, &self.group_root, &d).map_err(|e| {
                format!("the Raft group directory could not be written (the older group key is kept until it is): {e}")
            })?;
            generation
        };
        self.log.drop_older_keys(slot, since);
        info!(
            group,
            generation, "a stream group's key was rotated here; the older one is destroyed"
        );
        Ok(json!({ "generation": generation, "older_keys_destroyed": true }))
    }

    /// Waits until `group` (at `slot` in the log) has no live entry before `since` and its
    /// stored snapshot is under its newest key, asking it for snapshots and purges.
    async fn settle(
        &self,
        group: GroupId,
        slot: GroupId,
        since: LogPosition,
    ) -> Result<(), String> {
        let file = Arc::new(
            self.log
                .kept_snapshot_file(slot)
                .ok_or("the stream's group left this node during the rotation")?,
        );
        let deadline = Instant::now() + SETTLE_WAIT;
        let mut asked: Option<Instant> = None;
        // Once the stored snapshot is under the newest key it stays so (every later one is
        // sealed with it): the file is looked at until then only.
        let mut snapshot_new = false;
        loop {
            let Some(raft) = self.node.group(group) else {
                return Err("the stream's group stopped here during the rotation".into());
            };
            if !snapshot_new {
                let f = Arc::clone(&file);
                snapshot_new = tokio::task::spawn_blocking(move || f.under_newest_key())
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("the group's snapshot does not open: {e}"))?;
            }
            let older = self.log.last_entry_before(slot, since);
            if snapshot_new && older.is_none() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("the group's log still holds entries under the older key (a follower far behind?); the rotation is finished at the next start".into());
            }
            let covered = raft.metrics().borrow().snapshot.map(|s| s.index);
            let covers = older.is_none_or(|o| covered.is_some_and(|c| c >= o));
            if snapshot_new && covers {
                if let Some(through) = older {
                    let _ = raft.trigger().purge_log(through).await;
                }
            } else if asked.is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY) {
                asked = Some(Instant::now());
                let _ = raft.trigger().snapshot().await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// At start: finishes the group-key rotations a crash or a stop interrupted (groups the
    /// directory holds two keys for), in the background.
    pub(crate) fn finish_group_rotations(self: &Arc<Self>) {
        let unfinished: Vec<GroupId> = {
            let d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
            d.rotated
                .iter()
                .filter(|(g, r)| r.keys.len() > 1 && d.groups.contains(g))
                .map(|(g, _)| *g)
                .collect()
        };
        for group in unfinished {
            let cj = Arc::clone(self);
            self.runtime.spawn(async move {
                // The group starts with the meta log's replay: give it the time.
                for _ in 0..600 {
                    if cj.node.group(group).is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                match cj.rotate_group_key(group).await {
                    Ok(v) => {
                        info!(group, outcome = %v, "an interrupted group-key rotation finished")
                    }
                    Err(e) => {
                        warn!(group, error = %e, "an interrupted group-key rotation did not finish")
                    }
                }
            });
        }
    }
}

/// The environment variable that makes a node kill itself (SIGKILL, as `kill -9` would) right
/// after the rotation step it names — `group-key-new-key`, `group-key-checkpoint` or
/// `group-key-settled` — so that the tests can start it again from exactly that state
/// (`tests/js_cluster.rs`). Read at that moment only; unset, nothing happens.
const CRASH_AT_ENV: &str = "SEALSTREAM_TEST_CRASH_AT";

/// Kills this process where [`CRASH_AT_ENV`] says so.
fn crash_point_for_tests(step: &str) {
    if std::env::var(CRASH_AT_ENV).is_ok_and(|v| v == step) {
        warn!(
            step,
            "{CRASH_AT_ENV}: killing this process (SIGKILL) as asked"
        );
        // No unsafe code in the crate: the kill(1) command, SIGKILL to ourselves (taken as
        // this thread returns from waiting for it); abort if that did not end us.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        std::process::abort();
    }
}
