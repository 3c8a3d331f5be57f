//! WebSocket clients (`websocket {}`): the HTTP upgrade of RFC 6455 §4, then the client protocol
//! inside binary frames.
//!
//! Why a pump and not a second protocol stack: after the upgrade a WebSocket connection carries
//! exactly the client protocol, cut into frames at arbitrary points. The pump unwraps frames
//! into a bounded in-process pipe that the ordinary connection code reads, and wraps what that
//! code writes into frames, so parsing, authentication, permissions, limits and backpressure
//! are the same code as for TCP clients ([`conn::serve_stream`]). The pipe holds at most
//! [`PIPE_BYTES`] each way: a client that stops reading fills it, the connection's writer then
//! stalls as on a full socket, and the usual slow-consumer rule applies.
//!
//! Bounds and refusals: the upgrade request is at most [`MAX_REQUEST`] bytes and must arrive
//! within `handshake_timeout`; data frames are streamed through in [`CHUNK`]-sized pieces
//! (never buffered whole); control frames are at most 125 bytes (RFC 6455 §5.5). A client frame
//! that is not masked, uses reserved bits or opcodes, or breaks fragmentation closes the
//! connection with status 1002. `permessage-deflate` is not negotiated (a server may decline
//! an extension; clients then send plain frames) — `compression: true` is logged as such.

use std::net::SocketAddr;
use std::sync::Arc;

use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::config::options::WebsocketOptions;

use super::tls::TlsSetup;
use super::{conn, Shared};

/// The RFC 6455 key suffix hashed into `Sec-WebSocket-Accept`.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest upgrade request head accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// Bytes the in-process pipe holds each way.
const PIPE_BYTES: usize = 64 * 1024;
/// Largest piece of a data frame moved at once, and of an outgoing frame.
const CHUNK: usize = 32 * 1024;
/// Control frames queued for the writer (pongs, the close reply).
const CONTROL_QUEUE: usize = 8;

const OP_CONT: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// Close status: protocol error.
const CLOSE_PROTOCOL: u16 = 1002;
/// Close status: normal.
const CLOSE_NORMAL: u16 = 1000;

/// Accepts WebSocket clients until `stop` is cancelled (the client port's accept loop, with a
/// refused peer's socket simply closed).
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<Arc<TlsSetup>>,
    stop: CancellationToken,
) {
    super::listener::accept_with(
        listener,
        shared,
        stop,
        false,
        move |shared, stream, peer| {
            let _ = stream.set_nodelay(true);
            serve(shared, stream, peer, tls.clone())
        },
    )
    .await;
}

async fn serve(
    shared: Arc<Shared>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<TlsSetup>>,
) {
    let Some(opts) = shared.opts.websocket.clone() else {
        return;
    };
    match tls {
        None => upgrade_and_run(shared, stream, peer, &opts, false).await,
        Some(tls) => {
            let accepted =
                tokio::time::timeout(opts.handshake_timeout, tls.acceptor().accept(stream)).await;
            match accepted {
                Ok(Ok(s)) => upgrade_and_run(shared, s, peer, &opts, true).await,
                Ok(Err(e)) => debug!(remote = %peer, error = %e, "websocket TLS handshake failed"),
                Err(_) => debug!(remote = %peer, "websocket TLS handshake timed out"),
            }
        }
    }
}

