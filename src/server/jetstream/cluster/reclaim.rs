//! Keeps the node's shared Raft log bounded on disk.
//!
//! Why it is needed: every group's records share the log's segment files, and a segment is
//! deleted only once none of its entries is live, oldest first (so a truncation record is
//! never lost while entries it cut remain). A group that does not purge — a stream that went
//! idle before its next snapshot was due, or one whose state is much larger than what it
//! writes — keeps the oldest segment, and with it every later one, on disk.
//!
//! What is done (each membership pass, [`ClusterJs::reclaim_log`]): once the log holds more
//! than [`KEEP_CLOSED_SEGMENTS`] closed segments, each group with entries in the oldest one
//! purges through them if its snapshot covers them, and otherwise is asked for a snapshot
//! (then purges at a later pass) — but only while the log bytes it holds back are at least
//! its last snapshot's size, so a snapshot made for this costs at most as much as the disk
//! it frees (a stream of many GiB that writes little keeps its entries until the log behind
//! it is as large as its state). openraft purges only what a snapshot covers and answers a
//! follower that needs purged entries with the snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::debug;

use super::{ClusterJs, META};
use crate::consensus::GroupId;

/// Closed segments the log may hold before groups are asked to let the oldest go (with the
/// open one: about 192 MiB of log per node, plus snapshots).
pub(super) const KEEP_CLOSED_SEGMENTS: usize = 2;

impl ClusterJs {
    /// One pass (see the module's doc).
    pub(super) fn reclaim_log(self: &Arc<Self>) {
        let Some(pinned) = self.log.pinning(KEEP_CLOSED_SEGMENTS) else {
            return;
        };
        let by_slot: HashMap<GroupId, GroupId> = {
            let d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
            d.groups
                .iter()
                .map(|g| (d.slot(&self.group_root, *g).0, *g))
                .chain([(META, META)])
                .collect()
        };
        for pin in pinned.groups {
            let Some(&group) = by_slot.get(&pin.group) else {
                continue;
            };
            let Some(raft) = self.node.group(group) else {
                continue;
            };
            let snapshot = raft.metrics().borrow().snapshot;
            if snapshot.is_some_and(|s| s.index >= pin.through) {
                debug!(
                    group,
                    through = pin.through,
                    "purging a group's log to free the oldest segment"
                );
                tokio::spawn(async move {
                    let _ = raft.trigger().purge_log(pin.through).await;
                });
            } else if pin.snapshot_bytes <= pinned.held_bytes && !self.node.sending_snapshot(group)
            {
                debug!(
                    group,
                    "asking a group for a snapshot to free the log's oldest segment"
                );
                tokio::spawn(async move {
                    let _ = raft.trigger().snapshot().await;
                });
            }
        }
    }
}
