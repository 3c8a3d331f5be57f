//! Consumer configuration: the create request and its subject forms (spec §6.1), normalising
//! and validating a configuration against its stream the way the reference server does (§6.2),
//! the update rules, the echo clients read back, and pull request bodies (§7.1).
//!
//! Checks that need the other consumers of a stream (workqueue uniqueness, name clashes) are
//! the caller's; [`check_workqueue_consumer`] does the workqueue part given those consumers.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::stream::{
    is_blank, subjects_collide, valid_literal_subject, valid_name, valid_subject_pattern,
    MAX_DESCRIPTION_LEN, MAX_METADATA_SIZE,
};
use super::{
    enum_field, metadata_size, null_as_default, set_server_metadata, user_metadata_eq,
    zero_as_none, AckPolicy, DeliverPolicy, PriorityPolicy, ReplayPolicy, Retention, StreamConfig,
};
use crate::jetstream::api::errors::ApiError;
use crate::timefmt::{format_go_duration, parse_rfc3339};

const MILLIS_100: i64 = 100_000_000;
/// Default `ack_wait`: 30 s.
pub const DEFAULT_ACK_WAIT: i64 = 30_000_000_000;
/// Default `max_waiting` of a pull consumer.
pub const DEFAULT_MAX_WAITING: i64 = 512;
/// Default `max_ack_pending` (unless `ack_policy: none`).
pub const DEFAULT_MAX_ACK_PENDING: i64 = 1000;
/// Default `inactive_threshold` of a non-durable consumer: 5 s.
pub const DEFAULT_INACTIVE_THRESHOLD: i64 = 5_000_000_000;
/// Length of a generated consumer name.
pub const GENERATED_NAME_LEN: usize = 8;

/// A consumer's configuration (§6.2), declared once: the request's `config` deserializes
/// straight into it (unknown fields ignored; absent, `null`, and the clients' `0`/`""`
/// placeholders read as unset). After [`ConsumerConfig::normalize`] this is what the server
/// stores and echoes; `Serialize` writes the echo (unset options omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ConsumerConfig {
    /// Durable name; present means the consumer survives without interest.
    #[serde(deserialize_with = "zero_as_none")]
    pub durable_name: Option<String>,
    /// Name as provided (or taken from the subject / the durable name); a generated name is
    /// not stored here, so it is not echoed in `config`.
    #[serde(deserialize_with = "zero_as_none")]
    pub name: Option<String>,
    /// Free text, at most 4 KiB.
    #[serde(deserialize_with = "zero_as_none")]
    pub description: Option<String>,
    /// Where delivery starts.
    #[serde(deserialize_with = "deliver_policy")]
    pub deliver_policy: DeliverPolicy,
    /// Start sequence for `by_start_sequence`.
    #[serde(deserialize_with = "zero_as_none")]
    pub opt_start_seq: Option<u64>,
    /// Start time for `by_start_time`, RFC 3339 text as the client sent it (validated).
    #[serde(deserialize_with = "rfc3339")]
    pub opt_start_time: Option<String>,
    /// Ack policy; `none` when absent.
    pub ack_policy: AckPolicy,
    /// Redelivery timeout in nanoseconds; `0` (omitted) for `ack_policy: none`.
    #[serde(deserialize_with = "null_as_default")]
    pub ack_wait: i64,
    /// Delivery attempts, `-1` unlimited.
    #[serde(deserialize_with = "null_as_default")]
    pub max_deliver: i64,
    /// Redelivery delays by attempt, nanoseconds.
    #[serde(deserialize_with = "null_as_default")]
    pub backoff: Vec<i64>,
    /// Single filter.
    #[serde(deserialize_with = "zero_as_none")]
    pub filter_subject: Option<String>,
    /// Several non-overlapping filters (exclusive with `filter_subject`).
    #[serde(deserialize_with = "null_as_default")]
    pub filter_subjects: Vec<String>,
    /// Replay pacing.
    pub replay_policy: ReplayPolicy,
    /// Push delivery rate limit, bits per second.
    #[serde(deserialize_with = "zero_as_none")]
    pub rate_limit_bps: Option<u64>,
    /// Ack metric sampling, e.g. `"30%"`.
    #[serde(deserialize_with = "zero_as_none")]
    pub sample_freq: Option<String>,
    /// Queued pull requests (pull only; 512 by default).
    #[serde(deserialize_with = "null_as_default")]
    pub max_waiting: i64,
    /// Outstanding unacked cap, `-1` unlimited.
    #[serde(deserialize_with = "null_as_default")]
    pub max_ack_pending: i64,
    /// Deliver headers and `Nats-Msg-Size` only.
    #[serde(deserialize_with = "null_as_default")]
    pub headers_only: bool,
    /// Cap on a pull request's `batch`.
    #[serde(deserialize_with = "null_as_default")]
    pub max_batch: i64,
    /// Cap on a pull request's `expires`, nanoseconds.
    #[serde(deserialize_with = "null_as_default")]
    pub max_expires: i64,
    /// Cap on a pull request's `max_bytes`.
    #[serde(deserialize_with = "null_as_default")]
    pub max_bytes: i64,
    /// Push delivery subject; present makes it a push consumer.
    #[serde(deserialize_with = "zero_as_none")]
    pub deliver_subject: Option<String>,
    /// Queue group for push delivery.
    #[serde(deserialize_with = "zero_as_none")]
    pub deliver_group: Option<String>,
    /// Push flow control (needs `idle_heartbeat`).
    #[serde(deserialize_with = "null_as_default")]
    pub flow_control: bool,
    /// Push idle heartbeat interval, nanoseconds.
    #[serde(deserialize_with = "null_as_default")]
    pub idle_heartbeat: i64,
    /// Delete after this long without activity, nanoseconds (5 s default for non-durables).
    #[serde(deserialize_with = "null_as_default")]
    pub inactive_threshold: i64,
    /// Replicas; echoed `0` means "as the stream".
    #[serde(deserialize_with = "null_as_default")]
    pub num_replicas: i64,
    /// Keep consumer state in memory.
    #[serde(deserialize_with = "null_as_default")]
    pub mem_storage: bool,
    /// User metadata plus the server-owned `_nats.*` keys.
    #[serde(deserialize_with = "null_as_default")]
    pub metadata: BTreeMap<String, String>,
    /// Paused until this time (RFC 3339 as given; `CONSUMER.PAUSE` sets and clears it).
    #[serde(deserialize_with = "rfc3339")]
    pub pause_until: Option<String>,
    /// Pull priority groups (ADR-42): the groups a pull request must name.
    #[serde(deserialize_with = "null_as_default")]
    pub priority_groups: Vec<String>,
    /// How waiting pulls of the groups are chosen.
    pub priority_policy: PriorityPolicy,
    /// `pinned_client`: how long the pinned client may go without a pull before another is
    /// pinned, nanoseconds (default 2 minutes, as nats-server).
    #[serde(deserialize_with = "null_as_default")]
    pub priority_timeout: i64,
}

/// How long a pinned client may go without a pull when `priority_timeout` is not set.
pub const DEFAULT_PINNED_TIMEOUT: i64 = 120_000_000_000;

