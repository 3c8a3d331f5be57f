//! The route protocol between cluster members (`spec/cluster.md` §2): a resumable parser for
//! what a peer sends on a route connection, and the encoders for what we send.
//!
//! Framing is the client protocol's (CRLF control lines, byte-counted payloads, case-insensitive
//! op names), but the ops differ: interest travels as `RS+`/`RS-` keyed by account, messages as
//! `RMSG`/`HMSG` with the account and, after a `+` or `|` marker, the queue groups the sender
//! chose on this peer. There is no sid: the receiver routes by account and subject.
//!
//! On a connection pinned to one account (`route_account`, spec §2.8) the account token is left
//! out of `RS±`/`RMSG`/`HMSG` both ways: [`RouteParser::pin`] puts it back for the reader, and
//! the encoders leave it out when given an empty account. We never ask for the leaf-origin
//! forms (our INFO leaves out `lnoc`); `LS+`/`LS-`/`LMSG` are still read (origin dropped) so a
//! peer that sends them anyway does not lose the route.
//!
//! One op is sealstream's own, sent only to peers whose INFO says they are sealstream
//! (`sealstream_raft`): `JMSG <account> <to> <shown> [reply] <size>` and `JHMSG … <hsize>
//! <size>`, a JetStream delivery to the subscribers of `<to>` on that peer that shows the stream
//! message's own subject `<shown>` (a push consumer's deliver subject or a pull request's inbox
//! is where it goes; what the client sees as the subject is the message's). `RMSG` has one
//! subject, so it cannot say both. A `JMSG` reaches the peer's plain subscribers only; the
//! queue groups' members the sender picked there get `JQMSG <account> <to> <shown> [+ reply |
//! |] <queue>… <size>` (`JQHMSG` with headers), which reaches those groups' members only —
//! the sender picks a queue group's member among every server's, so a peer never picks one of
//! its own for a delivery (it would be a second copy for the group).

use bytes::{BufMut, Bytes, BytesMut};

use super::parser::{parse_size, split_body, ProtoError};

/// Longest route control line accepted (queue lists make RMSG lines long).
pub const MAX_ROUTE_CONTROL_LINE: usize = 64 * 1024;
/// Largest message a peer may send on a route: nats-server's ceiling for `max_payload`.
pub const MAX_ROUTE_PAYLOAD: usize = 64 * 1024 * 1024;

/// One op read from a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOp {
    /// `INFO {json}`: the handshake, or later gossip and updates.
    Info(Bytes),
    /// `CONNECT {json}`.
    Connect(Bytes),
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `+OK`.
    Ok,
    /// `-ERR 'text'` (quotes removed).
    Err(Bytes),
    /// `RS+ <account> <subject> [<queue> <weight>]`.
    Sub {
        /// Account name.
        account: Bytes,
        /// Subject filter.
        subject: Bytes,
        /// Queue name and how many members the peer has in it on this subject.
        queue: Option<(Bytes, u32)>,
    },
    /// `RS- <account> <subject> [<queue>]`.
    Unsub {
        /// Account name.
        account: Bytes,
        /// Subject filter.
        subject: Bytes,
        /// Queue name.
        queue: Option<Bytes>,
    },
    /// `RMSG`/`HMSG`: a message for this server's subscribers.
    Msg {
        /// Account name.
        account: Bytes,
        /// Subject.
        subject: Bytes,
        /// Reply subject.
        reply: Option<Bytes>,
        /// Queue groups of ours the sender picked for this message (one member each).
        queues: Vec<Bytes>,
        /// `JMSG`/`JHMSG` (then `queues` is empty: plain subscribers only) and
        /// `JQMSG`/`JQHMSG` (`queues`' members only): the subject subscribers are shown
        /// (`subject` is where it goes).
        shown: Option<Bytes>,
        /// Header block, for HMSG.
        headers: Option<Bytes>,
        /// Payload.
        payload: Bytes,
    },
}

