//! The JSON body of `CONNECT`.
//!
//! Every field is optional and JSON `null` is accepted for each (async-nats sends
//! `"jwt":null,...`); unknown fields are ignored, as the reference server ignores them. A field
//! that is absent keeps its default, and the reference's defaults are `verbose`, `pedantic` and
//! `echo` on: clients that care (all real ones) send them explicitly.

use serde::Deserialize;

/// What a client says about itself in `CONNECT`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ConnectInfo {
    /// Reply `+OK` to every successful op.
    pub verbose: Option<bool>,
    /// Validate publish subjects strictly.
    pub pedantic: Option<bool>,
    /// The client insists on TLS (informational).
    pub tls_required: Option<bool>,
    /// Token authentication.
    pub auth_token: Option<String>,
    /// Username.
    pub user: Option<String>,
    /// Password.
    pub pass: Option<String>,
    /// User nkey public key.
    pub nkey: Option<String>,
    /// User JWT.
    pub jwt: Option<String>,
    /// Signature over the INFO nonce.
    pub sig: Option<String>,
    /// Connection name.
    pub name: Option<String>,
    /// Client library language.
    pub lang: Option<String>,
    /// Client library version.
    pub version: Option<String>,
    /// 0 = original protocol, 1 = handles async INFO.
    pub protocol: Option<i64>,
    /// Deliver the connection's own publishes to its subscriptions (default true).
    pub echo: Option<bool>,
    /// The client understands HMSG.
    pub headers: Option<bool>,
    /// The client wants 503 replies for requests nobody listens to.
    pub no_responders: Option<bool>,
    /// Legacy account selection; setting it is an auth failure.
    pub account: Option<String>,
    /// Legacy account creation; setting it is an auth failure.
    pub new_account: Option<bool>,
}

impl ConnectInfo {
    /// Parses a CONNECT body.
    ///
    /// # Errors
    /// The JSON error when the body is not a JSON object of the expected shape.
    pub fn parse(body: &[u8]) -> Result<Self, serde_json::Error> {
        // Through a `Value` first so a repeated key takes the last value (as Go's decoder
        // does) instead of failing.
        let v: serde_json::Value = serde_json::from_slice(body)?;
        serde_json::from_value(v)
    }
}
