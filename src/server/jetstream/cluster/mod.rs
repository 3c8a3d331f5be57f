//! Replicated JetStream on this node: the node's Raft transport and sealed log, the meta group
//! that holds every replicated stream's assignment, and the stream groups of the replicas
//! this node keeps.
//!
//! - **Who is in the cluster.** Peers that run replicated JetStream say where their Raft
//!   transport listens in their route INFO (`sealstream_raft`). The meta group ([`META`]) is
//!   formed once: by the node whose server name is lowest among those it sees, when it sees
//!   at least as many peers as it has configured routes (so a full-mesh configuration forms
//!   with everyone, and a seed that lists no routes forms alone). Its leader then adds every
//!   peer it sees that is not a member yet, one at a time. A node that already has a meta log
//!   never forms a group again.
//! - **Streams.** A create with `num_replicas` > 1 places the stream on that many members of
//!   the meta group and proposes the assignment (account, config, group id, peers). Applying
//!   it, each chosen node creates its replica — a stream like any other, whose worker runs in
//!   replicated mode ([`replica`](super::replica)) — and hosts the stream's group on the
//!   node's sealed log; the first peer proposes the group's membership. Updates and deletes
//!   go the same way.
//! - **State after a restart.** At start the local copies of replicated streams are erased
//!   (their catalog entries say which group they belong to), the meta group starts from its
//!   snapshot ([`meta_image`]) and applies its log after it (which creates the replicas anew,
//!   empty), and each stream group starts from its own snapshot and log. Which groups this
//!   node keeps in its log is written in a small sealed directory beside the log, so their
//!   records are found when the log is opened. Groups whose old entries keep the log from
//!   shrinking are asked to purge ([`reclaim`]).
//!
//! Keys: record pseudonyms and group keys derive from the store's key-encryption key
//! ([`MetaStore::raft_secrets`](crate::store::meta::MetaStore::raft_secrets)).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{error, info, warn};

use crate::consensus::directory::{group_key, read_directory, write_directory, Directory};
use crate::consensus::machine::{
    Applier, ApplyFuture, ImageFuture, ImageSink, ImageSource, InstallFuture, ReplicatedMachine,
    Snapshots,
};
use crate::consensus::mux::{MuxNode, ProposeError};
use crate::consensus::sealed_log::{LogError, SealedLog};
use crate::consensus::{node_id, timing, Command, GroupId, NodeId};
use crate::crypto::{Key32, SealKey};
use crate::jetstream::api::types::ClusterInfo;
use crate::jetstream::api::{body, info_for_reply, ApiError};
use crate::jetstream::config::{StorageType, StreamConfig};
use crate::jetstream::now_nanos;

use super::cmd::Cmd;
use super::replica::{self, PeerNames, Replica, ReplicaView, StreamApplier};
use super::{lifecycle, stream_worker, AccountJs, JetStream};
use crate::server::route::Cluster;

mod claims;
mod group_rekey;
mod meta_image;
mod moves;
mod promote;
mod reclaim;

use meta_image::MetaImage;

/// The meta group's id.
pub(crate) const META: GroupId = crate::consensus::directory::META;
/// How often membership is looked at (peers seen, the meta group formed, members added).
const MEMBERSHIP_EVERY: Duration = Duration::from_millis(500);
/// How long an API call waits for the meta group, then for this node's replica.
const API_WAIT: Duration = Duration::from_secs(5);

/// One change of the meta group's table.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum MetaCmd {
    /// A replicated stream is placed on `peers` (server names; the first proposes the group's
    /// membership).
    Create {
        account: String,
        config: Box<StreamConfig>,
        group: GroupId,
        peers: Vec<String>,
    },
    /// A replicated stream's config changed (same replicas).
    Update {
        account: String,
        config: Box<StreamConfig>,
    },
    /// A replicated stream is deleted.
    Delete { account: String, name: String },
    /// The meta leader steps down (`$JS.API.META.LEADER.STEPDOWN`): every member computes
    /// the same next leader from the preferred server (or `seed`) and plays its part in the
    /// handover (consensus/handover.rs).
    StepDown {
        preferred: Option<String>,
        seed: i64,
    },
    /// A server leaves the meta group for good (`$JS.API.SERVER.REMOVE`): no member adds it
    /// back when it is seen again.
    RemoveServer { name: String },
    /// A replicated stream's replicas move to `peers` (`STREAM.PEER.REMOVE`, or its replica
    /// count changed to `config.num_replicas`): see [`moves`].
    Replace {
        account: String,
        config: Box<StreamConfig>,
        peers: Vec<String>,
    },
    /// An R1 stream's name and subjects are `server`'s (see [`claims`]).
    Claim {
        account: String,
        config: Box<StreamConfig>,
        server: String,
    },
    /// `server`'s R1 stream is deleted: its claim goes.
    Release {
        account: String,
        name: String,
        server: String,
    },
    /// `origin`'s R1 stream becomes replicated on `peers` (`origin` first) as `group`, which
    /// starts from the stream's state (see [`promote`]).
    Promote {
        account: String,
        config: Box<StreamConfig>,
        group: GroupId,
        peers: Vec<String>,
        origin: String,
    },
}

/// Where a replicated stream lives.
#[derive(Debug, Clone)]
struct Assignment {
    group: GroupId,
    peers: Vec<String>,
    /// The stream's config as last proposed (subjects for overlap checks and names).
    config: StreamConfig,
}

