//! An R1 stream becomes replicated (`STREAM.UPDATE` with `num_replicas` 2–5 of a stream that
//! has no group): its state seeds a new Raft group.
//!
//! A group normally starts empty and is fed by its log; this one must start from a stream
//! that exists. The server holding the stream (the *origin*) stops it taking writes (its
//! subjects leave the interest graph, so publishes find no responder rather than an answer
//! that would be lost), takes the stream's whole image after everything it already accepted
//! was stored and answered, and writes that image as the new group's first snapshot — as if
//! the group had been formed by the origin with all its peers and compacted at once
//! ([`write_seed`]), sealed and fsync'd. Only then is the meta entry
//! ([`MetaCmd::Promote`]) proposed. Applying it, every member moves the stream from the
//! origin's claim to a replicated assignment; the other peers create empty replicas; the
//! origin erases its R1 copy, starts the group — openraft loads the snapshot as its state and
//! the membership from it — and stands for election; the leader sends the snapshot to the
//! others, as to any follower too far behind. A publish is acknowledged again once a quorum
//! holds the snapshot.
//!
//! Once the snapshot is written the promotion always completes: the directory beside the
//! Raft log keeps the meta entry until it is applied here, a failed or timed-out proposal is
//! proposed again (applying it twice changes nothing), and a restart in between keeps the
//! stream from taking writes and proposes it again. A proposal that never reaches a quorum
//! leaves the stream unavailable for writes, as a replicated stream without a quorum is,
//! never accepting writes the group would not have.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tracing::{error, info, warn};

use crate::consensus::machine::{write_seed, ImageSink};
use crate::consensus::{GroupId, NodeId};
use crate::jetstream::api::ApiError;
use crate::jetstream::config::StreamConfig;

use super::super::cmd::Cmd;
use super::super::lifecycle::{self, Pulls};
use super::super::AccountJs;
use super::{
    new_group_id, unavailable, write_directory, Assignment, ClusterJs, MetaCmd, API_WAIT, META,
};

/// How often an unapplied promotion is proposed again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

impl ClusterJs {
    /// `STREAM.UPDATE` of this server's R1 stream to `cfg.num_replicas` (2–5; checked
    /// against the current config already). Answered with the replicated stream's info.
    ///
    /// # Errors
    /// `400/10005` when too few servers can take a replica, `10008` without a meta quorum
    /// (before the stream stopped taking writes, nothing changed; after, the promotion
    /// completes once the meta group can commit it).
    pub(crate) fn promote(
        self: &Arc<Self>,
        acc: &Arc<AccountJs>,
        cfg: StreamConfig,
    ) -> Result<Value, ApiError> {
        let name = cfg.name.clone();
        let cur = acc
            .streams
            .get(&name)
            .ok_or_else(ApiError::stream_not_found)?;
        if self.node.status(META).and_then(|s| s.leader).is_none() {
            return Err(unavailable());
        }
        if !self.fits(&self.name, &cfg) {
            return Err(super::no_suitable_peers(&cfg));
        }
        let n = usize::try_from(cfg.num_replicas).unwrap_or(usize::MAX);
        let me = vec![self.name.clone()];
        let spare = self.spare_servers(&cfg, &me);
        let mut peers = me.clone();
        peers.extend(self.pick_unique(spare, &me, n.saturating_sub(1)));
        if peers.len() < n {
            return Err(super::no_suitable_peers(&cfg));
        }
        let members = self.members_of(&peers);
        if members.len() != peers.len() {
            return Err(unavailable());
        }
        let group = new_group_id();
        let cmd = MetaCmd::Promote {
            account: acc.name.clone(),
            config: Box::new(cfg.clone()),
            group,
            peers,
            origin: self.name.clone(),
        };
        // No more writes here: what the stream accepted so far is in the image.
        acc.unsubscribe_stream(&cur.subs);
        acc.streams
            .insert(Arc::new(cur.updated(cur.cfg.clone(), Vec::new())));
        let seeded = self.seed(group, &members, &cur.tx, &cmd);
        if let Err(e) = seeded {
            // Nothing was proposed: the stream takes writes again, unchanged.
            self.unseed(group);
            let subs = acc.subscribe_stream(&name, &cur.tx, &cur.budget, &cur.cfg.subjects);
            acc.streams
                .insert(Arc::new(cur.updated(cur.cfg.clone(), subs)));
            return Err(e);
        }
        info!(account = %acc.name, stream = %name, replicas = n, "an R1 stream becomes replicated: its state seeds the group");
        if let Err(e) = self.propose_meta(&cmd) {
            warn!(account = %acc.name, stream = %name, error = %e.to_json(), "the stream's promotion is not applied yet; proposing it again until it is");
            self.finish_later(cmd);
            return Err(e);
        }
        self.replica_answer(acc, &name, group)
    }

