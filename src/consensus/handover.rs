//! Leadership handover: how a group's leader steps down (`$JS.API.STREAM.LEADER.STEPDOWN`).
//!
//! Why this way: openraft 0.9 has no leadership transfer, and its leader lease makes every
//! voter refuse a vote for as long as the longest election timeout after it last heard the
//! leader ([`super::timing`]). So a leader cannot hand over at once; it falls silent instead:
//!
//! 1. The stepdown is an entry of the group's own log, so every replica learns it — and who
//!    is to lead next, the same choice everywhere — when it applies it.
//! 2. The leader sends one more heartbeat (the followers learn the entry is committed), then
//!    stops heartbeats and elections and refuses proposals ([`HandoverGate`]: proposers
//!    retry, as they do while a group has no leader) until another node leads, or at most
//!    [`HOLD`].
//! 3. The next leader stands for election once every lease has run out ([`CAMPAIGN_AFTER`]);
//!    the other followers hold their own elections back for [`HOLD`], so it is the only
//!    candidate. If it fails (down, or behind), elections resume as usual after [`HOLD`].
//!
//! Writes pause for about [`CAMPAIGN_AFTER`] plus one election round; nothing acknowledged is
//! at risk, since this only changes who leads.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::timing::{ELECTION_MAX_MS, HEARTBEAT_MS};
use super::GroupId;

/// Longest a stepping-down leader stays silent, and the other followers hold back.
pub const HOLD: Duration = Duration::from_millis(3 * ELECTION_MAX_MS);
/// When the chosen node stands for election after the stepdown applied: past the lease the
/// last heartbeat gave (the longest election timeout), with room for that heartbeat's linger.
pub const CAMPAIGN_AFTER: Duration = Duration::from_millis(ELECTION_MAX_MS + HEARTBEAT_MS);
/// How long a leader keeps leading after applying a stepdown, so that the heartbeat telling
/// followers it is committed leaves first (a heartbeat may linger 20 ms in the transport).
pub const SETTLE: Duration = Duration::from_millis(60);

/// Groups whose leader on this node is stepping down: proposals are refused until the
/// deadline (or until released).
#[derive(Default)]
pub(crate) struct HandoverGate {
    until: Mutex<HashMap<GroupId, Instant>>,
}

impl HandoverGate {
    /// Whether proposals to `group` are refused now.
    pub(crate) fn holding(&self, group: GroupId) -> bool {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        match until.get(&group) {
            Some(t) if *t > Instant::now() => true,
            Some(_) => {
                until.remove(&group);
                false
            }
            None => false,
        }
    }

    pub(crate) fn hold(&self, group: GroupId, for_: Duration) {
        self.until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group, Instant::now() + for_);
    }

    pub(crate) fn release(&self, group: GroupId) {
        self.until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_hold_ends_at_its_deadline_or_when_released() {
        let gate = HandoverGate::default();
        assert!(!gate.holding(1));
        gate.hold(1, Duration::from_secs(2));
        gate.hold(2, Duration::from_secs(2));
        assert!(gate.holding(1) && gate.holding(2));
        gate.release(2);
        assert!(!gate.holding(2));
        tokio::time::advance(Duration::from_millis(2_001)).await;
        assert!(!gate.holding(1));
        assert!(
            CAMPAIGN_AFTER < HOLD,
            "the chosen node campaigns while others hold back"
        );
    }
}
