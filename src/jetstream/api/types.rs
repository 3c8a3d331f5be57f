//! The JetStream API's request and response bodies as serde types, field names as the
//! clients read and write them.
//!
//! The engine answers with these ([`StreamInfo`], [`ConsumerInfo`], ...) and reads requests
//! into them ([`StreamInfoRequest`], [`MsgGetRequest`]); the server serializes a reply once,
//! at the edge ([`super::ok_reply_typed`]), and monitoring reads the same values from the
//! snapshots streams publish — no JSON paths, no `serde_json::Value` walked by hand.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::super::config::{ConsumerConfig, StreamConfig};

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A stream's state (`state` in stream info).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StreamState {
    /// Messages stored.
    pub messages: u64,
    /// Bytes stored (nats-server's accounting of subject, headers and payload).
    pub bytes: u64,
    /// First sequence held (0 for a stream that never stored anything).
    pub first_seq: u64,
    /// Time of the first message, RFC 3339 with nanoseconds (the zero time when empty).
    pub first_ts: String,
    /// Last sequence assigned.
    pub last_seq: u64,
    /// Time of the last message.
    pub last_ts: String,
    /// Consumers on the stream.
    pub consumer_count: usize,
    /// Distinct subjects held (left out when 0, as nats-server does).
    #[serde(skip_serializing_if = "is_zero")]
    pub num_subjects: u64,
    /// Sequences inside the range that were deleted (left out when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub num_deleted: u64,
    /// Messages per subject, when the request asked with `subjects_filter`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subjects: Option<BTreeMap<String, u64>>,
    /// Deleted sequences inside the stream's range, when asked with `deleted_details`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Vec<u64>>,
}

/// Who leads a stream (`cluster` in `STREAM.INFO`; a single node leads its own). In a
/// cluster: the cluster's name, a replicated stream's group and its replicas (spec cluster.md
/// 4.5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterInfo {
    /// The cluster's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The replicated stream's Raft group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raft_group: Option<String>,
    /// The leader's server name (empty, and left out, while there is none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub leader: String,
    /// Since when the leader leads, as this server first saw it (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_since: Option<String>,
    /// The group's traffic is not the tenant's (true for every replicated group here: it
    /// runs on the servers' own Raft transport).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub system_account: bool,
    /// Which account nats-server would carry the group's traffic in: the system account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_account: Option<String>,
    /// The other replicas (all of them while there is no leader).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<PeerInfo>,
}

/// One replica as the stream's leader sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeerInfo {
    /// Its server name.
    pub name: String,
    /// Caught up and heard from recently.
    pub current: bool,
    /// Out of contact.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
    /// Nanoseconds since it was last heard from.
    pub active: u64,
    /// Entries it is behind.
    #[serde(skip_serializing_if = "is_zero")]
    pub lag: u64,
    /// Its peer id (8 characters from its name).
    pub peer: String,
}

/// Where a mirror or source stands (`mirror`, `sources[]` in stream info).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceInfo {
    /// The origin stream.
    pub name: String,
    /// The origin's account or domain, as configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<crate::jetstream::config::source::ExternalStream>,
    /// Origin messages not copied yet (from the origin's last sequence).
    pub lag: u64,
    /// The last origin sequence a source copied (sources only, as nats-server).
    #[serde(skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// Nanoseconds since the origin was last read, `-1` never.
    pub active: i64,
    /// As configured.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub filter_subject: String,
    /// As configured.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_transforms: Vec<crate::jetstream::config::source::SubjectTransformConfig>,
    /// Why copying does not go on (the origin is missing, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<super::ApiError>,
}

/// Stream info, as create, update, info and list replies carry it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamInfo {
    /// The configuration in force (normalised, defaults filled in).
    pub config: StreamConfig,
    /// When the stream was created.
    pub created: String,
    /// What it holds now.
    pub state: StreamState,
    /// Sent by `STREAM.INFO` only (nats-server leaves it out of create, update and list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
    /// How far the mirror has copied its origin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror: Option<SourceInfo>,
    /// How far each source has been copied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceInfo>,
    /// When this info was taken.
    pub ts: String,
    /// Set on the reply of a create that made the stream.
    #[serde(skip_serializing_if = "is_false")]
    pub did_create: bool,
}

/// A reply body with the paging keys nats-server puts on `STREAM.INFO` and the list calls.
#[derive(Debug, Clone, Serialize)]
pub struct Paged<T> {
    /// Items in all pages.
    pub total: usize,
    /// Index of this page's first item.
    pub offset: usize,
    /// Most items a page holds.
    pub limit: usize,
    /// The body the keys go with.
    #[serde(flatten)]
    pub body: T,
}

/// `STREAM.INFO`'s optional request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct StreamInfoRequest {
    /// Subjects to count messages for (`state.subjects`); empty = none.
    pub subjects_filter: Option<String>,
    /// List the deleted sequences (`state.deleted`).
    #[serde(deserialize_with = "crate::jetstream::config::null_as_default")]
    pub deleted_details: bool,
    /// The first of the matching subjects to list (pages of [`SUBJECTS_PAGE`]); the newer
    /// Python client sends `null` for none.
    #[serde(deserialize_with = "crate::jetstream::config::null_as_default")]
    pub offset: usize,
}

