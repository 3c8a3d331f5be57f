//! One replicated stream's side of Raft: what its worker proposes, and how committed entries
//! come back to it.
//!
//! The stream's engine is a deterministic state machine, so replication replicates its
//! *inputs*: a [`Round`] is what one replica's worker took from its queue in one round
//! (publishes, stream-scoped API calls, acks, flow-control replies) plus the time it took
//! them. The worker does not run them; it proposes the round to the stream's group (at most
//! one proposal in flight per replica, so everything that arrives meanwhile becomes the next
//! round — the group commit of a replicated stream). When an entry commits, every replica's
//! worker runs the same round, at the round's time, in log order: every replica assigns the
//! same sequences and decides dedupe, expected-sequence checks, limits and acks alike. Only
//! the replica whose round it was (its `origin`) routes what the round says — pub-acks, API
//! answers, deliveries —, and only after a quorum has the entry on disk. Timers (redelivery,
//! expiry, heartbeats) run on the leader, which proposes an empty round when one is due.
//!
//! Reads that change nothing (stream and consumer info, names and lists, `DIRECT.GET`) are
//! answered by the replica that received them, from its own state; `MSG.GET` too, but only
//! once that replica has applied the group's read index (linearizable, no log entry).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use crate::consensus::machine::{
    Applier, ApplyFuture, ImageFuture, ImageSink, ImageSource, InstallFuture,
};
use crate::consensus::mux::{MuxNode, ProposeError};
use crate::consensus::{Command, GroupId, NodeId};

use crate::jetstream::api::types::{ClusterInfo, PeerInfo};
use crate::jetstream::api::{ApiCall, ApiError};

use super::cmd::Cmd;
use super::round::{read_only, Input, Round};
use super::shard::WeakStreamTx;

/// How long a proposal may take before its senders hear "not acknowledged" (the 3 s
/// bound on quorum loss).
pub(crate) const PROPOSE_DEADLINE: Duration = Duration::from_secs(3);

/// The replicated input a command carries, or the command back when it is local.
pub(crate) fn input_of(cmd: Cmd) -> Result<Input, Box<Cmd>> {
    match cmd {
        Cmd::Publish(m) => Ok(Input::Publish(m)),
        Cmd::Api {
            call,
            reply,
            headers,
            payload,
        } if !read_only(&call) => Ok(Input::Api {
            payload: named_by_proposer(&call, payload),
            call,
            reply,
            headers,
        }),
        Cmd::Ack {
            subject,
            reply,
            payload,
        } => Ok(Input::Ack {
            subject,
            reply,
            payload,
        }),
        Cmd::FlowControl { subject } => Ok(Input::FlowControl { subject }),
        Cmd::Sourced(b) => Ok(Input::Sourced(b)),
        other => Err(Box::new(other)),
    }
}

/// A consumer create that leaves the name to the server gets it here, from the replica that
/// proposes it: every replica then creates the consumer under that one name. (Each replica
/// drew its own before — an ephemeral consumer of a replicated stream had another name on
/// every replica: acks and info by name reached only the proposer's, and after a failover the
/// consumer the client knew was gone.) Anything but a create without a name passes unchanged.
fn named_by_proposer(call: &ApiCall, payload: bytes::Bytes) -> bytes::Bytes {
    if !matches!(call, ApiCall::ConsumerCreate { consumer: None, .. }) {
        return payload;
    }
    let Ok(mut request) = serde_json::from_slice::<serde_json::Value>(&payload) else {
        return payload;
    };
    let Some(cfg) = request.get_mut("config").and_then(|c| c.as_object_mut()) else {
        return payload;
    };
    let named = |k: &str| cfg.get(k).is_some_and(|v| !v.is_null());
    if named("name") || named("durable_name") {
        return payload;
    }
    cfg.insert(
        "name".to_owned(),
        serde_json::Value::String(crate::jetstream::config::consumer::generate_name()),
    );
    serde_json::to_vec(&request).map_or(payload, bytes::Bytes::from)
}

