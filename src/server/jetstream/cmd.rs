//! What a stream's thread is asked to do ([`Cmd`]), and how much of its bounded intake each
//! command uses. A leaf: the dispatcher, the API thread, monitoring and the stream thread all
//! speak it, and it depends on none of them.

use std::sync::mpsc::{Sender, SyncSender};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::jetstream::api::{ApiCall, ApiError};
use crate::jetstream::config::StreamConfig;
use crate::jetstream::stream::Incoming;
use crate::server::backpressure::Budget;

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
    /// Stream info for `STREAM.LIST` / create replies.
    Info(SyncSender<Value>),
    /// A validated config update; answers with the info or the error.
    Update(Box<StreamConfig>, SyncSender<Result<Value, ApiError>>),
    /// Publish a fresh [`Published`] snapshot at the end of this round, then signal.
    Snapshot(std::sync::mpsc::SyncSender<()>),
    /// Stop: close the store, persist consumers; signal when done.
    Stop(Option<SyncSender<()>>),
}

/// What a command counts against its stream's intake budget (control commands: nothing).
pub(crate) fn cmd_size(c: &Cmd) -> usize {
    match c {
        Cmd::Publish(m) => intake_size(m),
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
        Cmd::Info(_) | Cmd::Update(..) | Cmd::Snapshot(_) | Cmd::Stop(_) => 0,
    }
}

/// Queues `cmd` for a stream, counted against its intake `budget`. Returns the budget when it
/// is now over its bound: the connection that published the command waits for room before
/// reading more (`server/backpressure.rs`); stream and API threads ignore it.
pub(crate) fn send_counted(
    tx: &Sender<Cmd>,
    budget: &Arc<Budget>,
    cmd: Cmd,
) -> Option<Arc<Budget>> {
    let size = cmd_size(&cmd);
    let over = budget.take(size);
    if tx.send(cmd).is_err() {
        budget.give_back(size);
        return None;
    }
    over.then(|| Arc::clone(budget))
}

/// What one queued publish counts against its stream's intake budget.
pub(crate) fn intake_size(m: &Incoming) -> usize {
    m.subject.len()
        + m.reply.as_ref().map_or(0, String::len)
        + m.headers.as_ref().map_or(0, Bytes::len)
        + m.payload.len()
}
