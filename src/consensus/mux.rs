//! The transport of every group a node hosts: one connection per peer (per direction), calls of
//! all groups multiplexed on it, heartbeats coalesced.
//!
//! Why: a node carries a group per replicated stream, and nats-server's users run hundreds of
//! R3 streams. Each openraft group heartbeats each follower on its own timer; sent one by one,
//! 300 groups at 250 ms would be 2,400 small writes a second per peer pair. Here a heartbeat
//! (an append that carries no entry) waits up to [`HEARTBEAT_LINGER`] in its peer's queue, and
//! everything queued for that peer then leaves in one frame; an append with entries, a vote or
//! a snapshot chunk leaves at once (taking queued heartbeats along), so commits are never
//! delayed.
//!
//! Wire: each frame is a little-endian `u32` length and a body in [`codec`]'s form (postcard
//! behind a tag byte) — a [`Frame`] of calls (call id, group, request) from the dialer, or of
//! answers (call id, response) back.
//!
//! Bounds: each peer's queue holds [`PEER_QUEUE`] calls (a caller waits for room, within its
//! RPC deadline); a frame is at most [`MAX_FRAME`] bytes (a larger one closes the
//! connection); answers waiting to be written are bounded by the same queue size.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use openraft::error::{
    CheckIsLeaderError, ClientWriteError, Fatal, InitializeError, InstallSnapshotError,
    NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError, Timeout,
    Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, OptionalSend, Snapshot, Vote};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::handover::{self, HandoverGate};
use super::memory::{CountingMachine, MemLog};
use super::repair::RepairGate;
use super::{codec, snapshot_send, Command, GroupId, NodeId, Raft, TypeConfig};

/// How long a heartbeat may wait for others bound to the same peer.
pub const HEARTBEAT_LINGER: Duration = Duration::from_millis(20);
/// Calls waiting for one peer's connection.
pub const PEER_QUEUE: usize = 8_192;
/// The largest frame read or written.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;
/// Pause between attempts to reach a peer that does not answer.
const REDIAL: Duration = Duration::from_millis(100);
/// Snapshot chunks this node sends at once, over all groups and peers (the cap on
/// concurrent catch-ups: each is a whole stream read into memory and written by its peer).
pub const MAX_SNAPSHOT_SENDS: usize = 2;
static SNAPSHOT_SENDS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MAX_SNAPSHOT_SENDS);
/// Elections a new group's first member starts at once, and how long each may take.
const FAST_ELECTIONS: usize = 10;
const FAST_ELECTION_WAIT: Duration = Duration::from_millis(100);
/// How often a group under repair asks its leader for a no-op append.
const NUDGE_EVERY: Duration = Duration::from_millis(500);
/// A leader no quorum acknowledged for this long has lost its quorum (proposals time out
/// at 3 s: the advisory comes with the first refused publish).
pub const QUORUM_LOST_AFTER: Duration = Duration::from_secs(3);
/// How often a leader that still has no quorum says so again (nats-server: every 10–20 s).
pub const QUORUM_LOST_REPEAT: Duration = Duration::from_secs(10);
/// Pause before a proposal is tried again while its group has no leader.
const RETRY_PROPOSAL: Duration = Duration::from_millis(50);

/// One RPC of one group.
#[derive(Serialize, Deserialize)]
enum Request {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(#[serde(with = "codec::snapshot_chunk")] InstallSnapshotRequest<TypeConfig>),
    /// A follower's proposal, forwarded to the node it believes leads the group.
    Propose(Command),
    /// A replica's question for a read index, forwarded to the node it believes leads the
    /// group (see [`MuxNode::read_barrier`]).
    ReadIndex,
}

/// Its answer, as the peer's group gave it.
#[derive(Serialize, Deserialize)]
enum Response {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Propose(Result<u64, ProposeError>),
    /// The peer hosts no such group (not created there yet, or removed).
    NoGroup,
    /// The peer's copy of the group is under repair and casts no vote (see [`super::repair`]).
    Repairing,
    /// The leader's read index, or why it has none.
    ReadIndex(Result<u64, ProposeError>),
}

/// Why a proposal was not committed. A caller that got an error does not know whether the
/// command will still commit (a leader that lost its quorum may commit it later): what it
/// tells a client is "not acknowledged", never "not stored".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ProposeError {
    /// No leader is known, or the one asked is not leading any more.
    #[error("no leader")]
    NoLeader,
    /// This node (or the leader) hosts no such group.
    #[error("no such group")]
    NoGroup,
    /// The group did not commit it in time (no quorum).
    #[error("timed out")]
    Timeout,
    /// openraft refused it for another reason.
    #[error("{0}")]
    Failed(String),
}

/// What one group looks like from this node, in our own terms.
#[derive(Debug, Clone, Default)]
pub struct GroupStatus {
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// This node leads the group.
    pub is_leader: bool,
    /// The current term.
    pub term: u64,
    /// The last index in this node's log.
    pub last_log_index: Option<u64>,
    /// The last index applied here.
    pub applied: Option<u64>,
    /// The voters and their addresses.
    pub voters: Vec<(NodeId, String)>,
    /// Members that do not vote (catching up, or on their way out).
    pub learners: Vec<NodeId>,
    /// On the leader: each member's last replicated index (`None`: nothing yet).
    pub matched: Vec<(NodeId, Option<u64>)>,
    /// On the leader: milliseconds since a quorum last acknowledged it.
    pub quorum_ack_ms: Option<u64>,
}

/// What travels in one frame.
#[derive(Serialize, Deserialize, Default)]
struct Frame {
    calls: Vec<(u64, GroupId, Request)>,
    answers: Vec<(u64, Response)>,
}

fn encode(frame: &Frame) -> io::Result<Vec<u8>> {
    let mut out = codec::encode_after(&[0; 4], frame)?;
    let body = out.len() - 4;
    if body > MAX_FRAME {
        return Err(io::Error::other("raft frame over the size limit"));
    }
    let len = u32::try_from(body).map_err(io::Error::other)?;
    out[..4].copy_from_slice(&len.to_le_bytes());
    Ok(out)
}

async fn read_frame(reader: &mut OwnedReadHalf) -> io::Result<Frame> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "raft frame over the size limit",
        ));
    }
    // Read into spare capacity: a frame of entries is hundreds of KiB, not worth zeroing first.
    let mut body = Vec::with_capacity(len);
    (&mut *reader)
        .take(len as u64)
        .read_to_end(&mut body)
        .await?;
    if body.len() < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    codec::decode(&body)
}

/// A call on its way to a peer.
struct Call {
    group: GroupId,
    request: Request,
    heartbeat: bool,
    answer: oneshot::Sender<Response>,
}

/// The queue to one peer, served by its link task.
#[derive(Clone)]
struct PeerLink {
    tx: mpsc::Sender<Call>,
    /// When the peer last answered anything (for "active" in stream and meta info).
    heard: Heard,
}

type Heard = Arc<Mutex<Option<std::time::Instant>>>;

impl PeerLink {
    fn start(addr: String, book: Arc<AddressBook>) -> Self {
        let (tx, rx) = mpsc::channel(PEER_QUEUE);
        let heard = Heard::default();
        tokio::spawn(run_link(addr, book, rx, heard.clone()));
        PeerLink { tx, heard }
    }