/// The longest priority group name nats-server accepts.
const MAX_GROUP_NAME: usize = 16;

/// A priority group name: 1–16 of `A-Z a-z 0-9 - _ / =`.
fn valid_group_name(g: &str) -> bool {
    g.len() <= MAX_GROUP_NAME
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/' | b'='))
}

/// `deliver_policy` also accepts the reference's legacy spelling `undefined` (= `all`).
fn deliver_policy<'de, D: Deserializer<'de>>(d: D) -> Result<DeliverPolicy, D::Error> {
    match Option::<String>::deserialize(d)?.as_deref() {
        Some("undefined") => Ok(DeliverPolicy::All),
        other => enum_field(other).map_err(serde::de::Error::custom),
    }
}

/// An RFC 3339 time kept as the client sent it (validated); `""`, `null` and the zero time
/// (the clients' "unset") read as `None`.
fn rfc3339<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<String>::deserialize(d)?.filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) => match parse_rfc3339(&t) {
            None => Err(serde::de::Error::custom(format!(
                "parsing time {t:?} as RFC 3339 failed"
            ))),
            Some(0) => Ok(None),
            Some(_) => Ok(Some(t)),
        },
    }
}

/// The `action` of a create request (§6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// `""` or absent: create, or update if it exists.
    #[default]
    CreateOrUpdate,
    /// `"create"`: fail with 10148 if it exists with a different configuration.
    Create,
    /// `"update"`: fail with 10149 if it does not exist.
    Update,
}

/// A consumer create request body (§6.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct CreateConsumerRequest {
    /// Must equal `<S>` of the subject (the caller checks).
    #[serde(deserialize_with = "null_as_default")]
    pub stream_name: String,
    /// The requested configuration, not yet normalised; a missing `config` is an empty
    /// (all-defaults) configuration.
    #[serde(deserialize_with = "null_as_default")]
    pub config: ConsumerConfig,
    /// Create, update, or either.
    pub action: Action,
    /// Pedantic mode flag as sent (carried, not acted on here).
    #[serde(deserialize_with = "null_as_default")]
    pub pedantic: bool,
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Option::<String>::deserialize(d)?.as_deref() {
            None | Some("") => Ok(Action::CreateOrUpdate),
            Some("create") => Ok(Action::Create),
            Some("update") => Ok(Action::Update),
            Some(other) => Err(serde::de::Error::custom(format!(
                "can not unmarshal {other:?} as action"
            ))),
        }
    }
}

/// Parses a `CONSUMER.CREATE…`/`DURABLE.CREATE…` body. Malformed JSON or an unknown enum or
/// action value gives `400/10025`; an empty body `400/10003` (our choice).
pub fn parse_create_request(body: &[u8]) -> Result<CreateConsumerRequest, ApiError> {
    if is_blank(body) {
        return Err(ApiError::bad_request());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e.to_string()))
}

/// Resolves the consumer's name from the API subject form and checks the request against it
/// (§6.1):
///
/// - `CONSUMER.CREATE.<S>` (`subject_consumer` `None`): a `durable_name` is `10020`; the name is
///   `config.name`, or 8 generated alphanumerics (not stored in `cfg`, so not echoed).
/// - `CONSUMER.CREATE.<S>.<C>`: `config.name` becomes `<C>`; a different `durable_name` is
///   `10017`.
/// - `CONSUMER.CREATE.<S>.<C>.<filter…>` (`subject_filter` = the joined tokens): additionally
///   the filter must equal `filter_subject` (or be the only entry of `filter_subjects`):
///   `10131`.
/// - `CONSUMER.DURABLE.CREATE.<S>.<C>` (`legacy_durable`): `durable_name` must equal `<C>`
///   (`10017`).
///
/// Then `durable_name` and `name` both given must be equal (`10132`), and a durable's name is
/// its durable name (echoed, as the reference does). Invalid names: durable `10103`, others
/// `10094` (our choice; see [`ConsumerConfig::normalize`]). Name clashes with existing
/// consumers, including of a generated name, are the caller's to check.
pub fn resolve_consumer_name(
    cfg: &mut ConsumerConfig,
    subject_consumer: Option<&str>,
    subject_filter: Option<&str>,
    legacy_durable: bool,
) -> Result<String, ApiError> {
    match subject_consumer {
        None => {
            if legacy_durable || subject_filter.is_some() {
                // Not a subject form the API has.
                return Err(ApiError::bad_request());
            }
            if cfg.durable_name.is_some() {
                return Err(ApiError::ephemeral_with_durable());
            }
        }
        Some(c) => {
            if !valid_name(c) {
                return Err(if legacy_durable {
                    ApiError::durable_name_invalid()
                } else {
                    invalid_name_error()
                });
            }
            if legacy_durable {
                if cfg.durable_name.as_deref() != Some(c) {
                    return Err(ApiError::durable_name_mismatch());
                }
            } else {
                if cfg.durable_name.as_deref().is_some_and(|d| d != c) {
                    return Err(ApiError::durable_name_mismatch());
                }
                cfg.name = Some(c.to_string());
            }
            if let Some(filter) = subject_filter {
                let matches = match cfg.filter_subject.as_deref() {
                    Some(f) => f == filter,
                    None => {
                        cfg.filter_subjects.len() == 1
                            && cfg.filter_subjects.first().map(String::as_str) == Some(filter)
                    }
                };
                if !matches {
                    return Err(ApiError::filter_mismatch());
                }
            }
        }
    }
    if let (Some(d), Some(n)) = (&cfg.durable_name, &cfg.name) {
        if d != n {
            return Err(ApiError::durable_and_name_differ());
        }
    }
    if let Some(d) = &cfg.durable_name {
        if !valid_name(d) {
            return Err(ApiError::durable_name_invalid());
        }
        cfg.name = Some(d.clone());
    }
    match &cfg.name {
        Some(n) if !valid_name(n) => Err(invalid_name_error()),
        Some(n) => Ok(n.clone()),
        None => Ok(generate_name()),
    }
}

/// Our choice for an invalid (non-durable) consumer name: `400/10094`, as the spec's table has
/// no row for it.
fn invalid_name_error() -> ApiError {
    ApiError::invalid_consumer_policy(
        "consumer name can not contain whitespace, '.', '*', '>', '/' or '\\'",
    )
}

/// Eight random characters from `0-9A-Za-z` (e.g. `fZ5vuOp8`).
///
/// Randomness comes from std's randomly keyed hasher mixed with a counter and the clock, which
/// keeps this module free of an RNG dependency; names need to be unlikely to clash, not secret.
pub fn generate_name() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};

    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static COUNTER: AtomicU64 = AtomicU64::new(0);

    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    hasher.write_u128(now);
    // 62^8 < 2^64: one hash gives all eight characters.
    let mut x = hasher.finish();
    let base = ALPHABET.len() as u64;
    (0..GENERATED_NAME_LEN)
        .map(|_| {
            let c = usize::try_from(x % base)
                .ok()
                .and_then(|i| ALPHABET.get(i))
                .copied()
                .unwrap_or(b'x');
            x /= base;
            char::from(c)
        })
        .collect()
}

