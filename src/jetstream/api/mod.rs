//! The `$JS.API` surface: which subject means which call, and the reply envelope.
//!
//! Every call is a core request; the reply is one JSON object whose `type` names the call
//! (`io.nats.jetstream.api.v1.<kind>_response`) and which carries an `error` object instead
//! of a result when the call fails. Error codes come from [`errors`] only.

pub mod errors;
pub mod types;

use bytes::Bytes;
use serde_json::{json, Value};

pub use errors::ApiError;

/// One API call, decoded from its subject (serde: replicated streams carry it in their log).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ApiCall {
    /// `$JS.API.INFO`.
    AccountInfo,
    /// `STREAM.CREATE.<S>`.
    StreamCreate(String),
    /// `STREAM.UPDATE.<S>`.
    StreamUpdate(String),
    /// `STREAM.INFO.<S>`.
    StreamInfo(String),
    /// `STREAM.DELETE.<S>`.
    StreamDelete(String),
    /// `STREAM.PURGE.<S>`.
    StreamPurge(String),
    /// `STREAM.NAMES`.
    StreamNames,
    /// `STREAM.LIST`.
    StreamList,
    /// `STREAM.MSG.GET.<S>`.
    MsgGet(String),
    /// `STREAM.MSG.DELETE.<S>`.
    MsgDelete(String),
    /// `DIRECT.GET.<S>[.<subject>]`.
    DirectGet(String, Option<String>),
    /// `CONSUMER.CREATE.<S>[.<C>[.<filter>]]` and `CONSUMER.DURABLE.CREATE.<S>.<C>`.
    ConsumerCreate {
        /// Stream.
        stream: String,
        /// Consumer name token, if the subject has one.
        consumer: Option<String>,
        /// Filter tokens after the name, if any.
        filter: Option<String>,
        /// The legacy `DURABLE.CREATE` form.
        legacy_durable: bool,
    },
    /// `CONSUMER.INFO.<S>.<C>`.
    ConsumerInfo(String, String),
    /// `CONSUMER.DELETE.<S>.<C>`.
    ConsumerDelete(String, String),
    /// `CONSUMER.PAUSE.<S>.<C>`.
    ConsumerPause(String, String),
    /// `CONSUMER.UNPIN.<S>.<C>` (`{"group": G}`).
    ConsumerUnpin(String, String),
    /// `CONSUMER.RESET.<stream>.<consumer>` (ADR-60).
    ConsumerReset(String, String),
    /// `CONSUMER.NAMES.<S>`.
    ConsumerNames(String),
    /// `CONSUMER.LIST.<S>`.
    ConsumerList(String),
    /// `CONSUMER.MSG.NEXT.<S>.<C>`.
    MsgNext(String, String),
    /// `STREAM.LEADER.STEPDOWN.<S>`.
    StreamLeaderStepdown(String),
    /// `STREAM.PEER.REMOVE.<S>`.
    StreamPeerRemove(String),
    /// `CONSUMER.LEADER.STEPDOWN.<S>.<C>`.
    ConsumerLeaderStepdown(String, String),
    /// `ACCOUNT.AUDIT`: sealstream's own call (not nats-server's) — a live audit of the
    /// calling account's streams on the server that answers (`server/jetstream/audit.rs`).
    AccountAudit,
}