/// Replicated JetStream on this node.
pub(crate) struct ClusterJs {
    node: Arc<MuxNode>,
    log: SealedLog,
    group_root: Key32,
    dir: PathBuf,
    /// The groups this node keeps in its log and its port (persisted in the sealed directory file beside the log: `consensus::directory`).
    directory: Mutex<Directory>,
    me: NodeId,
    name: String,
    cluster_name: String,
    /// Server names by node id: this node, its peers, the meta group's members.
    names: PeerNames,
    /// Peers' Raft addresses as their routes told them.
    peers: Mutex<BTreeMap<NodeId, (String, SocketAddr)>>,
    /// Every server's `server_tags` by name (this one's from its options, peers' from their
    /// route INFO), for placement by tags.
    tags: Mutex<BTreeMap<String, Vec<String>>>,
    assignments: Mutex<BTreeMap<(String, String), Assignment>>,
    /// R1 streams' claims by (account, name) ([`claims`]).
    claims: Mutex<BTreeMap<(String, String), claims::Claim>>,
    /// This server's streams whose claim was refused (reported once).
    refused: Mutex<BTreeSet<(String, String)>>,
    /// Claims of this server whose stream was missing here on the last tick.
    unheld: Mutex<BTreeSet<(String, String)>>,
    /// Servers removed from the meta group (by name), never added back.
    removed: Mutex<BTreeSet<String>>,
    /// Stream groups whose membership this node is changing now (one change at a time).
    moving: Mutex<BTreeSet<GroupId>>,
    /// Stream groups whose key this node is rotating now ([`group_rekey`]).
    rotating: Mutex<BTreeSet<GroupId>>,
    js: Weak<JetStream>,
    runtime: tokio::runtime::Handle,
}

