//! A resumable, zero-copy parser for both directions of the NATS protocol.
//!
//! The caller appends whatever the socket produced to a [`BytesMut`] and calls
//! [`Parser::next_client_op`] (server side) or [`Parser::next_server_op`] (client side) until it
//! returns `Ok(None)`, which means "need more bytes" — the normal case, not an error. Consumed
//! bytes are split off the front of the buffer and frozen, so subjects and payloads in the
//! returned ops share the read buffer's allocation.
//!
//! When a control line announces a payload, the parsed line is kept in [`Parser`] until the
//! payload and its CRLF have arrived, so a large message trickling in over many reads is never
//! re-scanned. The declared size is checked against `max_payload` before anything is buffered.

use bytes::{Buf, Bytes, BytesMut};

use super::errors;
use super::op::{ClientOp, ServerOp};

/// Most arguments any op takes (HMSG: subject, sid, reply, header size, total size).
const MAX_ARGS: usize = 5;
/// Slack allowed on top of `max_control_line` for the op name and its separator, because the
/// limit applies to the argument part of the line.
const OP_NAME_SLACK: usize = 16;

/// Size limits the parser enforces before buffering anything.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest argument part of a control line, in bytes.
    pub max_control_line: usize,
    /// Largest `#bytes` (PUB) or `#total bytes` (HPUB) accepted.
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_control_line: 4096,
            max_payload: 1024 * 1024,
        }
    }
}

/// Why the parser gave up on a stream. Every variant is fatal for the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The op name is not one this direction of the protocol knows.
    #[error("unknown protocol operation")]
    UnknownOp,
    /// A control line exceeded `max_control_line`.
    #[error("maximum control line exceeded")]
    ControlLineTooLong,
    /// A declared payload size exceeded `max_payload`.
    #[error("payload of {size} bytes exceeds max_payload {max}")]
    PayloadTooLarge {
        /// Declared size.
        size: u64,
        /// Configured limit.
        max: usize,
    },
    /// The op's arguments were missing, extra, or not numbers where sizes belong.
    #[error("malformed arguments for {op}")]
    BadArgs {
        /// The op whose arguments were bad.
        op: &'static str,
    },
    /// The bytes after a payload were not CRLF.
    #[error("payload not terminated by CRLF")]
    MissingPayloadTerminator,
}

impl ProtoError {
    /// The `-ERR` text to send before closing, when the reference server sends one.
    pub fn err_text(&self) -> Option<&'static str> {
        match self {
            ProtoError::UnknownOp | ProtoError::MissingPayloadTerminator => {
                Some(errors::UNKNOWN_PROTOCOL_OPERATION)
            }
            ProtoError::ControlLineTooLong => Some(errors::MAX_CONTROL_LINE_EXCEEDED),
            ProtoError::PayloadTooLarge { .. } => Some(errors::MAX_PAYLOAD_VIOLATION),
            ProtoError::BadArgs { .. } => Some(errors::UNKNOWN_PROTOCOL_OPERATION),
        }
    }
}

/// A control line whose payload has not fully arrived yet.
#[derive(Debug)]
struct Pending {
    subject: Bytes,
    sid: Bytes,
    reply: Option<Bytes>,
    /// Header block size when the op carries headers.
    header_len: Option<usize>,
    total: usize,
    server_side: bool,
}

/// The resumable parser. One per connection; holds at most one pending control line.
#[derive(Debug, Default)]
pub struct Parser {
    limits: Limits,
    pending: Option<Pending>,
}

