//! One place for how the client commands connect and talk to the JetStream API.
//!
//! Every client command (stream, consumer, kv, pub/sub/req/reply, server info/ping/check) goes
//! through [`Session::open`], so `--server`, `--context`, `--creds`, `--user`/`--password` and
//! the TLS flags mean the same everywhere. Stream and consumer management uses the raw
//! `$JS.API` JSON (see `/work/shared/spec/jetstream-api.md`) rather than the client's typed
//! wrappers: `--json` then prints exactly what the server said, and errors carry the server's
//! own `err_code`, which operators search for.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use serde_json::Value;

pub use super::context::Target;
use super::context::{self, SavedContext};
use super::util::parse_duration;
use crate::ctl::args::ConnArgs;

/// A JetStream API error reply: `{"error":{"code":404,"err_code":10059,"description":...}}`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{description} ({err_code})")]
pub struct JsApiError {
    /// HTTP-like status.
    pub code: u64,
    /// The stable JetStream error code.
    pub err_code: u64,
    /// The server's text.
    pub description: String,
}

impl JsApiError {
    /// The error inside a reply, if it carries one.
    pub fn from_reply(v: &Value) -> Option<Self> {
        let e = v.get("error")?;
        Some(JsApiError {
            code: e.get("code").and_then(Value::as_u64).unwrap_or(0),
            err_code: e.get("err_code").and_then(Value::as_u64).unwrap_or(0),
            description: e
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_owned(),
        })
    }
}

/// Nobody listens on the subject of a request (the server's 503 status).
#[derive(Debug, Clone, thiserror::Error)]
#[error("no responders for {0}")]
pub struct NoResponders(pub String);

/// A connected client plus the output/timeout options of the command.
pub struct Session {
    /// The connection.
    pub client: async_nats::Client,
    /// `--timeout`.
    pub timeout: Duration,
    /// `--json`.
    pub json: bool,
}

/// The effective connection settings: the context (named or selected) overlaid with flags.
pub(crate) fn resolve(target: &Target, conn: &ConnArgs) -> anyhow::Result<SavedContext> {
    let base = match &conn.context {
        Some(name) => Some(context::load(name)?),
        None => context::selected()?,
    };
    let mut ctx = base.unwrap_or_default();
    if target.explicit || ctx.url.is_empty() {
        ctx.url = target.url.clone();
    }
    if conn.creds.is_some() {
        ctx.creds = conn.creds.clone();
    }
    if conn.user.is_some() {
        ctx.user = conn.user.clone();
    }
    if conn.password.is_some() {
        ctx.password = conn.password.clone();
    }
    if conn.tlsca.is_some() {
        ctx.tlsca = conn.tlsca.clone();
    }
    if conn.tlscert.is_some() {
        ctx.tlscert = conn.tlscert.clone();
    }
    if conn.tlskey.is_some() {
        ctx.tlskey = conn.tlskey.clone();
    }
    Ok(ctx)
}

impl Session {
    /// Connects with the resolved settings; fails (rather than retrying) when the server is
    /// unreachable or refuses the credentials.
    ///
    /// # Errors
    /// Bad flags, unreadable files, connection or authentication failures.
    pub async fn open(target: &Target, conn: &ConnArgs) -> anyhow::Result<Self> {
        let timeout = parse_duration(&conn.timeout).context("--timeout")?;
        let ctx = resolve(target, conn)?;
        let mut opts = async_nats::ConnectOptions::new()
            .name("sealctl")
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            .max_reconnects(Some(1));
        if let Some(path) = &ctx.creds {
            opts = opts
                .credentials_file(path)
                .await
                .with_context(|| format!("read {}", path.display()))?;
        }
        match (&ctx.user, &ctx.password) {
            (Some(u), p) => {
                opts = opts.user_and_password(u.clone(), p.clone().unwrap_or_default());
            }
            (None, Some(_)) => bail!("--password needs --user"),
            (None, None) => {}
        }
        if let Some(ca) = &ctx.tlsca {
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&ctx.tlscert, &ctx.tlskey) {
            opts = opts
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        let client = tokio::time::timeout(timeout, opts.connect(ctx.url.as_str()))
            .await
            .map_err(|_| {
                anyhow!(
                    "cannot connect to {}: no answer within {timeout:?}",
                    ctx.url
                )
            })?
            .with_context(|| format!("cannot connect to {}", ctx.url))?;
        Ok(Session {
            client,
            timeout,
            json: conn.json,
        })
    }

    /// A core request with the session timeout; no-responders becomes a readable error.
    ///
    /// # Errors
    /// Timeout, no responders, connection loss.
    pub async fn request(
        &self,
        subject: &str,
        headers: Option<async_nats::HeaderMap>,
        payload: bytes::Bytes,
    ) -> anyhow::Result<async_nats::Message> {
        let req = async_nats::Request::new()
            .payload(payload)
            .timeout(Some(self.timeout));
        let req = match headers {
            Some(h) => req.headers(h),
            None => req,
        };
        match self.client.send_request(subject.to_owned(), req).await {
            Ok(m) => Ok(m),
            Err(e) => match e.kind() {
                async_nats::RequestErrorKind::NoResponders => {
                    Err(NoResponders(subject.to_owned()).into())
                }
                async_nats::RequestErrorKind::TimedOut => {
                    bail!("no reply on {subject} within {:?}", self.timeout)
                }
                _ => Err(anyhow!("request {subject}: {e}")),
            },
        }
    }

    /// `$JS.API.<api>` with a JSON body; the reply, or its error as a [`JsApiError`].
    ///
    /// # Errors
    /// [`JsApiError`] for server-side errors; JetStream not enabled (no responders); timeouts.
    pub async fn api(&self, api: &str, body: &Value) -> anyhow::Result<Value> {
        let subject = format!("$JS.API.{api}");
        let payload = if body.is_null() {
            bytes::Bytes::new()
        } else {
            bytes::Bytes::from(serde_json::to_vec(body)?)
        };
        let msg = match self.request(&subject, None, payload).await {
            Ok(m) => m,
            Err(e) if e.downcast_ref::<NoResponders>().is_some() => {
                bail!("JetStream not enabled on this server (no responders for {subject})")
            }
            Err(e) => return Err(e),
        };
        let v: Value = serde_json::from_slice(&msg.payload)
            .with_context(|| format!("{subject}: reply is not JSON"))?;
        if let Some(err) = JsApiError::from_reply(&v) {
            return Err(err.into());
        }
        Ok(v)
    }

    /// Every item of a paged list API (`STREAM.LIST`, `CONSUMER.LIST`, `STREAM.NAMES`), read
    /// from the array under `key`.
    ///
    /// # Errors
    /// As [`Session::api`].
    pub async fn api_paged(
        &self,
        api: &str,
        key: &str,
        filter: &Value,
    ) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        loop {
            let mut body = if filter.is_object() {
                filter.clone()
            } else {
                serde_json::json!({})
            };
            body["offset"] = out.len().into();
            let v = self.api(api, &body).await?;
            let items = v
                .get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let total = v.get("total").and_then(Value::as_u64).unwrap_or(0);
            let got = items.len();
            out.extend(items);
            if got == 0 || out.len() as u64 >= total {
                return Ok(out);
            }
        }
    }

    /// Prints `v` as pretty JSON.
    ///
    /// # Errors
    /// Serialization (never in practice).
    pub fn print_json(&self, v: &Value) -> anyhow::Result<()> {
        use std::io::Write as _;
        let text = serde_json::to_string_pretty(v)?;
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = writeln!(std::io::stdout().lock(), "{text}");
        Ok(())
    }
}