/// Most subjects one `STREAM.INFO` reply lists (as nats-server); clients page with `offset`.
pub const SUBJECTS_PAGE: usize = 100_000;

/// `STREAM.MSG.GET`'s request: one of `seq`, `last_by_subj`, or `next_by_subj` (from `seq`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct MsgGetRequest {
    /// The message at this sequence (or, with `next_by_subj`, where the search starts).
    pub seq: Option<u64>,
    /// The last message on this subject (wildcards allowed).
    pub last_by_subj: Option<String>,
    /// The first message at or after `seq` on this subject.
    pub next_by_subj: Option<String>,
}

/// `CONSUMER.RESET`'s optional request (ADR-60): `seq` 0 or absent means "one above the
/// ack floor".
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ConsumerResetRequest {
    /// The stream sequence the next delivery starts at (or after).
    pub seq: u64,
}

/// `CONSUMER.RESET`'s reply: the consumer's info after the reset, and where it now starts.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerResetReply {
    /// The consumer as it is after the reset.
    #[serde(flatten)]
    pub info: ConsumerInfo,
    /// The next delivered message has a stream sequence of at least this.
    pub reset_seq: u64,
}

/// A consumer's position (`delivered`, `ack_floor` in consumer info).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SequenceInfo {
    /// Consumer sequence.
    pub consumer_seq: u64,
    /// Stream sequence.
    pub stream_seq: u64,
    /// RFC 3339 with nanoseconds; absent until something was delivered (or acked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_active: Option<String>,
}

/// Consumer info, as create, info and list replies carry it.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerInfo {
    /// The stream the consumer reads.
    pub stream_name: String,
    /// The consumer's name.
    pub name: String,
    /// When it was created.
    pub created: String,
    /// The configuration in force.
    pub config: ConsumerConfig,
    /// The last delivery.
    pub delivered: SequenceInfo,
    /// Everything at or below this is acknowledged.
    pub ack_floor: SequenceInfo,
    /// Delivered and not yet acknowledged.
    pub num_ack_pending: usize,
    /// Pending messages delivered more than once (and those whose deliveries ran out).
    pub num_redelivered: usize,
    /// Pull requests waiting.
    pub num_waiting: usize,
    /// Matching messages not yet delivered.
    pub num_pending: u64,
    /// When this info was taken.
    pub ts: String,
    /// A push consumer with a subscriber on its deliver subject (left out of create replies).
    #[serde(skip_serializing_if = "is_false")]
    pub push_bound: bool,
    /// Delivery is paused (`CONSUMER.PAUSE`).
    #[serde(skip_serializing_if = "is_false")]
    pub paused: bool,
    /// Nanoseconds until a paused consumer resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_remaining: Option<i64>,
    /// Each priority group's state (ADR-42).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub priority_groups: Vec<PriorityGroupState>,
}

/// One priority group in consumer info.
#[derive(Debug, Clone, Serialize)]
pub struct PriorityGroupState {
    /// The group's name.
    pub group: String,
    /// The pinned client's id (`pinned_client`), while one is pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_client_id: Option<String>,
    /// When it was pinned (the zero time: nobody is).
    pub pinned_ts: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn stream_info_shapes() {
        let mut info = StreamInfo {
            cluster: Some(ClusterInfo {
                leader: "n1".into(),
                ..ClusterInfo::default()
            }),
            ..StreamInfo::default()
        };
        let v = serde_json::to_value(Paged {
            total: 0,
            offset: 0,
            limit: 0,
            body: info.clone(),
        })
        .unwrap();
        assert_eq!(v["total"], 0);
        assert_eq!(v["cluster"]["leader"], "n1");
        assert!(v.get("did_create").is_none());
        assert!(v["state"].get("num_deleted").is_none());
        assert!(v["state"].get("subjects").is_none());
        info.cluster = None;
        info.did_create = true;
        info.state.num_deleted = 2;
        let v = serde_json::to_value(&info).unwrap();
        assert!(v.get("cluster").is_none() && v.get("total").is_none());
        assert_eq!(v["did_create"], true);
        assert_eq!(v["state"]["num_deleted"], 2);
    }

    #[test]
    fn requests_read_what_clients_send() {
        let r: MsgGetRequest = serde_json::from_str(r#"{"last_by_subj":"a.b"}"#).unwrap();
        assert_eq!(r.last_by_subj.as_deref(), Some("a.b"));
        assert_eq!(r.seq, None);
        let r: StreamInfoRequest =
            serde_json::from_str(r#"{"subjects_filter":">","deleted_details":true,"offset":0}"#)
                .unwrap();
        assert_eq!(r.subjects_filter.as_deref(), Some(">"));
        assert!(r.deleted_details);
        // nats-jetstream (Python) sends every key, unset ones as `null`.
        let r: StreamInfoRequest =
            serde_json::from_str(r#"{"subjects_filter":"a","deleted_details":null,"offset":null}"#)
                .unwrap();
        assert_eq!((r.deleted_details, r.offset), (false, 0));
    }
}
