//! What a stream's thread is asked to do ([`Cmd`]), and how much of its bounded intake each
//! command uses. A leaf: the dispatcher, the API thread, monitoring and the stream thread all
//! speak it, and it depends on none of them.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::jetstream::api::{ApiCall, ApiError};
use crate::jetstream::config::StreamConfig;
use crate::jetstream::stream::Incoming;
use crate::server::backpressure::{Budget, INTAKE_REFUSED, MIN_COMMAND_COST};

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

/// What a command counts against its stream's intake budget: its bytes, at least
/// [`MIN_COMMAND_COST`] (control commands: nothing).
pub(crate) fn cmd_size(c: &Cmd) -> usize {
    let bytes = match c {
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
        Cmd::Info(_) | Cmd::Update(..) | Cmd::Snapshot(_) | Cmd::Stop(_) => return 0,
    };
    bytes.max(MIN_COMMAND_COST)
}

/// Queues `cmd` for a stream, counted against its intake `budget`. Returns the budget when it
/// is now over its bound: the connection that published the command waits for room before
/// reading more (`server/backpressure.rs`); stream and API threads ignore it.
///
/// Never waits: a queue at its hard capacity
/// ([`STREAM_QUEUE_CAPACITY`](crate::server::backpressure::STREAM_QUEUE_CAPACITY)) refuses the command
/// (see there).
pub(crate) fn send_counted(
    tx: &SyncSender<Cmd>,
    budget: &Arc<Budget>,
    cmd: Cmd,
) -> Option<Arc<Budget>> {
    let size = cmd_size(&cmd);
    let over = budget.take(size);
    match tx.try_send(cmd) {
        Ok(()) => over.then(|| Arc::clone(budget)),
        Err(TrySendError::Disconnected(_)) => {
            budget.give_back(size);
            None
        }
        Err(TrySendError::Full(_)) => {
            budget.give_back(size);
            refused("stream");
            Some(Arc::clone(budget))
        }
    }
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

/// What one queued publish counts against its stream's intake budget.
pub(crate) fn intake_size(m: &Incoming) -> usize {
    m.subject.len()
        + m.reply.as_ref().map_or(0, String::len)
        + m.headers.as_ref().map_or(0, Bytes::len)
        + m.payload.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fc() -> Cmd {
        Cmd::FlowControl {
            subject: "$JS.FC.S.x.y".into(),
        }
    }

    #[test]
    fn small_commands_cost_the_minimum_and_a_full_queue_refuses_without_waiting() {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let budget = Budget::new(10 * MIN_COMMAND_COST);
        assert_eq!(cmd_size(&fc()), MIN_COMMAND_COST);
        assert!(send_counted(&tx, &budget, fc()).is_none());
        let before = INTAKE_REFUSED.load(Ordering::Relaxed);
        // The queue holds one: the second is refused (counted), never waited for.
        assert!(send_counted(&tx, &budget, fc()).is_some());
        assert!(INTAKE_REFUSED.load(Ordering::Relaxed) > before);
        assert_eq!(budget.pending(), MIN_COMMAND_COST);
        let got = rx.try_recv().unwrap();
        budget.give_back(cmd_size(&got));
        assert_eq!(budget.pending(), 0);
    }
}
