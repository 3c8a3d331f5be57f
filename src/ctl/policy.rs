//! Policies (`policies/*.conf`): permission and limit templates in the nats-server config
//! language, so they carry `#` comments saying who they are for.
//!
//! A user policy uses the user-claim names (`pub`, `sub`, `resp`, `subs`, `data`, `payload`,
//! `bearer_token`, `src`); an account policy the account-limit names (`conn`, `subs`, `payload`,
//! `disk_storage`, `mem_storage`, `streams`, `consumer`, `max_ack_pending`, ...). Unknown keys are
//! errors, so a typo cannot silently widen or drop a limit.

use std::path::Path;

use anyhow::{anyhow, Context};
use serde::de::DeserializeOwned;

use crate::auth::jwt::claims::{AccountLimits, UserPermissionsLimits};
use crate::config::parse::{self, Value, ValueKind};

fn to_json(v: &Value) -> serde_json::Value {
    match &v.kind {
        ValueKind::String(s) | ValueKind::Datetime(s) => serde_json::Value::String(s.clone()),
        ValueKind::Integer(i) => serde_json::Value::from(*i),
        ValueKind::Float(f) => serde_json::Value::from(*f),
        ValueKind::Bool(b) => serde_json::Value::Bool(*b),
        ValueKind::Array(a) => serde_json::Value::Array(a.iter().map(to_json).collect()),
        ValueKind::Map(m) => serde_json::Value::Object(
            m.entries()
                .iter()
                .map(|e| (e.key.to_ascii_lowercase(), to_json(&e.value)))
                .collect(),
        ),
    }
}

fn load<T: DeserializeOwned>(path: &Path, known: &[&str]) -> anyhow::Result<T> {
    let value = parse::parse_file(path).map_err(|e| anyhow!("{e}"))?;
    let json = to_json(&value);
    if let Some(obj) = json.as_object() {
        for k in obj.keys() {
            if !known.contains(&k.as_str()) {
                return Err(anyhow!("{}: unknown policy key {k:?}", path.display()));
            }
        }
    }
    serde_json::from_value(json).with_context(|| format!("{}: wrong value type", path.display()))
}

/// Loads a user policy.
///
/// # Errors
/// Parse errors with file:line:col, unknown keys, wrong types.
pub fn load_user(path: &Path) -> anyhow::Result<UserPermissionsLimits> {
    load(
        path,
        &[
            "pub",
            "sub",
            "resp",
            "subs",
            "data",
            "payload",
            "bearer_token",
            "src",
            "allowed_connection_types",
        ],
    )
}

/// Loads an account limits policy.
///
/// # Errors
/// Parse errors with file:line:col, unknown keys, wrong types.
pub fn load_account(path: &Path) -> anyhow::Result<AccountLimits> {
    load(
        path,
        &[
            "subs",
            "data",
            "payload",
            "imports",
            "exports",
            "wildcards",
            "disallow_bearer",
            "conn",
            "leaf",
            "mem_storage",
            "disk_storage",
            "streams",
            "consumer",
            "max_ack_pending",
            "mem_max_stream_bytes",
            "disk_max_stream_bytes",
            "max_bytes_required",
        ],
    )
}
