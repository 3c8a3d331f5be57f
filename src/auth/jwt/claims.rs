//! Claim structures of the four NATS JWT types we read (security spec §2.4–2.6).
//!
//! Deserialisation is lenient on unknown fields (forward compatibility) and on missing ones
//! (defaults follow the reference: a user token without `subs`/`data`/`payload` gets 0, which
//! means "none allowed"; -1 means unlimited). Fields that would change who may do what and that
//! we do not implement are kept as raw JSON so the trust layer can refuse them (fail closed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The registered claims every NATS JWT carries, around a type-specific `nats` object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Claims<T> {
    /// Token id (opaque on input).
    #[serde(default)]
    pub jti: String,
    /// Issued at, unix seconds.
    #[serde(default)]
    pub iat: i64,
    /// Issuer public nkey.
    #[serde(default)]
    pub iss: String,
    /// Subject public nkey.
    #[serde(default)]
    pub sub: String,
    /// Human name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Expiry, unix seconds (0 = never).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exp: i64,
    /// Not before, unix seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nbf: i64,
    /// Audience.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
    /// The type-specific claims.
    pub nats: T,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn unlimited() -> i64 {
    -1
}

/// `nats` of an operator JWT.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OperatorClaims {
    /// Keys allowed to sign accounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signing_keys: Vec<String>,
    /// The system account's public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_account: Option<String>,
    /// Where `nsc push` sends account JWTs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_server_url: Option<String>,
    /// Service URLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_service_urls: Vec<String>,
    /// Only signing keys (not the identity key) may sign accounts.
    #[serde(default)]
    pub strict_signing_key_usage: bool,
    /// Minimum server version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert_server_version: Option<String>,
    /// Free-form tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// `operator`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Claim format version (2).
    pub version: u32,
}

/// Publish or subscribe allow/deny lists.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SubjectPermission {
    /// Allowed subjects (empty = all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Denied subjects (wins over allow).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl SubjectPermission {
    /// True when neither list has entries.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// Response permission: publish to reply subjects of received requests.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResponsePermission {
    /// Replies allowed per request.
    #[serde(default)]
    pub max: i64,
    /// Window in nanoseconds.
    #[serde(default)]
    pub ttl: i64,
}

/// A user's permissions and limits (also the template of a scoped signing key).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UserPermissionsLimits {
    /// Publish permission.
    #[serde(
        default,
        rename = "pub",
        skip_serializing_if = "SubjectPermission::is_empty"
    )]
    pub publish: SubjectPermission,
    /// Subscribe permission.
    #[serde(
        default,
        rename = "sub",
        skip_serializing_if = "SubjectPermission::is_empty"
    )]
    pub subscribe: SubjectPermission,
    /// Response permission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<ResponsePermission>,
    /// Allowed source CIDRs (array or comma-separated string in older tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<serde_json::Value>,
    /// Connect time windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<serde_json::Value>,
    /// Time zone of `times`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times_location: Option<String>,
    /// Max subscriptions (-1 unlimited, 0 none).
    #[serde(default)]
    pub subs: i64,
    /// Max data bytes (-1 unlimited).
    #[serde(default)]
    pub data: i64,
    /// Max payload (-1 unlimited).
    #[serde(default)]
    pub payload: i64,
    /// No nonce signature needed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bearer_token: bool,
    /// Allowed connection types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_connection_types: Vec<String>,
}

/// `nats` of a user JWT.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UserClaims {
    /// Permissions and limits.
    #[serde(flatten)]
    pub perms: UserPermissionsLimits,
    /// The account identity key when signed by an account signing key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_account: Option<String>,
    /// Free-form tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A proxy must connect for this user (unsupported: such users are refused).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy_required: bool,
    /// `user`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Claim format version (2).
    pub version: u32,
}

