//! The `NATS/1.0` header block carried by HPUB and HMSG.
//!
//! ```text
//! NATS/1.0[ <3-digit status>[ <description>]]\r\n
//! <Name>: <value>\r\n      (zero or more; names may repeat, case is preserved)
//! \r\n
//! ```
//!
//! Names are kept exactly as sent: JetStream matches `Nats-Msg-Id` case-sensitively, as the
//! reference server does. Parsing goes through a checked cursor and never indexes raw bytes.

use bytes::{BufMut, Bytes, BytesMut};

/// The version line every header block starts with.
pub const VERSION_LINE: &[u8] = b"NATS/1.0";

/// A parsed header block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderMap {
    /// Status code from the version line (`503`, `404`, ...), if any.
    pub status: Option<u16>,
    /// Free-text description after the status.
    pub description: Option<String>,
    /// Header fields in the order they appeared; repeated names are kept.
    pub fields: Vec<(String, String)>,
}

/// Why a header block could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The block does not start with `NATS/1.0`.
    #[error("header block does not start with NATS/1.0")]
    BadVersion,
    /// A status that is not three digits.
    #[error("malformed status in header version line")]
    BadStatus,
    /// A field line without a colon, or a block without the final empty line.
    #[error("malformed header field line")]
    BadField,
    /// Header text that is not UTF-8.
    #[error("header block is not valid UTF-8")]
    NotUtf8,
}

impl HeaderMap {
    /// A header block with only a status line, e.g. the 503 no-responders reply.
    pub fn with_status(status: u16, description: Option<&str>) -> Self {
        HeaderMap {
            status: Some(status),
            description: description.map(str::to_owned),
            fields: vec![],
        }
    }

    /// Adds a field (keeps earlier fields of the same name).
    pub fn append(&mut self, name: &str, value: &str) {
        self.fields.push((name.to_owned(), value.to_owned()));
    }

    /// The first value of `name`, matched case-sensitively.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// All values of `name`, matched case-sensitively, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Encodes the block, ending with the empty line.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64);
        out.put_slice(VERSION_LINE);
        if let Some(s) = self.status {
            out.put_u8(b' ');
            out.put_slice(format!("{s:03}").as_bytes());
            if let Some(d) = &self.description {
                out.put_u8(b' ');
                out.put_slice(d.as_bytes());
            }
        }
        out.put_slice(b"\r\n");
        for (n, v) in &self.fields {
            out.put_slice(n.as_bytes());
            out.put_slice(b": ");
            out.put_slice(v.as_bytes());
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"\r\n");
        out.freeze()
    }

    /// Parses a header block.
    ///
    /// # Errors
    /// [`HeaderError`] when the block is not a well-formed `NATS/1.0` block.
    pub fn parse(block: &[u8]) -> Result<Self, HeaderError> {
        let text = std::str::from_utf8(block).map_err(|_| HeaderError::NotUtf8)?;
        if !text.starts_with("NATS/1.0") {
            return Err(HeaderError::BadVersion);
        }
        if !text.ends_with("\r\n\r\n") {
            return Err(HeaderError::BadField);
        }
        let mut lines = text.split("\r\n");
        let first = lines.next().ok_or(HeaderError::BadVersion)?;
        let rest = first
            .strip_prefix("NATS/1.0")
            .ok_or(HeaderError::BadVersion)?;
        let mut map = HeaderMap::default();
        if let Some(status_part) = rest.strip_prefix(' ') {
            let status_part = status_part.trim_start();
            let code = status_part.get(..3).ok_or(HeaderError::BadStatus)?;
            if !code.bytes().all(|c| c.is_ascii_digit()) {
                return Err(HeaderError::BadStatus);
            }
            map.status = code.parse().ok();
            let desc = status_part.get(3..).unwrap_or("").trim();
            if !desc.is_empty() {
                map.description = Some(desc.to_owned());
            }
        } else if !rest.is_empty() {
            return Err(HeaderError::BadVersion);
        }
        let mut ended = false;
        for line in lines {
            if line.is_empty() {
                ended = true;
                break;
            }
            let (name, value) = line.split_once(':').ok_or(HeaderError::BadField)?;
            map.fields
                .push((name.trim().to_owned(), value.trim().to_owned()));
        }
        if !ended {
            return Err(HeaderError::BadField);
        }
        Ok(map)
    }
}

/// The header block of the no-responders reply: status 503 and `Nats-Subject`.
pub fn no_responders_block(subject: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(40 + subject.len());
    out.put_slice(b"NATS/1.0 503\r\nNats-Subject: ");
    out.put_slice(subject);
    out.put_slice(b"\r\n\r\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_responders_block_is_byte_exact() {
        assert_eq!(
            &no_responders_block(b"svc.none")[..],
            b"NATS/1.0 503\r\nNats-Subject: svc.none\r\n\r\n"
        );
        assert_eq!(no_responders_block(b"svc.none").len(), 40);
    }

    #[test]
    fn status_and_description_round_trip() {
        let mut h = HeaderMap::with_status(404, Some("No Messages"));
        h.append("A", "1");
        h.append("A", "2");
        let parsed = HeaderMap::parse(&h.encode()).unwrap();
        assert_eq!(parsed, h);
        assert_eq!(parsed.get_all("A").collect::<Vec<_>>(), ["1", "2"]);
    }

    #[test]
    fn names_are_case_sensitive() {
        let h = HeaderMap::parse(b"NATS/1.0\r\nnats-msg-id: x\r\n\r\n").unwrap();
        assert_eq!(h.get("Nats-Msg-Id"), None);
        assert_eq!(h.get("nats-msg-id"), Some("x"));
    }

    #[test]
    fn malformed_blocks_are_errors() {
        assert_eq!(
            HeaderMap::parse(b"HTTP/1.1\r\n\r\n"),
            Err(HeaderError::BadVersion)
        );
        assert_eq!(
            HeaderMap::parse(b"NATS/1.0 5x3\r\n\r\n"),
            Err(HeaderError::BadStatus)
        );
        assert_eq!(
            HeaderMap::parse(b"NATS/1.0\r\nnocolon\r\n\r\n"),
            Err(HeaderError::BadField)
        );
        assert_eq!(
            HeaderMap::parse(b"NATS/1.0\r\nA: b\r\n"),
            Err(HeaderError::BadField)
        );
    }
}
