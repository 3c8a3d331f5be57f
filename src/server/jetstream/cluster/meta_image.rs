//! The meta group's state as a snapshot: its table of replicated streams (assignments), R1
//! streams' claims and removed servers.
//!
//! Why the meta group keeps snapshots: without them its log is kept whole, and segments of
//! the node's shared Raft log go oldest first only — so its first entry kept every later
//! segment, every stream's entries included, on disk for good (the log grew with everything
//! ever published to a replicated stream). With a snapshot its log is purged like a stream
//! group's ([`super::reclaim`]), and a purged tenant's stream names leave the log with the
//! segments that held them.
//!
//! Installing an image (a start from the stored snapshot, or a leader's snapshot sent to a
//! node far behind) replaces the tables and then does what applying the entries it stands for
//! would have done on this node: replicas it no longer names are dropped, replicas it newly
//! names are created (a seeded promotion is finished), a changed config is given to the
//! replica. JSON, as the meta log's entries are: the image is small (one row per stream).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tracing::info;

use super::claims::Claim;
use super::{Assignment, ClusterJs};
use crate::consensus::GroupId;
use crate::jetstream::config::StreamConfig;

/// The image's format (a later build reads this one, or refuses with the reason).
const VERSION: u32 = 1;

/// The meta group's state (see the module's doc).
#[derive(Serialize, Deserialize)]
pub(super) struct MetaImage {
    version: u32,
    assignments: Vec<AssignmentRow>,
    claims: Vec<ClaimRow>,
    removed: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct AssignmentRow {
    account: String,
    group: GroupId,
    peers: Vec<String>,
    config: StreamConfig,
}

#[derive(Serialize, Deserialize)]
struct ClaimRow {
    account: String,
    server: String,
    config: StreamConfig,
}

impl MetaImage {
    /// Decodes an image.
    ///
    /// # Errors
    /// Bytes that are no image, or one of a format this build does not know.
    pub(super) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let image: MetaImage = serde_json::from_slice(bytes)
            .map_err(|e| format!("the meta group's snapshot does not decode: {e}"))?;
        if image.version != VERSION {
            return Err(format!(
                "the meta group's snapshot is format {}, this build reads {VERSION}",
                image.version
            ));
        }
        Ok(image)
    }
}

impl ClusterJs {
    /// The meta group's state now, encoded.
    pub(super) fn meta_image(&self) -> Result<Vec<u8>, String> {
        let assignments = self
            .assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((account, _), a)| AssignmentRow {
                account: account.clone(),
                group: a.group,
                peers: a.peers.clone(),
                config: a.config.clone(),
            })
            .collect();
        let claims = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((account, _), c)| ClaimRow {
                account: account.clone(),
                server: c.server.clone(),
                config: c.config.clone(),
            })
            .collect();
        let removed = self
            .removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        serde_json::to_vec(&MetaImage {
            version: VERSION,
            assignments,
            claims,
            removed,
        })
        .map_err(|e| e.to_string())
    }

    /// Replaces the meta group's state by `image` and brings this node's replicas in line
    /// with it (see the module's doc).
    pub(super) async fn install_meta_image(self: &Arc<Self>, image: MetaImage) {
        let new: BTreeMap<(String, String), Assignment> = image
            .assignments
            .into_iter()
            .map(|row| {
                (
                    (row.account, row.config.name.clone()),
                    Assignment {
                        group: row.group,
                        peers: row.peers,
                        config: row.config,
                    },
                )
            })
            .collect();
        *self.claims.lock().unwrap_or_else(|p| p.into_inner()) = image
            .claims
            .into_iter()
            .map(|row| {
                (
                    (row.account, row.config.name.clone()),
                    Claim {
                        server: row.server,
                        config: row.config,
                    },
                )
            })
            .collect();
        *self.removed.lock().unwrap_or_else(|p| p.into_inner()) =
            image.removed.into_iter().collect();
        let old = std::mem::replace(
            &mut *self.assignments.lock().unwrap_or_else(|p| p.into_inner()),
            new.clone(),
        );
        info!(
            streams = new.len(),
            "the meta group's state was replaced by a snapshot"
        );
        let here = |a: &Assignment| a.peers.contains(&self.name);
        for ((account, name), was) in old.iter().filter(|(_, a)| here(a)) {
            match new.get(&(account.clone(), name.clone())) {
                Some(now) if now.group == was.group && here(now) => {
                    if now.config != was.config {
                        self.update_replica(account.clone(), now.config.clone())
                            .await;
                    }
                }
                Some(now) if now.group == was.group => {
                    self.drop_replica_when_removed(account.clone(), name.clone(), was.group);
                }
                _ => {
                    self.drop_replica(account.clone(), name.clone(), was.group)
                        .await;
                }
            }
        }
        for ((account, name), now) in new.iter().filter(|(_, a)| here(a)) {
            let kept = old
                .get(&(account.clone(), name.clone()))
                .is_some_and(|was| was.group == now.group && here(was));
            if !kept {
                self.take_up(account, now.config.clone(), now.group, &now.peers)
                    .await;
            }
        }
    }
}