#[derive(Debug)]
struct Pending {
    account: Bytes,
    subject: Bytes,
    reply: Option<Bytes>,
    queues: Vec<Bytes>,
    shown: Option<Bytes>,
    header_len: Option<usize>,
    total: usize,
}

/// The route parser; one per route connection.
#[derive(Debug, Default)]
pub struct RouteParser {
    pending: Option<Pending>,
    /// The account of a pinned connection, whose ops leave it out.
    pinned: Option<Bytes>,
}

fn is_sep(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// Splits a control line into blank-separated words (zero-copy slices of `line`).
fn words(line: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while line.get(i).is_some_and(|c| is_sep(*c)) {
            i += 1;
        }
        let start = i;
        while line.get(i).is_some_and(|c| !is_sep(*c)) {
            i += 1;
        }
        if i > start {
            out.push(line.slice(start..i));
        }
    }
    out
}

/// The JSON after an op name (INFO, CONNECT) or the text after `-ERR`.
fn rest_after_name(line: &Bytes) -> Bytes {
    let start = line.iter().position(|c| !is_sep(*c)).unwrap_or(line.len());
    let name_end = line
        .iter()
        .skip(start)
        .position(|c| is_sep(*c))
        .map_or(line.len(), |p| p + start);
    let body_start = line
        .iter()
        .skip(name_end)
        .position(|c| !is_sep(*c))
        .map_or(line.len(), |p| p + name_end);
    let mut end = line.len();
    while end > body_start && line.get(end - 1).is_some_and(|c| is_sep(*c)) {
        end -= 1;
    }
    line.slice(body_start..end)
}

impl RouteParser {
    /// A parser with nothing pending.
    pub fn new() -> Self {
        RouteParser::default()
    }

    /// From now on the connection carries only `account`, whose name the ops leave out.
    pub fn pin(&mut self, account: &str) {
        self.pinned = Some(Bytes::copy_from_slice(account.as_bytes()));
    }

    /// Parses the next op from the front of `buf`; `Ok(None)` means "need more bytes".
    ///
    /// # Errors
    /// A [`ProtoError`] for bytes no route peer would send; the route must be closed.
    pub fn next_op(&mut self, buf: &mut BytesMut) -> Result<Option<RouteOp>, ProtoError> {
        loop {
            if let Some(p) = &self.pending {
                let need = p.total.saturating_add(2);
                if buf.len() < need {
                    buf.reserve(need - buf.len());
                    return Ok(None);
                }
                let Some(p) = self.pending.take() else {
                    return Ok(None);
                };
                let (headers, payload) = split_body(buf, p.total, p.header_len)?;
                return Ok(Some(RouteOp::Msg {
                    account: p.account,
                    subject: p.subject,
                    reply: p.reply,
                    queues: p.queues,
                    shown: p.shown,
                    headers,
                    payload,
                }));
            }
            let scan = buf
                .get(..buf.len().min(MAX_ROUTE_CONTROL_LINE + 2))
                .unwrap_or(&[]);
            let Some(nl) = memchr::memchr(b'\n', scan) else {
                if buf.len() > MAX_ROUTE_CONTROL_LINE {
                    return Err(ProtoError::ControlLineTooLong);
                }
                return Ok(None);
            };
            let mut line = buf.split_to(nl + 1).freeze();
            line.truncate(nl);
            if line.last() == Some(&b'\r') {
                line.truncate(nl - 1);
            }
            let w = words(&line);
            let Some(name) = w.first() else {
                continue;
            };
            let name = name.to_ascii_uppercase();
            let with_account: Vec<Bytes>;
            let args = match &self.pinned {
                Some(a)
                    if matches!(
                        name.as_slice(),
                        b"RS+" | b"RS-" | b"RMSG" | b"HMSG" | b"JMSG" | b"JHMSG"
                    ) =>
                {
                    with_account = std::iter::once(a.clone())
                        .chain(w.iter().skip(1).cloned())
                        .collect();
                    with_account.as_slice()
                }
                _ => w.get(1..).unwrap_or(&[]),
            };
            let op = match name.as_slice() {
                b"PING" => RouteOp::Ping,
                b"PONG" => RouteOp::Pong,
                b"+OK" => RouteOp::Ok,
                b"INFO" => RouteOp::Info(rest_after_name(&line)),
                b"CONNECT" => RouteOp::Connect(rest_after_name(&line)),
                b"-ERR" => {
                    let text = rest_after_name(&line);
                    let trimmed = text
                        .strip_prefix(b"'")
                        .and_then(|t| t.strip_suffix(b"'"))
                        .map(|t| text.slice_ref(t))
                        .unwrap_or(text);
                    RouteOp::Err(trimmed)
                }
                b"RS+" => sub(args, "RS+")?,
                b"LS+" => sub(args.get(1..).unwrap_or(&[]), "LS+")?,
                b"RS-" => unsub(args, "RS-")?,
                b"LS-" => {
                    // With an origin the account is the second word; without, the first.
                    let a = if args.len() >= 3 {
                        args.get(1..).unwrap_or(&[])
                    } else {
                        args
                    };
                    unsub(a, "LS-")?
                }
                b"RMSG" => {
                    self.start_msg(args, false, "RMSG")?;
                    continue;
                }
                b"HMSG" => {
                    self.start_msg(args, true, "HMSG")?;
                    continue;
                }
                b"LMSG" => {
                    self.start_msg(args.get(1..).unwrap_or(&[]), true, "LMSG")?;
                    continue;
                }
                b"JMSG" => {
                    self.start_msg(args, false, "JMSG")?;
                    continue;
                }
                b"JHMSG" => {
                    self.start_msg(args, true, "JHMSG")?;
                    continue;
                }
                b"JQMSG" => {
                    self.start_msg(args, false, "JQMSG")?;
                    continue;
                }
                b"JQHMSG" => {
                    self.start_msg(args, true, "JQHMSG")?;
                    continue;
                }
                _ => return Err(ProtoError::UnknownOp),
            };
            return Ok(Some(op));
        }
    }