impl ApiCall {
    /// Decodes an API subject. `None`: not an endpoint we serve (no reply is sent).
    pub fn parse(subject: &str) -> Option<ApiCall> {
        let rest = subject.strip_prefix("$JS.API.")?;
        let t: Vec<&str> = rest.split('.').collect();
        let s = |x: &&str| (*x).to_owned();
        Some(match t.as_slice() {
            ["INFO"] => ApiCall::AccountInfo,
            ["STREAM", "CREATE", n] => ApiCall::StreamCreate(s(n)),
            ["STREAM", "UPDATE", n] => ApiCall::StreamUpdate(s(n)),
            ["STREAM", "INFO", n] => ApiCall::StreamInfo(s(n)),
            ["STREAM", "DELETE", n] => ApiCall::StreamDelete(s(n)),
            ["STREAM", "PURGE", n] => ApiCall::StreamPurge(s(n)),
            ["STREAM", "NAMES"] => ApiCall::StreamNames,
            ["STREAM", "LIST"] => ApiCall::StreamList,
            ["STREAM", "MSG", "GET", n] => ApiCall::MsgGet(s(n)),
            ["STREAM", "MSG", "DELETE", n] => ApiCall::MsgDelete(s(n)),
            ["DIRECT", "GET", n] => ApiCall::DirectGet(s(n), None),
            ["DIRECT", "GET", n, subj @ ..] if !subj.is_empty() => {
                ApiCall::DirectGet(s(n), Some(subj.join(".")))
            }
            ["CONSUMER", "CREATE", n] => ApiCall::ConsumerCreate {
                stream: s(n),
                consumer: None,
                filter: None,
                legacy_durable: false,
            },
            ["CONSUMER", "CREATE", n, c] => ApiCall::ConsumerCreate {
                stream: s(n),
                consumer: Some(s(c)),
                filter: None,
                legacy_durable: false,
            },
            ["CONSUMER", "CREATE", n, c, f @ ..] => ApiCall::ConsumerCreate {
                stream: s(n),
                consumer: Some(s(c)),
                filter: Some(f.join(".")),
                legacy_durable: false,
            },
            ["CONSUMER", "DURABLE", "CREATE", n, c] => ApiCall::ConsumerCreate {
                stream: s(n),
                consumer: Some(s(c)),
                filter: None,
                legacy_durable: true,
            },
            ["CONSUMER", "INFO", n, c] => ApiCall::ConsumerInfo(s(n), s(c)),
            ["CONSUMER", "DELETE", n, c] => ApiCall::ConsumerDelete(s(n), s(c)),
            ["CONSUMER", "PAUSE", n, c] => ApiCall::ConsumerPause(s(n), s(c)),
            ["CONSUMER", "UNPIN", n, c] => ApiCall::ConsumerUnpin(s(n), s(c)),
            ["CONSUMER", "RESET", n, c] => ApiCall::ConsumerReset(s(n), s(c)),
            ["CONSUMER", "NAMES", n] => ApiCall::ConsumerNames(s(n)),
            ["CONSUMER", "LIST", n] => ApiCall::ConsumerList(s(n)),
            ["CONSUMER", "MSG", "NEXT", n, c] => ApiCall::MsgNext(s(n), s(c)),
            ["STREAM", "LEADER", "STEPDOWN", n] => ApiCall::StreamLeaderStepdown(s(n)),
            ["STREAM", "PEER", "REMOVE", n] => ApiCall::StreamPeerRemove(s(n)),
            ["CONSUMER", "LEADER", "STEPDOWN", n, c] => ApiCall::ConsumerLeaderStepdown(s(n), s(c)),
            ["ACCOUNT", "AUDIT"] => ApiCall::AccountAudit,
            _ => return None,
        })
    }

    /// The stream a call is about, when the stream's own thread answers it (everything but
    /// account-wide calls and stream lifecycle).
    pub fn stream_scoped(&self) -> Option<&str> {
        match self {
            ApiCall::StreamInfo(s)
            | ApiCall::StreamPurge(s)
            | ApiCall::MsgGet(s)
            | ApiCall::MsgDelete(s)
            | ApiCall::DirectGet(s, _)
            | ApiCall::ConsumerCreate { stream: s, .. }
            | ApiCall::ConsumerInfo(s, _)
            | ApiCall::ConsumerDelete(s, _)
            | ApiCall::ConsumerPause(s, _)
            | ApiCall::ConsumerUnpin(s, _)
            | ApiCall::ConsumerReset(s, _)
            | ApiCall::ConsumerNames(s)
            | ApiCall::ConsumerList(s)
            | ApiCall::MsgNext(s, _)
            | ApiCall::StreamLeaderStepdown(s)
            | ApiCall::ConsumerLeaderStepdown(s, _) => Some(s),
            _ => None,
        }
    }

    /// The reply `type` suffix.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiCall::AccountInfo => "account_info",
            ApiCall::StreamCreate(_) => "stream_create",
            ApiCall::StreamUpdate(_) => "stream_update",
            ApiCall::StreamInfo(_) => "stream_info",
            ApiCall::StreamDelete(_) => "stream_delete",
            ApiCall::StreamPurge(_) => "stream_purge",
            ApiCall::StreamNames => "stream_names",
            ApiCall::StreamList => "stream_list",
            ApiCall::MsgGet(_) | ApiCall::DirectGet(..) => "stream_msg_get",
            ApiCall::MsgDelete(_) => "stream_msg_delete",
            ApiCall::ConsumerCreate { .. } => "consumer_create",
            ApiCall::ConsumerInfo(..) => "consumer_info",
            ApiCall::ConsumerDelete(..) => "consumer_delete",
            ApiCall::ConsumerPause(..) => "consumer_pause",
            ApiCall::ConsumerUnpin(..) => "consumer_unpin",
            ApiCall::ConsumerReset(..) => "consumer_reset",
            ApiCall::ConsumerNames(_) => "consumer_names",
            ApiCall::ConsumerList(_) => "consumer_list",
            ApiCall::MsgNext(..) => "consumer_msg_next",
            ApiCall::StreamLeaderStepdown(_) => "stream_leader_stepdown",
            ApiCall::StreamPeerRemove(_) => "stream_remove_peer",
            ApiCall::ConsumerLeaderStepdown(..) => "consumer_leader_stepdown",
            ApiCall::AccountAudit => "account_audit",
        }
    }

    /// Whether the error envelope carries the paging keys (`total`, `offset`, `limit`).
    fn paged_errors(&self) -> bool {
        matches!(
            self,
            ApiCall::StreamInfo(_)
                | ApiCall::StreamNames
                | ApiCall::StreamList
                | ApiCall::ConsumerNames(_)
                | ApiCall::ConsumerList(_)
        )
    }
}