/// Account limits (NATS, account and JetStream).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccountLimits {
    /// Max subscriptions.
    #[serde(default = "unlimited")]
    pub subs: i64,
    /// Max data.
    #[serde(default = "unlimited")]
    pub data: i64,
    /// Max payload.
    #[serde(default = "unlimited")]
    pub payload: i64,
    /// Max imports.
    #[serde(default = "unlimited")]
    pub imports: i64,
    /// Max exports.
    #[serde(default = "unlimited")]
    pub exports: i64,
    /// Wildcard exports allowed.
    #[serde(default = "yes")]
    pub wildcards: bool,
    /// Refuse bearer user tokens.
    #[serde(default)]
    pub disallow_bearer: bool,
    /// Max connections.
    #[serde(default = "unlimited")]
    pub conn: i64,
    /// Max leaf node connections.
    #[serde(default = "unlimited")]
    pub leaf: i64,
    /// JetStream memory storage (0 = JetStream off unless disk_storage is set).
    #[serde(default)]
    pub mem_storage: i64,
    /// JetStream disk storage.
    #[serde(default)]
    pub disk_storage: i64,
    /// Max streams.
    #[serde(default = "unlimited")]
    pub streams: i64,
    /// Max consumers.
    #[serde(default = "unlimited")]
    pub consumer: i64,
    /// Max ack pending per consumer.
    #[serde(default = "unlimited")]
    pub max_ack_pending: i64,
    /// Max bytes of one memory stream.
    #[serde(default)]
    pub mem_max_stream_bytes: i64,
    /// Max bytes of one disk stream.
    #[serde(default)]
    pub disk_max_stream_bytes: i64,
    /// Streams must declare max_bytes.
    #[serde(default)]
    pub max_bytes_required: bool,
}

fn yes() -> bool {
    true
}

impl Default for AccountLimits {
    fn default() -> Self {
        AccountLimits {
            subs: -1,
            data: -1,
            payload: -1,
            imports: -1,
            exports: -1,
            wildcards: true,
            disallow_bearer: false,
            conn: -1,
            leaf: -1,
            mem_storage: 0,
            disk_storage: 0,
            streams: -1,
            consumer: -1,
            max_ack_pending: -1,
            mem_max_stream_bytes: 0,
            disk_max_stream_bytes: 0,
            max_bytes_required: false,
        }
    }
}

/// A signing key of an account: a bare key, or a scoped key with a user template.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SigningKey {
    /// An unscoped signing key.
    Key(String),
    /// A scoped signing key: users it signs get `template` instead of their own permissions.
    Scoped(Box<ScopedSigningKey>),
}

impl SigningKey {
    /// The public key.
    pub fn key(&self) -> &str {
        match self {
            SigningKey::Key(k) => k,
            SigningKey::Scoped(s) => &s.key,
        }
    }
}

/// A scoped signing key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScopedSigningKey {
    /// `user_scope`.
    pub kind: String,
    /// The public key.
    pub key: String,
    /// Role name.
    #[serde(default)]
    pub role: String,
    /// Permissions and limits given to users it signs.
    #[serde(default)]
    pub template: UserPermissionsLimits,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An export of an account.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Export {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Exported subject.
    pub subject: String,
    /// `stream` or `service`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Importers need an activation token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_req: bool,
    /// `Singleton`, `Stream` or `Chunked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_type: Option<String>,
    /// Token position carrying the importer's account key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_token_position: Option<u32>,
    /// Advertised.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub advertise: bool,
}

/// An import of an account.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Import {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Subject in the exporter.
    pub subject: String,
    /// Exporter account key.
    pub account: String,
    /// Activation token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Local subject (`to` is the older spelling).
    #[serde(default, alias = "to", skip_serializing_if = "Option::is_none")]
    pub local_subject: Option<String>,
    /// `stream` or `service`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Share request info.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share: bool,
}

/// `nats` of an account JWT.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AccountClaims {
    /// Limits.
    #[serde(default)]
    pub limits: AccountLimits,
    /// Signing keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signing_keys: Vec<SigningKey>,
    /// Revoked users (or `*`) → unix seconds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub revocations: BTreeMap<String, i64>,
    /// Exports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<Export>,
    /// Imports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<Import>,
    /// Permissions for users without their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_permissions: Option<UserPermissionsLimits>,
    /// Subject mappings (unsupported: refused when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mappings: Option<serde_json::Value>,
    /// Auth callout (unsupported: refused when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<serde_json::Value>,
    /// Free-form tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `account`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Claim format version (2).
    pub version: u32,
}