impl ConsumerConfig {
    /// A push consumer has a `deliver_subject`.
    pub fn is_push(&self) -> bool {
        self.deliver_subject.is_some()
    }

    /// A durable consumer has a `durable_name`.
    pub fn is_durable(&self) -> bool {
        self.durable_name.is_some()
    }

    /// The consumer's filters: `filter_subject`, or `filter_subjects`; empty means all.
    pub fn filters(&self) -> Vec<String> {
        match &self.filter_subject {
            Some(f) => vec![f.clone()],
            None => self.filter_subjects.clone(),
        }
    }

    /// Fills in defaults and validates against the consumer's stream (§6.2). Call after
    /// [`resolve_consumer_name`].
    ///
    /// Defaults: `ack_wait` 30 s unless `ack_policy: none` (and `backoff[0]` when there is a
    /// backoff), `max_deliver` -1, `max_waiting` 512 for pull, `max_ack_pending` 1000 unless
    /// ack none (or the stream's `consumer_limits.max_ack_pending` if lower),
    /// `inactive_threshold` the stream's limit, else 5 s for non-durables, and the server
    /// metadata. Refusals are `400/10094 <reason>` unless a specific row exists (10088,
    /// 10108, 10116, 10103, 10132, 10074).
    pub fn normalize(
        &mut self,
        stream: &StreamConfig,
        server_version: &str,
    ) -> Result<(), ApiError> {
        let policy = |reason: String| Err(ApiError::invalid_consumer_policy(&reason));

        if let Some(d) = &self.durable_name {
            if !valid_name(d) {
                return Err(ApiError::durable_name_invalid());
            }
            match &self.name {
                None => self.name = Some(d.clone()),
                Some(n) if n != d => return Err(ApiError::durable_and_name_differ()),
                Some(_) => {}
            }
        }
        if self.name.as_deref().is_some_and(|n| !valid_name(n)) {
            return Err(invalid_name_error());
        }
        if self
            .description
            .as_ref()
            .is_some_and(|d| d.len() > MAX_DESCRIPTION_LEN)
        {
            return policy("consumer description is too long, maximum allowed is 4096".into());
        }

        // Start position.
        let deliver = self.deliver_policy;
        match deliver {
            DeliverPolicy::ByStartSequence => {
                if self.opt_start_seq.is_none() {
                    return policy("consumer delivery policy is deliver by start sequence, but optional start sequence is not set".into());
                }
                if self.opt_start_time.is_some() {
                    return policy("consumer delivery policy is deliver by start sequence, but optional start time is also set".into());
                }
            }
            DeliverPolicy::ByStartTime => {
                if self.opt_start_time.is_none() {
                    return policy("consumer delivery policy is deliver by start time, but optional start time is not set".into());
                }
                if self.opt_start_seq.is_some() {
                    return policy("consumer delivery policy is deliver by start time, but optional start sequence is also set".into());
                }
            }
            _ => {
                let name = deliver_policy_words(deliver);
                if deliver == DeliverPolicy::LastPerSubject
                    && self.filter_subject.as_deref().is_none_or(str::is_empty)
                    && self.filter_subjects.is_empty()
                {
                    return policy(format!(
                        "consumer delivery policy is deliver {name}, but optional filter subject is not set"
                    ));
                }
                if self.opt_start_seq.is_some() {
                    return policy(format!("consumer delivery policy is deliver {name}, but optional start sequence is also set"));
                }
                if self.opt_start_time.is_some() {
                    return policy(format!("consumer delivery policy is deliver {name}, but optional start time is also set"));
                }
            }
        }

        // Acks and redelivery.
        if self.ack_wait < 0 {
            return policy("consumer ack wait can not be negative".into());
        }
        if self.backoff.iter().any(|b| *b <= 0) {
            return policy("consumer backoff values must be positive".into());
        }
        if let Some(first) = self.backoff.first() {
            self.ack_wait = *first;
        } else if self.ack_wait == 0 && self.ack_policy != AckPolicy::None {
            self.ack_wait = DEFAULT_ACK_WAIT;
        }
        if self.max_deliver == 0 || self.max_deliver < -1 {
            self.max_deliver = -1;
        }
        // The reference accepts max_deliver == len(backoff) despite the row's wording.
        if self.max_deliver > 0
            && i64::try_from(self.backoff.len()).unwrap_or(i64::MAX) > self.max_deliver
        {
            return Err(ApiError::max_deliver_backoff());
        }

        // Push / pull.
        if self.idle_heartbeat < 0 || (self.idle_heartbeat > 0 && self.idle_heartbeat < MILLIS_100)
        {
            return policy("consumer idle heartbeat needs to be >= 100ms".into());
        }
        if let Some(ds) = &self.deliver_subject {
            if !valid_subject_pattern(ds) {
                return policy("consumer deliver subject is not a valid subject".into());
            }
            if !valid_literal_subject(ds) {
                return policy("consumer deliver subject has wildcards".into());
            }
            if self.max_waiting != 0 {
                return policy("consumer in push mode can not set max waiting".into());
            }
            if self.flow_control && self.idle_heartbeat == 0 {
                return Err(ApiError::flow_control_requires_heartbeat());
            }
        } else {
            if self.idle_heartbeat != 0 {
                return Err(ApiError::heartbeat_requires_push());
            }
            if self.flow_control {
                return policy("consumer flow control requires a push based consumer".into());
            }
            if self.rate_limit_bps.is_some() {
                return policy("consumer rate limit requires a push based consumer".into());
            }
            if self.max_waiting < 0 {
                return policy("consumer max waiting needs to be positive".into());
            }
            if self.max_waiting == 0 {
                self.max_waiting = DEFAULT_MAX_WAITING;
            }
        }

        // Outstanding acks, with the stream's consumer limits as default and cap.
        let ack_limit = stream.consumer_limits.max_ack_pending;
        if self.max_ack_pending < -1 {
            self.max_ack_pending = -1;
        }
        if self.max_ack_pending == 0 && self.ack_policy != AckPolicy::None {
            self.max_ack_pending = match ack_limit {
                Some(l) => l.min(DEFAULT_MAX_ACK_PENDING),
                None => DEFAULT_MAX_ACK_PENDING,
            };
        }
        if let Some(l) = ack_limit {
            if self.max_ack_pending == -1 || self.max_ack_pending > l {
                return policy(format!(
                    "consumer max ack pending exceeds the stream's limit of {l}"
                ));
            }
        }

        // Inactivity.
        if self.inactive_threshold < 0 {
            return policy("consumer inactive threshold can not be negative".into());
        }
        let inactive_limit = stream.consumer_limits.inactive_threshold;
        if self.inactive_threshold == 0 {
            if let Some(l) = inactive_limit {
                self.inactive_threshold = l;
            } else if !self.is_durable() {
                self.inactive_threshold = DEFAULT_INACTIVE_THRESHOLD;
            }
        }
        if let Some(l) = inactive_limit {
            if self.inactive_threshold > l {
                return policy(format!(
                    "consumer inactive threshold exceeds the stream's limit of {}",
                    format_go_duration(l)
                ));
            }
        }

        // Filters.
        if self.filter_subject.is_some() && !self.filter_subjects.is_empty() {
            return policy("consumer can not have both filter_subject and filter_subjects".into());
        }
        let filters = self.filters();
        for (i, f) in filters.iter().enumerate() {
            if !valid_subject_pattern(f) {
                return policy("consumer filter subject is not a valid subject".into());
            }
            // A filter need not match the stream's subjects today (nats-server 2.15 accepts
            // `one` on a stream of `events`: the stream's subjects may change).
            if filters
                .iter()
                .take(i)
                .any(|earlier| subjects_collide(earlier, f))
            {
                return policy("consumer filter subjects overlap".into());
            }
        }

        if self.num_replicas < 0 {
            return policy("consumer replicas count can not be negative".into());
        }
        if self.num_replicas > 1 {
            return Err(ApiError::replicas_not_supported());
        }

        self.check_priority_groups()?;
        if self.priority_policy == PriorityPolicy::PinnedClient && self.priority_timeout <= 0 {
            self.priority_timeout = DEFAULT_PINNED_TIMEOUT;
        }
        // Pausing and priority groups are API level 1 features.
        let level =
            u32::from(self.pause_until.is_some() || self.priority_policy != PriorityPolicy::None);
        set_server_metadata(&mut self.metadata, level, server_version);
        if metadata_size(&self.metadata) > MAX_METADATA_SIZE {
            return policy("consumer metadata exceeds maximum size of 128 KiB".into());
        }
        Ok(())
    }

