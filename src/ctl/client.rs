//! A small NATS client for `sealctl` commands that make requests (account push, server ping):
//! raw protocol through our own codec, with `.creds`, user/password or token authentication.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::creds::parse_creds;
use crate::auth::nkeys::{KeyPair, Role};
use crate::proto::encode::encode_client_op;
use crate::proto::parser::{Limits, Parser};
use crate::proto::{ClientOp, ServerOp};

/// How to authenticate.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// A `.creds` file.
    pub creds: Option<std::path::PathBuf>,
    /// User name.
    pub user: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// Token.
    pub token: Option<String>,
}

/// A connected client.
pub struct Client {
    stream: TcpStream,
    buf: BytesMut,
    parser: Parser,
    next_sid: u64,
}

impl Client {
    /// Connects and authenticates; fails with the server's `-ERR` text.
    ///
    /// # Errors
    /// Connection, protocol or authentication failures.
    pub async fn connect(addr: &str, auth: &Auth) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect {addr}"))?;
        let mut c = Client {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            parser: Parser::new(Limits {
                max_control_line: 1 << 20,
                max_payload: 64 << 20,
            }),
            next_sid: 1,
        };
        let info = match c.next().await? {
            ServerOp::Info(j) => serde_json::from_slice::<serde_json::Value>(&j)?,
            other => bail!("expected INFO, got {other:?}"),
        };
        let mut connect = serde_json::json!({
            "verbose": false, "pedantic": false, "protocol": 1, "headers": true,
            "no_responders": true, "lang": "sealctl", "version": env!("CARGO_PKG_VERSION"),
        });
        if let Some(path) = &auth.creds {
            let text = zeroize::Zeroizing::new(
                std::fs::read_to_string(path)
                    .with_context(|| format!("read {}", path.display()))?,
            );
            let (jwt, seed) = parse_creds(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let kp = KeyPair::from_seed(&seed, &[Role::User])
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let nonce = info.get("nonce").and_then(|n| n.as_str()).unwrap_or("");
            connect["jwt"] = jwt.into();
            connect["sig"] = data_encoding::BASE64URL_NOPAD
                .encode(&kp.sign(nonce.as_bytes()))
                .into();
        }
        if let Some(u) = &auth.user {
            connect["user"] = u.clone().into();
        }
        if let Some(p) = &auth.password {
            connect["pass"] = p.clone().into();
        }
        if let Some(t) = &auth.token {
            connect["auth_token"] = t.clone().into();
        }
        let mut out = BytesMut::new();
        encode_client_op(
            &mut out,
            &ClientOp::Connect(Bytes::from(connect.to_string())),
        );
        out.extend_from_slice(b"PING\r\n");
        c.stream.write_all(&out).await?;
        loop {
            match c.next().await? {
                ServerOp::Pong => return Ok(c),
                ServerOp::Err(e) => bail!(
                    "server refused the connection: {}",
                    String::from_utf8_lossy(&e)
                ),
                _ => {}
            }
        }
    }

    async fn next(&mut self) -> anyhow::Result<ServerOp> {
        loop {
            if let Some(op) = self.parser.next_server_op(&mut self.buf)? {
                return Ok(op);
            }
            let n = self.stream.read_buf(&mut self.buf).await?;
            if n == 0 {
                bail!("server closed the connection");
            }
        }
    }

    /// Sends a request and waits for the first reply (or the 503 no-responders status).
    ///
    /// # Errors
    /// Timeout, no responders, a server `-ERR`.
    pub async fn request(
        &mut self,
        subject: &str,
        payload: &[u8],
        timeout: Duration,
    ) -> anyhow::Result<Bytes> {
        let inbox = format!("_INBOX.sealctl.{}", hex_id());
        let sid = self.next_sid.to_string();
        self.next_sid += 1;
        let mut out = BytesMut::new();
        encode_client_op(
            &mut out,
            &ClientOp::Sub {
                subject: Bytes::from(inbox.clone()),
                queue: None,
                sid: Bytes::from(sid),
            },
        );
        encode_client_op(
            &mut out,
            &ClientOp::Pub {
                subject: Bytes::from(subject.to_owned()),
                reply: Some(Bytes::from(inbox)),
                headers: None,
                payload: Bytes::copy_from_slice(payload),
            },
        );
        self.stream.write_all(&out).await?;
        let wait = async {
            loop {
                match self.next().await? {
                    ServerOp::Msg {
                        headers: Some(h), ..
                    } if h.starts_with(b"NATS/1.0 503") => {
                        bail!("no responders for {subject} (is this a system account user, and the server in operator mode?)")
                    }
                    ServerOp::Msg { payload, .. } => return Ok(payload),
                    ServerOp::Ping => self.stream.write_all(b"PONG\r\n").await?,
                    ServerOp::Err(e) => bail!("server error: {}", String::from_utf8_lossy(&e)),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| anyhow!("no reply within {timeout:?}"))?
    }
}

fn hex_id() -> String {
    let id = crate::crypto::random_id();
    id.iter().map(|b| format!("{b:02x}")).collect()
}