impl ClusterJs {
    /// Names each stream group of a live audit's report by the stream it carries
    /// (`account/stream`, from this node's view of the meta table); a group no assignment
    /// names (a stream deleted meanwhile) stays unnamed.
    pub(crate) fn name_raft_groups(&self, groups: &mut [crate::audit::RaftGroupReport]) {
        let streams: BTreeMap<String, String> = self
            .assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((account, name), a)| {
                (
                    crate::audit::RaftGroupReport::id_of(a.group),
                    format!("{account}/{name}"),
                )
            })
            .collect();
        for g in groups.iter_mut().filter(|g| g.stream.is_none()) {
            g.stream = streams.get(&g.group).cloned();
        }
    }

    /// The runtime the cluster's tasks run on (for callers on threads of their own).
    pub(crate) fn runtime_handle(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Waits until this node's replica of `group` has applied everything committed when the
    /// call began (a read index, no log entry: [`MuxNode::read_barrier`]), within the
    /// proposal deadline.
    ///
    /// # Errors
    /// No leader, no quorum in time, or the group is not here.
    pub(crate) async fn read_barrier(&self, group: GroupId) -> Result<u64, ProposeError> {
        self.node
            .read_barrier(group, replica::PROPOSE_DEADLINE)
            .await
    }

    /// `/jsz`'s `meta_cluster` (spec cluster.md 4.6): the meta group as this node sees it;
    /// the other members' state is accurate on the leader.
    pub(crate) fn meta_cluster(&self) -> Value {
        let view = self.meta_view();
        let info = view.cluster_info();
        let size = self.node.status(META).map_or(0, |s| s.voters.len());
        let mut v = serde_json::json!({
            "name": self.cluster_name,
            "replicas": info.replicas,
            "cluster_size": size,
            "quorum_needed": size / 2 + 1,
            "pending": 0,
        });
        if !info.leader.is_empty() {
            v["peer"] = Value::from(crate::consensus::peer_id(&info.leader));
            v["leader"] = Value::from(info.leader);
        }
        v
    }

    /// The meta group as stream info would show a group.
    fn meta_view(&self) -> ReplicaView {
        ReplicaView {
            group: META,
            group_name: "_meta_".to_owned(),
            me: self.me,
            node: Arc::clone(&self.node),
            names: Arc::clone(&self.names),
            cluster: self.cluster_name.clone(),
            leader_seen: std::sync::Mutex::new(None),
        }
    }

    /// Whether this node leads the meta group now (only the meta leader answers requests
    /// about it, as in nats-server: every server of the cluster hears them).
    pub(crate) fn is_meta_leader(&self) -> bool {
        self.node.status(META).is_some_and(|s| s.is_leader)
    }

    /// `$JS.API.META.LEADER.STEPDOWN` (from the system account), body empty or
    /// `{"placement":{"preferred":"n3"}}` or `{"placement":{"cluster":"C1"}}`: checked here,
    /// then committed to the meta group, whose members all apply it (see
    /// [`MetaCmd::StepDown`]); answered once this node applied it.
    ///
    /// # Errors
    /// nats-server's: `400/10005` for an unknown or already leading preferred server, or a
    /// cluster that is not this one (`no replacement peer connected`); `503/10008` without a
    /// meta leader.
    pub(crate) async fn meta_step_down(&self, payload: &[u8]) -> Result<(), ApiError> {
        let body = crate::jetstream::api::optional_body(payload)?;
        let placement = |key: &str| {
            body.as_ref()
                .and_then(|b| b.pointer(&format!("/placement/{key}")))
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        if placement("cluster").is_some_and(|c| c != self.cluster_name) {
            return Err(ApiError::new(400, 10005, "no replacement peer connected"));
        }
        let preferred = placement("preferred");
        let seed = now_nanos();
        self.meta_view()
            .step_down_target(preferred.as_deref(), seed)?;
        self.propose_meta_async(&MetaCmd::StepDown { preferred, seed })
            .await
    }

    /// `$JS.API.SERVER.REMOVE` (from the system account, on the meta leader), body
    /// `{"peer":"n3"}` (a server name) or `{"peer_id":"BXScrY9i"}`: the server is recorded as
    /// removed in the meta log (so no member adds it back when it is seen again), then taken
    /// out of the meta group's membership; answered once that committed. Its stream replicas
    /// stay members of their groups (as nats-server keeps an R3 stream on two peers).
    ///
    /// # Errors
    /// `400/10044` for a server that is not a member; `503/10008` without a quorum.
    pub(crate) async fn server_remove(&self, payload: &[u8]) -> Result<(), ApiError> {
        let body = crate::jetstream::api::optional_body(payload)?.unwrap_or_default();
        let field = |k: &str| {
            body.get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let (peer, peer_id) = (field("peer"), field("peer_id"));
        let status = self.node.status(META).ok_or_else(unavailable)?;
        let names = self.names.read().unwrap_or_else(|p| p.into_inner()).clone();
        let target = status.voters.iter().find_map(|(id, _)| {
            let name = names.get(id)?;
            let hit = peer == Some(name.as_str())
                || peer_id == Some(crate::consensus::peer_id(name).as_str());
            hit.then(|| (*id, name.clone()))
        });
        let Some((id, name)) = target else {
            return Err(ApiError::new(
                400,
                10044,
                "server is not a member of the cluster",
            ));
        };
        self.propose_meta_async(&MetaCmd::RemoveServer { name })
            .await?;
        self.node.remove_voter(META, id).await.map_err(|e| match e {
            ProposeError::Failed(reason) => ApiError::new(500, 10049, reason),
            _ => unavailable(),
        })
    }

    /// Why this server is not a healthy member of the JetStream cluster (`/healthz`), if
    /// it is not: its Raft log failed a write (a full or failing disk: it acknowledges nothing
    /// more until it is restarted), under repair, or no meta leader known.
    pub(crate) fn health_error(&self) -> Option<String> {
        if let Some(why) = self.log.failure() {
            return Some(format!(
                "JetStream's Raft log failed a write ({why}); this server acknowledges nothing until it is restarted"
            ));
        }
        if self.node.is_repairing() {
            return Some("JetStream is repairing this server's Raft log".to_owned());
        }
        match self.node.status(META) {
            Some(s) if s.leader.is_some() => None,
            _ => Some("JetStream has not established contact with a meta leader".to_owned()),
        }
    }
}

/// Configured routes that are not this node (known once the route listener is bound): how
/// many peers forming the meta group waits for.
fn expected_peers(cluster: &Cluster) -> usize {
    let own_port = cluster.listen.get().map(SocketAddr::port);
    cluster
        .opts
        .routes
        .iter()
        .filter(|r| {
            let port = r
                .rsplit(':')
                .next()
                .and_then(|p| p.trim_end_matches('/').parse().ok());
            port != own_port
        })
        .count()
}

/// A random id for a new stream group (never the meta group's nor the directory key's).
fn new_group_id() -> GroupId {
    let mut group = META;
    while group == META || group == u64::MAX {
        let mut b = [0u8; 8];
        crate::crypto::random_bytes(&mut b);
        group = u64::from_le_bytes(b);
    }
    group
}

/// A group's name as stream info shows it: `S-R<n><F|M>-` and 8 characters of its id.
fn group_name(group: GroupId, cfg: &StreamConfig) -> String {
    let kind = match cfg.storage {
        StorageType::File => 'F',
        StorageType::Memory => 'M',
    };
    let tail = crate::consensus::peer_id(&format!("{group:016x}"));
    format!("S-R{}{kind}-{tail}", cfg.num_replicas)
}

/// Starts replicated JetStream when this server is part of a cluster, has a name and a
/// cluster name, and runs JetStream. `None` (and JetStream stays per node, refusing
/// `num_replicas` > 1 as a single server does) otherwise, or when the Raft log cannot be
/// opened — then the reason is logged.
pub(crate) async fn start(
    js: &Arc<JetStream>,
    cluster: &Arc<Cluster>,
    server_id: &str,
) -> Option<Arc<ClusterJs>> {
    let (cluster_name, dynamic) = cluster.name();
    if js.server_name == server_id || dynamic {
        warn!("JetStream stays per node: replicated streams need `server_name` and `cluster.name` to be set");
        return None;
    }
    let (dir, (names_key, group_root)) = {
        let meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
        (
            meta.root().join(crate::store::meta::RAFT_DIR),
            meta.raft_secrets(),
        )
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        error!(dir = %dir.display(), error = %e, "replicated JetStream is off: no Raft log directory");
        return None;
    }
    let mut directory = match read_directory(&dir, &group_root) {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, "replicated JetStream is off: the Raft group directory is unreadable");
            return None;
        }
    };
    let segment_bytes = js
        .raft_segment_size
        .unwrap_or(crate::consensus::sealed_log::SEGMENT_BYTES);
    let (log, seeds) = match open_log(&dir, &names_key, &group_root, &directory, segment_bytes) {
        Ok(opened) => opened,
        Err(e) => {
            error!(error = %e, "replicated JetStream is off: the Raft log does not open");
            return None;
        }
    };
    let damaged = seeds.is_some();
    if let Some(votes) = seeds {
        if let Err(e) = log.seed_votes(&votes).await {
            error!(error = %e, "replicated JetStream is off: the groups' votes could not be written to the new Raft log");
            return None;
        }
        info!(
            groups = votes.len(),
            "the groups' last votes were kept: the repaired log starts at their terms"
        );
    }
    let me = node_id(&js.server_name);
    let host: std::net::IpAddr = cluster
        .listen
        .get()
        .map(|a| a.ip())
        .or_else(|| cluster.opts.host.parse().ok())
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let config = timing::raft_config(&cluster_name);
    let mut bound = MuxNode::bind(me, SocketAddr::new(host, directory.port), config.clone()).await;
    if bound.is_err() && directory.port != 0 {
        warn!(
            port = directory.port,
            "the Raft transport's port of the last run is taken; peers must learn a new one"
        );
        bound = MuxNode::bind(me, SocketAddr::new(host, 0), config).await;
    }
    let node = match bound {
        Ok(n) => n,
        Err(e) => {
            error!(error = %e, "replicated JetStream is off: the Raft transport could not listen");
            return None;
        }
    };
    if directory.port != node.addr().port() {
        directory.port = node.addr().port();
        if let Err(e) = write_directory(&dir, &group_root, &directory) {
            error!(error = %e, "replicated JetStream is off: the Raft group directory cannot be written");
            return None;
        }
    }
    let _ = cluster.raft_port.set(node.addr().port());
    let names: PeerNames = Arc::new(RwLock::new(HashMap::from([(me, js.server_name.clone())])));
    let cj = Arc::new(ClusterJs {
        node: Arc::clone(&node),
        log: log.clone(),
        group_root,
        dir,
        directory: Mutex::new(directory),
        me,
        name: js.server_name.clone(),
        cluster_name,
        names,
        peers: Mutex::new(BTreeMap::new()),
        tags: Mutex::new(BTreeMap::from([(
            js.server_name.clone(),
            cluster.server_tags.get().cloned().unwrap_or_default(),
        )])),
        assignments: Mutex::new(BTreeMap::new()),
        claims: Mutex::new(BTreeMap::new()),
        refused: Mutex::new(BTreeSet::new()),
        unheld: Mutex::new(BTreeSet::new()),
        removed: Mutex::new(BTreeSet::new()),
        moving: Mutex::new(BTreeSet::new()),
        rotating: Mutex::new(BTreeSet::new()),
        js: Arc::downgrade(js),
        runtime: tokio::runtime::Handle::current(),
    });
    if damaged {
        // Every group starts empty and casts no vote until it has caught up with a leader.
        node.begin_repair(META);
    }
    // Before the meta log is applied: streams seeded into a group keep from taking writes.
    cj.resume_promotions();
    let meta_log = log.group(META, group_key(&cj.group_root, META));
    let applier = Arc::new(MetaApplier {
        cj: Arc::downgrade(&cj),
    });
    let snapshots = Snapshots::new(
        log.snapshot_file(META, group_key(&cj.group_root, META)),
        Arc::downgrade(&node),
        META,
    );
    let machine = ReplicatedMachine::new(applier).with_snapshots(snapshots);
    if let Err(e) = node.add_group_on(META, meta_log, machine, None).await {
        error!(error = %e, "replicated JetStream is off: the meta group did not start");
        return None;
    }
    info!(raft = %node.addr(), "replicated JetStream: Raft transport listening");
    tokio::spawn(membership(Arc::clone(&cj), Arc::clone(cluster)));
    cj.finish_group_rotations();
    Some(cj)
}