    /// Priority groups (ADR-42), with the codes and texts nats-server 2.15.1 answers.
    fn check_priority_groups(&self) -> Result<(), ApiError> {
        let none = self.priority_policy == PriorityPolicy::None;
        if !none && self.priority_groups.is_empty() {
            return Err(ApiError::new(
                400,
                10159,
                "Setting PriorityPolicy requires at least one PriorityGroup to be set",
            ));
        }
        if none && !self.priority_groups.is_empty() {
            return Err(ApiError::new(
                400,
                10196,
                "consumer can not have priority groups when policy is none",
            ));
        }
        for g in &self.priority_groups {
            if g.is_empty() {
                return Err(ApiError::new(
                    400,
                    10161,
                    "Group name cannot be an empty string",
                ));
            }
            if !valid_group_name(g) {
                return Err(ApiError::new(
                    400,
                    10162,
                    "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
                ));
            }
        }
        if !none && self.is_push() {
            return Err(ApiError::invalid_consumer_policy(
                "priority groups are only supported on pull consumers",
            ));
        }
        Ok(())
    }

    /// Update rules (§6.2). `self` is the current (normalised) configuration, `new` the
    /// normalised requested one. Immutable fields and push↔pull switches are `500/10012`.
    /// Changing a push `deliver_subject` is allowed here; that the old one has no interest is
    /// the caller's check.
    pub fn check_update(&self, new: &ConsumerConfig) -> Result<(), ApiError> {
        let refuse = |reason: &str| Err(ApiError::consumer_update(reason));
        if self.deliver_policy != new.deliver_policy {
            return refuse("deliver policy can not be updated");
        }
        if self.opt_start_seq != new.opt_start_seq {
            return refuse("start sequence can not be updated");
        }
        if self.opt_start_time.as_deref().and_then(parse_rfc3339)
            != new.opt_start_time.as_deref().and_then(parse_rfc3339)
        {
            return refuse("start time can not be updated");
        }
        if self.ack_policy != new.ack_policy {
            return refuse("ack policy can not be updated");
        }
        if self.replay_policy != new.replay_policy {
            return refuse("replay policy can not be updated");
        }
        match (self.is_push(), new.is_push()) {
            (false, true) => return refuse("can not update pull consumer to push based"),
            (true, false) => return refuse("can not update push consumer to pull based"),
            _ => {}
        }
        if self.idle_heartbeat != new.idle_heartbeat {
            return refuse("idle heartbeat can not be updated");
        }
        if self.flow_control != new.flow_control {
            return refuse("flow control can not be updated");
        }
        if self.mem_storage != new.mem_storage {
            return refuse("memory storage can not be updated");
        }
        if self.max_waiting != new.max_waiting {
            return refuse("max waiting can not be updated");
        }
        if self.durable_name != new.durable_name {
            return refuse("durable name can not be updated");
        }
        Ok(())
    }

    /// Whether two normalised configurations are the same (idempotent create): every field
    /// equal, ignoring server-owned `_nats.` metadata keys.
    pub fn same_as(&self, other: &ConsumerConfig) -> bool {
        if !user_metadata_eq(&self.metadata, &other.metadata) {
            return false;
        }
        let mut a = self.clone();
        let mut b = other.clone();
        a.metadata.clear();
        b.metadata.clear();
        a == b
    }

    /// The echo as a JSON value (key order not kept; `serde_json::to_string` keeps it).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// The policy as words in refusal texts (`deliver all`, `deliver last per subject`).
fn deliver_policy_words(p: DeliverPolicy) -> &'static str {
    match p {
        DeliverPolicy::All => "all",
        DeliverPolicy::Last => "last",
        DeliverPolicy::New => "new",
        DeliverPolicy::ByStartSequence => "by start sequence",
        DeliverPolicy::ByStartTime => "by start time",
        DeliverPolicy::LastPerSubject => "last per subject",
    }
}

/// Workqueue-stream rules for a new or updated consumer (§5.6): a pull consumer needs
/// `ack_policy: explicit` (10084); with other consumers present, neither may be unfiltered
/// (10099) and filters must not overlap (10100). `others` are the stream's other consumers
/// (exclude the one being updated). Does nothing for other retention policies.
pub fn check_workqueue_consumer<'a>(
    stream: &StreamConfig,
    new: &ConsumerConfig,
    others: impl IntoIterator<Item = &'a ConsumerConfig>,
) -> Result<(), ApiError> {
    if stream.retention != Retention::Workqueue {
        return Ok(());
    }
    if !new.is_push() && new.ack_policy != AckPolicy::Explicit {
        return Err(ApiError::wq_pull_needs_explicit_ack());
    }
    let mine = new.filters();
    for other in others {
        let theirs = other.filters();
        if mine.is_empty() || theirs.is_empty() {
            return Err(ApiError::wq_multiple_unfiltered());
        }
        if mine
            .iter()
            .any(|a| theirs.iter().any(|b| subjects_collide(a, b)))
        {
            return Err(ApiError::wq_filter_not_unique());
        }
    }
    Ok(())
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The echo, field by field (§11 capture order for the keys it shows).
#[derive(Serialize)]
struct ConsumerConfigView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    durable_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    deliver_policy: DeliverPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    opt_start_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    opt_start_time: Option<&'a str>,
    ack_policy: AckPolicy,
    #[serde(skip_serializing_if = "is_zero")]
    ack_wait: i64,
    #[serde(skip_serializing_if = "is_zero")]
    max_deliver: i64,
    #[serde(skip_serializing_if = "<[i64]>::is_empty")]
    backoff: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    filter_subject: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    filter_subjects: &'a [String],
    replay_policy: ReplayPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit_bps: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sample_freq: Option<&'a str>,
    #[serde(skip_serializing_if = "is_zero")]
    max_waiting: i64,
    #[serde(skip_serializing_if = "is_zero")]
    max_ack_pending: i64,
    #[serde(skip_serializing_if = "is_zero")]
    idle_heartbeat: i64,
    #[serde(skip_serializing_if = "is_false")]
    flow_control: bool,
    #[serde(skip_serializing_if = "is_false")]
    headers_only: bool,
    #[serde(skip_serializing_if = "is_zero")]
    max_batch: i64,
    #[serde(skip_serializing_if = "is_zero")]
    max_expires: i64,
    #[serde(skip_serializing_if = "is_zero")]
    max_bytes: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    deliver_subject: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deliver_group: Option<&'a str>,
    #[serde(skip_serializing_if = "is_zero")]
    inactive_threshold: i64,
    num_replicas: i64,
    #[serde(skip_serializing_if = "is_false")]
    mem_storage: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pause_until: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    priority_groups: &'a [String],
    #[serde(skip_serializing_if = "is_no_priority")]
    priority_policy: PriorityPolicy,
    #[serde(skip_serializing_if = "is_zero")]
    priority_timeout: i64,
}