    /// Writes the stream's image (its worker behind `tx` writes it, once everything queued
    /// before was stored) as `group`'s first snapshot (membership `members`, this node
    /// first) and records the promotion in the directory, durably.
    fn seed(
        &self,
        group: GroupId,
        members: &[(NodeId, String)],
        tx: &super::super::shard::StreamTx,
        cmd: &MetaCmd,
    ) -> Result<(), ApiError> {
        let failed = |e: &dyn std::fmt::Display| {
            error!(group, error = %e, "an R1 stream's state could not seed its group");
            ApiError::new(500, 10049, format!("stream update failed: {e}"))
        };
        let (slot, key) = self.keep_group(group);
        let file = self.log.snapshot_file(slot, key);
        let sink = file.writer().map_err(|e| failed(&e))?;
        let image = take_image(&self.runtime, tx, sink)?;
        write_seed(image, self.me, members).map_err(|e| failed(&e))?;
        let text = serde_json::to_string(cmd).map_err(|e| failed(&e))?;
        let mut d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
        d.promoting.insert(group, text);
        write_directory(&self.dir, &self.group_root, &d).map_err(|e| failed(&e))
    }

    /// Undoes [`seed`](Self::seed) before anything was proposed.
    fn unseed(&self, group: GroupId) {
        let (slot, key) = {
            let d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
            d.slot(&self.group_root, group)
        };
        self.log.snapshot_file(slot, key).remove();
        self.forget_group(group);
    }

