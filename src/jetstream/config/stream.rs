//! Stream configuration: parsing a create/update request, normalising and validating it the way
//! the reference server does (spec §4.1), the update rules (§4.2), and the echo clients read
//! back in `config` of every stream info reply.
//!
//! Also here: the name rules (§2) and the wildcard-aware subject checks the stream rules need
//! (subject validity, matching, collision between two patterns).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use super::rules::{
    subject_is_subset, subject_matches, subjects_collide, valid_literal_subject, valid_name,
    valid_subject_pattern, MAX_NAME_LEN,
};
use super::source::{StreamSource, SubjectTransformConfig};
use super::{
    int32, metadata_size, null_as_default, set_server_metadata, user_metadata_eq, zero_as_none,
    DiscardPolicy, PersistMode, Retention, StorageType,
};
use crate::jetstream::api::errors::{ApiError, ErrorKind};

const MILLIS_100: i64 = 100_000_000;
const ONE_SECOND: i64 = 1_000_000_000;
/// Default duplicate window: two minutes.
const DEFAULT_DUPLICATE_WINDOW: i64 = 120 * ONE_SECOND;
/// Longest description accepted (§4.1: 4 KiB).
pub(crate) const MAX_DESCRIPTION_LEN: usize = 4 * 1024;
/// Largest metadata map accepted, keys plus values (§4.1: 128 KiB).
pub(crate) const MAX_METADATA_SIZE: usize = 128 * 1024;
/// Most replicas the reference accepts at all; above 1 we answer "not supported".
const MAX_REPLICAS: i64 = 5;

/// Defaults and caps a stream imposes on its consumers (`consumer_limits`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerLimits {
    /// Default and cap for consumers' `inactive_threshold`, in nanoseconds.
    #[serde(
        default,
        deserialize_with = "zero_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub inactive_threshold: Option<i64>,
    /// Default and cap for consumers' `max_ack_pending`.
    #[serde(
        default,
        deserialize_with = "zero_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_ack_pending: Option<i64>,
}

/// A stream's configuration (§4.1), declared once: the request body deserializes straight into
/// it (unknown fields ignored; absent, `null`, and the clients' `0`/`""` placeholders read as
/// unset), and after [`StreamConfig::normalize`] it is exactly what the server stores and
/// echoes; `Serialize` writes the echo (keys in the reference's order, omitted options left
/// out).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    /// Stream name (§2 rules).
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    /// Free text, at most 4 KiB; `""` is treated as absent.
    #[serde(deserialize_with = "zero_as_none")]
    pub description: Option<String>,
    /// Subject patterns the stream captures; `[name]` when empty.
    #[serde(deserialize_with = "null_as_default")]
    pub subjects: Vec<String>,
    /// Retention policy.
    pub retention: Retention,
    /// Consumer cap, `-1` unlimited.
    #[serde(deserialize_with = "null_as_default")]
    pub max_consumers: i64,
    /// Message cap, `-1` unlimited.
    #[serde(deserialize_with = "null_as_default")]
    pub max_msgs: i64,
    /// Byte cap, `-1` unlimited.
    #[serde(deserialize_with = "null_as_default")]
    pub max_bytes: i64,
    /// Message age limit in nanoseconds, `0` forever.
    #[serde(deserialize_with = "null_as_default")]
    pub max_age: i64,
    /// Per-subject message cap, `-1` unlimited.
    #[serde(deserialize_with = "null_as_default")]
    pub max_msgs_per_subject: i64,
    /// Largest message (headers + payload), `-1` unlimited. An int32 on the wire: a larger
    /// number is a JSON error, as with the reference.
    #[serde(deserialize_with = "int32")]
    pub max_msg_size: i64,
    /// What happens at the limits.
    pub discard: DiscardPolicy,
    /// Reject publishes at `max_msgs_per_subject` (needs `discard: new`).
    #[serde(deserialize_with = "null_as_default")]
    pub discard_new_per_subject: bool,
    /// File or memory.
    pub storage: StorageType,
    /// Replica count; `1` on a single node.
    #[serde(deserialize_with = "null_as_default")]
    pub num_replicas: i64,
    /// Do not send pub acks.
    #[serde(deserialize_with = "null_as_default")]
    pub no_ack: bool,
    /// De-duplication window in nanoseconds.
    #[serde(deserialize_with = "null_as_default")]
    pub duplicate_window: i64,
    /// `none` or `s2`. Accepted and echoed; sealstream does not compress (sealed blocks are
    /// already high-entropy), so `s2` changes nothing on disk.
    #[serde(deserialize_with = "compression")]
    pub compression: String,
    /// Initial sequence of a new stream.
    #[serde(deserialize_with = "zero_as_none")]
    pub first_seq: Option<u64>,
    /// Enables `$JS.API.DIRECT.GET.<S>`.
    #[serde(deserialize_with = "null_as_default")]
    pub allow_direct: bool,
    /// Direct get on a mirror (echoed; a mirror answers direct gets when `allow_direct`).
    #[serde(deserialize_with = "null_as_default")]
    pub mirror_direct: bool,
    /// Read-only stream.
    #[serde(deserialize_with = "null_as_default")]
    pub sealed: bool,
    /// MSG.DELETE refused.
    #[serde(deserialize_with = "null_as_default")]
    pub deny_delete: bool,
    /// PURGE refused.
    #[serde(deserialize_with = "null_as_default")]
    pub deny_purge: bool,
    /// Honour `Nats-Rollup`.
    #[serde(deserialize_with = "null_as_default")]
    pub allow_rollup_hdrs: bool,
    /// Honour `Nats-TTL`.
    #[serde(deserialize_with = "null_as_default")]
    pub allow_msg_ttl: bool,
    /// ADR-56 persist mode (echoed only when `async`; acks wait for fsync either way).
    pub persist_mode: PersistMode,
    /// ADR-49 counter stream: every publish carries `Nats-Incr` and stores the subject's new
    /// running total as `{"val":"N"}`.
    #[serde(deserialize_with = "null_as_default")]
    pub allow_msg_counter: bool,
    /// TTL of the marker left when a subject's last message is removed by age, nanoseconds.
    #[serde(deserialize_with = "zero_as_none")]
    pub subject_delete_marker_ttl: Option<i64>,
    /// Defaults and caps for consumers.
    #[serde(deserialize_with = "null_as_default")]
    pub consumer_limits: ConsumerLimits,
    /// User metadata plus the server-owned `_nats.*` keys.
    #[serde(deserialize_with = "null_as_default")]
    pub metadata: BTreeMap<String, String>,
    /// Where the stream's replicas may be placed (a clustered server honours it or refuses
    /// the stream: it never ignores it).
    #[serde(deserialize_with = "null_as_default")]
    pub placement: Option<Placement>,
    /// The stream this one mirrors (see [`super::source`]).
    pub mirror: Option<StreamSource>,
    /// The streams this one sources from; `null` and `[]` are none.
    #[serde(deserialize_with = "null_as_default")]
    pub sources: Vec<StreamSource>,
    /// Every stored message is also published to a subject mapped from its own.
    pub republish: Option<RePublish>,
    /// Renames the subject of every message published to the stream before it is stored.
    pub subject_transform: Option<SubjectTransformConfig>,
    /// ADR-50 atomic batch publishes (`Nats-Batch-Id`; see `jetstream::batch`).
    #[serde(deserialize_with = "null_as_default")]
    pub allow_atomic: bool,
    /// Fast-ingest batches (see `jetstream::fast_batch`): may be turned on and off.
    #[serde(deserialize_with = "null_as_default")]
    pub allow_batched: bool,
    /// ADR-51 message schedules (see `jetstream::schedule`): may be turned on, never off.
    #[serde(deserialize_with = "null_as_default")]
    pub allow_msg_schedules: bool,
}