    async fn call(
        &self,
        group: GroupId,
        request: Request,
        heartbeat: bool,
        deadline: Duration,
    ) -> io::Result<Response> {
        let (answer, answered) = oneshot::channel();
        let call = Call {
            group,
            request,
            heartbeat,
            answer,
        };
        let sent = tokio::time::timeout(deadline, async {
            self.tx
                .send(call)
                .await
                .map_err(|_| io::Error::other("raft link closed"))?;
            answered
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::ConnectionReset, "peer went away"))
        });
        match sent.await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "raft call timed out",
            )),
        }
    }
}

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Response>>>>;

/// Serves one peer's queue for the life of the node: dial, write frames, read answers, and dial
/// again after a failure (calls in flight on a dead connection fail; openraft retries).
async fn run_link(
    addr: String,
    book: Arc<AddressBook>,
    mut rx: mpsc::Receiver<Call>,
    heard: Heard,
) {
    let mut next_id = 0u64;
    loop {
        let stream = match TcpStream::connect(book.dial(&addr)).await {
            Ok(stream) => stream,
            Err(_) => {
                // Calls queued while the peer is unreachable fail now rather than at their
                // deadline, so elections and heartbeats move on.
                while let Ok(call) = rx.try_recv() {
                    drop(call.answer);
                }
                if rx.is_closed() {
                    return;
                }
                tokio::time::sleep(REDIAL).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let waiting: Waiting = Arc::default();
        let mut reader_task = tokio::spawn(read_answers(reader, waiting.clone(), heard.clone()));
        // The connection is done when writing fails, and also as soon as reading does: a peer
        // that died (kill -9) closes it at once, but a call written after that would still go
        // out into the dead socket and wait for its answer until its deadline — a proposal
        // forwarded to a dead leader held its stream's next round for the whole 3 s.
        let closed = tokio::select! {
            closed = write_calls(writer, &mut rx, &waiting, &mut next_id) => closed,
            _ = &mut reader_task => false,
        };
        reader_task.abort();
        // Calls waiting on it fail now (their answers are dropped); the next ones dial again.
        waiting.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if closed {
            return;
        }
    }
}

async fn read_answers(mut reader: OwnedReadHalf, waiting: Waiting, heard: Heard) {
    while let Ok(frame) = read_frame(&mut reader).await {
        *heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
        let mut waiting = waiting.lock().unwrap_or_else(|p| p.into_inner());
        for (id, response) in frame.answers {
            if let Some(answer) = waiting.remove(&id) {
                let _ = answer.send(response);
            }
        }
    }
}

/// Writes frames until the connection fails (false) or the node drops its link (true).
async fn write_calls(
    mut writer: OwnedWriteHalf,
    rx: &mut mpsc::Receiver<Call>,
    waiting: &Waiting,
    next_id: &mut u64,
) -> bool {
    let mut frame = Frame::default();
    let mut flush_at: Option<Instant> = None;
    loop {
        let call = match flush_at {
            None => rx.recv().await,
            Some(at) => tokio::select! {
                call = rx.recv() => call,
                _ = tokio::time::sleep_until(at) => {
                    flush_at = None;
                    if send(&mut writer, &mut frame).await.is_err() {
                        return false;
                    }
                    continue;
                }
            },
        };
        let Some(call) = call else { return true };
        let mut urgent = !call.heartbeat;
        push(&mut frame, call, waiting, next_id);
        // Whatever else is queued rides along.
        while let Ok(call) = rx.try_recv() {
            urgent |= !call.heartbeat;
            push(&mut frame, call, waiting, next_id);
        }
        if urgent {
            flush_at = None;
            if send(&mut writer, &mut frame).await.is_err() {
                return false;
            }
        } else if flush_at.is_none() {
            flush_at = Some(Instant::now() + HEARTBEAT_LINGER);
        }
    }
}

fn push(frame: &mut Frame, call: Call, waiting: &Waiting, next_id: &mut u64) {
    *next_id += 1;
    let mut waiting = waiting.lock().unwrap_or_else(|p| p.into_inner());
    // Callers that gave up (their deadline passed: a peer that stopped answering on a
    // connection still open, partitioned say) leave their entry behind until the connection
    // ends; dropped here once there are many, so the table is bounded by the calls whose
    // callers still wait.
    if waiting.len() >= PEER_QUEUE {
        waiting.retain(|_, answer| !answer.is_closed());
    }
    waiting.insert(*next_id, call.answer);
    frame.calls.push((*next_id, call.group, call.request));
}

async fn send(writer: &mut OwnedWriteHalf, frame: &mut Frame) -> io::Result<()> {
    if frame.calls.is_empty() && frame.answers.is_empty() {
        return Ok(());
    }
    let bytes = encode(frame)?;
    *frame = Frame::default();
    writer.write_all(&bytes).await
}

type Groups = Arc<RwLock<HashMap<GroupId, Raft>>>;

/// Where peers are now. A membership names each node by the address it had when it joined
/// (and a node listening on `0.0.0.0` names itself so); in a container or after a restart
/// under another address that is no way to reach it. So a link, keyed by the membership's
/// address, dials the address the layer above last learned for that node (from its route:
/// the peer's IP and the Raft port its INFO gave), and the membership's only when none is
/// known.
#[derive(Default)]
struct AddressBook {
    /// Peers' addresses as the layer above learned them.
    current: RwLock<HashMap<NodeId, String>>,
    /// The node each membership address names (recorded as openraft asks for clients).
    named: RwLock<HashMap<String, NodeId>>,
}

impl AddressBook {
    /// Where to dial the node a membership names `addr`.
    fn dial(&self, addr: &str) -> String {
        let id = self
            .named
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
            .copied();
        id.and_then(|id| {
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .cloned()
        })
        .unwrap_or_else(|| addr.to_owned())
    }

    fn current_of(&self, id: NodeId) -> Option<String> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }
}

/// One node's groups and its links to peers.
pub struct MuxNode {
    id: NodeId,
    addr: SocketAddr,
    config: Arc<openraft::Config>,
    groups: Groups,
    repair: Arc<RepairGate>,
    handover: Arc<HandoverGate>,
    /// Peers' addresses as the layer above learned them: what links dial, and how a group
    /// whose membership this node has lost finds its leader ([`nudge_while_repairing`]).
    book: Arc<AddressBook>,
    links: Arc<Mutex<HashMap<String, PeerLink>>>,
    accepting: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The groups whose snapshot this node is sending (no new snapshot meanwhile).
    sending: Arc<snapshot_send::Sending>,
}

impl MuxNode {
    /// Listens on `listen` for peers' calls and returns the node.
    pub async fn bind(
        id: NodeId,
        listen: SocketAddr,
        config: Arc<openraft::Config>,
    ) -> io::Result<Arc<Self>> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let groups: Groups = Arc::default();
        let repair: Arc<RepairGate> = Arc::default();
        let handover: Arc<HandoverGate> = Arc::default();
        let accepting = tokio::spawn(accept(
            listener,
            groups.clone(),
            repair.clone(),
            handover.clone(),
        ));
        Ok(Arc::new(MuxNode {
            id,
            addr,
            config,
            groups,
            repair,
            handover,
            book: Arc::default(),
            links: Arc::default(),
            accepting: Mutex::new(Some(accepting)),
            sending: Arc::default(),
        }))
    }

    /// Whether this node is sending `group`'s snapshot to a follower now: the group should
    /// not take a new snapshot meanwhile (`snapshot_send.rs`).
    pub fn sending_snapshot(&self, group: GroupId) -> bool {
        self.sending.any(group)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Where peers reach this node.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts hosting `group` with an empty in-memory log. With `members`, this node also
    /// proposes the group's first membership (do it on one member only).
    pub async fn add_group(
        self: &Arc<Self>,
        group: GroupId,
        members: Option<BTreeMap<NodeId, BasicNode>>,
    ) -> anyhow::Result<Raft> {
        self.add_group_on(group, MemLog::new(), CountingMachine::new(), members)
            .await
    }

    /// [`MuxNode::add_group`] on the given log store and state machine (the node's sealed log,
    /// say).
    pub async fn add_group_on<LS, SM>(
        self: &Arc<Self>,
        group: GroupId,
        log: LS,
        machine: SM,
        members: Option<BTreeMap<NodeId, BasicNode>>,
    ) -> anyhow::Result<Raft>
    where
        LS: RaftLogStorage<TypeConfig>,
        SM: RaftStateMachine<TypeConfig>,
    {
        let network = GroupNetwork {
            me: self.id,
            group,
            links: self.links.clone(),
            book: Arc::clone(&self.book),
            sending: Arc::clone(&self.sending),
        };
        let raft = Raft::new(self.id, self.config.clone(), network, log, machine).await?;
        if self.repair.enter(group) {
            raft.runtime_config().elect(false);
            tracing::warn!(
                group,
                "a group of this node starts under repair: no votes until it caught up"
            );
        }
        self.groups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group, raft.clone());
        if let Some(members) = members {
            raft.initialize(members).await?;
        }
        Ok(raft)
    }

    /// The group's handle, if this node hosts it.
    pub fn group(&self, group: GroupId) -> Option<Raft> {
        self.groups
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&group)
            .cloned()
    }

    /// Stops hosting `group` (its log records stay until erased).
    pub async fn remove_group(&self, group: GroupId) {
        let raft = self
            .groups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&group);
        self.repair.forget(group);
        if let Some(raft) = raft {
            let _ = raft.shutdown().await;
        }
    }

    /// This node's log was damaged and started again empty: every group added from now on
    /// starts under repair (see [`super::repair`]) until `anchor` — the group whose log says
    /// which others exist — has caught up.
    pub fn begin_repair(self: &Arc<Self>, anchor: GroupId) {
        self.repair.begin(anchor);
        tokio::spawn(nudge_while_repairing(Arc::downgrade(self)));
    }

    /// Where peer `id` listens, as the layer above learned it (routes, in the server).
    pub fn learn_address(&self, id: NodeId, addr: String) {
        self.book
            .current
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, addr);
    }

    /// Whether some group of this node is still under repair.
    pub fn is_repairing(&self) -> bool {
        self.repair.is_repairing()
    }

    /// Calls `became_leader` each time this node becomes `group`'s leader, and
    /// `lost_quorum` while it leads but no quorum acknowledged it for [`QUORUM_LOST_AFTER`]
    /// (then again every [`QUORUM_LOST_REPEAT`] while that lasts), until the group is
    /// removed (its watch then ends).
    pub fn on_leadership(
        &self,
        group: GroupId,
        became_leader: impl Fn() + Send + 'static,
        lost_quorum: impl Fn() + Send + 'static,
    ) {
        let Some(raft) = self.group(group) else {
            return;
        };
        let me = self.id;
        // Who leads, from the server metrics: sent only when they change, so an idle group's
        // watch sleeps through its ticks and heartbeats. The quorum's last acknowledgement is
        // a data metric, read when this wakes.
        let mut server = raft.server_metrics();
        let data = raft.data_metrics();
        drop(raft);
        tokio::spawn(async move {
            let mut led = false;
            let mut reported: Option<Instant> = None;
            loop {
                let leads = {
                    let m = server.borrow_and_update();
                    m.current_leader == Some(me) && m.state.is_leader()
                };
                let quorum_ack_ms = data.borrow().millis_since_quorum_ack;
                if leads && !led {
                    became_leader();
                }
                led = leads;
                let stalled = leads
                    && quorum_ack_ms.is_some_and(|ms| ms >= QUORUM_LOST_AFTER.as_millis() as u64);
                if !stalled {
                    reported = None;
                } else if reported.is_none_or(|t| t.elapsed() >= QUORUM_LOST_REPEAT) {
                    lost_quorum();
                    reported = Some(Instant::now());
                }
                // A leader looks at its quorum's acknowledgements again each second; anyone
                // wakes when who leads changes.
                let changed = if leads {
                    match tokio::time::timeout(Duration::from_secs(1), server.changed()).await {
                        Ok(r) => r,
                        Err(_) => Ok(()),
                    }
                } else {
                    server.changed().await
                };
                if changed.is_err() {
                    return;
                }
            }
        });
    }

    /// A stepdown of `group` was applied here, naming `next` to lead: this node plays its
    /// part — the leader falls silent, `next` stands for election once the leases ran out,
    /// every other voter holds its elections back ([`super::handover`]).
    pub fn hand_over(self: &Arc<Self>, group: GroupId, next: NodeId) {
        let Some(raft) = self.group(group) else {
            return;
        };
        let me = self.id;
        let leading = {
            let m = raft.metrics().borrow().clone();
            m.current_leader == Some(me) && m.state.is_leader()
        };
        let node = Arc::clone(self);
        tokio::spawn(async move {
            let config = raft.runtime_config();
            if leading {
                let _ = raft.trigger().heartbeat().await;
                tokio::time::sleep(handover::SETTLE).await;
                node.handover.hold(group, handover::HOLD);
                config.heartbeat(false);
                config.elect(false);
                let _ = raft
                    .wait(Some(handover::HOLD))
                    .metrics(|m| m.current_leader != Some(me), "a new leader")
                    .await;
                config.heartbeat(true);
                node.handover.release(group);
                tracing::info!(group, "stepped down as the group's leader");
                // Not a candidate again at once: the new leader settles first.
                tokio::time::sleep(handover::CAMPAIGN_AFTER).await;
            } else if me == next {
                tokio::time::sleep(handover::CAMPAIGN_AFTER).await;
                let _ = raft.trigger().elect().await;
                return;
            } else {
                config.elect(false);
                tokio::time::sleep(handover::HOLD).await;
            }
            if !node.repair.under_repair(group) {
                config.elect(true);
            }
        });
    }

    /// Proposes `command` to `group`: here when this node leads it, else forwarded once to
    /// the leader this node knows of. Returns the entry's log index once the command is
    /// committed and applied on the node that took it, or the reason it was not, within
    /// `deadline`.
    ///
    /// # Errors
    /// [`ProposeError`]: no leader, no such group, no quorum in time, or openraft's refusal.
    pub async fn propose(
        &self,
        group: GroupId,
        command: Command,
        deadline: Duration,
    ) -> Result<u64, ProposeError> {
        let attempt = async {
            // While a group elects (or is being created on its members), try again.
            loop {
                match self.propose_once(group, command.clone(), deadline).await {
                    Err(ProposeError::NoLeader | ProposeError::NoGroup) => {
                        tokio::time::sleep(RETRY_PROPOSAL).await;
                    }
                    other => return other,
                }
            }
        };
        tokio::time::timeout(deadline, attempt)
            .await
            .unwrap_or(Err(ProposeError::Timeout))
    }

    async fn propose_once(
        &self,
        group: GroupId,
        command: Command,
        deadline: Duration,
    ) -> Result<u64, ProposeError> {
        let raft = self.group(group).ok_or(ProposeError::NoGroup)?;
        if self.handover.holding(group) {
            return Err(ProposeError::NoLeader);
        }
        match write(&raft, command.clone()).await? {
            Ok(index) => Ok(index),
            Err((leader, addr)) => {
                if let Some(id) = leader {
                    self.book
                        .named
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(addr.clone(), id);
                }
                let link = self.link(&addr);
                match link
                    .call(group, Request::Propose(command), false, deadline)
                    .await
                {
                    Ok(Response::Propose(r)) => r,
                    Ok(Response::NoGroup) => Err(ProposeError::NoGroup),
                    Ok(_) => Err(ProposeError::Failed("unexpected answer".into())),
                    Err(_) => Err(ProposeError::NoLeader),
                }
            }
        }
    }

    /// Waits until this node's copy of `group` has applied every entry that was committed
    /// when the call began — a read index (Raft §6.4), with no log entry written: the leader
    /// confirms it still leads by a round of heartbeats a quorum answers and names its commit
    /// index (openraft's `get_read_log_id`); this node, leader or not, then waits until it has
    /// applied that far. A read served after it sees every write acknowledged before it
    /// began. Returns the index waited for.
    ///
    /// # Errors
    /// As [`MuxNode::propose`]: no leader or no quorum within `deadline`, no such group.
    pub async fn read_barrier(
        &self,
        group: GroupId,
        deadline: Duration,
    ) -> Result<u64, ProposeError> {
        let started = Instant::now();
        let attempt = async {
            loop {
                match self.read_index_once(group, deadline).await {
                    Err(ProposeError::NoLeader | ProposeError::NoGroup) => {
                        tokio::time::sleep(RETRY_PROPOSAL).await;
                    }
                    other => return other,
                }
            }
        };
        let index = tokio::time::timeout(deadline, attempt)
            .await
            .unwrap_or(Err(ProposeError::Timeout))?;
        let left = deadline.saturating_sub(started.elapsed());
        if self.wait_applied(group, index, left).await {
            Ok(index)
        } else {
            Err(ProposeError::Timeout)
        }
    }

    async fn read_index_once(
        &self,
        group: GroupId,
        deadline: Duration,
    ) -> Result<u64, ProposeError> {
        let raft = self.group(group).ok_or(ProposeError::NoGroup)?;
        if self.handover.holding(group) {
            return Err(ProposeError::NoLeader);
        }
        match read_index(&raft).await? {
            Ok(index) => Ok(index),
            Err((_, addr)) => match self
                .link(&addr)
                .call(group, Request::ReadIndex, false, deadline)
                .await
            {
                Ok(Response::ReadIndex(r)) => r,
                Ok(Response::NoGroup) => Err(ProposeError::NoGroup),
                Ok(_) => Err(ProposeError::Failed("unexpected answer".into())),
                Err(_) => Err(ProposeError::NoLeader),
            },
        }
    }

    /// Proposes the group's first membership, if it has none yet (a group that is already
    /// initialized — here or by a peer that reached us first — is left as it is).
    ///
    /// # Errors
    /// openraft's refusal for other reasons.
    pub async fn initialize(
        &self,
        group: GroupId,
        members: &[(NodeId, String)],
    ) -> Result<(), ProposeError> {
        let raft = self.group(group).ok_or(ProposeError::NoGroup)?;
        if self.repair.under_repair(group) {
            // Its membership is in the log it lost: it comes back from the leader.
            return Ok(());
        }
        let members: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => {
                self.campaign(group).await;
                Ok(())
            }
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ProposeError::Failed(e.to_string())),
        }
    }

    /// Has this node stand for election in `group` now rather than after a whole election
    /// timeout (a new stream's first publish should not wait for it); again while the other
    /// members are still creating the group (their "no such group" fails the vote), until
    /// the group has a leader.
    pub async fn campaign(&self, group: GroupId) {
        let Some(raft) = self.group(group) else {
            return;
        };
        for _ in 0..FAST_ELECTIONS {
            let _ = raft.trigger().elect().await;
            let led = raft
                .wait(Some(FAST_ELECTION_WAIT))
                .metrics(|m| m.current_leader.is_some(), "leader")
                .await
                .is_ok();
            if led {
                break;
            }
        }
    }

    /// Adds `id` (reachable at `addr`) to the group as a voter: first as a learner that is
    /// brought up to date, then promoted. Called on the leader.
    ///
    /// # Errors
    /// Not the leader, or openraft's refusal (a membership change already in progress).
    pub async fn add_voter(
        &self,
        group: GroupId,
        id: NodeId,
        addr: &str,
    ) -> Result<(), ProposeError> {
        let raft = self.group(group).ok_or(ProposeError::NoGroup)?;
        let node = BasicNode {
            addr: addr.to_owned(),
        };
        let fail = |e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>| match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => ProposeError::NoLeader,
            e => ProposeError::Failed(e.to_string()),
        };
        raft.add_learner(id, node, true).await.map_err(fail)?;
        let voters: std::collections::BTreeSet<NodeId> = [id].into_iter().collect();
        raft.change_membership(openraft::ChangeMembers::AddVoterIds(voters), false)
            .await
            .map_err(fail)?;
        Ok(())
    }

    /// Removes `id` from `group`'s members (voter and node alike); on the group's leader.
    ///
    /// # Errors
    /// [`ProposeError::NoLeader`] when this node does not lead the group; openraft's refusal.
    pub async fn remove_voter(&self, group: GroupId, id: NodeId) -> Result<(), ProposeError> {
        // Kept as a learner: it is still sent the log, so it learns that it no longer votes
        // (and leaves the group then); a node dropped outright would never hear of it and
        // would stand for election again and again. [`remove_learner`](Self::remove_learner)
        // takes it out afterwards.
        let voters = [id].into_iter().collect();
        self.change_members(group, openraft::ChangeMembers::RemoveVoters(voters), true)
            .await
    }

    /// Takes learner `id` out of the group's membership. Called on the leader.
    ///
    /// # Errors
    /// Not the leader, or openraft's refusal.
    pub async fn remove_learner(&self, group: GroupId, id: NodeId) -> Result<(), ProposeError> {
        let nodes = [id].into_iter().collect();
        self.change_members(group, openraft::ChangeMembers::RemoveNodes(nodes), false)
            .await
    }

    async fn change_members(
        &self,
        group: GroupId,
        change: openraft::ChangeMembers<NodeId, BasicNode>,
        retain: bool,
    ) -> Result<(), ProposeError> {
        let raft = self.group(group).ok_or(ProposeError::NoGroup)?;
        raft.change_membership(change, retain)
            .await
            .map_err(|e| match e {
                RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => ProposeError::NoLeader,
                e => ProposeError::Failed(e.to_string()),
            })?;
        Ok(())
    }

    /// Waits until this node has applied `group`'s log up to `index`; false at the deadline
    /// (or without the group).
    pub async fn wait_applied(&self, group: GroupId, index: u64, deadline: Duration) -> bool {
        let Some(raft) = self.group(group) else {
            return false;
        };
        raft.wait(Some(deadline))
            .applied_index_at_least(Some(index), "applied")
            .await
            .is_ok()
    }

    /// Waits until this node knows a leader of `group`; false at the deadline.
    pub async fn wait_leader(&self, group: GroupId, deadline: Duration) -> bool {
        let Some(raft) = self.group(group) else {
            return false;
        };
        raft.wait(Some(deadline))
            .metrics(|m| m.current_leader.is_some(), "leader")
            .await
            .is_ok()
    }

    /// The group as this node sees it, if it hosts it.
    pub fn status(&self, group: GroupId) -> Option<GroupStatus> {
        let raft = self.group(group)?;
        let m = raft.metrics().borrow().clone();
        let voters: Vec<(NodeId, String)> = {
            let ids: std::collections::BTreeSet<NodeId> =
                m.membership_config.membership().voter_ids().collect();
            m.membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| ids.contains(id))
                .map(|(id, n)| (*id, n.addr.clone()))
                .collect()
        };
        let learners: Vec<NodeId> = {
            let membership = m.membership_config.membership();
            let voting: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
            membership
                .nodes()
                .map(|(id, _)| *id)
                .filter(|id| !voting.contains(id))
                .collect()
        };
        let matched = m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect())
            .unwrap_or_default();
        Some(GroupStatus {
            leader: m.current_leader,
            is_leader: m.current_leader == Some(self.id) && m.state.is_leader(),
            term: m.current_term,
            last_log_index: m.last_log_index,
            applied: m.last_applied.map(|l| l.index),
            voters,
            learners,
            matched,
            quorum_ack_ms: m.millis_since_quorum_ack,
        })
    }

    /// How long ago the peer at `addr` last answered this node (`None`: never, or no call was
    /// ever made to it).
    pub fn silence(&self, addr: &str) -> Option<Duration> {
        let links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        let heard = *links
            .get(addr)?
            .heard
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        heard.map(|t| t.elapsed())
    }

    fn link(&self, addr: &str) -> PeerLink {
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(addr.to_owned())
            .or_insert_with(|| PeerLink::start(addr.to_owned(), Arc::clone(&self.book)))
            .clone()
    }

    /// Stops every group this node hosts and stops listening (as a crash would, without a
    /// goodbye); the address can be bound again.
    pub async fn shutdown(&self) {
        let accepting = self
            .accepting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(accepting) = accepting {
            accepting.abort();
            let _ = accepting.await;
        }
        let groups: Vec<Raft> = self
            .groups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, raft)| raft)
            .collect();
        for raft in groups {
            let _ = raft.shutdown().await;
        }
    }
}