/// Opens this node's Raft log for the groups of its directory. A log that fails
/// authentication (a flipped bit, a record that is not a torn tail) is set aside, still
/// sealed, and a new empty one is opened: the node then starts under repair
/// ([`crate::consensus::repair`]) — the `bool`.
fn open_log(
    dir: &Path,
    names_key: &Key32,
    group_root: &Key32,
    directory: &Directory,
    segment_bytes: u64,
) -> Result<(SealedLog, Option<crate::consensus::extent::Votes>), LogError> {
    let open = || {
        SealedLog::open_hosted(
            dir,
            Key32::new(*names_key.expose()),
            directory.log_groups(group_root),
            segment_bytes,
        )
    };
    match open() {
        Ok(log) => Ok((log, None)),
        Err(e @ LogError::Corrupt { .. }) => {
            error!(error = %e, "the Raft log failed authentication: this node needs repair. Its log is set aside (raft/damaged/, still sealed) and rebuilt from its peers; until each group has caught up with its leader it casts no vote");
            // The groups' last votes, kept beside the log: the new log starts with their
            // terms, so a deposed leader's appends are refused.
            let votes = SealedLog::recorded_votes(dir, names_key);
            SealedLog::set_aside_damaged(dir)?;
            let log = open()?;
            Ok((log, Some(votes)))
        }
        Err(e) => Err(e),
    }
}

