//! Bytes through serde as one run: `#[serde(with = "crate::bytes_run")]` on a `Vec<u8>`,
//! `#[serde(with = "crate::bytes_run::option")]` on an `Option<Vec<u8>>`.
//!
//! Why: serde writes and reads a `Vec<u8>` as a sequence, one call per byte. For a stream's
//! snapshot — its messages in the image, its chunks on the Raft transport — that was the
//! largest cost of sending one (0.2 s per MiB each way in a debug build: long enough for a
//! follower to miss its heartbeats and call an election mid-transfer). Postcard writes a
//! sequence of `u8` as its length and the raw bytes, exactly as it writes a run of bytes, so
//! values written either way read alike; reading also accepts a sequence (JSON writes bytes
//! as an array of numbers).

use serde::{Deserializer, Serializer};

/// Writes `b` as one run of bytes.
///
/// # Errors
/// The serializer's.
pub fn serialize<S: Serializer, B: AsRef<[u8]> + ?Sized>(b: &B, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(b.as_ref())
}

/// Reads a run of bytes, or a sequence of numbers.
///
/// # Errors
/// The deserializer's, or a value that is neither.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_byte_buf(Run)
}

struct Run;

impl<'de> serde::de::Visitor<'de> for Run {
    type Value = Vec<u8>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("bytes")
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }
    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<u8>, A::Error> {
        let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(b) = a.next_element()? {
            v.push(b);
        }
        Ok(v)
    }
}

/// The same for optional bytes.
pub mod option {
    use serde::{Deserializer, Serializer};

    /// Writes `b` as none, or some run of bytes.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer, B: AsRef<[u8]>>(
        b: &Option<B>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        struct RunOf<'a>(&'a [u8]);
        impl serde::Serialize for RunOf<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
        match b {
            Some(b) => s.serialize_some(&RunOf(b.as_ref())),
            None => s.serialize_none(),
        }
    }

    /// Reads what [`serialize`] wrote (or a sequence in place of the run).
    ///
    /// # Errors
    /// The deserializer's.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Option<Vec<u8>>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("optional bytes")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                super::deserialize(d).map(Some)
            }
        }
        d.deserialize_option(V)
    }
}