/// While groups of this node are under repair, asks each one's leader to append a no-op
/// ([`Command::nudge`]) every [`NUDGE_EVERY`]: the append that reaches this node conflicts with
/// its emptied log, and the leader then sends it the whole log.
async fn nudge_while_repairing(node: std::sync::Weak<MuxNode>) {
    loop {
        tokio::time::sleep(NUDGE_EVERY).await;
        let Some(node) = node.upgrade() else { return };
        if !node.repair.is_repairing() {
            return;
        }
        for group in node.repair.groups() {
            // The leader as its appends named it; its address from the address book, since
            // the membership that would give it is in the lost log. Without either, the next
            // round tries again.
            let Some(raft) = node.group(group) else {
                continue;
            };
            let leader = raft.metrics().borrow().current_leader;
            let addr = leader.and_then(|l| node.book.current_of(l));
            if let Some(addr) = addr {
                let request = Request::Propose(Command::nudge());
                let _ = node
                    .link(&addr)
                    .call(group, request, false, NUDGE_EVERY)
                    .await;
            }
        }
    }
}

async fn accept(
    listener: TcpListener,
    groups: Groups,
    repair: Arc<RepairGate>,
    handover: Arc<HandoverGate>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(
                    stream,
                    groups.clone(),
                    repair.clone(),
                    handover.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "raft listener: accept failed");
                tokio::time::sleep(REDIAL).await;
            }
        }
    }
}

