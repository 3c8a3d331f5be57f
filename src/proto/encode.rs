//! Ops back to bytes.
//!
//! The server's hot path is [`encode_msg_line`]: it writes only the `MSG`/`HMSG` control line so
//! the outbound queue can either copy a small payload behind it or keep a large one as its own
//! shared buffer. Numbers are formatted with `itoa` (no allocation, no `fmt` machinery).

use bytes::{BufMut, BytesMut};

use super::op::{ClientOp, ServerOp};

const CRLF: &[u8] = b"\r\n";

fn put_num(out: &mut BytesMut, n: usize) {
    let mut b = itoa::Buffer::new();
    out.put_slice(b.format(n).as_bytes());
}

/// Writes `MSG <subject> <sid> [reply] <len>\r\n` or the HMSG form when `header_len` is set.
/// `total_len` counts header and payload bytes.
pub fn encode_msg_line(
    out: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    header_len: Option<usize>,
    total_len: usize,
) {
    out.reserve(subject.len() + sid.len() + reply.map_or(0, <[u8]>::len) + 40);
    out.put_slice(if header_len.is_some() {
        b"HMSG "
    } else {
        b"MSG "
    });
    out.put_slice(subject);
    out.put_u8(b' ');
    out.put_slice(sid);
    out.put_u8(b' ');
    if let Some(r) = reply {
        out.put_slice(r);
        out.put_u8(b' ');
    }
    if let Some(h) = header_len {
        put_num(out, h);
        out.put_u8(b' ');
    }
    put_num(out, total_len);
    out.put_slice(CRLF);
}

/// Writes a whole `MSG`/`HMSG` frame: control line, headers, payload and the closing CRLF.
pub fn encode_msg(
    out: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let hlen = headers.map(<[u8]>::len);
    let total = hlen.unwrap_or(0) + payload.len();
    encode_msg_line(out, subject, sid, reply, hlen, total);
    out.reserve(total + 2);
    if let Some(h) = headers {
        out.put_slice(h);
    }
    out.put_slice(payload);
    out.put_slice(CRLF);
}

/// Writes `-ERR '<text>'\r\n`.
pub fn encode_err(out: &mut BytesMut, text: &str) {
    out.put_slice(b"-ERR '");
    out.put_slice(text.as_bytes());
    out.put_slice(b"'\r\n");
}

/// Writes a client op (used by the load tool and the round-trip tests).
pub fn encode_client_op(out: &mut BytesMut, op: &ClientOp) {
    match op {
        ClientOp::Connect(json) => {
            out.put_slice(b"CONNECT ");
            out.put_slice(json);
            out.put_slice(CRLF);
        }
        ClientOp::Info(json) => {
            out.put_slice(b"INFO ");
            out.put_slice(json);
            out.put_slice(CRLF);
        }
        ClientOp::Pub {
            subject,
            reply,
            headers,
            payload,
        } => {
            out.put_slice(if headers.is_some() { b"HPUB " } else { b"PUB " });
            out.put_slice(subject);
            out.put_u8(b' ');
            if let Some(r) = reply {
                out.put_slice(r);
                out.put_u8(b' ');
            }
            let hlen = headers.as_ref().map(|h| h.len());
            if let Some(h) = hlen {
                put_num(out, h);
                out.put_u8(b' ');
            }
            put_num(out, hlen.unwrap_or(0) + payload.len());
            out.put_slice(CRLF);
            if let Some(h) = headers {
                out.put_slice(h);
            }
            out.put_slice(payload);
            out.put_slice(CRLF);
        }
        ClientOp::Sub {
            subject,
            queue,
            sid,
        } => {
            out.put_slice(b"SUB ");
            out.put_slice(subject);
            out.put_u8(b' ');
            if let Some(q) = queue {
                out.put_slice(q);
                out.put_u8(b' ');
            }
            out.put_slice(sid);
            out.put_slice(CRLF);
        }
        ClientOp::Unsub { sid, max } => {
            out.put_slice(b"UNSUB ");
            out.put_slice(sid);
            if let Some(m) = max {
                out.put_u8(b' ');
                let mut b = itoa::Buffer::new();
                out.put_slice(b.format(*m).as_bytes());
            }
            out.put_slice(CRLF);
        }
        ClientOp::Ping => out.put_slice(b"PING\r\n"),
        ClientOp::Pong => out.put_slice(b"PONG\r\n"),
    }
}

/// Writes a server op.
pub fn encode_server_op(out: &mut BytesMut, op: &ServerOp) {
    match op {
        ServerOp::Info(json) => {
            out.put_slice(b"INFO ");
            out.put_slice(json);
            out.put_slice(b" \r\n");
        }
        ServerOp::Msg {
            subject,
            sid,
            reply,
            headers,
            payload,
        } => encode_msg(
            out,
            subject,
            sid,
            reply.as_deref(),
            headers.as_deref(),
            payload,
        ),
        ServerOp::Ping => out.put_slice(b"PING\r\n"),
        ServerOp::Pong => out.put_slice(b"PONG\r\n"),
        ServerOp::Ok => out.put_slice(b"+OK\r\n"),
        ServerOp::Err(text) => {
            out.put_slice(b"-ERR '");
            out.put_slice(text);
            out.put_slice(b"'\r\n");
        }
    }
}