/// `republish`: after a message is stored, a copy goes to `dest` (mapped from the message's
/// subject by `src` → `dest`, as a subject mapping), with `Nats-Stream`, `Nats-Subject`,
/// `Nats-Sequence`, `Nats-Time-Stamp` and `Nats-Last-Sequence` headers; `headers_only` sends
/// the headers and `Nats-Msg-Size` instead of the payload.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RePublish {
    /// Which stored subjects are republished (`>`: all).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub src: String,
    /// Where to (a mapping destination: the `*`/`>` of `src` fill its wildcards).
    pub dest: String,
    /// Headers only, no payload.
    #[serde(skip_serializing_if = "is_false")]
    pub headers_only: bool,
}

/// `compression`: `none` (also for absent, `null` and `""`) or `s2`; anything else is a JSON
/// error, as with the reference.
fn compression<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Option::<String>::deserialize(d)?.as_deref() {
        None | Some("") | Some("none") => Ok("none".to_owned()),
        Some("s2") => Ok("s2".to_owned()),
        Some(other) => Err(serde::de::Error::custom(format!(
            "unknown compression algorithm {other:?}"
        ))),
    }
}

/// Whether a request body is "no body": empty or only whitespace.
pub(crate) fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

/// A stream's `placement`: the cluster and the server tags its replicas must run in/with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct Placement {
    /// Cluster name; `""` is unset.
    #[serde(
        deserialize_with = "zero_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster: Option<String>,
    /// Tags every chosen server must carry (`server_tags`).
    #[serde(
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// A preferred server: meaningful for a leader stepdown only (a create refuses it).
    #[serde(deserialize_with = "zero_as_none", skip_serializing)]
    pub preferred: Option<String>,
}

/// Parses a `STREAM.CREATE`/`STREAM.UPDATE` body. Malformed JSON (or an unknown enum value)
/// gives `400/10025 invalid JSON: <parser text>`; an empty body gives `400/10003 bad request`
/// (our choice: there is no configuration to parse).
pub fn parse_stream_config(body: &[u8]) -> Result<StreamConfig, ApiError> {
    if is_blank(body) {
        return Err(ApiError::bad_request());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e.to_string()))
}

/// `0` and anything below `-1` mean "unlimited", which is stored as `-1`.
fn limit(v: i64) -> i64 {
    if v == 0 || v < -1 {
        -1
    } else {
        v
    }
}