/// Answers one peer's calls: each call runs on its group concurrently; answers are written
/// back as they come, everything ready at once in one frame.
async fn serve(
    stream: TcpStream,
    groups: Groups,
    repair: Arc<RepairGate>,
    handover: Arc<HandoverGate>,
) {
    let (mut reader, mut writer) = stream.into_split();
    let (answers, mut ready) = mpsc::channel::<(u64, Response)>(PEER_QUEUE);
    let writer_task = tokio::spawn(async move {
        while let Some(first) = ready.recv().await {
            let mut frame = Frame::default();
            frame.answers.push(first);
            while let Ok(more) = ready.try_recv() {
                frame.answers.push(more);
            }
            if send(&mut writer, &mut frame).await.is_err() {
                return;
            }
        }
    });
    loop {
        let frame = match read_frame(&mut reader).await {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    tracing::warn!(error = %e, "raft transport: a peer's connection ended");
                }
                break;
            }
        };
        for (id, group, request) in frame.calls {
            let raft = groups
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&group)
                .cloned();
            let answers = answers.clone();
            let repair = repair.clone();
            let handover = handover.clone();
            tokio::spawn(async move {
                let response = match raft {
                    None => Response::NoGroup,
                    // A leader stepping down takes no proposal: the proposer retries.
                    Some(_)
                        if matches!(request, Request::Propose(_)) && handover.holding(group) =>
                    {
                        Response::Propose(Err(ProposeError::NoLeader))
                    }
                    Some(raft) => dispatch_gated(&raft, group, request, &repair).await,
                };
                let _ = answers.send((id, response)).await;
            });
        }
    }
    drop(answers);
    let _ = writer_task.await;
}

