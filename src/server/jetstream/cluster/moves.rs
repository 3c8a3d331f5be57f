//! Moving a replicated stream's replicas: one server's replica replaced by another's
//! (`$JS.API.STREAM.PEER.REMOVE.<S>`), and the replica count changed (`STREAM.UPDATE` with
//! another `num_replicas`, between 1 and 5: a replicated stream scaled down to one replica
//! keeps its group, of one member, so it can be scaled up again the same way; an R1 stream
//! that never had a group is promoted instead, see [`promote`](super::promote)).
//!
//! Both are one meta entry, [`MetaCmd::Replace`], naming the stream's new peers. Applying it,
//! a server new in the list creates its (empty) replica and hosts the stream's group; a
//! server no longer in it erases its copy and stops hosting the group; the others take the
//! new config. The group's membership then follows the assignment, driven by whoever leads
//! the group: each membership pass ([`ClusterJs::reconcile_groups`], every 500 ms) makes one
//! change — first a missing peer is added (a learner that catches up from the group's log,
//! which is kept whole, then a voter), and only when none is missing an extra one is removed
//! — so a move never runs on fewer replicas than before it. Reconciling towards the
//! assignment, rather than changing membership inside the API call, means that a leader
//! change or a restart midway simply continues.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::{info, warn};

use crate::consensus::{node_id, peer_id, GroupId, NodeId};
use crate::jetstream::api::ApiError;
use crate::jetstream::config::StreamConfig;

use super::super::AccountJs;
use super::{local_info, unavailable, ClusterJs, MetaCmd, META};

/// How long one membership change may take (a new replica catching up on a long log) before
/// the next pass tries again.
const MOVE_DEADLINE: Duration = Duration::from_secs(120);

/// How long a replica moved away from this server waits for its group's leader to take it
/// out of the voters before it leaves anyway.
const LEAVE_AFTER: Duration = Duration::from_secs(30);

impl ClusterJs {
    /// Applies [`MetaCmd::Replace`] on this node (see the module's doc).
    pub(super) async fn apply_replace(
        self: &Arc<Self>,
        account: String,
        config: Box<StreamConfig>,
        peers: Vec<String>,
    ) {
        let key = (account.clone(), config.name.clone());
        let (old, group) = {
            let mut assignments = self.assignments.lock().unwrap_or_else(|p| p.into_inner());
            let Some(a) = assignments.get_mut(&key) else {
                return;
            };
            a.config = (*config).clone();
            (std::mem::replace(&mut a.peers, peers.clone()), a.group)
        };
        match (old.contains(&self.name), peers.contains(&self.name)) {
            (false, true) => {
                info!(stream = %config.name, "a replica of the stream moves to this server");
                self.create_replica(&account, *config, group, &peers, false)
                    .await;
            }
            (true, false) => {
                info!(stream = %config.name, "this server's replica of the stream moves away");
                self.drop_replica_when_removed(account, config.name.clone(), group);
            }
            (true, true) => self.update_replica(account, *config).await,
            (false, false) => {}
        }
    }