impl StreamConfig {
    /// Normalises a create/update request into what the server stores and echoes, and validates
    /// it (§4.1). Errors are `500/10052 <reason>`. `num_replicas` up to 5 passes: whether
    /// replicas are possible is the API's question (a single server refuses them).
    ///
    /// Defaults: `-1` for unset (`0` or `< -1`) limits, `subjects = [name]` when empty,
    /// `num_replicas` 0 → 1, `duplicate_window` 2 min (or `max_age` if smaller),
    /// `compression` `none`, and `_nats.level`/`_nats.req.level`/`_nats.ver` metadata.
    /// `subject_delete_marker_ttl` turns on `allow_msg_ttl` and `allow_rollup_hdrs`.
    pub fn normalize(&mut self, server_version: &str) -> Result<(), ApiError> {
        let invalid = |reason: &str| Err(ApiError::invalid_stream_config(reason));

        if self.name.is_empty() {
            return invalid("stream name is required");
        }
        if self.name.len() > MAX_NAME_LEN {
            return invalid("stream name is too long, maximum allowed is 255");
        }
        if !valid_name(&self.name) {
            return invalid("stream name can not contain whitespace, '.', '*', '>', '/' or '\\'");
        }
        if self.description.as_deref() == Some("") {
            self.description = None;
        }
        if self
            .description
            .as_ref()
            .is_some_and(|d| d.len() > MAX_DESCRIPTION_LEN)
        {
            return invalid("stream description is too long, maximum allowed is 4096");
        }
        if self.mirror_direct && self.mirror.is_none() {
            return invalid("stream has no mirror but does have mirror direct");
        }
        if self
            .placement
            .as_ref()
            .is_some_and(|p| p.cluster.is_none() && p.tags.is_empty() && p.preferred.is_none())
        {
            self.placement = None;
        }
        super::source::check(
            &self.name,
            &self.subjects,
            self.first_seq.filter(|s| *s > 0),
            self.mirror.as_ref(),
            &self.sources,
            self.subject_transform.as_ref(),
        )?;
        // Copying streams take what their origins produced: they neither run schedules nor
        // (mirrors) take batches of their own, as nats-server 2.15.1 answers.
        if self.allow_msg_schedules && self.mirror.is_some() {
            return Err(ApiError::from_kind(ErrorKind::MirrorWithSchedules));
        }
        if self.allow_msg_schedules && !self.sources.is_empty() {
            return Err(ApiError::from_kind(ErrorKind::SourceWithSchedules));
        }
        if self.allow_batched && self.mirror.is_some() {
            return Err(ApiError::from_kind(ErrorKind::MirrorWithBatched));
        }
        if let Some(rp) = self.republish.as_mut() {
            if rp.src.is_empty() {
                rp.src = ">".to_owned();
            }
            // Only `>` carries over; a `*` in the destination (nats-server wants `$1` there,
            // which we do not implement) and mapping functions are refused, not guessed at.
            let ok = valid_subject_pattern(&rp.src)
                && valid_subject_pattern(&rp.dest)
                && !rp.dest.split('.').any(|t| t == "*")
                && crate::subject::mapping::validate_mapping(&rp.src, &rp.dest).is_ok();
            if !ok {
                return invalid(&format!(
                    "stream configuration for republish with transform from '{}' to '{}' not valid",
                    rp.src, rp.dest
                ));
            }
        }

        self.max_consumers = limit(self.max_consumers);
        self.max_msgs = limit(self.max_msgs);
        self.max_bytes = limit(self.max_bytes);
        self.max_msgs_per_subject = limit(self.max_msgs_per_subject);
        self.max_msg_size = limit(self.max_msg_size);

        if self.max_age != 0 && self.max_age < MILLIS_100 {
            return invalid("max age needs to be >= 100ms");
        }
        if self.duplicate_window < 0 {
            return invalid("duplicates window can not be negative");
        }
        // A stream that copies from others has no duplicate window unless one is asked for
        // (as nats-server echoes it).
        if self.duplicate_window == 0 {
            if !self.copies() {
                self.duplicate_window =
                    if self.max_age != 0 && self.max_age < DEFAULT_DUPLICATE_WINDOW {
                        self.max_age
                    } else {
                        DEFAULT_DUPLICATE_WINDOW
                    };
            }
        } else {
            if self.duplicate_window < MILLIS_100 {
                return invalid("duplicates window needs to be >= 100ms");
            }
            if self.max_age != 0 && self.duplicate_window > self.max_age {
                return invalid("duplicates window can not be larger than max age");
            }
        }

        if self.num_replicas < 0 {
            return invalid("replicas count can not be negative");
        }
        if self.num_replicas == 0 {
            self.num_replicas = 1;
        }
        if self.num_replicas > MAX_REPLICAS {
            return invalid("maximum replicas is 5");
        }
        if self.compression.is_empty() {
            self.compression = "none".to_string();
        }
        if self.compression != "none" && self.compression != "s2" {
            return invalid("unknown compression algorithm");
        }

        if self.subjects.is_empty() && !self.copies() {
            self.subjects = vec![self.name.clone()];
        }
        if let Some(rp) = &self.republish {
            // A republished copy landing in the stream again would be stored and republished
            // without end.
            if self.subjects.iter().any(|s| subjects_collide(s, &rp.dest)) {
                return invalid("stream configuration for republish destination forms a cycle");
            }
        }
        for (i, s) in self.subjects.iter().enumerate() {
            if !valid_subject_pattern(s) {
                return invalid(&format!("invalid subject {s:?}"));
            }
            if self.subjects.iter().take(i).any(|earlier| earlier == s) {
                return invalid("duplicate subjects detected");
            }
            if !self.no_ack {
                if s == ">" {
                    return invalid("capturing all subjects requires no-ack to be true");
                }
                if subjects_collide(s, "$JS.>") {
                    return invalid(
                        "subjects that overlap with jetstream api require no-ack to be true",
                    );
                }
                if subjects_collide(s, "$SYS.>") {
                    return invalid("stream subjects overlapping $SYS.> require no_ack");
                }
            }
        }

        if self.discard_new_per_subject {
            if self.discard != DiscardPolicy::New {
                return invalid("discard new per subject requires discard new policy");
            }
            if self.max_msgs_per_subject <= 0 {
                return invalid("discard new per subject requires max msgs per subject > 0");
            }
        }

        match self.subject_delete_marker_ttl {
            Some(0) => self.subject_delete_marker_ttl = None,
            Some(ttl) if ttl < ONE_SECOND => {
                return invalid("subject delete marker TTL must be at least 1s");
            }
            Some(_) => {
                self.allow_msg_ttl = true;
                self.allow_rollup_hdrs = true;
            }
            None => {}
        }
        if self.deny_purge && self.allow_rollup_hdrs {
            return invalid("roll-ups can not be allowed when purge is denied");
        }

        if self.first_seq == Some(0) {
            self.first_seq = None;
        }
        self.consumer_limits.inactive_threshold =
            self.consumer_limits.inactive_threshold.filter(|v| *v > 0);
        self.consumer_limits.max_ack_pending =
            self.consumer_limits.max_ack_pending.filter(|v| *v > 0);

        let required_level = self.required_api_level();
        if self.persist_mode == PersistMode::Async && self.storage != StorageType::File {
            return invalid("async persist mode is only supported on file storage");
        }
        if self.allow_msg_counter {
            if self.discard == DiscardPolicy::New {
                return invalid("counter stream cannot use discard new");
            }
            if self.allow_msg_ttl {
                return invalid("counter stream cannot use message TTLs");
            }
            if self.retention != Retention::Limits {
                return invalid("counter stream can only use limits retention");
            }
        }
        set_server_metadata(&mut self.metadata, required_level, server_version);
        if metadata_size(&self.metadata) > MAX_METADATA_SIZE {
            return invalid("stream metadata exceeds maximum size of 128 KiB");
        }
        Ok(())
    }