/// The command an applied input runs as.
pub(crate) fn cmd_of(input: Input) -> Cmd {
    match input {
        Input::Publish(m) => Cmd::Publish(m),
        Input::Api {
            call,
            reply,
            headers,
            payload,
        } => Cmd::Api {
            call,
            reply,
            headers,
            payload,
        },
        Input::Ack {
            subject,
            reply,
            payload,
        } => Cmd::Ack {
            subject,
            reply,
            payload,
        },
        Input::FlowControl { subject } => Cmd::FlowControl { subject },
        Input::Sourced(b) => Cmd::Sourced(b),
    }
}

/// Tells the stream's worker each time this node becomes its group's leader (for the
/// `LEADER_ELECTED` advisories) and while, leading, it has no quorum (`QUORUM_LOST`).
pub(crate) fn watch_leadership(node: &MuxNode, group: GroupId, tx: Arc<OnceLock<WeakStreamTx>>) {
    let lost = Arc::clone(&tx);
    let tell = |tx: &OnceLock<WeakStreamTx>, cmd: Cmd| {
        if let Some(tx) = tx.get().and_then(WeakStreamTx::upgrade) {
            let _ = tx.send(cmd);
        }
    };
    node.on_leadership(
        group,
        move || tell(&tx, Cmd::LeaderElected),
        move || tell(&lost, Cmd::QuorumLost),
    );
}

/// Hands a group's committed rounds to its stream's worker and waits until it ran them.
pub(crate) struct StreamApplier {
    /// The stream's queue (set once the stream is registered).
    pub(crate) tx: Arc<OnceLock<WeakStreamTx>>,
}

impl StreamApplier {
    fn worker(&self) -> Option<super::shard::StreamTx> {
        self.tx.get().and_then(WeakStreamTx::upgrade)
    }
}

impl Applier for StreamApplier {
    fn apply(&self, _index: u64, commands: Vec<bytes::Bytes>) -> ApplyFuture {
        let tx = self.tx.get().and_then(WeakStreamTx::upgrade);
        Box::pin(async move {
            let Some(tx) = tx else { return };
            for c in commands {
                let Some(round) = Round::decode(&c) else {
                    tracing::error!("a replicated stream entry did not decode; skipped");
                    continue;
                };
                let (done, applied) = tokio::sync::oneshot::channel();
                if tx.send(Cmd::Apply(Box::new(round), done)).is_err() {
                    return;
                }
                // The worker answers once the round ran (or drops the sender when it stops).
                let _ = applied.await;
            }
        })
    }

    fn image(&self, sink: ImageSink) -> ImageFuture {
        let (done, image) = tokio::sync::oneshot::channel();
        // Queued now, behind every round handed over before: the image is of those.
        match self.worker() {
            // Refused, the command's sender is dropped: the builder hears the worker stopped.
            Some(tx) => {
                let _ = tx.send(Cmd::TakeImage(sink, done));
            }
            None => {
                let _ = done.send(Err("the stream's worker is gone".to_owned()));
            }
        }
        image
    }

    fn install(&self, source: ImageSource) -> InstallFuture {
        let tx = self.worker();
        Box::pin(async move {
            let tx = tx.ok_or_else(|| "the stream's worker is gone".to_owned())?;
            let (done, installed) = tokio::sync::oneshot::channel();
            if tx.send(Cmd::InstallImage(source, done)).is_err() {
                return Err("the stream's worker is gone".to_owned());
            }
            installed
                .await
                .map_err(|_| "the stream's worker stopped".to_owned())?
        })
    }
}

/// Server names of the cluster's nodes by node id (filled by the cluster layer).
pub(crate) type PeerNames = Arc<RwLock<HashMap<NodeId, String>>>;

/// What anyone answering about a replicated stream needs to know of its group.
pub(crate) struct ReplicaView {
    /// The stream's group.
    pub(crate) group: GroupId,
    /// Its name as info shows it (`S-R3F-…`).
    pub(crate) group_name: String,
    /// This node.
    pub(crate) me: NodeId,
    pub(crate) node: Arc<MuxNode>,
    pub(crate) names: PeerNames,
    /// The cluster's name.
    pub(crate) cluster: String,
    /// The leader this server last saw and since when (unix nanos): `leader_since`.
    pub(crate) leader_seen: std::sync::Mutex<Option<(NodeId, i64)>>,
}