    /// One membership pass over the stream groups this node leads: where a group's voters
    /// differ from its assignment, one change starts (an addition first, else a removal).
    pub(super) fn reconcile_groups(self: &Arc<Self>) {
        let assignments: Vec<(GroupId, Vec<String>)> = self
            .assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|a| (a.group, a.peers.clone()))
            .collect();
        for (group, peers) in assignments {
            let Some(status) = self.node.status(group) else {
                continue;
            };
            if !status.is_leader {
                continue;
            }
            let want: BTreeSet<NodeId> = peers.iter().map(|p| node_id(p)).collect();
            let have: BTreeSet<NodeId> = status.voters.iter().map(|(id, _)| *id).collect();
            let missing = peers.iter().find(|p| !have.contains(&node_id(p))).cloned();
            let extra = have.difference(&want).next().copied();
            // A voter removed is kept as a learner until then (see MuxNode::remove_voter).
            let leaving = status
                .learners
                .iter()
                .find(|id| !want.contains(id))
                .copied();
            if missing.is_none() && extra.is_none() && leaving.is_none() {
                continue;
            }
            if !self
                .moving
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(group)
            {
                continue;
            }
            let address = missing
                .as_ref()
                .and_then(|m| self.members_of(std::slice::from_ref(m)).pop());
            let cj = Arc::clone(self);
            tokio::spawn(async move {
                let change = async {
                    match (address, extra) {
                        (Some((id, addr)), _) => {
                            info!(group, peer = %missing.as_deref().unwrap_or(""), "adding a replica to a stream's group");
                            cj.node.add_voter(group, id, &addr).await
                        }
                        // A missing peer whose address is not known yet: wait for it.
                        (None, _) if missing.is_some() => Ok(()),
                        (None, Some(id)) => {
                            info!(group, "removing a replica from a stream's group");
                            cj.node.remove_voter(group, id).await
                        }
                        (None, None) => match leaving {
                            Some(id) => {
                                info!(group, "a removed replica leaves the stream's group");
                                cj.node.remove_learner(group, id).await
                            }
                            None => Ok(()),
                        },
                    }
                };
                match tokio::time::timeout(MOVE_DEADLINE, change).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        warn!(group, error = %e, "a stream group's membership change failed; retrying")
                    }
                    Err(_) => warn!(
                        group,
                        "a stream group's membership change timed out; retrying"
                    ),
                }
                cj.moving
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&group);
            });
        }
    }

    /// Drops this server's replica once the group's leader has taken it out of the voters
    /// (the leader needs it until then: going from three replicas to one, the first change's
    /// joint quorum needs two of the three), or after [`LEAVE_AFTER`] without that news.
    pub(super) fn drop_replica_when_removed(
        self: &Arc<Self>,
        account: String,
        name: String,
        group: GroupId,
    ) {
        let cj = Arc::clone(self);
        tokio::spawn(async move {
            let since = tokio::time::Instant::now();
            loop {
                let voting = cj
                    .node
                    .status(group)
                    .is_some_and(|s| s.voters.iter().any(|(id, _)| *id == cj.me));
                let back = cj
                    .peers_of(&account, &name)
                    .is_some_and(|p| p.contains(&cj.name));
                if back {
                    // Moved here again meanwhile: the replica stays.
                    return;
                }
                if !voting || since.elapsed() >= LEAVE_AFTER {
                    cj.drop_replica(account, name, group).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    /// Meta members that could take a replica: not among `peers`, not removed, this order
    /// rotated by the stream's name (as placement spreads streams).
    pub(super) fn spare_servers(&self, cfg: &StreamConfig, peers: &[String]) -> Vec<String> {
        let name = &cfg.name;
        let status = self.node.status(META).unwrap_or_default();
        let names = self.names.read().unwrap_or_else(|p| p.into_inner()).clone();
        let removed = self
            .removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut spare: Vec<String> = status
            .voters
            .iter()
            .filter_map(|(id, _)| names.get(id).cloned())
            .filter(|n| !peers.contains(n) && !removed.contains(n) && self.fits(n, cfg))
            .collect();
        if !spare.is_empty() {
            let spin = node_id(name) as usize % spare.len();
            spare.rotate_left(spin);
        }
        spare
    }

    fn peers_of(&self, account: &str, name: &str) -> Option<Vec<String>> {
        self.assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(account.to_owned(), name.to_owned()))
            .map(|a| a.peers.clone())
    }

    /// `$JS.API.STREAM.PEER.REMOVE.<S>` with `{"peer":"n3"}` (a server name or peer id): the
    /// server's replica is replaced by one on a server that holds none.
    ///
    /// # Errors
    /// nats-server's: `400/10040 peer not a member`, `503/10075 peer remap failed` when no
    /// other server can take the replica; `404/10059` for an unknown stream; `10008`
    /// without a meta quorum.
    pub(crate) fn peer_remove(
        &self,
        acc: &Arc<AccountJs>,
        name: &str,
        payload: &[u8],
    ) -> Result<Value, ApiError> {
        let Some(peers) = self.peers_of(&acc.name, name) else {
            if acc.streams.get(name).is_some() {
                // An R1 stream has no group: nothing to move.
                return Err(ApiError::new(400, 10040, "peer not a member"));
            }
            return Err(ApiError::stream_not_found());
        };
        let request = crate::jetstream::api::optional_body(payload)?.unwrap_or_default();
        let peer = request.get("peer").and_then(Value::as_str).unwrap_or("");
        let Some(at) = peers.iter().position(|p| p == peer || peer_id(p) == peer) else {
            return Err(ApiError::new(400, 10040, "peer not a member"));
        };
        let config = self.current_config(acc, name)?;
        let staying: Vec<String> = peers.iter().filter(|p| *p != &peers[at]).cloned().collect();
        let spare = self.spare_servers(&config, &peers);
        let Some(replacement) = self.pick_unique(spare, &staying, 1).into_iter().next() else {
            return Err(ApiError::new(503, 10075, "peer remap failed"));
        };
        let mut moved = peers;
        moved[at] = replacement;
        self.propose_meta(&MetaCmd::Replace {
            account: acc.name.clone(),
            config: Box::new(config),
            peers: moved,
        })?;
        Ok(json!({ "success": true }))
    }

    /// `STREAM.UPDATE` of a replicated stream to another replica count (1–5): new peers from
    /// the servers that hold no replica, or the replicas beyond the count dropped (never the
    /// group's leader nor this server's, while others can go). Scaled down to 1, the group
    /// keeps its last member (it is the stream's log; its PubAcks wait for that one fsync).
    ///
    /// # Errors
    /// `400/10005 no suitable peers for placement` when too few servers are left; `10008`
    /// without a meta quorum.
    pub(crate) fn rescale(
        &self,
        acc: &Arc<AccountJs>,
        cfg: StreamConfig,
    ) -> Result<Value, ApiError> {
        let name = cfg.name.clone();
        let peers = self
            .peers_of(&acc.name, &name)
            .ok_or_else(ApiError::stream_not_found)?;
        let n = usize::try_from(cfg.num_replicas).unwrap_or(usize::MAX);
        let mut next = peers.clone();
        if n > peers.len() {
            let spare = self.spare_servers(&cfg, &peers);
            let spare = self.pick_unique(spare, &peers, n - peers.len());
            if spare.len() < n - peers.len() {
                return Err(super::no_suitable_peers(&cfg));
            }
            next.extend(spare);
        } else {
            let group = self
                .assignments
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(acc.name.clone(), name.clone()))
                .map(|a| a.group);
            let leader = group
                .and_then(|g| self.node.status(g))
                .and_then(|s| s.leader);
            // Keep the leader and this server first; drop from the end.
            next.sort_by_key(|p| {
                let id = node_id(p);
                (Some(id) != leader, *p != self.name)
            });
            next.truncate(n);
        }
        self.propose_meta(&MetaCmd::Replace {
            account: acc.name.clone(),
            config: Box::new(cfg),
            peers: next,
        })?;
        local_info(acc, &name)
    }

    /// The stream's config as this server's replica has it.
    fn current_config(&self, acc: &AccountJs, name: &str) -> Result<StreamConfig, ApiError> {
        let s = acc.streams.get(name).ok_or_else(unavailable)?;
        Ok(s.cfg.clone())
    }
}