    /// The API level this configuration needs (`_nats.req.level`): per-message TTLs (and the
    /// delete markers built on them) are level 1 features; everything else we support is 0.
    pub fn required_api_level(&self) -> u32 {
        if self.allow_batched {
            4
        } else if self.persist_mode == PersistMode::Async
            || self.allow_msg_counter
            || self.allow_atomic
            || self.allow_msg_schedules
        {
            2
        } else if self.allow_msg_ttl || self.subject_delete_marker_ttl.is_some() {
            1
        } else {
            0
        }
    }

    /// Checks that only apply when a stream is created (not on update): a stream can not be
    /// created sealed (§4.1: `sealed` is set via update).
    pub fn check_create(&self) -> Result<(), ApiError> {
        if self.sealed {
            return Err(ApiError::invalid_stream_config(
                "stream configuration for create can not be sealed",
            ));
        }
        Ok(())
    }

    /// Update rules (§4.2). `self` is the current (normalised) configuration, `new` the
    /// normalised requested one. Refusals are `500/10052` with the reason.
    ///
    /// Immutable: name, storage, retention to/from workqueue, `max_consumers` (as the
    /// reference), `first_seq` (when both set). One-way: `sealed`, `deny_delete`, `deny_purge`,
    /// `allow_msg_ttl` may be turned on, never off. Subject overlap with other streams is the
    /// caller's check.
    pub fn check_update(&self, new: &StreamConfig) -> Result<(), ApiError> {
        let refuse = |what: &str| {
            Err(ApiError::invalid_stream_config(&format!(
                "stream configuration update can not {what}"
            )))
        };
        if self.name != new.name {
            return refuse("change name");
        }
        if self.storage != new.storage {
            return refuse("change storage type");
        }
        if (self.retention == Retention::Workqueue) != (new.retention == Retention::Workqueue) {
            return refuse("change retention policy to/from workqueue");
        }
        if self.sealed && !new.sealed {
            return refuse("unseal a sealed stream");
        }
        if self.deny_delete && !new.deny_delete {
            return refuse("cancel deny message deletes");
        }
        if self.deny_purge && !new.deny_purge {
            return refuse("cancel deny purge");
        }
        if self.allow_msg_ttl && !new.allow_msg_ttl {
            return refuse("disable message TTL");
        }
        if self.allow_msg_schedules && !new.allow_msg_schedules {
            return Err(ApiError::invalid_stream_config(
                "message schedules can not be disabled",
            ));
        }
        if self.persist_mode != new.persist_mode {
            return refuse("change persist mode");
        }
        if self.allow_msg_counter != new.allow_msg_counter {
            return refuse("change message counter setting");
        }
        if self.max_consumers != new.max_consumers {
            return refuse("change max consumers");
        }
        // The mirror may be dropped (promotion), never added or changed.
        if self.mirror != new.mirror && new.mirror.is_some() {
            return Err(ApiError::from_kind(
                crate::jetstream::api::errors::ErrorKind::MirrorUpdate,
            ));
        }
        if let (Some(a), Some(b)) = (self.first_seq, new.first_seq) {
            if a != b {
                return refuse("change first sequence");
            }
        }
        Ok(())
    }