async fn upgrade_and_run<S>(
    shared: Arc<Shared>,
    mut stream: S,
    peer: SocketAddr,
    opts: &WebsocketOptions,
    tls: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let head = match tokio::time::timeout(opts.handshake_timeout, read_head(&mut stream)).await {
        Ok(Ok(h)) => h,
        Ok(Err(reason)) => {
            debug!(remote = %peer, reason, "websocket upgrade refused");
            let _ = stream.write_all(&refusal(400, reason)).await;
            return;
        }
        Err(_) => {
            debug!(remote = %peer, "websocket upgrade timed out");
            return;
        }
    };
    let (request, leftover) = head;
    let key = match check_upgrade(&request, opts) {
        Ok(k) => k,
        Err((status, reason)) => {
            debug!(remote = %peer, reason, "websocket upgrade refused");
            let _ = stream.write_all(&refusal(status, reason)).await;
            return;
        }
    };
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(&key)
    );
    if stream.write_all(response.as_bytes()).await.is_err() {
        return;
    }
    let (conn_end, pump_end) = tokio::io::duplex(PIPE_BYTES);
    let connection = tokio::spawn(conn::serve_stream(shared, conn_end, peer, tls));
    pump(stream, leftover, pump_end).await;
    let _ = connection.await;
}

/// Reads the request head (up to the blank line); returns it and any bytes after it.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<(Vec<u8>, Vec<u8>), &'static str> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() >= MAX_REQUEST {
            return Err("request head too large");
        }
        let n = s.read(&mut chunk).await.map_err(|_| "read error")?;
        if n == 0 {
            return Err("closed before the request ended");
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

/// Checks an upgrade request; returns its `Sec-WebSocket-Key`, or the status and reason to
/// refuse it with.
fn check_upgrade(head: &[u8], opts: &WebsocketOptions) -> Result<String, (u16, &'static str)> {
    let text = std::str::from_utf8(head).map_err(|_| (400, "request is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, _target, version) = (parts.next(), parts.next(), parts.next());
    if method != Some("GET") {
        return Err((405, "method must be GET"));
    }
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) || version == Some("HTTP/1.0") {
        return Err((400, "HTTP/1.1 required"));
    }
    let header = |name: &str| -> Option<&str> {
        text.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if !has_token("Upgrade", "websocket") {
        return Err((400, "missing Upgrade: websocket"));
    }
    if !has_token("Connection", "upgrade") {
        return Err((400, "missing Connection: Upgrade"));
    }
    if header("Sec-WebSocket-Version") != Some("13") {
        return Err((400, "Sec-WebSocket-Version must be 13"));
    }
    let key = header("Sec-WebSocket-Key").unwrap_or_default();
    let decoded = data_encoding::BASE64.decode(key.as_bytes()).ok();
    if decoded.is_none_or(|k| k.len() != 16) {
        return Err((400, "invalid Sec-WebSocket-Key"));
    }
    if let Some(origin) = header("Origin") {
        if opts.same_origin {
            let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
            if header("Host").is_none_or(|h| !h.eq_ignore_ascii_case(origin_host)) {
                return Err((403, "origin not allowed (same_origin)"));
            }
        }
        if !opts.allowed_origins.is_empty()
            && !opts
                .allowed_origins
                .iter()
                .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
        {
            return Err((403, "origin not allowed"));
        }
    }
    Ok(key.to_owned())
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2).
fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(GUID.as_bytes());
    data_encoding::BASE64.encode(&h.finalize())
}

fn refusal(status: u16, reason: &str) -> Vec<u8> {
    let text = match status {
        403 => "Forbidden",
        405 => "Method Not Allowed",
        _ => "Bad Request",
    };
    format!(
        "HTTP/1.1 {status} {text}\r\nSec-WebSocket-Version: 13\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{reason}",
        reason.len()
    )
    .into_bytes()
}

/// A frame header: `fin`/`rsv` bits, the opcode, and the 7-bit, 16-bit or 64-bit length
/// (network byte order, RFC 6455 §5.2), unmasked (server frames are never masked).
fn frame_header(opcode: u8, len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(10);
    h.push(0x80 | opcode);
    let n = len as u64;
    if len < 126 {
        h.push(len as u8);
    } else if len <= 0xFFFF {
        h.push(126);
        h.extend_from_slice(&[(n >> 8) as u8, n as u8]);
    } else {
        h.push(127);
        for shift in (0..8).rev() {
            h.push((n >> (shift * 8)) as u8);
        }
    }
    h
}

fn close_frame(code: u16) -> Vec<u8> {
    let mut f = frame_header(OP_CLOSE, 2);
    f.extend_from_slice(&[(code >> 8) as u8, code as u8]);
    f
}

/// Moves bytes between the socket (frames) and the connection code (plain bytes) until either
/// side ends.
async fn pump<S>(stream: S, leftover: Vec<u8>, pipe: tokio::io::DuplexStream)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (socket_r, socket_w) = tokio::io::split(stream);
    let (pipe_r, pipe_w) = tokio::io::split(pipe);
    let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE);
    let socket_r = std::io::Cursor::new(leftover).chain(socket_r);
    let inbound = tokio::spawn(inbound(socket_r, pipe_w, control_tx));
    outbound(pipe_r, socket_w, control_rx).await;
    inbound.abort();
}