/// A replica the leader has not heard from for this long is shown `offline` (eight
/// heartbeats; elections take 1–2 s).
const OFFLINE_AFTER: Duration = Duration::from_secs(2);

impl ReplicaView {
    /// Whether this node leads the stream's group now.
    pub(crate) fn is_leader(&self) -> bool {
        self.node.status(self.group).is_some_and(|s| s.is_leader)
    }

    /// On the group's leader, the servers that keep a replica (voters and members catching
    /// up), which deliver a committed round to their own subscribers; `None` elsewhere.
    pub(crate) fn members_if_leader(&self) -> Option<Vec<String>> {
        let status = self.node.status(self.group).filter(|s| s.is_leader)?;
        let mut ids: Vec<NodeId> = status.voters.iter().map(|(id, _)| *id).collect();
        ids.extend(status.matched.iter().map(|(id, _)| *id));
        ids.sort_unstable();
        ids.dedup();
        Some(ids.into_iter().map(|id| self.name_of(id)).collect())
    }

    fn name_of(&self, id: NodeId) -> String {
        self.names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("{id:016x}"))
    }

    /// The `cluster` block of the stream's info as this node sees the group (spec cluster.md
    /// 4.5): the leader and the other replicas; accurate lag only on the leader.
    pub(crate) fn cluster_info(&self) -> ClusterInfo {
        let mut info = ClusterInfo {
            name: Some(self.cluster.clone()),
            raft_group: Some(self.group_name.clone()),
            ..ClusterInfo::default()
        };
        let Some(status) = self.node.status(self.group) else {
            return info;
        };
        let leader = status.leader;
        if let Some(l) = leader {
            info.leader = self.name_of(l);
            let mut seen = self.leader_seen.lock().unwrap_or_else(|p| p.into_inner());
            let since = match *seen {
                Some((was, at)) if was == l => at,
                _ => {
                    let at = crate::jetstream::now_nanos();
                    *seen = Some((l, at));
                    at
                }
            };
            info.leader_since = Some(crate::timefmt::rfc3339_nanos(since));
        }
        info.system_account = true;
        info.traffic_account = Some("$SYS".to_owned());
        let last = status.last_log_index.unwrap_or(0);
        for (id, addr) in &status.voters {
            if Some(*id) == leader {
                continue;
            }
            let name = self.name_of(*id);
            let matched = status
                .matched
                .iter()
                .find(|(m, _)| m == id)
                .map(|(_, i)| *i);
            let silence = self.node.silence(addr);
            let heard_lately = silence.is_some_and(|d| d < OFFLINE_AFTER);
            let (current, lag, offline) = match (status.is_leader, matched) {
                (true, Some(Some(i))) => {
                    let lag = last.saturating_sub(i);
                    (lag == 0 && heard_lately, lag, !heard_lately)
                }
                (true, _) => (false, last, !heard_lately),
                // A follower knows only itself.
                (false, _) => (*id == self.me, 0, false),
            };
            info.replicas.push(PeerInfo {
                peer: crate::consensus::peer_id(&name),
                name,
                current,
                offline,
                active: silence.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
                lag,
            });
        }
        info
    }
}

impl ReplicaView {
    /// Who is to lead after a stepdown applied with this `preferred` server (a name or a peer
    /// id) and round time `seed`: the same answer on every replica that sees the same leader.
    /// Without a preference, one of the other voters, chosen by `seed`.
    ///
    /// # Errors
    /// nats-server's `400/10005` answers: an unknown preferred server, one that already leads,
    /// or no other voter.
    pub(crate) fn step_down_target(
        &self,
        preferred: Option<&str>,
        seed: i64,
    ) -> Result<NodeId, ApiError> {
        let status = self.node.status(self.group).ok_or_else(unavailable)?;
        let leader = status.leader.ok_or_else(unavailable)?;
        if let Some(p) = preferred {
            let id = status
                .voters
                .iter()
                .map(|(id, _)| *id)
                .find(|id| {
                    let name = self.name_of(*id);
                    name == p || crate::consensus::peer_id(&name) == p
                })
                .ok_or_else(|| {
                    ApiError::new(400, 10005, format!("preferred server \"{p}\" not known"))
                })?;
            if id == leader {
                return Err(ApiError::new(
                    400,
                    10005,
                    format!("preferred server \"{p}\" is already leader"),
                ));
            }
            return Ok(id);
        }
        let mut others: Vec<NodeId> = status
            .voters
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| *id != leader)
            .collect();
        others.sort_unstable();
        if others.is_empty() {
            return Err(ApiError::new(400, 10005, "no replacement peer connected"));
        }
        let pick = usize::try_from(seed.unsigned_abs() % others.len() as u64).unwrap_or(0);
        Ok(others[pick])
    }
}