/// [`dispatch`] through the repair gate: a group under repair casts no vote, and each leader
/// append tells it how far it must catch up and whether it now has.
async fn dispatch_gated(
    raft: &Raft,
    group: GroupId,
    request: Request,
    repair: &RepairGate,
) -> Response {
    if !repair.under_repair(group) {
        return dispatch(raft, request).await;
    }
    match request {
        Request::Vote(_) => Response::Repairing,
        Request::Append(rpc) => {
            repair.heard_leader(group, rpc.leader_commit.map(|l| l.index));
            let response = dispatch(raft, Request::Append(rpc)).await;
            let applied = raft.metrics().borrow().last_applied.map(|l| l.index);
            if repair.caught_up(group, applied) {
                raft.runtime_config().elect(true);
                tracing::info!(group, "a group of this node is repaired: it votes again");
            }
            response
        }
        other => dispatch(raft, other).await,
    }
}

/// A snapshot chunk from the leader, taken as a sign of the leader's life too.
///
/// Why: openraft 0.9 restarts a follower's election timer only on appends. A follower
/// receiving a large snapshot stood for election in the middle of it (a 1 GiB stream: every
/// ~5 s), and each campaign deposed the leader and restarted the transfer from its first
/// chunk, so the follower never caught up. Before each chunk is taken, the chunk's vote is
/// given to the follower as an empty append — no previous entry, no entries, no commit — which
/// restarts the timer and changes nothing else (a stale vote is refused as any append's
/// would be).
///
/// The last chunk is answered only once the whole image is installed — seconds for a large
/// stream — and until then the leader sends this follower nothing at all (its replication to
/// it waits for that answer): a 1 GiB install stood for election 2.2 s into the install and
/// left the group without a leader for ~1.3 s. So while the last chunk is being installed,
/// the same empty append is given again every heartbeat interval — without waiting for its
/// answer: openraft answers an append only after the install's own answer, so awaiting the
/// first kept every later one from being sent.
async fn receive_chunk(
    raft: &Raft,
    rpc: InstallSnapshotRequest<TypeConfig>,
) -> Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
    let vote = rpc.vote;
    let alive = || AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: None,
        leader_commit: None,
        entries: Vec::new(),
    };
    let _ = raft.append_entries(alive()).await;
    if !rpc.done {
        return raft.install_snapshot(rpc).await;
    }
    let install = raft.install_snapshot(rpc);
    tokio::pin!(install);
    let mut beat = tokio::time::interval(Duration::from_millis(super::timing::HEARTBEAT_MS));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beat.tick().await;
    loop {
        tokio::select! {
            answer = &mut install => return answer,
            _ = beat.tick() => {
                let raft = raft.clone();
                let alive = alive();
                tokio::spawn(async move { raft.append_entries(alive).await });
            }
        }
    }
}

