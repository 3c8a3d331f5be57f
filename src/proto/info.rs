//! The JSON body of `INFO`.
//!
//! Field names and omission rules follow the reference server: booleans marked
//! *omit-if-false* in the spec are skipped when false, so a client sees exactly the keys it
//! would see from nats-server.

use serde::Serialize;

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the server tells each client on connect (and again after the first PONG).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerInfo {
    /// Unique server id, an nkey-style public key starting with `N`.
    pub server_id: String,
    /// Configured name, or the id.
    pub server_name: String,
    /// NATS-compatible semver `2.Y.Z`; clients pick features by it.
    pub version: String,
    /// Protocol level, always 1.
    pub proto: i32,
    /// Build commit, informational.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// The runtime the server was built with (nats-server: its Go version). Always sent: the
    /// newer Python clients read it unconditionally.
    pub go: String,
    /// Listen host as configured.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// Header support.
    pub headers: bool,
    /// Largest accepted payload.
    pub max_payload: i64,
    /// JetStream enabled.
    #[serde(skip_serializing_if = "is_false")]
    pub jetstream: bool,
    /// Per-connection id.
    pub client_id: u64,
    /// Peer address as the server sees it.
    pub client_ip: String,
    /// Cluster name, when clustered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Client URLs of this server and the other cluster members (`host:port`) for failover.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    /// Credentials required in CONNECT.
    #[serde(skip_serializing_if = "is_false")]
    pub auth_required: bool,
    /// TLS required.
    #[serde(skip_serializing_if = "is_false")]
    pub tls_required: bool,
    /// Client certificates verified.
    #[serde(skip_serializing_if = "is_false")]
    pub tls_verify: bool,
    /// TLS offered but optional.
    #[serde(skip_serializing_if = "is_false")]
    pub tls_available: bool,
    /// Nonce to sign for nkey/JWT auth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// Lame-duck mode.
    #[serde(skip_serializing_if = "is_false")]
    pub ldm: bool,
    /// JetStream domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// JetStream API level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_lvl: Option<i32>,
    /// Set only in the INFO that follows the first PONG.
    #[serde(skip_serializing_if = "is_false")]
    pub connect_info: bool,
    /// Account the client was bound to (post-PONG INFO only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_account: Option<String>,
    /// The client belongs to the system account (post-PONG INFO only).
    #[serde(skip_serializing_if = "is_false")]
    pub acc_is_sys: bool,
}

impl ServerInfo {
    /// The compact JSON body.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}