/// Why reading frames stopped.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The socket closed or failed (nothing to answer).
    Gone,
    /// The client sent a close frame (answered with the same status).
    Closed(u16),
    /// A protocol violation (answered with 1002).
    Protocol(&'static str),
    /// The connection code stopped reading.
    PipeClosed,
}

/// Socket → connection: unmask data frames into the pipe, answer pings and closes.
async fn inbound<R, W>(mut r: R, mut pipe: W, control: mpsc::Sender<Vec<u8>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let ended = read_frames(&mut r, &mut pipe, &control).await;
    match ended {
        Ended::Closed(code) => {
            let _ = control.send(close_frame(code)).await;
        }
        Ended::Protocol(reason) => {
            debug!(reason, "websocket protocol error");
            let _ = control.send(close_frame(CLOSE_PROTOCOL)).await;
        }
        Ended::Gone | Ended::PipeClosed => {}
    }
    // The connection code sees end of input and closes.
    let _ = pipe.shutdown().await;
}

async fn read_frames<R, W>(r: &mut R, pipe: &mut W, control: &mpsc::Sender<Vec<u8>>) -> Ended
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut in_message = false;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let mut h = [0u8; 2];
        if r.read_exact(&mut h).await.is_err() {
            return Ended::Gone;
        }
        let [b0, b1] = h;
        let fin = b0 & 0x80 != 0;
        let opcode = b0 & 0x0F;
        if b0 & 0x70 != 0 {
            return Ended::Protocol("reserved bits set (no extension was negotiated)");
        }
        if b1 & 0x80 == 0 {
            return Ended::Protocol("client frame not masked");
        }
        let len = match b1 & 0x7F {
            126 => {
                let mut l = [0u8; 2];
                if r.read_exact(&mut l).await.is_err() {
                    return Ended::Gone;
                }
                // Network byte order (RFC 6455 §5.2).
                l.iter().fold(0u64, |n, b| n << 8 | u64::from(*b))
            }
            127 => {
                let mut l = [0u8; 8];
                if r.read_exact(&mut l).await.is_err() {
                    return Ended::Gone;
                }
                l.iter().fold(0u64, |n, b| n << 8 | u64::from(*b))
            }
            n => u64::from(n),
        };
        let mut mask = [0u8; 4];
        if r.read_exact(&mut mask).await.is_err() {
            return Ended::Gone;
        }
        match opcode {
            OP_TEXT | OP_BINARY | OP_CONT => {
                if opcode == OP_CONT && !in_message {
                    return Ended::Protocol("continuation frame without a message");
                }
                if opcode != OP_CONT && in_message {
                    return Ended::Protocol("new message inside a fragmented one");
                }
                in_message = !fin;
                // Streamed through: a frame is never held whole.
                let mut left = len;
                let mut at = 0usize;
                while left > 0 {
                    let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
                    let Some(piece) = buf.get_mut(..n) else {
                        return Ended::Gone;
                    };
                    if r.read_exact(piece).await.is_err() {
                        return Ended::Gone;
                    }
                    for (i, b) in piece.iter_mut().enumerate() {
                        *b ^= mask.get((at + i) % 4).copied().unwrap_or(0);
                    }
                    if pipe.write_all(piece).await.is_err() {
                        return Ended::PipeClosed;
                    }
                    at = (at + n) % 4;
                    left -= n as u64;
                }
            }
            OP_CLOSE | OP_PING | OP_PONG => {
                if !fin || len > 125 {
                    return Ended::Protocol("control frame fragmented or over 125 bytes");
                }
                let mut payload = vec![0u8; len as usize];
                if r.read_exact(&mut payload).await.is_err() {
                    return Ended::Gone;
                }
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= mask.get(i % 4).copied().unwrap_or(0);
                }
                match opcode {
                    OP_CLOSE => {
                        let code = match payload.as_slice() {
                            [hi, lo, ..] => u16::from(*hi) << 8 | u16::from(*lo),
                            _ => CLOSE_NORMAL,
                        };
                        return Ended::Closed(code);
                    }
                    OP_PING => {
                        let mut pong = frame_header(OP_PONG, payload.len());
                        pong.extend_from_slice(&payload);
                        if control.send(pong).await.is_err() {
                            return Ended::Gone;
                        }
                    }
                    _ => {}
                }
            }
            _ => return Ended::Protocol("unknown opcode"),
        }
    }
}

