//! Stream and consumer configuration as the JetStream API carries it.
//!
//! Clients send configurations as JSON in create/update requests and read them back,
//! normalised, in every info reply. Both directions must match what the reference server does
//! (spec §4.1, §6.2): requests are parsed leniently (unknown fields ignored, `null` and the
//! clients' `0`/`""` placeholders treated as absent), normalised (defaults filled in, limits
//! canonicalised, server-owned metadata added), validated, and echoed with the reference's keys
//! and omissions. This module holds what streams and consumers share: the policy enums and the
//! server-owned metadata; [`stream`] and [`consumer`] hold the two configurations.

pub mod consumer;
pub mod rules;
pub mod source;
pub mod stream;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use consumer::{
    parse_create_request, parse_pull_request, resolve_consumer_name, Action, ConsumerConfig,
    CreateConsumerRequest, PullRequest,
};
pub use stream::{
    parse_stream_config, subject_matches, subjects_collide, valid_name, valid_subject_pattern,
    ConsumerLimits, StreamConfig,
};

/// The JetStream API level this server implements (spec §1: level 5).
pub const API_LEVEL: u32 = 5;

/// Prefix of metadata keys the server owns; clients' values under it are replaced.
pub const SERVER_METADATA_PREFIX: &str = "_nats.";
/// Metadata key: API level of the server hosting the asset.
pub const METADATA_LEVEL: &str = "_nats.level";
/// Metadata key: API level the asset's configuration needs.
pub const METADATA_REQ_LEVEL: &str = "_nats.req.level";
/// Metadata key: version of the server hosting the asset.
pub const METADATA_VERSION: &str = "_nats.ver";

/// Replaces the server-owned keys of `metadata` with this server's: level, the level the asset
/// needs (`required_level`) and `server_version`.
pub(crate) fn set_server_metadata(
    metadata: &mut BTreeMap<String, String>,
    required_level: u32,
    server_version: &str,
) {
    metadata.retain(|k, _| !k.starts_with(SERVER_METADATA_PREFIX));
    metadata.insert(METADATA_LEVEL.to_string(), API_LEVEL.to_string());
    metadata.insert(METADATA_REQ_LEVEL.to_string(), required_level.to_string());
    metadata.insert(METADATA_VERSION.to_string(), server_version.to_string());
}

/// Whether two metadata maps are equal once server-owned keys are ignored.
pub(crate) fn user_metadata_eq(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    let user = |m: &BTreeMap<String, String>| {
        m.iter()
            .filter(|(k, _)| !k.starts_with(SERVER_METADATA_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    user(a) == user(b)
}

/// Total size of a metadata map as counted against its limit: the bytes of keys and values.
pub(crate) fn metadata_size(metadata: &BTreeMap<String, String>) -> usize {
    metadata.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// Field helper: `null` reads as the default, as an absent field does.
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Field helper: `null` and the type's zero (`0`, `""`: the clients' "unset") read as `None`.
pub(crate) fn zero_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default + PartialEq,
{
    Ok(Option::<T>::deserialize(d)?.filter(|v| *v != T::default()))
}

/// Field helper: an int32 on the wire (a larger number is a JSON error, as with the
/// reference), held as `i64`; `null` reads as `0`.
pub(crate) fn int32<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Ok(i64::from(Option::<i32>::deserialize(d)?.unwrap_or(0)))
}

/// A policy enum carried as a lowercase string in the API.
pub trait ApiEnum: Sized + Copy + Default + 'static {
    /// The JSON field name, for error messages.
    const FIELD: &'static str;
    /// Every variant, for parsing.
    const ALL: &'static [Self];
    /// The API string of this variant.
    fn as_str(self) -> &'static str;
    /// Parses an API string (ASCII case-insensitive).
    fn from_api(s: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.as_str().eq_ignore_ascii_case(s))
    }
}

/// Reads an optional enum field of a request: absent, `null` and `""` give the default; an
/// unknown value is an error whose text ends up after `invalid JSON: `.
pub(crate) fn enum_field<T: ApiEnum>(value: Option<&str>) -> Result<T, String> {
    match value {
        None | Some("") => Ok(T::default()),
        Some(s) => {
            T::from_api(s).ok_or_else(|| format!("can not unmarshal {:?} as {}", s, T::FIELD))
        }
    }
}