    /// Reads an RMSG/HMSG (or JMSG/JHMSG) control line into [`Pending`].
    fn start_msg(
        &mut self,
        args: &[Bytes],
        with_headers: bool,
        op: &'static str,
    ) -> Result<(), ProtoError> {
        let bad = || ProtoError::BadArgs { op };
        let sizes = if with_headers { 2 } else { 1 };
        if args.len() < 2 + sizes {
            return Err(bad());
        }
        let (head, size_words) = args.split_at(args.len() - sizes);
        let account = head.first().cloned().ok_or_else(bad)?;
        let subject = head.get(1).cloned().ok_or_else(bad)?;
        let delivery = op.starts_with('J');
        let shown = if delivery {
            Some(head.get(2).cloned().ok_or_else(bad)?)
        } else {
            None
        };
        let middle = head.get(if delivery { 3 } else { 2 }..).unwrap_or(&[]);
        let to_groups = op.starts_with("JQ");
        let (reply, queues) = match middle {
            _ if delivery && !to_groups && middle.len() > 1 => return Err(bad()),
            [] => (None, Vec::new()),
            [r] => (Some(r.clone()), Vec::new()),
            [marker, rest @ ..] if marker.as_ref() == b"+" => {
                let (r, q) = rest.split_first().ok_or_else(bad)?;
                (Some(r.clone()), q.to_vec())
            }
            [marker, rest @ ..] if marker.as_ref() == b"|" => (None, rest.to_vec()),
            _ => return Err(bad()),
        };
        if to_groups && queues.is_empty() {
            return Err(bad());
        }
        let nums: Vec<u64> = size_words
            .iter()
            .map(|s| parse_size(s).ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        let (header_len, total) = match nums.as_slice() {
            [t] => (None, *t),
            [h, t] if h <= t => (Some(*h), *t),
            _ => return Err(bad()),
        };
        if total > MAX_ROUTE_PAYLOAD as u64 {
            return Err(ProtoError::PayloadTooLarge {
                size: total,
                max: MAX_ROUTE_PAYLOAD,
            });
        }
        self.pending = Some(Pending {
            account,
            subject,
            reply,
            queues,
            shown,
            header_len: header_len.map(|h| usize::try_from(h).unwrap_or(usize::MAX)),
            total: usize::try_from(total).map_err(|_| bad())?,
        });
        Ok(())
    }
}

fn sub(args: &[Bytes], op: &'static str) -> Result<RouteOp, ProtoError> {
    match args {
        [account, subject] => Ok(RouteOp::Sub {
            account: account.clone(),
            subject: subject.clone(),
            queue: None,
        }),
        [account, subject, queue, weight] => {
            let w = parse_size(weight)
                .and_then(|w| u32::try_from(w).ok())
                .ok_or(ProtoError::BadArgs { op })?;
            Ok(RouteOp::Sub {
                account: account.clone(),
                subject: subject.clone(),
                queue: Some((queue.clone(), w.max(1))),
            })
        }
        // Older peers send a queue without a weight: one member.
        [account, subject, queue] => Ok(RouteOp::Sub {
            account: account.clone(),
            subject: subject.clone(),
            queue: Some((queue.clone(), 1)),
        }),
        _ => Err(ProtoError::BadArgs { op }),
    }
}

fn unsub(args: &[Bytes], op: &'static str) -> Result<RouteOp, ProtoError> {
    match args {
        [account, subject] => Ok(RouteOp::Unsub {
            account: account.clone(),
            subject: subject.clone(),
            queue: None,
        }),
        [account, subject, queue] => Ok(RouteOp::Unsub {
            account: account.clone(),
            subject: subject.clone(),
            queue: Some(queue.clone()),
        }),
        _ => Err(ProtoError::BadArgs { op }),
    }
}

fn put_num(out: &mut BytesMut, n: usize) {
    let mut b = itoa::Buffer::new();
    out.put_slice(b.format(n).as_bytes());
}

/// The account token and its blank; nothing on a pinned connection (`account` empty).
fn put_account(out: &mut BytesMut, account: &[u8]) {
    if !account.is_empty() {
        out.put_slice(account);
        out.put_u8(b' ');
    }
}

/// Appends `RS+ <account> <subject>[ <queue> <weight>]\r\n` (no account when it is empty).
pub fn encode_sub(out: &mut BytesMut, account: &[u8], subject: &[u8], queue: Option<(&[u8], u32)>) {
    out.put_slice(b"RS+ ");
    put_account(out, account);
    out.put_slice(subject);
    if let Some((q, w)) = queue {
        out.put_u8(b' ');
        out.put_slice(q);
        out.put_u8(b' ');
        put_num(out, w as usize);
    }
    out.put_slice(b"\r\n");
}

/// Appends `RS- <account> <subject>[ <queue>]\r\n`.
pub fn encode_unsub(out: &mut BytesMut, account: &[u8], subject: &[u8], queue: Option<&[u8]>) {
    out.put_slice(b"RS- ");
    put_account(out, account);
    out.put_slice(subject);
    if let Some(q) = queue {
        out.put_u8(b' ');
        out.put_slice(q);
    }
    out.put_slice(b"\r\n");
}

/// Appends the `RMSG`/`HMSG` control line (without the body): the plain forms without queues,
/// `+ <reply> <queues>` or `| <queues>` with them.
pub fn encode_msg_line(
    out: &mut BytesMut,
    account: &[u8],
    subject: &[u8],
    reply: Option<&[u8]>,
    queues: &[&[u8]],
    header_len: Option<usize>,
    total: usize,
) {
    out.put_slice(if header_len.is_some() {
        b"HMSG "
    } else {
        b"RMSG "
    });
    put_account(out, account);
    out.put_slice(subject);
    out.put_u8(b' ');
    put_reply_and_queues(out, reply, queues);
    put_sizes(out, header_len, total);
}

/// A message control line's reply and queue groups: the reply alone without queues,
/// `+ <reply> <queues>` or `| <queues>` with them.
fn put_reply_and_queues(out: &mut BytesMut, reply: Option<&[u8]>, queues: &[&[u8]]) {
    if queues.is_empty() {
        if let Some(r) = reply {
            out.put_slice(r);
            out.put_u8(b' ');
        }
        return;
    }
    match reply {
        Some(r) => {
            out.put_slice(b"+ ");
            out.put_slice(r);
            out.put_u8(b' ');
        }
        None => out.put_slice(b"| "),
    }
    for q in queues {
        out.put_slice(q);
        out.put_u8(b' ');
    }
}

/// Ends a message control line: the header size (header forms only), the total, CRLF.
fn put_sizes(out: &mut BytesMut, header_len: Option<usize>, total: usize) {
    if let Some(h) = header_len {
        put_num(out, h);
        out.put_u8(b' ');
    }
    put_num(out, total);
    out.put_slice(b"\r\n");
}

/// Appends the `JMSG`/`JHMSG` control line (without the body): a delivery to `to`'s plain
/// subscribers on a sealstream peer, shown as `shown`; with `queues`, `JQMSG`/`JQHMSG`: to
/// one member of each of those groups there instead.
#[allow(clippy::too_many_arguments)]
pub fn encode_delivery_line(
    out: &mut BytesMut,
    account: &[u8],
    to: &[u8],
    shown: &[u8],
    reply: Option<&[u8]>,
    queues: &[&[u8]],
    header_len: Option<usize>,
    total: usize,
) {
    out.put_slice(match (queues.is_empty(), header_len.is_some()) {
        (true, false) => b"JMSG ",
        (true, true) => b"JHMSG ",
        (false, false) => b"JQMSG ",
        (false, true) => b"JQHMSG ",
    });
    put_account(out, account);
    for w in [to, shown] {
        out.put_slice(w);
        out.put_u8(b' ');
    }
    put_reply_and_queues(out, reply, queues);
    put_sizes(out, header_len, total);
}

/// Estimated length of the control line [`encode_msg_line`] writes.
pub fn msg_line_len(
    account: &[u8],
    subject: &[u8],
    reply: Option<&[u8]>,
    queues: &[&[u8]],
) -> usize {
    account.len()
        + subject.len()
        + reply.map_or(0, <[u8]>::len)
        + queues.iter().map(|q| q.len() + 1).sum::<usize>()
        + 48
}

/// The route INFO we send (spec/cluster.md §2.2, §2.8, §2.12, §2.14): no `jetstream` or
/// `lnoc`; `route_pool_size` unless pooling is off (`pool_size: -1`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RouteInfo {
    /// This server's id (`N…`).
    pub server_id: String,
    /// This server's name.
    pub server_name: String,
    /// NATS-compatible version.
    pub version: String,
    /// Route protocol level (2: accounts in the protocol).
    pub proto: i32,
    /// Runtime (nats-server: Go version).
    pub go: String,
    /// Route listener host.
    pub host: String,
    /// Route listener port.
    pub port: u16,
    /// Advertised route URL, `nats-route://host:port/` (only with `advertise`, or in gossip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// We take HMSG.
    pub headers: bool,
    /// Route credentials required.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auth_required: bool,
    /// Routes are TLS (the handshake came first).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_required: bool,
    /// Peers' certificates are verified (always, with route TLS).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_verify: bool,
    /// Largest payload.
    pub max_payload: i64,
    /// Cluster name.
    pub cluster: String,
    /// The name was generated (no `cluster.name` configured).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cluster_dynamic: bool,
    /// This server's own client URLs (`host:port`), unless `no_advertise`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    /// Lame-duck mode.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ldm: bool,
    /// Connections per peer this server pools (none: one connection, spec §2.8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_pool_size: Option<u32>,
    /// The pool slot a dialed connection claims (slot 0 is left out).
    #[serde(skip_serializing_if = "is_zero")]
    pub route_pool_idx: u32,
    /// The account a dialed connection is pinned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_account: Option<String>,
    /// Our compression mode (acceptor), or the one chosen (dialer), spec §2.12.
    pub compression: String,
    /// The port of this server's Raft transport, when it runs replicated JetStream
    /// (sealstream's own field: nats-server ignores fields it does not know, and a sealstream
    /// node never claims `jetstream` to it, spec cluster.md 2.14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealstream_raft: Option<u16>,
    /// This server's `server_tags` (sealstream's own field, for stream placement).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sealstream_tags: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A peer's route INFO, as much of it as we act on. Unknown fields are ignored.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct PeerInfo {
    /// Its id.
    pub server_id: String,
    /// Its name.
    pub server_name: String,
    /// Cluster name.
    pub cluster: String,
    /// Its name was generated.
    pub cluster_dynamic: bool,
    /// Route listener host.
    pub host: String,
    /// Route listener port.
    pub port: u16,
    /// Advertised route URL.
    pub ip: Option<String>,
    /// It takes HMSG.
    pub headers: bool,
    /// Its client URLs.
    pub connect_urls: Vec<String>,
    /// It is in lame-duck mode.
    pub ldm: bool,
    /// It requires route credentials.
    pub auth_required: bool,
    /// Its version.
    pub version: String,
    /// Connections per peer it pools (absent: it does not pool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_pool_size: Option<i64>,
    /// The pool slot its dialed connection claims.
    pub route_pool_idx: i64,
    /// The account its dialed connection is pinned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_account: Option<String>,
    /// Its compression mode, or the one it chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// The port of its Raft transport (a sealstream peer running replicated JetStream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealstream_raft: Option<u16>,
    /// Its `server_tags`, for stream placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealstream_tags: Vec<String>,
}