/// Connection → socket: what the connection code writes goes out as binary frames; control
/// frames from the reading side are sent between them.
async fn outbound<R, W>(mut pipe: R, mut socket: W, mut control: mpsc::Receiver<Vec<u8>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    let mut control_open = true;
    loop {
        tokio::select! {
            n = pipe.read(&mut buf) => {
                let n = match n {
                    Ok(0) | Err(_) => {
                        // The connection ended: say so, then hang up.
                        let _ = socket.write_all(&close_frame(CLOSE_NORMAL)).await;
                        break;
                    }
                    Ok(n) => n,
                };
                let mut frame = frame_header(OP_BINARY, n);
                frame.extend_from_slice(buf.get(..n).unwrap_or_default());
                if socket.write_all(&frame).await.is_err() {
                    break;
                }
            }
            c = control.recv(), if control_open => match c {
                Some(frame) => {
                    let is_close = frame.first() == Some(&(0x80 | OP_CLOSE));
                    if socket.write_all(&frame).await.is_err() || is_close {
                        break;
                    }
                }
                None => control_open = false,
            },
        }
    }
    let _ = socket.shutdown().await;
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-length values")]
mod tests {
    use super::*;

    fn opts() -> WebsocketOptions {
        WebsocketOptions {
            no_tls: true,
            ..WebsocketOptions::default()
        }
    }

    const GOOD: &str = "GET / HTTP/1.1\r\nHost: h:1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
                        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

    #[test]
    fn the_rfc_example_key_gives_the_rfc_accept_value() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(
            check_upgrade(GOOD.as_bytes(), &opts()).unwrap(),
            "dGhlIHNhbXBsZSBub25jZQ=="
        );
    }

    #[test]
    fn bad_upgrades_are_refused_with_a_status() {
        let cases = [
            (GOOD.replace("GET", "POST"), 405),
            (GOOD.replace("Version: 13", "Version: 8"), 400),
            (GOOD.replace("Upgrade: websocket\r\n", ""), 400),
            (GOOD.replace("keep-alive, Upgrade", "keep-alive"), 400),
            (GOOD.replace("dGhlIHNhbXBsZSBub25jZQ==", "short"), 400),
            (GOOD.replace("HTTP/1.1", "HTTP/1.0"), 400),
        ];
        for (req, status) in cases {
            assert_eq!(
                check_upgrade(req.as_bytes(), &opts()).unwrap_err().0,
                status,
                "{req}"
            );
        }
        let with_origin = GOOD.replace("Host: h:1", "Host: h:1\r\nOrigin: http://evil:1");
        let mut same = opts();
        same.same_origin = true;
        assert_eq!(
            check_upgrade(with_origin.as_bytes(), &same).unwrap_err().0,
            403
        );
        let mut listed = opts();
        listed.allowed_origins = vec!["http://good:1".into()];
        assert_eq!(
            check_upgrade(with_origin.as_bytes(), &listed)
                .unwrap_err()
                .0,
            403
        );
        let good_origin = GOOD.replace("Host: h:1", "Host: h:1\r\nOrigin: http://h:1");
        assert!(check_upgrade(good_origin.as_bytes(), &same).is_ok());
    }

    #[test]
    fn frame_lengths_use_the_three_encodings() {
        assert_eq!(frame_header(OP_BINARY, 5), [0x82, 5]);
        assert_eq!(frame_header(OP_BINARY, 300), [0x82, 126, 1, 44]);
        assert_eq!(
            frame_header(OP_BINARY, 70_000),
            [0x82, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]
        );
        assert_eq!(close_frame(1002), [0x88, 2, 0x03, 0xEA]);
    }

    fn masked(opcode_byte: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![opcode_byte];
        if payload.len() < 126 {
            f.push(0x80 | payload.len() as u8);
        } else {
            f.push(0x80 | 126);
            f.extend_from_slice(&[(payload.len() >> 8) as u8, payload.len() as u8]);
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    async fn run_inbound(wire: Vec<u8>) -> (Vec<u8>, Ended, Vec<Vec<u8>>) {
        let (tx, mut rx) = mpsc::channel(8);
        let mut out = Vec::new();
        let ended = read_frames(&mut wire.as_slice(), &mut out, &tx).await;
        drop(tx);
        let mut control = Vec::new();
        while let Some(c) = rx.recv().await {
            control.push(c);
        }
        (out, ended, control)
    }

    #[tokio::test]
    async fn fragments_pings_and_close_come_out_as_the_rfc_says() {
        let mut wire = masked(0x02, b"PUB a 5\r\nhel"); // binary, not final
        wire.extend(masked(0x89, b"hi")); // ping between fragments
        wire.extend(masked(0x80, b"lo\r\n")); // final continuation
        let big = vec![b'x'; 40_000];
        wire.extend(masked(0x82, &big[..300]));
        wire.extend(masked(0x88, &[0x03, 0xE8]));
        let (out, ended, control) = run_inbound(wire).await;
        let mut want = b"PUB a 5\r\nhello\r\n".to_vec();
        want.extend_from_slice(&big[..300]);
        assert_eq!(out, want);
        assert_eq!(ended, Ended::Closed(1000));
        assert_eq!(control, vec![vec![0x8A, 2, b'h', b'i']]);
    }

    #[tokio::test]
    async fn protocol_violations_end_the_connection() {
        let unmasked = vec![0x82, 1, b'x'];
        assert!(matches!(run_inbound(unmasked).await.1, Ended::Protocol(_)));
        assert!(matches!(
            run_inbound(masked(0xC2, b"x")).await.1,
            Ended::Protocol(_)
        ));
        assert!(matches!(
            run_inbound(masked(0x80, b"x")).await.1,
            Ended::Protocol(_)
        ));
        assert!(matches!(
            run_inbound(masked(0x83, b"x")).await.1,
            Ended::Protocol(_)
        ));
        let mut two = masked(0x02, b"a");
        two.extend(masked(0x82, b"b"));
        assert!(matches!(run_inbound(two).await.1, Ended::Protocol(_)));
        assert!(matches!(
            run_inbound(masked(0x09, b"p")).await.1,
            Ended::Protocol(_)
        ));
        assert_eq!(
            run_inbound(masked(0x82, b"abc")[..4].to_vec()).await.1,
            Ended::Gone
        );
    }
}