/// Watches who is in the cluster: learns peers from routes, forms the meta group once, and
/// (as its leader) adds peers that are not members yet.
async fn membership(cj: Arc<ClusterJs>, cluster: Arc<Cluster>) {
    let mut formed_logged = false;
    loop {
        tokio::time::sleep(MEMBERSHIP_EVERY).await;
        if cj.js.upgrade().is_none_or(|js| js.is_stopping()) {
            return;
        }
        let seen = cluster.raft_peers();
        cj.tags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(cluster.peer_tags());
        {
            let mut peers = cj.peers.lock().unwrap_or_else(|p| p.into_inner());
            let mut names = cj.names.write().unwrap_or_else(|p| p.into_inner());
            for (name, addr) in &seen {
                let id = node_id(name);
                peers.insert(id, (name.clone(), *addr));
                names.insert(id, name.clone());
                cj.node.learn_address(id, addr.to_string());
            }
        }
        let Some(status) = cj.node.status(META) else {
            return;
        };
        if status.voters.is_empty() {
            let lowest = seen.iter().all(|(n, _)| cj.name < *n);
            if lowest && seen.len() >= expected_peers(&cluster) {
                let mut members: Vec<(NodeId, String)> = vec![(cj.me, cj.node.addr().to_string())];
                members.extend(seen.iter().map(|(n, a)| (node_id(n), a.to_string())));
                info!(members = members.len(), "forming the JetStream meta group");
                if let Err(e) = cj.node.initialize(META, &members).await {
                    warn!(error = %e, "the meta group could not be formed; trying again");
                }
            }
            continue;
        }
        if !formed_logged {
            formed_logged = true;
            info!(members = status.voters.len(), "JetStream meta group joined");
        }
        cj.reconcile_groups();
        cj.reclaim_log();
        if status.leader.is_some() {
            cj.reconcile_claims().await;
        }
        if status.is_leader {
            let removed = cj.removed.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let missing = seen.iter().find(|(n, _)| {
                !removed.contains(n) && !status.voters.iter().any(|(id, _)| *id == node_id(n))
            });
            if let Some((name, addr)) = missing {
                info!(peer = %name, "adding a server to the JetStream meta group");
                if let Err(e) = cj
                    .node
                    .add_voter(META, node_id(name), &addr.to_string())
                    .await
                {
                    warn!(peer = %name, error = %e, "could not add the server to the meta group yet");
                }
            }
        }
    }
}

/// Applies the meta group's committed changes on this node.
struct MetaApplier {
    cj: Weak<ClusterJs>,
}

impl Applier for MetaApplier {
    fn apply(&self, _index: u64, commands: Vec<bytes::Bytes>) -> ApplyFuture {
        let cj = self.cj.upgrade();
        Box::pin(async move {
            let Some(cj) = cj else { return };
            for c in commands {
                match serde_json::from_slice::<MetaCmd>(&c) {
                    Ok(cmd) => cj.apply(cmd).await,
                    Err(e) => error!(error = %e, "a meta group entry did not decode; skipped"),
                }
            }
        })
    }

    fn image(&self, mut sink: ImageSink) -> ImageFuture {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The assignment table: small (names and configs, no messages), written at once.
        let image = match self.cj.upgrade() {
            Some(cj) => cj.meta_image().and_then(|bytes| {
                std::io::Write::write_all(&mut sink, &bytes).map_err(|e| e.to_string())
            }),
            None => Err("replicated JetStream is stopping".to_owned()),
        };
        let _ = tx.send(image.map(|()| sink));
        rx
    }

    fn install(&self, mut source: ImageSource) -> InstallFuture {
        let cj = self.cj.upgrade();
        Box::pin(async move {
            let cj = cj.ok_or("replicated JetStream is stopping")?;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut source, &mut bytes).map_err(|e| e.to_string())?;
            let image = MetaImage::decode(&bytes)?;
            cj.install_meta_image(image).await;
            Ok(())
        })
    }
}

impl ClusterJs {
    fn js(&self) -> Option<Arc<JetStream>> {
        self.js.upgrade()
    }

