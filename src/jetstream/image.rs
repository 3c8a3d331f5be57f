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
//! positional format cannot express).
//!
//! Streamed, because a stream may be larger than memory: a marker, then everything but the
//! messages (the "head", one length-prefixed value), then each message as its own
//! length-prefixed value in sequence order, then an end mark — so an image is written as the
//! store is read ([`Stream::write_image`](super::stream::Stream::write_image)) and installed
//! as it is read ([`read`], [`Stream::from_image_parts`](super::stream::Stream::from_image_parts)),
//! one message at a time. An image of the earlier format (one value with every message
//! inside; it has no marker) is still read, whole.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

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

/// One stored message. Its bytes are written and read as one run each (`crate::bytes_run`:
/// the same bytes as earlier builds wrote, far faster).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ImageMsg {
    /// Stream sequence.
    pub seq: u64,
    /// Time stored (unix nanos).
    pub ts: i64,
    /// Subject.
    pub subject: String,
    /// Header block.
    #[serde(with = "crate::bytes_run::option")]
    pub headers: Option<Vec<u8>>,
    /// Payload.
    #[serde(with = "crate::bytes_run")]
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

/// The first bytes of a streamed image. An image of the earlier format starts with its
/// configuration's length and then `{`, never with these.
const STREAMED: &[u8; 8] = b"SSIMG\x00\x02\x00";
/// The length that ends a streamed image's messages.
const END: u32 = u32::MAX;
/// The longest value accepted when reading (a message is at most a few MiB; a head holds
/// every consumer's pending state).
const MAX_VALUE: u32 = 1 << 30;

/// A stored message as written into an image (the store's bytes, not copied).
#[derive(Serialize)]
pub struct ImageMsgRef<'a> {
    /// Stream sequence.
    pub seq: u64,
    /// Time stored (unix nanos).
    pub ts: i64,
    /// Subject.
    pub subject: &'a str,
    /// Header block.
    #[serde(serialize_with = "crate::bytes_run::option::serialize")]
    pub headers: Option<&'a [u8]>,
    /// Payload.
    #[serde(serialize_with = "crate::bytes_run::serialize")]
    pub payload: &'a [u8],
}

impl From<&ImageMsgRef<'_>> for ImageMsg {
    fn from(m: &ImageMsgRef<'_>) -> Self {
        ImageMsg {
            seq: m.seq,
            ts: m.ts,
            subject: m.subject.to_owned(),
            headers: m.headers.map(<[u8]>::to_vec),
            payload: m.payload.to_vec(),
        }
    }
}

impl<'a> From<&'a ImageMsg> for ImageMsgRef<'a> {
    fn from(m: &'a ImageMsg) -> Self {
        ImageMsgRef {
            seq: m.seq,
            ts: m.ts,
            subject: &m.subject,
            headers: m.headers.as_deref(),
            payload: &m.payload,
        }
    }
}

/// Writes one length-prefixed value.
fn write_value<W: Write + ?Sized>(w: &mut W, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|l| *l < END)
        .ok_or_else(|| io::Error::other("an image value too long"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(bytes)
}

/// Writes a streamed image: [`ImageWriter::head`] once, then every message in sequence
/// order, then [`ImageWriter::end`].
pub struct ImageWriter<'w, W: Write + ?Sized> {
    w: &'w mut W,
    buf: Vec<u8>,
}

impl<'w, W: Write + ?Sized> ImageWriter<'w, W> {
    /// Starts an image in `w` with `head` (its messages, if any, come first).
    ///
    /// # Errors
    /// I/O.
    pub fn head(w: &'w mut W, head: &StreamImage) -> io::Result<Self> {
        w.write_all(STREAMED)?;
        let mut me = ImageWriter { w, buf: Vec::new() };
        let mut bare = postcard::to_stdvec(&HeadRef(head)).map_err(io::Error::other)?;
        bare.extend(postcard::to_stdvec(&head.extras).map_err(io::Error::other)?);
        bare.extend(postcard::to_stdvec(&head.sourcing).map_err(io::Error::other)?);
        write_value(me.w, &bare)?;
        for m in &head.messages {
            me.message(&m.into())?;
        }
        Ok(me)
    }

    /// One message.
    ///
    /// # Errors
    /// I/O.
    pub fn message(&mut self, m: &ImageMsgRef<'_>) -> io::Result<()> {
        self.buf.clear();
        let buf = std::mem::take(&mut self.buf);
        self.buf = postcard::to_extend(m, buf).map_err(io::Error::other)?;
        write_value(self.w, &self.buf)
    }

    /// The end mark.
    ///
    /// # Errors
    /// I/O.
    pub fn end(self) -> io::Result<()> {
        self.w.write_all(&END.to_le_bytes())
    }
}

/// The head as its own value: the image without its messages (an empty sequence in their
/// place, so the head decodes as a [`StreamImage`]).
struct HeadRef<'a>(&'a StreamImage);

impl Serialize for HeadRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let i = self.0;
        let mut st = s.serialize_struct("StreamImage", 13)?;
        st.serialize_field("cfg", &json_text::Text(&i.cfg))?;
        st.serialize_field("created", &i.created)?;
        st.serialize_field("first_seq", &i.first_seq)?;
        st.serialize_field("last_seq", &i.last_seq)?;
        st.serialize_field("last_ts", &i.last_ts)?;
        st.serialize_field("messages", &[] as &[ImageMsg])?;
        st.serialize_field("dedupe", &i.dedupe)?;
        st.serialize_field("ttl", &i.ttl)?;
        st.serialize_field("consumers", &i.consumers)?;
        st.serialize_field("batches", &i.batches)?;
        st.serialize_field("fast", &i.fast)?;
        st.serialize_field("schedules", &i.schedules)?;
        st.serialize_field("offline", &i.offline)?;
        st.end()
    }
}