/// A success reply: `body` (an object) with `type` added first.
pub fn ok_reply(call: &ApiCall, body: Value) -> Bytes {
    let mut out = String::with_capacity(256);
    out.push_str("{\"type\":\"io.nats.jetstream.api.v1.");
    out.push_str(call.kind());
    out.push_str("_response\"");
    if let Value::Object(map) = body {
        for (k, v) in map {
            out.push(',');
            out.push_str(&Value::String(k).to_string());
            out.push(':');
            out.push_str(&v.to_string());
        }
    }
    out.push('}');
    Bytes::from(out)
}

/// A typed reply body as the JSON object [`ok_reply`] frames.
pub fn body<T: serde::Serialize>(body: &T) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// A typed request body; a missing or empty one is the default request. A body that does
/// not fit the type is read as the default too: nats-server ignores fields it cannot use.
///
/// # Errors
/// [`ApiError::invalid_json`] for a body that is not JSON.
pub fn request<T: serde::de::DeserializeOwned + Default>(payload: &[u8]) -> Result<T, ApiError> {
    Ok(optional_body(payload)?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

/// An error reply for `call`.
pub fn err_reply(call: &ApiCall, e: &ApiError) -> Bytes {
    let mut body = json!({ "error": e.to_json() });
    if call.paged_errors() {
        body["total"] = json!(0);
        body["offset"] = json!(0);
        body["limit"] = json!(0);
    }
    if matches!(call, ApiCall::ConsumerReset(..)) {
        body["reset_seq"] = json!(0);
    }
    ok_reply(call, body)
}

/// Parses an optional JSON request body: empty, `null`, `{}` and `[]` all mean "none".
///
/// # Errors
/// [`ApiError::invalid_json`] for a body that is not JSON.
pub fn optional_body(payload: &[u8]) -> Result<Option<Value>, ApiError> {
    let text = std::str::from_utf8(payload).unwrap_or("").trim();
    if text.is_empty() {
        return Ok(None);
    }
    let v: Value =
        serde_json::from_str(text).map_err(|e| ApiError::invalid_json(&e.to_string()))?;
    match v {
        Value::Null => Ok(None),
        Value::Array(a) if a.is_empty() => Ok(None),
        Value::Object(ref m) if m.is_empty() => Ok(None),
        Value::Object(_) => Ok(Some(v)),
        _ => Ok(None),
    }
}

/// Turns stream info into the shape create/update/list replies carry: no `cluster`
/// (nats-server sends it, and the paging keys, only for `STREAM.INFO`); `did_create` when
/// asked.
pub fn info_for_reply(info: &mut types::StreamInfo, did_create: bool) {
    info.cluster = None;
    info.did_create = did_create;
}

/// Paging request fields: `offset` and an optional subject filter.
pub fn paging(body: Option<&Value>) -> (usize, Option<String>) {
    let offset = body
        .and_then(|b| b.get("offset"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let subject = body
        .and_then(|b| b.get("subject"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    (usize::try_from(offset).unwrap_or(usize::MAX), subject)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn subjects_decode() {
        assert_eq!(ApiCall::parse("$JS.API.INFO"), Some(ApiCall::AccountInfo));
        assert_eq!(
            ApiCall::parse("$JS.API.DIRECT.GET.KV_b.$KV.b.k1"),
            Some(ApiCall::DirectGet("KV_b".into(), Some("$KV.b.k1".into())))
        );
        assert_eq!(
            ApiCall::parse("$JS.API.CONSUMER.CREATE.PY.pyd.py.>"),
            Some(ApiCall::ConsumerCreate {
                stream: "PY".into(),
                consumer: Some("pyd".into()),
                filter: Some("py.>".into()),
                legacy_durable: false
            })
        );
        assert_eq!(ApiCall::parse("$JS.API.STREAM.INFO.a.b"), None);
        assert_eq!(ApiCall::parse("$JS.API.NOPE"), None);
    }

    #[test]
    fn envelope_starts_with_type() {
        let b = ok_reply(&ApiCall::StreamDelete("X".into()), json!({"success": true}));
        assert_eq!(
            &b[..],
            br#"{"type":"io.nats.jetstream.api.v1.stream_delete_response","success":true}"#
        );
        let e = err_reply(
            &ApiCall::StreamInfo("X".into()),
            &ApiError::stream_not_found(),
        );
        let v: Value = serde_json::from_slice(&e).unwrap();
        assert_eq!(v["error"]["err_code"], 10059);
        assert_eq!(v["total"], 0);
    }

    #[test]
    fn optional_bodies() {
        assert!(optional_body(b"").unwrap().is_none());
        assert!(optional_body(b"null").unwrap().is_none());
        assert!(optional_body(b"[]").unwrap().is_none());
        assert!(optional_body(b"{}").unwrap().is_none());
        assert!(optional_body(b"{\"x\":1}").unwrap().is_some());
        assert!(optional_body(b"{x").is_err());
    }
}