    async fn apply(self: &Arc<Self>, cmd: MetaCmd) {
        match cmd {
            MetaCmd::Create {
                account,
                config,
                group,
                peers,
            } => {
                let key = (account.clone(), config.name.clone());
                if self
                    .claims
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(&key)
                {
                    warn!(account = %account, stream = %config.name, "a replicated stream's create was refused: an R1 stream holds the name");
                    return;
                }
                self.assignments
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(
                        key,
                        Assignment {
                            group,
                            peers: peers.clone(),
                            config: (*config).clone(),
                        },
                    );
                if peers.contains(&self.name) {
                    self.create_replica(&account, *config, group, &peers, true)
                        .await;
                }
            }
            MetaCmd::Update { account, config } => {
                if let Some(a) = self
                    .assignments
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(&(account.clone(), config.name.clone()))
                {
                    a.config = (*config).clone();
                }
                if self.is_peer(&account, &config.name) {
                    self.update_replica(account, *config).await;
                }
            }
            MetaCmd::Delete { account, name } => {
                let gone = self
                    .assignments
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&(account.clone(), name.clone()));
                let Some(a) = gone else { return };
                if a.peers.contains(&self.name) {
                    self.drop_replica(account, name, a.group).await;
                }
            }
            MetaCmd::Replace {
                account,
                config,
                peers,
            } => self.apply_replace(account, config, peers).await,
            MetaCmd::Claim {
                account,
                config,
                server,
            } => self.apply_claim(account, *config, server),
            MetaCmd::Release {
                account,
                name,
                server,
            } => self.apply_release(account, name, &server),
            MetaCmd::Promote {
                account,
                config,
                group,
                peers,
                origin,
            } => {
                self.apply_promote(account, *config, group, peers, &origin)
                    .await
            }
            MetaCmd::RemoveServer { name } => {
                info!(server = %name, "server removed from the JetStream meta group");
                self.removed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name);
            }
            MetaCmd::StepDown { preferred, seed } => {
                match self
                    .meta_view()
                    .step_down_target(preferred.as_deref(), seed)
                {
                    Ok(next) => self.node.hand_over(META, next),
                    Err(e) => {
                        warn!(error = %e.to_json(), "a meta leader stepdown found no next leader")
                    }
                }
            }
        }
    }

    /// The cluster's name (`placement.cluster` must be it).
    pub(crate) fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    /// Up to `n` of `ordered` (in order) whose values of the `unique_tag` prefix differ from
    /// each other and from those of `taken`; servers without such a tag are left out. Without
    /// a `unique_tag`, simply the first `n`.
    pub(crate) fn pick_unique(
        &self,
        ordered: Vec<String>,
        taken: &[String],
        n: usize,
    ) -> Vec<String> {
        let Some(prefix) = self.js.upgrade().and_then(|js| js.unique_tag.clone()) else {
            return ordered.into_iter().take(n).collect();
        };
        let prefix = format!("{prefix}:");
        let tags = self.tags.lock().unwrap_or_else(|p| p.into_inner());
        let value = |name: &str| {
            tags.get(name).and_then(|t| {
                t.iter()
                    .find(|t| {
                        t.len() > prefix.len()
                            && t.get(..prefix.len())
                                .is_some_and(|h| h.eq_ignore_ascii_case(&prefix))
                    })
                    .map(|t| t.to_lowercase())
            })
        };
        let mut used: Vec<String> = taken.iter().filter_map(|p| value(p)).collect();
        let mut out = Vec::new();
        for name in ordered {
            if out.len() == n {
                break;
            }
            if let Some(v) = value(&name) {
                if !used.contains(&v) {
                    used.push(v);
                    out.push(name);
                }
            }
        }
        out
    }

    /// Whether server `name` carries every tag `cfg`'s placement asks for.
    pub(crate) fn fits(&self, name: &str, cfg: &StreamConfig) -> bool {
        let Some(want) = cfg.placement.as_ref().filter(|p| !p.tags.is_empty()) else {
            return true;
        };
        let tags = self.tags.lock().unwrap_or_else(|p| p.into_inner());
        let has = tags.get(name).map(Vec::as_slice).unwrap_or_default();
        want.tags
            .iter()
            .all(|t| has.iter().any(|h| h.eq_ignore_ascii_case(t)))
    }

    fn is_peer(&self, account: &str, name: &str) -> bool {
        self.assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(account.to_owned(), name.to_owned()))
            .is_some_and(|a| a.peers.contains(&self.name))
    }

    /// Keeps `group` on this node (a new one with a random key of its own, written to the
    /// directory before any record is sealed with it); returns where its records go.
    fn keep_group(&self, group: GroupId) -> (GroupId, SealKey) {
        let mut d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
        if d.groups.insert(group) {
            let mut key = [0u8; 32];
            crate::crypto::random_bytes(&mut key);
            d.keys.insert(group, key);
            if let Err(e) = write_directory(&self.dir, &self.group_root, &d) {
                error!(error = %e, "could not write the Raft group directory");
            }
        }
        d.slot(&self.group_root, group)
    }

    /// Where `group`'s records are in the node's log.
    fn group_slot(&self, group: GroupId) -> GroupId {
        let d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
        d.slot(&self.group_root, group).0
    }

    /// Stops keeping `group`: its key leaves the directory (durably), so its records open
    /// for nobody.
    fn forget_group(&self, group: GroupId) {
        let mut d = self.directory.lock().unwrap_or_else(|p| p.into_inner());
        let keyed = d.keys.remove(&group).is_some() | d.rotated.remove(&group).is_some();
        if d.groups.remove(&group) || keyed {
            if let Err(e) = write_directory(&self.dir, &self.group_root, &d) {
                error!(error = %e, "could not write the Raft group directory");
            }
        }
    }

    /// Gives this node's replica of a stream its new config.
    async fn update_replica(&self, account: String, config: StreamConfig) {
        let Some(js) = self.js() else { return };
        let name = config.name.clone();
        let r = tokio::task::spawn_blocking(move || {
            let acc = js
                .account(&account)
                .ok_or_else(ApiError::stream_not_found)?;
            // A stream of that name that is no replica is not this entry's (see drop_replica).
            if acc.streams.get(&name).is_some_and(|s| s.group.is_none()) {
                return Ok(Value::Null);
            }
            lifecycle::update(&acc, &name, config)
        })
        .await;
        if let Ok(Err(e)) = r {
            warn!(error = %e.to_json(), "a replica did not take a stream update");
        }
    }

    /// Erases this node's replica of a stream and stops hosting its group (the stream was
    /// deleted, or its replica moved away from this node).
    async fn drop_replica(&self, account: String, name: String, group: GroupId) {
        if let Some(js) = self.js() {
            let _ = tokio::task::spawn_blocking(move || {
                let Some(acc) = js.account(&account) else {
                    return;
                };
                // Only the group's replica: a stream of the same name that is not (an R1
                // stream created after this group's stream was deleted, met while the meta
                // log is applied again at a start) is left alone.
                if acc
                    .streams
                    .get(&name)
                    .is_some_and(|s| s.group == Some(group))
                {
                    let _ = lifecycle::delete(&js, &acc, &name);
                }
            })
            .await;
        }
        self.node.remove_group(group).await;
        self.log.erase_group(self.group_slot(group));
        self.forget_group(group);
    }

    /// Creates this node's replica of a stream and hosts its group; with `form`, the first
    /// of `peers` proposes the group's first membership (a replica added later is made a
    /// member by the group's leader instead: [`moves`]).
    async fn create_replica(
        self: &Arc<Self>,
        account: &str,
        cfg: StreamConfig,
        group: GroupId,
        peers: &[String],
        form: bool,
    ) {
        let Some(js) = self.js() else { return };
        let Some(acc) = js.account(account) else {
            warn!(account, stream = %cfg.name, "a replica's account has no JetStream here; not created");
            return;
        };
        if acc.streams.get(&cfg.name).is_some() {
            return;
        }
        let tx = Arc::new(OnceLock::new());
        let view = Arc::new(ReplicaView {
            group,
            group_name: group_name(group, &cfg),
            me: self.me,
            node: Arc::clone(&self.node),
            names: Arc::clone(&self.names),
            cluster: self.cluster_name.clone(),
            leader_seen: std::sync::Mutex::new(None),
        });
        let replica = Replica {
            group,
            me: self.me,
            node: Arc::clone(&self.node),
            view,
            runtime: self.runtime.clone(),
            tx: Arc::clone(&tx),
            pending: Vec::new(),
            pending_intake: 0,
            in_flight: None,
        };
        let name = cfg.name.clone();
        let created = tokio::task::spawn_blocking(move || {
            stream_worker::create_replica(&js, &acc, cfg, Some(replica))
        })
        .await;
        match created {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                error!(stream = %name, error = %e.to_json(), "this node's replica could not be created");
                return;
            }
            Err(_) => return,
        }
        let (slot, key) = self.keep_group(group);
        // The log first: the snapshot file then shares the log's keys for the group (and
        // follows a rotation of them: `group_rekey`).
        let log = self.log.group(slot, key.duplicate());
        let snapshots = Snapshots::new(
            self.log.snapshot_file(slot, key),
            Arc::downgrade(&self.node),
            group,
        );
        let machine = ReplicatedMachine::new(Arc::new(StreamApplier {
            tx: Arc::clone(&tx),
        }))
        .with_snapshots(snapshots);
        if let Err(e) = self.node.add_group_on(group, log, machine, None).await {
            error!(stream = %name, error = %e, "the stream's group did not start here");
            return;
        }
        replica::watch_leadership(&self.node, group, Arc::clone(&tx));
        if form && peers.first() == Some(&self.name) {
            let members = self.members_of(peers);
            if members.len() == peers.len() {
                if let Err(e) = self.node.initialize(group, &members).await {
                    warn!(stream = %name, error = %e, "the stream's group could not be formed");
                }
            } else {
                warn!(stream = %name, "the stream's group has peers whose address is unknown");
            }
        }
    }

    /// The node ids and Raft addresses of `peers` (server names), as the meta group knows its
    /// members.
    fn members_of(&self, peers: &[String]) -> Vec<(NodeId, String)> {
        let voters = self.node.status(META).map(|s| s.voters).unwrap_or_default();
        peers
            .iter()
            .filter_map(|p| {
                let id = node_id(p);
                voters.iter().find(|(v, _)| *v == id).cloned()
            })
            .collect()
    }

    /// Proposes a change of the meta group's table and waits until this node has applied it
    /// (its own replica created, updated or deleted by then).
    fn propose_meta(&self, cmd: &MetaCmd) -> Result<(), ApiError> {
        self.runtime.block_on(self.propose_meta_async(cmd))
    }

    /// [`propose_meta`](Self::propose_meta) for callers on the runtime.
    async fn propose_meta_async(&self, cmd: &MetaCmd) -> Result<(), ApiError> {
        let bytes =
            serde_json::to_vec(cmd).map_err(|e| ApiError::new(500, 10049, e.to_string()))?;
        let index = self
            .node
            .propose(META, Command(bytes.into()), API_WAIT)
            .await
            .map_err(|e| match e {
                ProposeError::Failed(reason) => ApiError::new(500, 10049, reason),
                _ => unavailable(),
            })?;
        if self.node.wait_applied(META, index, API_WAIT).await {
            Ok(())
        } else {
            Err(unavailable())
        }
    }

    /// `STREAM.CREATE` with `num_replicas` > 1 (validated and checked against the account's
    /// limits already): placed on that many meta members, then this node's replica answers.
    ///
    /// # Errors
    /// 10005 without enough members, 10008 without a meta quorum, 10058 for a name in use.
    pub(crate) fn create_stream(
        &self,
        acc: &Arc<AccountJs>,
        cfg: StreamConfig,
    ) -> Result<Value, ApiError> {
        if self
            .assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&(acc.name.clone(), cfg.name.clone()))
        {
            return Err(ApiError::stream_name_in_use());
        }
        if let Some(e) = self.conflict(&acc.name, &cfg, None) {
            return Err(e);
        }
        let status = self.node.status(META).unwrap_or_default();
        if status.leader.is_none() {
            return Err(unavailable());
        }
        let n = usize::try_from(cfg.num_replicas).unwrap_or(usize::MAX);
        if status.voters.len() < n {
            return Err(no_suitable_peers(&cfg));
        }
        // This node first when it is a member (its clients' streams answer here), then the
        // others in an order that spreads streams' first peers around.
        let names = self.names.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut candidates: Vec<String> = status
            .voters
            .iter()
            .filter_map(|(id, _)| names.get(id).cloned())
            .filter(|name| self.fits(name, &cfg))
            .collect();
        if candidates.len() < n {
            return Err(no_suitable_peers(&cfg));
        }
        let spin = crate::consensus::node_id(&cfg.name) as usize % candidates.len();
        candidates.rotate_left(spin);
        if let Some(i) = candidates.iter().position(|c| *c == self.name) {
            let me = candidates.remove(i);
            candidates.insert(0, me);
        }
        let candidates = self.pick_unique(candidates, &[], n);
        if candidates.len() < n {
            return Err(no_suitable_peers(&cfg));
        }
        let group = new_group_id();
        let name = cfg.name.clone();
        let here = candidates.contains(&self.name);
        let cmd = MetaCmd::Create {
            account: acc.name.clone(),
            config: Box::new(cfg.clone()),
            group,
            peers: candidates,
        };
        self.propose_meta(&cmd)?;
        info!(account = %acc.name, stream = %name, group = %group_name(group, &cfg), "replicated stream created");
        if !here {
            // Not a replica here: answer from the config (the replicas hold the state).
            let raft_group = group_name(group, &cfg);
            let mut info = crate::jetstream::api::types::StreamInfo {
                config: cfg,
                created: crate::timefmt::rfc3339_nanos(now_nanos()),
                ..Default::default()
            };
            info_for_reply(&mut info, true);
            info.cluster = Some(ClusterInfo {
                name: Some(self.cluster_name.clone()),
                raft_group: Some(raft_group),
                ..ClusterInfo::default()
            });
            return Ok(body(&info));
        }
        self.replica_answer(acc, &name, group)
    }

    /// The answer to a call that made this node's replica of a stream (the meta entry is
    /// applied here): its info, once its group has a leader (or the wait is over).
    fn replica_answer(
        &self,
        acc: &Arc<AccountJs>,
        name: &str,
        group: GroupId,
    ) -> Result<Value, ApiError> {
        let s = acc
            .streams
            .get(name)
            .ok_or_else(|| ApiError::new(500, 10049, "this node's replica was not created"))?;
        let _ = self
            .runtime
            .block_on(self.node.wait_leader(group, API_WAIT));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let _ = s.tx.send(Cmd::Info(tx));
        let mut info = rx
            .recv_timeout(API_WAIT)
            .map_err(|_| ApiError::new(500, 10049, "stream did not answer"))?;
        // A replicated stream's create answer carries its group, as nats-server's does
        // (clients read `cluster` off it: async-nats's create_stream_with_replicas).
        let cluster = info.cluster.take();
        info_for_reply(&mut info, true);
        info.cluster = cluster;
        Ok(body(&info))
    }

    /// `STREAM.UPDATE` of a replicated stream (checked already): every replica applies it.
    ///
    /// # Errors
    /// 10008 without a meta quorum; the local replica's refusal.
    pub(crate) fn update_stream(
        &self,
        acc: &Arc<AccountJs>,
        cfg: StreamConfig,
    ) -> Result<Value, ApiError> {
        let name = cfg.name.clone();
        let cmd = MetaCmd::Update {
            account: acc.name.clone(),
            config: Box::new(cfg.clone()),
        };
        self.propose_meta(&cmd)?;
        local_info(acc, &name)
    }

    /// `STREAM.DELETE` of a replicated stream: every replica erases its copy.
    ///
    /// # Errors
    /// 10008 without a meta quorum.
    pub(crate) fn delete_stream(
        &self,
        acc: &Arc<AccountJs>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let cmd = MetaCmd::Delete {
            account: acc.name.clone(),
            name: name.to_owned(),
        };
        self.propose_meta(&cmd)?;
        Ok(serde_json::json!({"success": true}))
    }
}