/// Reads an image from `r`: its head (with no messages) and its messages, read as they are
/// asked for. An image of the earlier format is read whole, its messages handed out the
/// same way.
///
/// # Errors
/// [`ImageError::Decode`] when the head does not decode; I/O.
pub fn read<R: Read>(mut r: R) -> Result<(StreamImage, ImageMessages<R>), ImageError> {
    let mut first = [0u8; 8];
    let mut got = 0;
    while got < first.len() {
        match r.read(&mut first[got..])? {
            0 => break,
            n => got += n,
        }
    }
    if &first[..got] != STREAMED {
        let mut whole = first[..got].to_vec();
        r.read_to_end(&mut whole)?;
        let mut image = StreamImage::decode_whole(&whole)?;
        let legacy = std::mem::take(&mut image.messages).into_iter();
        return Ok((
            image,
            ImageMessages {
                r,
                buf: Vec::new(),
                done: true,
                legacy,
            },
        ));
    }
    let mut messages = ImageMessages {
        r,
        buf: Vec::new(),
        done: false,
        legacy: Vec::new().into_iter(),
    };
    let head = messages
        .value()?
        .ok_or_else(|| ImageError::Decode("an image without a head".into()))?;
    let mut image = StreamImage::decode_whole(head)?;
    messages.legacy = std::mem::take(&mut image.messages).into_iter();
    Ok((image, messages))
}

/// An image's messages, in sequence order, as they are read.
pub struct ImageMessages<R> {
    r: R,
    buf: Vec<u8>,
    done: bool,
    /// Messages the head or an image of the earlier format carried, handed out first.
    legacy: std::vec::IntoIter<ImageMsg>,
}

impl<R: Read> ImageMessages<R> {
    /// The next length-prefixed value, `None` at the end mark.
    fn value(&mut self) -> Result<Option<&[u8]>, ImageError> {
        let mut len = [0u8; 4];
        self.r
            .read_exact(&mut len)
            .map_err(|_| ImageError::Decode("the image is cut short".into()))?;
        let len = u32::from_le_bytes(len);
        if len == END {
            return Ok(None);
        }
        if len > MAX_VALUE {
            return Err(ImageError::Decode(format!("an image value of {len} bytes")));
        }
        self.buf.resize(len as usize, 0);
        self.r
            .read_exact(&mut self.buf)
            .map_err(|_| ImageError::Decode("the image is cut short".into()))?;
        Ok(Some(&self.buf))
    }
}

impl<R: Read> Iterator for ImageMessages<R> {
    type Item = Result<ImageMsg, ImageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(m) = self.legacy.next() {
            return Some(Ok(m));
        }
        if self.done {
            return None;
        }
        let r = match self.value() {
            Ok(Some(v)) => postcard::from_bytes(v).map_err(|e| ImageError::Decode(e.to_string())),
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(e) => Err(e),
        };
        if r.is_err() {
            self.done = true;
        }
        Some(r)
    }
}

/// Why an image could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The image could not be read or written.
    #[error("stream image could not be read or written: {0}")]
    Io(#[from] io::Error),
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
    /// The image as bytes (streamed format: see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing into memory fails only where postcard cannot encode a value.
        if let Ok(w) = ImageWriter::head(&mut out, self) {
            let _ = w.end();
        }
        out
    }

    /// An image from [`StreamImage::encode`]'s bytes, or an image of the earlier format.
    ///
    /// # Errors
    /// [`ImageError::Decode`] for anything else.
    pub fn decode(bytes: &[u8]) -> Result<Self, ImageError> {
        let (mut image, messages) = read(bytes)?;
        image.messages = messages.collect::<Result<_, _>>()?;
        Ok(image)
    }

    /// One value of the earlier format (every message inside) followed by its trailing
    /// blocks; also a streamed image's head.
    fn decode_whole(bytes: &[u8]) -> Result<Self, ImageError> {
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

    /// A value to be written as its JSON text.
    pub(crate) struct Text<'a, T>(pub(crate) &'a T);

    impl<T: Serialize> Serialize for Text<'_, T> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize(self.0, s)
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A message as earlier builds' derive wrote it (bytes as sequences of numbers).
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct EarlierMsg {
        seq: u64,
        ts: i64,
        subject: String,
        headers: Option<Vec<u8>>,
        payload: Vec<u8>,
    }

    #[test]
    fn a_message_is_written_as_one_run_of_bytes_that_earlier_builds_wrote_alike() {
        for headers in [None, Some(b"NATS/1.0\r\nA: b\r\n\r\n".to_vec())] {
            let earlier = EarlierMsg {
                seq: 7,
                ts: -3,
                subject: "orders.eu".into(),
                headers: headers.clone(),
                payload: (0..300u32).map(|i| (i % 256) as u8).collect(),
            };
            let ours = ImageMsg {
                seq: 7,
                ts: -3,
                subject: "orders.eu".into(),
                headers: headers.clone(),
                payload: earlier.payload.clone(),
            };
            let by_ref = ImageMsgRef {
                seq: 7,
                ts: -3,
                subject: "orders.eu",
                headers: headers.as_deref(),
                payload: &earlier.payload,
            };
            let old = postcard::to_stdvec(&earlier).unwrap();
            assert_eq!(postcard::to_stdvec(&ours).unwrap(), old);
            assert_eq!(postcard::to_stdvec(&by_ref).unwrap(), old);
            assert_eq!(postcard::from_bytes::<ImageMsg>(&old).unwrap(), ours);
        }
    }
}