    /// Proposes `cmd` (a promotion) until it is applied here.
    fn finish_later(self: &Arc<Self>, cmd: MetaCmd) {
        let MetaCmd::Promote { group, .. } = &cmd else {
            return;
        };
        let group = *group;
        let cj = Arc::clone(self);
        self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(RETRY_EVERY).await;
                if cj.js().is_none_or(|js| js.is_stopping()) || !cj.promoting(group) {
                    return;
                }
                match cj.propose_meta_async(&cmd).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::debug!(group, error = %e.to_json(), "a stream's promotion is still not applied")
                    }
                }
            }
        });
    }

    fn promoting(&self, group: GroupId) -> bool {
        self.directory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .promoting
            .contains_key(&group)
    }

    /// At a start, before the meta log is applied: the streams whose promotion was seeded
    /// but not applied take no writes (their state is in their group's snapshot already), and
    /// their promotions are proposed again.
    pub(super) fn resume_promotions(self: &Arc<Self>) {
        let pending: Vec<String> = self
            .directory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .promoting
            .values()
            .cloned()
            .collect();
        let Some(js) = self.js() else { return };
        for text in pending {
            let Ok(cmd) = serde_json::from_str::<MetaCmd>(&text) else {
                error!("a pending stream promotion in the Raft group directory does not decode");
                continue;
            };
            let MetaCmd::Promote {
                account, config, ..
            } = &cmd
            else {
                continue;
            };
            if let Some(acc) = js.account(account) {
                if let Some(s) = acc.streams.get(&config.name).filter(|s| s.group.is_none()) {
                    acc.unsubscribe_stream(&s.subs);
                    acc.streams
                        .insert(Arc::new(s.updated(s.cfg.clone(), Vec::new())));
                }
            }
            info!(account = %account, stream = %config.name, "a stream's promotion to a replicated stream resumes");
            self.finish_later(cmd);
        }
    }

    /// Applies [`MetaCmd::Promote`] on this node (see the module's doc). The same decision on
    /// every member, from the table alone: the stream must still be `origin`'s R1 stream.
    pub(super) async fn apply_promote(
        self: &Arc<Self>,
        account: String,
        config: StreamConfig,
        group: GroupId,
        peers: Vec<String>,
        origin: &str,
    ) {
        let key = (account.clone(), config.name.clone());
        {
            let mut assignments = self.assignments.lock().unwrap_or_else(|p| p.into_inner());
            if assignments.contains_key(&key) {
                // Applied before (a promotion proposed again), or the name is taken.
                return;
            }
            let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            if claims.get(&key).is_some_and(|c| c.server != origin) {
                warn!(account = %account, stream = %config.name, "a stream's promotion was refused: another server holds the name");
                return;
            }
            claims.remove(&key);
            assignments.insert(
                key,
                Assignment {
                    group,
                    peers: peers.clone(),
                    config: config.clone(),
                },
            );
        }
        if !peers.contains(&self.name) {
            return;
        }
        if self.name == origin && self.promoting(group) {
            self.finish_promotion(&account, config, group, &peers).await;
            return;
        }
        self.create_replica(&account, config, group, &peers, false)
            .await;
    }

    /// Hosts this node's replica of an assignment met in a meta snapshot (as applying the
    /// entry that made it would have): a promotion seeded here is finished, any other replica
    /// is created (its first peer forms the group, as for a create).
    pub(super) async fn take_up(
        self: &Arc<Self>,
        account: &str,
        config: StreamConfig,
        group: GroupId,
        peers: &[String],
    ) {
        if self.promoting(group) {
            self.finish_promotion(account, config, group, peers).await;
        } else {
            self.create_replica(account, config, group, peers, true)
                .await;
        }
    }

    /// On the origin of a promotion: its R1 copy goes and the replica seeded from it starts.
    async fn finish_promotion(
        self: &Arc<Self>,
        account: &str,
        config: StreamConfig,
        group: GroupId,
        peers: &[String],
    ) {
        // The R1 copy goes (its state is the group's snapshot); its consumers' waiting
        // pulls are left to expire, their clients pull again from the replica.
        if let Some(js) = self.js() {
            let (acc_name, name) = (account.to_owned(), config.name.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let Some(acc) = js.account(&acc_name) else {
                    return;
                };
                if acc.streams.get(&name).is_some_and(|s| s.group.is_none()) {
                    let _ = lifecycle::remove(&js, &acc, &name, Pulls::Keep);
                }
            })
            .await;
        }
        self.create_replica(account, config, group, peers, false)
            .await;
        {
            let mut d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
            d.promoting.remove(&group);
            if let Err(e) = write_directory(&self.dir, &self.group_root, &d) {
                error!(error = %e, "could not write the Raft group directory");
            }
        }
        let node = Arc::clone(&self.node);
        self.runtime
            .spawn(async move { node.campaign(group).await });
    }
}

/// The stream's image, written into `sink` once everything queued before the request was
/// stored and answered.
fn take_image(
    runtime: &tokio::runtime::Handle,
    tx: &super::super::shard::StreamTx,
    sink: ImageSink,
) -> Result<ImageSink, ApiError> {
    let (done, image) = tokio::sync::oneshot::channel();
    if tx.send(Cmd::TakeImage(sink, done)).is_err() {
        return Err(ApiError::stream_not_found());
    }
    match runtime.block_on(async { tokio::time::timeout(API_WAIT, image).await }) {
        Ok(Ok(r)) => r.map_err(|e| ApiError::new(500, 10049, format!("stream update failed: {e}"))),
        _ => Err(ApiError::new(500, 10049, "stream did not answer")),
    }
}