/// The route CONNECT body: what we send and what we check from a dialing peer.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct RouteConnect {
    /// Always true.
    pub echo: bool,
    /// Always false.
    pub verbose: bool,
    /// Always false.
    pub pedantic: bool,
    /// Route user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Route password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    /// TLS in use.
    pub tls_required: bool,
    /// Header support.
    pub headers: bool,
    /// The dialer's server id.
    pub name: String,
    /// The dialer's cluster name.
    pub cluster: String,
    /// Set by clients only: a client dialed the route port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
    /// Set by gateways only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn parse_all(bytes: &[u8]) -> Vec<RouteOp> {
        let mut p = RouteParser::new();
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(op) = p.next_op(&mut buf).unwrap() {
            out.push(op);
        }
        out
    }

    #[test]
    fn the_observed_route_messages_parse() {
        let ops = parse_all(
            b"RMSG $G orders.new 2\r\no1\r\nRMSG $G orders.new reply.here 2\r\no2\r\n\
              HMSG $G orders.new 18 20\r\nNATS/1.0\r\nK: V\r\n\r\no3\r\n\
              RMSG $G work | wq 2\r\nw1\r\nRMSG $G work + r.w wq 2\r\nw2\r\n",
        );
        assert_eq!(ops.len(), 5);
        let RouteOp::Msg {
            reply,
            queues,
            payload,
            ..
        } = &ops[1]
        else {
            panic!()
        };
        assert_eq!(
            (reply.as_deref(), payload.as_ref()),
            (Some(&b"reply.here"[..]), &b"o2"[..])
        );
        assert!(queues.is_empty());
        let RouteOp::Msg {
            headers, payload, ..
        } = &ops[2]
        else {
            panic!()
        };
        assert_eq!(headers.as_ref().unwrap().len(), 18);
        assert_eq!(payload.as_ref(), b"o3");
        let RouteOp::Msg { reply, queues, .. } = &ops[3] else {
            panic!()
        };
        assert_eq!(
            (reply, queues.as_slice()),
            (&None, &[Bytes::from_static(b"wq")][..])
        );
        let RouteOp::Msg { reply, queues, .. } = &ops[4] else {
            panic!()
        };
        assert_eq!(reply.as_deref(), Some(&b"r.w"[..]));
        assert_eq!(queues.as_slice(), &[Bytes::from_static(b"wq")][..]);
    }

    #[test]
    fn interest_ops_parse_with_and_without_queues() {
        let ops =
            parse_all(b"RS+ $G foo.*\r\nRS+ $G work wq 2\r\nRS- $G work wq\r\nrs- APP bar\r\n");
        assert_eq!(
            ops[1],
            RouteOp::Sub {
                account: "$G".into(),
                subject: "work".into(),
                queue: Some(("wq".into(), 2))
            }
        );
        assert!(matches!(&ops[3], RouteOp::Unsub { account, queue: None, .. } if account == "APP"));
    }

    #[test]
    fn bytes_split_anywhere_parse_the_same() {
        let wire =
            b"PING\r\nRS+ $G a\r\nHMSG $G a + r q1 q2 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPONG\r\n";
        let whole = parse_all(wire);
        for cut in 1..wire.len() {
            let mut p = RouteParser::new();
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut got = Vec::new();
            while let Some(op) = p.next_op(&mut buf).unwrap() {
                got.push(op);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(op) = p.next_op(&mut buf).unwrap() {
                got.push(op);
            }
            assert_eq!(got, whole, "cut at {cut}");
        }
    }

    #[test]
    fn malformed_route_ops_are_errors_not_panics() {
        for bad in [
            &b"RMSG $G\r\n"[..],
            b"RMSG $G a x y 2\r\n",
            b"HMSG $G a 5 2\r\n",
            b"RS+ $G\r\n",
            b"RS+ $G a q notanumber\r\n",
            b"BOGUS\r\n",
            b"RMSG $G a 2\r\nabcd",
        ] {
            let mut p = RouteParser::new();
            let mut buf = BytesMut::from(bad);
            let mut r = p.next_op(&mut buf);
            while let Ok(Some(_)) = r {
                r = p.next_op(&mut buf);
            }
            assert!(r.is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn encoders_write_what_the_parser_reads() {
        let mut out = BytesMut::new();
        encode_sub(&mut out, b"$G", b"work", Some((b"wq", 3)));
        encode_unsub(&mut out, b"$G", b"work", Some(b"wq"));
        encode_msg_line(
            &mut out,
            b"$G",
            b"work",
            Some(b"r"),
            &[b"wq", b"x"],
            None,
            2,
        );
        out.put_slice(b"hi\r\n");
        encode_msg_line(&mut out, b"A", b"s", None, &[], Some(12), 12);
        out.put_slice(b"NATS/1.0\r\n\r\n\r\n");
        assert!(
            out.starts_with(b"RS+ $G work wq 3\r\nRS- $G work wq\r\nRMSG $G work + r wq x 2\r\n")
        );
        let ops = parse_all(&out);
        assert_eq!(ops.len(), 4);
        assert!(matches!(&ops[2], RouteOp::Msg { queues, .. } if queues.len() == 2));
        assert!(matches!(
            &ops[3],
            RouteOp::Msg {
                headers: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn deliveries_carry_where_they_go_and_what_they_show() {
        let mut out = BytesMut::new();
        encode_delivery_line(
            &mut out,
            b"A",
            b"_INBOX.x",
            b"orders.1",
            Some(b"$JS.ACK.S"),
            &[],
            None,
            2,
        );
        out.put_slice(b"hi\r\n");
        encode_delivery_line(&mut out, b"", b"dlv", b"orders.2", None, &[], Some(12), 12);
        out.put_slice(b"NATS/1.0\r\n\r\n\r\n");
        assert!(out.starts_with(b"JMSG A _INBOX.x orders.1 $JS.ACK.S 2\r\nhi\r\nJHMSG dlv"));
        let mut p = RouteParser::new();
        let mut buf = BytesMut::from(&out[..]);
        let first = p.next_op(&mut buf).unwrap();
        assert!(
            matches!(first, Some(RouteOp::Msg { subject, shown: Some(shown), reply: Some(_), .. })
            if subject == "_INBOX.x" && shown == "orders.1")
        );
        p.pin("P");
        let second = p.next_op(&mut buf).unwrap();
        assert!(
            matches!(second, Some(RouteOp::Msg { account, shown: Some(shown), headers: Some(_), reply: None, .. })
            if account == "P" && shown == "orders.2")
        );
        // A delivery names one reply at most and no queue groups.
        let mut p = RouteParser::new();
        let mut buf = BytesMut::from(&b"JMSG A to shown + r q 2\r\nhi\r\n"[..]);
        assert!(p.next_op(&mut buf).is_err());
    }

    #[test]
    fn a_delivery_to_picked_queue_groups_names_them_and_never_none() {
        let mut out = BytesMut::new();
        encode_delivery_line(
            &mut out,
            b"A",
            b"dlv",
            b"orders.1",
            Some(b"$JS.ACK.S"),
            &[b"workers", b"audit"],
            None,
            2,
        );
        out.put_slice(b"hi\r\n");
        encode_delivery_line(
            &mut out,
            b"A",
            b"dlv",
            b"orders.2",
            None,
            &[b"w"],
            Some(12),
            12,
        );
        out.put_slice(b"NATS/1.0\r\n\r\n\r\n");
        assert!(out.starts_with(b"JQMSG A dlv orders.1 + $JS.ACK.S workers audit 2\r\nhi\r\n"));
        let mut p = RouteParser::new();
        let mut buf = BytesMut::from(&out[..]);
        let Some(RouteOp::Msg {
            shown,
            reply,
            queues,
            ..
        }) = p.next_op(&mut buf).unwrap()
        else {
            panic!("not a message")
        };
        assert_eq!(shown.as_deref(), Some(&b"orders.1"[..]));
        assert_eq!(reply.as_deref(), Some(&b"$JS.ACK.S"[..]));
        assert_eq!(queues, vec![Bytes::from("workers"), Bytes::from("audit")]);
        let Some(RouteOp::Msg {
            queues, headers, ..
        }) = p.next_op(&mut buf).unwrap()
        else {
            panic!("not a message")
        };
        assert_eq!(queues, vec![Bytes::from("w")]);
        assert!(headers.is_some());
        // A delivery to queue groups names at least one.
        let mut p = RouteParser::new();
        let mut buf = BytesMut::from(&b"JQMSG A to shown r 2\r\nhi\r\n"[..]);
        assert!(p.next_op(&mut buf).is_err());
    }

    #[test]
    fn a_pinned_connection_leaves_the_account_out_both_ways() {
        let mut out = BytesMut::new();
        encode_sub(&mut out, b"", b"$SYS.REQ.>", None);
        encode_unsub(&mut out, b"", b"work", Some(b"wq"));
        encode_msg_line(&mut out, b"", b"s.x", Some(b"_INBOX.1"), &[], None, 2);
        out.put_slice(b"hi\r\n");
        encode_msg_line(&mut out, b"", b"s.y", None, &[b"q"], Some(12), 12);
        out.put_slice(b"NATS/1.0\r\n\r\n\r\n");
        assert!(out.starts_with(b"RS+ $SYS.REQ.>\r\nRS- work wq\r\nRMSG s.x _INBOX.1 2\r\n"));
        let mut p = RouteParser::new();
        p.pin("$SYS");
        let mut buf = BytesMut::from(&out[..]);
        buf.put_slice(b"PING\r\nINFO {}\r\n");
        let mut ops = Vec::new();
        while let Some(op) = p.next_op(&mut buf).unwrap() {
            ops.push(op);
        }
        assert_eq!(ops.len(), 6);
        assert_eq!(
            ops[0],
            RouteOp::Sub {
                account: "$SYS".into(),
                subject: "$SYS.REQ.>".into(),
                queue: None
            }
        );
        assert!(
            matches!(&ops[1], RouteOp::Unsub { account, queue: Some(q), .. }
            if account == "$SYS" && q == "wq")
        );
        assert!(
            matches!(&ops[2], RouteOp::Msg { account, subject, reply: Some(r), .. }
            if account == "$SYS" && subject == "s.x" && r == "_INBOX.1")
        );
        assert!(
            matches!(&ops[3], RouteOp::Msg { queues, headers: Some(_), .. } if queues.len() == 1)
        );
        assert_eq!(
            (&ops[4], &ops[5]),
            (&RouteOp::Ping, &RouteOp::Info("{}".into()))
        );
    }
}
