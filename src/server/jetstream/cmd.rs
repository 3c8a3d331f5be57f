//! What a stream's thread is asked to do ([`Cmd`]), and how much of its bounded intake each
//! command uses. A leaf: the dispatcher, the API thread, monitoring, the store threads and the
//! stream workers all speak it, and it depends on none of them.

use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;

use bytes::Bytes;

use crate::consensus::machine::{ImageSink, ImageSource};
use crate::consensus::mux::ProposeError;
use crate::jetstream::api::types::StreamInfo;
use crate::jetstream::api::{ApiCall, ApiError};
use crate::jetstream::config::StreamConfig;
use crate::jetstream::stream::Incoming;
use crate::server::backpressure::{INTAKE_REFUSED, MIN_COMMAND_COST};
use crate::store::file_store::{ResealedSegment, SegmentReseal};

use super::round::{Round, Sourced};

/// What a stream thread is asked to do.
pub(crate) enum Cmd {
    /// A message published on one of the stream's subjects.
    Publish(Incoming),
    /// A stream-scoped API call.
    Api {
        call: ApiCall,
        reply: String,
        headers: Option<Bytes>,
        payload: Bytes,
    },
    /// An ack.
    Ack {
        subject: String,
        reply: Option<String>,
        payload: Bytes,
    },
    /// A flow-control reply.
    FlowControl { subject: String },
    /// A replicated stream's read (`STREAM.MSG.GET`) whose read index this replica has
    /// applied: answered from its state, never replicated (see `AccountJs::linearizable_read`).
    /// Not counted against the intake (reads in flight have their own bound).
    Read {
        call: ApiCall,
        reply: String,
        payload: Bytes,
    },
    /// Stream info for `STREAM.LIST` / create replies.
    Info(SyncSender<StreamInfo>),
    /// A validated config update; answers with the info or the error.
    Update(Box<StreamConfig>, SyncSender<Result<StreamInfo, ApiError>>),
    /// Publish a fresh [`Published`] snapshot at the end of this round, then signal.
    Snapshot(std::sync::mpsc::SyncSender<()>),
    /// The stream is being deleted: every consumer's waiting pull requests end with
    /// `409 Consumer Deleted`, as when the consumer itself is deleted. A `Stop` follows,
    /// unless the stream's keys were erased already: then it only rings the thread, which
    /// finds the stream erased and removes it.
    EndPulls,
    /// An origin this stream copies from stored something (see `sourcing`).
    SourceReady,
    /// A replicated stream: a batch its leader read from an origin, applied from the log.
    Sourced(Box<Sourced>),
    /// A copier on another server asks this stream (its origin) for its next batch
    /// (`origin_read`): answered to `reply` from this replica's state.
    SourceRead { reply: String, payload: Bytes },
    /// The answer to this stream's read of a remote origin (`origin_read`).
    OriginAnswer {
        mirror: bool,
        origin: String,
        nonce: String,
        body: Bytes,
    },
    /// The server is stopping: waiting pull requests end with `409 Server Shutdown` (before
    /// the clients' connections close); signal when those are routed.
    EndPullsForShutdown(SyncSender<()>),
    /// Stop: close the store, persist consumers; signal when done.
    Stop(Option<SyncSender<()>>),
    /// A replicated stream: a committed round, to run now; signal when it ran.
    Apply(Box<Round>, tokio::sync::oneshot::Sender<()>),
    /// A replicated stream: its whole state as an image (for its group's snapshot), made
    /// after every round applied before this command.
    /// The image is written into the sink (a new snapshot file), which is given back.
    TakeImage(
        ImageSink,
        tokio::sync::oneshot::Sender<Result<ImageSink, String>>,
    ),
    /// One step of re-sealing the stream's files under a new data key
    /// (`server/jetstream/rekey.rs`).
    Reseal(ResealStep),
    /// A replicated stream: replace the state with an image (a stored snapshot at start, or
    /// the leader's when this replica was too far behind); signal when done.
    /// The image is read from the stored snapshot as it is installed.
    InstallImage(
        ImageSource,
        tokio::sync::oneshot::Sender<Result<(), String>>,
    ),
    /// A replicated stream: the outcome of this replica's proposal in flight.
    Proposed(Result<u64, ProposeError>),
    /// A replicated stream: this node now leads its group (the advisory goes out).
    LeaderElected,
    /// A replicated stream: this node leads its group but has no quorum (the advisory goes
    /// out).
    QuorumLost,
}

/// What a command counts against its stream's intake budget: its bytes, at least
/// [`MIN_COMMAND_COST`] (control commands: nothing).
pub(crate) fn cmd_size(c: &Cmd) -> usize {
    let bytes = match c {
        Cmd::Publish(m) => m.size(),
        Cmd::Api {
            reply,
            headers,
            payload,
            ..
        } => 64 + reply.len() + headers.as_ref().map_or(0, Bytes::len) + payload.len(),
        Cmd::Ack {
            subject,
            reply,
            payload,
        } => subject.len() + reply.as_ref().map_or(0, String::len) + payload.len(),
        Cmd::FlowControl { subject } => subject.len(),
        Cmd::SourceRead { reply, payload } => reply.len() + payload.len(),
        Cmd::Read { .. }
        | Cmd::Info(_)
        | Cmd::Update(..)
        | Cmd::Snapshot(_)
        | Cmd::EndPulls
        | Cmd::SourceReady
        | Cmd::Sourced(_)
        | Cmd::OriginAnswer { .. }
        | Cmd::EndPullsForShutdown(_)
        | Cmd::Stop(_)
        | Cmd::Apply(..)
        | Cmd::TakeImage(..)
        | Cmd::Reseal(_)
        | Cmd::InstallImage(..)
        | Cmd::Proposed(_)
        | Cmd::LeaderElected
        | Cmd::QuorumLost => return 0,
    };
    bytes.max(MIN_COMMAND_COST)
}

/// The steps of re-sealing one stream, each taken by the stream's thread between rounds;
/// the segments are rewritten in between, on the re-sealer's thread.
pub(crate) enum ResealStep {
    /// Rotate the data key (`rotate`; else keep the current one, to finish an interrupted
    /// re-sealing); answered with the segments to rewrite.
    Begin {
        rotate: bool,
        done: SyncSender<Result<ResealPlan, String>>,
    },
    /// Put one rewritten segment in place of its original (`false`: it went meanwhile).
    Install {
        copy: ResealedSegment,
        done: SyncSender<Result<bool, String>>,
    },
    /// Every segment rewritten: seal the consumers' states again and destroy the older keys;
    /// answered with the outcome.
    Finish {
        plan: ResealDone,
        done: SyncSender<Result<serde_json::Value, String>>,
    },
}

/// What [`ResealStep::Begin`] answers.
pub(crate) struct ResealPlan {
    /// The data key version the stream is re-sealed under.
    pub(crate) version: u32,
    /// The key versions the stream held before.
    pub(crate) before: Vec<u32>,
    /// The segments to rewrite.
    pub(crate) segments: Vec<SegmentReseal>,
}

/// What [`ResealStep::Finish`] is told.
pub(crate) struct ResealDone {
    /// The data key version the stream was re-sealed under.
    pub(crate) version: u32,
    /// The key versions the stream held before.
    pub(crate) before: Vec<u32>,
    /// Segments rewritten and put in place.
    pub(crate) segments: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
}

/// Counts (and, sparingly, logs) a command refused by a full queue.
pub(crate) fn refused(queue: &str) {
    let n = INTAKE_REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            queue,
            refused = n,
            "a queue at its hard capacity refused a command"
        );
    }
}