/// A replicated stream's info as this server's replica answers it (after a change it
/// applied), shaped as an API reply's body.
fn local_info(acc: &AccountJs, name: &str) -> Result<Value, ApiError> {
    let s = acc
        .streams
        .get(name)
        .ok_or_else(ApiError::stream_not_found)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let _ = s.tx.send(Cmd::Info(tx));
    let mut info = rx
        .recv_timeout(API_WAIT)
        .map_err(|_| ApiError::new(500, 10049, "stream did not answer"))?;
    info_for_reply(&mut info, false);
    Ok(body(&info))
}

/// nats-server's answer when too few servers meet a stream's placement (spec cluster.md 4.3):
/// the tags asked for are named, sorted, when there were any.
pub(crate) fn no_suitable_peers(cfg: &StreamConfig) -> ApiError {
    match cfg.placement.as_ref().filter(|p| !p.tags.is_empty()) {
        Some(p) => {
            let mut tags: Vec<String> = p.tags.iter().map(|t| format!("'{t}'")).collect();
            tags.sort();
            ApiError::new(
                400,
                10005,
                format!(
                    "no suitable peers for placement, tags not matched [{}]",
                    tags.join(", ")
                ),
            )
        }
        None => ApiError::new(400, 10005, "no suitable peers for placement"),
    }
}

fn unavailable() -> ApiError {
    ApiError::new(503, 10008, "JetStream system temporarily unavailable")
}