fn unavailable() -> ApiError {
    ApiError::new(503, 10008, "JetStream system temporarily unavailable")
}

/// What a replicated stream's worker keeps about its group.
pub(crate) struct Replica {
    /// The stream's group.
    pub(crate) group: GroupId,
    /// This node.
    pub(crate) me: NodeId,
    pub(crate) node: Arc<MuxNode>,
    /// What info answers need (shared with the worker while this is taken out).
    pub(crate) view: Arc<ReplicaView>,
    pub(crate) runtime: tokio::runtime::Handle,
    /// The stream's own queue, for the proposal's outcome.
    pub(crate) tx: Arc<OnceLock<WeakStreamTx>>,
    /// Inputs taken but not yet proposed (they wait for the proposal in flight).
    pub(crate) pending: Vec<Input>,
    /// Their intake cost, given back once they are applied or refused.
    pub(crate) pending_intake: usize,
    /// The round in flight, kept to refuse its senders if it does not commit in time.
    pub(crate) in_flight: Option<(Round, usize)>,
}

impl Replica {
    /// Whether this node leads the stream's group now.
    pub(crate) fn is_leader(&self) -> bool {
        self.view.is_leader()
    }

    /// Proposes what is pending (or, with `tick`, an empty round), unless a proposal is in
    /// flight. The leader adds the push-interest answers `interest` gives (`Round::interest`;
    /// asked only when a round is proposed). The outcome comes back as [`Cmd::Proposed`].
    pub(crate) fn propose(
        &mut self,
        now: i64,
        tick: bool,
        interest: impl FnOnce() -> Vec<(String, bool)>,
    ) {
        if self.in_flight.is_some() || (self.pending.is_empty() && !tick) {
            return;
        }
        let round = Round {
            origin: self.me,
            now,
            inputs: std::mem::take(&mut self.pending),
            interest: if self.is_leader() {
                interest()
            } else {
                Vec::new()
            },
        };
        let intake = std::mem::take(&mut self.pending_intake);
        let bytes = round.encode();
        self.in_flight = Some((round, intake));
        let node = Arc::clone(&self.node);
        let group = self.group;
        let tx = Arc::clone(&self.tx);
        self.runtime.spawn(async move {
            let r = node
                .propose(group, Command(bytes.into()), PROPOSE_DEADLINE)
                .await;
            if let Some(tx) = tx.get().and_then(WeakStreamTx::upgrade) {
                let _ = tx.send(Cmd::Proposed(r));
            }
        });
    }

    /// The proposal in flight ended: returns its round and intake when it failed (its
    /// senders are told), nothing when it committed (it was applied, and answered, by then).
    pub(crate) fn proposed(&mut self, r: Result<u64, ProposeError>) -> Option<(Round, usize)> {
        let flight = self.in_flight.take()?;
        match r {
            Ok(_) => {
                // Its intake was given back when it was applied (see `applied`).
                None
            }
            Err(e) => {
                tracing::warn!(group = self.group, error = %e, "a replicated round was not acknowledged");
                Some(flight)
            }
        }
    }

    /// A round was applied here: when it is ours and still in flight, its intake is worked
    /// off (the proposal's answer follows).
    pub(crate) fn applied(&mut self, round: &Round) -> usize {
        if round.origin != self.me {
            return 0;
        }
        match &mut self.in_flight {
            Some((r, intake)) if r.now == round.now && r.inputs.len() == round.inputs.len() => {
                std::mem::take(intake)
            }
            _ => 0,
        }
    }
}
