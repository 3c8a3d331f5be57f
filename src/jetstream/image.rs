//! A stream's whole engine state as one value: what a replicated stream's snapshot holds.
//!
//! Why it is whole: the replicas of a replicated stream run the same rounds in the same order,
//! so their engines agree. A snapshot lets a group drop the log before it, and a replica that
//! starts from one must then run the next rounds exactly as the others do — so the image
//! holds everything a round may read, not only what a restart of a single server keeps: the
//! messages (sequence, time, subject, headers, payload), the stream's first and last
//! sequence, the dedupe window, TTL timers, staged batches, armed schedules, and every
//! consumer as it is — pending deliveries with their deadlines, waiting pull requests, pins,
//! push state.
//!
//! Encoded with postcard (compact, no field names); configurations travel as their JSON echo,
//! which their own parsers read back (their serde forms omit unset options, which a
//! positional format cannot express). [`Stream::image`](super::stream::Stream::image) makes
//! one, [`Stream::from_image`](super::stream::Stream::from_image) starts a stream from one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::StreamConfig;
use super::consumer::Consumer;
use super::fast_batch;

/// The image of one stream (see the module docs).
#[derive(Serialize, Deserialize)]
pub struct StreamImage {
    /// Its configuration.
    #[serde(with = "json_text")]
    pub cfg: StreamConfig,
    /// Creation time (unix nanos).
    pub created: i64,
    /// The store's first and last sequence, and the last message's time.
    pub first_seq: u64,
    /// See `first_seq`.
    pub last_seq: u64,
    /// See `first_seq`.
    pub last_ts: i64,
    /// Every stored message, in sequence order.
    pub messages: Vec<ImageMsg>,
    /// The dedupe window, oldest first: (time, id, sequence).
    pub dedupe: Vec<(i64, String, u64)>,
    /// Per-message TTL timers: (expiry, sequence).
    pub ttl: Vec<(i64, u64)>,
    /// Every consumer, as it is.
    pub consumers: Vec<Consumer>,
    /// Atomic batches being staged: id, messages, bytes, last activity.
    pub batches: Vec<(String, Vec<ImageIncoming>, usize, i64)>,
    /// Fast-ingest batches open.
    pub fast: Vec<(String, fast_batch::Open)>,
    /// Armed schedules: subject, message sequence, fire time.
    pub schedules: Vec<(String, u64, i64)>,
    /// Why the stream is offline, if it is.
    pub offline: Option<String>,
    /// What later builds added: encoded after the fields above (see [`ImageExtras`]).
    #[serde(skip)]
    pub extras: ImageExtras,
    /// Where each mirror or source link stands: encoded after [`ImageExtras`].
    #[serde(skip)]
    pub sourcing: ImageSourcing,
}

/// The part of an image added after its first format, encoded after the rest: an image an
/// earlier build made ends before it (and decodes with these defaults), and an earlier build
/// reading a later image stops before it (postcard ignores what follows a value). A later
/// addition goes at the end of this struct the same way: it must be absent from images made
/// before it, so it needs a trailing block of its own.
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct ImageExtras {
    /// `prioritized` pull requests still held: (consumer, index in its line, until).
    pub pull_holds: Vec<(String, u64, i64)>,
}

/// The second trailing block: each mirror or source link's position. The messages alone
/// cannot tell it once limits removed the newest copied ones (a source's position is read
/// from its copies' `Nats-Stream-Source` headers), and a replica started from the image must
/// go on exactly where the others are.
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct ImageSourcing {
    /// The links, in the stream's order.
    pub links: Vec<LinkPosition>,
}

/// Where one link stands.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LinkPosition {
    /// The origin stream's name.
    pub origin: String,
    /// Whether it is the mirror.
    pub mirror: bool,
    /// The next origin sequence to read.
    pub next_seq: u64,
    /// The last origin sequence copied (0 none).
    pub last_copied: u64,
}

/// One stored message.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ImageMsg {
    /// Stream sequence.
    pub seq: u64,
    /// Time stored (unix nanos).
    pub ts: i64,
    /// Subject.
    pub subject: String,
    /// Header block.
    pub headers: Option<Vec<u8>>,
    /// Payload.
    pub payload: Vec<u8>,
}

/// A staged publish.
#[derive(Serialize, Deserialize, Clone)]
pub struct ImageIncoming {
    /// Subject.
    pub subject: String,
    /// Reply subject.
    pub reply: Option<String>,
    /// Header block.
    pub headers: Option<Vec<u8>>,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Why an image could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The bytes are not an image.
    #[error("stream image does not decode: {0}")]
    Decode(String),
    /// The store refused what the image holds.
    #[error("stream image could not be stored: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The store came out different from the image.
    #[error("stream image restored differently: {0}")]
    Mismatch(String),
}

impl StreamImage {
    /// The image as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = postcard::to_stdvec(self).unwrap_or_default();
        out.extend(postcard::to_stdvec(&self.extras).unwrap_or_default());
        out.extend(postcard::to_stdvec(&self.sourcing).unwrap_or_default());
        out
    }

    /// An image from [`StreamImage::encode`]'s bytes.
    ///
    /// # Errors
    /// [`ImageError::Decode`] for anything else.
    pub fn decode(bytes: &[u8]) -> Result<Self, ImageError> {
        let bad = |e: postcard::Error| ImageError::Decode(e.to_string());
        let (mut image, rest): (StreamImage, &[u8]) =
            postcard::take_from_bytes(bytes).map_err(bad)?;
        if rest.is_empty() {
            return Ok(image);
        }
        let (extras, rest): (ImageExtras, &[u8]) = postcard::take_from_bytes(rest).map_err(bad)?;
        image.extras = extras;
        if !rest.is_empty() {
            image.sourcing = postcard::from_bytes(rest).map_err(bad)?;
        }
        Ok(image)
    }

    /// The consumers by name.
    pub(crate) fn take_consumers(&mut self) -> BTreeMap<String, Consumer> {
        std::mem::take(&mut self.consumers)
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect()
    }
}

/// A value kept as its JSON text (configurations: see the module docs).
pub(crate) mod json_text {
    use serde::de::{DeserializeOwned, Error as _};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<T: Serialize, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(v).map_err(S::Error::custom)?;
        s.serialize_str(&text)
    }

    pub(crate) fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text).map_err(D::Error::custom)
    }
}