macro_rules! api_enum {
    ($(#[$meta:meta])* $name:ident, $field:literal,
     { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $(
                $(#[$vmeta])*
                $variant,
            )+
        }

        impl ApiEnum for $name {
            const FIELD: &'static str = $field;
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Option::<String>::deserialize(d)?;
                enum_field::<Self>(s.as_deref()).map_err(serde::de::Error::custom)
            }
        }
    };
}

api_enum!(
    /// When a stream may acknowledge a publish (ADR-56). `async` allows a PubAck before the
    /// message is on disk; sealstream accepts and echoes it but still fsyncs before every
    /// PubAck — stronger than asked, never weaker (docs/compatibility.md).
    PersistMode, "persist_mode", {
        /// Persist, then acknowledge.
        #[default]
        Default => "default",
        /// The client allows acknowledging first.
        Async => "async",
    }
);

api_enum!(
    /// How a pull consumer's priority groups choose among waiting pull requests (ADR-42).
    PriorityPolicy, "priority_policy", {
        /// No priority groups.
        #[default]
        None => "none",
        /// A request may ask to be served only while the consumer is behind (`min_pending`,
        /// `min_ack_pending`).
        Overflow => "overflow",
        /// One client at a time is served (not implemented: refused at create).
        PinnedClient => "pinned_client",
        /// The request with the lowest `priority` (0–9) is served first.
        Prioritized => "prioritized",
    }
);

api_enum!(
    /// Stream retention policy (§4.1, §5.6).
    Retention, "retention", {
        /// Only limits remove messages.
        #[default]
        Limits => "limits",
        /// Messages are removed once every interested consumer acked them.
        Interest => "interest",
        /// Messages are removed once one consumer acked them.
        Workqueue => "workqueue",
    }
);

api_enum!(
    /// What a stream does at its limits (§5.4).
    DiscardPolicy, "discard", {
        /// Drop the oldest messages.
        #[default]
        Old => "old",
        /// Reject new messages.
        New => "new",
    }
);

api_enum!(
    /// Where a stream keeps its messages.
    StorageType, "storage", {
        /// On disk.
        #[default]
        File => "file",
        /// In memory.
        Memory => "memory",
    }
);

api_enum!(
    /// Where a consumer starts (§6.2).
    DeliverPolicy, "deliver_policy", {
        /// From the first message.
        #[default]
        All => "all",
        /// From the last message.
        Last => "last",
        /// Only messages stored after creation.
        New => "new",
        /// From `opt_start_seq`.
        ByStartSequence => "by_start_sequence",
        /// From `opt_start_time`.
        ByStartTime => "by_start_time",
        /// The last message of each subject, then new ones.
        LastPerSubject => "last_per_subject",
    }
);

api_enum!(
    /// How a consumer's deliveries are acknowledged (§6.2). Absent means `none`.
    AckPolicy, "ack_policy", {
        /// No acks expected.
        #[default]
        None => "none",
        /// An ack covers every earlier delivery too.
        All => "all",
        /// Every delivery is acked on its own.
        Explicit => "explicit",
    }
);

api_enum!(
    /// How fast a consumer delivers stored messages (§6.2).
    ReplayPolicy, "replay_policy", {
        /// As fast as possible.
        #[default]
        Instant => "instant",
        /// Paced by the stored timestamps.
        Original => "original",
    }
);

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_and_defaults() {
        assert_eq!(
            serde_json::to_string(&DeliverPolicy::ByStartSequence).unwrap(),
            r#""by_start_sequence""#
        );
        let p: DeliverPolicy = serde_json::from_str(r#""last_per_subject""#).unwrap();
        assert_eq!(p, DeliverPolicy::LastPerSubject);
        let r: Retention = serde_json::from_str(r#""WorkQueue""#).unwrap();
        assert_eq!(r, Retention::Workqueue);
        assert!(serde_json::from_str::<AckPolicy>(r#""sometimes""#).is_err());
        assert_eq!(enum_field::<AckPolicy>(Some("")).unwrap(), AckPolicy::None);
        assert_eq!(enum_field::<StorageType>(None).unwrap(), StorageType::File);
        assert!(enum_field::<StorageType>(Some("disk")).is_err());
        assert_eq!(Retention::default(), Retention::Limits);
        assert_eq!(DeliverPolicy::default(), DeliverPolicy::All);
        assert_eq!(ReplayPolicy::default(), ReplayPolicy::Instant);
        assert_eq!(ReplayPolicy::Original.to_string(), "original");
    }

    #[test]
    fn server_metadata() {
        let mut m = BTreeMap::new();
        m.insert("_nats.ver".to_string(), "old".to_string());
        m.insert("_nats.other".to_string(), "x".to_string());
        m.insert("team".to_string(), "a".to_string());
        set_server_metadata(&mut m, 0, "2.15.1");
        assert_eq!(m.len(), 4);
        assert_eq!(m["_nats.level"], "5");
        assert_eq!(m["_nats.req.level"], "0");
        assert_eq!(m["_nats.ver"], "2.15.1");
        let mut other = BTreeMap::new();
        other.insert("team".to_string(), "a".to_string());
        assert!(user_metadata_eq(&m, &other));
        other.insert("team".to_string(), "b".to_string());
        assert!(!user_metadata_eq(&m, &other));
        assert_eq!(metadata_size(&other), 5);
    }
}