impl Parser {
    /// A parser enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            pending: None,
        }
    }

    /// Changes the limits (used when a client's account or user imposes a smaller payload).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// How many payload bytes the parser is still waiting for, so the reader can size its
    /// next read. Zero when no payload is pending.
    pub fn pending_payload(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.total + 2)
    }

    /// Parses the next client op from the front of `buf`.
    ///
    /// # Errors
    /// Any [`ProtoError`]; the connection must then be closed (after sending
    /// [`ProtoError::err_text`] where there is one).
    pub fn next_client_op(&mut self, buf: &mut BytesMut) -> Result<Option<ClientOp>, ProtoError> {
        loop {
            if self.pending.is_some() {
                return Ok(self
                    .take_payload(buf)?
                    .map(|(p, headers, payload)| ClientOp::Pub {
                        subject: p.subject,
                        reply: p.reply,
                        headers,
                        payload,
                    }));
            }
            let Some(line) = self.take_line(buf)? else {
                return Ok(None);
            };
            let (name, rest) = split_op_name(&line);
            let op = if name.eq_ignore_ascii_case(b"PUB") {
                self.start_pub(&line, rest, false)?;
                continue;
            } else if name.eq_ignore_ascii_case(b"HPUB") {
                self.start_pub(&line, rest, true)?;
                continue;
            } else if name.eq_ignore_ascii_case(b"SUB") {
                let (args, n) = split_args(&line, rest, "SUB")?;
                match n {
                    2 => ClientOp::Sub {
                        subject: slice(&line, args[0]),
                        queue: None,
                        sid: slice(&line, args[1]),
                    },
                    3 => ClientOp::Sub {
                        subject: slice(&line, args[0]),
                        queue: Some(slice(&line, args[1])),
                        sid: slice(&line, args[2]),
                    },
                    _ => return Err(ProtoError::BadArgs { op: "SUB" }),
                }
            } else if name.eq_ignore_ascii_case(b"UNSUB") {
                let (args, n) = split_args(&line, rest, "UNSUB")?;
                match n {
                    1 => ClientOp::Unsub {
                        sid: slice(&line, args[0]),
                        max: None,
                    },
                    2 => {
                        let max = parse_size(range(&line, args[1]))
                            .ok_or(ProtoError::BadArgs { op: "UNSUB" })?;
                        ClientOp::Unsub {
                            sid: slice(&line, args[0]),
                            max: Some(max),
                        }
                    }
                    _ => return Err(ProtoError::BadArgs { op: "UNSUB" }),
                }
            } else if name.eq_ignore_ascii_case(b"PING") && is_blank(rest) {
                ClientOp::Ping
            } else if name.eq_ignore_ascii_case(b"PONG") && is_blank(rest) {
                ClientOp::Pong
            } else if name.eq_ignore_ascii_case(b"CONNECT") {
                ClientOp::Connect(body(&line, rest))
            } else if name.eq_ignore_ascii_case(b"INFO") {
                ClientOp::Info(body(&line, rest))
            } else if name.is_empty() && is_blank(rest) {
                // An empty line (a telnet user pressing enter) carries no op.
                continue;
            } else {
                return Err(ProtoError::UnknownOp);
            };
            return Ok(Some(op));
        }
    }

    /// Parses the next server op from the front of `buf` (client side: the load tool, tests).
    ///
    /// # Errors
    /// Any [`ProtoError`] for bytes no NATS server would send.
    pub fn next_server_op(&mut self, buf: &mut BytesMut) -> Result<Option<ServerOp>, ProtoError> {
        loop {
            if self.pending.is_some() {
                return Ok(self
                    .take_payload(buf)?
                    .map(|(p, headers, payload)| ServerOp::Msg {
                        subject: p.subject,
                        sid: p.sid,
                        reply: p.reply,
                        headers,
                        payload,
                    }));
            }
            let Some(line) = self.take_line(buf)? else {
                return Ok(None);
            };
            let (name, rest) = split_op_name(&line);
            let op = if name.eq_ignore_ascii_case(b"MSG") {
                self.start_msg(&line, rest, false)?;
                continue;
            } else if name.eq_ignore_ascii_case(b"HMSG") {
                self.start_msg(&line, rest, true)?;
                continue;
            } else if name.eq_ignore_ascii_case(b"PING") {
                ServerOp::Ping
            } else if name.eq_ignore_ascii_case(b"PONG") {
                ServerOp::Pong
            } else if name.eq_ignore_ascii_case(b"+OK") {
                ServerOp::Ok
            } else if name.eq_ignore_ascii_case(b"-ERR") {
                let text = body(&line, rest);
                let trimmed = text
                    .strip_prefix(b"'")
                    .and_then(|t| t.strip_suffix(b"'"))
                    .map(|t| text.slice_ref(t))
                    .unwrap_or(text);
                ServerOp::Err(trimmed)
            } else if name.eq_ignore_ascii_case(b"INFO") {
                ServerOp::Info(body(&line, rest))
            } else {
                return Err(ProtoError::UnknownOp);
            };
            return Ok(Some(op));
        }
    }

    /// Splits one control line (without its line end) off the front of `buf`.
    fn take_line(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, ProtoError> {
        let window = self.limits.max_control_line.saturating_add(OP_NAME_SLACK);
        let scan = buf
            .get(..buf.len().min(window.saturating_add(2)))
            .unwrap_or(&[]);
        let Some(nl) = memchr::memchr(b'\n', scan) else {
            if buf.len() > window.saturating_add(1) {
                return Err(ProtoError::ControlLineTooLong);
            }
            return Ok(None);
        };
        let mut line = buf.split_to(nl + 1).freeze();
        line.truncate(nl);
        if line.last() == Some(&b'\r') {
            line.truncate(nl - 1);
        }
        let (name, rest) = split_op_name(&line);
        if rest.len() > self.limits.max_control_line || name.len() > OP_NAME_SLACK {
            return Err(ProtoError::ControlLineTooLong);
        }
        Ok(Some(line))
    }

    fn start_pub(
        &mut self,
        line: &Bytes,
        rest: &[u8],
        with_headers: bool,
    ) -> Result<(), ProtoError> {
        let op = if with_headers { "HPUB" } else { "PUB" };
        let (args, n) = split_args(line, rest, op)?;
        let (subject, reply, sizes) = match (with_headers, n) {
            (false, 2) => (args[0], None, &args[1..2]),
            (false, 3) => (args[0], Some(args[1]), &args[2..3]),
            (true, 3) => (args[0], None, &args[1..3]),
            (true, 4) => (args[0], Some(args[1]), &args[2..4]),
            _ => return Err(ProtoError::BadArgs { op }),
        };
        self.start_payload(line, subject, (0, 0), reply, sizes, op, false)
    }

    fn start_msg(
        &mut self,
        line: &Bytes,
        rest: &[u8],
        with_headers: bool,
    ) -> Result<(), ProtoError> {
        let op = if with_headers { "HMSG" } else { "MSG" };
        let (args, n) = split_args(line, rest, op)?;
        let (subject, sid, reply, sizes) = match (with_headers, n) {
            (false, 3) => (args[0], args[1], None, &args[2..3]),
            (false, 4) => (args[0], args[1], Some(args[2]), &args[3..4]),
            (true, 4) => (args[0], args[1], None, &args[2..4]),
            (true, 5) => (args[0], args[1], Some(args[2]), &args[3..5]),
            _ => return Err(ProtoError::BadArgs { op }),
        };
        self.start_payload(line, subject, sid, reply, sizes, op, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn start_payload(
        &mut self,
        line: &Bytes,
        subject: (usize, usize),
        sid: (usize, usize),
        reply: Option<(usize, usize)>,
        sizes: &[(usize, usize)],
        op: &'static str,
        server_side: bool,
    ) -> Result<(), ProtoError> {
        let bad = ProtoError::BadArgs { op };
        let (header_len, total) = match sizes {
            [t] => (None, parse_size(range(line, *t)).ok_or(bad.clone())?),
            [h, t] => {
                let h = parse_size(range(line, *h)).ok_or(bad.clone())?;
                let t = parse_size(range(line, *t)).ok_or(bad.clone())?;
                if h > t {
                    return Err(bad);
                }
                (Some(h), t)
            }
            _ => return Err(bad),
        };
        if !server_side && total > self.limits.max_payload as u64 {
            return Err(ProtoError::PayloadTooLarge {
                size: total,
                max: self.limits.max_payload,
            });
        }
        let total = usize::try_from(total).map_err(|_| bad.clone())?;
        let header_len = header_len.map(|h| usize::try_from(h).unwrap_or(usize::MAX));
        self.pending = Some(Pending {
            subject: slice(line, subject),
            sid: slice(line, sid),
            reply: reply.map(|r| slice(line, r)),
            header_len,
            total,
            server_side,
        });
        Ok(())
    }

    /// Completes the pending op once its payload and CRLF are buffered.
    #[allow(clippy::type_complexity)]
    fn take_payload(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<Option<(Pending, Option<Bytes>, Bytes)>, ProtoError> {
        let Some(p) = self.pending.as_ref() else {
            return Ok(None);
        };
        let need = p.total.saturating_add(2);
        if buf.len() < need {
            buf.reserve(need - buf.len());
            return Ok(None);
        }
        let Some(p) = self.pending.take() else {
            return Ok(None);
        };
        debug_assert!(p.server_side || p.total <= self.limits.max_payload);
        let (headers, payload) = split_body(buf, p.total, p.header_len)?;
        Ok(Some((p, headers, payload)))
    }
}

/// Takes a buffered message body of `total` bytes and its CRLF off the front of `buf` (the
/// caller checked they are there) and splits off the header block of `header_len` bytes.
///
/// # Errors
/// [`ProtoError::MissingPayloadTerminator`] when the body is not followed by CRLF.
pub(crate) fn split_body(
    buf: &mut BytesMut,
    total: usize,
    header_len: Option<usize>,
) -> Result<(Option<Bytes>, Bytes), ProtoError> {
    let data = buf.split_to(total).freeze();
    if buf.get(..2) != Some(b"\r\n".as_slice()) {
        return Err(ProtoError::MissingPayloadTerminator);
    }
    buf.advance(2);
    Ok(match header_len {
        Some(h) => (Some(data.slice(..h)), data.slice(h..)),
        None => (None, data),
    })
}

fn is_blank(b: &[u8]) -> bool {
    b.iter().all(|c| *c == b' ' || *c == b'\t')
}

fn is_sep(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// Splits `line` into the op name and the rest (leading blanks of the line are skipped).
fn split_op_name(line: &[u8]) -> (&[u8], &[u8]) {
    let start = line.iter().position(|c| !is_sep(*c)).unwrap_or(line.len());
    let line = line.get(start..).unwrap_or(&[]);
    let end = line.iter().position(|c| is_sep(*c)).unwrap_or(line.len());
    line.split_at(end)
}

/// Splits the arguments in `rest` (a part of `line`) on runs of blanks into (start, end)
/// offsets into `line`, later turned into zero-copy slices of it.
fn split_args(
    line: &[u8],
    rest: &[u8],
    op: &'static str,
) -> Result<([(usize, usize); MAX_ARGS], usize), ProtoError> {
    let offset = base(line, rest);
    let mut out = [(0usize, 0usize); MAX_ARGS];
    let mut n = 0;
    let mut i = 0;
    while i < rest.len() {
        while rest.get(i).is_some_and(|c| is_sep(*c)) {
            i += 1;
        }
        if i >= rest.len() {
            break;
        }
        let start = i;
        while rest.get(i).is_some_and(|c| !is_sep(*c)) {
            i += 1;
        }
        let slot = out.get_mut(n).ok_or(ProtoError::BadArgs { op })?;
        *slot = (offset + start, offset + i);
        n += 1;
    }
    Ok((out, n))
}

/// The offset of `rest` inside `line` (both from the same allocation).
fn base(line: &[u8], rest: &[u8]) -> usize {
    (rest.as_ptr() as usize).saturating_sub(line.as_ptr() as usize)
}

fn slice(line: &Bytes, r: (usize, usize)) -> Bytes {
    line.slice(r.0..r.1)
}

fn range(line: &Bytes, r: (usize, usize)) -> &[u8] {
    line.get(r.0..r.1).unwrap_or(&[])
}

fn body(line: &Bytes, rest: &[u8]) -> Bytes {
    let start = base(line, rest) + rest.iter().position(|c| !is_sep(*c)).unwrap_or(rest.len());
    let mut end = line.len();
    while end > start && line.get(end - 1).is_some_and(|c| is_sep(*c)) {
        end -= 1;
    }
    line.slice(start..end)
}

/// Parses a decimal size: ASCII digits only, no sign, no overflow.
pub fn parse_size(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Fuzzing entry point: parses `data` split at `split` and checks the split-invariance
/// invariant (the same ops, or an error, as parsing it whole).
#[doc(hidden)]
pub fn fuzz_client_ops(data: &[u8], split: usize) {
    let run = |chunk: usize| -> Result<Vec<ClientOp>, ProtoError> {
        let mut p = Parser::new(Limits {
            max_control_line: 1024,
            max_payload: 64 * 1024,
        });
        let mut buf = BytesMut::new();
        let mut ops = Vec::new();
        for piece in data.chunks(chunk.max(1)) {
            buf.extend_from_slice(piece);
            while let Some(op) = p.next_client_op(&mut buf)? {
                ops.push(op);
            }
        }
        Ok(ops)
    };
    let whole = run(data.len().max(1));
    let split = run(split.max(1));
    if let (Ok(a), Ok(b)) = (&whole, &split) {
        assert_eq!(a, b, "split parsing must equal whole parsing");
    }
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-good results")]
mod tests {
    use super::*;
    use crate::proto::encode::encode_client_op;
    use proptest::prelude::*;

    fn parse_all(input: &[u8], chunk: usize) -> Result<Vec<ClientOp>, ProtoError> {
        let mut p = Parser::new(Limits::default());
        let mut buf = BytesMut::new();
        let mut ops = Vec::new();
        for piece in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(piece);
            while let Some(op) = p.next_client_op(&mut buf)? {
                ops.push(op);
            }
        }
        Ok(ops)
    }

    #[test]
    fn pub_with_reply_and_payload() {
        let ops = parse_all(b"PUB foo bar 5\r\nhello\r\n", 1000).unwrap();
        assert_eq!(
            ops,
            vec![ClientOp::Pub {
                subject: Bytes::from_static(b"foo"),
                reply: Some(Bytes::from_static(b"bar")),
                headers: None,
                payload: Bytes::from_static(b"hello"),
            }]
        );
    }

    #[test]
    fn hpub_splits_headers_from_payload() {
        let ops = parse_all(b"HPUB s 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", 3).unwrap();
        let ClientOp::Pub {
            headers, payload, ..
        } = &ops[0]
        else {
            panic!()
        };
        assert_eq!(headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
        assert_eq!(&payload[..], b"hi");
    }

    #[test]
    fn payload_may_contain_crlf_and_be_empty() {
        let ops = parse_all(b"PUB a 4\r\n\r\n\r\n\r\nPUB b 0\r\n\r\n", 1).unwrap();
        assert_eq!(ops.len(), 2);
    }

    #[test]
    fn tab_separates_arguments() {
        let ops = parse_all(b"PUB a\tb 1\r\nx\r\n", 64).unwrap();
        let ClientOp::Pub { subject, reply, .. } = &ops[0] else {
            panic!()
        };
        assert_eq!(&subject[..], b"a");
        assert_eq!(reply.as_deref(), Some(&b"b"[..]));
    }

    #[test]
    fn size_over_max_payload_fails_before_the_payload_arrives() {
        let mut p = Parser::new(Limits {
            max_control_line: 4096,
            max_payload: 10,
        });
        let mut buf = BytesMut::from(&b"PUB a 11\r\n"[..]);
        assert!(matches!(
            p.next_client_op(&mut buf),
            Err(ProtoError::PayloadTooLarge { size: 11, .. })
        ));
    }

    #[test]
    fn wrong_trailer_is_unknown_operation() {
        let e = parse_all(b"PUB a 3\r\nhello\r\n", 100).unwrap_err();
        assert_eq!(e.err_text(), Some(errors::UNKNOWN_PROTOCOL_OPERATION));
    }

    #[test]
    fn negative_or_non_numeric_sizes_are_rejected() {
        assert!(parse_all(b"PUB a -1\r\n", 100).is_err());
        assert!(parse_all(b"PUB a x\r\n", 100).is_err());
        assert!(parse_all(b"HPUB a 5 3\r\n", 100).is_err());
    }

    #[test]
    fn unbounded_line_is_a_control_line_error() {
        let mut p = Parser::new(Limits {
            max_control_line: 16,
            max_payload: 100,
        });
        let mut buf = BytesMut::from(&[b'a'; 100][..]);
        assert_eq!(
            p.next_client_op(&mut buf),
            Err(ProtoError::ControlLineTooLong)
        );
    }

    #[test]
    fn unknown_ops_and_ping_with_arguments_are_rejected() {
        assert_eq!(
            parse_all(b"BLAH\r\n", 100).unwrap_err(),
            ProtoError::UnknownOp
        );
        assert_eq!(
            parse_all(b"PINGX\r\n", 100).unwrap_err(),
            ProtoError::UnknownOp
        );
        assert_eq!(
            parse_all(b"MSG a 1 1\r\nx\r\n", 100).unwrap_err(),
            ProtoError::UnknownOp
        );
    }

    #[test]
    fn server_ops_parse_including_err_text() {
        let mut p = Parser::default();
        let mut buf = BytesMut::from(
            &b"INFO {\"a\":1} \r\nMSG s 1 r 2\r\nhi\r\nHMSG s 2 12 12\r\nNATS/1.0\r\n\r\n\r\n-ERR 'Stale Connection'\r\n+OK\r\nPING\r\n"[..],
        );
        let mut ops = vec![];
        while let Some(op) = p.next_server_op(&mut buf).unwrap() {
            ops.push(op);
        }
        assert_eq!(ops.len(), 6);
        assert_eq!(ops[0], ServerOp::Info(Bytes::from_static(b"{\"a\":1}")));
        assert_eq!(
            ops[3],
            ServerOp::Err(Bytes::from_static(b"Stale Connection"))
        );
    }

    fn token() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_$*>-]{1,8}"
    }

    fn subject() -> impl Strategy<Value = String> {
        prop::collection::vec(token(), 1..5).prop_map(|t| t.join("."))
    }

    fn client_op() -> impl Strategy<Value = ClientOp> {
        let b = |s: String| Bytes::from(s);
        prop_oneof![
            (
                subject(),
                prop::option::of(subject()),
                prop::collection::vec(any::<u8>(), 0..64),
                prop::option::of("[a-zA-Z]{1,6}")
            )
                .prop_map(move |(s, r, p, h)| ClientOp::Pub {
                    subject: b(s),
                    reply: r.map(b),
                    headers: h.map(|v| Bytes::from(format!("NATS/1.0\r\nK: {v}\r\n\r\n"))),
                    payload: Bytes::from(p),
                }),
            (subject(), prop::option::of(token()), "[0-9]{1,4}").prop_map(move |(s, q, sid)| {
                ClientOp::Sub {
                    subject: b(s),
                    queue: q.map(b),
                    sid: b(sid),
                }
            }),
            ("[0-9]{1,4}", prop::option::of(0u64..1000))
                .prop_map(move |(sid, max)| ClientOp::Unsub { sid: b(sid), max }),
            Just(ClientOp::Ping),
            Just(ClientOp::Pong),
            Just(ClientOp::Connect(Bytes::from_static(
                b"{\"verbose\":false}"
            ))),
        ]
    }

    proptest! {
        #[test]
        fn parse_of_encode_is_identity(ops in prop::collection::vec(client_op(), 1..20), chunk in 1usize..64) {
            let mut wire = BytesMut::new();
            for op in &ops {
                encode_client_op(&mut wire, op);
            }
            let parsed = parse_all(&wire, chunk).unwrap();
            prop_assert_eq!(parsed, ops);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512), chunk in 1usize..32) {
            let _ = parse_all(&data, chunk);
        }
    }
}
