//! Raft timing. nats-server heartbeats every second and elects within 4–9 s (spec cluster.md
//! 7.1), which already exceeds the 5 s every client waits; we want one failure to finish well
//! inside one client timeout: heartbeats every 250 ms and an election after 0.8–1 s of silence.
//!
//! Why so narrow a range: openraft 0.9 gives a leader a lease as long as the longest election
//! timeout, and a follower refuses to vote while the lease it last saw runs. So a candidate's
//! first election (at 0.8–1 s) is nearly always refused and its second (at 1.6–2 s) wins:
//! measured failover (kill -9 of a stream leader to the next PubAck) was 3.6 s p50 / 6.1 s
//! max with 1–2 s, over the 3 s bound.

use std::sync::Arc;

/// How often a leader reminds followers it is alive.
pub const HEARTBEAT_MS: u64 = 250;
/// A follower that hears nothing for a random time in this range stands for election.
pub const ELECTION_MIN_MS: u64 = 800;
/// Upper end of the election timeout range.
pub const ELECTION_MAX_MS: u64 = 1_000;

/// Entries per append request (a catching-up follower gets its log in runs of this many).
pub const MAX_ENTRIES_PER_APPEND: u64 = 32;

/// Entries already covered by a snapshot that a group's log keeps.
pub const SNAPSHOT_LOG_KEPT: u64 = 128;

/// How long a follower may take to answer one chunk of a snapshot. The last chunk, answered
/// once the follower installed the whole image, gets more by the snapshot's size
/// (`snapshot_send.rs`).
pub const INSTALL_SNAPSHOT_MS: u64 = 10_000;

/// openraft's configuration with our timing and bounds, validated.
pub fn raft_config(cluster_name: &str) -> Arc<openraft::Config> {
    let config = openraft::Config {
        cluster_name: cluster_name.to_string(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_MIN_MS,
        election_timeout_max: ELECTION_MAX_MS,
        // Stream groups ask for their snapshots themselves, by the log's size against the
        // state's (consensus/machine.rs), or when their old entries keep the node's log from
        // shrinking (server/jetstream/cluster/reclaim.rs).
        snapshot_policy: openraft::SnapshotPolicy::Never,
        // Entries already in a snapshot kept for followers a little behind (more than this
        // and they are sent the snapshot).
        max_in_snapshot_log_to_keep: SNAPSHOT_LOG_KEPT,
        // A chunk's deadline (openraft's 200 ms is short for a 1 MiB chunk on a busy node);
        // the last chunk's grows with the snapshot (`snapshot_send.rs`).
        install_snapshot_timeout: INSTALL_SNAPSHOT_MS,
        // A replicated stream's entry is a whole round of publishes (up to a few hundred
        // KiB): openraft's default of 300 per append would make catch-up frames of ~100 MiB,
        // over the transport's frame limit.
        max_payload_entries: MAX_ENTRIES_PER_APPEND,
        // A snapshot is sent a frame of its file at a time: a chunk sent again then starts
        // where a receiver can take its frames back (consensus/snapshot_file.rs).
        snapshot_max_chunk_size: super::snapshot_file::FRAME_BYTES as u64,
        ..Default::default()
    };
    // The three numbers above satisfy openraft's rules (min < max, heartbeat < min); a test
    // checks it, so validation cannot fail here.
    Arc::new(config.validate().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_passes_openraft_validation() {
        let config = openraft::Config {
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_MIN_MS,
            election_timeout_max: ELECTION_MAX_MS,
            ..Default::default()
        };
        assert!(config.validate().is_ok());
        assert_eq!(raft_config("C1").heartbeat_interval, HEARTBEAT_MS);
    }
}