async fn dispatch(raft: &Raft, request: Request) -> Response {
    match request {
        Request::Append(rpc) => Response::Append(raft.append_entries(rpc).await),
        Request::Vote(rpc) => Response::Vote(raft.vote(rpc).await),
        Request::Snapshot(rpc) => Response::Snapshot(receive_chunk(raft, rpc).await),
        // Forwarded once only: a peer that does not lead either says so.
        Request::Propose(command) => Response::Propose(match write(raft, command).await {
            Ok(Ok(index)) => Ok(index),
            Ok(Err(_)) => Err(ProposeError::NoLeader),
            Err(e) => Err(e),
        }),
        Request::ReadIndex => Response::ReadIndex(match read_index(raft).await {
            Ok(Ok(index)) => Ok(index),
            Ok(Err(_)) => Err(ProposeError::NoLeader),
            Err(e) => Err(e),
        }),
    }
}

/// This node's read index of a group it leads (its leadership confirmed by a quorum), or the
/// leader to ask instead, when openraft named one.
async fn read_index(raft: &Raft) -> Result<Result<u64, (Option<NodeId>, String)>, ProposeError> {
    match raft.get_read_log_id().await {
        Ok((read, _applied)) => Ok(Ok(read.map_or(0, |l| l.index))),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => match f.leader_node {
            Some(node) => Ok(Err((f.leader_id, node.addr))),
            None => Err(ProposeError::NoLeader),
        },
        // No quorum answered: asked again until the caller's deadline.
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => {
            Err(ProposeError::NoLeader)
        }
        Err(e) => Err(ProposeError::Failed(e.to_string())),
    }
}

/// A proposal on this node's copy of a group: committed and applied, or why not (with the
/// leader to forward to, when openraft named one).
async fn write(
    raft: &Raft,
    command: Command,
) -> Result<Result<u64, (Option<NodeId>, String)>, ProposeError> {
    match raft.client_write(command).await {
        Ok(r) => Ok(Ok(r.log_id.index)),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => match f.leader_node {
            Some(node) => Ok(Err((f.leader_id, node.addr))),
            None => Err(ProposeError::NoLeader),
        },
        Err(e) => Err(ProposeError::Failed(e.to_string())),
    }
}

/// One group's way to its peers: openraft asks it for a client per target.
struct GroupNetwork {
    me: NodeId,
    group: GroupId,
    links: Arc<Mutex<HashMap<String, PeerLink>>>,
    book: Arc<AddressBook>,
    sending: Arc<snapshot_send::Sending>,
}

impl RaftNetworkFactory<TypeConfig> for GroupNetwork {
    type Network = GroupClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> GroupClient {
        self.book
            .named
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.addr.clone(), target);
        let link = self
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(node.addr.clone())
            .or_insert_with(|| PeerLink::start(node.addr.clone(), Arc::clone(&self.book)))
            .clone();
        GroupClient {
            me: self.me,
            group: self.group,
            target,
            link,
            sent_commit: None,
            sending: Arc::clone(&self.sending),
        }
    }
}

/// One group's client for one peer.
struct GroupClient {
    /// This node (the sender, in a timeout openraft is told of).
    me: NodeId,
    group: GroupId,
    target: NodeId,
    link: PeerLink,
    /// The commit index this client last told the peer: an append without entries that
    /// moves it is not a heartbeat (see `append_entries`).
    sent_commit: Option<u64>,
    sending: Arc<snapshot_send::Sending>,
}

fn unreachable<E: std::error::Error>(e: io::Error) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&e))
}

impl GroupClient {
    /// A call that failed, in openraft's terms. One that ran out of time is a `Timeout`, after
    /// which openraft sends the next call at once; anything else (no connection, a link that
    /// closed) is `Unreachable`, after which it sends nothing to that peer for its backoff.
    ///
    /// Why the difference matters: a follower answers an append once the entries are durable,
    /// and openraft gives an append one heartbeat interval (250 ms). A follower whose disk is
    /// slow for a moment (a large snapshot written on the same disk) missed it; told
    /// "unreachable", the leader then sent that follower nothing for 500 ms — no entries, no
    /// heartbeat — and with both followers so, the group had no quorum for the whole backoff,
    /// each time: publish latency spikes, and under a long burst of slow flushes, followers
    /// that heard nothing stood for election, which the slow disk made fail too.
    fn call_failed<E: std::error::Error>(
        &self,
        action: RPCTypes,
        ttl: Duration,
        e: io::Error,
    ) -> RPCError<NodeId, BasicNode, E> {
        if e.kind() == io::ErrorKind::TimedOut {
            RPCError::Timeout(Timeout {
                action,
                id: self.me,
                target: self.target,
                timeout: ttl,
            })
        } else {
            unreachable(e)
        }
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&io::Error::other(
        "peer answered another kind of call, or hosts no such group",
    )))
}

/// What the peer's group answered, in openraft's terms (None: the peer answered another kind
/// of call, or hosts no such group). RPCError is openraft's; its size is not ours to choose.
#[allow(clippy::result_large_err)]
fn answered<T, E: std::error::Error>(
    target: NodeId,
    answer: Option<Result<T, E>>,
) -> Result<T, RPCError<NodeId, BasicNode, E>> {
    match answer {
        Some(Ok(r)) => Ok(r),
        Some(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(target, e))),
        None => Err(unexpected()),
    }
}