fn is_no_priority(p: &PriorityPolicy) -> bool {
    *p == PriorityPolicy::None
}

impl Serialize for ConsumerConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ConsumerConfigView {
            durable_name: self.durable_name.as_deref(),
            name: self.name.as_deref(),
            description: self.description.as_deref(),
            deliver_policy: self.deliver_policy,
            opt_start_seq: self.opt_start_seq,
            opt_start_time: self.opt_start_time.as_deref(),
            ack_policy: self.ack_policy,
            ack_wait: self.ack_wait,
            max_deliver: self.max_deliver,
            backoff: &self.backoff,
            filter_subject: self.filter_subject.as_deref(),
            filter_subjects: &self.filter_subjects,
            replay_policy: self.replay_policy,
            rate_limit_bps: self.rate_limit_bps,
            sample_freq: self.sample_freq.as_deref(),
            max_waiting: self.max_waiting,
            max_ack_pending: self.max_ack_pending,
            idle_heartbeat: self.idle_heartbeat,
            flow_control: self.flow_control,
            headers_only: self.headers_only,
            max_batch: self.max_batch,
            max_expires: self.max_expires,
            max_bytes: self.max_bytes,
            deliver_subject: self.deliver_subject.as_deref(),
            deliver_group: self.deliver_group.as_deref(),
            inactive_threshold: self.inactive_threshold,
            num_replicas: self.num_replicas,
            mem_storage: self.mem_storage,
            metadata: &self.metadata,
            pause_until: self.pause_until.as_deref(),
            priority_groups: &self.priority_groups,
            priority_policy: self.priority_policy,
            priority_timeout: self.priority_timeout,
        }
        .serialize(s)
    }
}

/// A pull request (`CONSUMER.MSG.NEXT`, §7.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// Messages wanted (at least 1).
    pub batch: u64,
    /// Nanoseconds until the request expires; `0` = never.
    pub expires: i64,
    /// Do not wait for new messages.
    pub no_wait: bool,
    /// Byte cap for this request; `0` = none.
    pub max_bytes: u64,
    /// Per-request idle heartbeat, nanoseconds; `0` = none.
    pub idle_heartbeat: i64,
    /// The priority group the request belongs to (ADR-42).
    pub group: Option<String>,
    /// Overflow: serve only while the consumer has at least this many pending; `0` = unset.
    pub min_pending: i64,
    /// Overflow: serve only while at least this many acks are outstanding; `0` = unset.
    pub min_ack_pending: i64,
    /// Prioritized: 0 (first) to 9.
    pub priority: i64,
    /// `pinned_client`: the pin id the client was given (`Nats-Pin-Id`), if it holds one.
    pub id: Option<String>,
}