    /// Whether two normalised configurations are the same for an idempotent create: every
    /// field equal, ignoring server-owned `_nats.` metadata keys.
    pub fn same_as(&self, other: &StreamConfig) -> bool {
        let mut a = self.clone();
        let mut b = other.clone();
        if !user_metadata_eq(&a.metadata, &b.metadata) {
            return false;
        }
        a.metadata.clear();
        b.metadata.clear();
        a == b
    }

    /// The echo as a JSON value (key order is not kept by `serde_json::Value`; use
    /// `serde_json::to_string(&cfg)` for the reference's order).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Whether this stream copies other streams (a mirror or sources).
    pub fn copies(&self) -> bool {
        self.mirror.is_some() || !self.sources.is_empty()
    }

    /// Whether some subject of this stream collides with `filter`.
    pub fn subjects_collide_with(&self, filter: &str) -> bool {
        self.subjects.iter().any(|s| subjects_collide(s, filter))
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// The echo, field by field in the reference's order (§11 capture).
#[derive(Serialize)]
struct StreamConfigView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    subjects: &'a [String],
    retention: Retention,
    max_consumers: i64,
    max_msgs: i64,
    max_bytes: i64,
    max_age: i64,
    max_msgs_per_subject: i64,
    max_msg_size: i64,
    discard: DiscardPolicy,
    #[serde(skip_serializing_if = "is_false")]
    discard_new_per_subject: bool,
    storage: StorageType,
    num_replicas: i64,
    #[serde(skip_serializing_if = "is_false")]
    no_ack: bool,
    #[serde(skip_serializing_if = "is_zero_i64")]
    duplicate_window: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement: Option<&'a Placement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mirror: Option<&'a StreamSource>,
    #[serde(skip_serializing_if = "<[StreamSource]>::is_empty")]
    sources: &'a [StreamSource],
    compression: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject_transform: Option<&'a SubjectTransformConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_seq: Option<u64>,
    allow_direct: bool,
    mirror_direct: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    republish: Option<&'a RePublish>,
    sealed: bool,
    deny_delete: bool,
    deny_purge: bool,
    allow_rollup_hdrs: bool,
    consumer_limits: &'a ConsumerLimits,
    allow_msg_ttl: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    persist_mode: Option<PersistMode>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_msg_counter: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_atomic: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_msg_schedules: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject_delete_marker_ttl: Option<i64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_batched: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: &'a BTreeMap<String, String>,
}

impl Serialize for StreamConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StreamConfigView {
            name: &self.name,
            description: self.description.as_deref(),
            subjects: &self.subjects,
            retention: self.retention,
            max_consumers: self.max_consumers,
            max_msgs: self.max_msgs,
            max_bytes: self.max_bytes,
            max_age: self.max_age,
            max_msgs_per_subject: self.max_msgs_per_subject,
            max_msg_size: self.max_msg_size,
            discard: self.discard,
            discard_new_per_subject: self.discard_new_per_subject,
            storage: self.storage,
            num_replicas: self.num_replicas,
            no_ack: self.no_ack,
            duplicate_window: self.duplicate_window,
            placement: self.placement.as_ref(),
            mirror: self.mirror.as_ref(),
            sources: &self.sources,
            compression: &self.compression,
            subject_transform: self.subject_transform.as_ref(),
            first_seq: self.first_seq,
            allow_direct: self.allow_direct,
            mirror_direct: self.mirror_direct,
            republish: self.republish.as_ref(),
            sealed: self.sealed,
            deny_delete: self.deny_delete,
            deny_purge: self.deny_purge,
            allow_rollup_hdrs: self.allow_rollup_hdrs,
            consumer_limits: &self.consumer_limits,
            allow_msg_ttl: self.allow_msg_ttl,
            persist_mode: (self.persist_mode != PersistMode::Default).then_some(self.persist_mode),
            allow_msg_counter: self.allow_msg_counter,
            allow_atomic: self.allow_atomic,
            allow_msg_schedules: self.allow_msg_schedules,
            subject_delete_marker_ttl: self.subject_delete_marker_ttl,
            allow_batched: self.allow_batched,
            metadata: &self.metadata,
        }
        .serialize(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    const VERSION: &str = "2.15.1";

    /// The `config` object of the §11 stream-create capture (with `\u003e` written as `>`,
    /// which is what serde_json emits; both forms are the same JSON string).
    const ORDERS_ECHO: &str = r#"{"name":"ORDERS","subjects":["orders.>"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file","num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}"#;

    fn normalized(body: &str) -> StreamConfig {
        let mut cfg = parse_stream_config(body.as_bytes()).unwrap();
        cfg.normalize(VERSION).unwrap();
        cfg
    }

    fn refusal(body: &str) -> ApiError {
        let mut cfg = parse_stream_config(body.as_bytes()).unwrap();
        cfg.normalize(VERSION).unwrap_err()
    }

    #[test]
    fn capture_create_echo_is_exact() {
        let cfg = normalized(
            r#"{"name":"ORDERS","subjects":["orders.>"],"storage":"file","retention":"limits","duplicate_window":120000000000}"#,
        );
        assert_eq!(serde_json::to_string(&cfg).unwrap(), ORDERS_ECHO);
        // The reference's escaped form parses to the same value.
        let reference: serde_json::Value =
            serde_json::from_str(&ORDERS_ECHO.replace("orders.>", "orders.\\u003e")).unwrap();
        assert_eq!(cfg.to_json(), reference);
    }

    #[test]
    fn async_nats_body_normalises_like_the_capture() {
        let cfg = normalized(
            r#"{"name":"ANC","max_bytes":0,"max_msgs":0,"max_msgs_per_subject":0,"discard":"old","subjects":["anc.>"],"retention":"limits","max_consumers":0,"max_age":0,"storage":"file","num_replicas":0,"consumer_limits":null}"#,
        );
        let want = ORDERS_ECHO
            .replace("\"ORDERS\"", "\"ANC\"")
            .replace("orders.>", "anc.>");
        assert_eq!(serde_json::to_string(&cfg).unwrap(), want);
        assert_eq!(cfg.max_bytes, -1);
        assert_eq!(cfg.num_replicas, 1);
        assert_eq!(cfg.consumer_limits, ConsumerLimits::default());
    }

    #[test]
    fn async_nats_kv_body() {
        let cfg = normalized(
            r#"{"name":"KV_anckv","max_bytes":0,"max_msgs":0,"max_msgs_per_subject":3,"discard":"new","subjects":["$KV.anckv.>"],"retention":"limits","max_consumers":0,"max_age":0,"storage":"file","num_replicas":1,"description":"","allow_rollup_hdrs":true,"deny_delete":true,"allow_direct":true,"consumer_limits":null}"#,
        );
        assert_eq!(cfg.description, None);
        assert_eq!(cfg.max_msgs_per_subject, 3);
        assert_eq!(cfg.discard, DiscardPolicy::New);
        assert!(cfg.allow_rollup_hdrs && cfg.deny_delete && cfg.allow_direct);
        let echo = serde_json::to_string(&cfg).unwrap();
        assert!(!echo.contains("description"));
        assert!(echo.contains(r#""discard":"new","storage":"file""#));
        // Echo → parse → normalise is a fixed point, and the same config for idempotent create.
        let mut again = parse_stream_config(echo.as_bytes()).unwrap();
        again.normalize(VERSION).unwrap();
        assert_eq!(again, cfg);
        assert!(again.same_as(&cfg));
    }

    #[test]
    fn lenient_parsing() {
        let cfg = parse_stream_config(
            br#"{"name":"X","unknown":{"a":1},"retention":null,"subjects":null,"metadata":null,"mirror":null,"sources":[],"placement":null,"compression":""}"#,
        )
        .unwrap();
        assert_eq!(cfg.retention, Retention::Limits);
        assert!(cfg.mirror.is_none() && cfg.sources.is_empty());
        assert_eq!(cfg.compression, "none");
    }

    #[test]
    fn parse_errors() {
        let e = parse_stream_config(b"{\"name\":").unwrap_err();
        assert_eq!((e.code, e.err_code), (400, 10025));
        assert!(
            e.description.starts_with("invalid JSON: "),
            "{}",
            e.description
        );
        let e = parse_stream_config(br#"{"name":"X","retention":"forever"}"#).unwrap_err();
        assert_eq!(e.err_code, 10025);
        let e = parse_stream_config(br#"{"name":"X","max_msg_size":3000000000}"#).unwrap_err();
        assert_eq!(e.err_code, 10025);
        let e = parse_stream_config(br#"{"name":"X","compression":"zstd"}"#).unwrap_err();
        assert_eq!(e.err_code, 10025);
        let e = parse_stream_config(b"  ").unwrap_err();
        assert_eq!(e, ApiError::bad_request());
    }

    #[test]
    fn defaults() {
        let cfg = normalized(r#"{"name":"S"}"#);
        assert_eq!(cfg.subjects, vec!["S".to_string()]);
        assert_eq!(cfg.duplicate_window, DEFAULT_DUPLICATE_WINDOW);
        assert_eq!(cfg.metadata.len(), 3);
        let cfg = normalized(r#"{"name":"S","max_age":60000000000,"max_msgs":-7}"#);
        assert_eq!(cfg.duplicate_window, 60_000_000_000);
        assert_eq!(cfg.max_msgs, -1);
        let cfg = normalized(r#"{"name":"S","max_age":600000000000}"#);
        assert_eq!(cfg.duplicate_window, DEFAULT_DUPLICATE_WINDOW);
        let cfg = normalized(r#"{"name":"S","compression":"s2","first_seq":0,"no_ack":true}"#);
        assert_eq!(cfg.compression, "s2");
        assert_eq!(cfg.first_seq, None);
        let echo = serde_json::to_string(&cfg).unwrap();
        assert!(echo.contains(r#""num_replicas":1,"no_ack":true,"duplicate_window""#));
        assert!(echo.contains(r#""compression":"s2","allow_direct""#));
    }

    #[test]
    fn optional_keys_in_echo() {
        let cfg = normalized(
            r#"{"name":"S","description":"d","discard":"new","max_msgs_per_subject":1,"discard_new_per_subject":true,"first_seq":10,"subject_delete_marker_ttl":5000000000,"consumer_limits":{"inactive_threshold":1000000000,"max_ack_pending":0},"metadata":{"team":"a"}}"#,
        );
        assert!(cfg.allow_msg_ttl && cfg.allow_rollup_hdrs);
        let v = cfg.to_json();
        assert_eq!(v["description"], "d");
        assert_eq!(v["discard_new_per_subject"], true);
        assert_eq!(v["first_seq"], 10);
        assert_eq!(v["subject_delete_marker_ttl"], 5_000_000_000i64);
        assert_eq!(
            v["consumer_limits"],
            serde_json::json!({"inactive_threshold":1000000000})
        );
        assert_eq!(v["metadata"]["team"], "a");
        assert_eq!(v["metadata"]["_nats.req.level"], "1");
        let text = serde_json::to_string(&cfg).unwrap();
        let order = [
            "\"name\"",
            "\"description\"",
            "\"subjects\"",
            "\"discard\"",
            "\"discard_new_per_subject\"",
            "\"storage\"",
            "\"compression\"",
            "\"first_seq\"",
            "\"allow_direct\"",
            "\"consumer_limits\"",
            "\"allow_msg_ttl\"",
            "\"subject_delete_marker_ttl\"",
            "\"metadata\"",
        ];
        let positions: Vec<usize> = order.iter().map(|k| text.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
    }

    #[test]
    fn validation_refusals() {
        let cases = [
            (r#"{"name":""}"#, "stream name is required"),
            (r#"{"name":"a.b"}"#, ""),
            (r#"{"name":"a b"}"#, ""),
            (r#"{"name":"a/b"}"#, ""),
            (
                r#"{"name":"S","max_age":50000000}"#,
                "max age needs to be >= 100ms",
            ),
            (
                r#"{"name":"S","max_age":-5}"#,
                "max age needs to be >= 100ms",
            ),
            (
                r#"{"name":"S","duplicate_window":1000}"#,
                "duplicates window needs to be >= 100ms",
            ),
            (
                r#"{"name":"S","max_age":1000000000,"duplicate_window":2000000000}"#,
                "duplicates window can not be larger than max age",
            ),
            (r#"{"name":"S","subjects":["a..b"]}"#, ""),
            (r#"{"name":"S","subjects":["a.>.b"]}"#, ""),
            (
                r#"{"name":"S","subjects":["a","a"]}"#,
                "duplicate subjects detected",
            ),
            (r#"{"name":"S","subjects":[">"]}"#, ""),
            (r#"{"name":"S","subjects":["$JS.API.STREAM.>"]}"#, ""),
            (r#"{"name":"S","subjects":["$SYS.x"]}"#, ""),
            (
                r#"{"name":"S","discard_new_per_subject":true,"max_msgs_per_subject":1}"#,
                "",
            ),
            (
                r#"{"name":"S","discard_new_per_subject":true,"discard":"new"}"#,
                "",
            ),
            (
                r#"{"name":"S","deny_purge":true,"allow_rollup_hdrs":true}"#,
                "",
            ),
            (
                r#"{"name":"S","deny_purge":true,"subject_delete_marker_ttl":5000000000}"#,
                "",
            ),
            (r#"{"name":"S","subject_delete_marker_ttl":500}"#, ""),
            (r#"{"name":"S","mirror":{"name":"S"}}"#, "detected cycle"),
            (r#"{"name":"S","sources":[{"name":"S"}]}"#, "detected cycle"),
            (r#"{"name":"S","num_replicas":-1}"#, ""),
            (r#"{"name":"S","num_replicas":6}"#, ""),
        ];
        for (body, reason) in cases {
            let e = refusal(body);
            assert_eq!((e.code, e.err_code), (500, 10052), "{body}: {e}");
            if !reason.is_empty() {
                assert_eq!(e.description, reason, "{body}");
            }
        }
        let long = format!(r#"{{"name":"S","description":"{}"}}"#, "x".repeat(4097));
        assert_eq!(refusal(&long).err_code, 10052);
        let long = format!(r#"{{"name":"{}"}}"#, "x".repeat(256));
        assert_eq!(refusal(&long).err_code, 10052);
        // API subjects are fine with no_ack.
        normalized(r#"{"name":"S","subjects":[">"],"no_ack":true}"#);
        // Replicas up to 5 are the cluster's question (the API refuses them on a single
        // server); above 5 never.
        assert_eq!(
            normalized(r#"{"name":"S","num_replicas":3}"#).num_replicas,
            3
        );
        assert_eq!(refusal(r#"{"name":"S","num_replicas":6}"#).err_code, 10052);
    }

    #[test]
    fn create_refuses_sealed() {
        let cfg = normalized(r#"{"name":"S","sealed":true}"#);
        assert_eq!(cfg.check_create().unwrap_err().err_code, 10052);
        assert!(normalized(r#"{"name":"S"}"#).check_create().is_ok());
    }

    #[test]
    fn update_rules() {
        let cur = normalized(r#"{"name":"S","subjects":["s.>"],"deny_delete":true}"#);
        let ok = [
            r#"{"name":"S","subjects":["s.>","t"],"deny_delete":true,"max_msgs":5,"discard":"new"}"#,
            r#"{"name":"S","subjects":["s.>"],"deny_delete":true,"retention":"interest"}"#,
            r#"{"name":"S","deny_delete":true,"sealed":true,"deny_purge":true,"allow_msg_ttl":true}"#,
            r#"{"name":"S","deny_delete":true,"description":"now described","allow_direct":true}"#,
        ];
        for body in ok {
            cur.check_update(&normalized(body)).unwrap();
        }
        let refused = [
            (
                r#"{"name":"S","deny_delete":true,"storage":"memory"}"#,
                "stream configuration update can not change storage type",
            ),
            (
                r#"{"name":"S","deny_delete":true,"retention":"workqueue"}"#,
                "stream configuration update can not change retention policy to/from workqueue",
            ),
            (
                r#"{"name":"S"}"#,
                "stream configuration update can not cancel deny message deletes",
            ),
            (
                r#"{"name":"T","deny_delete":true}"#,
                "stream configuration update can not change name",
            ),
            (
                r#"{"name":"S","deny_delete":true,"max_consumers":3}"#,
                "stream configuration update can not change max consumers",
            ),
        ];
        for (body, reason) in refused {
            let e = cur.check_update(&normalized(body)).unwrap_err();
            assert_eq!((e.code, e.err_code), (500, 10052));
            assert_eq!(e.description, reason);
        }
        let sealed =
            normalized(r#"{"name":"S","sealed":true,"deny_purge":true,"allow_msg_ttl":true}"#);
        let e = sealed
            .check_update(&normalized(
                r#"{"name":"S","deny_purge":true,"allow_msg_ttl":true}"#,
            ))
            .unwrap_err();
        assert_eq!(
            e.description,
            "stream configuration update can not unseal a sealed stream"
        );
        let e = sealed
            .check_update(&normalized(
                r#"{"name":"S","sealed":true,"allow_msg_ttl":true}"#,
            ))
            .unwrap_err();
        assert_eq!(
            e.description,
            "stream configuration update can not cancel deny purge"
        );
        let e = sealed
            .check_update(&normalized(
                r#"{"name":"S","sealed":true,"deny_purge":true}"#,
            ))
            .unwrap_err();
        assert_eq!(
            e.description,
            "stream configuration update can not disable message TTL"
        );
        let wq = normalized(r#"{"name":"S","retention":"workqueue"}"#);
        assert!(wq
            .check_update(&normalized(r#"{"name":"S","retention":"limits"}"#))
            .is_err());
    }

    #[test]
    fn same_as_ignores_server_metadata() {
        let a = normalized(r#"{"name":"S","metadata":{"k":"v"}}"#);
        let mut b = parse_stream_config(br#"{"name":"S","metadata":{"k":"v"}}"#).unwrap();
        b.normalize("9.9.9").unwrap();
        assert!(a.same_as(&b));
        assert_ne!(a, b);
        let c = normalized(r#"{"name":"S","metadata":{"k":"w"}}"#);
        assert!(!a.same_as(&c));
        let d = normalized(r#"{"name":"S","max_msgs":10}"#);
        assert!(!normalized(r#"{"name":"S"}"#).same_as(&d));
    }

    #[test]
    fn names() {
        assert!(valid_name("ORDERS"));
        assert!(valid_name("KV_b-1"));
        for bad in ["", "a.b", "a*", "a>", "a b", "a\tb", "a/b", "a\\b"] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_name(&"x".repeat(255)));
        assert!(!valid_name(&"x".repeat(256)));
    }

    #[test]
    fn subject_rules() {
        assert!(valid_subject_pattern("a.*.>"));
        assert!(valid_subject_pattern("$KV.b.>"));
        assert!(valid_subject_pattern("foo*"));
        for bad in ["", ".a", "a.", "a..b", "a.>.b", "a b"] {
            assert!(!valid_subject_pattern(bad), "{bad}");
        }
        assert!(valid_literal_subject("a.b"));
        assert!(!valid_literal_subject("a.*"));

        assert!(subject_matches("orders.new", "orders.>"));
        assert!(subject_matches("orders.new", "orders.*"));
        assert!(subject_matches("orders.new", ">"));
        assert!(subject_matches("orders.new", "orders.new"));
        assert!(!subject_matches("orders", "orders.>"));
        assert!(!subject_matches("orders.a.b", "orders.*"));
        assert!(!subject_matches("orders.a", "orders.a.b"));
        assert!(!subject_matches("orders..a", "orders.>"));
        assert!(!subject_matches("orders.a", "orders..a"));
        assert!(!subject_matches("", ">"));

        assert!(subjects_collide("orders.>", "orders.x"));
        assert!(subjects_collide("orders.x", "orders.>"));
        assert!(subjects_collide("a.*", "*.b"));
        assert!(subjects_collide(">", "a.b.c"));
        assert!(subjects_collide("a.*.c", "a.b.>"));
        assert!(!subjects_collide("a.*", "a.b.c"));
        assert!(!subjects_collide("a.b", "a.c"));
        assert!(!subjects_collide("orders.>", "orders"));
        assert!(!subjects_collide("a..b", "a..b"));

        assert!(subject_is_subset("a.b", "a.*"));
        assert!(subject_is_subset("a.*", "a.>"));
        assert!(subject_is_subset("a.>", ">"));
        assert!(!subject_is_subset("a.>", "a.*"));
        assert!(!subject_is_subset("a.*", "a.b"));
    }
}