impl RaftNetwork<TypeConfig> for GroupClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        // Only an append that tells the peer nothing new may linger. One without entries
        // that moves the commit index is how a follower learns its proposal committed (and
        // then applies it and answers its client): lingering it added 20 ms to every
        // PubAck of a replicated stream.
        let commit = rpc.leader_commit.map(|l| l.index);
        let heartbeat = rpc.entries.is_empty() && commit == self.sent_commit;
        self.sent_commit = commit;
        let answer = self
            .link
            .call(
                self.group,
                Request::Append(rpc),
                heartbeat,
                option.hard_ttl(),
            )
            .await
            .map_err(|e| self.call_failed(RPCTypes::AppendEntries, option.hard_ttl(), e))?;
        answered(
            self.target,
            match answer {
                Response::Append(r) => Some(r),
                _ => None,
            },
        )
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        // Concurrent catch-ups are capped node-wide: a chunk waits for a permit within its
        // deadline, else the attempt fails as if the peer were unreachable and openraft
        // tries again later.
        let permit = tokio::time::timeout(option.hard_ttl(), SNAPSHOT_SENDS.acquire())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| unreachable(io::Error::other("snapshot sends at their cap")))?;
        let answer = self
            .link
            .call(self.group, Request::Snapshot(rpc), false, option.hard_ttl())
            .await
            .map_err(|e| self.call_failed(RPCTypes::InstallSnapshot, option.hard_ttl(), e))?;
        drop(permit);
        answered(
            self.target,
            match answer {
                Response::Snapshot(r) => Some(r),
                _ => None,
            },
        )
    }

    /// A chunk at a time as openraft would, but the last chunk — answered once the follower
    /// installed the whole image — is given as long as a large stream's install needs
    /// (`snapshot_send.rs`).
    async fn full_snapshot(
        &mut self,
        vote: Vote<NodeId>,
        snapshot: Snapshot<TypeConfig>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let chunk = option
            .snapshot_chunk_size()
            .unwrap_or(super::snapshot_file::FRAME_BYTES);
        let deadlines = snapshot_send::Deadlines::new(option.hard_ttl());
        let _sending = self.sending.begin(self.group);
        snapshot_send::send(self, vote, snapshot, cancel, deadlines, chunk).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let answer = self
            .link
            .call(self.group, Request::Vote(rpc), false, option.hard_ttl())
            .await
            .map_err(|e| self.call_failed(RPCTypes::Vote, option.hard_ttl(), e))?;
        answered(
            self.target,
            match answer {
                Response::Vote(r) => Some(r),
                _ => None,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::{timing, Command};

    async fn three_nodes() -> Vec<Arc<MuxNode>> {
        let mut nodes = Vec::new();
        for id in 1..=3 {
            let addr: SocketAddr = "127.0.0.1:0".parse().expect("address");
            nodes.push(
                MuxNode::bind(id, addr, timing::raft_config("test"))
                    .await
                    .expect("bind"),
            );
        }
        nodes
    }

    /// A peer that dies (its process killed: the kernel closes its end) after the link
    /// connected: a call made afterwards fails at once, not at its deadline. Before, the
    /// link wrote it into the dead socket and it waited the whole deadline — a proposal
    /// forwarded to a killed leader held its stream for 3 s.
    #[tokio::test]
    async fn a_call_to_a_peer_that_closed_its_connection_fails_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let peer = tokio::spawn(async move {
            let (conn, _) = listener.accept().await.expect("accept");
            drop(listener);
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(conn);
        });
        let link = PeerLink::start(addr, Arc::new(AddressBook::default()));
        peer.await.expect("peer");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let answer = link
            .call(7, Request::ReadIndex, false, Duration::from_secs(10))
            .await;
        assert!(answer.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "failed only after {:?}",
            started.elapsed()
        );
    }

    /// A peer that is connected but answers too late: openraft is told the append timed out
    /// (it sends the next one at once), not that the peer is unreachable (it would send that
    /// follower nothing for 500 ms). A peer nobody listens for is still unreachable.
    #[tokio::test]
    async fn a_late_answer_is_a_timeout_and_no_listener_is_unreachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        // Accepts and reads, never answers.
        let peer = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.expect("accept");
            let mut sink = Vec::new();
            let _ = conn.read_to_end(&mut sink).await;
        });
        let mut network = GroupNetwork {
            me: 1,
            group: 7,
            links: Arc::default(),
            book: Arc::default(),
            sending: Arc::default(),
        };
        let heartbeat = || AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: Vec::new(),
        };
        let option = RPCOption::new(Duration::from_millis(100));
        let mut client = network.new_client(2, &BasicNode::new(addr)).await;
        match client.append_entries(heartbeat(), option.clone()).await {
            Err(RPCError::Timeout(t)) => {
                assert_eq!((t.id, t.target, t.action), (1, 2, RPCTypes::AppendEntries));
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        peer.abort();

        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let nobody = closed.local_addr().expect("addr").to_string();
        drop(closed);
        let mut client = network.new_client(3, &BasicNode::new(nobody)).await;
        // Long enough for the link's dial to fail first, whenever the call comes.
        let option = RPCOption::new(Duration::from_secs(5));
        assert!(matches!(
            client.append_entries(heartbeat(), option).await,
            Err(RPCError::Unreachable(_))
        ));
    }

    /// Node 1 alone, on a free loopback port.
    async fn one_node() -> Arc<MuxNode> {
        MuxNode::bind(
            1,
            "127.0.0.1:0".parse().expect("addr"),
            timing::raft_config("t"),
        )
        .await
        .expect("bind")
    }

    fn members(nodes: &[Arc<MuxNode>]) -> BTreeMap<NodeId, BasicNode> {
        nodes
            .iter()
            .map(|n| (n.id(), BasicNode::new(n.addr())))
            .collect()
    }

    async fn leader_of(raft: &Raft, not: Option<NodeId>) -> NodeId {
        let metrics = raft
            .wait(Some(Duration::from_secs(20)))
            .metrics(
                |m| m.current_leader.is_some() && m.current_leader != not,
                "a leader",
            )
            .await
            .expect("leader elected");
        metrics.current_leader.expect("leader")
    }

    /// Groups spread over three nodes on loopback elect leaders, replicate a write to every
    /// member, and elect a new leader when the old one's node stops.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn groups_elect_replicate_and_fail_over() {
        let nodes = three_nodes().await;
        let all = members(&nodes);
        const GROUPS: u64 = 6;
        for group in 0..GROUPS {
            for (i, node) in nodes.iter().enumerate() {
                let propose = group % 3 == i as u64;
                node.add_group(group, propose.then(|| all.clone()))
                    .await
                    .expect("group");
            }
        }
        for group in 0..GROUPS {
            let raft = nodes[0].group(group).expect("hosted");
            let leader = leader_of(&raft, None).await;
            let leader_raft = nodes[leader as usize - 1].group(group).expect("hosted");
            let written = leader_raft
                .client_write(Command(b"hello".to_vec().into()))
                .await
                .expect("write commits");
            assert_eq!(written.data.applied, 1);
            let index = written.log_id.index;
            for node in &nodes {
                node.group(group)
                    .expect("hosted")
                    .wait(Some(Duration::from_secs(10)))
                    .applied_index_at_least(Some(index), "applied everywhere")
                    .await
                    .expect("every member applies the write");
            }
        }
        // Stop the node leading group 0; the other two elect one of themselves and commit.
        let raft = nodes[0].group(0).expect("hosted");
        let old = leader_of(&raft, None).await;
        nodes[old as usize - 1].shutdown().await;
        let survivor = nodes.iter().find(|n| n.id() != old).expect("survivor");
        let raft = survivor.group(0).expect("hosted");
        let new = leader_of(&raft, Some(old)).await;
        assert_ne!(new, old);
        let written = nodes[new as usize - 1]
            .group(0)
            .expect("hosted")
            .client_write(Command(b"after".to_vec().into()))
            .await
            .expect("write commits on the remaining quorum");
        assert_eq!(written.data.applied, 2);
    }

    /// A group on three nodes' sealed logs keeps every committed entry through a restart of
    /// the whole cluster: the new leader applies all of them again, from disk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_whole_cluster_restart_keeps_committed_entries_in_the_sealed_logs() {
        use crate::consensus::sealed_log::SealedLog;
        use crate::crypto::{SealKey, Secret};
        let dirs: Vec<tempfile::TempDir> = (0..3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let key = || SealKey::new(Secret::new([42u8; 32]));
        let name_key = || Secret::new([1u8; 32]);
        let mut addrs = Vec::new();
        {
            let nodes = three_nodes().await;
            let all = members(&nodes);
            let mut logs = Vec::new();
            for (i, node) in nodes.iter().enumerate() {
                addrs.push(node.addr());
                let log = SealedLog::open(dirs[i].path(), name_key(), Vec::new()).expect("open");
                let group_log = log.group(1, key());
                node.add_group_on(
                    1,
                    group_log,
                    CountingMachine::new(),
                    (i == 0).then(|| all.clone()),
                )
                .await
                .expect("group");
                logs.push(log);
            }
            let raft = nodes[0].group(1).expect("hosted");
            let leader = leader_of(&raft, None).await;
            let leader_raft = nodes[leader as usize - 1].group(1).expect("hosted");
            for n in 0..5u8 {
                leader_raft
                    .client_write(Command(vec![n].into()))
                    .await
                    .expect("commits");
            }
            for node in &nodes {
                node.shutdown().await;
            }
        }
        let mut nodes = Vec::new();
        let mut logs = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let node = MuxNode::bind(i as u64 + 1, *addr, timing::raft_config("test"))
                .await
                .expect("bind the same address again");
            let log =
                SealedLog::open(dirs[i].path(), name_key(), vec![(1, key())]).expect("reopen");
            let group_log = log.existing_group(1).expect("group on disk");
            node.add_group_on(1, group_log, CountingMachine::new(), None)
                .await
                .expect("group");
            nodes.push(node);
            logs.push(log);
        }
        let raft = nodes[0].group(1).expect("hosted");
        let leader = leader_of(&raft, None).await;
        let written = nodes[leader as usize - 1]
            .group(1)
            .expect("hosted")
            .client_write(Command(b"after restart".to_vec().into()))
            .await
            .expect("commits after the restart");
        assert_eq!(
            written.data.applied, 6,
            "the five entries came back from disk"
        );
    }

    /// A follower taking a snapshot whose chunks come further apart than its election timeout
    /// (a large image from a busy leader), and whose install then takes longer than that
    /// timeout too, keeps following: each chunk restarts its election timer, and the last
    /// one keeps restarting it until the install is done. openraft 0.9 restarts it on
    /// appends only, so without `receive_chunk`'s empty appends the follower stood for
    /// election mid-transfer, deposed the leader sending it, and the next leader started the
    /// transfer over (a 1 GiB catch-up never finished); and during a long install it stood
    /// once (the group leaderless ~1.3 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_further_apart_than_the_election_timeout_keep_the_follower_following() {
        use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
        use openraft::{SnapshotMeta, StoredMembership};
        let node = one_node().await;
        let machine = CountingMachine::new().installs_take(Duration::from_secs(3));
        let raft = node
            .add_group_on(7, MemLog::new(), machine.clone(), None)
            .await
            .expect("group");
        // A leader elsewhere (node 2, term 3) makes this node one of three voters: from here
        // on, a second without an append makes it a candidate.
        let voters: std::collections::BTreeSet<NodeId> = (1..=3).collect();
        let nodes: BTreeMap<NodeId, BasicNode> = voters
            .iter()
            .map(|id| (*id, BasicNode::new("127.0.0.1:9")))
            .collect();
        let membership = Membership::new(vec![voters], nodes);
        let leader = Vote::new_committed(3, 2);
        let first = LogId::new(CommittedLeaderId::new(3, 2), 0);
        let appended = raft
            .append_entries(AppendEntriesRequest {
                vote: leader,
                prev_log_id: None,
                leader_commit: Some(first),
                entries: vec![Entry {
                    log_id: first,
                    payload: EntryPayload::Membership(membership.clone()),
                }],
            })
            .await
            .expect("append");
        assert!(appended.is_success(), "{appended:?}");
        let meta = SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(3, 2), 100)),
            last_membership: StoredMembership::new(Some(first), membership),
            snapshot_id: "slow".into(),
        };
        // Nine chunks 400 ms apart (3.6 s, over three election timeouts), then an install
        // of 3 s: the snapshot's bytes, padded (JSON allows trailing blanks).
        let mut image = crate::consensus::memory::count_snapshot(5);
        image.resize(9 * 1024, b' ');
        let chunks: Vec<&[u8]> = image.chunks(1024).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let answer = receive_chunk(
                &raft,
                InstallSnapshotRequest {
                    vote: leader,
                    meta: meta.clone(),
                    offset: (i * 1024) as u64,
                    data: chunk.to_vec(),
                    done: i + 1 == chunks.len(),
                },
            )
            .await
            .expect("chunk taken");
            assert_eq!(
                answer.vote, leader,
                "chunk {i} answered under the leader's vote"
            );
            let m = raft.metrics().borrow().clone();
            assert_eq!(
                (m.current_term, m.state),
                (3, openraft::ServerState::Follower),
                "after chunk {i}, the follower must not have stood for election"
            );
        }
        assert_eq!(machine.applied(), 5, "the snapshot was installed");
    }

    #[test]
    fn frames_round_trip_and_oversized_lengths_are_refused() {
        let frame = Frame {
            calls: vec![(
                7,
                3,
                Request::Vote(VoteRequest::new(openraft::Vote::new(2, 1), None)),
            )],
            answers: vec![(9, Response::NoGroup)],
        };
        let bytes = encode(&frame).expect("encodes");
        let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
        assert_eq!(len, bytes.len() - 4);
        let back: Frame = codec::decode(&bytes[4..]).expect("decodes");
        assert_eq!(back.calls.len(), 1);
        assert_eq!(back.calls[0].0, 7);
        assert_eq!(back.calls[0].1, 3);
        assert!(matches!(back.answers[0].1, Response::NoGroup));
    }

    /// A peer that announces a frame over the limit is cut off instead of being allocated for.
    #[tokio::test]
    async fn an_oversized_frame_closes_the_connection() {
        let node = one_node().await;
        let mut peer = TcpStream::connect(node.addr()).await.expect("connect");
        let len = (MAX_FRAME as u32 + 1).to_le_bytes();
        peer.write_all(&len).await.expect("write");
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), peer.read(&mut buf))
            .await
            .expect("closed in time");
        assert!(matches!(read, Ok(0) | Err(_)), "connection closed");
    }
}