impl Default for PullRequest {
    fn default() -> Self {
        Self {
            batch: 1,
            expires: 0,
            no_wait: false,
            max_bytes: 0,
            idle_heartbeat: 0,
            group: None,
            min_pending: 0,
            min_ack_pending: 0,
            priority: 0,
            id: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawPullRequest {
    batch: Option<i64>,
    expires: Option<i64>,
    no_wait: Option<bool>,
    max_bytes: Option<i64>,
    idle_heartbeat: Option<i64>,
    group: Option<String>,
    min_pending: Option<i64>,
    min_ack_pending: Option<i64>,
    priority: Option<i64>,
    id: Option<String>,
}

/// Parses a pull request body (§7.1): empty → batch 1 waiting indefinitely; decimal text →
/// that batch; otherwise JSON (`batch`, `expires`, `no_wait`, `max_bytes`, `idle_heartbeat`,
/// the priority-group fields `group`, `min_pending`, `min_ack_pending`, `priority`, `id`; unknown
/// keys ignored). A batch of 0 or less means 1; negative
/// durations and byte caps mean "none" (our choice). The error is the text for
/// `NATS/1.0 400 Bad Request - <reason>`: `heartbeat value too large` when
/// `2 * idle_heartbeat > expires`, else the JSON parser's text.
pub fn parse_pull_request(body: &[u8]) -> Result<PullRequest, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?.trim();
    if text.is_empty() {
        return Ok(PullRequest::default());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let batch: u64 = text.parse().map_err(|_| "invalid batch size".to_string())?;
        return Ok(PullRequest {
            batch: batch.max(1),
            ..PullRequest::default()
        });
    }
    let raw: Option<RawPullRequest> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let raw = raw.unwrap_or_default();
    let req = PullRequest {
        batch: raw
            .batch
            .and_then(|b| u64::try_from(b).ok())
            .unwrap_or(1)
            .max(1),
        expires: raw.expires.unwrap_or(0).max(0),
        no_wait: raw.no_wait.unwrap_or(false),
        max_bytes: raw
            .max_bytes
            .and_then(|b| u64::try_from(b).ok())
            .unwrap_or(0),
        idle_heartbeat: raw.idle_heartbeat.unwrap_or(0).max(0),
        group: raw.group,
        min_pending: raw.min_pending.unwrap_or(0).max(0),
        min_ack_pending: raw.min_ack_pending.unwrap_or(0).max(0),
        priority: raw.priority.unwrap_or(0),
        id: raw.id.filter(|id| !id.is_empty()),
    };
    if req.idle_heartbeat > 0 && req.idle_heartbeat.saturating_mul(2) > req.expires {
        return Err("heartbeat value too large".to_string());
    }
    Ok(req)
}

impl Action {
    /// The `action` string of a request (`""` for create-or-update).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateOrUpdate => "",
            Self::Create => "create",
            Self::Update => "update",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::jetstream::config::parse_stream_config;

    const VERSION: &str = "2.15.1";

    fn stream(body: &str) -> StreamConfig {
        let mut s = parse_stream_config(body.as_bytes()).unwrap();
        s.normalize(VERSION).unwrap();
        s
    }

    fn orders() -> StreamConfig {
        stream(r#"{"name":"ORDERS","subjects":["orders.>"]}"#)
    }

    /// Parses a create request, resolves the name for the given subject form and normalises.
    fn create(
        body: &str,
        stream_cfg: &StreamConfig,
        consumer: Option<&str>,
        filter: Option<&str>,
        legacy: bool,
    ) -> Result<(String, ConsumerConfig), ApiError> {
        let mut req = parse_create_request(body.as_bytes())?;
        let name = resolve_consumer_name(&mut req.config, consumer, filter, legacy)?;
        req.config.normalize(stream_cfg, VERSION)?;
        Ok((name, req.config))
    }

    fn cfg(config: &str) -> ConsumerConfig {
        let body = format!(r#"{{"stream_name":"ORDERS","config":{config}}}"#);
        create(&body, &orders(), None, None, false).unwrap().1
    }

    #[test]
    fn capture_durable_pull_echo_is_exact() {
        let body = r#"{"stream_name":"ORDERS","config":{"durable_name":"proc","ack_policy":"explicit","deliver_policy":"all","filter_subject":"orders.>","max_deliver":5,"ack_wait":30000000000},"action":"create"}"#;
        let req = parse_create_request(body.as_bytes()).unwrap();
        assert_eq!(req.action, Action::Create);
        assert_eq!(req.stream_name, "ORDERS");
        let (name, c) = create(body, &orders(), Some("proc"), None, false).unwrap();
        assert_eq!(name, "proc");
        // The echo parses and normalises back to itself (stored configs reload unchanged).
        let echo = serde_json::to_string(&c).unwrap();
        let mut back: ConsumerConfig = serde_json::from_str(&echo).unwrap();
        back.normalize(&orders(), VERSION).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"durable_name":"proc","name":"proc","deliver_policy":"all","ack_policy":"explicit","ack_wait":30000000000,"max_deliver":5,"filter_subject":"orders.>","replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"num_replicas":0,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}"#
        );
    }

    #[test]
    fn nats_py_body_through_filter_subject_form() {
        let py = stream(r#"{"name":"PY","subjects":["py.>"]}"#);
        let body = r#"{"stream_name": "PY", "config": {"name": "pyd", "durable_name": "pyd", "deliver_policy": "all", "ack_policy": "explicit", "filter_subject": "py.>", "replay_policy": "instant", "ack_wait": 0, "idle_heartbeat": 0, "inactive_threshold": 0}}"#;
        let (name, c) = create(body, &py, Some("pyd"), Some("py.>"), false).unwrap();
        assert_eq!(name, "pyd");
        assert_eq!(c.ack_wait, DEFAULT_ACK_WAIT);
        assert_eq!(c.max_deliver, -1);
        assert_eq!(c.max_waiting, 512);
        assert_eq!(c.max_ack_pending, 1000);
        assert_eq!(
            c.inactive_threshold, 0,
            "durables get no inactive threshold"
        );
        assert_eq!(c.idle_heartbeat, 0);
        let v = c.to_json();
        assert_eq!(v["name"], "pyd");
        assert_eq!(v["max_deliver"], -1);
        assert_eq!(v["num_replicas"], 0);
        assert!(v.get("inactive_threshold").is_none());
        assert!(v.get("idle_heartbeat").is_none());
        // Same request again is the same config.
        let (_, again) = create(body, &py, Some("pyd"), Some("py.>"), false).unwrap();
        assert!(again.same_as(&c));
    }

    #[test]
    fn ack_none_defaults_and_ephemeral_threshold() {
        let c = cfg(r#"{"deliver_policy":"last_per_subject","filter_subject":"orders.x"}"#);
        assert_eq!(c.ack_policy, AckPolicy::None);
        assert_eq!(c.ack_wait, 0);
        assert_eq!(c.max_ack_pending, 0);
        assert_eq!(c.inactive_threshold, DEFAULT_INACTIVE_THRESHOLD);
        assert_eq!(c.name, None, "generated names are not echoed in config");
        let v = c.to_json();
        assert!(v.get("ack_wait").is_none());
        assert!(v.get("max_ack_pending").is_none());
        assert!(v.get("name").is_none());
        assert_eq!(v["inactive_threshold"], 5_000_000_000i64);
        assert_eq!(v["ack_policy"], "none");
    }

    #[test]
    fn ordered_push_consumer_as_clients_send_it() {
        let c = cfg(
            r#"{"deliver_subject":"_INBOX.x","ack_policy":"none","max_deliver":1,"flow_control":true,"idle_heartbeat":5000000000,"mem_storage":true,"num_replicas":1,"inactive_threshold":300000000000,"deliver_policy":"by_start_sequence","opt_start_seq":7,"headers_only":true,"action":""}"#,
        );
        assert!(c.is_push());
        assert_eq!(c.max_waiting, 0);
        let v = c.to_json();
        assert_eq!(v["opt_start_seq"], 7);
        assert_eq!(v["flow_control"], true);
        assert_eq!(v["mem_storage"], true);
        assert_eq!(v["num_replicas"], 1);
        assert!(v.get("max_waiting").is_none());
    }

    #[test]
    fn backoff_sets_ack_wait() {
        let c = cfg(r#"{"ack_policy":"explicit","backoff":[200000000,500000000],"max_deliver":3}"#);
        assert_eq!(c.ack_wait, 200_000_000);
        // max_deliver == len(backoff) is accepted, as by the reference.
        cfg(r#"{"ack_policy":"explicit","backoff":[1,2,3],"max_deliver":3}"#);
        cfg(r#"{"ack_policy":"explicit","backoff":[1,2,3]}"#);
    }

    #[test]
    fn stream_consumer_limits() {
        let s = stream(
            r#"{"name":"L","consumer_limits":{"inactive_threshold":2000000000,"max_ack_pending":50}}"#,
        );
        let body = r#"{"stream_name":"L","config":{"ack_policy":"explicit"}}"#;
        let (_, c) = create(body, &s, None, None, false).unwrap();
        assert_eq!(c.max_ack_pending, 50);
        assert_eq!(c.inactive_threshold, 2_000_000_000);
        let body = r#"{"stream_name":"L","config":{"ack_policy":"explicit","max_ack_pending":51}}"#;
        assert_eq!(
            create(body, &s, None, None, false).unwrap_err().err_code,
            10094
        );
        let body = r#"{"stream_name":"L","config":{"inactive_threshold":3000000000}}"#;
        let e = create(body, &s, None, None, false).unwrap_err();
        assert_eq!(
            e.description,
            "consumer inactive threshold exceeds the stream's limit of 2s"
        );
    }

    fn refusal(config: &str) -> ApiError {
        let body = format!(r#"{{"stream_name":"ORDERS","config":{config}}}"#);
        create(&body, &orders(), None, None, false).unwrap_err()
    }

    #[test]
    fn validation_refusals() {
        let e = refusal(r#"{"deliver_policy":"by_start_sequence"}"#);
        assert_eq!((e.code, e.err_code), (400, 10094));
        assert_eq!(e.description, "consumer delivery policy is deliver by start sequence, but optional start sequence is not set");
        let e = refusal(r#"{"deliver_policy":"by_start_time"}"#);
        assert_eq!(
            e.description,
            "consumer delivery policy is deliver by start time, but optional start time is not set"
        );
        let e = refusal(r#"{"deliver_policy":"all","opt_start_seq":4}"#);
        assert_eq!(
            e.description,
            "consumer delivery policy is deliver all, but optional start sequence is also set"
        );
        let e = refusal(r#"{"deliver_policy":"new","opt_start_time":"2026-11-29T09:03:16Z"}"#);
        assert_eq!(
            e.description,
            "consumer delivery policy is deliver new, but optional start time is also set"
        );
        assert_eq!(
            refusal(r#"{"idle_heartbeat":1000000000}"#),
            ApiError::heartbeat_requires_push()
        );
        assert_eq!(
            refusal(r#"{"deliver_subject":"d","flow_control":true}"#),
            ApiError::flow_control_requires_heartbeat()
        );
        assert_eq!(
            refusal(r#"{"ack_policy":"explicit","backoff":[1,2,3],"max_deliver":2}"#),
            ApiError::max_deliver_backoff()
        );
        assert_eq!(
            refusal(r#"{"num_replicas":3}"#),
            ApiError::replicas_not_supported()
        );
        for config in [
            r#"{"flow_control":true}"#,
            r#"{"rate_limit_bps":1000}"#,
            r#"{"deliver_subject":"d.*"}"#,
            r#"{"deliver_subject":"d","max_waiting":5}"#,
            r#"{"deliver_subject":"d","idle_heartbeat":50000000}"#,
            r#"{"filter_subject":"orders..x"}"#,
            r#"{"filter_subject":"orders.a","filter_subjects":["orders.b"]}"#,
            r#"{"filter_subjects":["orders.a","orders.*"]}"#,
            r#"{"backoff":[0]}"#,
            r#"{"ack_wait":-1}"#,
            r#"{"inactive_threshold":-1}"#,
            r#"{"max_waiting":-1}"#,
            r#"{"name":"a b"}"#,
        ] {
            assert_eq!(refusal(config).err_code, 10094, "{config}");
        }
        // Filters that collide with (not only sit inside) the stream's subjects are fine, and
        // so are filters outside them (nats-server 2.15 accepts both).
        cfg(r#"{"filter_subject":">"}"#);
        cfg(r#"{"filter_subject":"other.x"}"#);
        cfg(r#"{"filter_subjects":["orders.a","orders.b"]}"#);
        // Bad JSON types and values.
        for body in [
            r#"{"stream_name":"ORDERS","config":{"ack_policy":"sometimes"}}"#,
            r#"{"stream_name":"ORDERS","config":{"opt_start_time":"yesterday"}}"#,
            r#"{"stream_name":"ORDERS","action":"replace"}"#,
            r#"{"stream_name":"ORDERS","config":{"max_deliver":"5"}}"#,
            r#"{"stream_name""#,
        ] {
            assert_eq!(
                parse_create_request(body.as_bytes()).unwrap_err().err_code,
                10025,
                "{body}"
            );
        }
        assert_eq!(
            parse_create_request(b"").unwrap_err(),
            ApiError::bad_request()
        );
    }

    #[test]
    fn lenient_request_parsing() {
        let req = parse_create_request(
            br#"{"stream_name":"ORDERS","config":{"durable_name":"","name":null,"deliver_policy":"undefined","opt_start_seq":0,"opt_start_time":"0001-01-01T00:00:00Z","priority_groups":null,"unknown":1},"action":"","pedantic":true}"#,
        )
        .unwrap();
        assert_eq!(req.action, Action::CreateOrUpdate);
        assert!(req.pedantic);
        assert_eq!(req.config.durable_name, None);
        assert_eq!(req.config.opt_start_seq, None);
        assert_eq!(req.config.opt_start_time, None);
        assert_eq!(req.config.deliver_policy, DeliverPolicy::All);
        let req = parse_create_request(br#"{"stream_name":"ORDERS","action":"update"}"#).unwrap();
        assert_eq!(req.action, Action::Update);
        assert_eq!(req.config, ConsumerConfig::default());
        assert_eq!(Action::Create.as_str(), "create");
    }

    #[test]
    fn name_resolution_plain_create() {
        let mut c = ConsumerConfig::default();
        let name = resolve_consumer_name(&mut c, None, None, false).unwrap();
        assert_eq!(name.len(), GENERATED_NAME_LEN);
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(c.name, None);
        assert_ne!(generate_name(), generate_name());

        let mut c = ConsumerConfig {
            name: Some("mine".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, None, None, false).unwrap(),
            "mine"
        );

        let mut c = ConsumerConfig {
            durable_name: Some("d".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, None, None, false).unwrap_err(),
            ApiError::ephemeral_with_durable()
        );
    }

    #[test]
    fn name_resolution_named_create() {
        // A missing or different config.name is replaced by <C>.
        let mut c = ConsumerConfig {
            name: Some("other".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("c1"), None, false).unwrap(),
            "c1"
        );
        assert_eq!(c.name.as_deref(), Some("c1"));

        let mut c = ConsumerConfig {
            durable_name: Some("c1".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("c1"), None, false).unwrap(),
            "c1"
        );
        assert_eq!(c.name.as_deref(), Some("c1"));

        let mut c = ConsumerConfig {
            durable_name: Some("d".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("c1"), None, false).unwrap_err(),
            ApiError::durable_name_mismatch()
        );
        let mut c = ConsumerConfig::default();
        assert_eq!(
            resolve_consumer_name(&mut c, Some(">"), None, false)
                .unwrap_err()
                .err_code,
            10094
        );
    }

    #[test]
    fn name_resolution_filtered_create() {
        let mut c = ConsumerConfig {
            filter_subject: Some("orders.*".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("c1"), Some("orders.*"), false).unwrap(),
            "c1"
        );
        let mut c = ConsumerConfig {
            filter_subjects: vec!["orders.*".into()],
            ..Default::default()
        };
        resolve_consumer_name(&mut c, Some("c1"), Some("orders.*"), false).unwrap();
        for filter in [None, Some("orders.x")] {
            let mut c = ConsumerConfig {
                filter_subject: filter.map(String::from),
                ..Default::default()
            };
            assert_eq!(
                resolve_consumer_name(&mut c, Some("c1"), Some("orders.*"), false).unwrap_err(),
                ApiError::filter_mismatch()
            );
        }
    }

    #[test]
    fn name_resolution_legacy_durable() {
        let mut c = ConsumerConfig {
            durable_name: Some("dur".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("dur"), None, true).unwrap(),
            "dur"
        );
        assert_eq!(c.name.as_deref(), Some("dur"));
        for durable in [None, Some("x")] {
            let mut c = ConsumerConfig {
                durable_name: durable.map(String::from),
                ..Default::default()
            };
            assert_eq!(
                resolve_consumer_name(&mut c, Some("dur"), None, true).unwrap_err(),
                ApiError::durable_name_mismatch()
            );
        }
        let mut c = ConsumerConfig {
            durable_name: Some("dur".into()),
            name: Some("other".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("dur"), None, true).unwrap_err(),
            ApiError::durable_and_name_differ()
        );
        let mut c = ConsumerConfig {
            durable_name: Some("a*".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_consumer_name(&mut c, Some("a*"), None, true).unwrap_err(),
            ApiError::durable_name_invalid()
        );
    }

    #[test]
    fn update_rules() {
        let cur = cfg(r#"{"name":"c","ack_policy":"explicit","filter_subject":"orders.a"}"#);
        for ok in [
            r#"{"name":"c","ack_policy":"explicit","filter_subject":"orders.b","max_deliver":3,"ack_wait":1000000000,"description":"x","headers_only":true,"max_ack_pending":5,"metadata":{"k":"v"}}"#,
            r#"{"name":"c","ack_policy":"explicit","backoff":[1000000000],"inactive_threshold":9000000000}"#,
        ] {
            cur.check_update(&cfg(ok)).unwrap();
        }
        let cases = [
            (
                r#"{"name":"c","ack_policy":"explicit","deliver_policy":"new"}"#,
                "deliver policy can not be updated",
            ),
            (
                r#"{"name":"c","ack_policy":"all"}"#,
                "ack policy can not be updated",
            ),
            (
                r#"{"name":"c","ack_policy":"explicit","replay_policy":"original"}"#,
                "replay policy can not be updated",
            ),
            (
                r#"{"name":"c","ack_policy":"explicit","deliver_subject":"d"}"#,
                "can not update pull consumer to push based",
            ),
            (
                r#"{"name":"c","ack_policy":"explicit","max_waiting":10}"#,
                "max waiting can not be updated",
            ),
            (
                r#"{"name":"c","ack_policy":"explicit","mem_storage":true}"#,
                "memory storage can not be updated",
            ),
        ];
        for (body, reason) in cases {
            let e = cur.check_update(&cfg(body)).unwrap_err();
            assert_eq!((e.code, e.err_code), (500, 10012), "{body}");
            assert_eq!(e.description, reason);
        }
        let push = cfg(r#"{"deliver_subject":"d","idle_heartbeat":1000000000}"#);
        let e = push.check_update(&cfg(r#"{}"#)).unwrap_err();
        assert_eq!(e.description, "can not update push consumer to pull based");
        let e = push
            .check_update(&cfg(r#"{"deliver_subject":"d"}"#))
            .unwrap_err();
        assert_eq!(e.description, "idle heartbeat can not be updated");
        push.check_update(&cfg(
            r#"{"deliver_subject":"e","idle_heartbeat":1000000000}"#,
        ))
        .unwrap();
        let seq = cfg(r#"{"deliver_policy":"by_start_sequence","opt_start_seq":3}"#);
        let e = seq
            .check_update(&cfg(
                r#"{"deliver_policy":"by_start_sequence","opt_start_seq":4}"#,
            ))
            .unwrap_err();
        assert_eq!(e.description, "start sequence can not be updated");
    }

    #[test]
    fn workqueue_rules() {
        let wq = stream(r#"{"name":"WQ","subjects":["wq.>"],"retention":"workqueue"}"#);
        let mk = |config: &str| {
            let body = format!(r#"{{"stream_name":"WQ","config":{config}}}"#);
            create(&body, &wq, None, None, false).unwrap().1
        };
        let none = mk(r#"{}"#);
        assert_eq!(
            check_workqueue_consumer(&wq, &none, []).unwrap_err(),
            ApiError::wq_pull_needs_explicit_ack()
        );
        let a = mk(r#"{"ack_policy":"explicit","filter_subject":"wq.a"}"#);
        let b = mk(r#"{"ack_policy":"explicit","filter_subject":"wq.b"}"#);
        let star = mk(r#"{"ack_policy":"explicit","filter_subject":"wq.*"}"#);
        let all = mk(r#"{"ack_policy":"explicit"}"#);
        check_workqueue_consumer(&wq, &all, []).unwrap();
        check_workqueue_consumer(&wq, &b, [&a]).unwrap();
        assert_eq!(
            check_workqueue_consumer(&wq, &all, [&a]).unwrap_err(),
            ApiError::wq_multiple_unfiltered()
        );
        assert_eq!(
            check_workqueue_consumer(&wq, &a, [&all]).unwrap_err(),
            ApiError::wq_multiple_unfiltered()
        );
        assert_eq!(
            check_workqueue_consumer(&wq, &star, [&a, &b]).unwrap_err(),
            ApiError::wq_filter_not_unique()
        );
        // Not a workqueue: nothing to check.
        check_workqueue_consumer(&orders(), &none, [&none]).unwrap();
    }

    #[test]
    fn pull_request_bodies() {
        assert_eq!(parse_pull_request(b"").unwrap(), PullRequest::default());
        assert_eq!(parse_pull_request(b"").unwrap().batch, 1);
        assert_eq!(parse_pull_request(b"5").unwrap().batch, 5);
        assert_eq!(parse_pull_request(b" 7\r\n").unwrap().batch, 7);
        assert_eq!(parse_pull_request(b"0").unwrap().batch, 1);
        assert_eq!(parse_pull_request(b"null").unwrap(), PullRequest::default());
        let r =
            parse_pull_request(br#"{"batch": 2, "expires": 999900000, "no_wait": true}"#).unwrap();
        assert_eq!(
            r,
            PullRequest {
                batch: 2,
                expires: 999_900_000,
                no_wait: true,
                max_bytes: 0,
                idle_heartbeat: 0,
                ..PullRequest::default()
            }
        );
        let r = parse_pull_request(
            br#"{"batch":1,"group":"A","min_pending":3,"min_ack_pending":2,"priority":4}"#,
        )
        .unwrap();
        assert_eq!(r.group.as_deref(), Some("A"));
        assert_eq!((r.min_pending, r.min_ack_pending, r.priority), (3, 2, 4));
        let r = parse_pull_request(
            br#"{"batch":5,"expires":800000000,"no_wait":true,"max_bytes":0,"min_pending":null,"min_ack_pending":null,"group":null,"id":null,"priority":null}"#,
        )
        .unwrap();
        assert_eq!((r.batch, r.expires, r.no_wait), (5, 800_000_000, true));
        let r = parse_pull_request(
            br#"{"batch":200,"expires":30000000000,"max_bytes":1024,"idle_heartbeat":15000000000}"#,
        )
        .unwrap();
        assert_eq!((r.max_bytes, r.idle_heartbeat), (1024, 15_000_000_000));
        assert_eq!(
            parse_pull_request(br#"{"batch":1,"expires":1000000000,"idle_heartbeat":600000000}"#)
                .unwrap_err(),
            "heartbeat value too large"
        );
        assert_eq!(
            parse_pull_request(br#"{"idle_heartbeat":1000000000}"#).unwrap_err(),
            "heartbeat value too large"
        );
        assert_eq!(parse_pull_request(br#"{"batch":-3}"#).unwrap().batch, 1);
        assert!(parse_pull_request(b"abc").is_err());
        assert!(parse_pull_request(b"{\"batch\":").is_err());
        assert!(parse_pull_request(b"99999999999999999999999").is_err());
        assert!(parse_pull_request(&[0xff, 0xfe]).is_err());
    }
}
