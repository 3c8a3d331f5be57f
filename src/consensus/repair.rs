//! The needs-repair state: what a node whose Raft log failed authentication may still do.
//!
//! Why: Raft's safety rests on every voter remembering what it acknowledged and whom it voted
//! for. A node whose log was damaged (a flipped bit, a record that no longer authenticates)
//! has forgotten both. If it voted as usual it could elect a candidate that lacks entries a
//! quorum — itself included — once acknowledged: that is how nats-server lost acknowledged
//! writes to a single corrupted minority node in Jepsen's 2025 analysis.
//!
//! So the node starts again from an empty log (the damaged segments are set aside, still
//! sealed) with every group it hosts *under repair*: it does not start elections and refuses
//! every vote request, and takes appends from the group's leader like a new member (it asks
//! the leader for a no-op entry now and then, [`super::Command::nudge`], because openraft 0.9's
//! leader starts sending a follower older entries only when an append conflicts). A group
//! leaves repair once this node has applied its log up to the commit index of the first
//! leader it heard from after the damage — by then it holds again every entry committed
//! before the damage (a leader holds every committed entry), and its vote has been set by that
//! leader's term. Groups the node starts hosting while its *anchor* group (the meta group,
//! whose log says which other groups exist) is still under repair start under repair too.
//!
//! What this does not cover (docs/cluster.md): a deposed leader that reaches the damaged node
//! before the current one does could count its acknowledgement, because the node no longer
//! knows the newer term; and a truncation that ends exactly on a record boundary looks like a
//! clean end of log and is not detected.

use std::collections::HashMap;
use std::sync::Mutex;

use super::GroupId;

/// Which groups of this node are under repair, and how far each must catch up.
#[derive(Default)]
pub(crate) struct RepairGate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// While set, groups added start under repair; cleared when this group is repaired.
    anchor: Option<GroupId>,
    /// Groups under repair: the commit index of the first leader heard (`None`: none yet).
    groups: HashMap<GroupId, Option<u64>>,
}

impl RepairGate {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node's log was damaged: groups added from now on start under repair, until
    /// `anchor` has been repaired.
    pub(crate) fn begin(&self, anchor: GroupId) {
        self.state().anchor = Some(anchor);
    }

    /// Whether any group of this node is under repair (or will start so).
    pub(crate) fn is_repairing(&self) -> bool {
        let s = self.state();
        s.anchor.is_some() || !s.groups.is_empty()
    }

    /// `group` is being added to this node: whether it starts under repair.
    pub(crate) fn enter(&self, group: GroupId) -> bool {
        let mut s = self.state();
        if s.anchor.is_some() {
            s.groups.insert(group, None);
            true
        } else {
            false
        }
    }

    /// Whether `group` is under repair here (no votes, no elections).
    pub(crate) fn under_repair(&self, group: GroupId) -> bool {
        self.state().groups.contains_key(&group)
    }

    /// A leader's append reached `group`, saying it has committed up to `leader_commit`: the
    /// first such index is what the group must catch up to.
    pub(crate) fn heard_leader(&self, group: GroupId, leader_commit: Option<u64>) {
        if let Some(target) = self.state().groups.get_mut(&group) {
            if target.is_none() {
                *target = Some(leader_commit.unwrap_or(0));
            }
        }
    }

    /// `group` has applied up to `applied` here: true when that ends its repair (it had heard
    /// a leader and has applied that leader's commit index).
    pub(crate) fn caught_up(&self, group: GroupId, applied: Option<u64>) -> bool {
        let mut s = self.state();
        let done = match s.groups.get(&group) {
            Some(Some(target)) => applied.unwrap_or(0) >= *target,
            _ => false,
        };
        if done {
            s.groups.remove(&group);
            if s.anchor == Some(group) {
                s.anchor = None;
            }
        }
        done
    }

    /// The groups under repair now.
    pub(crate) fn groups(&self) -> Vec<GroupId> {
        self.state().groups.keys().copied().collect()
    }

    /// `group` is no longer hosted here.
    pub(crate) fn forget(&self, group: GroupId) {
        self.state().groups.remove(&group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_added_before_the_anchor_is_repaired_start_under_repair() {
        let gate = RepairGate::default();
        assert!(
            !gate.enter(7),
            "a healthy node's groups are never under repair"
        );
        gate.begin(0);
        assert!(gate.enter(0));
        assert!(gate.enter(5));
        assert!(gate.is_repairing());
        gate.heard_leader(0, Some(3));
        assert!(gate.caught_up(0, Some(3)));
        assert!(
            !gate.enter(9),
            "after the anchor, new groups are new to this node"
        );
        assert!(gate.under_repair(5) && !gate.under_repair(9));
        assert!(gate.is_repairing(), "group 5 still is");
    }

    #[test]
    fn a_group_is_repaired_only_once_it_applied_the_first_leaders_commit_index() {
        let gate = RepairGate::default();
        gate.begin(0);
        gate.enter(0);
        assert!(!gate.caught_up(0, Some(100)), "no leader heard yet");
        gate.heard_leader(0, Some(40));
        gate.heard_leader(0, Some(90));
        assert!(!gate.caught_up(0, Some(39)));
        assert!(
            gate.caught_up(0, Some(40)),
            "the first leader's index is the target"
        );
        assert!(!gate.is_repairing());
    }

    #[test]
    fn a_leader_that_committed_nothing_ends_the_repair_at_once() {
        let gate = RepairGate::default();
        gate.begin(0);
        gate.enter(0);
        gate.heard_leader(0, None);
        assert!(gate.caught_up(0, None));
    }
}
